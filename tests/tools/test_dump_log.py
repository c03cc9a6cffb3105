"""``rsm dump-log``: human and JSON output, --print-data-log, --verify exit status on corruption."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runs import REPO, one_line
from fixtures_data import fixture_path
from migrate_helpers import run_cli

from rsm.cli.kafka_dump.common import (
    INT_MAX,
    DumpError,
    base_offset_of,
    decrement_sequence,
    increment_sequence,
    java_file_name,
    java_string,
)
from rsm.cli.main import main as rsm_main
from segment_format import SegmentWriter, build_batch, build_control_batch
from segment_format.records import ControlRecordType


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = rsm_main(["dump-log", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def segment(tmp_path: Path) -> Path:
    with SegmentWriter(tmp_path, 0, index_interval_bytes=100) as w:
        for i in range(10):
            w.append(build_batch([(f"k{i}".encode(), f"value-{i}".encode(), [("hk", b"hv")], 1000 + i)],
                                 base_offset=i, producer_id=3, producer_epoch=0, base_sequence=i))  # fmt: skip
        w.append(build_control_batch(ControlRecordType.COMMIT, base_offset=10, producer_id=3, producer_epoch=0,
                                     coordinator_epoch=4, timestamp=2000))  # fmt: skip
    return w.log_path


def test_json_lines_with_records(capsys, segment: Path) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(capsys, "--json", "--print-data-log", str(segment))
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 11
    first = lines[0]
    assert (first["baseOffset"], first["count"], first["producerId"], first["isValid"]) == (0, 1, 3, True)
    assert first["compressCodec"] == "none" and first["timestampType"] == "CreateTime"
    rec = first["records"][0]
    assert base64.b64decode(rec["key"]) == b"k0" and base64.b64decode(rec["value"]) == b"value-0"
    assert rec["headers"] == [{"key": "hk", "value": base64.b64encode(b"hv").decode()}]
    assert lines[-1]["isControl"] and lines[-1]["records"][0]["controlType"] == "COMMIT"
    assert lines[-1]["records"][0]["coordinatorEpoch"] == 4
    code, out, _ = run(capsys, "--json", str(segment))
    assert "records" not in json.loads(out.splitlines()[0])


def test_index_files_and_human_output(capsys, segment: Path) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(
        capsys,
        "--json",
        "--verify",
        str(segment.with_suffix(".index")),
        str(segment.with_suffix(".timeindex")),
    )
    assert code == 0
    entries = [json.loads(line) for line in out.splitlines()]
    assert any("position" in e for e in entries) and any("timestamp" in e for e in entries)
    code, out, _ = run(capsys, "--print-data-log", str(segment))
    assert code == 0
    assert "baseOffset: 0 lastOffset: 0 count: 1" in out and "payload: value-3" in out
    assert "endTxnMarker: COMMIT coordinatorEpoch: 4" in out


def test_verify_fails_on_bad_crc_naming_file_and_byte(capsys, segment: Path) -> None:  # type: ignore[no-untyped-def]
    data = bytearray(segment.read_bytes())
    data[-3] ^= 0xFF
    segment.write_bytes(bytes(data))
    code, _, err = run(capsys, "--verify", str(segment))
    assert code == 1 and str(segment) in err and "byte " in err and "crc" in err
    code, out, _ = run(capsys, "--json", str(segment))  # without --verify: reported, not fatal
    assert code == 0 and json.loads(out.splitlines()[-1])["isValid"] is False


def test_verify_fails_on_truncation_and_bad_index(capsys, segment: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    index = segment.with_suffix(".index")
    raw = bytearray(index.read_bytes())
    assert len(raw) >= 8
    raw[7] ^= 0x01  # first entry's position now points inside a batch
    index.write_bytes(bytes(raw))
    code, _, err = run(capsys, "--verify", str(index))
    assert code == 1 and "index entry 0" in err
    segment.write_bytes(segment.read_bytes()[:-5])
    code, out, err = run(capsys, "--json", "--verify", str(segment))
    assert code == 1 and "truncated" in err
    assert json.loads(out.splitlines()[-1])["position"] is not None


def test_real_fixture_files(capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    d = fixture_path("public", "segments", "NikhilDighe9975_kafka_setup", "nikhilDemo-0")
    code, out, _ = run(capsys, "--json", "--verify", *(str(d / n) for n in (
        "00000000000000000000.log", "00000000000000000000.timeindex", "00000000000000000003.snapshot",
        "leader-epoch-checkpoint")))  # fmt: skip
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert [x["producerId"] for x in lines if "lastTimestamp" in x] == [10000, 7000]
    assert {"file": str(d / "leader-epoch-checkpoint"), "epoch": 0, "startOffset": 0} in lines
    bad = fixture_path(
        "public", "kafka-rust", "fetch2.mytopic.nocompression.invalid_crc.kafka.0900.messageset.bin"
    )
    copy = tmp_path / "00000000000000000000.log"
    shutil.copy(bad, copy)
    assert run(capsys, "--verify", str(copy))[0] == 1


def test_unknown_file_kind_is_an_error(capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    other = tmp_path / "partition.metadata"
    other.write_text("version: 0\n")
    code, _, err = run(capsys, str(other))
    assert code == 1 and "do not know how to dump" in err


def _raw(capsysbinary, *args: str) -> tuple[int, bytes, bytes]:  # type: ignore[no-untyped-def]
    capsysbinary.readouterr()
    code = rsm_main(["dump-log", *args])
    out = capsysbinary.readouterr()
    return code, out.out, out.err


def test_payloads_are_printed_byte_for_byte(capsysbinary, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """No markup, no escaping, no dropped control characters, no cut: the bytes Kafka's tool prints."""
    awkward = b":smile: [bold]x[/bold]\ttab\x00nul\x1b[31mred\r"
    long = b"y" * 1000
    offsets_key = b"\x00\x01\x00\x05group"  # a __consumer_offsets key: leading zero bytes
    with SegmentWriter(tmp_path, 0) as w:
        w.append(build_batch([(offsets_key, awkward, [("h1", b"a"), ("h2", None)], 5)], base_offset=0))
        w.append(build_batch([(None, long, [], 6)], base_offset=1))
        w.append(build_batch([(b"k", b"\xff\xed\xa0\x80(\xf0\x9f\x98", [], 7)], base_offset=2))
    code, out, err = _raw(capsysbinary, "--print-data-log", str(w.log_path))
    assert code == 0, err
    lines = out.split(b"\n")
    assert lines[3] == (
        b"| offset: 0 CreateTime: 5 keySize: 9 valueSize: 39 sequence: -1 headerKeys: [h1,h2] key: "
        + offsets_key + b" payload: " + awkward
    )  # fmt: skip
    assert lines[5].endswith(b"keySize: -1 valueSize: 1000 sequence: -1 headerKeys: [] payload: " + long)
    # malformed UTF-8 replaced as Java's new String(bytes, UTF_8) does: one U+FFFD for the surrogate
    assert lines[7].endswith(b"payload: " + "\ufffd\ufffd(\ufffd".encode())


