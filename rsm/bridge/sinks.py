"""Where a fetch's pieces go: DATA frames on the socket, or slots of a shared-memory ring (or the chunk
arena) announced by tiny frames. The transport half of ``BridgeServer._stream``, one class per transport.
"""

from __future__ import annotations

import fcntl
import sys
import termios
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from rsm.bridge import protocol, shm
from rsm.bridge.protocol import FrameType
from segment_format.buffers import copy_into

if TYPE_CHECKING:
    from rsm.bridge.server import BridgeServer, _Connection

DRAIN_POLL_S = 0.0002
DRAIN_POLL_MAX_S = 0.004


class Sink:
    """Where a stream's pieces go: the transport half of ``BridgeServer._stream``."""

    def __init__(self, server: BridgeServer, conn: _Connection, rid: int) -> None:
        self.server = server
        self.conn = conn
        self.rid = rid

    def piece_bytes(self, sent: int, mark: int) -> int:
        """Size of the next piece after ``sent`` bytes: pieces end exactly at ``mark`` (the fetch size)."""
        first, full = self.first_piece_bytes(), self.full_piece_bytes()
        return min(first, mark - sent) if sent < mark else full

    def first_piece_bytes(self) -> int:
        raise NotImplementedError

    def full_piece_bytes(self) -> int:
        raise NotImplementedError

    def parts(self, data: list[memoryview]) -> list[Part]:
        """The piece as the transport carries it: itself, or split into parts that fit its units."""
        return [Part(data, None)]

    def await_room(self, part: Part) -> bool:
        """Block until ``part`` may be delivered; False when the server is stopping."""
        raise NotImplementedError

    def deliver(self, part: Part, trailer: bytes = b"") -> int:
        """Hand one piece to the client, then the ``trailer`` frame in the same write; returns its size."""
        raise NotImplementedError

    def await_taken(self, grace_s: float) -> None:
        """Wait until the client has taken everything delivered, then ``grace_s`` for its CANCEL."""
        raise NotImplementedError


class SocketSink(Sink):
    """DATA frames: a blocking ``sendmsg`` is the flow control (read-ahead = the socket buffer)."""

    def __init__(self, server: BridgeServer, conn: _Connection, rid: int) -> None:
        super().__init__(server, conn, rid)
        self._prefix = bytearray(protocol.PREFIX_SIZE)

    def first_piece_bytes(self) -> int:
        return self.server.initial_frame_bytes

    def full_piece_bytes(self) -> int:
        return self.server.frame_bytes

    def await_room(self, part: Part) -> bool:
        return True

    def deliver(self, part: Part, trailer: bytes = b"") -> int:
        data = part.views
        n = sum(len(v) for v in data)
        protocol.PREFIX.pack_into(self._prefix, 0, protocol.data_frame_length(n), FrameType.DATA, self.rid, 0)
        # a client whose socket buffer is full holds the send up: its permit goes to other streams meanwhile
        protocol.send_views(
            self.conn.sock, [self._prefix, *data, trailer], on_block=self.server.permits.waiting
        )
        return n

    def await_taken(self, grace_s: float) -> None:
        """``SIOCOUTQ`` = 0: no event says "the peer read", so poll, backing off (a slow reader costs few
        wake-ups); a client that drained gets ``grace_s`` to send its CANCEL."""
        server, conn = self.server, self.conn
        fd = conn.sock.fileno()
        out = bytearray(4)
        poll = DRAIN_POLL_S
        while not server._stopping.is_set():
            fcntl.ioctl(fd, termios.TIOCOUTQ, out)  # bytes sent that the client has not read yet
            drained = not int.from_bytes(out, sys.byteorder)
            if drained and not grace_s:
                return
            if server._next_frame_within(conn, grace_s if drained else poll):
                server._check_cancel(conn, self.rid)
            elif drained:
                return
            poll = min(poll * 2, DRAIN_POLL_MAX_S)


