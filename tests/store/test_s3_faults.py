"""Hostile S3 (kept in the suite): a fault-injecting proxy between the RSM and moto's S3.

`harness.fault_proxy` answers a seeded fraction of the RSM's requests with 500 InternalError, 503 SlowDown,
connection resets (before or after the headers), stalls longer than the read timeout and truncated bodies.
With small deadlines configured, every copy and fetch either succeeds with exactly the right bytes or
raises a RemoteStorageException within a generous bound of the deadlines; no operation hangs and no wrong
byte is answered. Once the proxy passes everything through, each segment whose copy returned reads back
byte for byte (log and every index), and no segment whose copy raised has a manifest (so no reader sees it).

The outcome counts per seed (successes, clean failures, faults and retries seen at the proxy) are printed:
``pytest -s tests/store/test_s3_faults.py`` shows them.
"""

from __future__ import annotations

import dataclasses
import http.client
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from harness.fault_proxy import KINDS, FaultProxy, FaultSchedule
from kafka_segments import GZIP, make_segment, read_all, write_keyring
from tiering import PartitionLog

from rsm import (
    IndexType,
    LogConfig,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RemoteStorageManager,
    TopicIdPartition,
)
from rsm.store.layout import Location, SegmentKeys

pytestmark = pytest.mark.s3

# (seed, fraction of requests that meet a fault): the usual weather, then storms that fail copies too
SCHEDULES = [(1, 0.25), (2, 0.25), (3, 0.25), (4, 0.25), (5, 0.25), (6, 0.6), (7, 0.6)]
SEGMENTS = 6  # copied per seed
RANGES = 3  # fetched per copied segment while the faults go on
DEADLINES = {  # small, so faults cost little time; a stall (1.5 s) outlasts a read (1 s)
    "storage.s3.connect.timeout.ms": "1000",
    "storage.s3.read.timeout.ms": "1000",
    "storage.s3.retry.max.attempts": "3",
    "storage.s3.request.timeout.ms": "4000",
}
REQUEST_TIMEOUT = int(DEADLINES["storage.s3.request.timeout.ms"]) / 1000
STALL_SECONDS = 1.5
# Generous: a copy makes at most ~9 requests in a row (location record HEAD and PUT, old manifest DELETE,
# .log, .indexes and manifest PUTs, three cleanup DELETEs), each bounded by the request deadline; a fetch
# of a small segment fewer. Before the deadlines existed a stalled request alone took minutes.
OPERATION_BOUND = 12 * REQUEST_TIMEOUT


@dataclasses.dataclass
class Tiered:
    """A segment offered for copy: Kafka's metadata and files, its topic config and original bytes."""

    metadata: RemoteLogSegmentMetadata
    data: LogSegmentData
    log_config: LogConfig
    original: bytes
    indexes: dict[IndexType, bytes]
    copied: RemoteLogSegmentMetadata | None = None


@dataclasses.dataclass
class Outcomes:
    copies: Counter[str] = dataclasses.field(default_factory=Counter)
    fetches: Counter[str] = dataclasses.field(default_factory=Counter)
    index_fetches: Counter[str] = dataclasses.field(default_factory=Counter)
    slowest: float = 0.0
    failures: list[str] = dataclasses.field(default_factory=list)


def _timed(call: Callable[[], Any], bound: float) -> tuple[Any, BaseException | None, float]:
    """Run ``call`` in a daemon thread: (result, exception, seconds). Fails the test past ``bound``."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(bound)
    elapsed = time.monotonic() - started
    if thread.is_alive():
        pytest.fail(f"an operation was still running after {bound:.0f} s against the faulty endpoint")
    return box.get("result"), box.get("error"), elapsed


def _clean(exc: BaseException, outcomes: Outcomes, what: str) -> None:
    """A failure must be Kafka's exception, one line, naming what failed; never anything else."""
    if not isinstance(exc, RemoteStorageException):
        raise AssertionError(f"{what} raised {type(exc).__name__}, not a RemoteStorageException: {exc!r}")
    assert str(exc) and "testing" not in str(exc), exc  # no credentials in messages
    outcomes.failures.append(f"{what}: {exc}")


