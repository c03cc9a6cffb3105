"""`rsm migrate` on the file store and moto S3: move, rekey, re-encrypt, verify, gc, the CLI's contract.

An encrypted three-partition topic is tiered through the real RSM (`migrate_helpers.tier_topic`), keeping
the metadata Kafka would hold (custom metadata naming the location at copy time) and the broker's original
bytes. After each migration, fetching through that old metadata must give the original bytes, the catalog
must read every offset once, and the store must hold nothing the migration should have removed.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import pytest
from kafka_segments import write_keyring
from migrate_helpers import Tiered, objects, tier_topic, topic_keys, write_properties

from rsm.api.errors import RemoteResourceNotFoundException
from rsm.cli.main import main
from rsm.migrate import gc as gc_
from rsm.store.objects import ObjectStore
from rsm.store.overlays import TopicOverlayStore
from rsm.stored.manifest import Manifest


@pytest.fixture(params=["file", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    if request.param == "file":
        return {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main",
                "test.other": "cold"}  # fmt: skip
    s3 = request.getfixturevalue("s3_server")
    return s3.rsm_configs(bucket=s3.make_bucket(), **{"test.other": s3.make_bucket()})


def _split(store: dict[str, str]) -> tuple[dict[str, str], str]:
    return {k: v for k, v in store.items() if not k.startswith("test.")}, store["test.other"]


def _cli(tiered: Tiered, *args: str, capsys: pytest.CaptureFixture[str] | None = None) -> tuple[int, dict]:
    code = main(["migrate", "--config", str(tiered.props), *args, "--json"])
    doc = json.loads(capsys.readouterr().out) if capsys is not None else {}
    return code, doc


def _manifests(tiered: Tiered) -> dict[str, Manifest]:
    catalog = tiered.catalog()
    return {s.manifest_key: s.manifest for s in catalog.segments(tiered.topic, tiered.topic_id)}


# -- move -------------------------------------------------------------------------------------------------------
def test_move_then_rekey_an_encrypted_topic(
    store: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configs, other = _split(store)
    tiered = tier_topic(tmp_path / "t", configs)
    before = tiered.history_offsets()
    assert before == tiered.expected_offsets()
    src_bucket = configs["bucket"]

    # the plan first: nothing changes
    code, plan = _cli(tiered, "move", "--topic", "orders", "--to-bucket", other, "--to-prefix", "moved/", "--dry-run",
                      capsys=capsys)  # fmt: skip
    assert code == 0 and plan["dry_run"] and plan["segments"] == 9 and plan["bytes"] > 0
    assert {i["destination"]["prefix"] for i in plan["items"]} == {"moved/"}
    assert len(topic_keys(objects(configs, src_bucket), "orders")) == 27

    code, report = _cli(tiered, "move", "--topic", "orders", "--to-bucket", other, "--to-prefix", "moved/",
                        "--parallel", "3", capsys=capsys)  # fmt: skip
    assert code == 0, report
    assert report["summary"] == {"items": 9, "bytes": report["summary"]["bytes"], "done": 9}
    # the source keeps only forwards; the destination the segments
    left = topic_keys(objects(configs, src_bucket), "orders")
    assert left and all(k.endswith(".forward") for k in left) and len(left) == 9
    moved = topic_keys(objects(configs, other, "moved/"), "orders")
    assert len(moved) == 27 and all(k.startswith("moved/orders-") for k in moved)
    # brokers still fetch through the old custom metadata; the catalog reads every offset once
    tiered.check_fetch()
    assert tiered.history_offsets() == before
    assert {m.location["prefix"] for m in _manifests(tiered).values()} == {"moved/"}

    # run twice: nothing to do
    code, again = _cli(
        tiered, "move", "--topic", "orders", "--to-bucket", other, "--to-prefix", "moved/", capsys=capsys
    )
    assert code == 0 and again["summary"]["items"] == 0

    # rekey: manifests re-wrapped under k2, data untouched
    logs_before = {k: v for k, v in objects(configs, other, "moved/").items() if k.endswith(".log")}
    code, report = _cli(tiered, "rekey", "--topic", "orders", "--key-id", "k2", capsys=capsys)
    assert code == 0 and report["summary"]["done"] == 9
    assert {m.encryption.key_id for m in _manifests(tiered).values()} == {"k2"}
    assert {k: v for k, v in objects(configs, other, "moved/").items() if k.endswith(".log")} == logs_before
    tiered.check_fetch()
    code, verified = _cli(tiered, "verify", "--topic", "orders", "--deep", "--retire", "k1", capsys=capsys)
    assert code == 0 and verified["ok"] and verified["key_ids"] == {"k2": 9}, verified

    # deleting through the old metadata removes every copy and every forward
    rsm = tiered.rsm()
    for md, _ in tiered.originals:
        rsm.delete_log_segment_data(md)
        with pytest.raises(RemoteResourceNotFoundException):
            rsm.fetch_log_segment(md, 0)
    rsm.close()
    assert topic_keys(objects(configs, src_bucket), "orders") == []
    assert topic_keys(objects(configs, other), "orders") == []


def test_move_to_the_topics_configured_location(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without flags the destination is the topic's configuration: its overlay over the broker's."""
    configs = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    tiered = tier_topic(tmp_path / "t", configs, partitions=1, segments=2)
    store = ObjectStore.from_config(tiered.catalog().config)
    TopicOverlayStore(store, "main").write(tiered.topic, tiered.topic_id,
                                           {"unchecked.rsm.bucket": "cold", "unchecked.rsm.prefix": "archive/"})  # fmt: skip
    code, report = _cli(tiered, "move", "--topic", "orders", capsys=capsys)
    assert code == 0 and report["summary"]["done"] == 2
    assert {m.location["bucket"] + "/" + m.location["prefix"] for m in _manifests(tiered).values()} == {
        "cold/archive/"
    }
    tiered.check_fetch()
    # the new location is in the topic's location record, so a catalog that trusts the record finds it
    catalog = tiered.catalog()
    assert any(loc.bucket == "cold" for loc in catalog.registry.locations(tiered.topic, tiered.topic_id))


