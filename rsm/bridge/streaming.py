"""A fetch's answer: the stream driver (``stream_answer``) and where its pieces go, DATA frames on the
socket or slots of a shared-memory ring (or the chunk arena) announced by tiny frames, one sink class per
transport; and the client's frames that arrive while it streams (CANCEL, SHM_RELEASE).
"""

from __future__ import annotations

import contextlib
import fcntl
import select
import sys
import termios
from collections.abc import Mapping
from typing import Any, NamedTuple

from rsm.bridge import protocol, shm
from rsm.bridge.connection import Connection, StreamHost
from rsm.bridge.protocol import ErrorCode, FrameType, ProtocolError
from segment_format.buffers import copy_into

DRAIN_POLL_S = 0.0002
DRAIN_POLL_MAX_S = 0.004
SMALL_FRAMES_UNTIL = 1024 * 1024
CANCEL_GRACE_S = 0.001


class Cancelled(Exception):
    """The client cancelled the stream being answered."""


class Sink:
    """Where a stream's pieces go: the transport half of ``stream_answer``."""

    def __init__(self, server: StreamHost, conn: Connection, rid: int) -> None:
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

    def __init__(self, server: StreamHost, conn: Connection, rid: int) -> None:
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
        while not server.stopping.is_set():
            fcntl.ioctl(fd, termios.TIOCOUTQ, out)  # bytes sent that the client has not read yet
            drained = not int.from_bytes(out, sys.byteorder)
            if drained and not grace_s:
                return
            if next_frame_within(server, conn, grace_s if drained else poll):
                check_cancel(server, conn, self.rid)
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
        server: StreamHost,
        conn: Connection,
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
        while self._room() < free and not server.stopping.is_set():
            if next_frame_within(server, conn, 0.2):
                check_cancel(server, conn, self.rid)

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
        self.server.count_shm_streamed(n, arena=False)
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
        self.server.count_shm_streamed(n, arena=True)
        return n

    def await_taken(self, grace_s: float) -> None:
        server, conn = self.server, self.conn
        self._await_free(self.ring.slots)
        # the client releases its last slot and cancels in one write: usually both are buffered already
        if grace_s and not server.stopping.is_set() and next_frame_within(server, conn, grace_s):
            poll_cancel(server, conn, self.rid)


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

    def __init__(self, stream: Any, conn: Connection) -> None:
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


