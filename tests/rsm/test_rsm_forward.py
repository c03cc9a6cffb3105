"""The RSM follows a move's forwards (`rsm.store.forward`): fetch and delete through a segment's old custom metadata.

The objects are moved here by hand (copy, rewritten manifest, forward, source removed), as `rsm migrate
move` does, so these tests pin the RSM's side alone: a forward is followed only when the manifest is absent,
a chain of forwards is followed, delete removes the copy at every location of the chain and then the
forwards, and a forward naming another segment or an unusable location is refused.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from tiering import PartitionLog

from rsm import RemoteStorageManager, TopicIdPartition
from rsm.api.errors import RemoteResourceNotFoundException, RemoteStorageException
from rsm.store.forward import chain, write_forward
from rsm.store.layout import Location, SegmentKeys
from rsm.stored.forward import FORWARD_SUFFIX, Forward, SegmentRef
from rsm.stored.rekey import rekey_manifest


def _setup(tmp_path: Path) -> tuple[RemoteStorageManager, PartitionLog, bytes]:
    rsm = RemoteStorageManager()
    rsm.configure({"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main",
                   "chunk.size": "4096"})  # fmt: skip
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "t", 0), tmp_path / "w")
    log.append(100)
    _, data = log.roll()
    return rsm, log, Path(data.log_segment).read_bytes()


def _move(rsm: RemoteStorageManager, md, src: Location, dst: Location, *, forward: bool = True) -> None:  # noqa: ANN001
    store = rsm.store
    s, d = SegmentKeys.of(src, md), SegmentKeys.of(dst, md)
    for a, b in ((s.log, d.log), (s.indexes, d.indexes)):
        store.put(dst.bucket, b, store.get(src.bucket, a))
    raw = store.get(src.bucket, s.manifest)
    store.put(dst.bucket, d.manifest, rekey_manifest(raw, "m", None, location=dst))
    if forward:
        write_forward(store, src, SegmentRef.of(md), dst)
    for key in s.all():
        store.delete(src.bucket, key)


def test_fetch_and_delete_follow_a_chain_of_forwards(tmp_path: Path) -> None:
    rsm, log, original = _setup(tmp_path)
    md = log.copied[-1]
    home, a, b = Location("main", ""), Location("main", "a/"), Location("other", "b/")
    _move(rsm, md, home, a)
    assert rsm.fetch_log_segment(md, 0).read() == original
    _move(rsm, md, a, b)
    fresh = RemoteStorageManager()  # no cached manifest or keys
    fresh.configure(
        {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    )
    assert fresh.fetch_log_segment(md, 0).read() == original
    assert fresh.fetch_index(md, "OFFSET").read() == rsm.fetch_index(md, "OFFSET").read()
    ref = SegmentRef.of(md)
    assert chain(rsm.store, home, ref) == [a, b]
    fresh.delete_log_segment_data(md)
    assert chain(rsm.store, home, ref) == []
    for bucket in ("main", "other"):
        assert [k for k in rsm.store.list(bucket) if "/0/" in k] == []
    with pytest.raises(RemoteResourceNotFoundException):
        fresh.fetch_log_segment(md, 0)
    fresh.delete_log_segment_data(md)  # idempotent


def test_a_manifest_wins_over_a_forward(tmp_path: Path) -> None:
    rsm, log, original = _setup(tmp_path)
    md = log.copied[-1]
    # a forward left at a location that holds the segment (a move interrupted after writing it)
    write_forward(rsm.store, Location("main", ""), SegmentRef.of(md), Location("main", "nowhere/"))
    assert rsm.fetch_log_segment(md, 0).read() == original
    # delete: the segment's objects, then the (dangling) forward
    rsm.delete_log_segment_data(md)
    assert [k for k in rsm.store.list("main") if "/0/" in k] == []


def test_without_forward_a_missing_segment_is_not_found(tmp_path: Path) -> None:
    rsm, log, _ = _setup(tmp_path)
    md = log.copied[-1]
    _move(rsm, md, Location("main", ""), Location("main", "a/"), forward=False)
    with pytest.raises(RemoteResourceNotFoundException):
        rsm.fetch_log_segment(md, 0)


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.update(segment_id="A" * 22),
        lambda d: d["to"].update(prefix="../escape/"),
        lambda d: d["to"].update(bucket="UPPER"),
        lambda d: d.update(version=9),
    ],
    ids=["other-segment", "prefix", "bucket", "version"],
)
def test_a_forward_that_does_not_fit_is_refused(tmp_path: Path, edit) -> None:  # noqa: ANN001
    rsm, log, _ = _setup(tmp_path)
    md = log.copied[-1]
    home, a = Location("main", ""), Location("main", "a/")
    _move(rsm, md, home, a)
    key = SegmentRef.of(md).forward_key(home)
    doc = json.loads(rsm.store.get("main", key))
    edit(doc)
    rsm.store.put("main", key, json.dumps(doc).encode())
    fresh = RemoteStorageManager()
    fresh.configure(
        {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    )
    with pytest.raises(RemoteStorageException, match="forward"):
        fresh.fetch_log_segment(md, 0)
    assert key.endswith(FORWARD_SUFFIX)


def test_forward_format_round_trips() -> None:
    ref = SegmentRef("t", "A" * 22, 3, 42, "B" * 22)
    fwd = Forward.new(ref, Location("b", "p/"))
    again = Forward.from_bytes(fwd.to_bytes(), "x", ref)
    assert again == fwd
    assert json.loads(fwd.to_bytes())["format"] == "kafka-tiered-rsm/segment-forward"
    assert ref.forward_key(Location("b", "p/")) == f"p/t-{'A' * 22}/3/{42:020d}-{'B' * 22}.forward"
