"""Hostile GCS and Azure: the fault proxy (errors, resets, stalls, truncated bodies) between the RSM and
fake-gcs-server or Azurite, as tests/store/test_s3_faults.py has it in front of moto's S3.

With small deadlines (`storage.<cloud>.*`, S3's values there), every copy and fetch either succeeds with
exactly the right bytes or raises a one-line RemoteStorageException within a bound of the deadlines; once
the proxy passes everything through, each segment whose copy returned reads back byte for byte and no
segment whose copy raised has a manifest. A weather and a storm per cloud (S3 has seven seeds).
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.fault_proxy import FaultProxy, FaultSchedule
from kafka_segments import read_all, write_keyring
from test_s3_faults import (
    OPERATION_BOUND,
    STALL_SECONDS,
    Outcomes,
    _segments,
    copy_through_faults,
    fetch_ranges_through_faults,
)

from rsm import RemoteStorageManager
from rsm.config.settings import RsmConfig
from rsm.store.layout import Location, SegmentKeys
from rsm.store.objects import ObjectStore

FIXTURES = {"gcs": "gcs_server", "azure": "azurite_server"}
SCHEDULES = [(11, 0.25), (16, 0.6)]


def _deadlines(name: str) -> dict[str, str]:
    return {
        f"storage.{name}.connect.timeout.ms": "1000",
        f"storage.{name}.read.timeout.ms": "1000",
        f"storage.{name}.retry.max.attempts": "3",
        f"storage.{name}.request.timeout.ms": "4000",
    }


def _through(name: str, cloud: Any, proxy: FaultProxy, bucket: str) -> dict[str, str]:
    """The cloud's configs with its endpoint replaced by the proxy's."""
    configs = cloud.rsm_configs(bucket=bucket, **_deadlines(name))
    key = f"storage.{name}.endpoint.url"
    configs[key] = configs[key].replace(cloud.endpoint_url, proxy.endpoint_url)
    return configs


@pytest.fixture
def proxies() -> Iterator[list[FaultProxy]]:
    made: list[FaultProxy] = []
    try:
        yield made
    finally:
        for proxy in made:
            proxy.stop()


@pytest.mark.parametrize("name", sorted(FIXTURES))
@pytest.mark.parametrize(("seed", "rate"), SCHEDULES, ids=[f"seed{s}-{r:.0%}" for s, r in SCHEDULES])
def test_copies_and_fetches_through_faults_succeed_or_fail_cleanly(
    name: str, seed: int, rate: float, request: pytest.FixtureRequest, proxies: list[FaultProxy],
    tmp_path: Path,
) -> None:  # fmt: skip
    cloud = request.getfixturevalue(FIXTURES[name])
    bucket = cloud.make_bucket()
    schedule = FaultSchedule(seed, rate=rate, max_faults=40, max_stalls=3, stall_seconds=STALL_SECONDS)
    proxy = FaultProxy(cloud.endpoint_url, schedule).start()
    proxies.append(proxy)
    keyring = write_keyring(tmp_path / "keyring.json", ("k1",))
    configs = {**_through(name, cloud, proxy, bucket), "encryption.keyring.path": str(keyring)}
    outcomes = Outcomes()
    rng = random.Random(seed * 7919)

    rsm = RemoteStorageManager()
    rsm.configure(configs)
    try:
        segments = _segments(tmp_path, seed, rsm)
        copy_through_faults(rsm, segments, outcomes)
        for seg in (s for s in segments if s.copied is not None):
            fetch_ranges_through_faults(rsm, seg, rng, outcomes)
    finally:
        rsm.close()

    proxy.pass_through()
    faults_seen = proxy.stats.as_dict()
    direct = ObjectStore.from_config(RsmConfig(cloud.rsm_configs(bucket=bucket)))
    reader = RemoteStorageManager()
    reader.configure(configs)
    try:
        for seg in segments:
            keys = SegmentKeys.of(Location(bucket, ""), seg.metadata)
            present = set(direct.list(bucket, keys.stem))
            if seg.copied is None:
                assert keys.manifest not in present, f"a copy that raised left its manifest (seed {seed})"
                continue
            assert present == {keys.log, keys.indexes, keys.manifest}, present
            md, lc = seg.copied, seg.log_config
            assert read_all(reader.fetch_log_segment(md, 0, None, lc)) == seg.original
            for index_type, expected in seg.indexes.items():
                assert read_all(reader.fetch_index(md, index_type, lc)) == expected, index_type.name
    finally:
        reader.close()
    print(
        f"\n{name} seed {seed}, {rate:.0%}: copies {dict(outcomes.copies)}, fetches {dict(outcomes.fetches)}; "
        f"proxy {faults_seen}; slowest operation {outcomes.slowest:.1f} s (bound {OPERATION_BOUND:.0f} s)"
    )
    for line in outcomes.failures:
        print(f"  clean failure: {line}")
        assert "\n" not in line, line
        assert cloud.rsm_configs().get("storage.azure.account.key", "\0") not in line
    assert sum(faults_seen["faults"].values()) > 0, "the schedule injected no fault"  # type: ignore[union-attr]


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_the_overall_deadline_ends_a_stalled_copy(
    name: str, request: pytest.FixtureRequest, proxies: list[FaultProxy], tmp_path: Path
) -> None:
    """Every answer stalls 8 s while a read may wait 10 s: the request deadline (2 s, retries included)
    ends the copy, one line naming the object and the setting, well before one read timeout."""
    import time

    from kafka_segments import make_segment

    from rsm import RemoteStorageException, TopicIdPartition

    cloud = request.getfixturevalue(FIXTURES[name])
    bucket = cloud.make_bucket()
    schedule = FaultSchedule(1, rate=1.0, max_faults=50, max_stalls=50, stall_seconds=8, kinds=("stall",))
    proxy = FaultProxy(cloud.endpoint_url, schedule).start()
    proxies.append(proxy)
    configs = {
        **_through(name, cloud, proxy, bucket),
        f"storage.{name}.read.timeout.ms": "10000",
        f"storage.{name}.request.timeout.ms": "2000",
    }
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    seg = make_segment(tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "stalled", 0), batches=3)
    started = time.monotonic()
    try:
        with pytest.raises(RemoteStorageException) as failed:
            rsm.copy_log_segment_data(seg.metadata, seg.data)
    finally:
        rsm.close()
    elapsed = time.monotonic() - started
    message = str(failed.value)
    assert f"storage.{name}.request.timeout.ms" in message and "within 2 s" in message, message
    assert "\n" not in message and elapsed < 9, elapsed


@pytest.mark.parametrize("attempts", [1, 3])
@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_retry_max_attempts_is_the_number_of_requests(
    name: str, attempts: int, request: pytest.FixtureRequest, proxies: list[FaultProxy]
) -> None:
    """`storage.<cloud>.retry.max.attempts` means what S3's does: attempts in all, the first included (the
    SDKs' own defaults would make 6 on GCS, 11 on Azure). Every answer is a 500 here."""
    from rsm.config.settings import RsmConfig as Config

    cloud = request.getfixturevalue(FIXTURES[name])
    bucket = cloud.make_bucket()
    ObjectStore.from_config(Config(cloud.rsm_configs(bucket=bucket))).put(bucket, "k/obj", b"x" * 100)
    schedule = FaultSchedule(1, rate=1.0, max_faults=100, kinds=("error500",))
    proxy = FaultProxy(cloud.endpoint_url, schedule).start()
    proxies.append(proxy)
    store = ObjectStore.from_config(
        Config({**_through(name, cloud, proxy, bucket), f"storage.{name}.retry.max.attempts": str(attempts)})
    )
    with pytest.raises(Exception):  # noqa: B017, PT011 - each SDK's own error for a 500
        store.get(bucket, "k/obj")
    assert proxy.stats.requests == attempts, proxy.stats.as_dict()


