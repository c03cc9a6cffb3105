"""The location record's life cycle: it follows a changed default, and `gc` ends it.

- The brokers' default `bucket` changes from A to B: new segments go to B, the older ones stay in A, and
  the readers given B's configuration (the catalog, the Spark reader, `rsm migrate verify`) must still find
  them: a broker fetching or deleting in A records A under B (`rsm.store.location_notes`), and the operator's
  step `rsm store locate --record --bucket A` records what no broker touched (README).
- `rsm migrate gc` removes the record of a topic id with nothing left in any of its locations, past the
  grace period, and nothing else: not a live topic's, not a recent one's, not one a forward or an
  unfinished migration still needs, not an object of another shape.

Segments are tiered through the real RSM (`tiering.PartitionLog`), on the file store (buckets are
directories under its root) and, for the bucket change, on moto S3.
"""

from __future__ import annotations

import json
import os
import shlex
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from harness.waiting import wait_until
from migrate_helpers import REPO, run_cli, write_properties
from tiering import PartitionLog

from rsm import RemoteStorageManager, TopicIdPartition
from rsm.api.metadata import uuid_to_base64
from rsm.catalog import TopicCatalog
from rsm.cli.main import main
from rsm.config.settings import RsmConfig
from rsm.migrate.gc_records import StaleRecords
from rsm.store.layout import Location
from rsm.store.locations import LocationRegistry
from rsm.store.objects import ObjectStore
from rsm.store.topic_encryption import EncryptionMemory
from rsm.stored.location_record import REGISTRY_DIR
from rsm.stored.topic_encryption import EncryptionState


def _rsm(configs: dict[str, str]) -> RemoteStorageManager:
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    return rsm


def _tier(log: PartitionLog, segments: int, records: int = 20) -> None:
    for _ in range(segments):
        log.append(records)
        log.roll()


def _offsets(catalog: TopicCatalog, topic: str, tid: uuid.UUID) -> dict[int, tuple[int, int]]:
    """Per partition, the first and last offset the catalog reads."""
    out = {}
    for p, h in catalog.histories(topic, tid).items():
        assert not h.gaps, (p, h.gaps)
        out[p] = (h.slices[0].first_offset, h.slices[-1].last_offset)
    return out


