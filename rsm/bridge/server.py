"""The bridge process: one RemoteStorageManager served over a Unix domain socket.

Why a separate process: Kafka loads Java classes only, so the JVM plugin forwards each call here.  One
long-lived process keeps the RSM's caches and connections warm for every broker thread; a thread per
connection lets Kafka's copier and reader threads work concurrently (the RSM is thread-safe, and the
heavy lifting - socket I/O, hashing, compression, encryption - releases the GIL).
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from rsm import metrics
from rsm.api.errors import RemoteStorageException
from rsm.bridge import listener, protocol, shm, streaming
from rsm.bridge.admission import Limits, RateLimitedLog, Refusals, set_receive_tick
from rsm.bridge.connection import Connection
from rsm.bridge.listener import check_socket_path
from rsm.bridge.memory import (
    DEFAULT_ARENA_BLOCK_BYTES,
    DEFAULT_MMAP_THRESHOLD_BYTES,
    default_arena_blocks,
    trim_heap,
    tune_allocator,
)
from rsm.bridge.operations import RsmOperations, store_bytes_read, validation_stats
from rsm.bridge.permits import WorkPermits, default_permits
from rsm.bridge.protocol import (
    DEFAULT_DATA_FRAME_BYTES,
    MAX_DATA_FRAME_BYTES,
    MIN_DATA_FRAME_BYTES,
    ErrorCode,
    FrameType,
    Op,
)
from rsm.bridge.session import SERVER_NAME, ConnectionSession
from rsm.config.properties import load_properties, mask_configs, split_rsm_configs
from rsm.processes import pid_alive
from rsm.store.objects import ObjectStore

log = logging.getLogger(__name__)

# re-exported: the CLI, benchmarks and tests import these from here
__all__ = [
    "DEFAULT_MMAP_THRESHOLD_BYTES",
    "BridgeServer",
    "RequestContext",
    "check_socket_path",
    "default_arena_blocks",
    "load_properties",
    "mask_configs",
    "split_rsm_configs",
    "tune_allocator",
]

DEFAULT_INITIAL_FRAME_BYTES = 256 * 1024
DEFAULT_SEND_BUFFER_BYTES = 1024 * 1024  # the first MiB of a fetch goes out without waiting for the reader
HEAP_TRIM_QUIET_S = 1.0  # no request for this long after some: the heap's free memory goes back (trim_heap)

Handler = Callable[["RequestContext"], "dict[str, Any] | None"]


# ------------------------------------------------------------------------------------------- server


@dataclass
class RequestContext:
    """What a handler sees: the decoded header, the payload and the connection's stream writer."""

    op: str
    request_id: int
    header: dict[str, Any]
    payload: bytes | bytearray | memoryview
    server: BridgeServer
    conn: Connection


