"""A client's connection as the bridge serves it, and the face the server shows to a fetch's stream.

Apart from `rsm.bridge.server` so that `rsm.bridge.streaming`, which the server drives, needs only these
two and never the server itself.
"""

from __future__ import annotations

import collections
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rsm.bridge import protocol, shm
from rsm.bridge.admission import Limits, RateLimitedLog
from rsm.bridge.permits import WorkPermits
from rsm.bridge.protocol import ErrorCode


@dataclass(eq=False)
class Connection:
    """One client connection: its socket, frame reader, optional shared-memory ring and unreleased pieces."""

    sock: socket.socket
    peer: str
    busy: bool = False
    thread: threading.Thread | None = None
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    buffer: bytearray | None = None  # reused for streams that cannot lend views of their data
    ring: shm.ShmRing | None = None  # the shared-memory ring, when the client negotiated "shm"
    reader: protocol.FrameReader = field(init=False)
    # each announced, unreleased piece, oldest first: the ring slots' worth of read-ahead it counts for, and
    # what it pins: arena views (their blocks stay allocated until the client releases them) or None (a slot)
    pieces: collections.deque[tuple[int, list[memoryview] | None]] = field(default_factory=collections.deque)
    accepted: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        # until the handshake, a frame may not claim more than a HELLO needs (see protocol.FrameReader)
        self.reader = protocol.FrameReader(self.sock, max_frame_bytes=protocol.HANDSHAKE_MAX_FRAME_BYTES)


class StreamHost(Protocol):
    """What a fetch's stream (`rsm.bridge.streaming`) uses of the server that answers it."""

    frame_bytes: int
    initial_frame_bytes: int
    limits: Limits
    permits: WorkPermits
    arena: shm.ChunkArena | None
    shm_dir: Path
    stopping: threading.Event
    warnings: RateLimitedLog

    def open_stream(self, header: dict[str, Any]) -> Any: ...

    def count_streamed(self, sent: int) -> None: ...

    def count_shm_streamed(self, n: int, *, arena: bool) -> None: ...

    def report_failure(self, conn: Connection, rid: int, op: Any, exc: BaseException) -> None: ...

    def send_error(self, conn: Connection, request_id: int, code: ErrorCode | str, message: str) -> None: ...
