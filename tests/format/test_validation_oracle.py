"""Record validation and index integrity on segments Kafka's own classes wrote, in every codec.

The Java oracle writes the records given (``contents``: headers, JSON or schema-registry values, one bad
record) through Kafka's UnifiedLog, with transactions (COMMIT/ABORT markers policies must not see), the
offset and time indexes Kafka builds and rolled as a broker does before tiering. Then, per codec:

* a clean segment passes each built-in policy;
* a segment with one bad record fails the copy (``fail``) naming its offset, or is tiered (``tier``) with a
  report holding exactly that offset;
* a user's per-record policy (``user_policy_pkg``, outside the package) finds the same violations as the
  vectorised built-in;
* a flipped byte in the log, or a bad offset or time index entry, is refused under any policy (none, the
  built-ins, a user's).
"""

from __future__ import annotations

import json
import shutil
import struct
import uuid
from pathlib import Path
from typing import Any

import pytest

from rsm import (
    LogConfig,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteStorageManager,
    TopicIdPartition,
)
from rsm.api.errors import RecordValidationError, SegmentIntegrityError
from rsm.api.metadata import LogSegmentData
from rsm.stored.manifest import Manifest
from segment_format.leader_epoch import LeaderEpochCheckpoint
from segment_format.log_entries import iter_batches

pytestmark = pytest.mark.oracle

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
RECORDS = 240
BAD = 131  # index of the bad record among the data records


def _json(i: int) -> bytes:
    return json.dumps({"order": i, "item": f"sku-{i % 11}", "price": i / 4}).encode()


def _framed(i: int) -> bytes:
    return b"\x00" + (40 + i % 3).to_bytes(4, "big") + b"avro-ish payload %d" % i


def _contents(kind: str, bad: str | None) -> list[dict[str, Any]]:
    out = []
    for i in range(RECORDS):
        rec: dict[str, Any] = {
            "key": b"key-%d" % i if i % 9 else None,
            "value": _json(i) if kind == "json" else _framed(i),
            "headers": [("trace-id", b"%d" % i), ("h", None)],
        }
        if i % 50 == 0:
            rec["value"] = None  # a tombstone passes the value checks
        if i == BAD:
            if bad == "header":
                rec["headers"] = [("trace", b"x")]
            elif bad == "json":
                rec["value"] = b'{"order": %d, "item": ' % i
            elif bad == "schema-id":
                rec["value"] = b"\x01" + _framed(i)[1:]
            elif bad == "schema-id-range":
                rec["value"] = b"\x00" + (99).to_bytes(4, "big") + b"x"
        out.append(rec)
    return out


# (policy value for the built-ins, user class, user topic value, the kind of segment, the defect)
POLICIES = {
    "header": ("header:trace-id", "RequireHeader", "trace-id", "json"),
    "json": ("json", "Json", "", "json"),
    "schema-id": ("schema-id", "SchemaId", "", "sr"),
    "schema-id-range": ("schema-id:40-42", "SchemaId", "40-42", "sr"),
}


@pytest.fixture(scope="module")
def segments(java_oracle, tmp_path_factory) -> dict[tuple[str, str, str | None], Path]:  # type: ignore[no-untyped-def]
    """Kafka-written segments: (codec, kind, defect) -> directory (defect None: clean)."""
    root = tmp_path_factory.mktemp("oracle-validation")
    out = {}
    for codec in CODECS:
        for kind, defects in (
            ("json", [None, "header", "json"]),
            ("sr", [None, "schema-id", "schema-id-range"]),
        ):
            for bad in defects:
                d = root / f"{codec}-{kind}-{bad}"
                java_oracle.write_segment(d, codec, transactional=True, seed=5, contents=_contents(kind, bad))
                out[(codec, kind, bad)] = d
    return out


def _data_offsets(directory: Path) -> list[int]:
    expected = json.loads((directory / "expected.json").read_text())
    return [r["offset"] for r in expected["records"] if not r["isControl"]]


def _copy(
    tmp: Path, directory: Path, topic_configs: dict[str, str], **configs: str
) -> tuple[RemoteStorageManager, Any]:
    """Copy the segment of `directory` with an RSM over a fresh file store; returns (rsm, manifest or exc)."""
    rsm = RemoteStorageManager()
    store = tmp / f"store-{uuid.uuid4().hex[:8]}"
    rsm.configure(
        {"storage.backend": "file", "storage.file.root": str(store), "chunk.size": "8192", **configs}
    )
    log = next(directory.glob("*.log"))
    expected = json.loads((directory / "expected.json").read_text())
    last = expected["batches"][-1]["lastOffset"]
    tip = TopicIdPartition(uuid.uuid4(), "kafka-written", 0)
    checkpoint = (directory / "leader-epoch-checkpoint").read_bytes()
    epochs = {e.epoch: e.start_offset for e in LeaderEpochCheckpoint.from_bytes(checkpoint).entries}
    md = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, uuid.uuid4()), 0, last, 0, 1, 0, log.stat().st_size, epochs
    )
    snapshot = next(directory.glob("*.snapshot"))
    data = LogSegmentData(log, log.with_suffix(".index"), log.with_suffix(".timeindex"), None, snapshot,
                          checkpoint)  # fmt: skip
    try:
        rsm.copy_log_segment_data(md, data, LogConfig(topic_configs))
        return rsm, Manifest.from_bytes(next(store.rglob("*.manifest")).read_bytes())
    except Exception as exc:  # noqa: BLE001 - the caller looks at it
        return rsm, exc
    finally:
        rsm.close()


