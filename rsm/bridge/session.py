"""One connection's session with the bridge: the handshake, then its frames until it ends.

Apart from `rsm.bridge.server` (which listens, admits connections, dispatches requests and shuts down)
because a session is the part that speaks to one client: HELLO within the handshake timeout, the version and
capabilities agreed (a shared-memory ring for fetch answers, the chunk arena), then REQUEST frames handed to
the server one at a time, a ring's memory given back while the client is idle, and the connection closed
after `bridge.idle.timeout.ms` without a frame, a frame not completed in time, or a protocol error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from typing import Any, Protocol

from rsm.bridge import protocol, shm, streaming
from rsm.bridge.admission import Limits, RateLimitedLog
from rsm.bridge.connection import Connection
from rsm.bridge.protocol import (
    BridgeError,
    ConnectionClosed,
    ErrorCode,
    FrameTooLarge,
    FrameType,
    ProtocolError,
    ReceiveTimeout,
)

log = logging.getLogger("rsm.bridge.server")  # the bridge's log lines keep their logger

SERVER_NAME = "rsm-bridge-python/0.1.0"


class SessionHost(Protocol):
    """What a session uses of the server that admitted its connection (`rsm.bridge.server.BridgeServer`)."""

    ops: list[str]
    frame_bytes: int
    limits: Limits
    warnings: RateLimitedLog
    shm_enabled: bool
    shm_dir: Any
    shm_slots: int
    shm_slot_bytes: int
    arena: shm.ChunkArena | None
    stopping: threading.Event

    def dispatch(self, conn: Connection, frame: protocol.Frame) -> None: ...

    def request_ended(self) -> None: ...

    def forget(self, conn: Connection) -> None: ...

    def send_error(self, conn: Connection, request_id: int, code: ErrorCode | str, message: str) -> None: ...


class ConnectionSession:
    """Serves one admitted connection (`run`, on the connection's own thread)."""

    def __init__(self, server: SessionHost, conn: Connection) -> None:
        self.server = server
        self.conn = conn

    def run(self) -> None:
        """Serve the connection until it ends: the handshake, then request after request."""
        conn, server = self.conn, self.server
        sock = conn.sock
        try:
            hello = self._receive_hello()
            if hello is None:
                return
            if hello.type != FrameType.HELLO:
                server.send_error(
                    conn, hello.request_id, ErrorCode.VERSION_MISMATCH, "first frame must be HELLO"
                )
                return
            try:
                version = protocol.negotiate_version(hello.header)
            except BridgeError as exc:
                server.send_error(conn, 0, exc.code, exc.message)
                return
            protocol.send_frame(sock, FrameType.HELLO, 0, self._hello_answer(hello, version))
            conn.reader.max_frame_bytes = protocol.MAX_FRAME_BYTES
            while True:
                frame = self._next_frame()
                if frame is None:
                    return
                if conn.ring is not None and not conn.ring.unlinked:
                    conn.ring.unlink()  # the client mapped it (or gave up) before sending anything else
                if frame.type == FrameType.CANCEL:
                    continue  # a late cancel of a stream that had already ended
                if frame.type == FrameType.SHM_RELEASE:
                    streaming.on_release(conn, frame)
                    continue
                if frame.type != FrameType.REQUEST:
                    server.send_error(
                        conn,
                        frame.request_id,
                        ErrorCode.INVALID_REQUEST,
                        f"unexpected {frame.type.name} frame",
                    )
                    return
                with conn.lock:
                    conn.busy = True
                try:
                    server.dispatch(conn, frame)
                finally:
                    with conn.lock:
                        conn.busy = False
                    server.request_ended()
                if server.stopping.is_set():
                    return
        except ConnectionClosed:
            pass
        except ReceiveTimeout as exc:  # a frame begun and not finished in time (idle ones end quietly)
            server.warnings.warning(
                "slow",
                "closing the connection of %s: a frame not complete within %.1f s (bridge.read.timeout.ms; %s)",
                conn.peer,
                server.limits.read_timeout_s,
                exc,
            )
        except ProtocolError as exc:
            server.warnings.warning("protocol", "protocol error from %s: %s", conn.peer, exc)
        except OSError as exc:
            if not conn.closed:
                log.debug("connection %s ended: %s", conn.peer, exc)
        finally:
            conn.closed = True
            with contextlib.suppress(OSError):
                sock.close()
            conn.pieces.clear()  # the client is gone: the arena blocks it was reading may be reused
            if conn.ring is not None:
                conn.ring.close()
            server.forget(conn)

    def _hello_answer(self, hello: protocol.Frame, version: int) -> dict[str, Any]:
        """The server's HELLO: its version, limits and operations, and a shared-memory ring (and the chunk
        arena) when the client offered the capability and one can be made."""
        conn, server = self.conn, self.server
        conn.peer = str(hello.header.get("client", conn.peer))
        answer: dict[str, Any] = {
            "magic": protocol.MAGIC,
            "version": version,
            "server": SERVER_NAME,
            "ops": server.ops,
            "max_frame_bytes": protocol.MAX_FRAME_BYTES,
            "data_frame_bytes": server.frame_bytes,
            "pid": os.getpid(),
            # a client pooling connections retires idle ones before this (0: never closed when idle)
            "idle_timeout_ms": round(server.limits.idle_timeout_s * 1000),
        }
        offered = hello.header.get("capabilities")
        if server.shm_enabled and isinstance(offered, list) and protocol.CAP_SHM in offered:
            try:
                conn.ring = shm.ShmRing.create(server.shm_dir, server.shm_slots, server.shm_slot_bytes)
            except (OSError, ValueError) as exc:
                log.warning("no shared-memory ring for %s (socket data frames instead): %s", conn.peer, exc)
            if conn.ring is not None:
                answer["capabilities"] = [protocol.CAP_SHM]
                answer["shm"] = conn.ring.describe()
                if server.arena is not None:
                    answer["arena"] = server.arena.describe()
        return answer

    def _receive_hello(self) -> protocol.Frame | None:
        """The connection's first frame, within ``bridge.handshake.timeout.ms`` of its accept and at most
        ``HANDSHAKE_MAX_FRAME_BYTES``; None (after one rate-limited warning) when it is not."""
        conn, server = self.conn, self.server
        timeout = server.limits.handshake_timeout_s
        try:
            return conn.reader.recv_frame(idle_until=conn.accepted + timeout, within=timeout)
        except FrameTooLarge as exc:
            message = f"frame of {exc.length} bytes before the handshake (a HELLO is at most {exc.limit})"
            server.warnings.warning("hello.size", "closing the connection of %s: %s", conn.peer, message)
            with contextlib.suppress(OSError):
                server.send_error(conn, 0, ErrorCode.INVALID_REQUEST, message)
        except ReceiveTimeout:
            server.warnings.warning(
                "hello.time",
                "closing the connection of %s: no HELLO within %.1f s (bridge.handshake.timeout.ms)",
                conn.peer,
                timeout,
            )
        return None

    def _next_frame(self) -> protocol.Frame | None:
        """The connection's next frame, or None when it stayed idle for ``bridge.idle.timeout.ms``.

        A frame that has begun must complete within ``bridge.read.timeout.ms`` (ReceiveTimeout). A ring
        idle for ``bridge.shm.idle.release.ms`` gives its free slots' memory back meanwhile.
        """
        conn = self.conn
        reader, limits = conn.reader, self.server.limits
        if reader.buffered():
            return reader.recv_frame()
        now = time.monotonic()
        idle_until = now + limits.idle_timeout_s if limits.idle_timeout_s else None
        ring = conn.ring
        if ring is not None and ring.reserved and limits.shm_idle_release_s:
            release_at = now + limits.shm_idle_release_s
            if idle_until is None or release_at < idle_until:
                try:
                    return reader.recv_frame(release_at, limits.read_timeout_s)
                except ReceiveTimeout as exc:
                    if exc.started:
                        raise
                held = sum(1 for _, views in conn.pieces if views is None)  # slots the client holds
                given = ring.give_back(held)
                log.debug("%s idle: %d bytes of its ring given back", conn.peer, given)
        try:
            return reader.recv_frame(idle_until, limits.read_timeout_s)
        except ReceiveTimeout as exc:
            if exc.started:
                raise
        log.info(
            "closing the idle connection of %s after %.0f s (bridge.idle.timeout.ms)",
            conn.peer,
            limits.idle_timeout_s,
        )
        return None
