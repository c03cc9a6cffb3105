"""Who may hold a connection to the bridge, and for how long.

Why: every connection costs the bridge a thread (and, when it offers "shm", a ring), and anyone who can
reach the socket can open connections. Unbounded, 600 idle connections made 600 threads, a sender
trickling a frame held its thread forever, and 50 strangers sending 14 bytes each made the bridge
allocate the 20 MiB frames they claimed (1 GiB). So: at most ``bridge.max.connections`` are served (more
are refused at once with a ``BUSY`` error, from the accepting thread, with no thread of their own); a
connection must complete its HELLO within ``bridge.handshake.timeout.ms``; one that sends no frame for
``bridge.idle.timeout.ms`` is closed; a frame that has begun must complete within
``bridge.read.timeout.ms``. Frame sizes before the handshake are bounded in ``protocol.FrameReader``.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import selectors
import socket
import struct
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from rsm.bridge import protocol
from rsm.bridge.protocol import ErrorCode, FrameType

log = logging.getLogger(__name__)

DEFAULT_POOL_SIZE = 32  # the JVM plugin's bridge.pool.size default: connections it keeps at most
MAX_REFUSING = 64  # refused sockets kept until their HELLO arrives; beyond that the oldest is closed at once
REFUSAL_LINGER_S = 1.0  # how long a refused socket waits for its HELLO (read and dropped) before closing
WARNING_INTERVAL_S = 10.0


@dataclass(frozen=True)
class Limits:
    """The bridge's bounds on connections (settings ``bridge.*``; times in seconds here, ms in config).

    ``max_connections``: twice the plugin's pool by default (the pool, its probe connections, and a
    broker restarting its plugin while the old pool closes). ``idle_timeout_s`` is long by default
    (10 min): the plugin pools its connections, retires them before this (it is in the HELLO answer),
    and reconnects when it finds one closed. ``shm_idle_release_s``: a connection idle this long gives
    its ring's memory back (it is reserved again at its next fetch). 0 disables an idle timeout.
    """

    max_connections: int = 2 * DEFAULT_POOL_SIZE
    handshake_timeout_s: float = 10.0
    idle_timeout_s: float = 600.0
    read_timeout_s: float = 30.0
    shm_idle_release_s: float = 30.0

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ValueError(f"bridge.max.connections={self.max_connections}: expected at least 1")
        for key, value, zero_ok in (
            ("bridge.handshake.timeout.ms", self.handshake_timeout_s, False),
            ("bridge.read.timeout.ms", self.read_timeout_s, False),
            ("bridge.idle.timeout.ms", self.idle_timeout_s, True),
            ("bridge.shm.idle.release.ms", self.shm_idle_release_s, True),
        ):
            if value < 0 or (value == 0 and not zero_ok):
                raise ValueError(f"{key}={value * 1000:.0f}: expected a positive number of ms")

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> Limits:
        """The limits from the ``bridge.*`` settings of the broker's properties (defaults for the rest)."""
        pool = setting_int(settings, "bridge.pool.size", DEFAULT_POOL_SIZE)
        default = cls()
        return cls(
            max_connections=setting_int(settings, "bridge.max.connections", 2 * pool),
            handshake_timeout_s=_ms(settings, "bridge.handshake.timeout.ms", default.handshake_timeout_s),
            idle_timeout_s=_ms(settings, "bridge.idle.timeout.ms", default.idle_timeout_s),
            read_timeout_s=_ms(settings, "bridge.read.timeout.ms", default.read_timeout_s),
            shm_idle_release_s=_ms(settings, "bridge.shm.idle.release.ms", default.shm_idle_release_s),
        )

    @property
    def tick_s(self) -> float:
        """The receive timeout set on each connection: how often a silent connection's thread wakes to
        check its deadlines (a quarter of the shortest, between 10 ms and 1 s)."""
        times = [self.handshake_timeout_s, self.read_timeout_s, self.idle_timeout_s, self.shm_idle_release_s]
        return min(1.0, max(0.01, min(t for t in times if t > 0) / 4))


def setting_int(settings: Mapping[str, str], key: str, default: int) -> int:
    """A `bridge.*` integer setting; ValueError naming the key and the bad value (one line for the CLI)."""
    raw = settings.get(key, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{key}={raw!r}: expected an integer") from None


def _ms(settings: Mapping[str, str], key: str, default_s: float) -> float:
    return setting_int(settings, key, round(default_s * 1000)) / 1000.0


def set_receive_tick(sock: socket.socket, seconds: float) -> None:
    """``SO_RCVTIMEO``: a blocking receive returns (EAGAIN) after ``seconds`` of silence, so the reader
    checks its deadlines without a ``poll`` before every receive."""
    whole = int(seconds)
    sock.setsockopt(
        socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", whole, int((seconds - whole) * 1e6))
    )


class RateLimitedLog:
    """Warnings that hostile or broken clients can trigger at will: at most one line per kind per
    ``interval_s``, the next line saying how many were left out, so the log stays readable under a flood."""

    def __init__(self, logger: logging.Logger, interval_s: float = WARNING_INTERVAL_S) -> None:
        self._log = logger
        self._interval = interval_s
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._skipped: collections.Counter[str] = collections.Counter()

    def warning(self, kind: str, message: str, *args: object) -> None:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self._interval:
                self._skipped[kind] += 1
                return
            self._last[kind] = now
            skipped = self._skipped.pop(kind, 0)
        if skipped:
            message += f" ({skipped} more like this in the last {self._interval:.0f} s not logged)"
        self._log.warning(message, *args)


class Refusals:
    """Connections over the cap, handled by the accepting thread: each is sent a ``BUSY`` ERROR at once
    and closed once its HELLO has arrived (read and dropped: closing a Unix socket with unread data
    resets the peer, which then might not see the error) or after ``REFUSAL_LINGER_S``."""

    def __init__(self, selector: selectors.BaseSelector, warnings: RateLimitedLog) -> None:
        self._selector = selector
        self._warnings = warnings
        self._waiting: dict[socket.socket, float] = {}  # insertion order = oldest first
        self.count = 0

    def refuse(self, sock: socket.socket, open_connections: int, limit: int) -> None:
        self.count += 1
        self._warnings.warning(
            "max.connections",
            "refusing new connections: %d open, bridge.max.connections=%d",
            open_connections,
            limit,
        )
        error = protocol.encode_frame(
            FrameType.ERROR,
            0,
            {
                "code": str(ErrorCode.BUSY),
                "message": f"the bridge serves at most {limit} connections (bridge.max.connections); retry later",
            },
        )
        try:
            sock.setblocking(False)
            sock.send(error)  # a fresh socket's buffer takes it whole
        except OSError:
            sock.close()
            return
        if len(self._waiting) >= MAX_REFUSING:
            self._close(next(iter(self._waiting)))
        self._waiting[sock] = time.monotonic() + REFUSAL_LINGER_S
        self._selector.register(sock, selectors.EVENT_READ)

    def ready(self, sock: socket.socket) -> None:
        """The refused peer sent something (its HELLO) or closed: drop what it sent, then close."""
        with contextlib.suppress(OSError):
            for _ in range(4):
                if not sock.recv(65536):
                    break
        self._close(sock)

    def expire(self) -> None:
        now = time.monotonic()
        for sock in [s for s, due in self._waiting.items() if due <= now]:
            self._close(sock)

    def close_all(self) -> None:
        for sock in list(self._waiting):
            self._close(sock)

    def _close(self, sock: socket.socket) -> None:
        self._waiting.pop(sock, None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(sock)
        sock.close()

    def __contains__(self, sock: object) -> bool:
        return sock in self._waiting
