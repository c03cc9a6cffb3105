"""Property tests: whatever the segment and the byte range, a fetch returns exactly the original bytes.

Runs on the file store and on every cloud over HTTP (moto's S3, fake-gcs-server, Azurite: the `cloud`
fixture), with encryption and compression on and off,
chunk sizes small enough that ranges cross many chunks. Every index fetched must equal the file copied.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka_segments import GZIP, make_segment, read_all, write_keyring

from rsm import IndexType, LogConfig, RemoteStorageManager, TopicIdPartition

SETTINGS = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=False,
)


def _check_roundtrip(rsm: RemoteStorageManager, base: Path, data: st.DataObject, bucket: str) -> None:
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    tip = TopicIdPartition(
        uuid.uuid4(), data.draw(st.sampled_from(["orders", "t.x_y-z"])), data.draw(st.integers(0, 99))
    )
    seg = make_segment(
        base / uuid.uuid4().hex,
        tip,
        base_offset=data.draw(st.integers(0, 10**12), label="base_offset"),
        batches=data.draw(st.integers(1, 30), label="batches"),
        records_per_batch=data.draw(st.integers(1, 20)),
        value_size=data.draw(st.integers(0, 300)),
        compression=data.draw(st.sampled_from([0, GZIP]), label="batch codec"),
        compressible=data.draw(st.booleans()),
        with_txn=data.draw(st.booleans(), label="txn index"),
        seed=seed,
    )
    encrypted = data.draw(st.booleans(), label="encrypted")
    compressed = data.draw(st.booleans(), label="compressed")
    chunk = data.draw(st.sampled_from([4096, 5000, 16384, 1 << 20]), label="chunk")
    lc = LogConfig(
        {
            "unchecked.rsm.bucket": bucket,
            "unchecked.rsm.prefix": data.draw(st.sampled_from(["", "p/", "tenant-1/x/"])),
            "unchecked.rsm.encryption.enabled": str(encrypted).lower(),
            "unchecked.rsm.encryption.key.id": data.draw(st.sampled_from(["k1", "k2"])),
            "unchecked.rsm.compression.enabled": str(compressed).lower(),
            "unchecked.rsm.chunk.size": str(chunk),
        }
    )
    custom = rsm.copy_log_segment_data(seg.metadata, seg.data, lc)
    assert custom is not None and len(custom.value) <= 128
    md = dataclasses.replace(seg.metadata, custom_metadata=custom)
    original = seg.data.log_segment.read_bytes()
    size = len(original)

    for _ in range(data.draw(st.integers(1, 4), label="ranges")):
        start = data.draw(st.integers(0, size - 1), label="start")
        end = data.draw(st.one_of(st.none(), st.integers(start, size + 100)), label="end")
        stream = rsm.fetch_log_segment(md, start, end, lc)
        if data.draw(st.booleans(), label="small reads"):
            parts = []
            try:
                while piece := stream.read(data.draw(st.integers(1, 3 * chunk))):
                    parts.append(piece)
            finally:
                stream.close()
            got = b"".join(parts)
        else:
            got = read_all(stream)
        expected = original[start : (size if end is None else min(end + 1, size))]
        assert got == expected, (start, end, size, chunk)

    files = seg.files()
    for index_type in IndexType:
        if index_type.value in files:
            assert read_all(rsm.fetch_index(md, index_type, lc)) == files[index_type.value], index_type
    rsm.delete_log_segment_data(md, lc)


def test_roundtrip_file_store(tmp_path_factory: pytest.TempPathFactory) -> None:
    base = tmp_path_factory.mktemp("rt-file")
    rsm = RemoteStorageManager()
    rsm.configure(
        {
            "storage.backend": "file",
            "storage.file.root": str(base / "store"),
            "encryption.keyring.path": str(write_keyring(base / "keyring.json")),
            "cache.chunk.bytes": str(256 << 10),
        }
    )

    @SETTINGS
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        _check_roundtrip(rsm, base, data, bucket=data.draw(st.sampled_from(["a", "b"])))

    try:
        run()
    finally:
        rsm.close()


# the smallest upload parts each cloud takes, so a segment of a few MiB goes up in several
SMALL_PARTS = {
    "s3": {"storage.s3.multipart.part.size": str(5 << 20)},
    "gcs": {"storage.gcs.upload.chunk.size": str(256 << 10)},
    "azure": {"storage.azure.block.size": str(256 << 10)},
}


def cloud_name(cloud: object) -> str:
    return str(cloud.rsm_configs()["storage.backend"])  # type: ignore[attr-defined]


def test_roundtrip_cloud(tmp_path_factory: pytest.TempPathFactory, cloud: object) -> None:
    base = tmp_path_factory.mktemp("rt-cloud")
    bucket = cloud.make_bucket()  # type: ignore[attr-defined]
    rsm = RemoteStorageManager()
    rsm.configure(
        cloud.rsm_configs(  # type: ignore[attr-defined]
            **SMALL_PARTS[cloud_name(cloud)],
            bucket=bucket,  # the location records' bucket: buckets are never created
            **{"encryption.keyring.path": str(write_keyring(base / "keyring.json"))},
        )
    )

    @settings(SETTINGS, max_examples=15)
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        _check_roundtrip(rsm, base, data, bucket=bucket)

    try:
        run()
    finally:
        rsm.close()


def test_multipart_upload_of_a_large_segment(tmp_path: Path, cloud: object) -> None:
    """A segment bigger than the part size goes up in parts (S3's multipart upload, GCS's resumable upload,
    Azure's staged blocks) and reads back whole and by range."""
    bucket = cloud.make_bucket()  # type: ignore[attr-defined]
    tip = TopicIdPartition(uuid.uuid4(), "big", 0)
    seg = make_segment(
        tmp_path / "seg", tip, batches=1000, records_per_batch=20, value_size=1000, compressible=False
    )
    assert seg.metadata.segment_size_in_bytes > 6 << 20
    rsm = RemoteStorageManager()
    rsm.configure(
        {
            **cloud.rsm_configs(),  # type: ignore[attr-defined]
            **SMALL_PARTS[cloud_name(cloud)],
            "bucket": bucket,
            "chunk.size": str(1 << 20),
        }
    )
    try:
        md = dataclasses.replace(
            seg.metadata, custom_metadata=rsm.copy_log_segment_data(seg.metadata, seg.data)
        )
        original = seg.data.log_segment.read_bytes()
        assert read_all(rsm.fetch_log_segment(md, 0)) == original
        mid = len(original) // 2
        assert read_all(rsm.fetch_log_segment(md, mid, mid + 123_456)) == original[mid : mid + 123_457]
    finally:
        rsm.close()