class BridgeServer:
    """Serves one RemoteStorageManager (``rsm``) on a Unix domain socket at ``socket_path``.

    ``handlers`` lets later issues add operations (e.g. the topic policy's validate_create_topic)
    without touching the dispatcher: op name -> callable(RequestContext) -> response header.
    """

    def __init__(
        self,
        rsm: Any,
        socket_path: Path,
        *,
        configs: Mapping[str, str] | None = None,
        frame_bytes: int = DEFAULT_DATA_FRAME_BYTES,
        initial_frame_bytes: int = DEFAULT_INITIAL_FRAME_BYTES,
        shutdown_grace_s: float = 10.0,
        handlers: Mapping[str, Handler] | None = None,
        send_buffer_bytes: int = 0,
        shm_enabled: bool = True,
        shm_dir: Path | None = None,
        shm_slots: int = shm.DEFAULT_SLOTS,
        shm_slot_bytes: int = shm.DEFAULT_SLOT_BYTES,
        fetch_permits: int | None = None,
        arena_blocks: int | None = None,
        limits: Limits | None = None,
    ) -> None:
        if not MIN_DATA_FRAME_BYTES <= frame_bytes <= MAX_DATA_FRAME_BYTES:
            raise ValueError(
                f"bridge.frame.bytes={frame_bytes} outside [{MIN_DATA_FRAME_BYTES}, {MAX_DATA_FRAME_BYTES}]"
            )
        self.rsm = rsm
        self.socket_path = Path(socket_path)
        self.configs = dict(configs or {})
        self.frame_bytes = frame_bytes
        self.initial_frame_bytes = max(MIN_DATA_FRAME_BYTES, min(initial_frame_bytes, frame_bytes))
        self.shutdown_grace_s = shutdown_grace_s
        # SO_SNDBUF of accepted connections (0 = the system default); the kernel caps it at wmem_max
        self.send_buffer_bytes = send_buffer_bytes
        # shared-memory transport for fetch answers (capability "shm"), offered to clients that ask
        self.shm_enabled = shm_enabled
        self.shm_dir = Path(shm_dir) if shm_dir is not None else shm.default_shm_dir()
        self.shm_slots = shm_slots
        self.shm_slot_bytes = shm_slot_bytes
        if shm_enabled and not (
            1 <= shm_slots <= 64 and shm.MIN_SLOT_BYTES <= shm_slot_bytes <= shm.MAX_SLOT_BYTES
        ):
            raise ValueError(f"bad shared-memory ring shape: {shm_slots} slots of {shm_slot_bytes} bytes")
        # the RSM's own operations: requests decoded, the RSM called, answers encoded (operations.py)
        self.operations = RsmOperations(rsm, self.configs, frame_bytes)
        self._handlers: dict[str, Handler] = {
            Op.HEALTH: self._op_health,
            Op.CONFIGURE_INFO: self.operations.configure_info,
            Op.COPY_LOG_SEGMENT_DATA: self.operations.copy,
            Op.DELETE_LOG_SEGMENT_DATA: self.operations.delete,
            Op.METRICS: self._op_metrics,
        }
        self._handlers.update(handlers or {})
        # bounds on connections: how many, how long a HELLO / an idle wait / a frame may take (admission.py)
        self.limits = limits or Limits()
        self.warnings = RateLimitedLog(log)
        self._selector = selectors.DefaultSelector()
        self._refusals = Refusals(self._selector, self.warnings)
        self._listener: socket.socket | None = None
        self._socket_inode: int | None = None  # of the socket file this bridge published
        # streams working at once (see permits.py): None = one more than the cores, 0 = no limit
        self.permits = WorkPermits(default_permits() if fetch_permits is None else fetch_permits)
        store = None
        with contextlib.suppress(AttributeError, RemoteStorageException):  # another RSM, or unconfigured
            store = rsm.store
        if isinstance(store, ObjectStore):  # ours: a fetch waiting on the network lends its permit
            store.remote_wait = self.permits.waiting
        # decoded chunks in shared memory (see shm.ChunkArena), created at bind: None = sized from the RSM's
        # chunk cache, 0 = no arena (every fetched byte is copied into a ring slot)
        self.arena_blocks = arena_blocks
        self.arena: shm.ChunkArena | None = None
        self.stopping = threading.Event()
        self._stopped = threading.Event()
        self._conns: set[Connection] = set()
        self._conns_lock = threading.Lock()
        self._started = time.monotonic()
        self._requests = 0
        self._bytes_streamed = 0
        self._shm_bytes_streamed = 0
        self._arena_bytes_streamed = 0
        self._counters_lock = threading.Lock()  # the byte counters are updated by every connection thread
        self._log_configs_received = 0
        self._last_request_end = time.monotonic()
        self._heap_used = False  # requests ran since the heap was last trimmed
        # the bridge's own figures in rsm.metrics (unless metrics.enabled=false), beside the RSM's
        enabled = str(self.configs.get("metrics.enabled", "true")).strip().lower()
        self.metrics = metrics.REGISTRY if enabled not in ("false", "0", "no", "off") else None
        if self.metrics is not None:
            self.metrics.gauge("bridge-server-connections", lambda: len(self._conns))
            self.metrics.gauge(
                "bridge-server-in-flight-requests", lambda: sum(c.busy for c in list(self._conns))
            )

    # -- lifecycle --------------------------------------------------------------------------------

    @property
    def ops(self) -> list[str]:
        return sorted({*self._handlers, Op.FETCH_LOG_SEGMENT, Op.FETCH_INDEX})

    def bind(self) -> None:
        """Set up shared memory, then listen: the socket's name appears only once the bridge listens
        (see listener.py), owner-only from the first instant, a stale socket replaced."""
        check_socket_path(self.socket_path)
        listener.refuse_live_socket(self.socket_path)  # a second bridge fails before any work
        if self.shm_enabled:
            try:
                shm.ensure_private_dir(self.shm_dir)
                shm.remove_stale_rings(self.shm_dir)
            except (OSError, ValueError) as exc:
                log.warning("shared-memory transport disabled: %s", exc)
                self.shm_enabled = False
            else:
                self._create_arena()
        try:
            sock, self._socket_inode = listener.open_listener(self.socket_path, backlog=128)
        except BaseException:
            if self.arena is not None:
                self.arena.unlink()
            raise
        sock.setblocking(False)
        self._listener = sock
        self._selector.register(sock, selectors.EVENT_READ)
        log.info("bridge listening on %s (pid %d)", self.socket_path, os.getpid())

    def _create_arena(self) -> None:
        """The chunk arena, when the RSM can decode into it (our RSM: ``set_chunk_allocator``)."""
        set_allocator = getattr(self.rsm, "set_chunk_allocator", None)
        if set_allocator is None or self.arena_blocks == 0:
            return
        block_bytes, cache_bytes, prefetch = DEFAULT_ARENA_BLOCK_BYTES, 0, 0
        with contextlib.suppress(AttributeError, RemoteStorageException, TypeError, ValueError):
            block_bytes = int(self.rsm.config.get("chunk.size"))
            cache_bytes = int(self.rsm.config.get("cache.chunk.bytes"))
            prefetch = int(self.rsm.config.get("fetch.prefetch.chunks"))
        blocks = self.arena_blocks or default_arena_blocks(
            cache_bytes, block_bytes, prefetch, self.shm_slots * self.shm_slot_bytes, self.shm_slots
        )
        if blocks * block_bytes > shm.MAX_ARENA_BYTES:  # bridge.arena.blocks set beyond what a client maps
            log.warning(
                "bridge.arena.blocks=%d of %d bytes exceeds %d bytes: %d blocks",
                blocks,
                block_bytes,
                shm.MAX_ARENA_BYTES,
                shm.MAX_ARENA_BYTES // block_bytes,
            )
            blocks = shm.MAX_ARENA_BYTES // block_bytes
        try:
            self.arena = shm.ChunkArena.create(self.shm_dir, blocks, block_bytes)
        except (OSError, ValueError) as exc:
            log.warning("no shared-memory chunk arena (fetched bytes are copied into ring slots): %s", exc)
            return
        set_allocator(self.arena.allocate)
        log.info("chunk arena: %d blocks of %d bytes", blocks, block_bytes)

    def serve_forever(self, parent_pid: int | None = None) -> None:
        """Accept connections until stop() (or the parent process disappears), then shut down.

        One thread serves each admitted connection; connections beyond ``bridge.max.connections`` are
        refused here, by this thread (see admission.Refusals), so a flood of them costs no threads.
        """
        if self._listener is None:
            self.bind()
        assert self._listener is not None
        last_parent_check = time.monotonic()
        try:
            while not self.stopping.is_set():
                for key, _ in self._selector.select(0.2):
                    if key.fileobj is self._listener:
                        self._accept_waiting()
                    else:
                        self._refusals.ready(key.fileobj)  # type: ignore[arg-type]
                self._refusals.expire()
                self._trim_heap_when_quiet()
                if parent_pid is not None and time.monotonic() - last_parent_check > 1.0:
                    last_parent_check = time.monotonic()
                    if not pid_alive(parent_pid):
                        log.warning("parent process %d is gone; bridge stopping", parent_pid)
                        self.stopping.set()
        finally:
            self._shutdown()

    def _trim_heap_when_quiet(self) -> None:
        """Memory returns after load: once no request has run for ``HEAP_TRIM_QUIET_S``, the heap's free
        pages go back to the system (the allocator keeps them while requests follow each other)."""
        if not self._heap_used or time.monotonic() - self._last_request_end < HEAP_TRIM_QUIET_S:
            return
        with self._conns_lock:
            if any(c.busy for c in self._conns):
                return
        self._heap_used = False
        if trim_heap():
            log.debug("heap trimmed after the load")

    def _accept_waiting(self) -> None:
        """Accept every connection waiting in the backlog: a thread for each, up to the cap."""
        assert self._listener is not None
        while not self.stopping.is_set():
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                if self.stopping.is_set():
                    return
                raise
            with self._conns_lock:
                count = len(self._conns)
            if count >= self.limits.max_connections:
                self._refusals.refuse(sock, count, self.limits.max_connections)
                if self.metrics is not None:
                    self.metrics.record("bridge-server-connections-refused", ())
                continue
            sock.settimeout(None)
            set_receive_tick(sock, self.limits.tick_s)
            if self.send_buffer_bytes > 0:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer_bytes)
            conn = Connection(sock=sock, peer=f"fd{sock.fileno()}")
            thread = threading.Thread(target=ConnectionSession(self, conn).run, daemon=True)
            conn.thread = thread
            with self._conns_lock:
                self._conns.add(conn)
            thread.start()

    def stop(self) -> None:
        """Ask the server to stop (safe from signal handlers and other threads)."""
        self.stopping.set()

    def wait_stopped(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)

    def _shutdown(self) -> None:
        log.info("bridge shutting down")
        self._refusals.close_all()
        if self._listener is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(self._listener)
            self._listener.close()
            self._listener = None
        if self._socket_inode is not None:
            listener.remove_own_socket(self.socket_path, self._socket_inode)
        deadline = time.monotonic() + self.shutdown_grace_s
        while True:
            with self._conns_lock:
                conns = list(self._conns)
            for conn in conns:
                with conn.lock:
                    idle = not conn.busy
                if idle:
                    self._close_conn(conn)
            busy = [c for c in conns if c.busy and not c.closed]
            if not busy or time.monotonic() > deadline:
                for conn in busy:
                    log.warning(
                        "aborting in-flight request on %s after %.1fs grace", conn.peer, self.shutdown_grace_s
                    )
                    self._close_conn(conn)
                break
            time.sleep(0.05)
        for conn in conns:
            if conn.thread is not None:
                conn.thread.join(timeout=2.0)
        try:
            self.rsm.close()
        except Exception:  # noqa: BLE001 - shutting down anyway; report and go on
            log.exception("RemoteStorageManager.close() failed")
        if self.arena is not None:
            self.arena.unlink()
        self._stopped.set()
        log.info("bridge stopped")

    def _close_conn(self, conn: Connection) -> None:
        if conn.closed:
            return
        conn.closed = True
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_RDWR)

    # -- requests (a connection's session, its handshake and frames: rsm.bridge.session) -----------

    def request_ended(self) -> None:
        """A request of some connection ended (the heap is trimmed once the bridge has been quiet)."""
        self._last_request_end = time.monotonic()
        self._heap_used = True

    def forget(self, conn: Connection) -> None:
        """A connection's session ended: it no longer counts among the bridge's connections."""
        with self._conns_lock:
            self._conns.discard(conn)

    def send_error(self, conn: Connection, request_id: int, code: ErrorCode | str, message: str) -> None:
        protocol.send_frame(conn.sock, FrameType.ERROR, request_id, {"code": str(code), "message": message})

    def dispatch(self, conn: Connection, frame: protocol.Frame) -> None:
        """Answer one REQUEST frame: a fetch streamed, any other operation by its handler."""
        op = frame.header.get("op")
        rid = frame.request_id
        self._requests += 1
        if self.metrics is not None:
            self.metrics.record("bridge-server-requests", ())
        if frame.header.get("log_config") is not None:
            self._log_configs_received += 1
        if self.stopping.is_set():
            self.send_error(conn, rid, ErrorCode.SHUTTING_DOWN, "bridge is shutting down")
            return
        if op in (Op.FETCH_LOG_SEGMENT, Op.FETCH_INDEX):
            with self.permits.working():
                streaming.stream_answer(self, conn, frame)
            return
        handler = self._handlers.get(op) if isinstance(op, str) else None
        if handler is None:
            self.send_error(conn, rid, ErrorCode.UNSUPPORTED_OPERATION, f"operation {op!r} is not supported")
            return
        ctx = RequestContext(op, rid, frame.header, frame.payload, self, conn)
        try:
            result = handler(ctx)
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller as an ERROR frame
            self.report_failure(conn, rid, op, exc)
            return
        protocol.send_frame(conn.sock, FrameType.RESPONSE, rid, result or {})

    def report_failure(self, conn: Connection, rid: int, op: Any, exc: BaseException) -> None:
        code = protocol.error_code_for(exc)
        message = str(exc) or type(exc).__name__
        if code == ErrorCode.INTERNAL:
            log.exception("%s failed with an unexpected error", op)
            message = f"{type(exc).__name__}: {message}"
        elif code == ErrorCode.POLICY_VIOLATION:  # an answer, not a failure of the bridge
            log.info("%s: %s", op, message)
        elif code != ErrorCode.RESOURCE_NOT_FOUND:
            log.warning("%s failed: %s", op, message)
        self.send_error(conn, rid, code, message)

    # -- operations -------------------------------------------------------------------------------

    def _op_health(self, ctx: RequestContext) -> dict[str, Any]:
        with self._conns_lock:
            conns = list(self._conns)
        return {
            "status": "stopping" if self.stopping.is_set() else "ok",
            "pid": os.getpid(),
            "uptime_ms": int((time.monotonic() - self._started) * 1000),
            "connections": len(conns),
            "max_connections": self.limits.max_connections,
            "connections_refused": self._refusals.count,
            "in_flight": sum(1 for c in conns if c.busy),
            "requests": self._requests,
            "log_configs_received": self._log_configs_received,
            "server": SERVER_NAME,
            "store_bytes_read": store_bytes_read(self.rsm),
            "bytes_streamed": self._bytes_streamed,
            "shm_bytes_streamed": self._shm_bytes_streamed,
            "arena_bytes_streamed": self._arena_bytes_streamed,
            "arena_free_blocks": None if self.arena is None else self.arena.free_blocks,
            # per topic: segments validated, records checked, violations, refusals, seconds
            "record_validation": validation_stats(self.rsm),
        }

    def _op_metrics(self, ctx: RequestContext) -> dict[str, Any]:
        """rsm.metrics' snapshot (PROTOCOL.md, "metrics"); per-partition series are left out when they
        would not fit a frame header (``partitions_dropped``), the topics' and totals never."""
        snapshot = metrics.REGISTRY.snapshot()
        answer: dict[str, Any] = {
            "pid": os.getpid(),
            "uptime_ms": int((time.monotonic() - self._started) * 1000),
            "enabled": self.metrics is not None,
            **snapshot,
        }
        if len(orjson.dumps(answer)) > protocol.MAX_HEADER_BYTES * 3 // 4:
            answer["series"] = [s for s in snapshot["series"] if "partition" not in s["tags"]]
            answer["partitions_dropped"] = True
        return answer

    def count_shm_streamed(self, n: int, *, arena: bool) -> None:
        """``n`` bytes announced through the shared-memory ring (``arena``: lent from the chunk arena)."""
        with self._counters_lock:  # per piece: health shows a stream in progress too
            self._shm_bytes_streamed += n
            if arena:
                self._arena_bytes_streamed += n

    def count_streamed(self, sent: int) -> None:
        """A streamed answer ended after ``sent`` bytes (health's byte counters and rsm.metrics)."""
        with self._counters_lock:
            self._bytes_streamed += sent
        if self.metrics is not None and sent:
            self.metrics.record("bridge-server-streamed-bytes", (), sent)

    def open_stream(self, header: dict[str, Any]) -> Any:
        """A fetch's answer, for `rsm.bridge.streaming` (`RsmOperations.open_stream`)."""
        return self.operations.open_stream(header)
