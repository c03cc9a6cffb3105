"""`rsm migrate move --from-config SOURCE.properties`: a topic moved from one backend to another.

Real stores only: a file store, moto's S3 server, Azurite and fake-gcs-server, all encrypted. After the
move, a RemoteStorageManager configured for the destination fetches every segment through the metadata
Kafka kept (whose custom metadata names the source location: the forward in the destination store leads
on), `rsm migrate verify --deep` passes on the destination, the source store holds the same objects with
the same bytes as before, and a second run has nothing to do. A run killed (SIGKILL) at its crash points
(`rsm.migrate.journal.crash_point`) resumes when run again. With `--prune` the source loses exactly the
objects the RSM wrote for the moved segments, each only after its copy is checked byte for byte, and a
prune killed midway ends, run again, as an uninterrupted one. The topic's overlay and its name's pending
overlay reach the destination's catalog home; a destination bucket, catalog bucket or overlay bucket
that does not exist is named in one line before anything is written.
"""

from __future__ import annotations

import json
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
from migrate_helpers import Tiered, objects, run_cli, tier_topic, write_properties

from rsm.catalog import TopicCatalog
from rsm.cli.main import main
from rsm.config.settings import RsmConfig
from rsm.migrate import gc as gc_
from rsm.store.objects import ObjectStore

FIXTURES = {"s3": "s3_server", "gcs": "gcs_server", "azure": "azurite_server"}


