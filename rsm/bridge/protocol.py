"""Wire protocol between the JVM plugin (or any client) and the bridge process.

Why a custom framed protocol over a Unix domain socket: the broker and the bridge share one machine, so
segment files travel by path (never through the socket) and only metadata, small index files and fetched
byte ranges cross it.  Frames are length-prefixed so either side can read them without parsing JSON
first, and every frame carries the request id so one connection serves many requests in turn and a
client can cancel a streamed answer midway.  See ``PROTOCOL.md`` next to this file for the full
specification; this module is its reference implementation.

Frame layout (all integers big-endian)::

    u32 length          number of bytes after this field (type .. end of payload)
    u8  type            FrameType
    u32 request_id      0 for HELLO, otherwise chosen by the client, echoed by the server
    u32 header_length   length of the JSON header that follows
    ...                 header: a UTF-8 JSON object (header_length bytes; 0 means {})
    ...                 payload: raw bytes (length - 9 - header_length bytes)
"""

from __future__ import annotations

import enum
import mmap
import socket
import struct
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, field
from typing import Any

import orjson

from rsm.bridge.values import (  # noqa: F401 - re-exported: clients, the server and tests use protocol.*
    MetadataDecoder,
    _b64,
    _unb64,
    decode_index_type,
    decode_log_config,
    decode_metadata,
    decode_segment_data,
    encode_log_config,
    encode_metadata,
    encode_segment_data,
    uuid_from_kafka,
    uuid_to_kafka,
)

PROTOCOL_VERSION = 1
SUPPORTED_VERSIONS = (1,)
MAGIC = "rsm-bridge"

PREFIX = struct.Struct(">IBII")  # length, type, request id, header length
PREFIX_SIZE = PREFIX.size  # 13
_U32 = struct.Struct(">I")
_AFTER_LENGTH = PREFIX_SIZE - 4  # type + request id + header length = 9

MAX_HEADER_BYTES = 4 * 1024 * 1024
MAX_FRAME_BYTES = 16 * 1024 * 1024 + MAX_HEADER_BYTES
# a connection's first frame is a HELLO (magic, versions, client name, capabilities: well under 1 KiB);
# a larger length before the handshake is refused, so a stranger's claim costs nothing
HANDSHAKE_MAX_FRAME_BYTES = 64 * 1024
DEFAULT_DATA_FRAME_BYTES = 256 * 1024
MIN_DATA_FRAME_BYTES = 64 * 1024
MAX_DATA_FRAME_BYTES = 1024 * 1024


class FrameType(enum.IntEnum):
    """What a frame means; the closed set of frame kinds of protocol version 1."""

    HELLO = 1  # handshake, both directions, request id 0
    REQUEST = 2  # client -> server: header {"op": ..., ...}
    RESPONSE = 3  # server -> client: the answer of a unary operation
    DATA = 4  # server -> client: one piece of a streamed answer (payload only)
    END = 5  # server -> client: a streamed answer is complete (or was cancelled)
    ERROR = 6  # server -> client: the request failed; terminal for that request id
    CANCEL = 7  # client -> server: stop streaming the answer of request_id
    # capability "shm" (see PROTOCOL.md, "Shared-memory transport"); sent only when both sides offered it
    SHM_DATA = 8  # server -> client: payload u32 slot, u32 length: that many stream bytes are in the slot
    SHM_RELEASE = 9  # client -> server: payload u32 count: the oldest ``count`` unreleased slots are free
    ARENA_DATA = 10  # server -> client: payload u64 offset, u32 length: stream bytes at that arena offset


CAP_SHM = "shm"
SHM_DATA_PAYLOAD = struct.Struct(">II")  # slot, length
SHM_RELEASE_PAYLOAD = struct.Struct(">I")  # count
ARENA_DATA_PAYLOAD = struct.Struct(">QI")  # offset, length


