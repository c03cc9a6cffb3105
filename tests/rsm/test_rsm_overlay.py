"""Per-topic overlay (rsm.store.overlays): `unchecked.*` settings kept in the store for brokers that refuse them.

Resolution order LogConfig > overlay > broker > default, validation with the RSM's own parsers, the cache
TTL, isolation of a recreated topic (new id, same name), and copies landing where the overlay says on the
file store and on moto S3.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path

import pytest
from kafka_segments import make_segment, read_all, write_keyring
from test_rsm_topics import Store, store  # noqa: F401 - parametrized store fixture (file and moto S3)

from rsm import LogConfig, RemoteStorageManager, TopicIdPartition
from rsm.api.errors import ConfigException, RemoteStorageException
from rsm.api.metadata import uuid_to_base64
from rsm.config.settings import ConfigSource, RsmConfig
from rsm.store.local import LocalStore
from rsm.store.objects import ObjectStore
from rsm.store.overlays import OverlayCache, TopicOverlayStore
from rsm.stored.location_record import REGISTRY_DIR
from rsm.stored.manifest import Manifest
from rsm.stored.overlay import OVERLAY_DIR, TopicOverlay, overlay_key


def _file_store(tmp_path: Path) -> tuple[RsmConfig, ObjectStore]:
    config = RsmConfig({"storage.backend": "file", "storage.file.root": str(tmp_path / "store")})
    return config, ObjectStore.from_config(config)


def test_resolution_order_logconfig_then_overlay_then_broker_then_default(tmp_path: Path) -> None:
    config = RsmConfig(
        {
            "storage.backend": "file",
            "storage.file.root": str(tmp_path),
            "bucket": "broker-bucket",
            "prefix": "broker/",
            "chunk.size": "1MiB",
        }
    )
    overlay = {
        "unchecked.rsm.bucket": "overlay-bucket",
        "unchecked.rsm.prefix": "overlay/",
        "unchecked.rsm.compression.enabled": "false",
        "unchecked.record.validation.policy": "schema-v1",
    }
    lc = LogConfig({"unchecked.rsm.prefix": "topic/", "retention.ms": "1000"})
    s = config.resolve(lc, overlay)
    assert (s.bucket, s.prefix, s.compression_enabled, s.chunk_size) == (
        "overlay-bucket",
        "topic/",
        False,
        1 << 20,
    )
    assert s.validation_policy == "schema-v1"
    entries = {e.name: e for e in config.describe(lc, overlay)}
    assert entries["prefix"].source is ConfigSource.TOPIC_UNCHECKED and entries["prefix"].value == "topic/"
    assert entries["bucket"].source is ConfigSource.TOPIC_OVERLAY
    assert entries["bucket"].key == "unchecked.rsm.bucket" and entries["bucket"].value == "overlay-bucket"
    assert entries["compression.enabled"].source is ConfigSource.TOPIC_OVERLAY
    assert entries["chunk.size"].source is ConfigSource.BROKER
    assert entries["encryption.enabled"].source is ConfigSource.DEFAULT
    assert entries["record.validation.policy"].source is ConfigSource.TOPIC_OVERLAY
    # a policy named by the LogConfig wins over the overlay's
    lc_policy = LogConfig({"record.validation.policy": "strict"})
    assert config.resolve(lc_policy, overlay).validation_policy == "strict"
    # no overlay: as before
    assert config.resolve(lc).bucket == "broker-bucket"
    # an overlay value the parser refuses names its key
    with pytest.raises(ConfigException, match=r"unchecked\.rsm\.chunk\.size"):
        config.resolve(None, {"unchecked.rsm.chunk.size": "12"})


@pytest.mark.parametrize(
    ("configs", "match"),
    [
        ({"rsm.bucket": "x"}, r"'rsm\.bucket' is not an unchecked"),
        ({"retention.ms": "1"}, r"'retention\.ms' is not an unchecked"),
        ({"unchecked.rsm.buckets": "x"}, r"unknown topic config 'unchecked\.rsm\.buckets'"),
        ({"unchecked.rsm.storage.backend": "s3"}, r"unknown topic config"),  # a broker-only setting
        ({"unchecked.rsm.bucket": "a/b"}, r"unchecked\.rsm\.bucket must be a bucket name"),
        ({"unchecked.rsm.prefix": "/abs"}, r"unchecked\.rsm\.prefix must be a relative key prefix"),
        ({"unchecked.rsm.encryption.enabled": "maybe"}, r"unchecked\.rsm\.encryption\.enabled must be true"),
        ({"unchecked.rsm.chunk.size": "1k"}, r"unchecked\.rsm\.chunk\.size must be between"),
        ({"unchecked.rsm.record.validation.on.violation": "ignore"}, r"must be one of fail, tier"),
        ({"unchecked.record.validation.policy": "  "}, r"unchecked\.record\.validation\.policy"),
    ],
)
def test_overlay_refuses_bad_keys_and_values(tmp_path: Path, configs: dict[str, str], match: str) -> None:
    _, object_store = _file_store(tmp_path)
    overlays = TopicOverlayStore(object_store, "main", "p/")
    with pytest.raises(ConfigException, match=match):
        overlays.write("t", uuid.uuid4(), configs)
    assert object_store.list("main") == []


def test_overlay_refuses_sensitive_keys_without_echoing_them(tmp_path: Path) -> None:
    _, object_store = _file_store(tmp_path)
    overlays = TopicOverlayStore(object_store, "main")
    for key in (
        "unchecked.rsm.s3.secret.access.key",
        "unchecked.rsm.password",
        "unchecked.rsm.session.token",
    ):
        with pytest.raises(ConfigException, match="looks sensitive") as info:
            overlays.write("t", uuid.uuid4(), {key: "hunter2-value"})
        assert "hunter2-value" not in str(info.value)
    assert object_store.list("main") == []


def test_overlay_document_round_trip_and_defects(tmp_path: Path) -> None:
    _, object_store = _file_store(tmp_path)
    overlays = TopicOverlayStore(object_store, "main", "tiers/")
    tid = uuid.uuid4()
    assert overlays.read("orders", tid) is None
    written = overlays.write("orders", tid, {"unchecked.rsm.bucket": " b1 "}, now_ms=1234)
    assert written is not None
    key = f"tiers/{OVERLAY_DIR}orders-{uuid_to_base64(tid)}.json"
    assert overlay_key("tiers/", "orders", tid) == key
    doc = json.loads(object_store.get("main", key))
    assert doc == {
        "version": 1,
        "topic": "orders",
        "topic_id": uuid_to_base64(tid),
        "configs": {"unchecked.rsm.bucket": "b1"},
        "updated_ms": 1234,
    }
    assert overlays.read("orders", tid) == TopicOverlay("orders", tid, {"unchecked.rsm.bucket": "b1"}, 1234)
    # no temporary file is left beside it (the write is a rename of a finished file)
    assert [p.name for p in (tmp_path / "store" / "main" / "tiers" / OVERLAY_DIR).iterdir()] == [
        f"orders-{uuid_to_base64(tid)}.json"
    ]
    # a hand-edited document with a bad value is refused, naming the object and the key
    doc["configs"]["unchecked.rsm.chunk.size"] = "0"
    object_store.put("main", key, json.dumps(doc).encode())
    with pytest.raises(
        ConfigException, match=rf"topic overlay file:main/{key}: .*unchecked\.rsm\.chunk\.size"
    ):
        overlays.read("orders", tid)
    object_store.put("main", key, b"{not json")
    with pytest.raises(ConfigException, match="is not JSON"):
        overlays.read("orders", tid)
    object_store.put("main", key, json.dumps({**doc, "version": 2}).encode())
    with pytest.raises(ConfigException, match="version 2"):
        overlays.read("orders", tid)
    # a document naming another topic id (copied by hand) is not taken for this topic
    other = TopicOverlay("orders", uuid.uuid4(), {"unchecked.rsm.bucket": "x"})
    object_store.put("main", key, other.to_bytes())
    with pytest.raises(ConfigException, match="names topic orders/"):
        overlays.read("orders", tid)
    # an empty configuration removes the overlay
    overlays.write("orders", tid, {"unchecked.rsm.prefix": "x/"})
    assert overlays.write("orders", tid, {}) is None
    assert overlays.read("orders", tid) is None
    assert object_store.list("main") == []


def test_cache_serves_until_the_ttl_expires(tmp_path: Path) -> None:
    _, object_store = _file_store(tmp_path)
    overlays = TopicOverlayStore(object_store, "main")
    now = [100.0]
    cache = OverlayCache(overlays, ttl_ms=5000, clock=lambda: now[0])
    tid = uuid.uuid4()
    assert dict(cache.configs("t", tid)) == {}  # absent: cached too
    overlays.write("t", tid, {"unchecked.rsm.bucket": "one"})
    now[0] += 4.9
    assert dict(cache.configs("t", tid)) == {}
    now[0] += 0.2
    assert dict(cache.configs("t", tid)) == {"unchecked.rsm.bucket": "one"}
    overlays.write("t", tid, {"unchecked.rsm.bucket": "two"})
    now[0] += 1
    assert cache.configs("t", tid)["unchecked.rsm.bucket"] == "one"
    cache.invalidate("t", tid)
    assert cache.configs("t", tid)["unchecked.rsm.bucket"] == "two"
    overlays.delete("t", tid)
    now[0] += 5.1
    assert dict(cache.configs("t", tid)) == {}
    # ttl 0: every call reads the store
    fresh = OverlayCache(overlays, ttl_ms=0)
    overlays.write("t", tid, {"unchecked.rsm.bucket": "three"})
    assert fresh.configs("t", tid)["unchecked.rsm.bucket"] == "three"


def test_copies_follow_the_overlay_and_old_segments_stay_reachable(
    store: Store,  # noqa: F811
    tmp_path: Path,
) -> None:
    rsm = RemoteStorageManager()
    rsm.configure({**store.configs, "bucket": store.buckets["b"], "topic.overlay.cache.ms": "0"})
    overlays = TopicOverlayStore(rsm.store, store.buckets["b"], "")
    a = TopicIdPartition(uuid.uuid4(), "topic-a", 0)
    plain = TopicIdPartition(uuid.uuid4(), "topic-plain", 0)
    # what the JVM plugin sends today: the topic's real configs, no unchecked.* keys
    lc = LogConfig({"retention.ms": "-1", "remote.storage.enable": "true"})
    overlays.write(
        a.topic,
        a.topic_id,
        {
            "unchecked.rsm.bucket": store.buckets["a"],
            "unchecked.rsm.prefix": "tenant-a/",
            "unchecked.rsm.encryption.enabled": "true",
            "unchecked.rsm.encryption.key.id": "k2",
        },
    )
    seg_a = make_segment(tmp_path / "a", a, base_offset=0, batches=20, value_size=300)
    seg_p = make_segment(tmp_path / "p", plain, base_offset=0, batches=5)
    try:
        md_a = dataclasses.replace(
            seg_a.metadata, custom_metadata=rsm.copy_log_segment_data(seg_a.metadata, seg_a.data, lc)
        )
        rsm.copy_log_segment_data(seg_p.metadata, seg_p.data, lc)
        objects_a = store.keys(store.buckets["a"])
        assert len(objects_a) == 3
        assert all(k.startswith(f"tenant-a/topic-a-{uuid_to_base64(a.topic_id)}/0/") for k in objects_a)
        manifest = Manifest.from_bytes(next(v for k, v in objects_a.items() if k.endswith(".manifest")))
        assert manifest.encryption is not None and manifest.encryption.key_id == "k2"
        raw = seg_a.data.log_segment.read_bytes()
        log_obj = next(v for k, v in objects_a.items() if k.endswith(".log"))
        assert raw[-200:] not in log_obj  # encrypted
        # the topic without an overlay goes to the broker's bucket (beside the overlay document)
        objects_b = store.keys(store.buckets["b"])
        assert sorted(k.rsplit(".", 1)[-1] for k in objects_b if k.startswith("topic-plain-")) == [
            "indexes",
            "log",
            "manifest",
        ]
        assert [k for k in objects_b if k.startswith(OVERLAY_DIR)] == [
            f"{OVERLAY_DIR}topic-a-{uuid_to_base64(a.topic_id)}.json"
        ]
        entries = {e.name: e for e in rsm.describe_topic_config(a, lc)}
        assert entries["bucket"].source is ConfigSource.TOPIC_OVERLAY
        assert entries["encryption.key.id"].value == "k2"

        # the overlay moves topic A: the next copy (cache 0 ms) goes to a2; the old segment still reads.
        # An overlay rewritten without its encryption keys does not turn encryption off by omission
        # (rsm.copy.downgrade): the copy is refused and nothing reaches a2 until it says so explicitly
        overlays.write(a.topic, a.topic_id, {"unchecked.rsm.bucket": store.buckets["a2"]})
        seg_a2 = make_segment(tmp_path / "a2", a, base_offset=5000, batches=3)
        with pytest.raises(ConfigException, match="encryption.enabled=false on the topic"):
            rsm.copy_log_segment_data(seg_a2.metadata, seg_a2.data, lc)
        assert store.keys(store.buckets["a2"]) == {}
        overlays.write(
            a.topic,
            a.topic_id,
            {"unchecked.rsm.bucket": store.buckets["a2"], "unchecked.rsm.encryption.enabled": "false"},
        )
        rsm.copy_log_segment_data(seg_a2.metadata, seg_a2.data, lc)
        objects_a2 = store.keys(store.buckets["a2"])
        assert len(objects_a2) == 3 and all(k.startswith("topic-a-") for k in objects_a2)
        assert (
            Manifest.from_bytes(next(v for k, v in objects_a2.items() if k.endswith(".manifest"))).encryption
            is None
        )
        assert read_all(rsm.fetch_log_segment(md_a, 0, None, lc)) == raw
        # a LogConfig carrying the key (a broker passing the `unchecked.*` keys through) wins over the overlay
        seg_a3 = make_segment(tmp_path / "a3", a, base_offset=9000, batches=2)
        rsm.copy_log_segment_data(
            seg_a3.metadata, seg_a3.data, LogConfig({"unchecked.rsm.bucket": store.buckets["b"]})
        )
        assert len([k for k in store.keys(store.buckets["b"]) if k.startswith("topic-a-")]) == 3
        rsm.delete_log_segment_data(md_a, lc)
        assert store.keys(store.buckets["a"]) == {}
    finally:
        rsm.close()


def test_recreated_topic_does_not_inherit_the_overlay(tmp_path: Path) -> None:
    keyring = write_keyring(tmp_path / "keyring.json")
    rsm = RemoteStorageManager()
    rsm.configure(
        {
            "storage.backend": "file",
            "storage.file.root": str(tmp_path / "store"),
            "bucket": "main",
            "encryption.keyring.path": str(keyring),
            "topic.overlay.cache.ms": "60000",
        }
    )
    try:
        old = TopicIdPartition(uuid.uuid4(), "events", 0)
        new = TopicIdPartition(uuid.uuid4(), "events", 0)  # deleted and created again: a new id
        TopicOverlayStore(rsm.store, "main").write(
            old.topic, old.topic_id, {"unchecked.rsm.bucket": "old-bucket", "unchecked.rsm.prefix": "o/"}
        )
        seg = make_segment(tmp_path / "new", new, batches=3)
        rsm.copy_log_segment_data(seg.metadata, seg.data, LogConfig())
        assert rsm.store.list("old-bucket") == []
        new_keys = [k for k in rsm.store.list("main") if not k.startswith((OVERLAY_DIR, REGISTRY_DIR))]
        assert len(new_keys) == 3 and all(
            k.startswith(f"events-{uuid_to_base64(new.topic_id)}/") for k in new_keys
        )
        assert rsm.config.resolve(None, rsm.topic_overlay(old)).bucket == "old-bucket"
        assert dict(rsm.topic_overlay(new)) == {}
        overlays = TopicOverlayStore(rsm.store, "main")
        assert [o.topic_id for o in overlays.list()] == [old.topic_id]
        overlays.write(new.topic, new.topic_id, {"unchecked.rsm.prefix": "n/"})
        overlays.write(
            "events-archive", uuid.uuid4(), {"unchecked.rsm.prefix": "a/"}
        )  # shares the name prefix
        assert {o.topic_id for o in overlays.for_topic("events")} == {old.topic_id, new.topic_id}
        # the RSM's cache (topic.overlay.cache.ms=60000) still answers "no overlay" for the new id
        assert rsm.overlays.ttl == 60.0 and dict(rsm.topic_overlay(new)) == {}
        rsm.overlays.invalidate(new.topic, new.topic_id)
        assert dict(rsm.topic_overlay(new)) == {"unchecked.rsm.prefix": "n/"}
    finally:
        rsm.close()


class _FailingOverlayReads(LocalStore):
    """A file store whose overlay reads fail, as an unreachable or forbidden bucket would."""

    def get(self, bucket: str, key: str) -> bytes:
        if OVERLAY_DIR in key:
            raise OSError("connection reset by peer")
        return super().get(bucket, key)


def test_unreadable_overlay_fails_the_copy_and_writes_nothing(tmp_path: Path) -> None:
    config, base = _file_store(tmp_path)
    failing = _FailingOverlayReads(base.fs, base.backend, base.root)
    rsm = RemoteStorageManager(store=failing)
    rsm.configure({"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"})
    try:
        tip = TopicIdPartition(uuid.uuid4(), "t", 0)
        seg = make_segment(tmp_path / "s", tip, batches=2)
        # an overlay may ask for encryption: copying without knowing it could store plaintext
        with pytest.raises(RemoteStorageException, match=r"cannot read the topic overlay file:main/_rsm/"):
            rsm.copy_log_segment_data(seg.metadata, seg.data, LogConfig())
        assert failing.list("main") == []
    finally:
        rsm.close()
