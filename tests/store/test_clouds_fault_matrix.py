"""Every cloud under the same faults: S3 (moto), GCS (fake-gcs-server) and Azure (Azurite) behind the fault
proxy (`harness.fault_proxy`), each asserted alike.

- A copy into a black hole (the store swallows every write) ends within the copy's budget
  (`copy.timeout.ms`), its clean-up included, in one line naming the object and the setting; once the black
  hole lifts, Kafka's delete of the failed segment id (or a retry of the copy) leaves nothing a reader,
  `rsm store du` or `ls` counts.
- A copy whose data upload reached the store but whose every answer was lost fails in one line and leaves
  nothing either.
- The matrix: one fault (transient) or every attempt's (persistent) on each request type of a copy (the
  data upload), a fetch (the ranged GET) and a delete (the DELETE), for the cheap kinds (a 500, a reset
  before or after the answer's head, a truncated answer). A transient fault ends in identical bytes (the
  copy's readback, the fetch's bytes, a delete that leaves nothing); a persistent one in one line naming the
  object, and nothing a reader counts.

Cheap by design: tiny segments, 3 s request deadlines (8 s for a whole copy), 2 attempts, the emulators the session shares. The
bounds asserted on elapsed time are what the settings promise, with a generous slack, not speed targets.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.fault_proxy import FaultProxy, FaultSchedule
from kafka_segments import Segment, make_segment, read_all

from rsm import RemoteStorageException, RemoteStorageManager, TopicIdPartition
from rsm.api.metadata import RemoteLogSegmentMetadata
from rsm.config.settings import RsmConfig
from rsm.store.layout import Location, SegmentKeys
from rsm.store.objects import ObjectStore

FIXTURES = {"s3": "s3_server", "gcs": "gcs_server", "azure": "azurite_server"}
MARKS = {"s3": pytest.mark.s3, "gcs": pytest.mark.gcs, "azure": pytest.mark.azure}
BACKENDS = [pytest.param(name, marks=MARKS[name]) for name in sorted(FIXTURES)]
# small, yet above what a loaded machine (2 cores, several suites at once) takes for a healthy request
REQUEST_S = 3.0
# a transient fault and the SDK's retry fit in one request's deadline on every cloud, on a loaded machine
MATRIX_REQUEST_S = 5.0
BUDGET_S = 8.0
READ_S = 2.0
STALL_S = 3.0  # a stall outlasts a read timeout
SLACK_S = 6.0  # thread joins, the event loop's 1 s polling, a slow shared machine
# the request that uploads a small segment's data: one PUT of the key (S3, Azure), one upload POST (GCS)
DATA_UPLOAD = {"s3": ("PUT", ".log"), "gcs": ("POST", "/o"), "azure": ("PUT", ".log")}
CHEAP_KINDS = ("error500", "reset_before", "reset_after", "truncate")


def _configs(
    name: str, cloud: Any, proxy: FaultProxy, bucket: str, request_s: float = REQUEST_S
) -> dict[str, str]:
    """The cloud's configs through the proxy, with small deadlines and budget."""
    configs = cloud.rsm_configs(
        bucket=bucket,
        **{
            f"storage.{name}.connect.timeout.ms": "1000",
            f"storage.{name}.read.timeout.ms": str(int(READ_S * 1000)),
            f"storage.{name}.retry.max.attempts": "2",
            f"storage.{name}.request.timeout.ms": str(int(request_s * 1000)),
            "copy.timeout.ms": str(int(max(BUDGET_S, 4 * request_s) * 1000)),
        },
    )
    key = f"storage.{name}.endpoint.url"
    configs[key] = configs[key].replace(cloud.endpoint_url, proxy.endpoint_url)
    return configs