class ErrorCode(enum.StrEnum):
    """Error codes carried in ERROR frames; the client maps them to Kafka's exception types."""

    RESOURCE_NOT_FOUND = "RESOURCE_NOT_FOUND"  # -> RemoteResourceNotFoundException
    STORAGE = "STORAGE"  # -> RemoteStorageException
    INVALID_REQUEST = "INVALID_REQUEST"  # malformed header/arguments -> RemoteStorageException
    UNSUPPORTED_OPERATION = "UNSUPPORTED_OPERATION"  # op unknown to this server
    VERSION_MISMATCH = "VERSION_MISMATCH"  # handshake failed
    SHUTTING_DOWN = "SHUTTING_DOWN"  # server stopping; the call may be retried on a fresh bridge
    BUSY = "BUSY"  # connection refused: the bridge serves bridge.max.connections already; retry later
    POLICY_VIOLATION = "POLICY_VIOLATION"  # the topic policy refused the request -> PolicyViolationException
    INTERNAL = "INTERNAL"  # anything else -> RemoteStorageException


class Op(enum.StrEnum):
    """Operations of protocol version 1 (the server advertises the ones it serves in its HELLO)."""

    HEALTH = "health"
    CONFIGURE_INFO = "configure_info"
    COPY_LOG_SEGMENT_DATA = "copy_log_segment_data"
    FETCH_LOG_SEGMENT = "fetch_log_segment"
    FETCH_INDEX = "fetch_index"
    DELETE_LOG_SEGMENT_DATA = "delete_log_segment_data"
    METRICS = "metrics"  # a snapshot of rsm.metrics, polled by the JVM plugin for the broker's JMX
    # The topic policy classes of the JVM plugin (CreateTopicPolicy / AlterConfigPolicy): rsm.bridge.policy_ops
    VALIDATE_CREATE_TOPIC = "validate_create_topic"
    VALIDATE_ALTER_CONFIG = "validate_alter_config"


STREAMED_OPS = frozenset({Op.FETCH_LOG_SEGMENT, Op.FETCH_INDEX})


class ProtocolError(Exception):
    """The peer broke the framing or the message rules; the connection cannot be trusted any more."""


class ConnectionClosed(ProtocolError):
    """The peer closed the connection (cleanly, between frames, or in the middle of one)."""


class FrameTooLarge(ProtocolError):
    """A frame's length field exceeds what the receiver accepts at this point (e.g. before the handshake)."""

    def __init__(self, length: int, limit: int) -> None:
        super().__init__(f"frame of {length} bytes exceeds {limit}")
        self.length = length
        self.limit = limit


class ReceiveTimeout(ProtocolError):
    """No frame began before the deadline (``started`` False: an idle peer), or one that began did not
    complete in time (``started`` True: a slow sender holding a thread)."""

    def __init__(self, message: str, *, started: bool) -> None:
        super().__init__(message)
        self.started = started


