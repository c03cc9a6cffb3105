"""Compacted history: Kafka's endOffset past a segment's last batch, and the leader-epoch rule.

A topic compacted and then switched to `cleanup.policy=delete` with remote storage keeps its cleaner's
holes, and Kafka hands the copy `endOffset = next segment's base - 1`, past the last batch where a hole
ends a segment. `tiering.PartitionLog.compact_away` makes such holes; the copy must take them, the
manifest keep both offsets, and the catalog and reader (planned and read here in one process, through
the functions Spark calls on its workers) give exactly the records a consumer reads, with no data loss.
A hole no copy claims stays data loss. A batch's `partitionLeaderEpoch` lies outside its CRC: one not in
the segment's leader epochs is refused by the copy and by the reader.
"""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from tiering import PartitionLog

from rsm import RemoteStorageManager, TopicIdPartition
from rsm.api.errors import SegmentIntegrityError
from rsm.catalog import TopicCatalog
from rsm.config.settings import RsmConfig
from rsm.copy.integrity import SegmentIntegrityVerifier
from rsm.stored.manifest import Manifest
from spark_reader import partition_reader
from spark_reader.errors import DataLossError, ReaderError
from spark_reader.options import parse_options
from spark_reader.source import TieredBatchReader


def _configs(tmp_path: Path) -> dict[str, str]:
    return {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "chunk.size": "4096"}


@pytest.fixture
def rsm(tmp_path: Path):
    manager = RemoteStorageManager()
    manager.configure(_configs(tmp_path))
    yield manager
    manager.close()


def _read(tmp_path: Path, topic: str, **options: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every row the source gives, planned and read in this process."""
    partition_reader._clients.clear()
    reader = TieredBatchReader(parse_options({**_configs(tmp_path), "subscribe": topic, **options}))
    batches = [b for p in reader.partitions() for b in reader.read(p)]
    if not batches:
        return []
    t = pa.Table.from_batches(batches)
    return sorted(
        zip(
            t.column("offset").to_pylist(),
            t.column("key").to_pylist(),
            t.column("value").to_pylist(),
            strict=True,
        )
    )


def _expected(
    log: PartitionLog, read_committed: bool = False, lo: int = 0, hi: int | None = None
) -> list[Any]:
    return [
        (r.offset, r.key, r.value)
        for r in log.consumer_rows(read_committed)
        if r.offset >= lo and (hi is None or r.offset < hi)
    ]


def _manifests(tmp_path: Path) -> list[Manifest]:
    found = [Manifest.from_bytes(p.read_bytes()) for p in (tmp_path / "store").rglob("*.manifest")]
    return sorted(found, key=lambda m: m.segment.start_offset)


def _compacted(rsm: RemoteStorageManager, tmp_path: Path, topic: str) -> PartitionLog:
    """0..9 | 10..14 gone || 15..19, 20..22 gone, 23..32 (an aborted transaction) | 33..39 gone ||
    40..49 (one committed transaction at its end) || 50..59: holes inside segments and at their ends."""
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), topic, 0), tmp_path / "w")
    log.append(10)
    log.compact_away(5)
    log.roll()
    log.append(5)
    log.compact_away(3)
    log.append(5, producer_id=7, transactional=True)
    log.append(4)
    log.end_txn(7, commit=False)
    log.compact_away(7)
    log.roll()
    log.append(5)
    log.append(4, producer_id=8, transactional=True)
    log.end_txn(8, commit=True)
    log.roll()
    log.new_epoch(2)
    log.append(10)
    log.roll()
    return log


def test_a_compacted_tail_is_tiered_and_read_without_data_loss(
    rsm: RemoteStorageManager, tmp_path: Path
) -> None:
    log = _compacted(rsm, tmp_path, "compacted")
    manifests = _manifests(tmp_path)
    # the copy took Kafka's end offsets; the manifest keeps them beside the last batch's offset
    assert [(m.segment.start_offset, m.segment.end_offset, m.last_batch_offset) for m in manifests] == [
        (0, 14, 9),
        (15, 39, 32),
        (40, 49, 49),
        (50, 59, 59),
    ]
    assert [m.integrity["last_offset"] for m in manifests] == [9, 32, 49, 59]
    (history,) = TopicCatalog(RsmConfig(_configs(tmp_path))).histories("compacted", log.tip.topic_id).values()
    assert [(s.first_offset, s.last_offset) for s in history.slices] == [(0, 9), (15, 32), (40, 49), (50, 59)]
    assert history.gaps == () and history.first_offset == 0 and history.next_offset == 60
    # exactly the batches' records, failOnDataLoss=true (the default) and no error, both isolation levels
    assert _read(tmp_path, "compacted") == _expected(log)
    committed = _read(tmp_path, "compacted", **{"kafka.isolation.level": "read_committed"})
    assert committed == _expected(log, read_committed=True) != _expected(log)
    # ranges that start, end or lie wholly inside compacted-away offsets: no rows there, no data loss
    for lo, hi in ((12, 45), (10, 15), (33, 40), (0, 12), (36, 60)):
        got = _read(tmp_path, "compacted", startingOffsets=f'{{"compacted":{{"0":{lo}}}}}',
                    endingOffsets=f'{{"compacted":{{"0":{hi}}}}}')  # fmt: skip
        assert got == _expected(log, lo=lo, hi=hi), (lo, hi)
    assert _read(tmp_path, "compacted", startingOffsets='{"compacted":{"0":11}}',
                 endingOffsets='{"compacted":{"0":14}}') == []  # fmt: skip


def test_a_hole_between_segments_is_still_data_loss(
    rsm: RemoteStorageManager, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Offsets no copy claims (one segment's endOffset + 1 .. the next one's base - 1) are lost records."""
    log = _compacted(rsm, tmp_path, "holes")
    rsm.delete_log_segment_data(log.copied[1])  # 15..39: gone from the store
    (history,) = TopicCatalog(RsmConfig(_configs(tmp_path))).histories("holes", log.tip.topic_id).values()
    assert history.gaps == ((15, 39),)
    with pytest.raises(DataLossError, match=r"^holes-0: offsets 15\.\.39 are missing from the store \("):
        _read(tmp_path, "holes")
    with caplog.at_level(logging.WARNING):
        rest = _read(tmp_path, "holes", failOnDataLoss="false")
    assert rest == [r for r in _expected(log) if not 15 <= r[0] <= 39]
    assert "offsets 15..39 are missing from the store" in caplog.text
    # a range that stays clear of the hole reads without complaint
    assert _read(tmp_path, "holes", startingOffsets='{"holes":{"0":40}}') == _expected(log, lo=40)


def _flip_epoch_bit(raw: bytes, bit: int) -> bytes:
    """The batch with one bit of its partitionLeaderEpoch (bytes 12..15, outside the CRC) flipped."""
    epoch = int.from_bytes(raw[12:16], "big") ^ (1 << bit)
    return raw[:12] + epoch.to_bytes(4, "big") + raw[16:]


def test_a_flipped_leader_epoch_bit_is_refused_by_the_copy(rsm: RemoteStorageManager, tmp_path: Path) -> None:
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "epochs", 0), tmp_path / "w")
    log.append(10)
    log.append(10)
    log.pending[1] = _flip_epoch_bit(log.pending[1], 2)  # epoch 0 -> 4; the batch CRC still holds
    md, data = log.roll(copy=False)
    with pytest.raises(SegmentIntegrityError) as info:
        rsm.copy_log_segment_data(md, data)
    message = str(info.value)
    assert "\n" not in message
    assert (
        "batch at offset 10 carries partition leader epoch 4, which is not one of the segment's leader epochs [0]"
        in message
    )
    assert not list((tmp_path / "store").rglob("*.manifest"))
    # the same batch with its true epoch copies
    log.append(10)
    log.roll()