@dataclasses.dataclass
class Rig:
    """One cloud behind a fresh proxy, an RSM configured through it and a direct view of the bucket."""

    name: str
    cloud: Any
    proxy: FaultProxy
    bucket: str
    rsm: RemoteStorageManager
    direct: ObjectStore
    tmp: Path
    tip: TopicIdPartition
    next_offset: int = 0

    def segment(self, batches: int = 3) -> Segment:
        """The partition's next segment (its location is recorded by the first copy: later ones write
        only their own objects)."""
        seg = make_segment(
            self.tmp / uuid.uuid4().hex[:8], self.tip, base_offset=self.next_offset, batches=batches
        )
        self.next_offset = seg.metadata.end_offset + 1
        return seg

    def stem_objects(self, md: RemoteLogSegmentMetadata) -> tuple[set[str], list[object]]:
        """What a reader, du or ls could see of a segment: its objects and its unfinished writes."""
        keys = SegmentKeys.of(Location(self.bucket, ""), md)
        return set(self.direct.list(self.bucket, keys.stem)), self.direct.unfinished_writes(
            self.bucket, keys.all()
        )

    def keys(self, md: RemoteLogSegmentMetadata) -> SegmentKeys:
        return SegmentKeys.of(Location(self.bucket, ""), md)


@pytest.fixture(params=BACKENDS)
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Rig]:
    name = request.param
    cloud = request.getfixturevalue(FIXTURES[name])
    bucket = cloud.make_bucket()
    proxy = FaultProxy(cloud.endpoint_url, FaultSchedule(0, rate=0.0, stall_seconds=STALL_S)).start()
    rsm = RemoteStorageManager()
    rsm.configure(_configs(name, cloud, proxy, bucket))
    direct = ObjectStore.from_config(RsmConfig(cloud.rsm_configs(bucket=bucket)))
    try:
        yield Rig(
            name,
            cloud,
            proxy,
            bucket,
            rsm,
            direct,
            tmp_path,
            TopicIdPartition(uuid.uuid4(), f"faults-{name}", 0),
        )
    finally:
        proxy.lift_black_hole()
        rsm.close()
        proxy.stop()


def _one_line(message: str, rig: Rig, obj: str | None = None) -> None:
    """One line naming the object (and ``obj`` in it) and the setting that bounded it; no secret."""
    assert "\n" not in message, message
    assert f"storage.{rig.name}." in message or "copy.timeout.ms" in message, message
    assert rig.direct.describe(rig.bucket, "") in message, message  # names the object
    if obj is not None:
        assert obj in message, message
    secret = rig.cloud.rsm_configs().get("storage.azure.account.key")
    assert secret is None or secret not in message


def test_a_copy_into_a_black_hole_ends_within_its_budget_and_leaves_nothing(rig: Rig) -> None:
    first = rig.segment()
    rig.rsm.copy_log_segment_data(first.metadata, first.data)  # the location is recorded: no write needed
    seg = rig.segment()
    rig.proxy.black_hole(starting_at=DATA_UPLOAD[rig.name])  # the upload, then every write after it
    started = time.monotonic()
    with pytest.raises(RemoteStorageException) as failed:
        rig.rsm.copy_log_segment_data(seg.metadata, seg.data)
    elapsed = time.monotonic() - started
    message = str(failed.value)
    _one_line(message, rig)
    assert f"storage.{rig.name}.request.timeout.ms" in message or "copy.timeout.ms" in message, message
    assert elapsed < BUDGET_S + SLACK_S, f"{elapsed:.1f} s for a budget of {BUDGET_S:g} s: {message}"
    assert rig.proxy.stats.faults["black_hole"] >= 1
    print(f"\n{rig.name}: black-holed copy failed after {elapsed:.1f} s (budget {BUDGET_S:g} s): {message}")

    rig.proxy.lift_black_hole()
    # Kafka deletes the segment id whose copy failed: the debris sweep with the segment's own delete
    rig.rsm.delete_log_segment_data(seg.metadata)
    objects, unfinished = rig.stem_objects(seg.metadata)
    assert objects == set() and unfinished == [], (objects, unfinished)
    # and a retry of the same segment id, once the store answers again, is whole and alone
    copied = rig.rsm.copy_log_segment_data(seg.metadata, seg.data)
    md = dataclasses.replace(seg.metadata, custom_metadata=copied)
    assert read_all(rig.rsm.fetch_log_segment(md, 0, None)) == seg.data.log_segment.read_bytes()
    objects, unfinished = rig.stem_objects(seg.metadata)
    keys = rig.keys(seg.metadata)
    assert objects == {keys.log, keys.indexes, keys.manifest} and unfinished == [], (objects, unfinished)


