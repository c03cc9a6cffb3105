"""Fuzzing the parsers: random and mutated bytes raise only the documented errors, never hang or blow up.

Log and index parsers raise CorruptRecordError, the manifest reader ManifestError, the bridge's frame
readers ProtocolError and its argument decoders ValueError. Seeds are real: files a broker's layout writes
(tests/tiering.py), manifests of both versions, a bridge conversation, and, when ../shared is there, files
real brokers wrote.

Bounded (max_examples, deadline) so it stays in the normal suite. Memory is capped with RLIMIT_AS in
each test so that a bogus length allocating its claimed size fails loudly as MemoryError; the tests at the
end measure what a claimed length makes the decoders allocate.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import dataclasses
import functools
import gc
import hashlib
import json
import os
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from fixtures_data import SEGMENTS
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kafka_segments import make_segment
from tiering import PartitionLog

from rsm import CustomMetadata, LogConfig, RemoteStorageManager, TopicIdPartition
from rsm.bridge import protocol as bp
from rsm.config.keyring import generate_key
from rsm.stored.manifest import Manifest, ManifestError
from segment_format import (
    CompressionType,
    CorruptRecordError,
    LeaderEpochCheckpoint,
    OffsetIndex,
    ProducerSnapshot,
    ProducerStateEntry,
    SegmentVerifier,
    TimeIndex,
    TransactionIndex,
    build_batch,
    build_control_batch,
    compress,
    crc32c,
    decompress,
    iter_batches,
    parse_segment_name,
)
from segment_format.arrow_schema import RECORD_SCHEMA
from segment_format.codecs import XERIAL_HEADER
from segment_format.columnar import decode_batches, decode_reference, iter_record_batches
from segment_format.records import ControlRecordType

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "200")),
    deadline=2000,
    suppress_health_check=[HealthCheck.too_slow],
)
MEMORY_CAP = 2 * 1024**3  # far above what parsing these inputs needs, far below a bogus 2 GiB-per-length


@pytest.fixture(autouse=True)
def _cap_memory() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = MEMORY_CAP + _current_vm()
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _current_vm() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[0]) * resource.getpagesize()


def _seed_log() -> bytes:
    parts = []
    offset = 0
    for i, codec in enumerate(CompressionType):
        recs = [(f"k{j}".encode(), b"v" * (j * 7), [("h", b"x")], 1000 + j) for j in range(3)]
        parts.append(build_batch(recs, base_offset=offset, compression=codec, producer_id=i, producer_epoch=0,
                                 base_sequence=0))  # fmt: skip
        offset += 3
    parts.append(build_control_batch(ControlRecordType.COMMIT, base_offset=offset, producer_id=1, producer_epoch=0,
                                     timestamp=5))  # fmt: skip
    offset += 1
    for magic in (0, 1):
        for codec in (CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4):
            parts.append(build_batch([(b"a", b"b", [], 7), (None, b"c", [], 8)], base_offset=offset, magic=magic,
                                     compression=codec))  # fmt: skip
            offset += 2
    return b"".join(parts)


SEED = _seed_log()


def parse_everything(data: bytes) -> None:
    """Everything a reader does with a log: iterate, check CRCs, decode records, verify."""
    for _, batch in iter_batches(data, file="fuzz.log", strict=False):
        batch.is_valid()
        batch.records()
    v = SegmentVerifier(file="fuzz.log", deep=True)
    v.update(data)
    v.finish()


def only_corrupt(fn, data: bytes) -> None:  # type: ignore[no-untyped-def]
    try:
        fn(data)
    except CorruptRecordError as exc:
        assert exc.reason and str(exc).startswith(exc.file or "<bytes>")


@st.composite
def mutated(draw: st.DrawFn, seed: bytes = SEED) -> bytes:
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete"]))
        if not data:
            break
        pos = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            data[pos] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF, 0x01]))
        elif kind == "truncate":
            del data[pos:]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        else:
            del data[pos : pos + draw(st.integers(1, 16))]
    return bytes(data)


@FUZZ
@given(mutated())
def test_mutated_logs_raise_only_corrupt_record_error(data: bytes) -> None:
    only_corrupt(parse_everything, data)


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes_raise_only_corrupt_record_error(data: bytes) -> None:
    only_corrupt(parse_everything, data)


@FUZZ
@given(st.sampled_from([c for c in CompressionType if c is not CompressionType.NONE]), st.data())
def test_mutated_compressed_payloads(codec: CompressionType, data: st.DataObject) -> None:
    good = compress(codec, b"some record bytes " * 40)
    bad = data.draw(mutated(good))
    only_corrupt(lambda d: decompress(codec, d), bad)
    only_corrupt(lambda d: decompress(codec, d, magic=0), bad)


INDEX_SEEDS = {
    "index": OffsetIndex(0).to_bytes() + bytes.fromhex("0000000a00001000000000140000200000000030"),
    "snapshot": ProducerSnapshot([ProducerStateEntry(1, 0, 5, 10, 2, 99, -1, -1)]).to_bytes(),
    "checkpoint": b"0\n2\n0 0\n3 100\n",
}


@FUZZ
@given(st.sampled_from(sorted(INDEX_SEEDS)), st.data())
def test_mutated_index_files(kind: str, data: st.DataObject) -> None:
    raw = data.draw(mutated(INDEX_SEEDS[kind]))
    parsers = {
        "index": [lambda d: OffsetIndex.from_bytes(d, 0), lambda d: TimeIndex.from_bytes(d, 0),
                  lambda d: TransactionIndex.from_bytes(d)],
        "snapshot": [lambda d: ProducerSnapshot.from_bytes(d)],
        "checkpoint": [lambda d: LeaderEpochCheckpoint.from_bytes(d)],
    }[kind]  # fmt: skip
    for parse in parsers:
        only_corrupt(parse, raw)


# ======================================================================================================
# Hostile inputs (kept in the suite): real inputs mutated, for every parser a hostile store or peer can reach:
# the index readers, the manifest reader, the columnar decoder (C kernel against its Python reference)
# and the bridge's frame and argument decoders. Only the documented exceptions, no hang (each test has a
# hypothesis deadline; socket reads a timeout), and no allocation beyond what the input justifies.


def _rolled_partition() -> dict[str, bytes]:
    """A segment as a broker rolls it (tests/tiering.py, Kafka's layouts): every codec, transactions
    committed and aborted, one left open, two leader epochs."""
    with tempfile.TemporaryDirectory() as tmp:
        part = PartitionLog(RemoteStorageManager(), TopicIdPartition(uuid.UUID(int=1), "fuzz", 0), Path(tmp))
        for i, codec in enumerate([0, 1, 2, 3, 4] * 2):
            if i == 5:
                part.new_epoch(3)
            if i % 3 == 2:
                part.append(3 + i, codec=codec, value_size=15 * i)
            else:
                pid = 10 + i % 2
                part.append(3 + i, codec=codec, producer_id=pid, transactional=True, value_size=15 * i)
                part.end_txn(pid, commit=i % 2 == 0)
        part.append(2, producer_id=99, transactional=True)
        _, data = part.roll(copy=False)
        assert data.transaction_index is not None
        return {
            "log": data.log_segment.read_bytes(),
            "index": data.offset_index.read_bytes(),
            "timeindex": data.time_index.read_bytes(),
            "txnindex": data.transaction_index.read_bytes(),
            "snapshot": data.producer_snapshot_index.read_bytes(),
            "checkpoint": bytes(data.leader_epoch_index),
        }


def _broker_files() -> dict[str, list[bytes]]:
    """Files real brokers wrote (../shared/fixtures), when that checkout is there; small logs only."""
    found: dict[str, list[bytes]] = {}
    if not SEGMENTS.is_dir():
        return found
    for path in sorted(SEGMENTS.rglob("*")):
        kind = "checkpoint" if path.name.endswith("leader-epoch-checkpoint") else path.suffix.lstrip(".")
        if path.is_file() and kind in ("log", "index", "timeindex", "snapshot", "checkpoint"):
            data = path.read_bytes()
            if data and len(data) <= 64 * 1024:
                found.setdefault(kind, []).append(data)
    return found


ROLLED = _rolled_partition()
BROKER = _broker_files()
SEEDS_BY_KIND: dict[str, list[bytes]] = {
    kind: [ROLLED[kind], *BROKER.get(kind, [])]
    for kind in ("index", "timeindex", "txnindex", "snapshot", "checkpoint")
}
SEEDS_BY_KIND["index"].append(INDEX_SEEDS["index"])
SEEDS_BY_KIND["snapshot"].append(INDEX_SEEDS["snapshot"])
LOGS = [SEED, ROLLED["log"], *BROKER.get("log", [])]


def parse_index_file(kind: str, data: bytes) -> None:
    """Parse as a reader does, then use what was accepted (lookups, re-encoding): nothing but the parse
    may raise, and only CorruptRecordError."""
    if kind == "index":
        offsets = OffsetIndex.from_bytes(data, 1000, file="fuzz.index")
        for target in (-1, 0, 1000, 1000 + 2**31, 2**63 - 1):
            offsets.lookup(target)
        assert OffsetIndex.from_bytes(offsets.to_bytes(), 1000).entries == offsets.entries
    elif kind == "timeindex":
        times = TimeIndex.from_bytes(data, 1000, file="fuzz.timeindex")
        for target in (-(2**63), -1, 0, 2**63 - 1):
            times.lookup(target)
        assert TimeIndex.from_bytes(times.to_bytes(), 1000).entries == times.entries
        times.last_entry  # noqa: B018 - a property that reads the entries
    elif kind == "txnindex":
        txns = TransactionIndex.from_bytes(data, file="fuzz.txnindex")
        txns.collect_aborted(0, 2**63 - 1)
        assert TransactionIndex.from_bytes(txns.to_bytes()).entries == txns.entries
    elif kind == "snapshot":
        snapshot = ProducerSnapshot.from_bytes(data, file="fuzz.snapshot")
        assert ProducerSnapshot.from_bytes(snapshot.to_bytes()).entries == snapshot.entries
        for entry in snapshot:
            entry.first_offset, entry.first_sequence  # noqa: B018
    else:
        checkpoint = LeaderEpochCheckpoint.from_bytes(data, file="fuzz.checkpoint")
        for target in (-1, 0, 2**63 - 1):
            checkpoint.epoch_for_offset(target)
            checkpoint.lookup(target)
        assert LeaderEpochCheckpoint.from_bytes(checkpoint.to_bytes()).entries == checkpoint.entries


@FUZZ
@given(st.sampled_from(sorted(SEEDS_BY_KIND)), st.data())
def test_mutated_real_index_files_raise_only_corrupt_record_error(kind: str, data: st.DataObject) -> None:
    seed = data.draw(st.sampled_from(SEEDS_BY_KIND[kind]), label="seed")
    raw = data.draw(mutated(seed) if seed else st.binary(max_size=64))
    only_corrupt(lambda d: parse_index_file(kind, d), raw)
    # any file's bytes as any other kind: a file mixed up with its neighbour
    other = data.draw(st.sampled_from(sorted(SEEDS_BY_KIND)), label="read as")
    only_corrupt(lambda d: parse_index_file(other, d), raw)


@FUZZ
@given(st.text(max_size=40))
def test_segment_file_names_raise_only_value_error(name: str) -> None:
    """`FixedWidthIndex.read` takes the base offset from the file name: ValueError for anything else."""
    with contextlib.suppress(ValueError):
        assert parse_segment_name(name) >= 0


# -- the manifest reader -------------------------------------------------------------------------------

V1_MANIFESTS = [p.read_bytes() for p in sorted((DATA_DIR / "manifest_v1_store").rglob("*.manifest"))]


@functools.cache
def v2_manifests() -> tuple[bytes, bytes]:
    """The manifests this code writes (version 2): a plain segment's (SHA-256 seal), an encrypted one's."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        keyring = root / "keyring.json"
        keyring.write_text(json.dumps({"k1": generate_key()}))
        with RemoteStorageManager() as rsm:
            rsm.configure({"storage.backend": "file", "storage.file.root": str(root / "store"),
                           "encryption.keyring.path": str(keyring), "chunk.size": "4096"})  # fmt: skip
            for encrypted in (False, True):
                seg = make_segment(
                    root / f"seg-{encrypted}", TopicIdPartition(uuid.uuid4(), "fuzz", 0), batches=12
                )
                lc = {
                    "unchecked.rsm.encryption.enabled": str(encrypted).lower(),
                    "unchecked.rsm.encryption.key.id": "k1",
                }
                rsm.copy_log_segment_data(seg.metadata, seg.data, LogConfig(lc))
        out = [
            p.read_bytes()
            for p in sorted((root / "store").rglob("*.manifest"), key=lambda p: p.stat().st_size)
        ]
    assert len(out) == 2 and all(b'"version":2' in m for m in out)
    return out[0], out[1]  # plain (smaller: no wrapped key), encrypted


def manifests() -> list[bytes]:
    return [*V1_MANIFESTS, *v2_manifests()]


def json_values(finite: bool = False) -> st.SearchStrategy[Any]:
    """Any JSON value (``finite``: as orjson reads them: no NaN/Infinity, integers of 64 bits)."""
    numbers = (
        st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False, allow_infinity=False)
        if finite
        else st.integers(-(2**80), 2**80) | st.floats() | st.sampled_from([0, -1, 2**31, 2**63, 10**30])
    )
    scalars = st.none() | st.booleans() | numbers | st.text(max_size=24)
    return st.recursive(
        scalars,
        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c, max_size=4),
        max_leaves=8,
    )


