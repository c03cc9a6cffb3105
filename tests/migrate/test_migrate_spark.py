"""`rsm migrate` with the Spark reader, the Spark engine and Kafka's own classes as the judges.

- after a move, a re-key and a re-encryption, `format("kafka-tiered")` returns the same rows as before (what
  a consumer of the tiered log reads) and the RSM's fetch the same bytes;
- the Spark engine leaves the store exactly as the local engine does;
- a Kafka partition directory written by Kafka's own classes (the Java oracle), imported, reads back through
  the Spark reader as the records Kafka was handed; exported again it is, file for file, what Kafka wrote,
  and Kafka's classes (`FileRecords` dumps and checks, `DumpLogSegments` with index verification) read it
  record for record.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from migrate_helpers import REPO, Tiered, objects, tier_topic, topic_keys, write_properties
from test_spark_reader import _expected, _read, _rows

from rsm.api.metadata import uuid_to_base64
from rsm.cli.main import main
from segment_format.leader_epoch import LeaderEpochCheckpoint
from segment_format.producer_snapshot import ProducerSnapshot
from segment_format.writer import SegmentWriter, build_batch

# Spark's Python workers import this checkout's packages (the migration's Spark engine pickles its tasks by
# reference to `rsm.migrate`): set before any test starts the session (this runs at collection)
if str(REPO) not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)


@pytest.fixture(scope="module")
def tiered_spark(spark):  # noqa: ANN001, ANN201
    import spark_reader

    spark_reader.register(spark)
    return spark


def _spark_rows(spark, tiered: Tiered) -> list[tuple[Any, ...]]:  # noqa: ANN001
    return _rows(_read(spark, tiered.configs, subscribe=tiered.topic, includeHeaders="true"))


def _cli(tiered: Tiered, *args: str) -> int:
    return main(["migrate", "--config", str(tiered.props), *args, "--json"])


@pytest.fixture(params=["file", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[dict[str, str], str]:
    if request.param == "file":
        return {
            "storage.backend": "file",
            "storage.file.root": str(tmp_path / "store"),
            "bucket": "main",
        }, "cold"
    s3 = request.getfixturevalue("s3_server")
    return s3.rsm_configs(bucket=s3.make_bucket()), s3.make_bucket()


def test_spark_reads_the_same_rows_after_move_rekey_and_reencryption(
    tiered_spark, store: tuple[dict[str, str], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:  # noqa: ANN001
    configs, other = store
    tiered = tier_topic(tmp_path / "t", configs)
    want = _expected(tiered.logs)
    assert _spark_rows(tiered_spark, tiered) == want
    steps = [
        ["move", "--topic", "orders", "--to-bucket", other, "--to-prefix", "moved/"],
        ["rekey", "--topic", "orders", "--key-id", "k2"],
        ["rekey", "--topic", "orders", "--reencrypt", "--key-id", "k3"],
    ]
    for step in steps:
        assert _cli(tiered, *step) == 0, step
        capsys.readouterr()
        assert _spark_rows(tiered_spark, tiered) == want, step
        tiered.check_fetch()
    manifests = [k for k in objects(configs, other, "moved/") if k.endswith(".manifest")]
    assert len(manifests) == 9


def _clone(tiered: Tiered, root: Path) -> Tiered:
    shutil.copytree(tiered.configs["storage.file.root"], root)
    configs = {**tiered.configs, "storage.file.root": str(root)}
    return replace(
        tiered, configs=configs, props=write_properties(root.parent / f"{root.name}.properties", configs)
    )


def _comparable(tiered: Tiered) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for bucket in ("main", "cold"):
        for key, data in objects(tiered.configs, bucket).items():
            if key not in topic_keys([key], tiered.topic):
                continue
            if key.endswith(".forward"):
                doc = json.loads(data)
                doc.pop("moved_ms")
                out[f"{bucket}/{key}"] = doc
            else:
                out[f"{bucket}/{key}"] = data
    return out


def test_the_spark_engine_gives_the_same_result_as_the_local_one(
    tiered_spark, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:  # noqa: ANN001
    configs = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    tiered = tier_topic(tmp_path / "t", configs)
    local, spark = _clone(tiered, tmp_path / "local"), _clone(tiered, tmp_path / "spark")
    for engine, run in (("local", local), ("spark", spark)):
        assert _cli(run, "move", "--topic", "orders", "--to-bucket", "cold", "--engine", engine) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["summary"]["done"] == 9, report
    assert _comparable(local) == _comparable(spark)
    assert _spark_rows(tiered_spark, spark) == _expected(tiered.logs)
    # verify on both engines finds the same damage
    for run in (local, spark):
        log_key = sorted(k for k in objects(run.configs, "cold") if k.endswith(".log"))[4]
        path = Path(run.configs["storage.file.root"]) / "cold" / log_key
        raw = bytearray(path.read_bytes())
        raw[100] ^= 1
        path.write_bytes(bytes(raw))
    found = {}
    for engine, run in (("local", local), ("spark", spark)):
        assert _cli(run, "verify", "--topic", "orders", "--deep", "--engine", engine) == 3
        doc = json.loads(capsys.readouterr().out)
        found[engine] = sorted((p["kind"], p["segment"], p["detail"]) for p in doc["problems"])
    assert found["local"] == found["spark"] and len(found["local"]) == 1


# -- import / export ----------------------------------------------------------------------------------------
def _dump_log_classpath(kafka_libs: Path) -> str | None:
    """Kafka's DumpLogSegments: kafka-tools 4.4.0 is not on Maven Central, 4.3.1 is (with its own 4.3.1
    Kafka jars first on the classpath, then the broker's third-party jars)."""
    repo = Path.home() / ".m2" / "repository" / "org" / "apache" / "kafka"
    jars = sorted(repo.glob("*/4.3.1/*-4.3.1.jar"))
    if not any(j.name.startswith("kafka-tools-4") for j in jars):
        return None
    return os.pathsep.join([*(str(j) for j in jars), str(kafka_libs / "*")])


