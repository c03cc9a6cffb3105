"""rsm.bridge.permits: at most N streams at work; a waiting stream lends its permit."""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka_segments import make_segment, read_all

from rsm import RemoteStorageManager, TopicIdPartition
from rsm.bridge.permits import WorkPermits, default_permits


def test_at_most_limit_threads_work_at_once() -> None:
    permits = WorkPermits(2)
    lock = threading.Lock()
    active = [0, 0]  # now, most seen

    def work() -> None:
        with permits.working():
            with lock:
                active[0] += 1
                active[1] = max(active[1], active[0])
            time.sleep(0.02)
            with lock:
                active[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert active[1] == 2


def test_a_waiting_thread_lends_its_permit_and_takes_one_back() -> None:
    permits = WorkPermits(1)
    inside_wait = threading.Event()
    other_worked = threading.Event()
    resume = threading.Event()

    def waiter() -> None:
        with permits.working():
            with permits.waiting():
                inside_wait.set()
                resume.wait(5)
            # holds a permit again: the other thread cannot be working now
            assert permits.holds() and permits.available() == 0

    def other() -> None:
        inside_wait.wait(5)
        with permits.working():  # would block forever if the waiter kept its permit
            other_worked.set()

    t1, t2 = threading.Thread(target=waiter), threading.Thread(target=other)
    t1.start()
    t2.start()
    assert other_worked.wait(5)
    resume.set()
    t1.join(5)
    t2.join(5)
    assert not t1.is_alive() and not t2.is_alive()


def test_nested_working_and_waiting_without_a_permit_do_not_deadlock() -> None:
    permits = WorkPermits(1)
    with permits.working(), permits.working():  # the same thread: no second permit taken
        pass
    with permits.waiting():  # holds none: nothing lent, nothing taken back
        pass
    assert permits.available() == 1 and not permits.holds()  # the one permit is free


def test_nested_waits_give_the_permit_back_once_and_take_it_again_once() -> None:
    permits = WorkPermits(1)
    with permits.working():
        with permits.waiting():
            assert permits.available() == 1 and not permits.holds()
            with permits.waiting():  # holds none now: lends nothing
                assert permits.available() == 1
            with permits.working():  # working again inside the wait: takes the free permit, gives it back
                assert permits.available() == 0
            assert permits.available() == 1
        assert permits.holds() and permits.available() == 0
    assert permits.available() == 1 and not permits.holds()


def test_zero_means_no_limit_and_negative_is_refused() -> None:
    permits = WorkPermits(0)
    with permits.working(), permits.waiting():
        assert permits.available() is None
    with pytest.raises(ValueError, match="0 \\(no limit\\) or more"):
        WorkPermits(-1)
    assert default_permits() >= 2


@pytest.mark.parametrize("backend", ["file", "s3"])
def test_the_store_lends_the_permit_only_while_it_waits_on_the_network(
    tmp_path: Path, s3_server: Any, backend: str
) -> None:
    """S3 reads run inside the remote-wait hook (the bridge lends its permit there); local reads do not."""
    if backend == "s3":
        configs = s3_server.rsm_configs(bucket=s3_server.make_bucket())
    else:
        configs = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "b"}
    configs.update({"chunk.size": str(1 << 20), "compression.enabled": "false", "cache.chunk.bytes": "0"})
    tip = TopicIdPartition(uuid.uuid4(), "waits", 0)
    seg = make_segment(tmp_path / "seg", tip, batches=100, records_per_batch=10, value_size=1000)
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    try:
        custom = rsm.copy_log_segment_data(seg.metadata, seg.data)
        md = dataclasses.replace(seg.metadata, custom_metadata=custom)
        waits = []

        class Hook:
            def __enter__(self) -> None:
                waits.append(threading.current_thread().name)

            def __exit__(self, *exc: object) -> None:
                return None

        rsm.store.remote_wait = Hook
        assert read_all(rsm.fetch_log_segment(md, 0)) == seg.data.log_segment.read_bytes()
        if backend == "s3":
            assert len(waits) >= 2  # the manifest and at least one chunk
        else:
            assert waits == []
    finally:
        rsm.close()


def test_a_reader_waiting_on_a_prefetched_chunk_from_s3_lends_its_permit(
    tmp_path: Path, s3_server: Any
) -> None:
    """The reader thread enters the remote-wait hook while a background download it needs is under way."""
    configs = s3_server.rsm_configs(bucket=s3_server.make_bucket())
    configs.update(
        {"chunk.size": str(1 << 20), "compression.enabled": "false", "cache.chunk.bytes": "0",
         "fetch.prefetch.chunks": "1"}
    )  # fmt: skip
    tip = TopicIdPartition(uuid.uuid4(), "prefetch-waits", 0)
    seg = make_segment(tmp_path / "seg", tip, batches=1000, records_per_batch=10, value_size=1000)
    raw = seg.data.log_segment.read_bytes()
    assert len(raw) > 4 << 20
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    try:
        custom = rsm.copy_log_segment_data(seg.metadata, seg.data)
        md = dataclasses.replace(seg.metadata, custom_metadata=custom)
        downloading, release = threading.Event(), threading.Event()
        cat_file = rsm.store.fs.cat_file

        def held_in_background(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread().name.startswith("rsm-fetch"):  # a prefetch: held until released
                downloading.set()
                assert release.wait(10)
            return cat_file(*args, **kwargs)

        rsm.store.fs.cat_file = held_in_background
        lent_for_prefetch = []
        reader_thread = threading.current_thread().name

        class Hook:
            def __enter__(self) -> None:
                if threading.current_thread().name == reader_thread and downloading.is_set():
                    lent_for_prefetch.append(release.is_set())  # False: entered before the download ended
                    release.set()

            def __exit__(self, *exc: object) -> None:
                return None

        rsm.store.remote_wait = Hook
        assert read_all(rsm.fetch_log_segment(md, 0)) == raw
        assert lent_for_prefetch and lent_for_prefetch[0] is False
    finally:
        rsm.close()