# built once: a strategy made inside a draw is validated again at every draw (most of the time spent)
JSON_VALUES = {False: json_values(False), True: json_values(True)}
EDITS = st.sampled_from(["replace", "replace", "near", "delete", "add"])
KEYS = st.text(max_size=12)


def _slots(node: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) of a JSON document, depth first."""
    out: list[tuple[Any, Any]] = []
    keys = sorted(node) if isinstance(node, dict) else range(len(node)) if isinstance(node, list) else []
    for key in keys:
        out.append((node, key))
        out += _slots(node[key])
    return out


@st.composite
def edited_json(draw: st.DrawFn, doc: Any, finite: bool = False) -> Any:
    """``doc`` with one to three fields replaced by other JSON values, deleted, or added."""
    doc = copy.deepcopy(doc)
    values = JSON_VALUES[finite]
    for _ in range(draw(st.integers(1, 3))):
        slots = _slots(doc)
        if not slots:
            return draw(values)
        node, key = slots[draw(st.integers(0, len(slots) - 1))]
        action = draw(EDITS)
        if action == "replace":
            node[key] = draw(values)
        elif action == "near":  # values a careless edit makes: off by one, negative, huge, the wrong type
            value = node[key]
            near = [value + 1 if isinstance(value, int) else 1, -1, 2**63, 2**31 - 1, str(value), [value],
                    {"v": value}, None, True, 1.5]  # fmt: skip
            node[key] = near[draw(st.integers(0, len(near) - 1))]
        elif action == "delete":
            del node[key]
        elif isinstance(node, dict):
            node[draw(KEYS)] = draw(values)
        else:
            node.append(draw(values))
    return doc


def stored(doc: Any, reseal: bool) -> bytes:
    """A document as a store holds it (canonical JSON); ``reseal`` recomputes an unkeyed seal, as anyone
    can, so the parse gets past the seal to everything behind it."""
    if (
        reseal
        and isinstance(doc, dict)
        and isinstance(doc.get("seal"), dict)
        and doc["seal"].get("algorithm") == "SHA-256"
    ):
        body = {k: v for k, v in doc.items() if k != "seal"}
        digest = hashlib.sha256(
            json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
        )
        doc["seal"]["value"] = base64.b64encode(digest.digest()).decode()
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def only_manifest_error(data: bytes) -> None:
    """Parse and use what was accepted as readers do: nothing but ManifestError naming the object."""
    try:
        manifest = Manifest.from_bytes(data, "s3://b/fuzz.manifest")
    except ManifestError as exc:
        assert "s3://b/fuzz.manifest" in str(exc) and "\n" not in str(exc), exc
        return
    manifest.cache_id, manifest.segment_uuid, manifest.aad_version  # noqa: B018
    log = manifest.log
    for i in range(min(log.count, 64)):
        log.original_span(i), log.stored_span(i), log.chunk_of(i * log.chunk_size)  # noqa: B018
    manifest.to_json()


@FUZZ
@given(st.data())
def test_mutated_manifest_bytes_raise_only_manifest_error(data: st.DataObject) -> None:
    only_manifest_error(data.draw(mutated(data.draw(st.sampled_from(manifests()), label="seed"))))


@FUZZ
@given(st.data(), st.booleans())
def test_edited_manifests_raise_only_manifest_error(data: st.DataObject, reseal: bool) -> None:
    """Fields replaced by any JSON value (huge, negative, NaN, Infinity, the wrong type), deleted or added;
    plain version 2 manifests resealed, so the checks behind the seal are reached too."""
    doc = json.loads(data.draw(st.sampled_from(manifests()), label="seed"))
    only_manifest_error(stored(data.draw(edited_json(doc)), reseal))


DEEP = b'{"format":"kafka-tiered-rsm/segment-manifest","version":1,"segment":' + b"[" * 50_000


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"[" * 100_000, id="deep-array"),
        pytest.param(b'{"a":' * 100_000, id="deep-object"),
        pytest.param(DEEP, id="deep-field"),
        pytest.param(b"\xff\xfe{}", id="utf-16-bom"),
        pytest.param(b"", id="empty"),
        pytest.param(b"null", id="null"),
        pytest.param(b"1e999", id="huge-number"),
        pytest.param(b'"' + b"\\u0000" * 10 + b'"', id="string"),
    ],
)
def test_hostile_manifest_documents_raise_only_manifest_error(raw: bytes) -> None:
    """A document nested deeper than the interpreter's recursion limit made json.loads raise RecursionError."""
    only_manifest_error(raw)


