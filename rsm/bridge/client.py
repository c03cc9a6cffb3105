"""A Python client of the bridge protocol, shaped like a RemoteStorageManager.

Why it exists: tests and the benchmark drive the bridge exactly as the JVM plugin does (pooled
connections, one request at a time per connection, streamed fetches cancelled on close), and tools can
talk to a running bridge without a broker.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import queue
import socket
import threading
import time
from pathlib import Path
from typing import Any

from rsm.bridge import protocol, shm
from rsm.bridge.protocol import BridgeError, ConnectionClosed, ErrorCode, FrameType, Op, ProtocolError

_CLIENT_NAME = "rsm-bridge-python-client/0.1.0"
_MAX_DRAIN_BYTES = 8 * 1024 * 1024


class BridgeConnection:
    """One handshaken connection; carries one request at a time."""

    def __init__(self, socket_path: Path, timeout: float | None = 60.0, transport: str = "socket") -> None:
        if transport not in ("socket", "shm"):
            raise ValueError(f"transport={transport!r}: expected 'socket' or 'shm'")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.ring: shm.ClientRing | None = None
        caps = [protocol.CAP_SHM] if transport == "shm" else None
        try:
            self.sock.connect(str(socket_path))
            protocol.send_frame(self.sock, FrameType.HELLO, 0, protocol.client_hello(_CLIENT_NAME, caps))
            hello = protocol.recv_frame(self.sock)
        except BaseException:
            self.sock.close()
            raise
        if hello.type == FrameType.ERROR:
            self.sock.close()
            raise BridgeError(hello.header.get("code", ErrorCode.INTERNAL), hello.header.get("message", ""))
        if hello.type != FrameType.HELLO:
            self.sock.close()
            raise ProtocolError(f"expected HELLO, got {hello.type.name}")
        self.server_hello = hello.header
        self.version: int = hello.header.get("version", 0)
        self.broken = False
        # pooled and idle this long, the connection is dropped rather than reused: half the bridge's idle
        # timeout, so the bridge never closes it just as a call picks it up (0: never)
        idle_ms = hello.header.get("idle_timeout_ms")
        self.retire_after_s = idle_ms / 2000 if isinstance(idle_ms, int | float) and idle_ms > 0 else 0.0
        self.idle_since = time.monotonic()
        ring = hello.header.get("shm")
        if caps and isinstance(ring, dict) and protocol.CAP_SHM in hello.header.get("capabilities", []):
            try:
                self.ring = shm.ClientRing(Path(ring["path"]), int(ring["slots"]), int(ring["slot_bytes"]))
            except (OSError, ValueError, KeyError, TypeError):
                self.ring = None  # fetches use socket data frames
            try:
                # "mapped": the bridge removes the file's name at this (any) first frame
                self.release_slots(0)
            except OSError:
                self.close()
                raise

    def release_slots(self, count: int) -> None:
        """Send SHM_RELEASE: the ``count`` oldest slots this connection holds are free again."""
        protocol.send_frame(
            self.sock, FrameType.SHM_RELEASE, 0, None, protocol.SHM_RELEASE_PAYLOAD.pack(count)
        )

    def is_stale(self) -> bool:
        """True when the bridge closed this idle connection (it died or restarted)."""
        if self.broken:
            return True
        timeout = self.sock.gettimeout()
        self.sock.settimeout(0.0)
        try:
            self.sock.recv(1, socket.MSG_PEEK)  # b"": closed by the bridge; bytes: out of step
            return True
        except BlockingIOError:
            return False
        except OSError:
            return True
        finally:
            with contextlib.suppress(OSError):
                self.sock.settimeout(timeout)

    def close(self) -> None:
        self.broken = True
        with contextlib.suppress(OSError):
            self.sock.close()
        if self.ring is not None:
            self.ring.close()
            self.ring = None


class BridgeClient:
    """Pooled client: ``copy_log_segment_data``, ``fetch_log_segment`` ... as RemoteStorageManager has."""

    def __init__(
        self, socket_path: Path, pool_size: int = 16, timeout: float | None = 60.0, transport: str = "socket"
    ) -> None:
        """``transport``: "shm" asks the bridge for shared-memory rings (fetch answers), "socket" not."""
        if transport not in ("socket", "shm"):
            raise ValueError(f"transport={transport!r}: expected 'socket' or 'shm'")
        self.socket_path = Path(socket_path)
        self.timeout = timeout
        self.transport = transport
        self._idle: queue.LifoQueue[BridgeConnection] = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(pool_size)
        self._ids = itertools.count(1)
        self._ids_lock = threading.Lock()

    # -- pool ---------------------------------------------------------------------------------------

    def _next_id(self) -> int:
        with self._ids_lock:
            return next(self._ids) & 0xFFFFFFFF or next(self._ids)

    def _acquire(self) -> BridgeConnection:
        self._slots.acquire()
        try:
            while True:
                try:
                    conn = self._idle.get_nowait()
                except queue.Empty:
                    return BridgeConnection(self.socket_path, self.timeout, self.transport)
                retire = conn.retire_after_s and time.monotonic() - conn.idle_since > conn.retire_after_s
                if not retire and not conn.is_stale():
                    return conn
                conn.close()
        except BaseException:
            self._slots.release()
            raise

    def _release(self, conn: BridgeConnection) -> None:
        if not conn.broken:
            conn.idle_since = time.monotonic()
            self._idle.put(conn)
        self._slots.release()

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return

    # -- calls --------------------------------------------------------------------------------------

    def call(self, op: str, header: dict[str, Any] | None = None, payload: bytes = b"") -> dict[str, Any]:
        """One unary request; ERROR frames raise the mapped RSM exception."""
        conn = self._acquire()
        try:
            rid = self._next_id()
            protocol.send_frame(conn.sock, FrameType.REQUEST, rid, {"op": op, **(header or {})}, payload)
            frame = protocol.recv_frame(conn.sock)
            if frame.request_id != rid:
                raise ProtocolError(f"answer to request {frame.request_id}, expected {rid}")
            if frame.type == FrameType.ERROR:
                raise protocol.exception_for(frame.header.get("code", ""), frame.header.get("message", ""))
            if frame.type != FrameType.RESPONSE:
                raise ProtocolError(f"expected RESPONSE, got {frame.type.name}")
            return frame.header
        except (OSError, ProtocolError) as exc:
            conn.close()
            raise _storage_error(f"bridge connection failed during {op}: {exc}") from exc
        finally:
            self._release(conn)

    def open_stream(self, op: str, header: dict[str, Any]) -> FrameStream:
        conn = self._acquire()
        try:
            rid = self._next_id()
            extra = {"transport": protocol.CAP_SHM} if conn.ring is not None else {}
            protocol.send_frame(conn.sock, FrameType.REQUEST, rid, {"op": op, **header, **extra})
            first = protocol.recv_frame_head(conn.sock)
        except (OSError, ProtocolError) as exc:
            conn.close()
            self._release(conn)
            raise _storage_error(f"bridge connection failed during {op}: {exc}") from exc
        if first.type == FrameType.ERROR:
            try:
                protocol.recv_payload(conn.sock, first)
            except (OSError, ProtocolError):
                conn.close()
            self._release(conn)
            raise protocol.exception_for(first.header.get("code", ""), first.header.get("message", ""))
        try:
            return FrameStream(self, conn, rid, first)
        except (OSError, ProtocolError) as exc:
            conn.close()
            self._release(conn)
            raise _storage_error(f"bridge stream of {op} failed: {exc}") from exc

    def health(self) -> dict[str, Any]:
        return self.call(Op.HEALTH)

    def configure_info(self) -> dict[str, Any]:
        return self.call(Op.CONFIGURE_INFO)

    def metrics(self) -> dict[str, Any]:
        """The bridge's rsm.metrics snapshot (PROTOCOL.md, "metrics")."""
        return self.call(Op.METRICS)

    def copy_log_segment_data(self, metadata: Any, segment_data: Any, log_config: Any = None) -> Any:
        from rsm import CustomMetadata

        paths, epochs = protocol.encode_segment_data(segment_data)
        answer = self.call(
            Op.COPY_LOG_SEGMENT_DATA,
            {
                "metadata": protocol.encode_metadata(metadata),
                "segment_data": paths,
                "log_config": protocol.encode_log_config(log_config),
            },
            epochs,
        )
        raw = answer.get("custom_metadata")
        return None if raw is None else CustomMetadata(protocol._unb64(raw, "custom_metadata"))

    def fetch_log_segment(
        self, metadata: Any, start_position: int, end_position: int | None = None, log_config: Any = None
    ) -> FrameStream:
        return self.open_stream(
            Op.FETCH_LOG_SEGMENT,
            {
                "metadata": protocol.encode_metadata(metadata),
                "start_position": start_position,
                "end_position": end_position,
                "log_config": protocol.encode_log_config(log_config),
            },
        )

    def fetch_index(self, metadata: Any, index_type: Any, log_config: Any = None) -> FrameStream:
        return self.open_stream(
            Op.FETCH_INDEX,
            {
                "metadata": protocol.encode_metadata(metadata),
                "index_type": getattr(index_type, "name", str(index_type)),
                "log_config": protocol.encode_log_config(log_config),
            },
        )

    def delete_log_segment_data(self, metadata: Any, log_config: Any = None) -> None:
        self.call(
            Op.DELETE_LOG_SEGMENT_DATA,
            {
                "metadata": protocol.encode_metadata(metadata),
                "log_config": protocol.encode_log_config(log_config),
            },
        )