class BridgeError(Exception):
    """An ERROR frame received by a client, before it is mapped to an RSM exception."""

    def __init__(self, code: ErrorCode | str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(slots=True)
class Frame:
    """One decoded frame. ``payload`` is a bytes-like object (not copied more than once).

    Not frozen: one is made per frame received, and a frozen dataclass's ``__init__`` sets each field
    through ``object.__setattr__`` (a twentieth of the bridge's own work per fetch)."""

    type: FrameType
    request_id: int
    header: dict[str, Any] = field(default_factory=dict)
    payload: bytes | bytearray | memoryview = b""


# --------------------------------------------------------------------------------------------- framing


def encode_frame_prefix(
    frame_type: FrameType, request_id: int, header: Mapping[str, Any] | None, payload_len: int
) -> bytes:
    """Prefix + JSON header bytes of a frame; the payload is sent after it without being copied."""
    header_bytes = orjson.dumps(header) if header else b""
    if len(header_bytes) > MAX_HEADER_BYTES:
        raise ProtocolError(f"frame header of {len(header_bytes)} bytes exceeds {MAX_HEADER_BYTES}")
    length = _AFTER_LENGTH + len(header_bytes) + payload_len
    if length > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {length} bytes exceeds {MAX_FRAME_BYTES}")
    return PREFIX.pack(length, int(frame_type), request_id, len(header_bytes)) + header_bytes


def encode_frame(
    frame_type: FrameType,
    request_id: int,
    header: Mapping[str, Any] | None = None,
    payload: bytes | bytearray | memoryview = b"",
) -> bytes:
    """A whole frame as one bytes object (tests and small frames)."""
    return encode_frame_prefix(frame_type, request_id, header, len(payload)) + bytes(payload)


def data_frame_length(payload_len: int) -> int:
    """The length field of a DATA frame (no header) carrying ``payload_len`` bytes."""
    length = _AFTER_LENGTH + payload_len
    if length > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {length} bytes exceeds {MAX_FRAME_BYTES}")
    return length


def send_views(
    sock: socket.socket,
    buffers: list[bytes | bytearray | memoryview],
    on_block: Callable[[], AbstractContextManager[object]] | None = None,
) -> None:
    """Write buffers back to back with scatter-gather I/O (``sendmsg``): no concatenation, no copy.

    With ``on_block``, what the socket takes at once is sent without blocking and only the rest is sent
    inside ``on_block()`` (the bridge lends its work permit while a slow reader holds it up).
    """
    views = [memoryview(b).cast("B") for b in buffers if len(b)]
    if on_block is not None:
        with suppress(BlockingIOError, InterruptedError):
            _consume(views, sock.sendmsg(views, [], socket.MSG_DONTWAIT))
        if not views:
            return
        with on_block():
            send_views(sock, views)
        return
    while views:
        _consume(views, sock.sendmsg(views))


def _consume(views: list[memoryview], sent: int) -> None:
    """Drop ``sent`` bytes from the front of ``views``."""
    while sent and views:
        if sent >= len(views[0]):
            sent -= len(views[0])
            views.pop(0)
        else:
            views[0] = views[0][sent:]
            sent = 0


def send_frame(
    sock: socket.socket,
    frame_type: FrameType,
    request_id: int,
    header: Mapping[str, Any] | None = None,
    payload: bytes | bytearray | memoryview = b"",
) -> None:
    """Write one frame; large payloads go out with scatter-gather I/O instead of a concatenation."""
    prefix = encode_frame_prefix(frame_type, request_id, header, len(payload))
    if len(payload) < 16 * 1024:
        sock.sendall(prefix + bytes(payload))
        return
    send_views(sock, [prefix, payload])


def _recv_exact_into(sock: socket.socket, view: memoryview, what: str) -> None:
    got = 0
    total = len(view)
    while got < total:
        n = sock.recv_into(view[got:], total - got)
        if n == 0:
            raise ConnectionClosed(f"connection closed after {got} of {total} bytes of {what}")
        got += n


@dataclass(frozen=True)
class FrameHead:
    """A frame whose header is read but whose payload (``payload_length`` bytes) is still in the socket.

    Streaming readers use it to receive DATA payloads straight into the caller's buffer.
    """

    type: FrameType
    request_id: int
    header: dict[str, Any]
    payload_length: int


def recv_frame_head(sock: socket.socket) -> FrameHead:
    """Read a frame's prefix and JSON header, leaving its payload unread."""
    prefix = bytearray(PREFIX_SIZE)
    view = memoryview(prefix)
    first = sock.recv_into(view, PREFIX_SIZE)
    if first == 0:
        raise ConnectionClosed("connection closed between frames")
    if first < PREFIX_SIZE:
        _recv_exact_into(sock, view[first:], "frame prefix")
    length, type_code, request_id, header_length = PREFIX.unpack(prefix)
    frame_type = _check_prefix(length, type_code, request_id, header_length)
    header: dict[str, Any] = {}
    if header_length:
        raw = bytearray(header_length)
        _recv_exact_into(sock, memoryview(raw), f"{frame_type.name} frame header")
        header = _json_header(raw, frame_type, request_id)
    return FrameHead(frame_type, request_id, header, length - _AFTER_LENGTH - header_length)


def _check_prefix(length: int, type_code: int, request_id: int, header_length: int) -> FrameType:
    """The frame's type, once its prefix is known to be well formed (else ProtocolError)."""
    if length < _AFTER_LENGTH or length > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame length {length} outside [{_AFTER_LENGTH}, {MAX_FRAME_BYTES}]")
    if header_length > MAX_HEADER_BYTES or header_length > length - _AFTER_LENGTH:
        raise ProtocolError(f"header length {header_length} does not fit in a frame of {length} bytes")
    try:
        return FrameType(type_code)
    except ValueError:
        raise ProtocolError(f"unknown frame type {type_code} (request {request_id})") from None


def _json_header(
    raw: bytes | bytearray | memoryview, frame_type: FrameType, request_id: int
) -> dict[str, Any]:
    try:
        header = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:  # bad UTF-8 too; and nesting deeper than 1024 levels
        raise ProtocolError(f"{frame_type.name} frame {request_id}: header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ProtocolError(f"{frame_type.name} frame {request_id}: header is not a JSON object")
    return header


def recv_payload(sock: socket.socket, head: FrameHead) -> bytearray:
    """Read the whole payload of a frame whose head was read with recv_frame_head."""
    payload = bytearray(head.payload_length)
    if payload:
        _recv_exact_into(sock, memoryview(payload), f"{head.type.name} frame payload")
    return payload


def recv_frame(sock: socket.socket) -> Frame:
    """Read one frame. Raises ConnectionClosed on EOF and ProtocolError on a malformed frame."""
    head = recv_frame_head(sock)
    return Frame(head.type, head.request_id, head.header, recv_payload(sock, head))


def _parse_head(view: memoryview) -> tuple[FrameType, int, dict[str, Any], int]:
    """Type, request id, header and payload offset of a whole frame held in ``view`` (prefix included)."""
    length, type_code, request_id, header_length = PREFIX.unpack_from(view)
    frame_type = _check_prefix(length, type_code, request_id, header_length)
    header: dict[str, Any] = {}
    if header_length:
        header = _json_header(view[PREFIX_SIZE : PREFIX_SIZE + header_length], frame_type, request_id)
    return frame_type, request_id, header, PREFIX_SIZE + header_length


class FrameReader:
    """Whole frames from a socket through one receive buffer.

    Why: one ``recv`` brings in every frame the peer has written so far, so a frame costs a system call
    (and, in a threaded server, a GIL hand-off) only when none is buffered. A client that has read what it
    wanted writes its ``SHM_RELEASE`` and ``CANCEL`` together; the bridge takes both with one wake-up.

    Bounded: a frame's length is checked against ``max_frame_bytes`` (the server lowers it before the
    handshake) and a frame larger than the buffer grows its own buffer only as its bytes arrive, never to
    what the length field claims. With deadlines (``recv_frame``'s ``idle_until`` and ``within``) and a
    receive timeout on the socket (``SO_RCVTIMEO``, the "tick" at which deadlines are checked; no extra
    system call on the hot path), neither an idle peer nor a slow sender holds the reader forever.
    """

    def __init__(
        self, sock: socket.socket, buffer_bytes: int = 64 * 1024, max_frame_bytes: int = MAX_FRAME_BYTES
    ) -> None:
        self.sock = sock
        self.max_frame_bytes = max_frame_bytes  # the length field's limit (at most MAX_FRAME_BYTES)
        self._buf = bytearray(buffer_bytes)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0

    def _frame_bytes(self) -> int:
        """Size of the frame at the head of the buffer (its 4-byte length must be buffered), checked."""
        (length,) = _U32.unpack_from(self._buf, self._start)
        if length > self.max_frame_bytes:
            raise FrameTooLarge(length, self.max_frame_bytes)
        if length < _AFTER_LENGTH or length > MAX_FRAME_BYTES:
            raise ProtocolError(f"frame length {length} outside [{_AFTER_LENGTH}, {MAX_FRAME_BYTES}]")
        return 4 + length

    def _complete(self) -> int:
        """Size of the whole frame at the head of the buffer when all of it is buffered, else 0."""
        have = self._end - self._start
        if have < 4:
            return 0
        total = self._frame_bytes()
        return total if have >= total else 0

    def buffered(self) -> bool:
        """True when a whole frame is waiting in the buffer (reading it will not block)."""
        return self._complete() > 0

    def _fill(self, flags: int = 0) -> bool:
        """Receive what has arrived into the free end of the buffer; False when nothing has (non-blocking,
        or the socket's receive timeout passed)."""
        if self._start == self._end:
            self._start = self._end = 0
        elif self._end == len(self._buf) or self._start > len(self._buf) // 2:
            n = self._end - self._start
            self._buf[:n] = self._view[self._start : self._end]
            self._start, self._end = 0, n
        try:
            got = self.sock.recv_into(self._view[self._end :], 0, flags)
        except (BlockingIOError, InterruptedError, TimeoutError):
            return False
        if got == 0:
            raise ConnectionClosed(
                "connection closed between frames"
                if self._start == self._end
                else f"connection closed in the middle of a frame ({self._end - self._start} bytes of it)"
            )
        self._end += got
        return True

    def _large_frame_started(self) -> bool:
        """True when the frame at the head is larger than the buffer (read by ``recv_frame`` on its own)."""
        return self._end - self._start >= 4 and self._frame_bytes() > len(self._buf)

    def poll(self) -> bool:
        """Without blocking: True when a frame can be read now (a large one: has begun; ConnectionClosed on
        EOF)."""
        if self.buffered() or self._large_frame_started():
            return True
        while self._fill(socket.MSG_DONTWAIT):
            if self.buffered() or self._large_frame_started():
                return True
        return False

    def recv_frame(self, idle_until: float | None = None, within: float | None = None) -> Frame:
        """The next frame, blocking until all of it has arrived.

        ``idle_until`` (a ``time.monotonic()`` instant): ReceiveTimeout(started=False) when no byte of
        the frame has arrived by then. ``within`` (seconds): ReceiveTimeout(started=True) when the frame
        is not complete that long after its first byte was seen. Both are checked when the socket's
        receive timeout passes (or bytes arrive), so they need one on the socket to fire while it is silent.
        """
        total = self._complete()
        if total:
            view = self._view[self._start : self._start + total]
            self._start += total
        else:
            view = self._await_frame(idle_until, within)
            if view.obj is not self._buf:  # a large frame in memory of its own: its payload is not copied
                frame_type, request_id, header, payload_at = _parse_head(view)
                return Frame(frame_type, request_id, header, view[payload_at:])
        frame_type, request_id, header, payload_at = _parse_head(view)
        return Frame(frame_type, request_id, header, bytearray(view[payload_at:]))

    def _await_frame(self, idle_until: float | None, within: float | None) -> memoryview:
        """The slow path of ``recv_frame``: receive until the frame at the head is whole."""
        due: float | None = None
        while True:
            have = self._end - self._start
            if have:
                if due is None:
                    due = time.monotonic() + within if within is not None else float("inf")
                if have >= 4:
                    total = self._frame_bytes()
                    if total > len(self._buf):
                        return self._receive_large(total, due)
                    if have >= total:
                        view = self._view[self._start : self._start + total]
                        self._start += total
                        return view
                if time.monotonic() > due:
                    raise self._too_slow(have, total if have >= 4 else None)
            idle = not self._fill() and self._start == self._end
            if idle and idle_until is not None and time.monotonic() >= idle_until:
                raise ReceiveTimeout("no frame began before the deadline", started=False)

    def _receive_large(self, total: int, due: float) -> memoryview:
        """A frame larger than the buffer, received into anonymous memory of its own that grows (doubling)
        with what arrives: a peer claiming a large frame and sending little costs what it sent, and the
        memory goes back to the system as soon as the frame is dropped (the heap would keep it)."""
        have = self._end - self._start
        # private: a shared anonymous mapping cannot grow (its pages past the old size raise SIGBUS)
        buf = mmap.mmap(-1, _pages(min(total, max(have, 4 * len(self._buf)))), flags=mmap.MAP_PRIVATE)
        buf[:have] = self._view[self._start : self._end]
        self._start = self._end = 0
        while have < total:
            if have == len(buf):
                buf.resize(_pages(min(total, 2 * len(buf))))
            with memoryview(buf)[have : min(len(buf), total)] as free:
                try:
                    got = self.sock.recv_into(free)
                except (BlockingIOError, InterruptedError, TimeoutError):
                    got = None
            if got == 0:
                raise ConnectionClosed(f"connection closed after {have} of {total} bytes of a frame")
            have += got or 0
            if have < total and time.monotonic() > due:
                raise self._too_slow(have, total)
        return memoryview(buf)[:total]

    @staticmethod
    def _too_slow(have: int, total: int | None) -> ReceiveTimeout:
        of = f"{have} of {total}" if total is not None else f"{have}"
        return ReceiveTimeout(f"{of} bytes of the frame arrived", started=True)


def _pages(n: int) -> int:
    """``n`` rounded up to whole pages."""
    return -(-n // mmap.PAGESIZE) * mmap.PAGESIZE


# ------------------------------------------------------------------------------------------ handshake


def client_hello(client_name: str, capabilities: list[str] | None = None) -> dict[str, Any]:
    """The header a client sends in its HELLO frame (``capabilities``: optional features it supports)."""
    hello: dict[str, Any] = {"magic": MAGIC, "versions": list(SUPPORTED_VERSIONS), "client": client_name}
    if capabilities:
        hello["capabilities"] = list(capabilities)
    return hello


def negotiate_version(hello: Mapping[str, Any]) -> int:
    """Pick the highest version both sides speak, or raise BridgeError(VERSION_MISMATCH)."""
    if hello.get("magic") != MAGIC:
        raise BridgeError(ErrorCode.VERSION_MISMATCH, f"bad magic {hello.get('magic')!r}, want {MAGIC!r}")
    offered = hello.get("versions")
    if not isinstance(offered, list):
        raise BridgeError(ErrorCode.VERSION_MISMATCH, "HELLO has no 'versions' list")
    common = set(SUPPORTED_VERSIONS) & {v for v in offered if isinstance(v, int)}
    if not common:
        raise BridgeError(
            ErrorCode.VERSION_MISMATCH, f"client speaks {offered}, server speaks {list(SUPPORTED_VERSIONS)}"
        )
    return max(common)


def error_code_for(exc: BaseException) -> ErrorCode:
    """Map an exception raised by the RSM (or by request decoding) to an ERROR frame code."""
    from rsm import RemoteResourceNotFoundException, RemoteStorageException
    from rsm.policy.api import PolicyViolationException

    if isinstance(exc, PolicyViolationException):
        return ErrorCode.POLICY_VIOLATION
    if isinstance(exc, RemoteResourceNotFoundException):
        return ErrorCode.RESOURCE_NOT_FOUND
    if isinstance(exc, RemoteStorageException):
        return ErrorCode.STORAGE
    if isinstance(exc, ValueError | KeyError | TypeError):
        return ErrorCode.INVALID_REQUEST
    return ErrorCode.INTERNAL


def exception_for(code: str, message: str) -> Exception:
    """Map an ERROR frame back to the RSM exception a Python client raises."""
    from rsm import RemoteResourceNotFoundException, RemoteStorageException
    from rsm.policy.api import PolicyViolationException

    if code == ErrorCode.RESOURCE_NOT_FOUND:
        return RemoteResourceNotFoundException(message)
    if code == ErrorCode.POLICY_VIOLATION:
        return PolicyViolationException(message)
    return RemoteStorageException(f"bridge error {code}: {message}")