def test_a_copy_whose_data_upload_answers_are_all_lost_leaves_nothing(rig: Rig) -> None:
    """The store keeps every attempt of the data upload but the client sees each answer cut short (a reset
    after a whole bodiless answer would be a success): the copy fails in one line, and removes what landed
    (Azure once left a visible `.log` here)."""
    first = rig.segment()
    rig.rsm.copy_log_segment_data(first.metadata, first.data)
    seg = rig.segment()
    method, suffix = DATA_UPLOAD[rig.name]
    rig.proxy.fail_next("truncate", method, suffix, times=20)
    with pytest.raises(RemoteStorageException) as failed:
        rig.rsm.copy_log_segment_data(seg.metadata, seg.data)
    rig.proxy.pass_through()
    _one_line(str(failed.value), rig)
    objects, unfinished = rig.stem_objects(seg.metadata)
    assert objects == set() and unfinished == [], (objects, unfinished)


def _fetch_bytes(rig: Rig, md: RemoteLogSegmentMetadata) -> bytes:
    return read_all(rig.rsm.fetch_log_segment(md, 0, None))


@pytest.mark.parametrize("kind", CHEAP_KINDS)
def test_the_fault_matrix(rig: Rig, kind: str) -> None:
    """One fault, then a fault on every attempt, on a copy's data upload, a fetch's GET and a delete."""
    method, suffix = DATA_UPLOAD[rig.name]
    outcomes: dict[str, str] = {}
    rig.rsm.close()
    rig.rsm = RemoteStorageManager()
    rig.rsm.configure(_configs(rig.name, rig.cloud, rig.proxy, rig.bucket, MATRIX_REQUEST_S))

    # copy, transient: identical bytes (or, where the store appends a chunk sent again, a clean failure)
    seg = rig.segment()
    rig.proxy.fail_next(kind, method, suffix)
    try:
        custom = rig.rsm.copy_log_segment_data(seg.metadata, seg.data)
    except RemoteStorageException as exc:
        # fake-gcs-server appends a resumable chunk sent again after it kept it (the writer's size check)
        assert rig.name == "gcs" and kind in ("reset_after", "truncate"), exc
        _one_line(str(exc), rig, ".log")
        assert rig.stem_objects(seg.metadata) == (set(), [])
        outcomes["copy transient"] = "clean failure"
        custom = rig.rsm.copy_log_segment_data(seg.metadata, seg.data)
    else:
        outcomes["copy transient"] = "identical"
    md = dataclasses.replace(seg.metadata, custom_metadata=custom)
    assert _fetch_bytes(rig, md) == seg.data.log_segment.read_bytes()

    # fetch, transient then persistent (a fresh RSM each time: nothing cached)
    keys = rig.keys(md)
    for times, label in ((1, "fetch transient"), (20, "fetch persistent")):
        rig.rsm.close()
        rig.rsm = RemoteStorageManager()
        rig.rsm.configure(_configs(rig.name, rig.cloud, rig.proxy, rig.bucket, MATRIX_REQUEST_S))
        rig.proxy.fail_next(kind, "GET", ".log", times=times)
        try:
            got = _fetch_bytes(rig, md)
        except RemoteStorageException as exc:
            assert times > 1, exc
            _one_line(str(exc), rig, ".log")
            outcomes[label] = "clean failure"
        else:
            assert got == seg.data.log_segment.read_bytes()
            outcomes[label] = "identical"
        rig.proxy.drop_scripted()  # what the attempts left unused

    # copy, persistent: one line, nothing a reader counts (or, for a reset after a whole bodiless answer,
    # which is no failure, identical bytes)
    other = rig.segment()
    rig.proxy.fail_next(kind, method, suffix, times=20)
    try:
        copied = rig.rsm.copy_log_segment_data(other.metadata, other.data)
    except RemoteStorageException as exc:
        _one_line(str(exc), rig)
        assert rig.stem_objects(other.metadata) == (set(), []), exc
        outcomes["copy persistent"] = "clean failure"
    else:
        assert kind == "reset_after" and rig.name != "gcs", kind
        got = _fetch_bytes(rig, dataclasses.replace(other.metadata, custom_metadata=copied))
        assert got == other.data.log_segment.read_bytes()
        outcomes["copy persistent"] = "identical"
    rig.proxy.drop_scripted()

    # delete, persistent then transient: a failure in one line, or (a reset after a whole bodiless answer
    # is no failure) nothing left; then nothing left once it returned
    rig.proxy.fail_next(kind, "DELETE", ".manifest", times=20)
    try:
        rig.rsm.delete_log_segment_data(md)
    except RemoteStorageException as exc:
        _one_line(str(exc), rig, ".manifest")
        outcomes["delete persistent"] = "clean failure"
    else:
        assert rig.stem_objects(md) == (set(), [])
        outcomes["delete persistent"] = "nothing left"
    rig.proxy.drop_scripted()
    rig.proxy.fail_next(kind, "DELETE", ".log")
    rig.rsm.delete_log_segment_data(md)
    assert rig.stem_objects(md) == (set(), [])
    outcomes["delete transient"] = "nothing left"
    assert keys.manifest not in rig.direct.list(rig.bucket, keys.stem)
    print(f"\n{rig.name} {kind}: {outcomes}; proxy {rig.proxy.stats.as_dict()}")


