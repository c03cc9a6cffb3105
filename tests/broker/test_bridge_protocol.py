"""The bridge's wire protocol: framing, handshake, value encoding and error mapping."""

from __future__ import annotations

import socket
import struct
import threading
import uuid
from pathlib import Path

import pytest

from rsm import (
    CustomMetadata,
    IndexType,
    LogConfig,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    TopicIdPartition,
)
from rsm.bridge import protocol
from rsm.bridge.protocol import BridgeError, ConnectionClosed, ErrorCode, FrameType, ProtocolError


def make_metadata(custom: bytes | None = b"\x01loc") -> RemoteLogSegmentMetadata:
    tip = TopicIdPartition(uuid.uuid4(), "orders", 3)
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, uuid.uuid4()),
        start_offset=100,
        end_offset=199,
        max_timestamp_ms=1_700_000_000_123,
        broker_id=1,
        event_timestamp_ms=1_700_000_001_000,
        segment_size_in_bytes=123_456,
        segment_leader_epochs={0: 100, 3: 150},
        custom_metadata=None if custom is None else CustomMetadata(custom),
        state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
        txn_idx_empty=True,
    )


@pytest.fixture
def pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    yield a, b
    a.close()
    b.close()


def test_frame_round_trip_small_and_large(pair):
    a, b = pair
    big = bytes(range(256)) * 4096  # 1 MiB, goes through the scatter-gather path
    received = []

    def reader():
        received.append(protocol.recv_frame(b))
        received.append(protocol.recv_frame(b))

    t = threading.Thread(target=reader)
    t.start()
    protocol.send_frame(a, FrameType.REQUEST, 7, {"op": "health", "ü": "ß"}, b"xyz")
    protocol.send_frame(a, FrameType.DATA, 8, None, memoryview(big))
    t.join(10)
    first, second = received
    assert (first.type, first.request_id, first.header, bytes(first.payload)) == (
        FrameType.REQUEST,
        7,
        {"op": "health", "ü": "ß"},
        b"xyz",
    )
    assert (second.type, second.request_id, second.header) == (FrameType.DATA, 8, {})
    assert bytes(second.payload) == big


def test_frame_layout_is_the_documented_one():
    raw = protocol.encode_frame(FrameType.END, 0x01020304, {"a": 1}, b"PP")
    header = b'{"a":1}'
    assert raw == struct.pack(">IBII", 9 + len(header) + 2, 5, 0x01020304, len(header)) + header + b"PP"


def test_frame_split_across_many_small_writes(pair):
    a, b = pair
    raw = protocol.encode_frame(FrameType.RESPONSE, 5, {"k": "v" * 100}, b"p" * 1000)

    def trickle():
        for i in range(0, len(raw), 7):
            a.sendall(raw[i : i + 7])

    t = threading.Thread(target=trickle)
    t.start()
    frame = protocol.recv_frame(b)
    t.join(5)
    assert frame.header == {"k": "v" * 100}
    assert bytes(frame.payload) == b"p" * 1000


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (struct.pack(">IBII", 9, 99, 1, 0), "unknown frame type 99"),
        (struct.pack(">IBII", 2**31, 2, 1, 0), "outside"),
        (struct.pack(">IBII", 3, 2, 1, 0), "outside"),
        (struct.pack(">IBII", 12, 2, 1, 10), "does not fit"),
        (struct.pack(">IBII", 9 + 3, 2, 1, 3) + b"{x}", "not JSON"),
        (struct.pack(">IBII", 9 + 2, 2, 1, 2) + b"[]", "not a JSON object"),
        (struct.pack(">IBII", 9 + 3, 2, 1, 3) + b'"\xff"', "not JSON"),  # not UTF-8
        (struct.pack(">IBII", 9 + 4000, 2, 1, 4000) + b"[" * 2000 + b"]" * 2000, "not JSON"),  # too deep
        (struct.pack(">IBII", 9 + 9, 2, 1, 9) + b'{"a":NaN}', "not JSON"),
    ],
)
def test_malformed_frames_are_refused(pair, raw, message):
    a, b = pair
    a.sendall(raw)
    with pytest.raises(ProtocolError, match=message):
        protocol.recv_frame(b)


def test_eof_between_and_inside_frames(pair):
    a, b = pair
    a.sendall(protocol.encode_frame(FrameType.DATA, 1, None, b"abcdef")[:-3])
    a.shutdown(socket.SHUT_WR)
    with pytest.raises(ConnectionClosed, match="after"):
        protocol.recv_frame(b)
    with pytest.raises(ConnectionClosed, match="between frames"):
        protocol.recv_frame(b)


def test_version_negotiation():
    assert protocol.negotiate_version(protocol.client_hello("t")) == 1
    assert protocol.negotiate_version({"magic": "rsm-bridge", "versions": [1, 2, 9]}) == 1
    with pytest.raises(BridgeError) as err:
        protocol.negotiate_version({"magic": "rsm-bridge", "versions": [2]})
    assert err.value.code == ErrorCode.VERSION_MISMATCH
    with pytest.raises(BridgeError, match="bad magic"):
        protocol.negotiate_version({"magic": "http", "versions": [1]})