@pytest.mark.parametrize("kind", ["reset_after", "reset_before", "truncate", "error500"])
def test_one_fault_on_a_gcs_resumable_chunk_never_leaves_a_wrong_object(
    kind: str, gcs_server: Any, proxies: list[FaultProxy], tmp_path: Path
) -> None:
    """A segment of several 256 KiB upload chunks, one fault on a chunk's PUT. A 500 before the server kept
    anything is retried to identical bytes. After an answer lost or cut once the server kept the chunk,
    fake-gcs-server appends the chunk sent again, so there the copy must fail in one line (the writer's size
    check), never with a BufferError (the chunk sent from a view of a buffer resized under it) and never
    leaving an object that reads back wrong."""
    from kafka_segments import make_segment

    from rsm import RemoteStorageException, TopicIdPartition

    bucket = gcs_server.make_bucket()
    proxy = FaultProxy(gcs_server.endpoint_url, FaultSchedule(1, rate=0.0)).start()
    proxies.append(proxy)
    configs = {**_through("gcs", gcs_server, proxy, bucket), "storage.gcs.upload.chunk.size": str(256 << 10),
               "compression.enabled": "false"}  # fmt: skip
    seg = make_segment(tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "chunked", 0), batches=40,
                       value_size=4000, compressible=False)  # fmt: skip
    assert seg.data.log_segment.stat().st_size > 3 * (256 << 10)
    proxy.fail_next(kind, "PUT", "/o", forward=kind != "error500")  # the .log's first resumable chunk
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    try:
        try:
            custom = rsm.copy_log_segment_data(seg.metadata, seg.data)
        except RemoteStorageException as exc:
            assert kind != "error500", exc
            line = str(exc)
            assert "\n" not in line and "BufferError" not in line and ".log" in line, line
            keys = SegmentKeys.of(Location(bucket, ""), seg.metadata)
            assert (
                ObjectStore.from_config(RsmConfig(gcs_server.rsm_configs(bucket=bucket))).list(
                    bucket, keys.stem
                )
                == []
            )  # nothing a reader or du counts
        else:
            md = dataclasses.replace(seg.metadata, custom_metadata=custom)
            assert read_all(rsm.fetch_log_segment(md, 0, None)) == seg.data.log_segment.read_bytes()
    finally:
        rsm.close()
    assert proxy.stats.faults[kind] == 1, proxy.stats.as_dict()