WRONG_SHAPES: dict[str, Callable[[dict[str, Any]], object]] = {
    "location a list": lambda d: d.update(location=[]),
    "integrity a list": lambda d: d.update(integrity=[1]),
    "log a list": lambda d: d.update(log=[]),
    "encryption a string": lambda d: d.update(encryption="AES"),
    "indexes a list": lambda d: d.update(indexes=[]),
    "an index entry a list": lambda d: d["indexes"].update(OFFSET=[0, 1]),
    "log size infinite": lambda d: d["log"].update(size=float("inf")),
    "created_ms infinite": lambda d: d.update(created_ms=float("-inf")),
    "a stored size infinite": lambda d: d["log"]["stored_sizes"].__setitem__(0, float("inf")),
    "a segment member named with a line break": lambda d: d["segment"].update({"x\nforged log line": 1}),
}


@pytest.mark.parametrize("version", [1, 2], ids=["v1", "v2-resealed"])
@pytest.mark.parametrize("edit", sorted(WRONG_SHAPES))
def test_manifest_fields_of_the_wrong_shape_raise_only_manifest_error(edit: str, version: int) -> None:
    """What the fuzzer found: a field of another JSON type than the format's (or a number too large for an
    int) escaped the reader as AttributeError or OverflowError; a catalog reading manifests alone expects
    ManifestError (CatalogError naming the object), and got a traceback. And a member's name quoted in the
    message could break it into lines (a forged line in the broker's log)."""
    doc = json.loads(V1_MANIFESTS[0] if version == 1 else v2_manifests()[0])
    WRONG_SHAPES[edit](doc)
    only_manifest_error(stored(doc, reseal=True))