def test_max_payload_cuts_only_when_asked_and_bad_values_are_refused(capsys, segment: Path) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(capsys, "--print-data-log", "--max-payload", "3", str(segment))
    assert code == 0 and "payload: val... (7 bytes)" in out
    for flag, value in (("--max-payload", "-5"), ("--max-bytes", "-1"), ("--max-message-size", "0"),
                        ("--max-payload", "abc")):  # fmt: skip
        with pytest.raises(SystemExit) as exc:
            rsm_main(["dump-log", flag, value, str(segment)])
        assert exc.value.code == 2
        assert flag in capsys.readouterr().err


def test_kafka_layout_for_each_kind(capsys, segment: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(capsys, "--deep-iteration", "--files", f"{segment},{segment.with_suffix('.index')}")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"Dumping {segment}" and lines[1] == "Log starting offset: 0"
    assert lines[2].startswith(
        "baseOffset: 0 lastOffset: 0 count: 1 baseSequence: 0 lastSequence: 0 producerId: 3"
    )
    assert "deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1000 size: " in lines[2]
    assert lines[3] == "| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 7 sequence: 0 headerKeys: [hk]"
    assert "\noffset: 2 position: 166\n" in out
    from segment_format import build_legacy_message_set

    legacy = tmp_path / "legacy" / "00000000000000000000.log"
    legacy.parent.mkdir()
    legacy.write_bytes(build_legacy_message_set([(b"k", b"v", 9)], base_offset=0, magic=1))
    code, out, _ = run(capsys, "--print-data-log", str(legacy))
    assert code == 0
    batch_line, record_line = out.splitlines()[2:4]
    assert batch_line.startswith("offset: 0 position: 0 CreateTime: 9 size: ") and "magic: 1" in batch_line
    assert (
        "baseSequence" not in batch_line and "sequence" not in record_line and "headerKeys" not in record_line
    )
    assert record_line.startswith("| offset: 0 CreateTime: 9 keySize: 1 valueSize: 1 isValid: true crc: ")


def test_verify_says_what_it_checked(capsys, segment: Path) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(capsys, "--verify", str(segment), str(segment.with_suffix(".index")))
    assert code == 0
    assert (
        f"Verified {segment}: 11 batches, 11 records, offsets 0..10; every CRC, size and offset is intact"
        in out
    )
    assert "each entry points at the batch of the .log holding its offset" in out
    code, out, _ = run(capsys, "--index-sanity-check", str(segment.with_suffix(".index")))
    assert code == 0 and out.splitlines()[-1] == f"{segment.with_suffix('.index')} passed sanity check."


def test_a_tiered_segment_dumps_as_its_local_file(capsysbinary, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Through the manifest, decrypted with the keyring: the same lines as the local file but the first."""
    work = tmp_path / "qs"
    assert rsm_main(["quickstart", "--dir", str(work), "--records", "60", "--no-spark"]) == 0
    local = work / "kafka-logs" / "orders-0" / "00000000000000000240.log"
    keyring = work / "secrets" / "keyring.json"
    (stored,) = (work / "store" / "secure").rglob("00000000000000000240-*.log")
    code, expected, err = _raw(capsysbinary, "--print-data-log", str(local))
    assert code == 0, err
    expected_body = expected.split(b"\n", 1)[1]
    for obj in (stored, stored.with_suffix(".manifest"), stored.with_suffix(".indexes")):
        code, out, err = _raw(capsysbinary, "--print-data-log", "--keyring", str(keyring), str(obj))
        assert code == 0, err
        assert out.split(b"\n", 1)[0] == f"Dumping {stored} (00000000000000000240.log)".encode()
        assert out.split(b"\n", 1)[1] == expected_body
    code, out, err = _raw(capsysbinary, "--print-data-log", str(stored))
    assert code == 1 and b"is encrypted" in err and b"--keyring" in err and len(err.splitlines()) == 1
    props = tmp_path / "server.properties"
    props.write_text(
        f"rsm.config.storage.backend=file\nrsm.config.storage.file.root={work / 'store'}\n"
        f"rsm.config.bucket=tiered\nrsm.config.encryption.keyring.path={keyring}\n"
    )
    tiered = ["--config", str(props), "--topic", "payments", "--partition", "0"]
    code, out, err = _raw(capsysbinary, "--print-data-log", *tiered, "--offset", "250")
    assert code == 0, err
    assert out.split(b"\n", 1)[1] == expected_body
    txn_local = sorted((work / "kafka-logs" / "orders-0").glob("*.txnindex"))[-1]
    code, expected_txn, _ = _raw(capsysbinary, str(txn_local))
    code, out, err = _raw(
        capsysbinary, *tiered, "--offset", txn_local.name[:20].lstrip("0") or "0", "--file-kind", "txnindex"
    )
    assert code == 0, err
    assert out.split(b"\n", 1)[1] == expected_txn.split(b"\n", 1)[1] and b"producerId: " in out
    # the header names the object the index came from (the .indexes object), as the store names it
    header = out.split(b"\n", 1)[0].decode()
    assert header.startswith("Dumping file:secure/pci/payments-") and ".indexes (" in header, header
    code, out, err = _raw(capsysbinary, "--print-data-log", *tiered, "--offset", "250")
    header = out.split(b"\n", 1)[0].decode()
    assert header.startswith("Dumping file:secure/pci/payments-") and ".log (" in header, header
    code, out, err = _raw(capsysbinary, *tiered, "--offset", "99999")
    assert code == 1 and b"no tiered segment holds offset 99999" in err


# -- a missing file is said to be missing; a closed pipe ends the dump quietly -------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "nope.log",
        "nope.index",
        "00000000000000000000.timeindex",
        "00000000000000000000-AAAAAAAAAAAAAAAAAAAAAA.log",
    ],
)
def test_dump_log_of_a_missing_file_says_it_does_not_exist(tmp_path: Path, name: str) -> None:
    missing = tmp_path / name
    line = one_line(run_cli(["dump-log", str(missing)]), str(missing), "No such file or directory")
    assert "For input string" not in line
    one_line(run_cli(["dump-log", "--json", str(missing)]), "No such file or directory")


def test_dump_log_into_a_closed_pipe_is_quiet(tmp_path: Path) -> None:
    from segment_format import SegmentWriter, build_batch

    with SegmentWriter(tmp_path, 0) as w:
        for i in range(0, 20_000, 100):
            w.append(build_batch([(b"k", b"v" * 200, [], i + j) for j in range(100)], base_offset=i))
    done = subprocess.run(
        f"{sys.executable} -m rsm.cli.main dump-log --print-data-log {w.log_path} | head -n 1",
        shell=True, capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    assert done.stdout == f"Dumping {w.log_path}\n" and done.stderr == ""


def test_values_are_printed_as_java_prints_them() -> None:
    """kafka-dump-log's text is Java's: a malformed string decoded as `new String(bytes, UTF_8)` (a surrogate
    in three bytes is one U+FFFD, a sequence cut short by the end is one), producer sequences wrapping at
    Integer.MAX_VALUE, `new File(path)` dropping repeated and trailing slashes, and a base offset read by
    `Long.parseLong` (its error text when the name holds none)."""
    assert java_string(b"ok\xc3\xa9") == b"ok\xc3\xa9"
    assert java_string(b"a\xed\xa0\x80b") == "a\ufffdb".encode()
    assert java_string(b"x\xe2\x82") == "x\ufffd".encode()
    assert increment_sequence(INT_MAX, 1) == 0 and increment_sequence(INT_MAX - 1, 3) == 1
    assert decrement_sequence(0, 1) == INT_MAX and decrement_sequence(5, 2) == 3
    assert java_file_name("/a//b///c/") == "/a/b/c" and java_file_name("/") == "/"
    assert base_offset_of("00000000000000000042.log") == 42 and base_offset_of("+7.index") == 7
    with pytest.raises(DumpError, match='For input string: "nope"'):
        base_offset_of("nope.log")
