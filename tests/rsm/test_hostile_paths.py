"""Hostile names never reach storage outside where they belong.

Every name that becomes part of an object path (topic, bucket, prefix, and object keys from custom metadata
or a manifest) is checked where it enters, and the file store refuses any path that resolves outside its
root (through `..` or a symlink) whatever its caller passed. Each test places "victim" files where the
unchecked path would land and asserts they survive, and that the call fails with a RemoteStorageException
naming what it refused.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import uuid
from pathlib import Path

import pytest
from kafka_segments import make_segment, read_all

from rsm import (
    CustomMetadata,
    IndexType,
    LogConfig,
    RemoteStorageException,
    RemoteStorageManager,
    TopicIdPartition,
)
from rsm.api.errors import ConfigException
from rsm.api.metadata import RemoteLogSegmentMetadata, uuid_to_base64
from rsm.api.names import CLOUD_BUCKET_RULES, bucket_problem, key_problem, prefix_problem, topic_problem
from rsm.cli.main import main
from rsm.config.settings import RsmConfig
from rsm.fetch.reader import SegmentReader
from rsm.store.layout import Location, SegmentKeys
from rsm.store.objects import ObjectStore
from rsm.store.overlays import TopicOverlayStore
from rsm.stored import custom_metadata as cm
from rsm.stored.manifest import Manifest, ManifestError, canonical_bytes

BUCKET = "tiered"


def _raw_custom(bucket: str, prefix: str) -> CustomMetadata:
    """Custom metadata bytes as a hostile writer of Kafka's metadata topic would craft them."""
    b, p = bucket.encode(), prefix.encode()
    return CustomMetadata(bytes([1, len(b)]) + b + bytes([len(p)]) + p)


@pytest.fixture
def rsm(tmp_path: Path):
    manager = RemoteStorageManager()
    manager.configure(
        {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": BUCKET}
    )
    try:
        yield manager
    finally:
        manager.close()


def _victims(root: Path, bucket: str, prefix: str, md: RemoteLogSegmentMetadata) -> list[Path]:
    """The files an unchecked delete would unlink: created here so the test can see them survive."""
    keys = SegmentKeys.of(Location(bucket, prefix), md)
    paths = [Path(os.path.normpath(f"{root}/{bucket}/{key}")) for key in keys.all()]
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"victim")
    return paths


@pytest.mark.parametrize(
    ("bucket", "prefix"),
    [
        ("..", ""),  # the store's parent
        ("../victim", ""),  # a sibling directory of the store
        (BUCKET, "../../victim/"),  # out of the bucket, then out of the root
        (BUCKET, "../other-bucket/"),  # into another bucket of the same root
        (BUCKET, "a/../../../victim/"),
        (".", ""),  # the root itself as a bucket
    ],
)
def test_delete_with_hostile_custom_metadata_unlinks_nothing(
    rsm: RemoteStorageManager, tmp_path: Path, bucket: str, prefix: str
) -> None:
    seg = make_segment(tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "orders", 0), batches=2)
    md = dataclasses.replace(seg.metadata, custom_metadata=_raw_custom(bucket, prefix))
    victims = _victims(tmp_path / "store", bucket, prefix, md)
    with pytest.raises(RemoteStorageException, match="custom metadata"):
        rsm.delete_log_segment_data(md)
    assert all(v.read_bytes() == b"victim" for v in victims)
    with pytest.raises(RemoteStorageException, match="custom metadata"):
        rsm.fetch_log_segment(md, 0)


@pytest.mark.parametrize("topic", ["../../victim2/x", "..", ".", "a/b", "x" * 250, "tab\there", "ü"])
def test_illegal_topic_names_are_refused_by_topic_id_partition(topic: str) -> None:
    with pytest.raises(RemoteStorageException, match="topic"):
        TopicIdPartition(uuid.uuid4(), topic, 0)