def stream_answer(server: StreamHost, conn: Connection, frame: protocol.Frame) -> None:
    """Answer a fetch with pieces of the stream then END; an error ends it with ERROR instead.

    One driver for both transports (``SocketSink``: DATA frames; ``ShmSink``: ring slots announced
    by SHM_DATA). The first piece is read before anything is sent, so a missing segment is an ERROR
    frame the client sees at call time. Kafka reads its fetch size (1 MiB by default) from a random
    position and closes, so a reader that is done should cost no storage read or copy beyond what it
    asked for. A client that says so (``stop_after``, the JVM plugin) gets pieces ending exactly there
    and an END with ``"more": true`` in the same write, and asks again from that position if it wants
    more: no waiting on the client at all, one wake-up of the bridge per Kafka fetch. Without it, pieces
    end exactly at the 1 MiB mark, where the server pauses until the client has taken everything sent,
    then briefly waits for its CANCEL. Between later pieces the server looks for a CANCEL and for
    shutdown.

    Hot path: the RSM's streams lend views of their decoded chunks (``read_view``); the socket sink
    sends them with one ``sendmsg`` next to a preallocated frame prefix, the ring sink copies them once
    into a slot. Read-ahead is bounded by the transport: the socket buffer, or the ring's free slots.
    """
    rid = frame.request_id
    op = frame.header.get("op")
    ring = conn.ring if frame.header.get("transport") == protocol.CAP_SHM else None
    if ring is not None and not ring.reserve():  # its memory is reserved at its first fetch
        server.warnings.warning(
            "shm.reserve",
            "no room in %s for a shared-memory ring: answering %s with socket data frames",
            server.shm_dir,
            conn.peer,
        )
        ring = None
    arena = server.arena if ring is not None and frame.header.get("arena") is True else None
    sink: Sink = (
        ShmSink(server, conn, rid, ring, arena) if ring is not None else SocketSink(server, conn, rid)
    )
    sent = 0
    stopped = False
    stream = None
    try:
        try:
            stop_after = parse_stop_after(frame.header)
            mark = stop_after or SMALL_FRAMES_UNTIL
            stream = server.open_stream(frame.header)
            pieces = PieceReader(stream, conn)
            data = pieces.read(sink.piece_bytes(0, mark))
        except Exception as exc:  # noqa: BLE001 - mapped to an ERROR frame
            server.report_failure(conn, rid, op, exc)
            return
        while data:
            final = bool(stop_after) and sent + sum(len(v) for v in data) == stop_after
            end = b""
            if final:
                # the client's stop: END ("more" when the range goes on) in the same write as the piece
                left = getattr(stream, "remaining", None)
                more = left is None or left > 0
                end = protocol.encode_frame(FrameType.END, rid, {"bytes": stop_after, "more": more})
            parts = sink.parts(data)
            for k, part in enumerate(parts):
                if not sink.await_room(part):
                    stopped = True
                    break
                sent += sink.deliver(part, end if k == len(parts) - 1 else b"")
            if stopped:
                break
            if final:
                return
            if sent == mark:
                sink.await_taken(CANCEL_GRACE_S)
            else:
                poll_cancel(server, conn, rid)
            if server.stopping.is_set():
                stopped = True
                break
            try:
                data = pieces.read(sink.piece_bytes(sent, mark))
            except Exception as exc:  # noqa: BLE001 - mapped to an ERROR frame
                server.report_failure(conn, rid, op, exc)
                return
        if stopped:
            server.send_error(conn, rid, ErrorCode.SHUTTING_DOWN, f"bridge stopping after {sent} bytes")
            return
        protocol.send_frame(conn.sock, FrameType.END, rid, {"bytes": sent})
    except Cancelled:
        protocol.send_frame(conn.sock, FrameType.END, rid, {"bytes": sent, "cancelled": True})
    finally:
        server.count_streamed(sent)
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()


def next_frame_within(server: StreamHost, conn: Connection, timeout: float) -> bool:
    """True when a frame from the client can be read now or arrives within ``timeout`` seconds."""
    if conn.reader.buffered():
        return True
    with server.permits.waiting():
        readable, _, _ = select.select([conn.sock], [], [], timeout)
    return bool(readable)


def poll_cancel(server: StreamHost, conn: Connection, rid: int) -> None:
    """Handle every frame the client has sent so far (non-blocking); raise Cancelled on its CANCEL."""
    while conn.reader.poll():  # raises ConnectionClosed when the client went away
        check_cancel(server, conn, rid)


def check_cancel(server: StreamHost, conn: Connection, rid: int) -> None:
    # raises ConnectionClosed when the client went away, ReceiveTimeout when it stalls mid-frame
    frame = conn.reader.recv_frame(within=server.limits.read_timeout_s)
    if frame.type == FrameType.CANCEL and frame.request_id == rid:
        raise Cancelled()
    if frame.type == FrameType.CANCEL:
        return
    if frame.type == FrameType.SHM_RELEASE:
        on_release(conn, frame)
        return
    raise ProtocolError(f"{frame.type.name} frame {frame.request_id} received while streaming request {rid}")


def on_release(conn: Connection, frame: protocol.Frame) -> None:
    """The client's SHM_RELEASE: its oldest ``count`` pieces (ring slots, arena blocks) may be reused."""
    ring = conn.ring
    if ring is None or len(frame.payload) != protocol.SHM_RELEASE_PAYLOAD.size:
        raise ProtocolError(
            f"SHM_RELEASE frame without a ring or with a bad payload ({len(frame.payload)} B)"
        )
    (count,) = protocol.SHM_RELEASE_PAYLOAD.unpack(frame.payload)
    if count > len(conn.pieces):
        raise ProtocolError(f"SHM_RELEASE of {count} slots, only {len(conn.pieces)} in flight")
    for _ in range(count):  # the client is done with them: slots and arena blocks may be reused
        conn.pieces.popleft()