def test_black_holes_on_a_fetch_and_a_delete_end_in_one_line_within_a_request_deadline(rig: Rig) -> None:
    """A fetch whose GETs vanish and a delete whose DELETEs vanish each fail after one request deadline,
    in one line naming the object and the setting; once the hole lifts, the same calls succeed."""
    seg = rig.segment()
    md = dataclasses.replace(
        seg.metadata, custom_metadata=rig.rsm.copy_log_segment_data(seg.metadata, seg.data)
    )
    for methods, call in (
        (("GET",), lambda: _fetch_bytes(rig, md)),
        (("DELETE",), lambda: rig.rsm.delete_log_segment_data(md)),
    ):
        rig.proxy.black_hole(methods)
        started = time.monotonic()
        with pytest.raises(RemoteStorageException) as failed:
            call()
        elapsed = time.monotonic() - started
        _one_line(str(failed.value), rig)
        assert elapsed < REQUEST_S + SLACK_S, (methods, elapsed)
        rig.proxy.lift_black_hole()
    assert _fetch_bytes(rig, md) == seg.data.log_segment.read_bytes()
    rig.rsm.delete_log_segment_data(md)
    assert rig.stem_objects(md) == (set(), [])


def test_one_stall_on_each_request_type_ends_in_identical_bytes(rig: Rig) -> None:
    """A stall longer than the read timeout (3 s against 2 s) on the data upload, the fetch's GET and the
    delete: each is tried again within its request deadline and ends as if nothing happened."""
    rig.rsm.close()
    rig.rsm = RemoteStorageManager()
    rig.rsm.configure(_configs(rig.name, rig.cloud, rig.proxy, rig.bucket, MATRIX_REQUEST_S))
    seg = rig.segment()
    rig.proxy.fail_next("stall", *DATA_UPLOAD[rig.name], forward=False)
    md = dataclasses.replace(
        seg.metadata, custom_metadata=rig.rsm.copy_log_segment_data(seg.metadata, seg.data)
    )
    rig.rsm.close()
    rig.rsm = RemoteStorageManager()  # nothing cached: the fetch reads the store
    rig.rsm.configure(_configs(rig.name, rig.cloud, rig.proxy, rig.bucket, MATRIX_REQUEST_S))
    rig.proxy.fail_next("stall", "GET", ".log", forward=False)
    assert _fetch_bytes(rig, md) == seg.data.log_segment.read_bytes()
    rig.proxy.fail_next("stall", "DELETE", ".log", forward=False)
    rig.rsm.delete_log_segment_data(md)
    assert rig.stem_objects(md) == (set(), [])
    assert rig.proxy.stats.faults["stall"] == 3, rig.proxy.stats.as_dict()