@pytest.mark.parametrize("flipped", [(1,), (0, 1)], ids=["one-batch", "every-batch"])
def test_the_reader_refuses_a_stored_batch_of_another_epoch(
    rsm: RemoteStorageManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flipped: tuple[int, ...]
) -> None:
    """A segment stored without the copy's epoch check (an older release, a store written by hand): the
    reader fails with one line naming the object and the batch, rather than trust the epoch. Both when the
    decoded rows mix epochs and when every row carries the one wrong epoch (the reader's shortcut for a
    batch of a single epoch must still look it up)."""
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "stored", 0), tmp_path / "w")
    log.append(10)
    log.roll()
    log.append(10)
    log.append(10)
    for i in flipped:
        log.pending[i] = _flip_epoch_bit(log.pending[i], 0)  # epoch 0 -> 1
    md, data = log.roll(copy=False)

    def unchecked(*args: Any, **kwargs: Any) -> SegmentIntegrityVerifier:
        return SegmentIntegrityVerifier(*args, **{**kwargs, "leader_epochs": None})

    monkeypatch.setattr("rsm.copy.checks.SegmentIntegrityVerifier", unchecked)
    log.tier(md, data)
    monkeypatch.undo()
    with pytest.raises(ReaderError) as info:
        _read(tmp_path, "stored")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("refusing file:")
    first = 10 + 10 * flipped[0]
    assert (
        f"{md.remote_log_segment_id.id_base64}.log: batch at offset {first} carries partition leader epoch 1"
        in message
    )
    # what the reader does not need to read is not refused: the first segment reads
    assert _read(tmp_path, "stored", endingOffsets='{"stored":{"0":10}}') == _expected(log, hi=10)


