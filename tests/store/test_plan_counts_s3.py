"""Planning requests on moto S3 behind a counting proxy (`harness.fault_proxy` with no faults): what a plan
lists, counted and named.

- A store of 1,000 topics, unmarked (their segments and record entries written directly, no
  `_scanned.json`): the planned topic, tiered through the RSM, is marked complete by its first copy
  (`rsm.store.first_copy`), and its plans list nothing of any other topic: no key, no record entry, no
  overlay.
- A timestamp plan lists no partition whole (bisection by probes), nor does a stream restarted from its
  checkpoint, nor one far behind its topic's end (`TopicCatalog.ranged_histories`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import pyarrow as pa
import pytest
from harness.fault_proxy import FaultProxy
from tiering import BASE_TS, PartitionLog

from rsm import RemoteStorageManager, TopicIdPartition
from rsm.api.metadata import uuid_to_base64
from rsm.stored.location_record import COMPLETE_MARKER, REGISTRY_DIR, SCANNED_MARKER
from rsm.stored.overlay import TopicOverlay, overlay_key
from spark_reader.options import parse_options
from spark_reader.source import TieredBatchReader
from spark_reader.stream import TieredStreamReader

pytestmark = pytest.mark.s3

OTHERS = 1000
TOPIC = "orders"


@dataclasses.dataclass(frozen=True)
class Request:
    method: str
    key: str  # the object's key; for a listing, its prefix
    query: dict[str, str]

    @property
    def listing(self) -> bool:
        return self.method == "GET" and "list-type" in self.query


def _requests(proxy: FaultProxy) -> list[Request]:
    """What reached the proxy since the last call (and forgets it)."""
    out = []
    for method, target, _ in proxy.log:
        parts = urlsplit(target)
        key = unquote(parts.path).lstrip("/").partition("/")[2]
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        out.append(Request(method, query.get("prefix", key) if "list-type" in query else key, query))
    proxy.log.clear()
    return out


def _copy_like_kafka(log: PartitionLog) -> None:
    """Roll and copy a segment with Kafka's leader-epoch checkpoint (the cache from the log's start)."""
    md, data = log.roll(copy=False)
    entries = sorted((e, o) for e, o in log.epochs.items() if o <= md.end_offset)
    checkpoint = f"0\n{len(entries)}\n" + "".join(f"{e} {o}\n" for e, o in entries)
    log.tier(md, dataclasses.replace(data, leader_epoch_index=checkpoint.encode()))


def _write_others(client: Any, bucket: str) -> list[str]:
    """`OTHERS` topics as a recording release without markers left them: a segment's manifest key and a
    location entry each, an overlay for every tenth (only their keys matter: a plan of another topic must
    not list them). Written directly, sixteen at a time. Returns every key written."""

    def one(i: int) -> list[str]:
        name, tid = f"t{i:04d}", uuid.uuid4()
        b64 = uuid_to_base64(tid)
        manifest = f"{name}-{b64}/0/{0:020d}-{uuid_to_base64(uuid.uuid4())}.manifest"
        digest = hashlib.sha256(f"{bucket}\n".encode()).hexdigest()[:32]
        entry = f"{REGISTRY_DIR}{name}-{b64}/{digest}.json"
        doc = {"version": 1, "topic": name, "topic_id": b64, "bucket": bucket, "prefix": "", "recorded_ms": 1}
        objects = {manifest: b"{}", entry: json.dumps(doc).encode()}
        if i % 10 == 0:
            objects[overlay_key("", name, tid)] = TopicOverlay(name, tid, {"retention.ms": "1"}, 1).to_bytes()
        for key, body in objects.items():
            client.put_object(Bucket=bucket, Key=key, Body=body)
        return list(objects)

    with ThreadPoolExecutor(16) as pool:
        return [k for keys in pool.map(one, range(OTHERS)) for k in keys]


@pytest.fixture(scope="module")
def many_topics(s3_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The 1,000 other topics, then `orders` (2 partitions x 12 segments of 5 records) through the RSM."""
    bucket = s3_server.make_bucket()
    others = _write_others(s3_server.boto3_client(), bucket)
    proxy = FaultProxy(s3_server.endpoint_url).start()
    opts = s3_server.rsm_configs(bucket=bucket)
    opts["storage.s3.endpoint.url"] = proxy.endpoint_url
    rsm = RemoteStorageManager()
    rsm.configure(opts)
    tid = uuid.uuid4()
    work = tmp_path_factory.mktemp("orders")
    for p in range(2):
        log = PartitionLog(rsm, TopicIdPartition(tid, TOPIC, p), work / str(p))
        for _ in range(12):
            log.append(5, value_size=20, headers=False)
            _copy_like_kafka(log)
    rsm.close()
    copies = _requests(proxy)
    try:
        yield {"opts": opts, "proxy": proxy, "others": others, "tid": tid, "copies": copies, "bucket": bucket}
    finally:
        proxy.stop()


def _others_touched(requests: list[Request], others: list[str]) -> list[Request]:
    """The requests that read, or listed, a key of another topic."""
    keys = sorted(others)
    out = []
    for r in requests:
        if r.listing:
            # a listing returns what its prefix starts (delimited: names of the directories below it)
            if any(k.startswith(r.key) for k in keys):
                out.append(r)
        elif r.key in others:
            out.append(r)
    return out


