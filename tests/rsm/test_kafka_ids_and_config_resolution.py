"""Kafka's ids parse and print as Kafka's base64; a topic's `unchecked.*` configs and the broker's resolve
with their sources (secrets hidden); a manager refuses work before `configure` and after `close`."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest
from kafka_segments import make_segment

from rsm import (
    CustomMetadata,
    LogConfig,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteStorageException,
    RemoteStorageManager,
    TopicIdPartition,
)
from rsm.api.errors import ConfigException
from rsm.api.metadata import uuid_from_base64, uuid_to_base64
from rsm.config.settings import ConfigSource, RsmConfig


def test_ids_accept_and_print_kafka_base64() -> None:
    # Kafka's well-known METADATA_TOPIC_ID is Uuid(0, 1), printed AAAAAAAAAAAAAAAAAAAAAQ
    assert uuid_to_base64(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"
    tip = TopicIdPartition("AAAAAAAAAAAAAAAAAAAAAQ", "__cluster_metadata", 0)  # type: ignore[arg-type]
    assert tip.topic_id == uuid.UUID(int=1)
    assert str(tip) == "AAAAAAAAAAAAAAAAAAAAAQ:__cluster_metadata-0"
    seg_id = uuid.uuid4()
    sid = RemoteLogSegmentId(tip, uuid_to_base64(seg_id))  # type: ignore[arg-type]
    assert sid.id == seg_id and uuid_from_base64(sid.id_base64) == seg_id
    with pytest.raises(ValueError, match="22 base64"):
        uuid_from_base64("short")
    md = RemoteLogSegmentMetadata(sid, 0, 9, 1, 1, 1, 100, {2: 5, 1: 0})
    assert list(md.segment_leader_epochs.items()) == [(1, 0), (2, 5)]
    replaced = dataclasses.replace(md, custom_metadata=CustomMetadata(b"x"))
    assert replaced.custom_metadata == CustomMetadata(b"x") and md.custom_metadata is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        md.start_offset = 3  # type: ignore[misc]
    with pytest.raises(ValueError, match="start <= end"):
        RemoteLogSegmentMetadata(sid, 10, 9, 1, 1, 1, 100, {})


def test_log_config_unchecked_configs() -> None:
    lc = LogConfig(
        {"retention.ms": 5, "unchecked.rsm.bucket": "a", "unchecked.other": "x", "cleanup.policy": None}
    )
    assert lc.unchecked_configs() == {"unchecked.rsm.bucket": "a", "unchecked.other": "x"}
    assert lc["retention.ms"] == "5" and "cleanup.policy" not in lc


def test_config_resolution_and_sources(tmp_path: Path) -> None:
    config = RsmConfig(
        {
            "rsm.config.storage.backend": "file",
            "storage.file.root": str(tmp_path),
            "bucket": "broker-bucket",
            "chunk.size": "1MiB",
            "storage.s3.secret.access.key": "s3cr3t",
        }
    )
    lc = LogConfig({"unchecked.rsm.prefix": "team/", "unchecked.rsm.chunk.size": "65536"})
    s = config.resolve(lc)
    assert (s.bucket, s.prefix, s.chunk_size, s.compression_enabled) == (
        "broker-bucket",
        "team/",
        65536,
        True,
    )
    entries = {e.name: e for e in config.describe(lc)}
    assert (
        entries["prefix"].source is ConfigSource.TOPIC_UNCHECKED
        and entries["prefix"].key == "unchecked.rsm.prefix"
    )
    assert entries["bucket"].source is ConfigSource.BROKER and entries["bucket"].value == "broker-bucket"
    assert entries["compression.enabled"].source is ConfigSource.DEFAULT
    assert entries["storage.s3.secret.access.key"].value == "[hidden]"
    assert "s3cr3t" not in repr(config) and "s3cr3t" not in repr(config.describe(lc))
    assert config.resolve(None).chunk_size == 1 << 20
    with pytest.raises(ConfigException, match="unchecked.rsm.chunk.size"):
        config.resolve(LogConfig({"unchecked.rsm.chunk.size": "12"}))
    with pytest.raises(ConfigException, match="unchecked.rsm.encryption.enabled"):
        config.resolve(LogConfig({"unchecked.rsm.encryption.enabled": "maybe"}))
    with pytest.raises(ConfigException, match="unchecked.rsm.bucket"):
        config.resolve(LogConfig({"unchecked.rsm.bucket": "a/b"}))
    with pytest.raises(ConfigException, match="storage.file.root"):
        RsmConfig({"storage.backend": "file"})
    policy_entry = {
        e.name: e for e in config.describe(LogConfig({"unchecked.record.validation.policy": "p"}))
    }
    assert policy_entry["record.validation.policy"].source is ConfigSource.TOPIC_UNCHECKED


def test_unconfigured_and_closed_manager_refuse_work(tmp_path: Path) -> None:
    rsm = RemoteStorageManager()
    tip = TopicIdPartition(uuid.uuid4(), "x", 0)
    seg = make_segment(tmp_path / "seg", tip, batches=1)
    with pytest.raises(RemoteStorageException, match="not configured"):
        rsm.copy_log_segment_data(seg.metadata, seg.data)
    rsm.configure({"storage.backend": "file", "storage.file.root": str(tmp_path / "store")})
    rsm.close()
    with pytest.raises(RemoteStorageException, match="closed"):
        rsm.fetch_log_segment(seg.metadata, 0)
    rsm2 = RemoteStorageManager()
    with pytest.raises(ConfigException, match="encryption.keyring.path"):
        rsm2.configure(
            {"storage.backend": "file", "storage.file.root": str(tmp_path), "encryption.enabled": "true"}
        )
