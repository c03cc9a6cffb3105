"""Connections to the brokers kept for the next client in this process, as Spark's Kafka source keeps them.

Why: a stream asks the brokers something every micro-batch (the driver's latest offsets) and reads the
tail in a task per partition per micro-batch; a connection made afresh for each costs a TCP (and TLS,
SASL) handshake, ApiVersions and the bootstrap's Metadata before the one request that matters, which is
most of a small micro-batch's planning and task start. Spark's Kafka source keeps its consumers in a pool
on each executor and one admin client per query on the driver; here a `BrokerWire` that closes cleanly
leaves its connection (`WireConnection`: kafka-python's client, bootstrapped, knowing the brokers) in
this pool, and the next `BrokerWire` for the same brokers and credentials in this process takes it. Its
leaders are not kept: each client asks Metadata for its topic again, as a fresh one does.

A connection is kept only when nothing about it is in doubt: its client saw no error (a retried request,
an exception through it), none of its requests is still in flight (a Fetch sent ahead and never
collected), and its sockets are still open when it is taken (a broker that closed them, or stopped,
gives the next client a fresh connection, whose errors then read as a fresh client's). At most
`MAX_IDLE` per set of brokers and credentials, none older than `IDLE_MS` idle (Spark's
`spark.kafka.consumer.cache.timeout`: 5 minutes; the brokers close theirs after 10). A process forked
with connections in the pool never uses its parent's sockets. What the pool holds is closed at exit.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass

from spark_reader.brokerwire.connection import WireConnection
from spark_reader.brokerwire.settings import WireSettings
from spark_reader.brokerwire.stats import WireStats

MAX_IDLE = 4
IDLE_MS = 5 * 60 * 1000


def connection_key(settings: WireSettings) -> Hashable:
    """What a connection is made from (`WireSettings.client_configs`): clients that agree on it can share
    one. Holds the credentials as given (compared, never shown)."""
    s = settings
    return (
        s.bootstrap_servers, s.security_protocol, s.sasl_mechanism, s.sasl_username, s.sasl_password,
        s.tls, s.client_id, s.request_timeout_ms,
    )  # fmt: skip


@dataclass
class _Idle:
    connection: WireConnection
    since: float


class ConnectionPool:
    """Idle connections by `connection_key` (see the module docstring); thread-safe."""

    def __init__(self, max_idle: int = MAX_IDLE, idle_ms: int = IDLE_MS) -> None:
        self.max_idle = max_idle
        self.idle_ms = idle_ms
        self._lock = threading.Lock()
        self._idle: dict[Hashable, list[_Idle]] = {}
        self._pid = os.getpid()

    def _mine(self) -> dict[Hashable, list[_Idle]]:
        """The idle connections, forgotten (not closed: the sockets are the parent's) after a fork."""
        if os.getpid() != self._pid:
            self._idle, self._pid = {}, os.getpid()
        return self._idle

    def take(self, settings: WireSettings, stats: WireStats) -> WireConnection | None:
        """A kept connection for these settings, its counts now going to `stats`; None if there is none."""
        key, now = connection_key(settings), time.monotonic()
        while True:
            with self._lock:
                kept = self._mine().get(key)
                idle = kept.pop() if kept else None
            if idle is None:
                return None
            conn = idle.connection
            if (now - idle.since) * 1000 < self.idle_ms and conn.reusable():
                conn.stats = stats
                return conn
            conn.close()

    def give(self, settings: WireSettings, conn: WireConnection) -> None:
        """Keep `conn` for the next client (the caller vouches for it: see `BrokerWire.close`)."""
        key, now = connection_key(settings), time.monotonic()
        expired: list[WireConnection] = []
        with self._lock:
            idle = self._mine()
            for k, kept in list(idle.items()):
                expired += [i.connection for i in kept if (now - i.since) * 1000 >= self.idle_ms]
                idle[k] = [i for i in kept if (now - i.since) * 1000 < self.idle_ms]
            kept = idle.setdefault(key, [])
            if len(kept) < self.max_idle:
                kept.append(_Idle(conn, now))
            else:
                expired.append(conn)
        for old in expired:
            old.close()

    def close(self) -> None:
        """Close every kept connection (at exit)."""
        with self._lock:
            idle, self._idle = self._mine(), {}
        for kept in idle.values():
            for i in kept:
                i.connection.close()


POOL = ConnectionPool()
atexit.register(POOL.close)