def _cli(props: Path, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    code = main([*args[:1], "--config", str(props), *args[1:], "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else None


def _source(kind: str, request: pytest.FixtureRequest, tmp_path: Path, **shape: int) -> Tiered:
    bucket = f"src-{uuid.uuid4().hex[:12]}"
    if kind == "file":
        configs = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": bucket}
    else:
        server = request.getfixturevalue(FIXTURES[kind])
        configs = server.rsm_configs(bucket=server.make_bucket(bucket))
    return tier_topic(tmp_path / "t", configs, **shape)


def _destination(kind: str, request: pytest.FixtureRequest, tmp_path: Path, tiered: Tiered,
                 prefix: str = "moved/", name: str = "dest", **extra: str) -> tuple[dict[str, str], Path]:  # fmt: skip
    """The destination backend, with its bucket, and the source's bucket made there too (forwards go there:
    Kafka's metadata names it); ``extra``: settings of its own (dots spelt as underscores)."""
    server = request.getfixturevalue(FIXTURES[kind])
    source_bucket = tiered.configs["bucket"]
    configs = {
        **server.rsm_configs(bucket=server.make_bucket(), prefix=prefix),
        **{k: v for k, v in tiered.configs.items() if k.startswith("encryption.")},
        "chunk.size": tiered.configs["chunk.size"],
        **{k.replace("_", "."): v for k, v in extra.items()},
    }
    if ObjectStore.from_config(RsmConfig(configs)).bucket_exists(source_bucket) is False:
        server.make_bucket(source_bucket)
    return configs, write_properties(tmp_path / f"{name}.properties", configs)


def _check_destination(tiered: Tiered, configs: dict[str, str], props: Path,
                       capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """Fetched through Kafka's original metadata, verified, and read by the catalog as the source."""
    tiered.check_fetch(_rsm(configs))
    code, verified = _cli(props, "migrate", "verify", "--topic", tiered.topic, "--deep", capsys=capsys)
    assert code == 0 and verified["ok"] and verified["segments"] == len(tiered.originals), verified
    catalog = TopicCatalog(RsmConfig(configs))
    got = {p: [(s.first_offset, s.last_offset) for s in h.slices]
           for p, h in catalog.histories(tiered.topic, tiered.topic_id).items()}  # fmt: skip
    assert got == tiered.history_offsets()


def _rsm(configs: dict[str, str]) -> Any:
    from rsm import RemoteStorageManager

    rsm = RemoteStorageManager()
    rsm.configure(configs)
    return rsm


@pytest.mark.parametrize(("src", "dst"), [("file", "s3"), ("s3", "azure"), ("s3", "gcs")])
def test_a_topic_moves_to_another_backend_and_the_source_is_untouched(
    src: str, dst: str, request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiered = _source(src, request, tmp_path, partitions=2, segments=2, records=120)
    before = objects(tiered.configs, tiered.configs["bucket"])
    configs, props = _destination(dst, request, tmp_path, tiered)
    move = ("migrate", "move", "--topic", "orders", "--from-config", str(tiered.props))

    code, plan = _cli(props, *move, "--dry-run", capsys=capsys)
    assert code == 0 and plan["dry_run"] and plan["segments"] == 4, plan
    assert objects(configs, configs["bucket"]) == {}  # a dry run writes nothing

    code, report = _cli(props, *move, capsys=capsys)
    assert code == 0 and report["summary"]["done"] == 4, report
    _check_destination(tiered, configs, props, capsys)
    assert objects(tiered.configs, tiered.configs["bucket"]) == before  # the source: same objects, same bytes
    # in the destination: each segment committed once at the destination, a forward where Kafka's metadata
    # points (the source's location)
    store = ObjectStore.from_config(RsmConfig(configs))
    manifests = [k for k in store.list(configs["bucket"], "moved/") if k.endswith(".manifest")]
    forwards = [k for k in store.list(tiered.configs["bucket"], "") if k.endswith(".forward")]
    assert len(manifests) == 4 and len(forwards) == 4, (manifests, forwards)

    code, again = _cli(props, *move, capsys=capsys)
    assert code == 0 and again["summary"]["items"] == 0, again
    assert objects(tiered.configs, tiered.configs["bucket"]) == before


def test_bad_input_is_one_line(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiered = _source("file", request, tmp_path, partitions=1, segments=1, records=50)
    for args, expected in (
        (["--from-config", str(tmp_path / "nope.properties")], "no such file"),
        (["--from-config", str(tiered.props)], "names the same store as --config"),
        (["--prune"], "--prune is for a move across stores"),
    ):
        code = main(["migrate", "--config", str(tiered.props), "move", "--topic", "orders", *args])
        err = capsys.readouterr().err.strip()
        assert code == 1 and "\n" not in err and expected in err and "Traceback" not in err, err
    # the bucket Kafka's metadata names (where forwards go) missing in the destination store
    s3 = request.getfixturevalue("s3_server")
    props = write_properties(tmp_path / "s3.properties", {
        **s3.rsm_configs(bucket=s3.make_bucket()),
        **{k: v for k, v in tiered.configs.items() if k.startswith("encryption.")},
    })  # fmt: skip
    code = main(["migrate", "--config", str(props), "move", "--topic", "orders", "--from-config",
                 str(tiered.props), "--dry-run"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 1 and "\n" not in err and "does not exist in the destination store" in err, err


def test_a_killed_move_across_backends_resumes(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    tiered = _source("file", request, tmp_path, partitions=2, segments=2, records=80)
    before = objects(tiered.configs, tiered.configs["bucket"])
    command = ["move", "--topic", "orders", "--from-config", str(tiered.props), "--parallel", "1"]
    configs, props = _destination("s3", request, tmp_path, tiered, prefix="traced/", name="traced")
    trace = tmp_path / "trace.txt"
    r = run_cli(["migrate", "--config", str(props), *command],
                env={"RSM_MIGRATE_KILL_AT": "1000000000", "RSM_MIGRATE_KILL_TRACE": str(trace)})  # fmt: skip
    assert r.returncode == 0, r.stderr
    labels = trace.read_text().splitlines()
    assert len(labels) > 8, labels
    # every crash point of the first segment (each step of one item: --parallel 1), and one mid-run
    first = next(n for n, label in enumerate(labels, 1) if "done recorded" in label)
    points = sorted({*range(1, first + 1), len(labels) // 2})
    print("crash points:", "; ".join(f"{n} {labels[n - 1]}" for n in points))
    for n in points:
        configs, props = _destination("s3", request, tmp_path, tiered, prefix=f"kill{n}/", name=f"kill{n}")
        r = run_cli(["migrate", "--config", str(props), *command], env={"RSM_MIGRATE_KILL_AT": str(n)})
        assert r.returncode == -signal.SIGKILL, (n, labels[n - 1], r.returncode, r.stderr[-2000:])
        r = run_cli(["migrate", "--config", str(props), *command, "--json"])
        assert r.returncode == 0, (n, r.stderr[-2000:])
        doc = json.loads(r.stdout)
        assert doc["resumed"] and not [x for x in doc["results"] if x["status"] == "failed"], (n, doc)
        tiered.check_fetch(_rsm(configs))
        r = run_cli(["migrate", "--config", str(props), "verify", "--topic", "orders", "--deep", "--json"])
        assert r.returncode == 0 and json.loads(r.stdout)["ok"], (n, r.stdout[-2000:])
        store = ObjectStore.from_config(RsmConfig(configs))
        assert gc_.scan(store, [(configs["bucket"], ""), (tiered.configs["bucket"], "")]) == [], n
        manifests = [k for k in store.list(configs["bucket"], f"kill{n}/") if k.endswith(".manifest")]
        assert len(manifests) == 4, (n, manifests)
        again = json.loads(run_cli(["migrate", "--config", str(props), *command, "--json"]).stdout)
        assert again["summary"]["items"] == 0, (n, labels[n - 1], again)
    assert objects(tiered.configs, tiered.configs["bucket"]) == before


def test_the_spark_reader_reads_the_destination_as_the_source(
    spark: Any, request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The move run as a Spark job (`--engine spark`: executors open both stores themselves), then the
    Spark reader configured for the destination returns the rows it returned from the source."""
    from test_spark_reader import _expected, _read, _rows

    import spark_reader

    spark_reader.register(spark)
    tiered = _source("file", request, tmp_path, partitions=2, segments=2, records=80)
    want = _rows(_read(spark, tiered.configs, subscribe=tiered.topic, includeHeaders="true"))
    assert want == _expected(tiered.logs)
    configs, props = _destination("s3", request, tmp_path, tiered)
    code, report = _cli(props, "migrate", "move", "--topic", "orders", "--from-config", str(tiered.props),
                        "--engine", "spark", capsys=capsys)  # fmt: skip
    assert code == 0 and report["summary"]["done"] == 4, report
    assert _rows(_read(spark, configs, subscribe=tiered.topic, includeHeaders="true")) == want
    tiered.check_fetch(_rsm(configs))


def test_segments_moved_within_the_source_are_found_through_their_forwards(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A topic moved within the source store earlier (a forward at the location Kafka's metadata names, the
    copy elsewhere): the destination gets a forward at both, and fetches through the original metadata."""
    tiered = _source("file", request, tmp_path, partitions=1, segments=2, records=60)
    code, report = _cli(tiered.props, "migrate", "move", "--topic", "orders", "--to-prefix", "old-move/",
                        capsys=capsys)  # fmt: skip
    assert code == 0 and report["summary"]["done"] == 2, report
    before = objects(tiered.configs, tiered.configs["bucket"])
    configs, props = _destination("s3", request, tmp_path, tiered, prefix="")
    configs_bucket = configs["bucket"]
    code, report = _cli(props, "migrate", "move", "--topic", "orders", "--from-config", str(tiered.props),
                        capsys=capsys)  # fmt: skip
    assert code == 0 and report["summary"]["done"] == 2, report
    _check_destination(tiered, configs, props, capsys)
    store = ObjectStore.from_config(RsmConfig(configs))
    forwards = sorted(k for k in store.list(tiered.configs["bucket"], "") if k.endswith(".forward"))
    assert len(forwards) == 4 and len([k for k in forwards if k.startswith("old-move/")]) == 2, forwards
    assert [k for k in store.list(configs_bucket, "") if k.endswith(".manifest")], configs_bucket
    assert objects(tiered.configs, tiered.configs["bucket"]) == before


def test_the_source_stores_credentials_are_never_shown_nor_journaled() -> None:
    """The source's configuration rides in the job spec to every worker, but never in its repr; an endpoint
    URL's user information reaches neither the journal's parameters (`store_identity`) nor the console."""
    import dataclasses

    from rsm.migrate import cross
    from rsm.migrate.context import JobSpec

    secret = "s3cr3t-Pa55"
    source = {
        "storage.backend": "s3",
        "storage.s3.endpoint.url": f"http://user:{secret}@127.0.0.1:9000",
        "storage.s3.secret.access.key": secret,
    }
    spec = dataclasses.replace(JobSpec((), "job", 1), source_configs=tuple(sorted(source.items())))
    assert secret not in repr(spec) and dict(spec.source_configs) == source
    config = RsmConfig(source)
    assert cross.store_identity(config) == ("s3", "http://127.0.0.1:9000")
    assert cross.describe_store(config) == "s3 store http://127.0.0.1:9000"
    gcs = RsmConfig({"storage.backend": "gcs"})
    assert cross.describe_store(gcs) == "gcs store"  # nothing set: no "None|None"


def _set_overlay(props: Path, tiered: Tiered, *settings: str) -> None:
    from rsm.api.metadata import uuid_to_base64

    tid = uuid_to_base64(tiered.topic_id)
    code = main(["topic-config", "--config", str(props), "set", "--topic", tiered.topic, f"--topic-id={tid}",
                 *settings])  # fmt: skip
    assert code == 0


def _overlay(configs: dict[str, str], tiered: Tiered) -> dict[str, str] | None:
    found = TopicCatalog(RsmConfig(configs)).overlays.read(tiered.topic, tiered.topic_id)
    return None if found is None else dict(found.configs)


def test_the_topics_overlay_moves_with_it(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The source's overlay (a prefix, the topic's own key id) is copied into the destination before the
    segments: they land where it says, and a broker switched to the destination tiers the topic's next
    segment there under its key, not with the destination's defaults."""
    import dataclasses

    from rsm import RemoteStorageManager

    tiered = _source("file", request, tmp_path, partitions=1, segments=2, records=60)
    _set_overlay(tiered.props, tiered, "unchecked.rsm.prefix=cold/", "unchecked.rsm.encryption.key.id=k2")
    capsys.readouterr()
    wanted = _overlay(tiered.configs, tiered)
    configs, props = _destination("s3", request, tmp_path, tiered)
    move = ("migrate", "move", "--topic", "orders", "--from-config", str(tiered.props))
    code, plan = _cli(props, *move, "--dry-run", capsys=capsys)
    assert code == 0 and _overlay(configs, tiered) is None  # a dry run writes nothing
    code = main(["migrate", "--config", str(props), *move[1:]])
    out = capsys.readouterr().out
    assert code == 0 and "the topic overlay of orders was copied to the destination" in out, out
    assert _overlay(configs, tiered) == wanted
    store = ObjectStore.from_config(RsmConfig(configs))
    assert len([k for k in store.list(configs["bucket"], "cold/") if k.endswith(".manifest")]) == 2
    _check_destination(tiered, configs, props, capsys)
    rsm = RemoteStorageManager()
    rsm.configure(configs)  # a broker switched to the destination store
    log = dataclasses.replace(tiered.logs[0], rsm=rsm)
    log.append(10)
    log.roll()
    rsm.close()
    newest = TopicCatalog(RsmConfig(configs)).segments("orders", tiered.topic_id)[-1]
    assert newest.start_offset == 120 and str(newest.location) == f"{configs['bucket']}/cold/"
    assert newest.manifest.encryption is not None and newest.manifest.encryption.key_id == "k2"
    code, again = _cli(props, *move, capsys=capsys)  # nothing left to do, the overlay the same
    assert code == 0 and again["summary"]["items"] == 0


def test_a_destination_overlay_stays_and_one_it_cannot_honour_is_refused(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiered = _source("file", request, tmp_path, partitions=1, segments=1, records=40)
    _set_overlay(tiered.props, tiered, "unchecked.rsm.prefix=cold/", "unchecked.rsm.bucket=elsewhere")
    dest, props = _destination("s3", request, tmp_path, tiered)
    move = [
        "migrate",
        "--config",
        str(props),
        "move",
        "--topic",
        "orders",
        "--from-config",
        str(tiered.props),
    ]
    capsys.readouterr()
    assert main(move) == 1
    err = capsys.readouterr().err.strip()
    assert (
        "\n" not in err and "names bucket 'elsewhere'" in err and "does not exist in the destination" in err
    )
    assert request.getfixturevalue("s3_server").endpoint_url in err, err  # where it was looked for
    assert objects(dest, dest["bucket"]) == {}  # refused before anything was written
    _set_overlay(props, tiered, "unchecked.rsm.prefix=mine/")  # the operator's own settings there
    capsys.readouterr()
    assert main(move) == 0
    out = capsys.readouterr().out
    assert "the destination's own topic overlay of orders stays; it differs from the source's in " in out, out
    assert "unchecked.rsm.bucket, unchecked.rsm.prefix" in out
    assert _overlay(dest, tiered) == {"unchecked.rsm.prefix": "mine/"}
    store = ObjectStore.from_config(RsmConfig(dest))
    assert len([k for k in store.list(dest["bucket"], "mine/") if k.endswith(".manifest")]) == 1


def test_without_a_source_overlay_the_destinations_own_places_the_segments(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiered = _source("file", request, tmp_path, partitions=1, segments=1, records=40)
    dest, props = _destination("s3", request, tmp_path, tiered)
    _set_overlay(props, tiered, "unchecked.rsm.prefix=mine/")
    capsys.readouterr()
    code, report = _cli(props, "migrate", "move", "--topic", "orders", "--from-config", str(tiered.props),
                        capsys=capsys)  # fmt: skip
    assert code == 0 and report["summary"]["done"] == 1, report
    assert _overlay(dest, tiered) == {"unchecked.rsm.prefix": "mine/"}
    store = ObjectStore.from_config(RsmConfig(dest))
    assert len([k for k in store.list(dest["bucket"], "mine/") if k.endswith(".manifest")]) == 1


# -- --prune: the source rid of what was moved ---------------------------------------------------------------
def _segment_objects(configs: dict[str, str], bucket: str) -> dict[str, bytes]:
    """A bucket's objects apart from the store's own documents (`_rsm/`: records, journals, overlays)."""
    return {k: v for k, v in objects(configs, bucket).items() if "_rsm/" not in k}


def _histories(configs: dict[str, str], tiered: Tiered) -> dict[int, list[tuple[int, int]]]:
    catalog = TopicCatalog(RsmConfig(configs))
    return {p: [(s.first_offset, s.last_offset) for s in h.slices]
            for p, h in catalog.histories(tiered.topic, tiered.topic_id).items()}  # fmt: skip


def test_a_pruning_move_deletes_what_it_moved_and_nothing_else(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The move run while brokers still use the source prunes nothing; run again with --prune (the brokers
    switched) it deletes every object the RSM wrote for the moved segments in the source (copies, and the
    forwards an earlier move within the source left) and nothing else, after checking each copy; the
    destination's objects are untouched, and a broker on the destination fetches every segment through
    Kafka's old metadata."""
    from rsm.api.metadata import uuid_to_base64

    tiered = _source("file", request, tmp_path, partitions=2, segments=2, records=80)
    code, report = _cli(tiered.props, "migrate", "move", "--topic", "orders", "--partition", "0",
                        "--to-prefix", "old-move/", capsys=capsys)  # fmt: skip
    assert code == 0 and report["summary"]["done"] == 2, report
    src_bucket = tiered.configs["bucket"]
    source = ObjectStore.from_config(RsmConfig(tiered.configs))
    tid = uuid_to_base64(tiered.topic_id)
    foreign = {f"orders-{tid}/0/notes.txt": b"the operator's", f"other-{tid}/0/x.log": b"another topic's"}
    for key, body in foreign.items():
        source.put(src_bucket, key, body)
    history = tiered.history_offsets()
    configs, props = _destination("s3", request, tmp_path, tiered)
    move = ("migrate", "move", "--topic", "orders", "--from-config", str(tiered.props))

    code, report = _cli(props, *move, capsys=capsys)  # brokers on the source still: nothing pruned
    assert code == 0 and report["summary"]["done"] == 4, report
    source_before = objects(tiered.configs, src_bucket)
    moved = _segment_objects(configs, configs["bucket"])
    # in the destination store: where Kafka's metadata points, and where the earlier move took partition 0
    forwards = _segment_objects(configs, src_bucket)
    assert len(forwards) == 6, sorted(forwards)

    code, plan = _cli(props, *move, "--prune", "--dry-run", capsys=capsys)
    doomed = {k for k in source_before if "_rsm/" not in k and k not in foreign}
    assert len(doomed) == 4 * 3 + 2, sorted(doomed)  # 4 copies (3 objects each), partition 0's 2 forwards
    assert code == 0 and plan["segments"] == 4 and plan["prune"]["segments"] == 4, plan
    assert sorted(plan["prune"]["objects"]) == sorted(source.describe(src_bucket, k) for k in doomed)
    assert main(["migrate", "--config", str(props), *move[1:], "--prune", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "brokers still configured for it cannot fetch them" in out, out  # when --prune is safe
    assert f"{len(doomed)} object(s) would be deleted from the source" in out, out
    assert objects(tiered.configs, src_bucket) == source_before  # a dry run deletes nothing

    code, report = _cli(props, *move, "--prune", capsys=capsys)
    assert code == 0 and report["summary"]["done"] == 4, report
    assert {r["message"] for r in report["results"]} == {"source pruned"}, report
    left = objects(tiered.configs, src_bucket)
    assert {k: v for k, v in left.items() if "_rsm/" not in k} == foreign  # only what the RSM did not write
    assert {k: v for k, v in left.items() if "_rsm/" in k} == {
        k: v for k, v in source_before.items() if "_rsm/" in k
    }  # its records and overlays stay
    assert _segment_objects(configs, configs["bucket"]) == moved  # the destination: same objects, same bytes
    assert _segment_objects(configs, src_bucket) == forwards
    tiered.check_fetch(_rsm(configs))  # a broker switched to the destination, through Kafka's old metadata
    code, verified = _cli(props, "migrate", "verify", "--topic", "orders", "--deep", capsys=capsys)
    assert code == 0 and verified["ok"] and verified["segments"] == 4, verified
    assert _histories(configs, tiered) == history

    code, again = _cli(props, *move, "--prune", capsys=capsys)
    assert code == 0 and again["summary"]["items"] == 0, again
    code, again = _cli(props, *move, capsys=capsys)
    assert code == 0 and again["summary"]["items"] == 0, again


def test_a_copy_that_differs_is_not_pruned(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A destination copy whose bytes are not the source's (same size, one byte changed) keeps its source:
    the segment fails, naming the object, and nothing of it is deleted."""
    tiered = _source("file", request, tmp_path, partitions=1, segments=2, records=60, encrypted=False)
    configs, props = _destination("s3", request, tmp_path, tiered)
    move = ("migrate", "move", "--topic", "orders", "--from-config", str(tiered.props))
    code, report = _cli(props, *move, capsys=capsys)
    assert code == 0 and report["summary"]["done"] == 2, report
    store = ObjectStore.from_config(RsmConfig(configs))
    bucket = configs["bucket"]
    log_key = sorted(k for k in store.list(bucket, "moved/") if k.endswith(".log"))[0]
    body = bytearray(store.get(bucket, log_key))
    body[-1] ^= 0xFF
    store.put(bucket, log_key, bytes(body))
    before = objects(tiered.configs, tiered.configs["bucket"])
    code, report = _cli(props, *move, "--prune", capsys=capsys)
    failed = [r for r in report["results"] if r["status"] == "failed"]
    assert code == 3 and len(failed) == 1 and report["summary"]["done"] == 1, report
    assert log_key in failed[0]["message"] and "differs from" in failed[0]["message"], failed
    assert "nothing of it was pruned" in failed[0]["message"]
    after = objects(tiered.configs, tiered.configs["bucket"])
    stem = log_key.removeprefix("moved/").removesuffix(".log")  # the same key in the source, at prefix ""
    assert {k: v for k, v in before.items() if k.startswith(stem)} == {
        k: v for k, v in after.items() if k.startswith(stem)
    }  # the differing copy's source: all three objects, as they were
    assert len([k for k in before if k not in after]) == 3  # the other segment's, pruned


def test_a_killed_prune_resumes(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Killed (SIGKILL) at each crash point from the first segment's check to its end, and once in the
    second's prune, the same command run again ends where an uninterrupted run ends: the source holds none
    of the topic's segments, the destination every one, fetched and verified, and a third run has nothing
    to do."""
    import shutil

    tiered = _source("file", request, tmp_path, partitions=1, segments=2, records=80)
    root, pristine = tmp_path / "store", tmp_path / "pristine"
    shutil.copytree(root, pristine)
    src_bucket = tiered.configs["bucket"]

    def restore() -> None:
        shutil.rmtree(root)
        shutil.copytree(pristine, root)

    command = ["move", "--topic", "orders", "--from-config", str(tiered.props), "--parallel", "1", "--prune"]
    configs, props = _destination("s3", request, tmp_path, tiered, prefix="traced/", name="traced")
    trace = tmp_path / "trace.txt"
    r = run_cli(["migrate", "--config", str(props), *command],
                env={"RSM_MIGRATE_KILL_AT": "1000000000", "RSM_MIGRATE_KILL_TRACE": str(trace)})  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert _segment_objects(tiered.configs, src_bucket) == {}
    labels = trace.read_text().splitlines()
    verified = next(n for n, label in enumerate(labels, 1) if "verified recorded" in label)
    first_done = next(n for n, label in enumerate(labels, 1) if "done recorded" in label)
    second = [n for n, label in enumerate(labels, 1) if "pruned data" in label][1]
    points = [*range(verified - 1, first_done + 1), second]
    print("crash points:", "; ".join(f"{n} {labels[n - 1]}" for n in points))
    assert [labels[n - 1].split()[2] for n in range(verified, first_done + 1)] == [
        "verified", "pruned", "pruned", "pruned", "done",
    ], labels  # fmt: skip
    for n in points:
        restore()
        configs, props = _destination("s3", request, tmp_path, tiered, prefix=f"kill{n}/", name=f"kill{n}")
        r = run_cli(["migrate", "--config", str(props), *command], env={"RSM_MIGRATE_KILL_AT": str(n)})
        assert r.returncode == -signal.SIGKILL, (n, labels[n - 1], r.returncode, r.stderr[-2000:])
        r = run_cli(["migrate", "--config", str(props), *command, "--json"])
        assert r.returncode == 0, (n, r.stderr[-2000:])
        doc = json.loads(r.stdout)
        assert doc["resumed"] and not [x for x in doc["results"] if x["status"] == "failed"], (n, doc)
        assert _segment_objects(tiered.configs, src_bucket) == {}, (n, labels[n - 1])
        tiered.check_fetch(_rsm(configs))
        r = run_cli(["migrate", "--config", str(props), "verify", "--topic", "orders", "--deep", "--json"])
        assert r.returncode == 0 and json.loads(r.stdout)["ok"], (n, r.stdout[-2000:])
        store = ObjectStore.from_config(RsmConfig(configs))
        assert gc_.scan(store, [(configs["bucket"], ""), (src_bucket, "")]) == [], n
        manifests = [k for k in store.list(configs["bucket"], f"kill{n}/") if k.endswith(".manifest")]
        assert len(manifests) == 2, (n, manifests)
        again = json.loads(run_cli(["migrate", "--config", str(props), *command, "--json"]).stdout)
        assert again["summary"]["items"] == 0, (n, labels[n - 1], again)


def test_one_store_behind_both_configurations_is_never_pruned(tmp_path: Path) -> None:
    """The probe: written through the destination's configuration and read through the source's. Two
    configurations of one store are refused (one line); two stores pass; the probe is gone either way."""
    from rsm.migrate.context import MigrateError
    from rsm.migrate.cross_prune import check_distinct
    from rsm.store.layout import Location

    def store(root: Path) -> ObjectStore:
        return ObjectStore.from_config(RsmConfig({"storage.backend": "file", "storage.file.root": str(root)}))

    here = Location("b", "p/")
    one, same, other = store(tmp_path / "one"), store(tmp_path / "one"), store(tmp_path / "two")
    check_distinct(one, other, here, "job")
    with pytest.raises(MigrateError, match="reach one store") as caught:
        check_distinct(one, same, here, "job")
    assert "\n" not in str(caught.value) and "nothing was pruned" in str(caught.value)
    assert [k for k in one.list("b", "", include_temporary=True)] == []


# -- the pending overlay, the catalog home, missing buckets -------------------------------------------------
def _pending(configs: dict[str, str], topic: str = "orders") -> Any:
    from rsm.policy.pending import PendingOverlayStore

    config = RsmConfig(configs)
    return PendingOverlayStore(
        ObjectStore.from_config(config), config.catalog_bucket, config.catalog_prefix
    ).read(topic)


def test_the_pending_overlay_is_carried_into_the_destinations_catalog_home(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A successor's settings written under the topic's name in the source (a pending overlay) reach the
    destination as they were (same settings, same expiry) before any segment, in its catalog home
    (`catalog.bucket` / `catalog.prefix`) beside the topic's overlay, the location record and the
    journal, never in its data bucket; one the destination holds already stays, the differences named."""
    tiered = _source("file", request, tmp_path, partitions=1, segments=1, records=40)
    _set_overlay(tiered.props, tiered, "unchecked.rsm.prefix=cold/")
    assert main(["topic-config", "--config", str(tiered.props), "set", "--topic", "orders", "--pending",
                 "unchecked.rsm.prefix=next/", "unchecked.rsm.encryption.key.id=k2"]) == 0  # fmt: skip
    theirs = _pending(tiered.configs)
    assert theirs is not None
    s3 = request.getfixturevalue("s3_server")
    home = s3.make_bucket()
    dest, props = _destination("s3", request, tmp_path, tiered, catalog_bucket=home, catalog_prefix="docs/")
    move = [
        "migrate",
        "--config",
        str(props),
        "move",
        "--topic",
        "orders",
        "--from-config",
        str(tiered.props),
    ]
    capsys.readouterr()
    assert main([*move, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "the pending overlay of orders would be copied to the destination" in out, out
    assert _pending(dest) is None and objects(dest, home) == {}  # a dry run writes nothing
    assert main(move) == 0
    out = capsys.readouterr().out
    assert "the pending overlay of orders was copied to the destination" in out, out
    ours = _pending(dest)
    assert ours is not None and dict(ours.configs) == dict(theirs.configs)
    assert (ours.created_ms, ours.expires_ms) == (theirs.created_ms, theirs.expires_ms)  # not renewed
    documents = sorted(objects(dest, home))
    assert "docs/_rsm/pending-topic-configs/orders.json" in documents, documents
    assert _overlay(dest, tiered) == {"unchecked.rsm.prefix": "cold/"}
    assert [k for k in documents if "topic-configs/" in k and "pending" not in k], documents  # the overlay
    assert [k for k in documents if "/migrate/" in k], documents  # the journal
    assert [k for k in objects(dest, dest["bucket"]) if "_rsm/" in k] == []  # no document in the data bucket
    tiered.check_fetch(_rsm(dest))

    assert main(["topic-config", "--config", str(tiered.props), "set", "--topic", "orders", "--pending",
                 "unchecked.rsm.prefix=later/"]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(move) == 0
    out = capsys.readouterr().out
    assert "the destination's own pending overlay of orders stays; it differs from the source's in " \
           "unchecked.rsm.prefix" in out, out  # fmt: skip
    assert dict(_pending(dest).configs) == dict(theirs.configs)


def test_what_the_destination_lacks_is_named_in_one_line_before_anything_is_written(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A destination `bucket`, `catalog.bucket`, or a bucket the pending overlay names, that does not exist,
    and a key id the pending overlay names that the destination's keyring lacks: each refused in one line
    naming the setting (and for a bucket, the store's endpoint); nothing written anywhere."""
    from kafka_segments import write_keyring

    tiered = _source("file", request, tmp_path, partitions=1, segments=1, records=40)
    s3 = request.getfixturevalue("s3_server")
    home = s3.make_bucket()

    def refused(name: str, *expected: str, **settings: str) -> None:
        dest, props = _destination("s3", request, tmp_path, tiered, name=name, **settings)
        source_before = objects(tiered.configs, tiered.configs["bucket"])
        capsys.readouterr()
        code = main(["migrate", "--config", str(props), "move", "--topic", "orders", "--from-config",
                     str(tiered.props)])  # fmt: skip
        err = capsys.readouterr().err.strip()
        assert code == 1 and "\n" not in err and "Traceback" not in err, err
        for part in expected:
            assert part in err, (part, err)
        for bucket in {dest["bucket"], tiered.configs["bucket"], home} - {"nowhere"}:
            assert objects(dest, bucket) == {}, (name, bucket)
        assert objects(tiered.configs, tiered.configs["bucket"]) == source_before

    endpoint = s3.endpoint_url
    refused("no-data", "'nowhere'", "(config bucket)", endpoint, bucket="nowhere", catalog_bucket=home)
    refused("no-home", "'nowhere'", "(catalog.bucket)", endpoint, catalog_bucket="nowhere")
    assert main(["topic-config", "--config", str(tiered.props), "set", "--topic", "orders", "--pending",
                 "unchecked.rsm.bucket=nowhere"]) == 0  # fmt: skip
    refused("pending-bucket", "pending overlay", "names bucket 'nowhere' (unchecked.rsm.bucket)", endpoint,
            catalog_bucket=home)  # fmt: skip
    assert main(["topic-config", "--config", str(tiered.props), "unset", "--topic", "orders", "--pending",
                 "unchecked.rsm.bucket"]) == 0  # fmt: skip
    assert main(["topic-config", "--config", str(tiered.props), "set", "--topic", "orders", "--pending",
                 "unchecked.rsm.encryption.key.id=k3"]) == 0  # fmt: skip
    keyring = write_keyring(tmp_path / "dest-keyring.json", ("k1",))
    refused("pending-key", "pending overlay", "names key id 'k3' (unchecked.rsm.encryption.key.id)",
            "not in the destination's keyring", catalog_bucket=home, encryption_keyring_path=str(keyring))  # fmt: skip