# -- the columnar decoder: the C kernel against its pure-Python reference ----------------------------------


def _outcome(decode: Callable[[], pa.Table]) -> pa.Table | None:
    try:
        return decode()
    except CorruptRecordError as exc:
        assert exc.reason and exc.position is not None, exc
        return None


@FUZZ
@given(st.sampled_from(range(len(LOGS))), st.booleans(), st.data())
def test_columnar_fast_path_and_reference_agree_on_mutated_segments(
    which: int, verify_crc: bool, data: st.DataObject
) -> None:
    """Real segments mutated: both decoders refuse (CorruptRecordError only), or both accept with the same
    rows. Unchecked CRCs (as a reader trusting the store's own checks does) let the edits reach records."""
    raw = data.draw(mutated(LOGS[which]))
    fast = _outcome(lambda: pa.Table.from_batches(
        list(iter_record_batches(raw, file="fuzz.log", verify_crc=verify_crc)), schema=RECORD_SCHEMA
    ))  # fmt: skip
    ref = _outcome(
        lambda: pa.Table.from_batches([decode_reference(raw, file="fuzz.log", verify_crc=verify_crc)])
    )
    event(f"{'refused' if fast is None else 'accepted'} (CRCs {'checked' if verify_crc else 'not checked'})")
    assert (fast is None) == (ref is None), (
        f"C kernel {'refused' if fast is None else 'accepted'}, reference not"
    )
    if fast is not None and ref is not None:
        assert fast.equals(ref)
        fast.validate(full=True)