def _tier(value: str) -> dict[str, str]:
    return {"record.validation.policy": value, "unchecked.rsm.record.validation.on.violation": "tier"}


@pytest.mark.parametrize("codec", CODECS)
def test_clean_segments_pass_every_builtin_policy(codec: str, segments, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    for value, _, _, kind in POLICIES.values():
        directory = segments[(codec, kind, None)]
        assert (directory / "00000000000000000000.index").stat().st_size > 0  # Kafka's index is checked too
        _, manifest = _copy(tmp_path, directory, {"record.validation.policy": value})
        assert isinstance(manifest, Manifest), (value, manifest)
        assert manifest.validation["violation_count"] == 0
        assert manifest.validation["records"] == RECORDS  # markers are not shown to policies


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("defect", list(POLICIES))
def test_one_bad_record_fails_or_is_reported_by_offset(
    codec: str, defect: str, segments, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    value, user_class, user_value, kind = POLICIES[defect]
    directory = segments[(codec, kind, defect)]
    bad_offset = _data_offsets(directory)[BAD]
    _, refused = _copy(tmp_path, directory, {"record.validation.policy": value})
    assert isinstance(refused, RecordValidationError)
    assert f"1 record(s) violate policy '{value}'; first at offset {bad_offset} " in str(refused)
    _, manifest = _copy(tmp_path, directory, _tier(value))
    assert [v["offset"] for v in manifest.validation["violations"]] == [bad_offset]
    assert manifest.validation["violation_count"] == 1
    # a user's per-record policy, loaded by class name from outside the package: the same violations
    _, user_manifest = _copy(
        tmp_path,
        directory,
        _tier(user_value or "any"),
        **{"record.validation.policy.class.name": f"user_policy_pkg.policies:{user_class}"},
    )
    assert [v["offset"] for v in user_manifest.validation["violations"]] == [bad_offset]
    assert [v["position"] for v in user_manifest.validation["violations"]] == [
        v["position"] for v in manifest.validation["violations"]
    ]


def _damaged(directory: Path, tmp: Path, what: str) -> Path:
    out = tmp / f"{directory.name}-{what}"
    shutil.copytree(directory, out)
    log = next(out.glob("*.log"))
    if what == "flip":
        raw = bytearray(log.read_bytes())
        middle = len(raw) // 2
        start = max(p for p, _ in iter_batches(bytes(raw)) if p <= middle)
        raw[max(middle, start + 30)] ^= 0x10  # in the CRC-covered bytes of a batch (compressed or not)
        log.write_bytes(raw)
    elif what == "offset-index":
        index = bytearray(log.with_suffix(".index").read_bytes())
        rel, pos = struct.unpack_from(">ii", index, 8)
        struct.pack_into(">ii", index, 8, rel, pos + 12)  # no longer a batch start
        log.with_suffix(".index").write_bytes(index)
    else:
        index = bytearray(log.with_suffix(".timeindex").read_bytes())
        ts, rel = struct.unpack_from(">qi", index, 0)
        struct.pack_into(">qi", index, 0, ts - 1, rel)  # below the largest timestamp so far
        log.with_suffix(".timeindex").write_bytes(index)
    return out


@pytest.mark.parametrize("codec", CODECS)
def test_damaged_log_or_index_refused_under_any_policy(codec: str, segments, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    directory = segments[(codec, "json", None)]
    policies: list[tuple[dict[str, str], dict[str, str]]] = [
        ({}, {}),
        ({"record.validation.policy": "header:trace-id"}, {}),
        ({"record.validation.policy": "json"}, {}),
        ({"record.validation.policy": "schema-id"}, {}),
        (
            _tier("trace-id"),
            {"record.validation.policy.class.name": "user_policy_pkg.policies:RequireHeader"},
        ),
    ]
    for what in ("flip", "offset-index", "time-index"):
        damaged = _damaged(directory, tmp_path, what)
        for topic_configs, configs in policies:
            _, exc = _copy(tmp_path, damaged, topic_configs, **configs)
            assert isinstance(exc, SegmentIntegrityError), (what, topic_configs, exc)
            if what == "flip":
                assert exc.file.endswith(".log")
            else:
                assert exc.file.endswith(".index" if what == "offset-index" else ".timeindex")
                assert "entry" in exc.reason