def _segments(tmp_path: Path, seed: int, rsm: RemoteStorageManager) -> list[Tiered]:
    """Plain and encrypted segments, kafka-python's and SegmentWriter's (real indexes, transactions)."""
    rng = random.Random(seed)
    out = []
    for n in range(SEGMENTS):
        encrypted = n % 2 == 1
        lc = LogConfig(
            {
                "unchecked.rsm.encryption.enabled": str(encrypted).lower(),
                "unchecked.rsm.encryption.key.id": "k1",
                "unchecked.rsm.compression.enabled": str(rng.random() < 0.7).lower(),
                "unchecked.rsm.chunk.size": str(rng.choice([4096, 5000, 16384])),
            }
        )
        tip = TopicIdPartition(uuid.uuid4(), f"faults-{seed}", n)
        if n % 3 == 2:  # a partition log as a broker rolls it (tests/tiering.py)
            part = PartitionLog(rsm, tip, tmp_path / f"p{n}")
            for i in range(rng.randint(3, 8)):
                part.append(rng.randint(1, 30), codec=rng.choice([0, 1, 3, 4]), producer_id=7,
                            transactional=i % 2 == 0, value_size=rng.randint(10, 400))  # fmt: skip
                if i % 2 == 0:
                    part.end_txn(7, commit=rng.random() < 0.5)
            metadata, data = part.roll(copy=False)
        else:
            seg = make_segment(tmp_path / f"s{n}", tip, base_offset=rng.randint(0, 10**9),
                               batches=rng.randint(5, 40), compression=rng.choice([0, GZIP]),
                               compressible=rng.random() < 0.5, seed=rng.randint(0, 2**31))  # fmt: skip
            metadata, data = seg.metadata, seg.data
        files = {
            IndexType.OFFSET: data.offset_index.read_bytes(),
            IndexType.TIMESTAMP: data.time_index.read_bytes(),
            IndexType.PRODUCER_SNAPSHOT: data.producer_snapshot_index.read_bytes(),
            IndexType.LEADER_EPOCH: bytes(data.leader_epoch_index),
        }
        if data.transaction_index is not None:
            files[IndexType.TRANSACTION] = data.transaction_index.read_bytes()
        out.append(Tiered(metadata, data, lc, data.log_segment.read_bytes(), files))
    return out


@pytest.fixture
def keyring(tmp_path: Path) -> Path:
    return write_keyring(tmp_path / "keyring.json", ("k1",))


@pytest.fixture
def proxy_for(s3_server: Any) -> Iterator[Callable[[FaultSchedule | None], FaultProxy]]:
    proxies: list[FaultProxy] = []

    def make(schedule: FaultSchedule | None) -> FaultProxy:
        proxies.append(FaultProxy(s3_server.endpoint_url, schedule).start())
        return proxies[-1]

    try:
        yield make
    finally:
        for proxy in proxies:
            proxy.stop()


def _rsm(s3_server: Any, endpoint: str, bucket: str, keyring: Path) -> RemoteStorageManager:
    rsm = RemoteStorageManager()
    rsm.configure(
        {
            **s3_server.rsm_configs(bucket=bucket, **DEADLINES),
            "storage.s3.endpoint.url": endpoint,
            "encryption.keyring.path": str(keyring),
        }
    )
    return rsm


def copy_through_faults(rsm: RemoteStorageManager, segments: list, outcomes: Outcomes) -> None:
    """Copy each segment once; a copy either succeeds (its metadata is kept for fetching) or fails cleanly."""
    for seg in segments:
        custom, exc, elapsed = _timed(
            lambda seg=seg: rsm.copy_log_segment_data(seg.metadata, seg.data, seg.log_config),
            OPERATION_BOUND,
        )
        outcomes.slowest = max(outcomes.slowest, elapsed)
        if exc is None:
            outcomes.copies["ok"] += 1
            seg.copied = dataclasses.replace(seg.metadata, custom_metadata=custom)
        else:
            outcomes.copies["failed"] += 1
            _clean(exc, outcomes, f"copy of {seg.metadata.remote_log_segment_id}")


