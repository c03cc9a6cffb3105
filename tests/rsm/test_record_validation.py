"""Record validation on the columnar decoder: the vectorised API, the per-record adapter, the
built-in policies against per-record definitions, the hints deciding the work, decompression once per
batch, and the counters. (Segments written by Kafka itself: tests/format/test_validation_oracle.py.)"""

from __future__ import annotations

import json
import logging
import random
import uuid
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka_segments import read_all
from user_policy_pkg.policies import Json, RequireHeader, SchemaId, Seen

import segment_format.records
from rsm import (
    LogConfig,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteStorageManager,
    TopicIdPartition,
)
from rsm.api.errors import ConfigException, InvalidRecordException, RecordValidationError
from rsm.api.metadata import LogSegmentData
from rsm.stored.manifest import Manifest
from rsm.validation import (
    Failures,
    Header,
    RecordIntrospectionHints,
    RecordProxy,
    RequireHeaderValidationPolicy,
    TopicMetadata,
    VectorizedRecordValidationPolicy,
)
from rsm.validation.arrow import projection_for
from rsm.validation.builtin import BuiltinPolicies, JsonValuesPolicy, SchemaIdPolicy, parse_policy
from rsm.validation.records import PerRecordAdapter, RecordValidator
from segment_format import columnar
from segment_format.codecs import CompressionType
from segment_format.indexes import build_indexes
from segment_format.log_entries import iter_batches
from segment_format.records import ControlRecordType
from segment_format.writer import build_batch, build_control_batch

TIP = TopicIdPartition(uuid.uuid4(), "orders", 0)


def _topic(value: str) -> TopicMetadata:
    return TopicMetadata(TIP, value)


def _value(i: int, kind: str) -> bytes:
    body = json.dumps({"order": i, "item": f"sku-{i % 7}", "qty": i % 5}).encode()
    return b"\x00" + (7 + i % 2).to_bytes(4, "big") + body if kind == "sr" else body


def _segment(
    directory: Path,
    codec: CompressionType,
    n: int = 400,
    *,
    kind: str = "json",
    bad: dict[int, dict[str, object]] | None = None,
    seed: int = 3,
) -> tuple[Path, list[int]]:
    """A segment of `n` data records (header "trace" on each, values per `kind`), a control batch in the
    middle; `bad[i]` replaces fields of record i. Returns the log path and each record's offset."""
    rng = random.Random(seed)
    bad = bad or {}
    directory.mkdir(parents=True, exist_ok=True)
    out, offsets, offset, i = [], [], 0, 0
    while i < n:
        count = min(rng.randint(1, 40), n - i)
        records = []
        for j in range(i, i + count):
            rec = {"key": b"k%d" % j, "value": _value(j, kind), "headers": [("trace", b"t"), ("x", None)]}
            rec.update(bad.get(j, {}))
            records.append((rec["key"], rec["value"], rec["headers"], 1_700_000_000_000 + j))
            offsets.append(offset + j - i)
        out.append(build_batch(records, base_offset=offset, compression=codec))
        offset += count
        i += count
        if len(out) == 3:
            out.append(build_control_batch(ControlRecordType.COMMIT, base_offset=offset, producer_id=5, producer_epoch=0,
                                           timestamp=1_700_000_000_000))  # fmt: skip
            offset += 1
    log = directory / "00000000000000000000.log"
    raw = b"".join(out)
    log.write_bytes(raw)
    offset_index, time_index = build_indexes(raw, 0, index_interval_bytes=512)
    (directory / "00000000000000000000.index").write_bytes(offset_index)
    (directory / "00000000000000000000.timeindex").write_bytes(time_index)
    return log, offsets


def _last_offset(raw: bytes) -> int:
    return [b.last_offset for _, b in iter_batches(raw)][-1]


def _run(policy, log: Path, value: str, chunk: int = 1000):  # type: ignore[no-untyped-def]
    """Drive a RecordValidator as the copy does: the verifier's batches, then the same chunks."""
    from rsm.copy.integrity import SegmentIntegrityVerifier

    raw = log.read_bytes()
    last = _last_offset(raw)
    topic = _topic(value)
    validator = RecordValidator(policy.for_topic(topic), topic, str(log))
    verifier = SegmentIntegrityVerifier(str(log), 0, last, len(raw), chunk, on_batch=validator.on_batch)
    buf = bytearray(chunk)
    for start in range(0, len(raw), chunk):
        piece = raw[start : start + chunk]
        buf[: len(piece)] = piece
        verifier.feed(memoryview(buf)[: len(piece)])
        validator.feed(memoryview(buf)[: len(piece)])
    verifier.finish()
    return validator.finish()