def _partition_dir(
    java_oracle, root: Path, topic_id: uuid.UUID
) -> tuple[Path, list[tuple[Any, ...]], set[int]]:  # noqa: ANN001
    """`events-0/`: a segment written by Kafka (transactions, zstd, epochs 0 and 3), then one of ours under
    epoch 5, with the files a broker keeps; and the rows a consumer reads from it."""
    pdir = root / "events-0"
    java_oracle.write_segment(
        pdir, "zstd", records=600, transactional=True, seed=3, index_interval_bytes=4096
    )
    expected = java_oracle.expected(pdir)
    aborted = {r["offset"] for r in expected["records"] if r["aborted"]}
    rows = []
    for r in expected["records"]:
        if r["isControl"]:
            continue
        b64 = lambda v: None if v is None else base64.b64decode(v)  # noqa: E731
        rows.append((0, r["offset"], b64(r["key"]), b64(r["value"]), r["timestamp"],
                     tuple((h["key"], b64(h["value"])) for h in r["headers"]) or None))  # fmt: skip
    nxt = expected["batches"][-1]["lastOffset"] + 1
    ts = 1_700_000_100_000
    with SegmentWriter(pdir, nxt, index_interval_bytes=4096) as w:
        for i in range(5):
            recs = [(f"k{nxt + i * 40 + j}".encode(), b"v" * 200, (), ts + i * 40 + j) for j in range(40)]
            w.append(build_batch(recs, base_offset=nxt + i * 40, partition_leader_epoch=5))
            # no headers: null, as Spark's Kafka source reads them
            rows += [(0, nxt + i * 40 + j, k, v, t, None) for j, (k, v, _, t) in enumerate(recs)]
    last = nxt + 199
    (pdir / f"{last + 1:020d}.snapshot").write_bytes(ProducerSnapshot([]).to_bytes())
    checkpoint = LeaderEpochCheckpoint.from_bytes((pdir / "leader-epoch-checkpoint").read_bytes())
    lines = [f"{e.epoch} {e.start_offset}" for e in checkpoint.entries] + [f"5 {nxt}"]
    (pdir / "leader-epoch-checkpoint").write_text(f"0\n{len(lines)}\n" + "".join(f"{x}\n" for x in lines))
    (pdir / "partition.metadata").write_text(f"version: 0\ntopic_id: {uuid_to_base64(topic_id)}\n")
    (pdir / "expected.json").unlink()
    return pdir, sorted(rows), aborted