def test_a_segment_the_cleaner_emptied_is_no_data_loss(rsm: RemoteStorageManager, tmp_path: Path) -> None:
    """A segment whose every batch was compacted away (a 0-byte `.log`) copies, and its offsets read as
    compacted away: no rows, no gap, while offsets no copy claims are still a gap."""
    import dataclasses

    from rsm import LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata
    from segment_format.producer_snapshot import ProducerSnapshot

    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "emptied", 0), tmp_path / "w")
    log.append(10)
    log.roll()
    empty = tmp_path / "empty"
    empty.mkdir()
    for suffix in (".log", ".index", ".timeindex"):
        (empty / f"{10:020d}{suffix}").write_bytes(b"")
    (empty / f"{20:020d}.snapshot").write_bytes(ProducerSnapshot([]).to_bytes())
    md = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(log.tip, uuid.uuid4()), 10, 19, -1, 1, 0, 0, segment_leader_epochs={0: 10}
    )
    stem = empty / f"{10:020d}"
    data = LogSegmentData(
        stem.with_suffix(".log"), stem.with_suffix(".index"), stem.with_suffix(".timeindex"), None,
        empty / f"{20:020d}.snapshot", b"0\n1\n0 10\n",
    )  # fmt: skip
    log.tier(md, data)
    log.compact_away(10)
    log.append(10)
    log.roll()
    (emptied,) = [m for m in _manifests(tmp_path) if m.segment.start_offset == 10]
    assert emptied.integrity["batches"] == 0 and emptied.last_batch_offset == 9
    (history,) = TopicCatalog(RsmConfig(_configs(tmp_path))).histories("emptied", log.tip.topic_id).values()
    assert [(s.first_offset, s.last_offset) for s in history.slices] == [(0, 9), (20, 29)]
    assert history.gaps == ()
    assert _read(tmp_path, "emptied") == _expected(log)
    rsm.delete_log_segment_data(dataclasses.replace(md, custom_metadata=log.copied[1].custom_metadata))
    (history,) = TopicCatalog(RsmConfig(_configs(tmp_path))).histories("emptied", log.tip.topic_id).values()
    assert history.gaps == ((10, 19),)


def test_migrate_import_and_verify_agree_with_the_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rsm migrate import` of a compacted partition directory gives Kafka's end offsets (the next segment's
    base - 1), so its holes read as compacted away; `verify --deep` applies the copy's epoch rule."""
    from migrate_helpers import write_properties

    from rsm.cli.main import main
    from segment_format.writer import SegmentWriter, build_batch

    configs = {**_configs(tmp_path), "bucket": "main"}
    props = write_properties(tmp_path / "server.properties", configs)
    tid = uuid.uuid4()
    pdir = tmp_path / "kafka" / "imported-0"
    for base, batches in ((0, 4), (100, 3)):  # 80..99 compacted away at the first segment's end
        with SegmentWriter(pdir, base, index_interval_bytes=1024) as w:
            for b in range(batches):
                w.append(
                    build_batch([(b"k", b"v" * 40, (), 1_700_000_000_000)] * 20, base_offset=base + b * 20)
                )
    (pdir / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
    (pdir / "partition.metadata").write_text(f"version: 0\ntopic_id: {tid}\n")
    assert main(["migrate", "--config", str(props), "import", "--dir", str(pdir), "--json"]) == 0
    capsys.readouterr()
    catalog = TopicCatalog(RsmConfig(configs))
    ends = [(s.start_offset, s.end_offset, s.last_record_offset) for s in catalog.segments("imported", tid)]
    assert ends == [(0, 99, 79), (100, 159, 159)]
    (history,) = catalog.histories("imported", tid).values()
    assert history.gaps == () and history.next_offset == 160
    assert main(["migrate", "--config", str(props), "verify", "--deep", "--json"]) == 0
    capsys.readouterr()

    # a batch of another epoch, stored by a copy that did not check it: verify --deep names it
    log = PartitionLog(RemoteStorageManager(), TopicIdPartition(uuid.uuid4(), "stored", 0), tmp_path / "w")
    log.rsm.configure(configs)
    log.append(10)
    log.append(10)
    log.pending[1] = _flip_epoch_bit(log.pending[1], 3)  # epoch 0 -> 8
    md, data = log.roll(copy=False)
    monkeypatch.setattr(
        "rsm.copy.checks.SegmentIntegrityVerifier",
        lambda *a, **kw: SegmentIntegrityVerifier(*a, **{**kw, "leader_epochs": None}),
    )
    log.tier(md, data)
    log.rsm.close()
    assert main(["migrate", "--config", str(props), "verify", "--topic", "stored", "--deep", "--json"]) == 3
    report = json.dumps(json.loads(capsys.readouterr().out))
    assert "batch at offset 10 carries partition leader epoch 8, which is not one of the segment's" in report