# ---------------------------------------------------------------------------------------------------------
# built-in policies against the per-record definitions (the user's own classes)


@pytest.mark.parametrize("codec", list(CompressionType))
def test_builtins_and_user_per_record_policies_agree(tmp_path: Path, codec: CompressionType) -> None:
    json_log, json_offsets = _segment(
        tmp_path / "j",
        codec,
        bad={5: {"headers": [("x", None)]}, 77: {"value": b'{"order": 1,'}, 300: {"value": None}},
    )
    sr_log, sr_offsets = _segment(
        tmp_path / "s",
        codec,
        kind="sr",
        bad={
            9: {"value": b"\x01" + bytes(8)},
            150: {"value": b"\x00\x00"},
            222: {"value": b"\x00" + bytes(4)},
        },
    )
    cases = [
        (BuiltinPolicies(), "header:trace", RequireHeader(), "trace", json_log, [json_offsets[5]]),
        (BuiltinPolicies(), "json", Json(), "", json_log, [json_offsets[77]]),
        (BuiltinPolicies(), "schema-id", SchemaId(), "", sr_log, [sr_offsets[9], sr_offsets[150]]),
        (
            BuiltinPolicies(),
            "schema-id:7-8",
            SchemaId(),
            "7-8",
            sr_log,
            [sr_offsets[i] for i in (9, 150, 222)],
        ),
        (BuiltinPolicies(), "schema-id", SchemaId(), "", json_log, json_offsets[:300] + json_offsets[301:]),
    ]
    for builtin, value, user, user_value, log, expected in cases:
        vectorised = _run(builtin, log, value)
        per_record = _run(user, log, user_value)
        assert [v.offset for v in vectorised.violations] == expected[:100], value
        assert [v.offset for v in per_record.violations] == expected[:100], value
        assert vectorised.violation_count == per_record.violation_count == len(expected)
        assert vectorised.records == per_record.records == 400  # the control record is never shown
        assert all(v.position >= 0 for v in vectorised.violations)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(st.none(), st.binary(max_size=8), st.builds(lambda i: b"\x00" + i.to_bytes(4, "big", signed=True),
                                                              st.integers(-(2**31), 2**31 - 1))),
        min_size=1,
        max_size=60,
    ),
    st.sampled_from([None, ((0, 10),), ((-5, -1), (7, 7), (2**31 - 1, 2**31 - 1))]),
    st.integers(0, 5),
)  # fmt: skip
def test_schema_id_vectorised_equals_per_record(values: list[bytes | None], allowed, skip: int) -> None:  # type: ignore[no-untyped-def]
    policy = SchemaIdPolicy(allowed)
    batch = pa.RecordBatch.from_pydict(
        {"offset": list(range(len(values))), "timestamp": [0] * len(values), "value": values},
        schema=projection_for(policy.hints()).schema,
    ).slice(min(skip, len(values) - 1))  # a slice: buffers with an offset
    failures = policy.validate_records(_topic("schema-id"), batch)
    got = [] if failures is None else [int(r) for r in failures.rows]
    expected = []
    for row, value in enumerate(batch.column("value").to_pylist()):
        ok = value is None or (
            len(value) >= 5
            and value[0] == 0
            and (
                allowed is None
                or any(lo <= int.from_bytes(value[1:5], "big", signed=True) <= hi for lo, hi in allowed)
            )
        )
        if not ok:
            expected.append(row)
    assert got == expected


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["trace", "x", "tracE", "", "ünï"]), max_size=3), min_size=1, max_size=40),
       st.integers(0, 5))  # fmt: skip
def test_header_vectorised_equals_per_record(keys: list[list[str]], skip: int) -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "offset": list(range(len(keys))),
            "timestamp": [0] * len(keys),
            "headers": [[{"key": k, "value": None} for k in row] for row in keys],
        },
        schema=projection_for(RequireHeaderValidationPolicy().hints()).schema,
    ).slice(min(skip, len(keys) - 1))
    failures = RequireHeaderValidationPolicy("trace").validate_records(_topic("ignored"), batch)
    got = [] if failures is None else [int(r) for r in failures.rows]
    adapter = PerRecordAdapter(RequireHeader(), RequireHeader().hints())
    per_record = adapter(_topic("trace"), batch)
    assert got == ([] if per_record is None else list(per_record.rows))