def fetch_ranges_through_faults(
    rsm: RemoteStorageManager, seg: Any, rng: random.Random, outcomes: Outcomes
) -> None:  # noqa: ANN401
    """RANGES random byte ranges of a copied segment: each is the original's bytes or fails cleanly."""
    size = len(seg.original)
    for _ in range(RANGES):
        start = rng.randrange(size)
        end = rng.choice([None, min(size - 1, start + rng.randint(0, 3 * 16384))])
        md, lc = seg.copied, seg.log_config
        got, exc, elapsed = _timed(
            lambda md=md, lc=lc, start=start, end=end: read_all(rsm.fetch_log_segment(md, start, end, lc)),
            OPERATION_BOUND,
        )
        outcomes.slowest = max(outcomes.slowest, elapsed)
        if exc is None:
            expected = seg.original[start : size if end is None else end + 1]
            assert got == expected, f"wrong bytes for {start}..{end} of a {size}-byte segment"
            outcomes.fetches["ok"] += 1
        else:
            assert not isinstance(exc, RemoteResourceNotFoundException), exc  # it is there
            outcomes.fetches["failed"] += 1
            _clean(exc, outcomes, f"fetch {start}..{end}")


@pytest.mark.parametrize(("seed", "rate"), SCHEDULES, ids=[f"seed{s}-{r:.0%}" for s, r in SCHEDULES])
def test_copies_and_fetches_through_faults_succeed_or_fail_cleanly(
    s3_server: Any, proxy_for: Callable[[FaultSchedule | None], FaultProxy], keyring: Path,
    tmp_path: Path, seed: int, rate: float,
) -> None:  # fmt: skip
    bucket = s3_server.make_bucket()
    schedule = FaultSchedule(seed, rate=rate, max_faults=40, max_stalls=3, stall_seconds=STALL_SECONDS)
    proxy = proxy_for(schedule)
    outcomes = Outcomes()
    rng = random.Random(seed * 7919)

    # -- faults on: copy, then fetch ranges and indexes of what was copied
    rsm = _rsm(s3_server, proxy.endpoint_url, bucket, keyring)
    try:
        segments = _segments(tmp_path, seed, rsm)
        copy_through_faults(rsm, segments, outcomes)
        for seg in (s for s in segments if s.copied is not None):
            fetch_ranges_through_faults(rsm, seg, rng, outcomes)
            index_type = rng.choice(sorted(seg.indexes, key=lambda t: t.value))
            got, exc, elapsed = _timed(
                lambda seg=seg, t=index_type: read_all(rsm.fetch_index(seg.copied, t, seg.log_config)),
                OPERATION_BOUND,
            )
            outcomes.slowest = max(outcomes.slowest, elapsed)
            if exc is None:
                assert got == seg.indexes[index_type], f"wrong bytes for the {index_type.name} index"
                outcomes.index_fetches["ok"] += 1
            else:
                assert not isinstance(exc, RemoteResourceNotFoundException), exc
                outcomes.index_fetches["failed"] += 1
                _clean(exc, outcomes, f"{index_type.name} index fetch")
    finally:
        rsm.close()

    # -- faults off: what was copied reads back whole (a fresh RSM: nothing cached), what failed is absent
    proxy.pass_through()
    faults_seen = proxy.stats.as_dict()
    client = s3_server.boto3_client()
    leftovers = 0
    with _rsm(s3_server, proxy.endpoint_url, bucket, keyring) as reader:
        for seg in segments:
            keys = SegmentKeys.of(Location(bucket, ""), seg.metadata)
            present = {
                o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=keys.stem).get("Contents", [])
            }
            if seg.copied is None:
                assert keys.manifest not in present, (
                    f"a copy that raised left its manifest: {keys.manifest} (seed {seed})"
                )
                leftovers += len(present)
                continue
            assert present == {keys.log, keys.indexes, keys.manifest}, present
            md, lc = seg.copied, seg.log_config
            assert read_all(reader.fetch_log_segment(md, 0, None, lc)) == seg.original
            for index_type, expected in seg.indexes.items():
                assert read_all(reader.fetch_index(md, index_type, lc)) == expected, index_type.name
    assert proxy.stats.as_dict()["faults"] == faults_seen["faults"]  # pass-through really passed

    print(
        f"\nseed {seed}, {rate:.0%} of requests: copies {dict(outcomes.copies)}, range fetches {dict(outcomes.fetches)}, "
        f"index fetches {dict(outcomes.index_fetches)}; proxy {faults_seen}; "
        f"slowest operation {outcomes.slowest:.1f} s (bound {OPERATION_BOUND:.0f} s); "
        f"objects left by failed copies (no manifest) {leftovers}"
    )
    for line in outcomes.failures:
        print(f"  clean failure: {line}")
    assert sum(faults_seen["faults"].values()) > 0, "the schedule injected no fault"  # type: ignore[union-attr]