def _cli(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    code = main([*args, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else None


# -- the default bucket changes -------------------------------------------------------------------------------
@pytest.fixture(params=["file", "s3"])
def two_buckets(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The brokers' configuration before (default bucket A) and after (default bucket B) the change."""
    if request.param == "file":
        base = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "chunk.size": "8192"}
        return {**base, "bucket": "alpha"}, {**base, "bucket": "beta"}
    s3 = request.getfixturevalue("s3_server")
    base = s3.rsm_configs(**{"chunk.size": "8192"})
    return {**base, "bucket": s3.make_bucket()}, {**base, "bucket": s3.make_bucket()}


def _change_the_default(
    configs_a: dict[str, str], configs_b: dict[str, str], tmp_path: Path
) -> tuple[list[PartitionLog], list[PartitionLog]]:
    """Two topics tiered under A; then the default is B and one of them ("busy") tiers more.

    Returns the partition logs of "busy" (2 partitions, tiered in A then B) and of "quiet" (tiered in A
    only, never touched after the change).
    """
    busy_id, quiet_id = uuid.uuid4(), uuid.uuid4()
    rsm_a = _rsm(configs_a)
    busy = [PartitionLog(rsm_a, TopicIdPartition(busy_id, "busy", p), tmp_path / f"busy{p}") for p in (0, 1)]
    quiet = [PartitionLog(rsm_a, TopicIdPartition(quiet_id, "quiet", 0), tmp_path / "quiet0")]
    for log in busy + quiet:
        _tier(log, 2)
    rsm_a.close()
    rsm_b = _rsm(configs_b)  # the brokers restarted with the new default
    for log in busy:
        log.rsm = rsm_b
        _tier(log, 1)
    rsm_b.close()
    return busy, quiet


def _expected_offsets(logs: list[PartitionLog]) -> dict[int, tuple[int, int]]:
    return {log.tip.partition: (0, log.next_offset - 1) for log in logs}


def test_a_changed_default_bucket_keeps_every_location_readable(
    two_buckets: tuple[dict[str, str], dict[str, str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configs_a, configs_b = two_buckets
    bucket_a, bucket_b = configs_a["bucket"], configs_b["bucket"]
    busy, quiet = _change_the_default(configs_a, configs_b, tmp_path)
    busy_id, quiet_id = busy[0].tip.topic_id, quiet[0].tip.topic_id
    props_b = write_properties(tmp_path / "b.properties", configs_b)

    # what B's configuration alone shows before anything: the segments tiered since the change, no more
    before = TopicCatalog(RsmConfig(configs_b))
    assert {s.location.bucket for s in before.segments("busy", busy_id)} == {bucket_b}
    assert before.topic_ids("quiet") == {}

    # a broker (configured with B) fetches one old segment of "busy": Kafka's custom metadata says A, and
    # the RSM records A under B
    rsm_b = _rsm(configs_b)
    with rsm_b.fetch_log_segment(busy[0].copied[0], 0) as stream:
        assert stream.read(1)
    registry_b = LocationRegistry(ObjectStore.from_config(RsmConfig(configs_b)), bucket_b, "")
    wait_until(
        "the fetched location recorded under B",
        lambda: Location(bucket_a, "") in registry_b.locations("busy", busy_id),
        timeout=30,
        interval=0.1,
    )
    rsm_b.close()
    catalog = TopicCatalog(RsmConfig(configs_b), scan=False)  # the record alone
    assert _offsets(catalog, "busy", busy_id) == _expected_offsets(busy)
    # a location found by a fetch does not date the topic id (a deleted topic's old data would otherwise
    # pass for the live one): the stamp stays the one of B's copy, older than the fetch's entry
    docs = {
        doc["bucket"]: doc
        for doc in (
            json.loads(registry_b.store.get(bucket_b, key))
            for key in registry_b.store.list(bucket_b, REGISTRY_DIR)
            if f"/busy-{uuid_to_base64(busy_id)}/" in key
        )
    }
    assert docs[bucket_a]["found_by"] == "fetch" and "found_by" not in docs[bucket_b]
    assert (
        registry_b.topics()["busy"][busy_id] == docs[bucket_b]["recorded_ms"] < docs[bucket_a]["recorded_ms"]
    )

    # "quiet" was touched by no broker since the change: the operator's step, as README gives it
    code, found = _cli(
        "store", "--config", str(props_b), "locate", "--record", "--bucket", bucket_a, capsys=capsys
    )
    assert code == 0, found
    assert {f["topic"]: f["locations"] for f in found} == {
        "busy": [f"{bucket_a}/", f"{bucket_b}/"],
        "quiet": [f"{bucket_a}/"],
    }
    catalog = TopicCatalog(RsmConfig(configs_b), scan=False)
    assert _offsets(catalog, "quiet", quiet_id) == _expected_offsets(quiet)
    assert _offsets(catalog, "busy", busy_id) == _expected_offsets(busy)

    # rsm migrate verify with B's configuration checks every segment, A's and B's
    code, verified = _cli("migrate", "--config", str(props_b), "verify", capsys=capsys)
    assert code == 0 and verified["ok"], verified
    assert verified["segments"] == sum(len(log.copied) for log in busy + quiet) == 8


def test_the_operator_step_takes_an_earlier_prefix_and_refuses_bad_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A default prefix that changed (same bucket): `--bucket A --prefix OLD` reads the old record."""
    base = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    old, new = {**base, "prefix": "v1/"}, {**base, "prefix": "v2/"}
    rsm = _rsm(old)
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "orders", 0), tmp_path / "w")
    _tier(log, 2)
    rsm.close()
    props = write_properties(tmp_path / "new.properties", new)
    assert TopicCatalog(RsmConfig(new), scan=False).topic_ids("orders") == {}  # no record under v2/
    code, found = _cli(
        "store",
        "--config",
        str(props),
        "locate",
        "--record",
        "--bucket",
        "main",
        "--prefix",
        "v1/",
        capsys=capsys,
    )
    assert code == 0 and found == [
        {"topic": "orders", "topic_id": uuid_to_base64(log.tip.topic_id), "locations": ["main/v1/"]}
    ]
    catalog = TopicCatalog(RsmConfig(new), scan=False)
    assert _offsets(catalog, "orders", log.tip.topic_id) == {0: (0, 39)}

    assert main(["store", "--config", str(props), "locate", "--bucket", "mian"]) == 0  # a typo: said
    assert "no segment found in" in capsys.readouterr().err
    assert main(["store", "--config", str(props), "locate", "--bucket", "Bad_Bucket"]) == 1
    err = capsys.readouterr().err
    assert "--bucket 'Bad_Bucket'" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main(["store", "--config", str(props), "locate", "--prefix", "v1/"]) == 1
    assert "give --bucket OLD with it" in capsys.readouterr().err


def test_a_delete_in_the_old_default_records_it(tmp_path: Path) -> None:
    """Retention deleting an old segment through a broker configured with B records A under B: the topic's
    other segments there stay findable."""
    base = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "chunk.size": "8192"}
    configs_a, configs_b = {**base, "bucket": "alpha"}, {**base, "bucket": "beta"}
    rsm = _rsm(configs_a)
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "aging", 0), tmp_path / "w")
    _tier(log, 3)
    rsm.close()
    rsm = _rsm(configs_b)
    rsm.delete_log_segment_data(log.copied[0])
    rsm.close()
    catalog = TopicCatalog(RsmConfig(configs_b), scan=False)
    assert catalog.registry.locations("aging", log.tip.topic_id) == [Location("alpha", "")]
    assert _offsets(catalog, "aging", log.tip.topic_id) == {0: (20, 59)}


def test_the_readme_step_as_written(tmp_path: Path) -> None:
    """The command README gives for the operator, run as `rsm` (a subprocess) with its placeholders filled."""
    readme = (REPO / "README.md").read_text()
    [line] = [x for x in readme.splitlines() if x.startswith("rsm store") and "--bucket OLD_BUCKET" in x]
    base = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "chunk.size": "8192"}
    configs_a, configs_b = {**base, "bucket": "alpha"}, {**base, "bucket": "beta"}
    busy, quiet = _change_the_default(configs_a, configs_b, tmp_path)
    props = write_properties(tmp_path / "server.properties", configs_b)
    args = shlex.split(line.replace("[--prefix OLD_PREFIX]", ""))[1:]
    args = [str(props) if a == "server.properties" else "alpha" if a == "OLD_BUCKET" else a for a in args]
    done = run_cli(args)
    assert done.returncode == 0, done.stderr
    catalog = TopicCatalog(RsmConfig(configs_b), scan=False)
    assert _offsets(catalog, "busy", busy[0].tip.topic_id) == _expected_offsets(busy)
    assert _offsets(catalog, "quiet", quiet[0].tip.topic_id) == _expected_offsets(quiet)


def test_the_reader_with_the_new_default_reads_the_old_one_too(spark: Any, tmp_path: Path) -> None:
    import spark_reader

    spark_reader.register(spark)
    base = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "chunk.size": "8192"}
    configs_a, configs_b = {**base, "bucket": "alpha"}, {**base, "bucket": "beta"}
    busy, quiet = _change_the_default(configs_a, configs_b, tmp_path)
    props_b = write_properties(tmp_path / "b.properties", configs_b)

    def read(topic: str) -> list[tuple[int, int, bytes]]:
        df = (
            spark.read.format("kafka-tiered")
            .option("rsm.properties", str(props_b))
            .option("subscribe", topic)
        )
        return sorted((r["partition"], r["offset"], r["value"]) for r in df.load().collect())

    def expected(logs: list[PartitionLog]) -> list[tuple[int, int, bytes]]:
        return sorted((log.tip.partition, r.offset, r.value) for log in logs for r in log.records)  # type: ignore[misc]

    assert read("busy") == [row for row in expected(busy) if row[1] >= 40]  # B's segments only, so far
    assert main(["store", "--config", str(props_b), "locate", "--record", "--bucket", "alpha"]) == 0
    assert read("busy") == expected(busy)
    assert read("quiet") == expected(quiet)


# -- gc of location records -------------------------------------------------------------------------------------
def _age(root: Path, bucket: str, key: str, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(root / bucket / key, (t, t))


def _record_keys(root: Path, bucket: str, topic: str, tid: uuid.UUID) -> list[str]:
    directory = root / bucket / REGISTRY_DIR / f"{topic}-{uuid_to_base64(tid)}"
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def test_gc_removes_a_deleted_topics_records_and_nothing_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    configs = {
        "storage.backend": "file",
        "storage.file.root": str(root),
        "bucket": "main",
        "chunk.size": "8192",
    }
    props = write_properties(tmp_path / "server.properties", configs)
    rsm = _rsm(configs)
    logs: dict[str, PartitionLog] = {}
    for name in ("gone", "live", "recent", "forwarded", "migrating", "elsewhere"):
        logs[name] = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), name, 0), tmp_path / name)
        _tier(logs[name], 1)
    # "gone" and "elsewhere" wrote to a second location too (their overlay's bucket and prefix at the time)
    for name in ("gone", "elsewhere"):
        logs[name].log_config = {"unchecked.rsm.bucket": "cold", "unchecked.rsm.prefix": "c/"}
        _tier(logs[name], 1)
    assert main(["store", "--config", str(props), "locate", "--record"]) == 0  # a _complete.json each
    capsys.readouterr()
    ids = {name: log.tip.topic_id for name, log in logs.items()}
    # Kafka deletes every topic but "live": each segment through the RSM
    for name in ("gone", "recent", "forwarded", "migrating"):
        for md in logs[name].copied:
            rsm.delete_log_segment_data(md, logs[name].log_config)
    rsm.delete_log_segment_data(logs["elsewhere"].copied[0])  # its segment in cold/c/ stays
    rsm.close()
    store = ObjectStore.from_config(RsmConfig(configs))
    # "forwarded": a move's forward is still there; "migrating": an unfinished migration names it
    seg = logs["forwarded"].copied[0]
    fwd = f"forwarded-{uuid_to_base64(ids['forwarded'])}/0/{0:020d}-{seg.remote_log_segment_id.id_base64}.forward"
    store.put("main", fwd, b"{}")
    job = {"format": "kafka-tiered-rsm/migrate-job", "version": 1, "job_id": "move-migrating-0123456789ab",
           "command": "move", "topic": "migrating", "topic_id": uuid_to_base64(ids["migrating"]), "params": {},
           "run": 1, "status": "running"}  # fmt: skip
    store.put("main", "_rsm/migrate/move-migrating-0123456789ab/job.json", json.dumps(job).encode())
    # objects of other shapes beside the records, and elsewhere
    stray = f"{REGISTRY_DIR}gone-{uuid_to_base64(ids['gone'])}/notes.txt"
    store.put("main", stray, b"an operator's note")
    store.put("main", "README.txt", b"not ours")
    # "gone" and "live" were encrypted: their encryption memory goes with the record, and only then
    memory = EncryptionMemory(store, Location("main", ""))
    for name in ("gone", "live"):
        memory.write(name, ids[name], EncryptionState("k1", "encryption.key.id", False))
        _age(root, "main", memory.key(name, ids[name]), 7200)
    records = {name: _record_keys(root, "main", name, tid) for name, tid in ids.items()}
    assert len(records["gone"]) == 5  # two locations, the marker, the note, the deletes' log-start mark
    for name in ("gone", "live", "forwarded", "migrating", "elsewhere"):  # "recent" stays young
        for leaf in records[name]:
            _age(root, "main", f"{REGISTRY_DIR}{name}-{uuid_to_base64(ids[name])}/{leaf}", 7200)

    code, dry = _cli("migrate", "--config", str(props), "gc", capsys=capsys)
    stale = [o for o in dry["orphans"] if o["kind"] == "location record"]
    assert code == 3 and dry["removed"] == 0 and dry["removable"] == 1
    assert len(stale) == 2, stale  # "gone" (removable) and "recent" (inside the grace period)
    by_topic = {("gone" if "/gone-" in o["objects"][0] else "recent"): o for o in stale}
    assert by_topic["gone"]["removable"] and not by_topic["recent"]["removable"]
    assert by_topic["gone"]["objects"][0].endswith("/_complete.json")  # the marker goes first
    assert len(by_topic["gone"]["objects"]) == 5 and "cold/c/" in by_topic["gone"]["why"]
    assert by_topic["gone"]["objects"][-1].endswith(memory.key("gone", ids["gone"]))
    assert {name: _record_keys(root, "main", name, tid) for name, tid in ids.items()} == records  # dry run

    code, applied = _cli("migrate", "--config", str(props), "gc", "--apply", capsys=capsys)
    assert code == 0 and applied["removed"] == 1, applied
    after = {name: _record_keys(root, "main", name, tid) for name, tid in ids.items()}
    assert after["gone"] == ["notes.txt"]  # not of the record's shape: left alone
    assert {k: v for k, v in after.items() if k != "gone"} == {
        k: v for k, v in records.items() if k != "gone"
    }
    assert store.exists("main", "README.txt") and store.exists("main", fwd)
    assert not store.exists("main", memory.key("gone", ids["gone"]))
    assert store.exists("main", memory.key("live", ids["live"]))
    assert store.exists("main", "_rsm/migrate/move-migrating-0123456789ab/job.json")
    catalog = TopicCatalog(RsmConfig(configs))
    assert catalog.topic_ids("gone") == {}
    assert _offsets(catalog, "live", ids["live"]) == {0: (0, 19)}

    # once the migration completed, its record goes too; "--topic" limits gc to one topic's ids
    store.put("main", "_rsm/migrate/move-migrating-0123456789ab/job.json",
              json.dumps({**job, "status": "complete"}).encode())  # fmt: skip
    code, one = _cli("migrate", "--config", str(props), "gc", "--topic", "live", "--apply", capsys=capsys)
    assert code == 0 and one["orphans"] == []
    code, applied = _cli("migrate", "--config", str(props), "gc", "--apply", capsys=capsys)
    assert code == 0 and [o["objects"][0].split("/")[-2] for o in applied["orphans"] if o["removable"]] == [
        f"migrating-{uuid_to_base64(ids['migrating'])}"
    ]
    assert _record_keys(root, "main", "migrating", ids["migrating"]) == []
    assert _record_keys(root, "main", "forwarded", ids["forwarded"]) == records["forwarded"]


def test_gc_gives_back_a_record_written_to_while_it_was_removed(tmp_path: Path) -> None:
    """A copy that recorded its location earlier in its process uploads while gc removes the record: the
    listing after the removal sees its object and the record is written back."""
    root = tmp_path / "store"
    configs = {"storage.backend": "file", "storage.file.root": str(root), "bucket": "main"}
    rsm = _rsm(configs)
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "events", 0), tmp_path / "w")
    _tier(log, 1)
    rsm.delete_log_segment_data(log.copied[0])
    store = ObjectStore.from_config(RsmConfig(configs))
    records = StaleRecords(store, Location("main", ""))
    [orphan] = records.scan()
    before = {k: store.get("main", k) for k in orphan.keys}

    def copy_lands(topic_id: uuid.UUID) -> None:
        store.put("main", f"events-{uuid_to_base64(topic_id)}/0/{20:020d}-{'A' * 22}.log", b"x")

    records.registry.forget = copy_lands  # type: ignore[method-assign]  # between the deletes and the last listing
    assert records.remove(orphan) is False
    assert {k: store.get("main", k) for k in orphan.keys} == before


def test_gc_of_records_on_s3_waits_for_an_abandoned_upload(
    s3_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On S3 an incomplete multipart upload under the topic keeps its record: gc aborts the upload (an
    orphan) and removes the record on its next run. moto cannot age objects: `--grace 0`."""
    configs = s3_server.rsm_configs(bucket=s3_server.make_bucket(), **{"chunk.size": "8192"})
    props = write_properties(tmp_path / "server.properties", configs)
    rsm = _rsm(configs)
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "gone", 0), tmp_path / "w")
    _tier(log, 1)
    rsm.delete_log_segment_data(log.copied[0])
    rsm.close()
    store = ObjectStore.from_config(RsmConfig(configs))
    bucket, tid = configs["bucket"], uuid_to_base64(log.tip.topic_id)
    store.fs.call_s3("create_multipart_upload", Bucket=bucket, Key=f"gone-{tid}/0/{20:020d}-{'D' * 22}.log")

    code, first = _cli("migrate", "--config", str(props), "gc", "--grace", "0", "--apply", capsys=capsys)
    assert code == 0 and [o["kind"] for o in first["orphans"]] == ["multipart upload"], first
    assert store.list(bucket, f"{REGISTRY_DIR}gone-{tid}/")
    code, second = _cli("migrate", "--config", str(props), "gc", "--grace", "0", "--apply", capsys=capsys)
    assert code == 0 and [o["kind"] for o in second["orphans"]] == ["location record"], second
    assert second["removed"] == 1 and store.list(bucket, f"{REGISTRY_DIR}gone-{tid}/") == []