def _storage_error(message: str) -> Exception:
    from rsm import RemoteStorageException

    return RemoteStorageException(message)


class FrameStream(io.RawIOBase):
    """A streamed answer read lazily frame by frame; close() before the end sends CANCEL.

    DATA payloads are received straight into the caller's buffer when it is large, and through a small
    scratch buffer for small reads, so bytes are copied once out of the kernel either way.
    """

    _SCRATCH = 64 * 1024

    def __init__(
        self, client: BridgeClient, conn: BridgeConnection, rid: int, first: protocol.FrameHead
    ) -> None:
        super().__init__()
        self._client = client
        self._conn: BridgeConnection | None = conn
        self._rid = rid
        self._remaining = 0  # payload bytes of the current DATA frame still in the socket
        self._scratch = bytearray(self._SCRATCH)
        self._buf = memoryview(b"")
        self._holds_slot = False  # _buf is a view of a ring slot, released once read
        self._done = False
        self.cancelled = False
        self._accept(first)

    def readable(self) -> bool:
        return True

    def _accept(self, head: protocol.FrameHead) -> None:
        if head.request_id != self._rid:
            raise ProtocolError(f"frame for request {head.request_id} while reading {self._rid}")
        if head.type == FrameType.DATA:
            self._remaining = head.payload_length
            return
        assert self._conn is not None
        payload = protocol.recv_payload(self._conn.sock, head)
        if head.type == FrameType.SHM_DATA:
            ring = self._conn.ring
            if ring is None or len(payload) != protocol.SHM_DATA_PAYLOAD.size:
                raise ProtocolError("SHM_DATA frame on a connection without a ring, or malformed")
            slot, length = protocol.SHM_DATA_PAYLOAD.unpack(payload)
            self._buf = ring.slot(slot, length)
            self._holds_slot = True
            if not length:
                self._release_slot()
            return
        if head.type == FrameType.END:
            self._done = True
            self.cancelled = bool(head.header.get("cancelled"))
            self._finish(reuse=True)
        elif head.type == FrameType.ERROR:
            self._done = True
            self._finish(reuse=True)
            error = protocol.exception_for(head.header.get("code", ""), head.header.get("message", ""))
            raise OSError(f"bridge stream failed: {error}")
        else:
            raise ProtocolError(f"unexpected {head.type.name} frame in a stream")

    def _finish(self, reuse: bool) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if not reuse:
            conn.close()
        self._client._release(conn)

    def _release_slot(self) -> None:
        self._holds_slot = False
        self._buf = memoryview(b"")
        assert self._conn is not None
        self._conn.release_slots(1)

    def _fail(self, exc: BaseException) -> OSError:
        self._done = True
        self._finish(reuse=False)
        return OSError(f"bridge connection lost mid-stream: {exc}")

    def readinto(self, b: Any) -> int:
        out = memoryview(b).cast("B")
        if not len(out):
            return 0
        if self._buf:
            n = min(len(out), len(self._buf))
            out[:n] = self._buf[:n]
            self._buf = self._buf[n:]
            if self._holds_slot and not self._buf:
                try:
                    self._release_slot()
                except OSError as exc:
                    raise self._fail(exc) from exc
            return n
        try:
            while not self._remaining:
                if self._done:
                    return 0
                assert self._conn is not None
                self._accept(protocol.recv_frame_head(self._conn.sock))
                if self._buf:
                    return self.readinto(out)
            assert self._conn is not None
            sock = self._conn.sock
            if len(out) >= self._SCRATCH:
                n = sock.recv_into(out, min(len(out), self._remaining))
                if not n:
                    raise ConnectionClosed("EOF inside a DATA frame")
                self._remaining -= n
                return n
            n = sock.recv_into(self._scratch, min(self._SCRATCH, self._remaining))
            if not n:
                raise ConnectionClosed("EOF inside a DATA frame")
            self._remaining -= n
        except (ConnectionClosed, ProtocolError, OSError) as exc:
            if isinstance(exc, OSError) and self._done:
                raise
            raise self._fail(exc) from exc
        self._buf = memoryview(self._scratch)[:n]
        k = min(len(out), n)
        out[:k] = self._buf[:k]
        self._buf = self._buf[k:]
        return k

    def close(self) -> None:
        if not self.closed and self._conn is not None and not self._done:
            self._cancel()
        super().close()

    def _cancel(self) -> None:
        conn = self._conn
        assert conn is not None
        try:
            if self._holds_slot:
                self._release_slot()
            protocol.send_frame(conn.sock, FrameType.CANCEL, self._rid)
            drained = 0
            while not self._done:
                if self._holds_slot:
                    drained += len(self._buf)
                    self._release_slot()
                while self._remaining:
                    n = conn.sock.recv_into(self._scratch, min(self._SCRATCH, self._remaining))
                    if not n:
                        raise ConnectionClosed("EOF while draining")
                    self._remaining -= n
                    drained += n
                if drained > _MAX_DRAIN_BYTES:
                    raise ProtocolError("server kept streaming after CANCEL")
                with contextlib.suppress(OSError):
                    self._accept(protocol.recv_frame_head(conn.sock))
            self._buf = memoryview(b"")
        except (OSError, ProtocolError):
            self._done = True
            self._finish(reuse=False)