# -- the bridge protocol's decoders ------------------------------------------------------------------------


def _bridge_metadata() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        seg = make_segment(Path(tmp), TopicIdPartition(uuid.UUID(int=7), "fuzz", 3), batches=2)
    return bp.encode_metadata(dataclasses.replace(seg.metadata, custom_metadata=CustomMetadata(b"\x01\x02")))


BRIDGE_METADATA = _bridge_metadata()
BRIDGE_SEGMENT_DATA = {
    "log_segment": "/k/00000000000000000000.log", "offset_index": "/k/00000000000000000000.index",
    "time_index": "/k/00000000000000000000.timeindex", "transaction_index": None,
    "producer_snapshot_index": "/k/00000000000000000001.snapshot",
}  # fmt: skip
BRIDGE_STREAM = b"".join([
    bp.encode_frame(bp.FrameType.HELLO, 0, bp.client_hello("fuzz", [bp.CAP_SHM])),
    bp.encode_frame(bp.FrameType.REQUEST, 7, {"op": "fetch_log_segment", "metadata": BRIDGE_METADATA,
                                             "start_position": 0, "end_position": None, "log_config": {"a": "b"}}),
    bp.encode_frame(bp.FrameType.REQUEST, 8, {"op": "copy_log_segment_data", "metadata": BRIDGE_METADATA,
                                             "segment_data": BRIDGE_SEGMENT_DATA}, b"0\n1\n0 0\n"),
    bp.encode_frame(bp.FrameType.DATA, 7, None, bytes(range(256)) * 2),
    bp.encode_frame(bp.FrameType.SHM_DATA, 7, None, bp.SHM_DATA_PAYLOAD.pack(3, 4096)),
    bp.encode_frame(bp.FrameType.ARENA_DATA, 7, None, bp.ARENA_DATA_PAYLOAD.pack(1 << 20, 4096)),
    bp.encode_frame(bp.FrameType.SHM_RELEASE, 0, None, bp.SHM_RELEASE_PAYLOAD.pack(2)),
    bp.encode_frame(bp.FrameType.END, 7), bp.encode_frame(bp.FrameType.CANCEL, 7),
    bp.encode_frame(bp.FrameType.ERROR, 8, {"code": "STORAGE", "message": "m"}),
])  # fmt: skip