def test_a_topic_forced_past_validation_still_cannot_leave_the_store(
    rsm: RemoteStorageManager, tmp_path: Path
) -> None:
    """Defence in depth: even a topic name that bypassed TopicIdPartition's check (object.__setattr__ on
    the frozen value) never makes the file store unlink outside its root."""
    tip = TopicIdPartition(uuid.uuid4(), "orders", 0)
    seg = make_segment(tmp_path / "seg", tip, batches=2)
    object.__setattr__(tip, "topic", "../../victim2/x")
    md = dataclasses.replace(seg.metadata, custom_metadata=cm.encode(Location(BUCKET, "")))
    victims = _victims(tmp_path / "store", BUCKET, "", md)
    with pytest.raises(RemoteStorageException, match="refusing object key '../../victim2/x-"):
        rsm.delete_log_segment_data(md)
    assert all(v.read_bytes() == b"victim" for v in victims)


def _copy(rsm: RemoteStorageManager, tmp_path: Path, topic: str = "orders") -> RemoteLogSegmentMetadata:
    seg = make_segment(tmp_path / "seg", TopicIdPartition(uuid.uuid4(), topic, 0), batches=5)
    custom = rsm.copy_log_segment_data(seg.metadata, seg.data)
    return dataclasses.replace(seg.metadata, custom_metadata=custom)


def _rewrite_manifest(root: Path, md: RemoteLogSegmentMetadata, change) -> Path:  # noqa: ANN001
    path = root / BUCKET / SegmentKeys.of(Location(BUCKET, ""), md).manifest
    doc = json.loads(path.read_bytes())
    change(doc)
    if doc.get("seal", {}).get("algorithm") == "SHA-256":
        # a plain segment's seal is a checksum anyone can recompute: the attacker does, so what refuses the
        # manifest below is the location check, not the seal
        digest = hashlib.sha256(canonical_bytes(doc)).digest()
        doc["seal"]["value"] = base64.b64encode(digest).decode()
        path.write_bytes(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())  # canonical form
    else:
        path.write_text(json.dumps(doc))
    return path


def _describe_file_as_log(doc: dict, data: bytes) -> None:
    """Make the manifest's chunk index describe `data` stored plain (one chunk, no codec, a CRC the
    location check refuses before anyone could compare it)."""
    doc["log"].update(size=len(data), stored_size=len(data), stored_sizes=[len(data)], codecs=[0], crc32c=[0])


def test_a_manifest_pointing_outside_the_store_is_refused(rsm: RemoteStorageManager, tmp_path: Path) -> None:
    md = _copy(rsm, tmp_path)
    secret = b"host secret: not for Kafka consumers\n"
    (tmp_path / "host-secret.txt").write_bytes(secret)  # store/tiered/../../host-secret.txt

    def point_at_secret(doc: dict) -> None:
        doc["location"]["log"] = "../../host-secret.txt"
        _describe_file_as_log(doc, secret)

    _rewrite_manifest(tmp_path / "store", md, point_at_secret)
    rsm2 = RemoteStorageManager()  # no cached manifest
    rsm2.configure({"storage.backend": "file", "storage.file.root": str(tmp_path / "store")})
    try:
        with pytest.raises(RemoteStorageException, match=r"manifest.*location\.log"):
            read_all(rsm2.fetch_log_segment(md, 0))
    finally:
        rsm2.close()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("indexes", "../../elsewhere.indexes"),
        ("log", "orders-x/0/00000000000000000000-other.log"),  # inside the store, but not this segment's
        ("prefix", "../"),
        ("bucket", ".."),
    ],
)
def test_manifest_location_must_be_the_segments_own_keys(
    rsm: RemoteStorageManager, tmp_path: Path, field: str, value: str
) -> None:
    md = _copy(rsm, tmp_path)
    path = _rewrite_manifest(tmp_path / "store", md, lambda doc: doc["location"].__setitem__(field, value))
    with pytest.raises(ManifestError, match=f"location.{field}"):
        Manifest.from_bytes(path.read_bytes(), "m")
    store = ObjectStore.from_config(RsmConfig({"storage.file.root": str(tmp_path / "store")}))
    key = str(path.relative_to(tmp_path / "store" / BUCKET))
    with pytest.raises(ManifestError, match=f"location.{field}"):
        SegmentReader.open(store, BUCKET, key)  # the Spark reader's and migration's way in