def test_uuid_kafka_form_round_trip():
    for _ in range(50):
        u = uuid.uuid4()
        text = protocol.uuid_to_kafka(u)
        assert len(text) == 22 and "=" not in text
        assert protocol.uuid_from_kafka(text) == u
    assert protocol.uuid_from_kafka(str(u)) == u
    # Kafka's Uuid.toString() of (mostSig=1, leastSig=2)
    assert protocol.uuid_to_kafka(uuid.UUID(int=(1 << 64) | 2)) == "AAAAAAAAAAEAAAAAAAAAAg"
    with pytest.raises(ValueError, match="topic_id"):
        protocol.uuid_from_kafka("not-an-id", "topic_id")


@pytest.mark.parametrize("custom", [b"\x01loc", None])
def test_metadata_round_trip(custom):
    m = make_metadata(custom)
    encoded = protocol.encode_metadata(m)
    assert encoded["segment_leader_epochs"] == [[0, 100], [3, 150]]
    assert encoded["state"] == "COPY_SEGMENT_STARTED"
    decoded = protocol.decode_metadata(encoded)
    assert decoded == m


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda o: o.pop("start_offset"), "missing 'start_offset'"),
        (lambda o: o.__setitem__("partition", "3"), "'partition' has type str"),
        (lambda o: o.__setitem__("partition", True), "'partition' has type bool"),
        (lambda o: o.__setitem__("segment_id", "zz"), "segment_id"),
        (lambda o: o.__setitem__("segment_leader_epochs", [[1]]), "segment_leader_epochs"),
        (lambda o: o.__setitem__("custom_metadata", "!!"), "custom_metadata"),
        (lambda o: o.__setitem__("state", "NOPE"), "state"),
    ],
)
def test_metadata_decode_names_the_bad_key(mutate, message):
    obj = protocol.encode_metadata(make_metadata())
    mutate(obj)
    with pytest.raises(ValueError, match=message):
        protocol.decode_metadata(obj)


def test_metadata_decoder_remembers_equal_objects_only():
    decoder = protocol.MetadataDecoder(max_entries=2)
    obj = protocol.encode_metadata(make_metadata(b"\x01loc"))
    first = decoder.decode(obj)
    assert first == protocol.decode_metadata(obj)
    assert decoder.decode(dict(obj)) is first  # an equal object: the same (immutable) answer
    for key, value in [("custom_metadata", None), ("state", "COPY_SEGMENT_FINISHED"), ("end_offset", 7777),
                       ("segment_leader_epochs", [[0, 100]])]:  # fmt: skip
        changed = decoder.decode({**obj, key: value})
        assert changed != first and changed == protocol.decode_metadata({**obj, key: value}), key
    # malformed objects are refused as by decode_metadata, even when a valid equal-looking one is cached
    assert decoder.decode({**obj, "partition": 1}).remote_log_segment_id.topic_id_partition.partition == 1
    for bad in ({**obj, "partition": True}, {**obj, "partition": 1.0}, {**obj, "partition": [1]}, "x"):
        with pytest.raises(ValueError):
            decoder.decode(bad)
    assert len(decoder._cache) <= 2  # bounded


def test_segment_data_round_trip(tmp_path: Path):
    data = LogSegmentData(
        tmp_path / "0.log",
        tmp_path / "0.index",
        tmp_path / "0.timeindex",
        None,
        tmp_path / "0.snapshot",
        b"0\n1\n0 0\n",
    )
    paths, payload = protocol.encode_segment_data(data)
    assert payload == b"0\n1\n0 0\n"
    assert protocol.decode_segment_data(paths, payload) == data
    paths["offset_index"] = "relative/0.index"
    with pytest.raises(ValueError, match="offset_index.*not an absolute path"):
        protocol.decode_segment_data(paths, payload)


def test_log_config_and_index_type():
    lc = LogConfig({"retention.ms": "1000", "unchecked.rsm.bucket": "b"})
    enc = protocol.encode_log_config(lc)
    assert enc == {"retention.ms": "1000", "unchecked.rsm.bucket": "b"}
    assert protocol.decode_log_config(enc) == lc
    assert protocol.decode_log_config(None) is None
    with pytest.raises(ValueError, match="log_config"):
        protocol.decode_log_config({"a": 1})
    assert protocol.decode_index_type("TIMESTAMP") is IndexType.TIMESTAMP
    with pytest.raises(ValueError, match="unknown index type"):
        protocol.decode_index_type("BLOOM")


def test_error_mapping_both_ways():
    assert protocol.error_code_for(RemoteResourceNotFoundException("x")) == ErrorCode.RESOURCE_NOT_FOUND
    assert protocol.error_code_for(RemoteStorageException("x")) == ErrorCode.STORAGE
    assert protocol.error_code_for(ValueError("x")) == ErrorCode.INVALID_REQUEST
    assert protocol.error_code_for(RuntimeError("x")) == ErrorCode.INTERNAL
    nf = protocol.exception_for("RESOURCE_NOT_FOUND", "gone")
    assert type(nf) is RemoteResourceNotFoundException and str(nf) == "gone"
    for code in ("STORAGE", "INTERNAL", "SHUTTING_DOWN", "SOMETHING_NEW"):
        exc = protocol.exception_for(code, "m")
        assert type(exc) is RemoteStorageException and code in str(exc)