class ShmSink(Sink):
    """Ring slots: each piece is copied once into the next free slot and announced by SHM_DATA.

    The first MiB goes as one piece when a slot holds it (one copy, one announcement, one release per
    Kafka fetch); read-ahead is bounded by the ring, since a slot is written only once released.
    """

    def __init__(
        self,
        server: BridgeServer,
        conn: _Connection,
        rid: int,
        ring: shm.ShmRing,
        arena: shm.ChunkArena | None,
    ) -> None:
        super().__init__(server, conn, rid)
        self.ring = ring
        self.arena = arena
        self._announce = bytearray(protocol.PREFIX_SIZE + protocol.SHM_DATA_PAYLOAD.size)
        protocol.PREFIX.pack_into(
            self._announce,
            0,
            protocol.data_frame_length(protocol.SHM_DATA_PAYLOAD.size),
            FrameType.SHM_DATA,
            rid,
            0,
        )

    def first_piece_bytes(self) -> int:
        return self.ring.slot_bytes

    def full_piece_bytes(self) -> int:
        # a piece in the arena is announced where it lies, whatever its size: past the first, a streaming
        # reader gets a chunk per frame (one announcement, one release per chunk instead of per MiB)
        return self.arena.block_bytes if self.arena is not None else self.ring.slot_bytes

    def parts(self, data: list[memoryview]) -> list[Part]:
        arena = self.arena
        if arena is not None and len(data) <= self.ring.slots:
            offsets = [arena.locate(v) for v in data]
            if None not in offsets:
                return [Part(data, offsets)]  # type: ignore[arg-type]
        # copied into ring slots: one slot per part
        return [Part(p, None) for p in split_views(data, self.ring.slot_bytes)]

    def _units(self, n: int) -> int:
        """Ring slots' worth of read-ahead an announced piece of ``n`` bytes counts for (at most the ring)."""
        return min(self.ring.slots, max(1, -(-n // self.ring.slot_bytes)))

    def _room(self) -> int:
        """Slots' worth of read-ahead still allowed: the ring's size bounds what is announced and unreleased,
        in bytes as well as in pieces, so chunk-sized arena pieces pin no more blocks than 1 MiB ones."""
        return self.ring.slots - sum(units for units, _ in self.conn.pieces)

    def _await_free(self, free: int) -> None:
        """Block until at least ``free`` slots are released (or the server stops), reading RELEASE/CANCEL."""
        server, conn = self.server, self.conn
        while self._room() < free and not server._stopping.is_set():
            if server._next_frame_within(conn, 0.2):
                server._check_cancel(conn, self.rid)

    def await_room(self, part: Part) -> bool:
        # an arena piece counts for its size in slots (one announcement per view: it may span two chunks)
        views = part.views
        need = 1 if part.offsets is None else min(sum(self._units(len(v)) for v in views), self.ring.slots)
        if self._room() < need:
            self._await_free(need)
        return self._room() >= need

    def deliver(self, part: Part, trailer: bytes = b"") -> int:
        data = part.views
        if part.offsets is not None:
            return self._announce_in_arena(data, part.offsets, trailer)
        ring = self.ring
        slot = ring.next_slot
        n = copy_into(ring.slot_view(slot), data)  # GIL released: other streams run meanwhile
        ring.next_slot = (slot + 1) % ring.slots
        protocol.SHM_DATA_PAYLOAD.pack_into(self._announce, protocol.PREFIX_SIZE, slot, n)
        self.conn.pieces.append((1, None))
        self.conn.sock.sendall(self._announce + trailer if trailer else self._announce)
        with self.server._counters_lock:  # per piece: health shows a stream in progress too
            self.server._shm_bytes_streamed += n
        return n

    def _announce_in_arena(self, data: list[memoryview], offsets: list[int], trailer: bytes) -> int:
        """No copy: one ARENA_DATA per view (offset, length); the views pin their blocks until released."""
        frames = bytearray()
        for v, offset in zip(data, offsets, strict=True):
            frames += protocol.PREFIX.pack(
                protocol.data_frame_length(protocol.ARENA_DATA_PAYLOAD.size),
                FrameType.ARENA_DATA,
                self.rid,
                0,
            )
            frames += protocol.ARENA_DATA_PAYLOAD.pack(offset, len(v))
            self.conn.pieces.append((self._units(len(v)), [v]))
        self.conn.sock.sendall(frames + trailer)
        n = sum(len(v) for v in data)
        with self.server._counters_lock:
            self.server._shm_bytes_streamed += n
            self.server._arena_bytes_streamed += n
        return n

    def await_taken(self, grace_s: float) -> None:
        server, conn = self.server, self.conn
        self._await_free(self.ring.slots)
        # the client releases its last slot and cancels in one write: usually both are buffered already
        if grace_s and not server._stopping.is_set() and server._next_frame_within(conn, grace_s):
            server._poll_cancel(conn, self.rid)


class Part(NamedTuple):
    """What one announcement (or one socket frame) carries: views, and their arena offsets when the
    piece lies in the chunk arena (None: it is copied into a ring slot, or sent on the socket)."""

    views: list[memoryview]
    offsets: list[int] | None


def split_views(data: list[memoryview], limit: int) -> list[list[memoryview]]:
    """``data`` cut into consecutive parts of at most ``limit`` bytes each (views, no copy)."""
    parts: list[list[memoryview]] = []
    part: list[memoryview] = []
    room = limit
    for view in data:
        while len(view):
            take = view[:room]
            part.append(take)
            view = view[len(take) :]
            room -= len(take)
            if not room:
                parts.append(part)
                part, room = [], limit
    if part:
        parts.append(part)
    return parts


def parse_stop_after(header: Mapping[str, Any]) -> int | None:
    """The request's ``stop_after`` (answer at most that many bytes, then END "more"), or None."""
    value = header.get("stop_after")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"stop_after: expected a positive integer, got {value!r}")
    return value


class PieceReader:
    """The next frame's payload from an RSM stream, as a list of buffers ready for ``sendmsg``.

    A stream with ``read_view`` (the RSM's segment streams) lends views of its decoded chunks: no copy.
    Any other stream is read with ``readinto`` into one reusable buffer per connection (safe: sendmsg
    has copied it into the kernel before the next read).
    """

    def __init__(self, stream: Any, conn: _Connection) -> None:
        self._view = getattr(stream, "read_view", None)
        self._stream = stream
        self._conn = conn

    def read(self, size: int) -> list[memoryview]:
        """Up to ``size`` bytes (empty only at the end)."""
        if self._view is not None:
            views: list[memoryview] = []
            got = 0
            while got < size:
                v = self._view(size - got)
                if not v:
                    break
                views.append(v)
                got += len(v)
            return views
        buf = self._conn.buffer
        if buf is None or len(buf) < size:
            buf = self._conn.buffer = bytearray(size)
        view = memoryview(buf)[:size]
        got = 0
        while got < size:
            n = self._stream.readinto(view[got:])
            if n is None:  # a non-blocking raw stream with nothing yet: try again
                continue
            if not n:
                break
            got += n
        return [view[:got]] if got else []