@pytest.mark.parametrize("field", ["topic", "partition", "start_offset", "segment_id"])
def test_manifest_segment_fields_that_make_keys_are_checked(
    rsm: RemoteStorageManager, tmp_path: Path, field: str
) -> None:
    md = _copy(rsm, tmp_path)
    bad = {"topic": "../..", "partition": -1, "start_offset": "0/../..", "segment_id": "../../x"}[field]
    path = _rewrite_manifest(tmp_path / "store", md, lambda doc: doc["segment"].__setitem__(field, bad))
    # a malformed segment id is refused as soon as it is parsed, before the keys are derived from it
    with pytest.raises(ManifestError, match=field if field != "segment_id" else "Kafka Uuid"):
        Manifest.from_bytes(path.read_bytes(), "m")


def test_a_symlinked_object_leading_outside_is_refused(rsm: RemoteStorageManager, tmp_path: Path) -> None:
    """The manifest is well-formed and names the segment's own key, but that key is a symlink out."""
    md = _copy(rsm, tmp_path)
    secret = b"another host secret\n"
    outside = tmp_path / "outside.txt"
    outside.write_bytes(secret)
    keys = SegmentKeys.of(Location(BUCKET, ""), md)
    log_path = tmp_path / "store" / BUCKET / keys.log
    log_path.unlink()
    log_path.symlink_to(outside)
    _rewrite_manifest(tmp_path / "store", md, lambda doc: _describe_file_as_log(doc, secret))
    rsm2 = RemoteStorageManager()
    rsm2.configure({"storage.backend": "file", "storage.file.root": str(tmp_path / "store")})
    try:
        with pytest.raises(RemoteStorageException, match="outside the store"):
            read_all(rsm2.fetch_log_segment(md, 0))
    finally:
        rsm2.close()


def test_a_symlinked_partition_directory_is_not_deleted_through(
    rsm: RemoteStorageManager, tmp_path: Path
) -> None:
    md = _copy(rsm, tmp_path)
    keys = SegmentKeys.of(Location(BUCKET, ""), md)
    part_dir = (tmp_path / "store" / BUCKET / keys.manifest).parent
    outside = tmp_path / "outside-dir"
    part_dir.rename(outside)  # the segment's files now live outside the root...
    part_dir.symlink_to(outside, target_is_directory=True)  # ...reached through a symlink
    before = sorted(p.name for p in outside.iterdir())
    with pytest.raises(RemoteStorageException, match="outside the store"):
        rsm.delete_log_segment_data(md)
    assert sorted(p.name for p in outside.iterdir()) == before


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("unchecked.rsm.bucket", ".."),
        ("unchecked.rsm.bucket", "a..b"),
        ("unchecked.rsm.bucket", "192.168.10.1"),
        ("unchecked.rsm.bucket", "Upper"),
        ("unchecked.rsm.bucket", "-dash"),
        ("unchecked.rsm.bucket", "dot."),
        ("unchecked.rsm.bucket", "a\\b"),
        ("unchecked.rsm.prefix", "../x/"),
        ("unchecked.rsm.prefix", "/abs/"),
        ("unchecked.rsm.prefix", "a\\..\\..\\b/"),
        ("unchecked.rsm.prefix", "a/./b/"),
        ("unchecked.rsm.prefix", "a//b/"),
        ("unchecked.rsm.prefix", "tab\t/"),
        ("unchecked.rsm.prefix", "nul\x00/"),
    ],
)
def test_config_resolution_refuses_bad_bucket_and_prefix(key: str, value: str) -> None:
    config = RsmConfig({"storage.file.root": "/unused"})
    with pytest.raises(ConfigException, match=key.replace(".", r"\.")):
        config.resolve(LogConfig({key: value}))
    broker_key = key.removeprefix("unchecked.rsm.")
    with pytest.raises(ConfigException, match=broker_key):
        RsmConfig({"storage.file.root": "/unused", broker_key: value})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("unchecked.rsm.bucket", "b"),  # a directory on the file store (S3 asks for 3 characters)
        ("unchecked.rsm.bucket", "my-tiered.bucket-01"),
        ("unchecked.rsm.prefix", ""),
        ("unchecked.rsm.prefix", "p/"),
        ("unchecked.rsm.prefix", "tenant-1/x/"),
        ("unchecked.rsm.prefix", "kafka/.hidden/"),
        ("unchecked.rsm.prefix", "no-slash-"),
    ],
)
def test_config_resolution_keeps_ordinary_names(key: str, value: str) -> None:
    settings = RsmConfig({"storage.file.root": "/unused"}).resolve(LogConfig({key: value}))
    assert getattr(settings, key.removeprefix("unchecked.rsm.")) == value