def test_move_one_partition_and_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Moving a partition away and back leaves a chain of forwards that fetch and delete still follow."""
    configs = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    tiered = tier_topic(tmp_path / "t", configs, partitions=2, segments=2)
    for prefix in ("a/", "b/", ""):
        code, report = _cli(
            tiered, "move", "--topic", "orders", "--partition", "1", "--to-prefix", prefix, capsys=capsys
        )
        assert code == 0 and report["summary"]["done"] == 2, report
        tiered.check_fetch()
        assert tiered.history_offsets() == tiered.expected_offsets()
    # back home: the manifest is where the custom metadata points, with stale forwards along the way removed
    keys = topic_keys(objects(configs, "main"), "orders")
    assert not [k for k in keys if k.startswith(("a/", "b/")) and not k.endswith(".forward")]
    rsm = tiered.rsm()
    for md, _ in tiered.originals:
        rsm.delete_log_segment_data(md)
    assert topic_keys(objects(configs, "main"), "orders") == []


def test_dry_runs_change_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configs = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    tiered = tier_topic(tmp_path / "t", configs, partitions=1, segments=2)
    before = objects(configs, "main")
    for args in (["move", "--topic", "orders", "--to-prefix", "x/"], ["rekey", "--topic", "orders", "--key-id", "k2"],
                 ["rekey", "--topic", "orders", "--reencrypt", "--key-id", "k2"],
                 ["rekey", "--topic", "orders", "--encryption", "off"], ["gc", "--grace", "0"],
                 ["export", "--topic", "orders", "--partition", "0", "--dir", str(tmp_path / "out")]):  # fmt: skip
        assert main(["migrate", "--config", str(tiered.props), *args, "--dry-run"]) == 0, args
    capsys.readouterr()
    assert objects(configs, "main") == before
    assert not (tmp_path / "out").exists()


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configs = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    tiered = tier_topic(tmp_path / "t", configs, partitions=1, segments=1)
    assert main(["migrate", "--config", str(tiered.props), "move", "--topic", "nope"]) == 1
    assert (
        main(["migrate", "--config", str(tiered.props), "move", "--topic", "orders", "--to-prefix", "/abs"])
        == 1
    )
    assert (
        main(["migrate", "--config", str(tiered.props), "rekey", "--topic", "orders", "--key-id", "k9"]) == 1
    )
    assert main(["migrate", "--config", str(tiered.props)]) == 2
    assert main(["migrate", "move", "--topic", "orders"]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("rsm migrate")]
    assert len(lines) == 5, err
    assert "nope" in lines[0] and "--to-prefix" in lines[1] and "k9" in lines[2]


def test_a_run_holding_the_journal_is_not_doubled(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configs = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    tiered = tier_topic(tmp_path / "t", configs, partitions=1, segments=1)
    code, plan = _cli(tiered, "move", "--topic", "orders", "--to-prefix", "x/", "--dry-run", capsys=capsys)
    job = plan["job"]
    lock = {"host": "elsewhere", "pid": 1, "run": 1, "started_ms": 0, "heartbeat_ms": int(time.time() * 1000)}
    store = ObjectStore.from_config(tiered.catalog().config)
    store.put("main", f"_rsm/migrate/{job}/lock.json", json.dumps(lock).encode())
    assert (
        main(["migrate", "--config", str(tiered.props), "move", "--topic", "orders", "--to-prefix", "x/"])
        == 1
    )
    assert "--force" in capsys.readouterr().err
    code, report = _cli(tiered, "move", "--topic", "orders", "--to-prefix", "x/", "--force", capsys=capsys)
    assert code == 0 and report["summary"]["done"] == 1


# -- rekey, re-encrypt ------------------------------------------------------------------------------------------
def test_reencrypt_and_encryption_off_and_on(
    store: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configs, _ = _split(store)
    tiered = tier_topic(tmp_path / "t", configs, partitions=2, segments=2)
    bucket = configs["bucket"]
    wrapped = {k: m.encryption.wrapped_key for k, m in _manifests(tiered).items()}
    logs = {k: v for k, v in objects(configs, bucket).items() if k.endswith(".log")}

    code, report = _cli(tiered, "rekey", "--topic", "orders", "--reencrypt", "--key-id", "k2", capsys=capsys)
    assert code == 0 and report["summary"]["done"] == 4, report
    after = _manifests(tiered)
    assert set(after) == set(wrapped)  # in place: same keys
    assert {m.encryption.key_id for m in after.values()} == {"k2"}
    new_logs = {k: v for k, v in objects(configs, bucket).items() if k.endswith(".log")}
    assert set(new_logs) == set(logs) and all(new_logs[k] != logs[k] for k in logs)  # fresh data keys
    tiered.check_fetch()
    assert tiered.history_offsets() == tiered.expected_offsets()
    assert not [k for k in objects(configs, bucket) if "_rsm-staging/" in k or k.endswith(".forward")]
    # sticky: running it again re-encrypts nothing
    code, report = _cli(tiered, "rekey", "--topic", "orders", "--reencrypt", "--key-id", "k2", capsys=capsys)
    assert (
        code == 0 and report["summary"]["items"] == 0 or set(report["summary"]) <= {"items", "bytes", "done"}
    )
    assert {k: v for k, v in objects(configs, bucket).items() if k.endswith(".log")} == new_logs

    code, report = _cli(tiered, "rekey", "--topic", "orders", "--encryption", "off", capsys=capsys)
    assert code == 0 and report["summary"]["done"] == 4
    assert all(m.encryption is None and m.log.crc32c is not None for m in _manifests(tiered).values())
    tiered.check_fetch()
    code, verified = _cli(tiered, "verify", "--topic", "orders", "--deep", capsys=capsys)
    assert code == 0 and verified["key_ids"] == {"(unencrypted)": 4}

    code, report = _cli(
        tiered, "rekey", "--topic", "orders", "--encryption", "on", "--key-id", "k3", capsys=capsys
    )
    assert code == 0 and report["summary"]["done"] == 4
    assert {m.encryption.key_id for m in _manifests(tiered).values()} == {"k3"}
    tiered.check_fetch()


# -- verify and gc ----------------------------------------------------------------------------------------------
def _age(configs: dict[str, str], bucket: str, key: str, seconds: float) -> None:
    path = Path(configs["storage.file.root"]) / bucket / key
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_verify_finds_damage_orphans_and_unknown_keys_and_gc_removes_old_orphans(
    store: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configs, _ = _split(store)
    keyring = write_keyring(tmp_path / "keyring.json", ("k1", "k2", "gone"))
    tiered = tier_topic(tmp_path / "t", configs, partitions=2, segments=3, keyring=keyring)
    bucket = configs["bucket"]
    s3 = configs["storage.backend"] == "s3"
    ostore = ObjectStore.from_config(tiered.catalog().config)
    code, verified = _cli(tiered, "verify", "--topic", "orders", "--deep", capsys=capsys)
    assert code == 0 and verified["ok"], verified

    segs = tiered.catalog().segments(tiered.topic, tiered.topic_id)
    flipped, truncated, no_indexes = segs[0], segs[1], segs[2]
    # a flipped byte inside a chunk
    raw = bytearray(ostore.get(bucket, flipped.manifest.location["log"]))
    raw[len(raw) // 2] ^= 0x40
    ostore.put(bucket, flipped.manifest.location["log"], bytes(raw))
    # a missing chunk: the .log object lost its last chunk
    raw = ostore.get(bucket, truncated.manifest.location["log"])
    ostore.put(bucket, truncated.manifest.location["log"], raw[: truncated.manifest.log.offsets[-2]])
    # a missing object
    ostore.delete(bucket, no_indexes.manifest.location["indexes"])
    # a segment encrypted under a key id later taken out of the keyring
    rsm = tiered.rsm()
    log = tiered.logs[1]
    log.rsm = rsm
    log.log_config = {"unchecked.rsm.encryption.key.id": "gone"}
    log.append(50)
    log.roll()
    rsm.close()
    keys = json.loads(keyring.read_text())
    del keys["gone"]
    keyring.write_text(json.dumps(keys))
    # orphans: an interrupted copy (objects, no manifest), old; another one fresh (in flight)
    for age, name in ((7200, "old"), (0, "fresh")):
        stem = f"orders-{segs[0].manifest.segment.topic_id}/0/{99999 + age:020d}-{uuid.uuid4().hex[:22]}"
        stem = stem[:-22] + "AAAAAAAAAAAAAAAAAAAAA" + ("A" if name == "old" else "B")
        ostore.put(bucket, stem + ".log", b"x" * 100)
        if not s3:
            _age(configs, bucket, stem + ".log", age)
    if not s3:  # a killed writer's temporary file, old
        tmp_key = f"orders-{segs[0].manifest.segment.topic_id}/0/.{0:020d}-{'C' * 22}.log.tmp-0123456789ab"
        path = Path(configs["storage.file.root"]) / bucket / tmp_key
        path.write_bytes(b"partial")
        _age(configs, bucket, tmp_key, 7200)
    else:  # an abandoned multipart upload
        s3c = ostore.fs
        s3c.call_s3("create_multipart_upload", Bucket=bucket,
                    Key=f"orders-{segs[0].manifest.segment.topic_id}/0/{1:020d}-{'D' * 22}.log")  # fmt: skip

    code, verified = _cli(tiered, "verify", "--topic", "orders", "--deep", capsys=capsys)
    assert code == 3 and not verified["ok"]
    kinds = {(p["kind"], p["object"].rsplit("/", 1)[-1]) for p in verified["problems"]}
    name = lambda seg, what: seg.manifest.location[what].rsplit("/", 1)[-1]  # noqa: E731
    assert ("corrupt", name(flipped, "log")) in kinds
    assert ("corrupt", name(truncated, "log")) in kinds
    assert ("missing", name(no_indexes, "indexes")) in kinds
    assert [p for p in verified["problems"] if p["kind"] == "unknown-key" and "'gone'" in p["detail"]]
    orphan_kinds = sorted(o["kind"] for o in verified["orphans"])
    assert orphan_kinds == sorted(["segment objects", "segment objects"]
                                  + (["multipart upload"] if s3 else ["temporary file"])), verified["orphans"]  # fmt: skip
    # the shallow verify finds the same damage (GCM tags, sizes)
    code, shallow = _cli(tiered, "verify", "--topic", "orders", capsys=capsys)
    assert code == 3 and {(p["kind"], p["object"]) for p in shallow["problems"]} == {
        (p["kind"], p["object"]) for p in verified["problems"]
    }

    grace = (
        "1h" if not s3 else "0"
    )  # moto's objects cannot be aged: on S3 the fresh one is kept by time below
    code, dry = _cli(tiered, "gc", "--topic", "orders", "--grace", grace, capsys=capsys)
    assert code == 3 and dry["removed"] == 0
    if s3:
        # a 1 h grace keeps the objects just written; moto dates every multipart upload 2010-11-10, so the
        # abandoned upload is old enough and aborted
        code, kept = _cli(tiered, "gc", "--topic", "orders", "--apply", capsys=capsys)
        assert code == 0 and kept["removed"] == 1, kept
        assert [o["kind"] for o in kept["orphans"] if o["removable"]] == ["multipart upload"]
        assert not ostore.fs.call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads")
    code, applied = _cli(tiered, "gc", "--topic", "orders", "--grace", grace, "--apply", capsys=capsys)
    assert code == 0 and applied["removed"] == 2, applied
    left = gc_.scan(ostore, [(bucket, f"orders-{segs[0].manifest.segment.topic_id}/")])
    if s3:
        assert left == []
    else:
        assert [o.keys[0].rsplit("/", 1)[-1] for o in left] == [f"{99999:020d}-{'A' * 21}B.log"]
    # gc never touches committed segments: the damaged ones are still there for the operator
    assert ostore.exists(bucket, flipped.manifest_key) and ostore.exists(bucket, truncated.manifest_key)


def test_gc_keeps_forwards_of_moves_and_removes_dangling_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configs = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    tiered = tier_topic(tmp_path / "t", configs, partitions=1, segments=2)
    _cli(tiered, "move", "--topic", "orders", "--to-prefix", "x/", capsys=capsys)
    forwards = [k for k in objects(configs, "main") if k.endswith(".forward")]
    assert len(forwards) == 2
    for k in forwards:
        _age(configs, "main", k, 7200)
    code, dry = _cli(tiered, "gc", "--grace", "0", capsys=capsys)
    assert code == 0 and dry["orphans"] == []
    # the segment deleted by other means than the RSM (its copy at x/ removed): the forward leads nowhere
    store = ObjectStore.from_config(tiered.catalog().config)
    seg = tiered.catalog().segments(tiered.topic, tiered.topic_id)[0]
    for key in (seg.manifest_key, seg.manifest.location["log"], seg.manifest.location["indexes"]):
        store.delete("main", key)
    code, applied = _cli(tiered, "gc", "--grace", "0", "--apply", capsys=capsys)
    assert (
        code == 0
        and [o["kind"] for o in applied["orphans"]] == ["dangling forward"]
        and applied["removed"] == 1
    )
    assert len([k for k in objects(configs, "main") if k.endswith(".forward")]) == 1


def test_properties_of_bare_rsm_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--config` also takes an rsm.properties of bare keys."""
    configs = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    tiered = tier_topic(tmp_path / "t", configs, partitions=1, segments=1, encrypted=False)
    bare = tmp_path / "rsm.properties"
    bare.write_text("".join(f"{k}={v}\n" for k, v in tiered.configs.items()))
    assert main(["migrate", "--config", str(bare), "verify", "--topic", "orders", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"]
    write_properties(tmp_path / "unused.properties", {})


def test_a_copy_onto_a_link_of_itself_leaves_no_temporary_file(tmp_path: Path) -> None:
    """A resumed move copies again onto what its killed run linked: rename() between two links of one file
    does nothing, so the temporary name must be removed by hand."""
    from rsm.config.settings import RsmConfig
    from rsm.migrate.transfer import copy_object

    store = ObjectStore.from_config(
        RsmConfig({"storage.backend": "file", "storage.file.root": str(tmp_path)})
    )
    store.put("b", "d/x.log", b"data" * 100)
    for _ in range(2):
        assert copy_object(store, "b", "d/x.log", "b", "e/x.log") == 400
    assert store.list("b", include_temporary=True) == ["d/x.log", "e/x.log"]
    assert copy_object(store, "b", "d/x.log", "b", "f/x.log", link=False) == 400
    assert store.get("b", "f/x.log") == b"data" * 100


def _kafka_dir(root: Path, topic_id: uuid.UUID, *, corrupt: bool = False) -> Path:
    """`events-0/`: two segments as a broker keeps them (headers on half the records), its checkpoint and
    partition.metadata."""
    from segment_format.writer import SegmentWriter, build_batch

    pdir = root / "events-0"
    for base in (0, 100):
        with SegmentWriter(pdir, base, index_interval_bytes=1024) as w:
            for b in range(5):
                recs = [(b"k", b"v" * 50, (("h", b"1"),) if (base + b) % 2 else (), 1_700_000_000_000 + base + b)
                        for _ in range(20)]  # fmt: skip
                w.append(build_batch(recs, base_offset=base + b * 20, partition_leader_epoch=0))
    (pdir / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
    (pdir / "partition.metadata").write_text(f"version: 0\ntopic_id: {topic_id}\n")
    if corrupt:
        log = pdir / f"{100:020d}.log"
        raw = bytearray(log.read_bytes())
        raw[200] ^= 1
        log.write_bytes(bytes(raw))
    return pdir


def test_import_applies_the_integrity_check_and_the_topics_validation_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rsm.api.metadata import uuid_to_base64

    configs = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main",
               "record.validation.policy.class.name": "rsm.validation:RequireHeaderValidationPolicy"}  # fmt: skip
    tiered = tier_topic(tmp_path / "t", configs, partitions=1, segments=1, encrypted=False)
    tid = uuid.uuid4()
    store = ObjectStore.from_config(tiered.catalog().config)
    TopicOverlayStore(store, "main").write("events", tid, {"unchecked.record.validation.policy": "h"})
    pdir = _kafka_dir(tmp_path / "kafka", tid)
    code, report = _cli(tiered, "import", "--dir", str(pdir), capsys=capsys)
    assert code == 3 and report["summary"]["failed"] == 2, report
    assert all("violate policy 'h'" in r["message"] for r in report["results"])
    TopicOverlayStore(store, "main").write("events", tid, {"unchecked.record.validation.policy": "h",
                                                           "unchecked.rsm.record.validation.on.violation": "tier"})  # fmt: skip
    code, report = _cli(tiered, "import", "--dir", str(pdir), capsys=capsys)
    assert code == 0 and report["summary"]["done"] == 2, report
    segs = tiered.catalog().segments("events", tid)
    assert [s.manifest.validation["violation_count"] for s in segs] == [60, 60]
    assert [s.manifest.segment.topic_id for s in segs] == [uuid_to_base64(tid)] * 2
    # a corrupt segment is refused naming the file and the byte
    bad = _kafka_dir(tmp_path / "bad", uuid.uuid4(), corrupt=True)
    code, report = _cli(tiered, "import", "--dir", str(bad), capsys=capsys)
    assert code == 3 and report["summary"] == {
        "items": 2,
        "bytes": report["summary"]["bytes"],
        "done": 1,
        "failed": 1,
    }
    (failed,) = [r for r in report["results"] if r["status"] == "failed"]
    assert f"{100:020d}.log" in failed["message"] and "crc" in failed["message"].lower()


# -- metrics ----------------------------------------------------------------------------------------------------
def test_migrate_serves_its_figures_on_prometheus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`metrics.prometheus.port` in the configuration: `rsm migrate` serves rsm_migrate_* while it runs, the
    segments by command and status and their bytes equal to what its report says."""
    from harness.ports import free_port
    from test_metrics import scrape

    port = free_port()
    configs = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main",
               "metrics.prometheus.port": str(port), "metrics.prometheus.host": "127.0.0.1"}  # fmt: skip
    tiered = tier_topic(tmp_path / "t", configs, topic="metered", partitions=2, segments=2)
    try:
        code, moved = _cli(tiered, "move", "--topic", "metered", "--to-prefix", "m/", capsys=capsys)
        assert code == 0 and moved["summary"]["done"] == 4, moved
        code, verified = _cli(tiered, "verify", "--topic", "metered", capsys=capsys)
        assert code == 0, verified
        got = scrape(port)

        def value(name: str, **labels: str) -> float:
            return got.get((name, tuple(sorted({"topic": "metered", **labels}.items()))), 0.0)

        assert value("rsm_migrate_segments_total", command="move", status="done") == 4
        for p in (0, 1):
            assert value("rsm_migrate_segments_total", partition=str(p), command="move", status="done") == 2
        assert value("rsm_migrate_bytes_total", command="move") == moved["summary"]["bytes"] > 0
        assert value("rsm_migrate_segments_total", command="verify", status="done") == 4
        assert value("rsm_migrate_segments_total", command="move", status="failed") == 0
    finally:
        from rsm import metrics

        metrics.stop_prometheus(port)
