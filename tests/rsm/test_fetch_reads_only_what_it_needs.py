"""A fetch reads what it needs and no more: a ranged fetch downloads only the chunks covering its range, and
a segment's reader is opened once and reused, until the chunk allocator changes or its key leaves the
keyring."""

from __future__ import annotations

import dataclasses
import json
import os
import time
import uuid
from pathlib import Path

import pytest
from kafka_segments import make_segment, read_all, write_keyring

from rsm import (
    RemoteLogSegmentMetadata,
    RemoteStorageException,
    RemoteStorageManager,
    TopicIdPartition,
)
from rsm.fetch.segments import reader_of
from rsm.stored.manifest import Manifest


def test_ranged_fetch_downloads_only_covering_chunks(tmp_path: Path) -> None:
    rsm = RemoteStorageManager()
    keyring = write_keyring(tmp_path / "k.json")
    rsm.configure(
        {
            "storage.backend": "file",
            "storage.file.root": str(tmp_path / "store"),
            "chunk.size": "8192",
            "encryption.keyring.path": str(keyring),
            "encryption.enabled": "true",
            "encryption.key.id": "k1",
            "fetch.prefetch.chunks": "2",
        }
    )
    tip = TopicIdPartition(uuid.uuid4(), "ranges", 0)
    seg = make_segment(tmp_path / "seg", tip, batches=120, value_size=200)
    raw = seg.data.log_segment.read_bytes()
    try:
        md = dataclasses.replace(
            seg.metadata, custom_metadata=rsm.copy_log_segment_data(seg.metadata, seg.data)
        )
        manifest = Manifest.from_bytes(next((tmp_path / "store").rglob("*.manifest")).read_bytes())
        index = manifest.log
        assert index.count >= 6
        rsm.fetch_log_segment(md, 0, 0).close()  # warm the manifest cache
        for start, end in [(8192 * 2 + 5, 8192 * 3 + 100), (100, 200), (8192 * 4 - 1, 8192 * 4)]:
            rsm._state.chunks.clear()
            before = rsm.store.stats.snapshot()["bytes_read"]
            assert read_all(rsm.fetch_log_segment(md, start, end)) == raw[start : end + 1]
            downloaded = rsm.store.stats.snapshot()["bytes_read"] - before
            first, last = start // 8192, end // 8192
            assert downloaded == sum(index.stored_sizes[first : last + 1]), (start, end)
        # closing a stream early stops downloading: only the first chunk (and its prefetch) is read
        rsm._state.chunks.clear()
        before = rsm.store.stats.snapshot()["bytes_read"]
        stream = rsm.fetch_log_segment(md, 0)
        assert stream.read(10) == raw[:10]
        stream.close()
        rsm._state.executor.shutdown(wait=True)  # type: ignore[union-attr]  # let in-flight prefetches finish
        downloaded = rsm.store.stats.snapshot()["bytes_read"] - before
        assert downloaded <= sum(index.stored_sizes[:3]) < index.stored_size
    finally:
        rsm.close()


def _copied(rsm: RemoteStorageManager, tmp_path: Path, topic: str) -> tuple[RemoteLogSegmentMetadata, bytes]:
    seg = make_segment(tmp_path / topic, TopicIdPartition(uuid.uuid4(), topic, 0), batches=40, value_size=300)
    md = dataclasses.replace(seg.metadata, custom_metadata=rsm.copy_log_segment_data(seg.metadata, seg.data))
    return md, seg.data.log_segment.read_bytes()


def test_a_plain_segment_reader_is_reused_and_decodes_with_the_allocator_set_last(tmp_path: Path) -> None:
    rsm = RemoteStorageManager()
    rsm.configure(
        {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "chunk.size": "8192",
         "compression.enabled": "false", "cache.chunk.bytes": "0", "fetch.prefetch.chunks": "0"}
    )  # fmt: skip
    try:
        md, raw = _copied(rsm, tmp_path, "memo")
        first, keys = reader_of(rsm._state, md, None)
        again, keys_again = reader_of(rsm._state, md, None)
        assert again is first and keys_again is keys  # opened once per segment
        assert (
            reader_of(rsm._state, dataclasses.replace(md), None)[1] == keys
        )  # an equal metadata object: same keys
        blocks: list[int] = []

        def allocate(size: int) -> bytearray:
            blocks.append(size)
            return bytearray(size)

        rsm.set_chunk_allocator(allocate)
        assert (
            reader_of(rsm._state, md, None)[0] is not first
        )  # made again: it decodes with the new allocator
        assert read_all(rsm.fetch_log_segment(md, 100, 9000)) == raw[100:9001]
        assert blocks == [8192, 8192]  # both chunks of the range went to the allocator set last
    finally:
        rsm.close()


def test_an_encrypted_segment_stops_decrypting_when_its_key_leaves_the_keyring(tmp_path: Path) -> None:
    keyring = write_keyring(tmp_path / "k.json", ("k1", "k2"))
    rsm = RemoteStorageManager()
    rsm.configure(
        {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "encryption.enabled": "true",
         "encryption.keyring.path": str(keyring), "encryption.key.id": "k1", "cache.chunk.bytes": "0"}
    )  # fmt: skip
    try:
        md, raw = _copied(rsm, tmp_path, "enc-memo")
        assert read_all(rsm.fetch_log_segment(md, 0)) == raw
        keys = json.loads(keyring.read_text())
        del keys["k1"]
        keyring.write_text(json.dumps(keys))
        os.utime(keyring, (time.time() + 5, time.time() + 5))  # a new mtime even on a coarse clock
        with pytest.raises(RemoteStorageException, match="'k1' is not in the keyring"):
            rsm.fetch_log_segment(md, 0)
    finally:
        rsm.close()