def test_s3_buckets_need_three_characters() -> None:
    s3 = {"storage.backend": "s3", "bucket": "tiered"}
    with pytest.raises(ConfigException, match="unchecked.rsm.bucket"):
        RsmConfig(s3).resolve(LogConfig({"unchecked.rsm.bucket": "ab"}))
    with pytest.raises(ConfigException, match="config bucket"):
        RsmConfig({**s3, "bucket": "ab"})
    assert RsmConfig(s3).resolve(LogConfig({"unchecked.rsm.bucket": "abc"})).bucket == "abc"


@pytest.mark.parametrize(
    ("bucket", "prefix"),
    [("..", ""), ("../victim", ""), ("ok", "../victim/"), ("ok", "/etc/"), ("", ""), ("ok", "a\\b/")],
)
def test_custom_metadata_decode_refuses_bad_locations(bucket: str, prefix: str) -> None:
    with pytest.raises(RemoteStorageException, match=r"custom metadata .* (bucket|prefix)"):
        cm.decode(_raw_custom(bucket, prefix))


def test_topic_overlay_names_are_kafka_topic_names(tmp_path: Path) -> None:
    store = ObjectStore.from_config(RsmConfig({"storage.file.root": str(tmp_path / "store")}))
    overlays = TopicOverlayStore(store, BUCKET, "")
    for topic in ("..", "../x", "has space", ""):
        with pytest.raises(ConfigException, match="topic"):
            overlays.write(topic, uuid.uuid4(), {"unchecked.rsm.prefix": "p/"})
    assert not list((tmp_path / "store").rglob("*.json"))


def test_store_refuses_keys_with_dot_segments_on_both_backends(tmp_path: Path, s3_server) -> None:  # noqa: ANN001
    file_store = ObjectStore.from_config(RsmConfig({"storage.file.root": str(tmp_path / "store")}))
    bucket = s3_server.make_bucket()
    s3_store = ObjectStore.from_config(RsmConfig(s3_server.rsm_configs(bucket=bucket)))
    s3_server.boto3_client().put_object(Bucket=bucket, Key="secret", Body=b"s")
    for store, b in ((file_store, BUCKET), (s3_store, bucket)):
        for key in ("a/../../secret", "../secret", "./secret", "a\\b", "/secret", "a\x00b", ""):
            with pytest.raises(RemoteStorageException, match="object key"):
                store.get(b, key)
        with pytest.raises(RemoteStorageException, match="bucket"):
            store.get("../" + b, "secret")