def read_frames(raw: bytes, reader: str, buffer_bytes: int = 64 * 1024) -> list[tuple[Any, ...]]:
    """Every frame a peer that wrote ``raw`` and closed would deliver, until the first ProtocolError (or
    ConnectionClosed); a read that blocks for 5 s is a hang and fails the test (socket.timeout)."""
    ours, peer = socket.socketpair()
    try:
        ours.settimeout(5)
        peer.sendall(raw)
        peer.shutdown(socket.SHUT_WR)
        frames: list[tuple[Any, ...]] = []
        buffered = bp.FrameReader(ours, buffer_bytes) if reader == "FrameReader" else None
        while True:
            try:
                frame = buffered.recv_frame() if buffered is not None else bp.recv_frame(ours)
            except bp.ProtocolError:
                return frames
            frames.append((frame.type, frame.request_id, frame.header, bytes(frame.payload)))
    finally:
        ours.close()
        peer.close()


def decode_request(header: dict[str, Any], payload: bytes) -> None:
    """What the bridge decodes from a request's header: only ValueError (INVALID_REQUEST) may come out."""
    with contextlib.suppress(ValueError):
        bp.MetadataDecoder().decode(header.get("metadata"))
    for decode in (
        lambda: bp.decode_segment_data(header.get("segment_data"), payload),
        lambda: bp.decode_log_config(header.get("log_config")),
        lambda: bp.decode_index_type(header.get("index_type")),
    ):
        with contextlib.suppress(ValueError):
            decode()