def test_json_policy_verdicts() -> None:
    values = [b'{"a": 1}', b"123456789012345678901234567890", b"[1,]", None, b"", b'"\xff"', b" [] ", b"NaN"]
    batch = pa.RecordBatch.from_pydict(
        {"offset": list(range(len(values))), "timestamp": [0] * len(values), "value": values},
        schema=projection_for(JsonValuesPolicy().hints()).schema,
    )
    failures = JsonValuesPolicy().validate_records(_topic("json"), batch)
    assert failures is not None and list(failures.rows) == [2, 4, 5, 7]
    assert all(r.startswith("value is not valid JSON") for r in failures.reasons)
    for i, v in enumerate(values):  # orjson's verdict, whichever parser answered first
        if v is not None:
            try:
                orjson.loads(v)
                assert i not in failures.rows
            except orjson.JSONDecodeError:
                assert i in failures.rows


def test_policy_names() -> None:
    assert isinstance(parse_policy("json"), JsonValuesPolicy)
    assert parse_policy("schema-id").allowed is None
    assert parse_policy(" schema-id: 1, 7 ,100-199").allowed == ((1, 1), (7, 7), (100, 199))
    assert parse_policy("header:trace-id").key == "trace-id"
    assert parse_policy("require-header:a:b").key == "a:b"
    for bad in ("jsn", "json:x", "schema-id:9-1", "schema-id:a", "header:", "schema-id:1,,2"):
        with pytest.raises(ValueError):
            parse_policy(bad)
    with pytest.raises(ConfigException, match="orders: record.validation.policy 'nope' is not a built-in"):
        BuiltinPolicies().for_topic(_topic("nope"))
    # a vectorised policy still answers the seed's per-record call
    with pytest.raises(InvalidRecordException, match="schema-registry magic byte"):
        BuiltinPolicies().validate(_topic("schema-id"), RecordProxy(1, 0, None, b"\x05abcdef", ()))
    parse_policy("header:h").validate(_topic("x"), RecordProxy(1, 0, None, None, (Header("h", None),)))


# ---------------------------------------------------------------------------------------------------------
# the hints decide the work


def test_adapter_shows_only_what_the_hints_ask(tmp_path: Path) -> None:
    log, offsets = _segment(tmp_path, CompressionType.ZSTD, 60)
    for hints, check in [
        (RecordIntrospectionHints(True, 0, 0), lambda r: r.key is None and r.value is None and r.headers),
        (
            RecordIntrospectionHints(False, 2, 5),
            lambda r: len(r.key) <= 2 and len(r.value) == 5 and not r.headers,
        ),
        (
            RecordIntrospectionHints(False, -1, 2**63 - 1),
            lambda r: r.key.startswith(b"k") and r.value.endswith(b"}"),
        ),
    ]:
        policy = Seen(hints, refuse=frozenset({offsets[3]}))
        result = _run(policy, log, "p")
        assert [r.offset for r in policy.seen] == offsets
        assert all(check(r) for r in policy.seen), hints
        assert [v.offset for v in result.violations] == [offsets[3]]
        assert result.violations[0].reason == f"offset {offsets[3]} refused"
    assert projection_for(RecordIntrospectionHints(True, 0, 0)).names == ("offset", "timestamp", "headers")
    assert projection_for(RecordIntrospectionHints(False, 0, 5)).names == ("offset", "timestamp", "value")


class _BatchLevel(VectorizedRecordValidationPolicy):
    def __init__(self) -> None:
        self.calls: list[pa.RecordBatch] = []

    def hints(self) -> RecordIntrospectionHints:
        return RecordIntrospectionHints(False, 0, 0)

    def validate_records(self, topic, records):  # type: ignore[no-untyped-def]
        self.calls.append(records)
        return Failures([0], "the first batch of each chunk") if records.num_rows else None


def test_a_policy_that_reads_nothing_decodes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log, _ = _segment(tmp_path, CompressionType.GZIP, 200)
    calls = []
    monkeypatch.setattr(columnar, "_decode_range", lambda *a, **k: calls.append(1))
    policy = _BatchLevel()
    result = _run(policy, log, "p", chunk=1 << 20)
    assert not calls
    (rows,) = policy.calls  # one chunk: one call, one row per data batch (the control batch left out)
    assert rows.schema.names == ["offset", "timestamp", "last_offset", "record_count"]
    assert sum(rows.column("record_count").to_pylist()) == result.records == 200
    assert result.violation_count == rows.column("record_count")[0].as_py()
    assert [v.offset for v in result.violations] == [0]
    seen = Seen(RecordIntrospectionHints(False, 0, 0))
    _run(seen, log, "p")
    assert [r.offset for r in seen.seen] == rows.column("offset").to_pylist()  # once per batch


