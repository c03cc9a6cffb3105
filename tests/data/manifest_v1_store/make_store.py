"""Write the version-1 fixture store with the code of commit 9b17d63 (the last release writing manifest v1).

Run from the repository root with the old code first on the path, never the current one:

    git archive 9b17d63 | tar -x -C /tmp/oldmain      # an empty directory
    (cd /tmp/oldmain && python setup.py build_ext --inplace -q)
    PYTHONPATH=/tmp/oldmain python tests/data/manifest_v1_store/make_store.py tests/data/manifest_v1_store

It copies two small segments with the old RemoteStorageManager into ``<out>/store`` (a file store,
4 KiB chunks, zstd on): ``plain`` (not encrypted; one chunk of random values stays uncompressed) and
``secure`` (AES-256-GCM under the test-only key below, with a transaction index), and writes
``<out>/segments.json``: each segment's metadata as Kafka would hand it back (custom metadata included)
and the SHA-256 of every original file, so a reader can be checked without the originals.
Data keys, nonces and copy ids are random: a rerun gives other stored bytes, equally valid.
"""

# ruff: noqa: I001 - imports the old checkout's rsm.copy.manifest (it runs against 9b17d63, see above)
from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import random
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import rsm
from rsm import LogConfig, LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from rsm.api.metadata import uuid_to_base64
from rsm.copy.manifest import VERSION
from segment_format.codecs import CompressionType
from segment_format.transaction_index import AbortedTxn, TransactionIndex
from segment_format.writer import SegmentWriter, build_batch

# Obviously not a secret: 32 ASCII bytes that say what they are. Only this fixture uses it.
TEST_ONLY_KEY_ID = "test-only-k1"
TEST_ONLY_KEY = b"kafka-tiered-rsm-TEST-ONLY-key-1"
BUCKET = "fixture-bucket"
PREFIX = "v1/"
TOPIC_ID = uuid.UUID("00000000-0000-4000-8000-00000000f1f1")
SEGMENT_IDS = {
    "plain": uuid.UUID("00000000-0000-4000-8000-000000000001"),
    "secure": uuid.UUID("00000000-0000-4000-8000-000000000002"),
}
LOG_CONFIGS = {
    "plain": {"unchecked.rsm.encryption.enabled": "false"},
    "secure": {
        "unchecked.rsm.encryption.enabled": "true",
        "unchecked.rsm.encryption.key.id": TEST_ONLY_KEY_ID,
    },
}
TIMESTAMP = 1_700_000_000_000


def write_segment(directory: Path, name: str, seed: int) -> tuple[LogSegmentData, int]:
    """A segment of three 4 KiB chunks: text batches (zstd), gzip batches of random values (stored as they
    are: already compressed), text batches again."""
    rng = random.Random(seed)
    offset = 0
    with SegmentWriter(directory, 0, index_interval_bytes=1024) as writer:
        while writer.size_in_bytes < 11 * 1024:
            gzip = 4096 <= writer.size_in_bytes < 8192 - 512
            records = []
            for _ in range(rng.randint(3, 6)):
                value = rng.randbytes(150) if gzip else f"{name}-value-{offset}-".encode() * 6
                records.append((f"key-{offset}".encode(), value, [("h", b"x")], TIMESTAMP + offset))
                offset += 1
            codec = CompressionType.GZIP if gzip else CompressionType.NONE
            writer.append(build_batch(records, base_offset=offset - len(records), compression=codec))
    stem = directory / f"{0:020d}"
    snapshot = directory / f"{0:020d}.snapshot"
    snapshot.write_bytes(f"producer snapshot of {name} (opaque to the RSM)".encode())
    txn = None
    if name == "secure":
        index = TransactionIndex()
        index.append(AbortedTxn(7, 3, 9, 10))
        txn = directory / f"{0:020d}.txnindex"
        txn.write_bytes(index.to_bytes())
    data = LogSegmentData(
        Path(f"{stem}.log"), Path(f"{stem}.index"), Path(f"{stem}.timeindex"), txn, snapshot, b"0\n1\n0 0\n"
    )
    return data, offset - 1


def main(out: Path) -> None:
    assert VERSION == 1, f"run this with the code of 9b17d63 first on PYTHONPATH, not {rsm.__file__}"
    store = out / "store"
    shutil.rmtree(store, ignore_errors=True)
    segments = []
    with tempfile.TemporaryDirectory() as tmp:
        keyring = Path(tmp) / "test-only-kek.json"
        keyring.write_text(json.dumps({TEST_ONLY_KEY_ID: base64.b64encode(TEST_ONLY_KEY).decode()}))
        manager = rsm.RemoteStorageManager()
        manager.configure(
            {
                "storage.backend": "file",
                "storage.file.root": str(store),
                "bucket": BUCKET,
                "prefix": PREFIX,
                "chunk.size": "4096",
                "compression.enabled": "true",
                "encryption.keyring.path": str(keyring),
            }
        )
        try:
            for seed, (name, segment_id) in enumerate(SEGMENT_IDS.items()):
                data, last = write_segment(Path(tmp) / name, name, seed)
                size = data.log_segment.stat().st_size
                tip = TopicIdPartition(TOPIC_ID, name, 0)
                metadata = RemoteLogSegmentMetadata(
                    RemoteLogSegmentId(tip, segment_id), 0, last, TIMESTAMP + last, 1, TIMESTAMP, size, {0: 0}
                )
                custom = manager.copy_log_segment_data(metadata, data, LogConfig(LOG_CONFIGS[name]))
                metadata = dataclasses.replace(metadata, custom_metadata=custom)
                originals = {
                    "log": data.log_segment.read_bytes(),
                    "OFFSET": data.offset_index.read_bytes(),
                    "TIMESTAMP": data.time_index.read_bytes(),
                    "PRODUCER_SNAPSHOT": data.producer_snapshot_index.read_bytes(),
                    "LEADER_EPOCH": data.leader_epoch_index,
                }
                if data.transaction_index is not None:
                    originals["TRANSACTION"] = data.transaction_index.read_bytes()
                segments.append(
                    {
                        "name": name,
                        "topic": tip.topic,
                        "topic_id": uuid_to_base64(TOPIC_ID),
                        "partition": 0,
                        "segment_id": uuid_to_base64(segment_id),
                        "start_offset": 0,
                        "end_offset": last,
                        "max_timestamp_ms": TIMESTAMP + last,
                        "broker_id": 1,
                        "event_timestamp_ms": TIMESTAMP,
                        "segment_size_in_bytes": size,
                        "segment_leader_epochs": {"0": 0},
                        "custom_metadata": base64.b64encode(custom.value).decode() if custom else None,
                        "log_config": LOG_CONFIGS[name],
                        "sha256": {k: hashlib.sha256(v).hexdigest() for k, v in originals.items()},
                    }
                )
        finally:
            manager.close()
    (out / "segments.json").write_text(json.dumps({"segments": segments}, indent=2) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