def test_import_a_kafka_partition_directory_and_export_it_back(
    tiered_spark, java_oracle, kafka_libs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:  # noqa: ANN001
    configs = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    tiered = tier_topic(tmp_path / "t", configs, partitions=1, segments=1)  # the store and its keyring
    topic_id = uuid.uuid4()
    pdir, rows, aborted = _partition_dir(java_oracle, tmp_path / "kafka", topic_id)
    assert aborted
    before = {p.name: p.read_bytes() for p in pdir.iterdir()}

    assert _cli(tiered, "import", "--dir", str(pdir), "--dry-run") == 0
    plan = json.loads(capsys.readouterr().out)
    assert (
        plan["segments"] == 2 and plan["topic"] == "events" and plan["topic_id"] == uuid_to_base64(topic_id)
    )
    assert _cli(tiered, "import", "--dir", str(pdir)) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["done"] == 2
    assert {p.name: p.read_bytes() for p in pdir.iterdir()} == before  # read-only: nothing written there
    events = replace(tiered, topic="events", topic_id=topic_id)
    assert _spark_rows(tiered_spark, events) == rows
    assert _rows(_read(tiered_spark, tiered.configs, subscribe="events", includeHeaders="true",
                       **{"kafka.isolation.level": "read_committed"})) == [r for r in rows if r[1] not in aborted]  # fmt: skip
    catalog = events.catalog()
    segs = catalog.segments("events", topic_id)
    assert [s.manifest.encryption.key_id for s in segs] == ["k1", "k1"]  # the topic's configuration applied
    assert [s.epochs for s in segs][1] == ((5, segs[1].start_offset),)
    # importing again changes nothing
    assert _cli(tiered, "import", "--dir", str(pdir)) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["items"] == 0

    out = tmp_path / "export"
    assert _cli(tiered, "export", "--topic", "events", "--partition", "0", "--dir", str(out)) == 0
    capsys.readouterr()
    exported = out / "events-0"
    got = {p.name: p.read_bytes() for p in exported.iterdir()}
    for name, data in before.items():
        if name.endswith((".log", ".index", ".timeindex", ".txnindex", ".snapshot")):
            assert got.get(name) == data, name
    assert LeaderEpochCheckpoint.from_bytes(got["leader-epoch-checkpoint"]).entries == \
        LeaderEpochCheckpoint.from_bytes(before["leader-epoch-checkpoint"]).entries  # fmt: skip
    assert got["partition.metadata"] == before["partition.metadata"]
    # Kafka's classes read it record for record
    logs = sorted(exported.glob("*.log"))
    dumps = java_oracle.dump_many(logs)
    originals = java_oracle.dump_many(sorted(pdir.glob("*.log")))
    assert [dumps[p] for p in logs] == [originals[q] for q in sorted(pdir.glob("*.log"))]
    for log in logs:
        java_oracle.check(log)
    classpath = _dump_log_classpath(kafka_libs)
    if classpath is None:
        pytest.skip("Kafka's kafka-tools jar is not in ~/.m2 (DumpLogSegments)")
    files = ",".join(str(p) for p in sorted(exported.glob("*.*index")))
    for flags in (["--verify-index-only"], ["--index-sanity-check"]):
        r = subprocess.run(["java", "-cp", classpath, "org.apache.kafka.tools.DumpLogSegments", "--files", files, *flags],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
        assert r.returncode == 0 and "ismatch" not in r.stdout and "Exception" not in r.stderr, (
            flags,
            r.stdout,
            r.stderr,
        )
    r = subprocess.run(["java", "-cp", classpath, "org.apache.kafka.tools.DumpLogSegments", "--deep-iteration",
                        "--files", ",".join(str(p) for p in logs)], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0 and r.stdout.count("| offset:") == len(rows) + sum(
        1 for b in originals[sorted(pdir.glob("*.log"))[0]] if b["isControl"]
    ), r.stderr