def _plan(opts: dict[str, str], proxy: FaultProxy, **options: str) -> tuple[list[int], list[Request]]:
    reader = TieredBatchReader(parse_options({**opts, "subscribe": TOPIC, **options}))
    parts = list(reader.partitions())
    requests = _requests(proxy)
    table = pa.Table.from_batches([b for p in parts for b in reader.read(p)])
    _requests(proxy)  # the reads, not counted
    return sorted(table.column("offset").to_pylist()), requests


def test_the_first_copy_marks_a_new_topic_without_listing_the_bucket(many_topics: dict[str, Any]) -> None:
    copies: list[Request] = many_topics["copies"]
    # the store is unmarked (older topics): the first copy vouched for the new topic id alone
    keys = {r.key for r in copies if r.method == "PUT"}
    assert f"{REGISTRY_DIR}{SCANNED_MARKER}" not in keys
    marker = f"{REGISTRY_DIR}{TOPIC}-{uuid_to_base64(many_topics['tid'])}/{COMPLETE_MARKER}"
    assert marker in keys
    # by directory names: the bucket's root (1,001 names: two pages), nothing below another topic's name
    walked = [r for r in copies if r.listing and r.key == ""]
    assert all(r.query.get("delimiter") == "/" for r in walked), walked
    assert len(walked) == 2, walked
    assert [r for r in copies if r.listing and r.key and not r.key.startswith(("orders-", "_rsm/"))] == []


def test_a_plan_of_one_topic_lists_nothing_of_a_thousand_others(many_topics: dict[str, Any]) -> None:
    opts, proxy, others = many_topics["opts"], many_topics["proxy"], many_topics["others"]
    _requests(proxy)
    counts = {}
    for name, options, expected in [
        ("full", {}, [o for o in range(60) for _ in range(2)]),
        (
            "narrow",
            {
                "startingOffsets": json.dumps({TOPIC: {"0": 20, "1": 20}}),
                "endingOffsets": json.dumps({TOPIC: {"0": 30, "1": 30}}),
            },
            [o for o in range(20, 30) for _ in range(2)],
        ),
        ("timestamp", {"startingTimestamp": str(BASE_TS + 45)}, [o for o in range(45, 60) for _ in range(2)]),
    ]:
        offsets, requests = _plan(opts, proxy, **options)
        assert offsets == expected, name
        assert _others_touched(requests, others) == [], name
        assert not [r for r in requests if r.listing and r.key == ""], name  # no bucket listed whole
        # the name's record and overlays listed once a plan (not once per question asked of them)
        record = f"{REGISTRY_DIR}{TOPIC}-"
        assert [r.key for r in requests if r.listing and r.key.startswith("_rsm/topic-")] == [
            record,
            f"_rsm/topic-configs/{TOPIC}-",
        ], name
        assert (
            sum(1 for r in requests if r.method == "GET" and not r.listing and r.key.startswith(record)) == 1
        ), name
        counts[name] = sum(r.listing for r in requests)
    # a constant per plan, whatever the other topics: the catalog home's two pointers (missing: s3fs looks
    # for a directory of that name), the name's record and overlays, the topic's partitions, then for each
    # partition its first copies and a probe from their end (a short partition's whole tail): 9 today
    assert all(n <= 9 for n in counts.values()), counts


def test_a_timestamp_plan_lists_no_partition_whole(many_topics: dict[str, Any]) -> None:
    opts, proxy = many_topics["opts"], many_topics["proxy"]
    _requests(proxy)
    offsets, requests = _plan(
        opts,
        proxy,
        startingTimestamp=str(BASE_TS + 31),
        endingOffsets=json.dumps({TOPIC: {"0": 33, "1": 33}}),
    )
    assert offsets == [31, 31, 32, 32]
    partition_listings = [
        r for r in requests if r.listing and r.key.startswith(f"{TOPIC}-") and r.key.count("/") == 2
    ]
    assert partition_listings and all("max-keys" in r.query for r in partition_listings), partition_listings


def test_a_restarted_stream_lists_from_its_checkpoint_not_everything(many_topics: dict[str, Any]) -> None:
    """A new query from a checkpoint (no memory of where it listed), far behind the topic's end: every
    trigger lists a few keys where its range is, never a partition to its end."""
    opts, proxy = many_topics["opts"], many_topics["proxy"]
    options = {**opts, "subscribe": TOPIC, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "6"}
    reader = TieredStreamReader(parse_options(options))
    start = {TOPIC: {"0": 10, "1": 10}}
    _requests(proxy)
    got: list[int] = []
    for _ in range(3):
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        parts = reader.partitions(start, end)
        requests = _requests(proxy)
        got += [o for p in parts for b in reader.read(p) for o in b.column("offset").to_pylist()]
        _requests(proxy)
        unbounded = [r for r in requests if r.listing and r.key.startswith(f"{TOPIC}-") and "max-keys" not in r.query and r.query.get("delimiter") != "/"]  # fmt: skip
        assert unbounded == [], unbounded
        start = end
    assert sorted(got) == sorted([o for o in range(10, 19) for _ in range(2)])