def test_compressed_batches_are_decompressed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The integrity check reads CRCs over the stored bytes; the decoder alone decompresses."""
    log, _ = _segment(tmp_path, CompressionType.ZSTD, 300)
    data_batches = sum(1 for _ in iter_batches(log.read_bytes())) - 1  # less the marker
    counted = []
    originals = columnar._DECOMPRESSORS

    def counting(i):  # type: ignore[no-untyped-def]
        def call(view):  # type: ignore[no-untyped-def]
            counted.append(i)
            return originals[i](view)

        return call

    monkeypatch.setattr(columnar, "_DECOMPRESSORS", tuple(counting(i) for i in range(5)))
    monkeypatch.setattr(
        segment_format.records, "decompress", lambda *a, **k: pytest.fail("decompressed twice")
    )
    result = _run(BuiltinPolicies(), log, "json", chunk=4096)
    assert result.records == 300
    assert counted == [CompressionType.ZSTD] * data_batches


# ---------------------------------------------------------------------------------------------------------
# through the RemoteStorageManager: fail / tier, counters, the log line


def _copy_setup(tmp_path: Path, log: Path, **configs: str):  # type: ignore[no-untyped-def]
    rsm = RemoteStorageManager()
    rsm.configure({"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "chunk.size": "4096",
                   **configs})  # fmt: skip
    raw = log.read_bytes()
    last = _last_offset(raw)
    d = log.parent
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId(TIP, uuid.uuid4()), 0, last, 0, 1, 0, len(raw), {0: 0})
    data = LogSegmentData(log, d / f"{log.stem}.index", d / f"{log.stem}.timeindex", None, d / f"{log.stem}.index",
                          b"0\n1\n0 0\n")  # fmt: skip
    return rsm, md, data


def test_copy_fails_or_tiers_and_counts(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log, offsets = _segment(tmp_path / "seg", CompressionType.LZ4, bad={42: {"value": b"{oops"}})
    rsm, md, data = _copy_setup(tmp_path, log)
    try:
        with pytest.raises(
            RecordValidationError,
            match=f"1 record\\(s\\) violate policy 'json'; first at offset {offsets[42]}",
        ):
            rsm.copy_log_segment_data(md, data, LogConfig({"record.validation.policy": "json"}))
        assert not list((tmp_path / "store").rglob("*.manifest"))
        caplog.set_level(logging.INFO, logger="rsm.manager")
        tier = LogConfig(
            {"record.validation.policy": "json", "unchecked.rsm.record.validation.on.violation": "tier"}
        )
        custom = rsm.copy_log_segment_data(md, data, tier)
        report = Manifest.from_bytes(next((tmp_path / "store").rglob("*.manifest")).read_bytes()).validation
        assert report is not None
        assert [v["offset"] for v in report["violations"]] == [offsets[42]] and report["violation_count"] == 1
        assert report["records"] == 400 and report["action"] == "tier"
        import dataclasses

        assert (
            read_all(rsm.fetch_log_segment(dataclasses.replace(md, custom_metadata=custom), 0))
            == log.read_bytes()
        )
        rsm.copy_log_segment_data(md, data, LogConfig({"record.validation.policy": "header:trace"}))
        stats = rsm.validation_stats()
        assert stats["orders"]["segments"] == 3 and stats["orders"]["records"] == 1200
        assert stats["orders"]["violations"] == 2 and stats["orders"]["refused"] == 1
        assert stats["orders"]["seconds"] > 0
        # a segment with violations has a line of its own; a clean one is named by its copy's one line
        lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("validated segment")]
        assert (
            len(lines) == 1
            and "400 records, 1 violation(s)" in lines[0]
            and "tiered with a report" in lines[0]
        )
        copies = [r.getMessage() for r in caplog.records if r.getMessage().startswith("copied segment")]
        assert [c.split("validated_records=")[1] for c in copies] == ["400 violations=1", "400 violations=0"]
        with pytest.raises(ConfigException, match="is not a built-in policy"):
            rsm.copy_log_segment_data(md, data, LogConfig({"record.validation.policy": "avro"}))
        rsm.copy_log_segment_data(md, data, LogConfig({}))  # no policy: not validated
        assert rsm.validation_stats()["orders"]["segments"] == 3
    finally:
        rsm.close()


def test_user_policy_class_by_name(tmp_path: Path) -> None:
    log, offsets = _segment(tmp_path / "seg", CompressionType.SNAPPY, bad={7: {"headers": []}})
    rsm, md, data = _copy_setup(
        tmp_path, log, **{"record.validation.policy.class.name": "user_policy_pkg.policies:RequireHeader"}
    )
    try:
        with pytest.raises(RecordValidationError, match=f"first at offset {offsets[7]} .*no header trace"):
            rsm.copy_log_segment_data(md, data, LogConfig({"record.validation.policy": "trace"}))
    finally:
        rsm.close()