# -- the proxy itself ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_each_fault_kind_reaches_the_client_as_described(
    s3_server: Any, proxy_for: Callable[[FaultSchedule | None], FaultProxy], kind: str
) -> None:
    """A harness check: with only ``kind`` scheduled, a plain HTTP client sees exactly that fault."""
    bucket = s3_server.make_bucket()
    body = bytes(range(256)) * 64
    client = s3_server.boto3_client()
    client.put_object(Bucket=bucket, Key="obj", Body=body)
    url = urlsplit(client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "obj"}))
    target = f"{url.path}?{url.query}"
    proxy = proxy_for(FaultSchedule(0, rate=1.0, max_faults=1, kinds=(kind,), stall_seconds=0.5))
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=5)
    try:
        conn.request("GET", target)
        if kind in ("error500", "slowdown503"):
            response = conn.getresponse()
            text = response.read()
            assert response.status == (500 if kind == "error500" else 503)
            assert (b"<Code>InternalError</Code>" if kind == "error500" else b"<Code>SlowDown</Code>") in text
        elif kind in ("reset_before", "stall"):
            with pytest.raises((ConnectionError, http.client.RemoteDisconnected)):
                conn.getresponse().read()
        elif kind in ("reset_after", "stall_body"):
            response = conn.getresponse()
            assert response.status == 200
            with pytest.raises((ConnectionError, http.client.IncompleteRead)):
                response.read()
        else:  # truncate
            response = conn.getresponse()
            assert response.status == 200 and int(response.getheader("Content-Length")) == len(body)
            with pytest.raises(http.client.IncompleteRead) as info:
                response.read()
            assert 0 < len(info.value.partial) < len(body) and body.startswith(info.value.partial)
    finally:
        conn.close()
    # the fault budget is spent: the next request passes
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=5)
    try:
        conn.request("GET", target)
        assert conn.getresponse().read() == body
    finally:
        conn.close()
    assert proxy.stats.faults == {kind: 1} and proxy.stats.retries == 1 and proxy.stats.requests == 2


def test_a_schedule_is_its_seed() -> None:
    a, b, c = FaultSchedule(3), FaultSchedule(3), FaultSchedule(4)
    first = [a.next() for _ in range(200)]
    assert first == [b.next() for _ in range(200)] and first != [c.next() for _ in range(200)]
    faults = [f for f in first if f.kind is not None]
    assert (
        0 < len(faults) <= a.max_faults
        and sum(f.kind in ("stall", "stall_body") for f in faults) <= a.max_stalls
    )


# -- a copy whose last requests fail -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "suffix"),
    [
        ("reset_before", ".manifest"),
        ("stall", ".manifest"),
        ("error500", ".manifest"),
        ("truncate", ".manifest"),
        ("reset_before", ".log"),
        ("error500", ".indexes"),
    ],
)
def test_a_copy_failing_at_its_commit_leaves_no_manifest(
    s3_server: Any, proxy_for: Callable[[FaultSchedule | None], FaultProxy], keyring: Path,
    tmp_path: Path, kind: str, suffix: str,
) -> None:  # fmt: skip
    """Every attempt at one PUT fails after it reached the store (the object landed, the client saw a
    reset, a stall, a 500 or half an answer): the copy raises within the deadline, and its cleanup removes
    what landed, the manifest first, so no reader sees the segment and nothing is left behind."""
    bucket = s3_server.make_bucket()
    proxy = proxy_for(None)
    proxy.stall_seconds = STALL_SECONDS
    seg = make_segment(tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "commit", 0), batches=10)
    with _rsm(s3_server, proxy.endpoint_url, bucket, keyring) as rsm:
        # more than every attempt: botocore's 3, and aiohttp's own second try of an idempotent request whose
        # reused connection broke
        proxy.fail_next(kind, "PUT", suffix, times=8, forward=True)
        _, exc, _ = _timed(lambda: rsm.copy_log_segment_data(seg.metadata, seg.data), OPERATION_BOUND)
    assert isinstance(exc, RemoteStorageException) and suffix in str(exc), repr(exc)
    assert set(proxy.stats.faults) == {kind} and proxy.stats.faults[kind] >= 2, proxy.stats
    keys = SegmentKeys.of(Location(bucket, ""), seg.metadata)
    listed = s3_server.boto3_client().list_objects_v2(Bucket=bucket, Prefix=keys.stem).get("Contents", [])
    assert not listed, [o["Key"] for o in listed]


