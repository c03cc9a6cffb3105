"""The public API refuses malformed input with Kafka's exceptions.

A wrong type or value given to RemoteStorageManager or to the value types is refused with a
RemoteStorageException (`InvalidArgumentException`, also a ValueError) naming the argument, never leaks a
TypeError or ValueError from deep inside, and is never silently accepted (`True` as a position, a metadata
`end_offset` past the segment's last offset).
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest
from kafka_segments import make_segment, read_all

from rsm import (
    CustomMetadata,
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteStorageException,
    RemoteStorageManager,
    TopicIdPartition,
)
from rsm.api.errors import InvalidArgumentException, SegmentIntegrityError
from rsm.stored.manifest import Manifest


@pytest.fixture
def rsm(tmp_path: Path):
    manager = RemoteStorageManager()
    manager.configure({"storage.backend": "file", "storage.file.root": str(tmp_path / "store")})
    try:
        yield manager
    finally:
        manager.close()


@pytest.fixture
def copied(rsm: RemoteStorageManager, tmp_path: Path) -> RemoteLogSegmentMetadata:
    seg = make_segment(tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "types", 0), batches=5)
    return dataclasses.replace(
        seg.metadata, custom_metadata=rsm.copy_log_segment_data(seg.metadata, seg.data)
    )


def _stored(tmp_path: Path) -> list[Path]:
    return [p for p in (tmp_path / "store").rglob("*") if p.is_file()]


@pytest.mark.parametrize(
    ("start", "end", "name"),
    [
        ("0", None, "start_position"),
        (1.5, None, "start_position"),
        (True, None, "start_position"),
        (None, None, "start_position"),
        (0, "9", "end_position"),
        (0, 9.0, "end_position"),
        (0, False, "end_position"),
    ],
)
def test_positions_must_be_ints(
    rsm: RemoteStorageManager, copied: RemoteLogSegmentMetadata, start: object, end: object, name: str
) -> None:
    with pytest.raises(InvalidArgumentException, match=f"{name} must be an int"):
        read_all(rsm.fetch_log_segment(copied, start, end))  # type: ignore[arg-type]
    assert read_all(rsm.fetch_log_segment(copied, 1, 1)) != b""  # int positions still work


@pytest.mark.parametrize("index_type", ["BOGUS", 3, None, b"OFFSET"])
def test_unknown_index_types_are_refused(
    rsm: RemoteStorageManager, copied: RemoteLogSegmentMetadata, index_type: object
) -> None:
    with pytest.raises(InvalidArgumentException, match="index_type"):
        rsm.fetch_index(copied, index_type)  # type: ignore[arg-type]


def test_index_types_by_enum_or_name(rsm: RemoteStorageManager, copied: RemoteLogSegmentMetadata) -> None:
    by_enum = read_all(rsm.fetch_index(copied, IndexType.OFFSET))
    assert read_all(rsm.fetch_index(copied, "OFFSET")) == by_enum  # type: ignore[arg-type]


@pytest.mark.parametrize("call", ["copy", "fetch", "fetch_index", "delete"])
@pytest.mark.parametrize("metadata", [None, "segment", {"start_offset": 0}])
def test_metadata_must_be_remote_log_segment_metadata(
    rsm: RemoteStorageManager, tmp_path: Path, call: str, metadata: object
) -> None:
    seg = make_segment(tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "types", 0), batches=2)
    calls = {
        "copy": lambda: rsm.copy_log_segment_data(metadata, seg.data),  # type: ignore[arg-type]
        "fetch": lambda: rsm.fetch_log_segment(metadata, 0),  # type: ignore[arg-type]
        "fetch_index": lambda: rsm.fetch_index(metadata, IndexType.OFFSET),  # type: ignore[arg-type]
        "delete": lambda: rsm.delete_log_segment_data(metadata),  # type: ignore[arg-type]
    }
    with pytest.raises(InvalidArgumentException, match="metadata must be a RemoteLogSegmentMetadata"):
        calls[call]()


@pytest.mark.parametrize("log_config", [["unchecked.rsm.bucket", "x"], "bucket=x", 5])
def test_log_config_must_be_a_mapping(
    rsm: RemoteStorageManager, copied: RemoteLogSegmentMetadata, log_config: object
) -> None:
    with pytest.raises(InvalidArgumentException, match="log_config must be a mapping"):
        rsm.delete_log_segment_data(copied, log_config)  # type: ignore[arg-type]


def test_segment_data_must_be_log_segment_data(rsm: RemoteStorageManager, tmp_path: Path) -> None:
    seg = make_segment(tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "types", 0), batches=2)
    with pytest.raises(InvalidArgumentException, match="segment_data must be a LogSegmentData"):
        rsm.copy_log_segment_data(seg.metadata, {"log_segment": str(seg.data.log_segment)})  # type: ignore[arg-type]
    assert _stored(tmp_path) == []


@pytest.mark.parametrize("field", ["log_segment", "offset_index", "time_index", "producer_snapshot_index"])
@pytest.mark.parametrize("value", [None, "", 7])
def test_log_segment_data_files_must_be_paths(tmp_path: Path, field: str, value: object) -> None:
    seg = make_segment(tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "types", 0), batches=2)
    with pytest.raises(InvalidArgumentException, match=f"LogSegmentData.{field} must be a file path"):
        dataclasses.replace(seg.data, **{field: value})


def test_an_end_offset_past_the_last_batch_copies_and_one_below_it_is_refused(
    rsm: RemoteStorageManager, tmp_path: Path
) -> None:
    """Kafka's endOffset is the next segment's base - 1: past the last batch where compaction left a hole at
    the segment's end (a compacted tail). The copy takes it and the manifest keeps both offsets; an end offset below
    the last batch would serve offsets Kafka gives the next segment, and is refused in one line."""
    seg = make_segment(tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "types", 0), batches=5)
    last = seg.metadata.end_offset
    short = dataclasses.replace(seg.metadata, end_offset=last - 1)
    with pytest.raises(SegmentIntegrityError) as info:
        rsm.copy_log_segment_data(short, seg.data)
    message = str(info.value)
    assert (
        "\n" not in message
        and f"batch last offset {last} is beyond the expected end offset {last - 1}" in message
    )
    assert _stored(tmp_path) == []
    claimed = dataclasses.replace(seg.metadata, end_offset=last + 100)
    assert rsm.copy_log_segment_data(claimed, seg.data) is not None
    (path,) = (tmp_path / "store").rglob("*.manifest")
    manifest = Manifest.from_bytes(path.read_bytes())
    assert manifest.segment.end_offset == last + 100
    assert manifest.integrity["last_offset"] == manifest.last_batch_offset == last
    assert read_all(rsm.fetch_log_segment(claimed, 0)) == seg.data.log_segment.read_bytes()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("start_offset", "0"),
        ("end_offset", 9.0),
        ("start_offset", True),
        ("segment_size_in_bytes", None),
        ("max_timestamp_ms", "1"),
        ("broker_id", 1.0),
        ("event_timestamp_ms", None),
        ("segment_leader_epochs", {"0": 0}),
        ("segment_leader_epochs", {0: "5"}),
        ("segment_leader_epochs", [1, 2]),
        ("custom_metadata", "bucket"),
        ("state", 1),
    ],
)
def test_metadata_fields_are_checked(tmp_path: Path, field: str, value: object) -> None:
    seg = make_segment(tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "types", 0), batches=2)
    with pytest.raises(InvalidArgumentException, match=field):
        dataclasses.replace(seg.metadata, **{field: value})


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: TopicIdPartition(uuid.uuid4(), "t", True), "partition"),
        (lambda: TopicIdPartition(uuid.uuid4(), "t", -1), "partition"),
        (lambda: TopicIdPartition("not-an-id", "t", 0), "topic_id"),  # type: ignore[arg-type]
        (lambda: TopicIdPartition(1234, "t", 0), "topic_id"),  # type: ignore[arg-type]
        (lambda: TopicIdPartition(uuid.uuid4(), 5, 0), "topic"),  # type: ignore[arg-type]
        (lambda: RemoteLogSegmentId("t-0", uuid.uuid4()), "topic_id_partition"),  # type: ignore[arg-type]
        (lambda: RemoteLogSegmentId(TopicIdPartition(uuid.uuid4(), "t", 0), "x"), "RemoteLogSegmentId.id"),  # type: ignore[arg-type]
        (lambda: CustomMetadata("text"), "CustomMetadata.value"),  # type: ignore[arg-type]
        (
            lambda: LogSegmentData(Path("/a"), Path("/b"), Path("/c"), None, Path("/d"), "text"),  # type: ignore[arg-type]
            "leader_epoch",
        ),
    ],
)
def test_value_types_refuse_with_rsm_exceptions(build, message: str) -> None:  # noqa: ANN001
    with pytest.raises(RemoteStorageException, match=message) as caught:
        build()
    assert isinstance(caught.value, ValueError)  # callers that caught ValueError before keep working
