"""`rsm quickstart` end to end on the local store, and its demo partition judged by Kafka's own classes."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from rsm.cli.demo import DEMO_CODECS, write_demo_partition
from rsm.cli.main import main
from segment_format import LogSegment, TransactionIndex


def test_quickstart_tiers_and_fetches_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "qs"
    assert main(["quickstart", "--dir", str(root), "--records", "300", "--no-spark"]) == 0
    out = capsys.readouterr().out
    assert "quickstart ok" in out
    store = root / "store"
    plain = sorted(p.name for p in (store / "tiered").rglob("*.manifest"))
    secure = sorted(p.relative_to(store / "secure") for p in (store / "secure").rglob("*.manifest"))
    assert len(plain) == len(DEMO_CODECS)
    assert len(secure) == len(DEMO_CODECS)
    assert all(str(p).startswith("pci/payments-") for p in secure)
    keyring = root / "secrets" / "keyring.json"
    assert stat.S_IMODE(keyring.stat().st_mode) == 0o600
    secret = keyring.read_text()
    assert all(secret not in p.read_text(errors="replace") for p in store.rglob("*.manifest"))


def test_quickstart_refuses_to_report_ok_when_a_fetch_mismatches(tmp_path: Path, monkeypatch) -> None:
    """The quickstart really compares: a store returning altered bytes makes it fail."""
    import rsm.manager

    original = rsm.manager.RemoteStorageManager.fetch_log_segment

    def corrupting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        import io

        data = bytearray(original(self, *args, **kwargs).read())
        data[len(data) // 2] ^= 0xFF
        return io.BytesIO(bytes(data))

    monkeypatch.setattr(rsm.manager.RemoteStorageManager, "fetch_log_segment", corrupting)
    assert main(["quickstart", "--dir", str(tmp_path / "qs"), "--records", "200", "--no-spark"]) == 1


def test_demo_partition_segments_verify(tmp_path: Path) -> None:
    segments = write_demo_partition(tmp_path, records_per_segment=400)
    assert [s.codec for s in segments] == list(DEMO_CODECS)
    for seg in segments:
        summary = LogSegment(seg.log).verify(seg.base_offset, seg.end_offset)
        assert summary.last_offset == seg.end_offset
    aborted = list(TransactionIndex.read(segments[-1].transaction_index))
    assert len(aborted) == 1


@pytest.mark.oracle
def test_demo_partition_matches_kafkas_own_recovery(tmp_path: Path, java_oracle) -> None:  # type: ignore[no-untyped-def]
    """Kafka rebuilding the demo segments' companion files gets the bytes the demo wrote."""
    segments = write_demo_partition(tmp_path / "p", records_per_segment=600)
    for seg in segments:
        check = java_oracle.check(seg.log)
        assert check["lastOffset"] == seg.end_offset
        out = tmp_path / f"kafka-{seg.base_offset}"
        result = java_oracle.rebuild_indexes(seg.log, out)
        assert result["truncatedBytes"] == 0
        assert result["nextOffset"] == seg.end_offset + 1
        assert (out / seg.offset_index.name).read_bytes() == seg.offset_index.read_bytes()
        assert (out / seg.time_index.name).read_bytes() == seg.time_index.read_bytes()
        kafka_txn = out / seg.offset_index.name.replace(".index", ".txnindex")
        if seg.transaction_index is None:
            assert not kafka_txn.exists() or kafka_txn.stat().st_size == 0
        else:
            assert kafka_txn.read_bytes() == seg.transaction_index.read_bytes()


@pytest.mark.spark
def test_quickstart_ends_with_a_spark_sql_query(tmp_path: Path) -> None:
    """README's first command as a user runs it: its own process, its own Spark session."""
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rsm.cli.main",
            "quickstart",
            "--dir",
            str(tmp_path / "qs"),
            "--records",
            "200",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Spark read every committed record of both topics: yes" in done.stdout
    assert "FROM tiered GROUP BY topic" in done.stdout
    assert "quickstart ok" in done.stdout