# -- a GET whose body fails after its headers --------------------------------------------------------------


def _copied(s3_server: Any, endpoint: str, bucket: str, keyring: Path, tmp_path: Path) -> Tiered:
    """One encrypted segment of several chunks copied through ``endpoint`` with no faults."""
    seg = make_segment(tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "body", 0), batches=30)
    lc = LogConfig({"unchecked.rsm.encryption.enabled": "true", "unchecked.rsm.encryption.key.id": "k1",
                    "unchecked.rsm.chunk.size": "4096"})  # fmt: skip
    with _rsm(s3_server, endpoint, bucket, keyring) as rsm:
        custom = rsm.copy_log_segment_data(seg.metadata, seg.data, lc)
    md = dataclasses.replace(seg.metadata, custom_metadata=custom)
    indexes = {IndexType(k): v for k, v in seg.files().items()}
    return Tiered(seg.metadata, seg.data, lc, seg.data.log_segment.read_bytes(), indexes, md)


@pytest.mark.parametrize("kind", ["truncate", "reset_after", "stall_body"])
@pytest.mark.parametrize("suffix", [".manifest", ".log", ".indexes"])
def test_a_get_whose_body_fails_is_attempted_again(
    s3_server: Any, proxy_for: Callable[[FaultSchedule | None], FaultProxy], keyring: Path,
    tmp_path: Path, kind: str, suffix: str,
) -> None:  # fmt: skip
    """botocore retries a GET until its headers arrive; a body cut short or stalled after them was not
    attempted again at all (s3fs's own retries are off, on purpose). It is now, within the attempts and
    the request deadline: one such fault no longer fails the fetch."""
    bucket = s3_server.make_bucket()
    proxy = proxy_for(None)
    proxy.stall_seconds = STALL_SECONDS
    seg = _copied(s3_server, proxy.endpoint_url, bucket, keyring, tmp_path)
    assert seg.copied is not None
    with _rsm(s3_server, proxy.endpoint_url, bucket, keyring) as rsm:
        proxy.fail_next(kind, "GET", suffix, times=2)  # attempts 3: the third gets through
        got, exc, _ = _timed(
            lambda: (
                read_all(rsm.fetch_log_segment(seg.copied, 0, None, seg.log_config)),
                read_all(rsm.fetch_index(seg.copied, IndexType.TIMESTAMP, seg.log_config)),
            ),
            OPERATION_BOUND,
        )
    assert exc is None, f"{kind} of a {suffix} GET failed the fetch: {exc}"
    assert got == (seg.original, seg.indexes[IndexType.TIMESTAMP])
    assert proxy.stats.faults == {kind: 2} and proxy.stats.retries == 2, proxy.stats


def test_body_failures_on_every_attempt_fail_the_fetch_cleanly(
    s3_server: Any, proxy_for: Callable[[FaultSchedule | None], FaultProxy], keyring: Path, tmp_path: Path
) -> None:
    """As many body failures as attempts: a RemoteStorageException naming the object, no more requests."""
    bucket = s3_server.make_bucket()
    proxy = proxy_for(None)
    seg = _copied(s3_server, proxy.endpoint_url, bucket, keyring, tmp_path)
    with _rsm(s3_server, proxy.endpoint_url, bucket, keyring) as rsm:
        before = proxy.stats.requests
        proxy.fail_next("truncate", "GET", ".log", times=3)
        _, exc, _ = _timed(
            lambda: read_all(rsm.fetch_log_segment(seg.copied, 0, None, seg.log_config)), OPERATION_BOUND
        )
    assert isinstance(exc, RemoteStorageException) and ".log" in str(exc), repr(exc)
    assert proxy.stats.faults == {"truncate": 3}
    # the manifest (s3fs's HEAD, then the GET), then three tries at the first chunk
    assert proxy.stats.requests - before == 5, proxy.log[before:]
