"""A copy never writes a topic's segment in plaintext, or under another key, because a setting vanished.

Each case tiers one encrypted segment, then takes away what chose its encryption in one way or another, and
checks that the next copy is refused with one line naming the topic and the setting, with nothing written; and
that saying it explicitly (the level that chose it, or above) lets the copy through.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from kafka_segments import Segment, make_segment, write_keyring
from test_catalog_home import with_past

from rsm import LogConfig, RemoteStorageManager, TopicIdPartition
from rsm.api.errors import ConfigException, RemoteStorageException
from rsm.config.settings import Backend, RsmConfig
from rsm.store.local import LocalStore
from rsm.store.objects import ObjectStore
from rsm.store.overlays import TopicOverlayStore
from rsm.stored.manifest import Manifest
from rsm.stored.overlay import overlay_key
from rsm.stored.topic_encryption import MEMORY_DIR

LC = LogConfig({"retention.ms": "-1"})
BUCKET = "tiered"


class Broker:
    """One broker's RSM settings over a file store, and what is in the store."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "store"
        keyring = write_keyring(tmp_path / "keyring.json")
        keyring.chmod(0o600)
        self.configs = {
            "storage.backend": "file",
            "storage.file.root": str(self.root),
            "bucket": BUCKET,
            "encryption.keyring.path": str(keyring),
            "topic.overlay.cache.ms": "0",
        }
        self.tip = TopicIdPartition(uuid.uuid4(), "payments", 0)
        self.tmp = tmp_path
        self.next_offset = 0
        self.overlays = TopicOverlayStore(ObjectStore.from_config(RsmConfig(self.configs)), BUCKET, "")

    def segment(self) -> Segment:
        seg = make_segment(
            self.tmp / f"s{self.next_offset}", self.tip, base_offset=self.next_offset, batches=8
        )
        seg = with_past(seg, 0)
        self.next_offset = seg.metadata.end_offset + 1
        return seg

    def copy(self, seg: Segment, **broker: str) -> None:
        rsm = RemoteStorageManager()
        rsm.configure({**self.configs, **broker})
        try:
            rsm.copy_log_segment_data(seg.metadata, seg.data, LC)
        finally:
            rsm.close()

    def data(self) -> dict[str, bytes]:
        """The segments' objects (not the store's documents)."""
        root = self.root / BUCKET
        return {
            p.relative_to(root).as_posix(): p.read_bytes()
            for p in root.rglob("*")
            if p.is_file() and "_rsm/" not in p.relative_to(root).as_posix()
        }

    def key_of(self, seg: Segment) -> str | None:
        stem = f"{seg.metadata.start_offset:020d}-{seg.metadata.remote_log_segment_id.id_base64}.manifest"
        (raw,) = [v for k, v in self.data().items() if k.endswith(stem)]
        manifest = Manifest.from_bytes(raw)
        return None if manifest.encryption is None else manifest.encryption.key_id

    def refused(self, seg: Segment, *words: str, **broker: str) -> str:
        before = self.data()
        with pytest.raises(RemoteStorageException) as caught:
            self.copy(seg, **broker)
        line = str(caught.value)
        assert "\n" not in line and self.tip.topic in line, line
        for word in words:
            assert word in line, line
        assert self.data() == before  # nothing written
        return line