def test_cli_refuses_illegal_topic_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    props = tmp_path / "server.properties"
    root = tmp_path / "store"
    props.write_text(
        f"rsm.config.storage.backend=file\nrsm.config.storage.file.root={root}\nrsm.config.bucket={BUCKET}\n"
    )
    tid = uuid_to_base64(uuid.uuid4())
    for topic in ("has space", "..", "../../escape"):
        capsys.readouterr()
        rc = main(
            ["topic-config", "--config", str(props), "set", "--topic", topic, f"--topic-id={tid}",
             "unchecked.rsm.prefix=p/"]
        )  # fmt: skip
        err = capsys.readouterr().err
        assert rc == 1, topic
        assert "topic" in err and len(err.strip().splitlines()) == 1, err
    assert not [p for p in tmp_path.rglob("*.json")]


def test_legal_names_still_round_trip(rsm: RemoteStorageManager, tmp_path: Path) -> None:
    md = _copy(rsm, tmp_path, topic="__cluster_metadata.x-Y_9")
    assert read_all(rsm.fetch_log_segment(md, 0))
    assert read_all(rsm.fetch_index(md, IndexType.OFFSET))
    rsm.delete_log_segment_data(md)
    left = [p for p in (tmp_path / "store").rglob("*") if p.is_file()]
    # only the location record: the topic's entry, the marker of a record kept from the first segment, and
    # the partition's log-start mark the delete raised (rsm.store.log_starts)
    marks = [p for p in left if p.name.startswith("_log-start-")]
    assert [m.name for m in marks] == [f"_log-start-0-{md.end_offset + 1:020d}"], left
    left = [p for p in left if p not in marks]
    registry = tmp_path / "store" / BUCKET / "_rsm" / "topic-locations"
    assert sorted(p.relative_to(registry).as_posix().split("/")[-1] == "_scanned.json" for p in left) == [
        False,
        True,
    ], left
    assert all(p.parent.parent.name == "topic-locations" for p in left if p.name != "_scanned.json")


@pytest.mark.parametrize(
    ("check", "name", "problem"),
    [
        (topic_problem, "orders.v2_eu-1", None),
        (topic_problem, "t" * 249, None),
        (topic_problem, "t" * 250, "over Kafka's 249"),
        (topic_problem, "..", "cannot be '.' or '..'"),
        (topic_problem, "a/b", "may hold only ASCII letters"),
        (bucket_problem, "a", None),  # a directory on the file store
        (bucket_problem, "Main", "lowercase"),
        (bucket_problem, "-main", "begin and end with a letter or a digit"),
        (bucket_problem, "a..b", "'..'"),
        (bucket_problem, "192.168.0.1", "IP address"),
        (prefix_problem, "tenant-a/", None),
        (prefix_problem, "/abs", "must be relative"),
        (prefix_problem, "a//b/", "empty segments"),
        (prefix_problem, "a/..", "must be relative"),
        (prefix_problem, "p" * 61, "over 60"),
        (key_problem, "orders-x/0/00000000000000000000-s.log", None),
        (key_problem, "../escape", "must be relative"),
        (key_problem, "a\\b", "backslashes"),
        (key_problem, "a\nb", "control character"),
    ],
)
def test_names_that_become_object_paths_follow_one_rule_per_kind(
    check, name: str, problem: str | None
) -> None:  # type: ignore[no-untyped-def]
    """Every door a name comes in by (config, overlay, custom metadata, manifest, CLI) asks the same rule:
    Kafka's for topics, S3's for buckets (one plain directory on the file store), and keys and prefixes that
    stay relative and inside their bucket."""
    answer = check(name)
    assert answer is None if problem is None else problem in answer


def test_each_cloud_adds_its_own_bucket_rules_to_the_common_one() -> None:
    assert bucket_problem("ab") is None and all(rule("ab") for rule in CLOUD_BUCKET_RULES.values())
    assert CLOUD_BUCKET_RULES["azure"]("my.logs") and CLOUD_BUCKET_RULES["s3"]("my.logs") is None
    assert CLOUD_BUCKET_RULES["gcs"]("google-logs") and CLOUD_BUCKET_RULES["s3"]("google-logs") is None
    assert CLOUD_BUCKET_RULES["s3"]("logs-s3alias") and CLOUD_BUCKET_RULES["gcs"]("logs-s3alias") is None