@FUZZ
@given(st.data(), st.sampled_from([64, 4096, 64 * 1024]))
def test_mutated_frame_streams_raise_only_protocol_errors(data: st.DataObject, buffer_bytes: int) -> None:
    """The buffered FrameReader and the plain recv_frame deliver the same frames from any stream, then the
    same refusal (a ProtocolError, ConnectionClosed at the end), whatever the buffer size; what a REQUEST
    carries decodes to its arguments or a ValueError."""
    raw = data.draw(mutated(BRIDGE_STREAM) | st.binary(max_size=64))
    buffered = read_frames(raw, "FrameReader", buffer_bytes)
    plain = read_frames(raw, "recv_frame")
    assert buffered == plain
    for frame_type, _, header, payload in buffered:
        if frame_type is bp.FrameType.REQUEST:
            decode_request(header, payload)
        elif frame_type is bp.FrameType.HELLO:
            with contextlib.suppress(bp.BridgeError):
                bp.negotiate_version(header)


@FUZZ
@given(st.data())
def test_edited_bridge_arguments_raise_only_value_error(data: st.DataObject) -> None:
    """Request arguments as orjson reads them (64-bit integers, no NaN) with fields edited: decoded, or
    refused with a ValueError naming what is wrong (the bridge answers INVALID_REQUEST)."""
    header = {"metadata": BRIDGE_METADATA, "segment_data": BRIDGE_SEGMENT_DATA, "log_config": {"k": "v"},
              "index_type": "OFFSET"}  # fmt: skip
    decode_request(data.draw(edited_json(header, finite=True)), b"0\n1\n0 0\n")
    with contextlib.suppress(bp.BridgeError):
        bp.negotiate_version(data.draw(edited_json(bp.client_hello("fuzz", [bp.CAP_SHM]), finite=True)))
    with contextlib.suppress(ValueError):
        bp.uuid_from_kafka(data.draw(st.text(max_size=40) | st.sampled_from([BRIDGE_METADATA["topic_id"]])))


# -- allocation: what a claimed length makes the decoders reserve ----------------------------------------


def peak_allocated(call: Callable[[], object], *allowed: type[BaseException]) -> int:
    """Peak bytes Python allocated while ``call`` ran (tracemalloc); it must raise one of ``allowed``."""
    gc.collect()
    tracemalloc.start()
    try:
        with pytest.raises(allowed):
            call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _resign(batch: bytearray) -> bytes:
    """A magic-2 batch's CRC-32C recomputed after an edit (so the edit is what is refused, not the CRC)."""
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def _claims() -> dict[str, tuple[Callable[[bytes], object], bytes, tuple[type[BaseException], ...]]]:
    """Inputs of a few dozen bytes whose length or count fields claim about 2 GiB."""
    batch = bytearray(build_batch([(b"k", b"v", [], 1)], base_offset=0))
    huge_count = bytearray(batch)
    struct.pack_into(">i", huge_count, 57, 2**31 - 1)
    huge_length = bytearray(batch)
    struct.pack_into(">i", huge_length, 8, 2**31 - 1)
    body = struct.pack(">i", 2**31 - 1)
    snapshot = struct.pack(">hI", 1, crc32c(body)) + body
    v1 = json.loads(V1_MANIFESTS[0])
    v1["log"].update(size=2**31, chunk_size=1, stored_sizes=[1], codecs=[0], crc32c=[0])
    frame = struct.pack(">IBII", 2**31, 2, 1, 0)
    corrupt = (CorruptRecordError,)
    return {
        "record count": (lambda d: decode_reference(d), _resign(huge_count), corrupt),
        "batch length": (lambda d: list(iter_batches(d)), bytes(huge_length), corrupt),
        "columnar record count": (lambda d: decode_batches(d), _resign(huge_count), corrupt),
        "producer snapshot count": (ProducerSnapshot.from_bytes, snapshot, corrupt),
        "checkpoint count": (LeaderEpochCheckpoint.from_bytes, b"0\n2147483647\n0 0\n", corrupt),
        "snappy length": (lambda d: decompress(CompressionType.SNAPPY, d), b"\xff\xff\xff\xff\x07abc", corrupt),
        "xerial chunk": (lambda d: decompress(CompressionType.SNAPPY, d),
                         XERIAL_HEADER + struct.pack(">i", 2**31 - 1) + b"abc", corrupt),
        "lz4 block": (lambda d: decompress(CompressionType.LZ4, d),
                      compress(CompressionType.LZ4, b"")[:7] + struct.pack("<I", 2**31 - 1) + b"abc", corrupt),
        "manifest log size": (lambda d: Manifest.from_bytes(d), stored(v1, False), (ManifestError,)),
        "frame length": (lambda d: read_frames_strict(d, "FrameReader"), frame, (bp.ProtocolError,)),
        "frame length (recv_frame)": (lambda d: read_frames_strict(d, "recv_frame"), frame, (bp.ProtocolError,)),
    }  # fmt: skip