def test_an_overlay_removed_does_not_turn_encryption_off(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    b.overlays.write(b.tip.topic, b.tip.topic_id, {"unchecked.rsm.encryption.enabled": "true",
                                                   "unchecked.rsm.encryption.key.id": "k2"})  # fmt: skip
    first = b.segment()
    b.copy(first)
    assert b.key_of(first) == "k2"
    b.overlays.delete(b.tip.topic, b.tip.topic_id)
    second = b.segment()
    b.refused(second, "k2", "unchecked.rsm.encryption.enabled=false")
    # the broker saying false explicitly is not enough for a topic that chose encryption itself
    b.refused(second, "unchecked.rsm.encryption.enabled=false", **{"encryption.enabled": "false"})
    # the topic saying so is
    b.overlays.write(b.tip.topic, b.tip.topic_id, {"unchecked.rsm.encryption.enabled": "false"})
    b.copy(second)
    assert b.key_of(second) is None


def test_a_topics_own_key_is_not_replaced_by_the_brokers_default(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    b.overlays.write(b.tip.topic, b.tip.topic_id, {"unchecked.rsm.encryption.enabled": "true",
                                                   "unchecked.rsm.encryption.key.id": "k2"})  # fmt: skip
    first = b.segment()
    b.copy(first, **{"encryption.key.id": "k1"})
    b.overlays.write(b.tip.topic, b.tip.topic_id, {"unchecked.rsm.encryption.enabled": "true"})
    second = b.segment()
    b.refused(second, "k2", "k1", "unchecked.rsm.encryption.key.id", **{"encryption.key.id": "k1"})
    # the topic choosing k1 itself re-keys it on purpose
    b.overlays.write(b.tip.topic, b.tip.topic_id, {"unchecked.rsm.encryption.enabled": "true",
                                                   "unchecked.rsm.encryption.key.id": "k1"})  # fmt: skip
    b.copy(second, **{"encryption.key.id": "k1"})
    assert b.key_of(second) == "k1"


def test_the_brokers_default_key_rotates_and_turns_off_only_explicitly(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    on = {"encryption.enabled": "true"}
    first, second, third, fourth = b.segment(), b.segment(), b.segment(), b.segment()
    b.copy(first, **on, **{"encryption.key.id": "k1"})
    b.copy(second, **on, **{"encryption.key.id": "k2"})  # rotating the default key: fine
    assert (b.key_of(first), b.key_of(second)) == ("k1", "k2")
    # encryption.enabled dropped from the broker's properties: the built-in default is not a decision
    b.refused(third, "encryption.enabled", "built-in default", **{"encryption.key.id": "k2"})
    b.copy(third, **{"encryption.enabled": "false"})  # written in the broker's properties: a decision
    assert b.key_of(third) is None
    b.copy(fourth)  # plaintext now remembered: nothing to protect
    assert b.key_of(fourth) is None


def test_a_topic_never_encrypted_leaves_no_memory(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    b.copy(b.segment())
    assert not list((b.root / BUCKET).glob(MEMORY_DIR + "*"))


@pytest.mark.parametrize("fault", ["corrupt", "denied", "store error"])
def test_an_overlay_that_cannot_be_read_fails_the_copy_with_nothing_written(
    tmp_path: Path, fault: str
) -> None:
    b = Broker(tmp_path)
    b.overlays.write(b.tip.topic, b.tip.topic_id, {"unchecked.rsm.encryption.enabled": "true",
                                                   "unchecked.rsm.encryption.key.id": "k2"})  # fmt: skip
    key = overlay_key("", b.tip.topic, b.tip.topic_id)
    seg = make_segment(tmp_path / "seg", b.tip, batches=8)  # the topic's first segment: nothing to compare
    if fault == "corrupt":
        (b.root / BUCKET / key).write_bytes(b'{"version": 1, "topic": "payments", "configs": ')
        expected = ConfigException
    else:
        expected = RemoteStorageException
    error = PermissionError(13, "Access Denied") if fault == "denied" else TimeoutError("read timed out")

    class FailingOverlay(LocalStore):
        def get(self, bucket: str, k: str) -> bytes:
            if k == key and fault != "corrupt":
                raise error
            return super().get(bucket, k)

    real = ObjectStore.from_config(RsmConfig(b.configs))
    store = FailingOverlay(real.fs, Backend.FILE, real.root, real.part_size)
    rsm = RemoteStorageManager(store=store)
    rsm.configure(b.configs)
    try:
        with pytest.raises(expected) as caught:
            rsm.copy_log_segment_data(seg.metadata, seg.data, LC)
    finally:
        rsm.close()
    line = str(caught.value)
    assert "\n" not in line and key in line and "payments" in line, line
    assert b.data() == {}


def test_a_corrupt_encryption_memory_fails_the_copy(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    first = b.segment()
    b.copy(first, **{"encryption.enabled": "true", "encryption.key.id": "k1"})
    (memory,) = (b.root / BUCKET).glob(MEMORY_DIR + "*")
    memory.write_text("not json")
    on = {"encryption.enabled": "true", "encryption.key.id": "k1"}
    line = b.refused(b.segment(), "topic encryption memory", **on)
    assert memory.name in line


def test_a_topic_with_a_past_the_catalog_does_not_know_is_refused(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    b.next_offset = 5000  # offsets 0..4999 were tiered by someone, somewhere this store does not record
    b.refused(b.segment(), "0..4999", "catalog.bucket")
    # a store written before location records: the partition's earlier segments where the copy goes
    old = TopicIdPartition(uuid.uuid4(), "legacy", 0)
    first = make_segment(tmp_path / "l0", old, batches=4)
    b.copy(Segment(first.metadata, first.data, first.dir))
    for entry in (b.root / BUCKET / "_rsm").rglob("legacy-*"):
        if entry.is_file():
            entry.unlink()
    later = with_past(
        make_segment(tmp_path / "l1", old, base_offset=first.metadata.end_offset + 1, batches=4), 0
    )
    b.copy(later)