def read_frames_strict(raw: bytes, reader: str) -> None:
    """Read one frame from ``raw``; its ProtocolError is raised (not swallowed as in read_frames)."""
    ours, peer = socket.socketpair()
    try:
        ours.settimeout(5)
        peer.sendall(raw)
        peer.shutdown(socket.SHUT_WR)
        reader_obj = bp.FrameReader(ours, 4096) if reader == "FrameReader" else None
        tracemalloc.reset_peak()  # the reader's own receive buffer is not the input's doing
        if reader_obj is not None:
            reader_obj.recv_frame()
        else:
            bp.recv_frame(ours)
    finally:
        ours.close()
        peer.close()


CLAIMS = _claims()


@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_claimed_lengths_allocate_only_what_the_input_justifies(name: str) -> None:
    """A length or count field claiming ~2 GiB in an input of a few dozen bytes is refused before anything
    of that size is allocated: Python's peak stays within c * n + a constant (tracemalloc; see the test
    below for the C kernel's own buffers)."""
    decode, raw, allowed = CLAIMS[name]
    peak = peak_allocated(lambda: decode(raw), *allowed)
    assert peak <= 64 * len(raw) + 256 * 1024, f"{name}: {peak} bytes allocated for {len(raw)} input bytes"


NATIVE_PROBE = r"""
import struct, sys
from segment_format import build_batch, crc32c
from segment_format.columnar import decode_batches
from segment_format.errors import CorruptRecordError

def vm_peak():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmPeak:"))

batch = bytearray(build_batch([(b"k", b"v" * 100, [], 1)] * 50, base_offset=0))
decode_batches(bytes(batch))  # warm up: the kernel's first buffers, pyarrow's pools
before = vm_peak()
for position, value in ((57, 2**31 - 1), (8, 2**31 - 1), (57, 2**30), (8, len(batch) + 2**30)):
    edited = bytearray(batch)
    struct.pack_into(">i", edited, position, value)
    struct.pack_into(">I", edited, 17, crc32c(bytes(edited[21:])))
    for verify in (True, False):
        try:
            decode_batches(bytes(edited), verify_crc=verify)
        except CorruptRecordError:
            pass
        else:
            sys.exit(f"accepted a batch claiming {value} at byte {position}")
print(vm_peak() - before)
"""


def test_the_c_kernel_allocates_only_what_the_input_justifies() -> None:
    """tracemalloc does not see the C kernel's column buffers (malloc and mmap): a fresh interpreter's
    address-space peak (VmPeak, which counts reserved pages too) must not move for a 5 KiB batch whose
    record count or length claims up to 2 GiB.

    Not covered, on purpose: a zstd frame may declare a window of up to 128 MiB in a few bytes, and the zstd
    decoder reserves it (as zstd-jni does for Kafka's own consumers); a producer at compression.zstd.level
    22 writes such frames for real, so they cannot be refused."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", NATIVE_PROBE], cwd=root, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(root)})  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    grown = int(done.stdout.split()[-1])
    assert grown <= 16 << 20, f"the address space grew by {grown >> 20} MiB for a 5 KiB input"


@pytest.mark.parametrize("reader", ["FrameReader", "recv_frame"])
def test_a_frame_claiming_the_protocol_maximum_allocates_at_most_that(reader: str) -> None:
    """Found, not fixed here (rsm/bridge/ is another change's): a 13-byte prefix claiming a frame of the
    protocol's maximum makes the readers allocate its buffer (MAX_FRAME_BYTES, 20 MiB) before any byte of it
    arrives; beyond the maximum nothing is allocated (the claims above). This pins that bound."""
    prefix = struct.pack(">IBII", bp.MAX_FRAME_BYTES, int(bp.FrameType.REQUEST), 1, 0)
    peak = peak_allocated(lambda: read_frames_strict(prefix, reader), bp.ProtocolError)
    assert peak <= bp.MAX_FRAME_BYTES + (256 << 10), peak
