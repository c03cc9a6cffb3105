"""The bridge process: one RemoteStorageManager served over a Unix domain socket.

Why a separate process: Kafka loads Java classes only, so the JVM plugin forwards each call here.  One
long-lived process keeps the RSM's caches and connections warm for every broker thread; a thread per
connection lets Kafka's copier and reader threads work concurrently (the RSM is thread-safe, and the
heavy lifting - socket I/O, hashing, compression, encryption - releases the GIL).
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import importlib
import logging
import os
import select
import signal
import socket
import stat
import sys
import termios
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from rsm.bridge import protocol, shm
from rsm.bridge.permits import WorkPermits, default_permits
from rsm.bridge.protocol import (
    DEFAULT_DATA_FRAME_BYTES,
    MAX_DATA_FRAME_BYTES,
    MIN_DATA_FRAME_BYTES,
    BridgeError,
    ConnectionClosed,
    ErrorCode,
    FrameType,
    Op,
    ProtocolError,
)
from rsm.errors import RemoteStorageException
from rsm.redact import redact_configs
from rsm.storage import ObjectStore
from segment_format.buffers import copy_into

log = logging.getLogger(__name__)

RSM_CONFIG_PREFIX = "rsm.config."
BRIDGE_KEY_PREFIX = "bridge."  # keys for the plugin/bridge themselves, not passed to the RSM
SERVER_NAME = "rsm-bridge-python/0.1.0"
_UNIX_PATH_MAX = 107
SMALL_FRAMES_UNTIL = 1024 * 1024
DEFAULT_INITIAL_FRAME_BYTES = 256 * 1024
DRAIN_POLL_S = 0.0002
DRAIN_POLL_MAX_S = 0.004
CANCEL_GRACE_S = 0.001
# glibc mmap threshold for the bridge process (see tune_allocator); glibc caps it at 32 MiB on 64-bit
DEFAULT_MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
DEFAULT_ARENA_BLOCK_BYTES = 4 * 1024 * 1024
KAFKA_READER_THREADS = 10  # remote.log.reader.threads' default: remote fetches open at once
# the default arena's cap (its pages are reserved up front); a bigger chunk cache keeps the rest on the heap
ARENA_MAX_BYTES = 256 * 1024 * 1024
DEFAULT_SEND_BUFFER_BYTES = 1024 * 1024  # the first MiB of a fetch goes out without waiting for the reader

Handler = Callable[["RequestContext"], "dict[str, Any] | None"]


# ------------------------------------------------------------------------------------ configuration


def load_properties(path: Path) -> dict[str, str]:
    """Parse a Java properties file (the broker's server.properties) into a dict.

    Handles comments (# and !), `key=value`, `key: value` and `key value`, trailing-backslash line
    continuations and the common escapes; enough for broker configs, which are simple.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read properties file {path}: {exc.strerror}") from None
    props: dict[str, str] = {}
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip() if not pending else raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        backslashes = len(line) - len(line.rstrip("\\"))
        if backslashes % 2 == 1:
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    for line in logical:
        key, value = _split_property(line)
        props[_unescape(key)] = _unescape(value)
    return props


def _split_property(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=: \t":
            break
        i += 1
    key = line[:i]
    rest = line[i:].lstrip(" \t")
    if rest[:1] in ("=", ":") and (i >= len(line) or line[i] in " \t=:"):
        rest = rest[1:].lstrip(" \t")
    return key, rest


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    mapping = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and i + 5 < len(text) + 0:
                with contextlib.suppress(ValueError):
                    out.append(chr(int(text[i + 2 : i + 6], 16)))
                    i += 6
                    continue
            out.append(mapping.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def split_rsm_configs(props: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Broker properties -> (configs for RemoteStorageManager.configure, bridge.* settings).

    Kafka strips `rsm.config.` before calling configure(); the bridge does the same, and keeps the
    `bridge.*` keys (socket path, command, pool size, ...) for itself.
    """
    rsm_configs: dict[str, str] = {}
    bridge_settings: dict[str, str] = {}
    for key, value in props.items():
        if not key.startswith(RSM_CONFIG_PREFIX):
            continue
        stripped = key[len(RSM_CONFIG_PREFIX) :]
        if stripped.startswith(BRIDGE_KEY_PREFIX):
            bridge_settings[stripped] = value
        else:
            rsm_configs[stripped] = value
    return rsm_configs, bridge_settings


def mask_configs(configs: Mapping[str, str]) -> dict[str, str]:
    """Configs with sensitive values replaced, safe for logs and the configure_info answer (URLs'
    credentials and secret-looking values too: `rsm.redact.redact_configs`)."""
    return redact_configs(configs)


def check_socket_path(path: Path) -> None:
    """Refuse a socket path whose directory others could tamper with, or that cannot be bound.

    The socket is the bridge's only access control: anyone who can connect can read every tiered
    segment.  So its directory must belong to us (or root) and must not be writable by others unless
    it has the sticky bit (like /tmp), or another user could swap the socket for their own.
    """
    path = Path(path)
    if len(os.fsencode(str(path))) > _UNIX_PATH_MAX:
        raise ValueError(f"socket path {path} is longer than {_UNIX_PATH_MAX} bytes (Unix socket limit)")
    parent = path.parent if path.parent != Path("") else Path(".")
    try:
        st = parent.stat()
    except OSError as exc:
        raise ValueError(f"socket directory {parent} is not usable: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"socket directory {parent} is not a directory")
    if st.st_uid not in (os.getuid(), 0):
        raise ValueError(f"socket directory {parent} belongs to uid {st.st_uid}, not to us ({os.getuid()})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        raise ValueError(
            f"socket directory {parent} is writable by group/others without the sticky bit "
            f"(mode {stat.S_IMODE(st.st_mode):o}); use a private directory"
        )


# ------------------------------------------------------------------------------------------- server


@dataclass
class RequestContext:
    """What a handler sees: the decoded header, the payload and the connection's stream writer."""

    op: str
    request_id: int
    header: dict[str, Any]
    payload: bytes | bytearray | memoryview
    server: BridgeServer
    conn: _Connection


@dataclass(eq=False)
class _Connection:
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

    def __post_init__(self) -> None:
        self.reader = protocol.FrameReader(self.sock)


class _Cancelled(Exception):
    pass


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
        self._handlers: dict[str, Handler] = {
            Op.HEALTH: self._op_health,
            Op.CONFIGURE_INFO: self._op_configure_info,
            Op.COPY_LOG_SEGMENT_DATA: self._op_copy,
            Op.DELETE_LOG_SEGMENT_DATA: self._op_delete,
        }
        self._handlers.update(handlers or {})
        self._listener: socket.socket | None = None
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
        self._metadata = protocol.MetadataDecoder()
        self.arena: shm.ChunkArena | None = None
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._conns: set[_Connection] = set()
        self._conns_lock = threading.Lock()
        self._started = time.monotonic()
        self._requests = 0
        self._bytes_streamed = 0
        self._shm_bytes_streamed = 0
        self._arena_bytes_streamed = 0
        self._counters_lock = threading.Lock()  # the byte counters are updated by every connection thread
        self._log_configs_received = 0

    # -- lifecycle --------------------------------------------------------------------------------

    @property
    def ops(self) -> list[str]:
        return sorted({*self._handlers, Op.FETCH_LOG_SEGMENT, Op.FETCH_INDEX})

    def bind(self) -> None:
        """Create the listening socket, owner-only from the first instant (umask), stale file removed."""
        check_socket_path(self.socket_path)
        if self.socket_path.exists() or self.socket_path.is_symlink():
            self._remove_stale_socket()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            listener.bind(str(self.socket_path))
        finally:
            os.umask(old_umask)
        os.chmod(self.socket_path, 0o600)
        if self.shm_enabled:
            try:
                shm.ensure_private_dir(self.shm_dir)
                shm.remove_stale_rings(self.shm_dir)
            except (OSError, ValueError) as exc:
                log.warning("shared-memory transport disabled: %s", exc)
                self.shm_enabled = False
            else:
                self._create_arena()
        listener.listen(128)
        listener.settimeout(0.2)
        self._listener = listener
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
            cache_bytes, block_bytes, prefetch, self.shm_slots * self.shm_slot_bytes
        )
        try:
            self.arena = shm.ChunkArena.create(self.shm_dir, blocks, block_bytes)
        except (OSError, ValueError) as exc:
            log.warning("no shared-memory chunk arena (fetched bytes are copied into ring slots): %s", exc)
            return
        set_allocator(self.arena.allocate)
        log.info("chunk arena: %d blocks of %d bytes", blocks, block_bytes)

    def _remove_stale_socket(self) -> None:
        path = self.socket_path
        st = path.lstat()
        if not stat.S_ISSOCK(st.st_mode):
            raise ValueError(f"{path} exists and is not a socket; refusing to replace it")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.settimeout(1.0)
            probe.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            log.info("removing stale socket %s", path)
            path.unlink(missing_ok=True)
            return
        except OSError as exc:
            raise ValueError(f"cannot probe existing socket {path}: {exc}") from None
        finally:
            probe.close()
        raise ValueError(f"another bridge is already listening on {path}")

    def serve_forever(self, parent_pid: int | None = None) -> None:
        """Accept connections until stop() (or the parent process disappears), then shut down."""
        if self._listener is None:
            self.bind()
        assert self._listener is not None
        last_parent_check = time.monotonic()
        try:
            while not self._stopping.is_set():
                try:
                    sock, _ = self._listener.accept()
                except TimeoutError:
                    if parent_pid is not None and time.monotonic() - last_parent_check > 1.0:
                        last_parent_check = time.monotonic()
                        if not shm.pid_alive(parent_pid):
                            log.warning("parent process %d is gone; bridge stopping", parent_pid)
                            self._stopping.set()
                    continue
                except OSError:
                    if self._stopping.is_set():
                        break
                    raise
                sock.settimeout(None)
                if self.send_buffer_bytes > 0:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer_bytes)
                conn = _Connection(sock=sock, peer=f"fd{sock.fileno()}")
                thread = threading.Thread(target=self._serve_connection, args=(conn,), daemon=True)
                conn.thread = thread
                with self._conns_lock:
                    self._conns.add(conn)
                thread.start()
        finally:
            self._shutdown()

    def stop(self) -> None:
        """Ask the server to stop (safe from signal handlers and other threads)."""
        self._stopping.set()

    def wait_stopped(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)

    def _shutdown(self) -> None:
        log.info("bridge shutting down")
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
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

    def _close_conn(self, conn: _Connection) -> None:
        if conn.closed:
            return
        conn.closed = True
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_RDWR)

    # -- connection loop --------------------------------------------------------------------------

    def _serve_connection(self, conn: _Connection) -> None:
        sock = conn.sock
        try:
            hello = conn.reader.recv_frame()
            if hello.type != FrameType.HELLO:
                self._send_error(
                    conn, hello.request_id, ErrorCode.VERSION_MISMATCH, "first frame must be HELLO"
                )
                return
            try:
                version = protocol.negotiate_version(hello.header)
            except BridgeError as exc:
                self._send_error(conn, 0, exc.code, exc.message)
                return
            conn.peer = str(hello.header.get("client", conn.peer))
            answer: dict[str, Any] = {
                "magic": protocol.MAGIC,
                "version": version,
                "server": SERVER_NAME,
                "ops": self.ops,
                "max_frame_bytes": protocol.MAX_FRAME_BYTES,
                "data_frame_bytes": self.frame_bytes,
                "pid": os.getpid(),
            }
            offered = hello.header.get("capabilities")
            if self.shm_enabled and isinstance(offered, list) and protocol.CAP_SHM in offered:
                try:
                    conn.ring = shm.ShmRing.create(self.shm_dir, self.shm_slots, self.shm_slot_bytes)
                except (OSError, ValueError) as exc:
                    log.warning(
                        "no shared-memory ring for %s (socket data frames instead): %s", conn.peer, exc
                    )
                if conn.ring is not None:
                    answer["capabilities"] = [protocol.CAP_SHM]
                    answer["shm"] = conn.ring.describe()
                    if self.arena is not None:
                        answer["arena"] = self.arena.describe()
            protocol.send_frame(sock, FrameType.HELLO, 0, answer)
            while True:
                frame = conn.reader.recv_frame()
                if conn.ring is not None and not conn.ring.unlinked:
                    conn.ring.unlink()  # the client mapped it (or gave up) before sending anything else
                if frame.type == FrameType.CANCEL:
                    continue  # a late cancel of a stream that had already ended
                if frame.type == FrameType.SHM_RELEASE:
                    self._on_release(conn, frame)
                    continue
                if frame.type != FrameType.REQUEST:
                    self._send_error(
                        conn,
                        frame.request_id,
                        ErrorCode.INVALID_REQUEST,
                        f"unexpected {frame.type.name} frame",
                    )
                    return
                with conn.lock:
                    conn.busy = True
                try:
                    self._dispatch(conn, frame)
                finally:
                    with conn.lock:
                        conn.busy = False
                if self._stopping.is_set():
                    return
        except ConnectionClosed:
            pass
        except ProtocolError as exc:
            log.warning("protocol error from %s: %s", conn.peer, exc)
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
            with self._conns_lock:
                self._conns.discard(conn)

    def _send_error(self, conn: _Connection, request_id: int, code: ErrorCode | str, message: str) -> None:
        protocol.send_frame(conn.sock, FrameType.ERROR, request_id, {"code": str(code), "message": message})

    def _dispatch(self, conn: _Connection, frame: protocol.Frame) -> None:
        op = frame.header.get("op")
        rid = frame.request_id
        self._requests += 1
        if frame.header.get("log_config") is not None:
            self._log_configs_received += 1
        if self._stopping.is_set():
            self._send_error(conn, rid, ErrorCode.SHUTTING_DOWN, "bridge is shutting down")
            return
        if op in (Op.FETCH_LOG_SEGMENT, Op.FETCH_INDEX):
            with self.permits.working():
                self._stream(conn, frame)
            return
        handler = self._handlers.get(op) if isinstance(op, str) else None
        if handler is None:
            self._send_error(conn, rid, ErrorCode.UNSUPPORTED_OPERATION, f"operation {op!r} is not supported")
            return
        ctx = RequestContext(op, rid, frame.header, frame.payload, self, conn)
        try:
            result = handler(ctx)
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller as an ERROR frame
            self._report_failure(conn, rid, op, exc)
            return
        protocol.send_frame(conn.sock, FrameType.RESPONSE, rid, result or {})

    def _report_failure(self, conn: _Connection, rid: int, op: Any, exc: BaseException) -> None:
        code = protocol.error_code_for(exc)
        message = str(exc) or type(exc).__name__
        if code == ErrorCode.INTERNAL:
            log.exception("%s failed with an unexpected error", op)
            message = f"{type(exc).__name__}: {message}"
        elif code != ErrorCode.RESOURCE_NOT_FOUND:
            log.warning("%s failed: %s", op, message)
        self._send_error(conn, rid, code, message)

    # -- operations -------------------------------------------------------------------------------

    def _op_health(self, ctx: RequestContext) -> dict[str, Any]:
        with self._conns_lock:
            conns = list(self._conns)
        return {
            "status": "stopping" if self._stopping.is_set() else "ok",
            "pid": os.getpid(),
            "uptime_ms": int((time.monotonic() - self._started) * 1000),
            "connections": len(conns),
            "in_flight": sum(1 for c in conns if c.busy),
            "requests": self._requests,
            "log_configs_received": self._log_configs_received,
            "server": SERVER_NAME,
            "store_bytes_read": _store_bytes_read(self.rsm),
            "bytes_streamed": self._bytes_streamed,
            "shm_bytes_streamed": self._shm_bytes_streamed,
            "arena_bytes_streamed": self._arena_bytes_streamed,
            "arena_free_blocks": None if self.arena is None else self.arena.free_blocks,
        }

    def _op_configure_info(self, ctx: RequestContext) -> dict[str, Any]:
        return {
            "rsm_class": f"{type(self.rsm).__module__}.{type(self.rsm).__qualname__}",
            "configs": mask_configs(self.configs),
            "data_frame_bytes": self.frame_bytes,
        }

    def _op_copy(self, ctx: RequestContext) -> dict[str, Any]:
        h = ctx.header
        metadata = protocol.decode_metadata(h.get("metadata"))
        segment_data = protocol.decode_segment_data(h.get("segment_data"), bytes(ctx.payload))
        log_config = protocol.decode_log_config(h.get("log_config"))
        custom = self.rsm.copy_log_segment_data(metadata, segment_data, log_config)
        value = None if custom is None else custom.value
        return {"custom_metadata": None if value is None else protocol._b64(bytes(value))}

    def _op_delete(self, ctx: RequestContext) -> dict[str, Any]:
        h = ctx.header
        metadata = protocol.decode_metadata(h.get("metadata"))
        self.rsm.delete_log_segment_data(metadata, protocol.decode_log_config(h.get("log_config")))
        return {}

    def _open_stream(self, header: dict[str, Any]) -> Any:
        op = header.get("op")
        metadata = self._metadata.decode(header.get("metadata"))
        log_config = protocol.decode_log_config(header.get("log_config"))
        if op == Op.FETCH_INDEX:
            return self.rsm.fetch_index(
                metadata, protocol.decode_index_type(header.get("index_type")), log_config
            )
        start = header.get("start_position")
        end = header.get("end_position")
        if not isinstance(start, int) or isinstance(start, bool) or start < 0:
            raise ValueError(f"start_position: expected a non-negative integer, got {start!r}")
        if end is not None and (not isinstance(end, int) or isinstance(end, bool) or end < start):
            raise ValueError(f"end_position: expected an integer >= start_position {start}, got {end!r}")
        return self.rsm.fetch_log_segment(metadata, start, end, log_config)

    def _stream(self, conn: _Connection, frame: protocol.Frame) -> None:
        """Answer a fetch with pieces of the stream then END; an error ends it with ERROR instead.

        One driver for both transports (``_SocketSink``: DATA frames; ``_ShmSink``: ring slots announced
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
        arena = self.arena if ring is not None and frame.header.get("arena") is True else None
        sink: _Sink = (
            _ShmSink(self, conn, rid, ring, arena) if ring is not None else _SocketSink(self, conn, rid)
        )
        sent = 0
        stopped = False
        stream = None
        try:
            try:
                stop_after = _stop_after(frame.header)
                mark = stop_after or SMALL_FRAMES_UNTIL
                stream = self._open_stream(frame.header)
                pieces = _PieceReader(stream, conn)
                data = pieces.read(sink.piece_bytes(0, mark))
            except Exception as exc:  # noqa: BLE001 - mapped to an ERROR frame
                self._report_failure(conn, rid, op, exc)
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
                    self._poll_cancel(conn, rid)
                if self._stopping.is_set():
                    stopped = True
                    break
                try:
                    data = pieces.read(sink.piece_bytes(sent, mark))
                except Exception as exc:  # noqa: BLE001 - mapped to an ERROR frame
                    self._report_failure(conn, rid, op, exc)
                    return
            if stopped:
                self._send_error(conn, rid, ErrorCode.SHUTTING_DOWN, f"bridge stopping after {sent} bytes")
                return
            protocol.send_frame(conn.sock, FrameType.END, rid, {"bytes": sent})
        except _Cancelled:
            protocol.send_frame(conn.sock, FrameType.END, rid, {"bytes": sent, "cancelled": True})
        finally:
            with self._counters_lock:
                self._bytes_streamed += sent
            if stream is not None:
                with contextlib.suppress(Exception):
                    stream.close()

    def _next_frame_within(self, conn: _Connection, timeout: float) -> bool:
        """True when a frame from the client can be read now or arrives within ``timeout`` seconds."""
        if conn.reader.buffered():
            return True
        with self.permits.waiting():
            readable, _, _ = select.select([conn.sock], [], [], timeout)
        return bool(readable)

    def _poll_cancel(self, conn: _Connection, rid: int) -> None:
        """Handle every frame the client has sent so far (non-blocking); raise _Cancelled on its CANCEL."""
        while conn.reader.poll():  # raises ConnectionClosed when the client went away
            self._check_cancel(conn, rid)

    def _check_cancel(self, conn: _Connection, rid: int) -> None:
        frame = conn.reader.recv_frame()  # raises ConnectionClosed when the client went away
        if frame.type == FrameType.CANCEL and frame.request_id == rid:
            raise _Cancelled()
        if frame.type == FrameType.CANCEL:
            return
        if frame.type == FrameType.SHM_RELEASE:
            self._on_release(conn, frame)
            return
        raise ProtocolError(
            f"{frame.type.name} frame {frame.request_id} received while streaming request {rid}"
        )

    def _on_release(self, conn: _Connection, frame: protocol.Frame) -> None:
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


class _Sink:
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

    def parts(self, data: list[memoryview]) -> list[_Part]:
        """The piece as the transport carries it: itself, or split into parts that fit its units."""
        return [_Part(data, None)]

    def await_room(self, part: _Part) -> bool:
        """Block until ``part`` may be delivered; False when the server is stopping."""
        raise NotImplementedError

    def deliver(self, part: _Part, trailer: bytes = b"") -> int:
        """Hand one piece to the client, then the ``trailer`` frame in the same write; returns its size."""
        raise NotImplementedError

    def await_taken(self, grace_s: float) -> None:
        """Wait until the client has taken everything delivered, then ``grace_s`` for its CANCEL."""
        raise NotImplementedError


class _SocketSink(_Sink):
    """DATA frames: a blocking ``sendmsg`` is the flow control (read-ahead = the socket buffer)."""

    def __init__(self, server: BridgeServer, conn: _Connection, rid: int) -> None:
        super().__init__(server, conn, rid)
        self._prefix = bytearray(protocol.PREFIX_SIZE)

    def first_piece_bytes(self) -> int:
        return self.server.initial_frame_bytes

    def full_piece_bytes(self) -> int:
        return self.server.frame_bytes

    def await_room(self, part: _Part) -> bool:
        return True

    def deliver(self, part: _Part, trailer: bytes = b"") -> int:
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


class _ShmSink(_Sink):
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

    def parts(self, data: list[memoryview]) -> list[_Part]:
        arena = self.arena
        if arena is not None and len(data) <= self.ring.slots:
            offsets = [arena.locate(v) for v in data]
            if None not in offsets:
                return [_Part(data, offsets)]  # type: ignore[arg-type]
        # copied into ring slots: one slot per part
        return [_Part(p, None) for p in _split_views(data, self.ring.slot_bytes)]

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

    def await_room(self, part: _Part) -> bool:
        # an arena piece counts for its size in slots (one announcement per view: it may span two chunks)
        views = part.views
        need = 1 if part.offsets is None else min(sum(self._units(len(v)) for v in views), self.ring.slots)
        if self._room() < need:
            self._await_free(need)
        return self._room() >= need

    def deliver(self, part: _Part, trailer: bytes = b"") -> int:
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


class _Part(NamedTuple):
    """What one announcement (or one socket frame) carries: views, and their arena offsets when the
    piece lies in the chunk arena (None: it is copied into a ring slot, or sent on the socket)."""

    views: list[memoryview]
    offsets: list[int] | None


def _split_views(data: list[memoryview], limit: int) -> list[list[memoryview]]:
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


def _stop_after(header: Mapping[str, Any]) -> int | None:
    """The request's ``stop_after`` (answer at most that many bytes, then END "more"), or None."""
    value = header.get("stop_after")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"stop_after: expected a positive integer, got {value!r}")
    return value


class _PieceReader:
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


def _store_bytes_read(rsm: Any) -> int | None:
    """Bytes the RSM has read from its object store (None if it does not count): the benchmark compares
    storage reads per byte delivered through the bridge and in process."""
    stats = getattr(getattr(rsm, "store", None), "stats", None)
    try:
        return int(stats.snapshot()["bytes_read"]) if stats is not None else None
    except Exception:  # noqa: BLE001 - a diagnostic only
        return None


def default_arena_blocks(cache_bytes: int, block_bytes: int, prefetch: int, read_ahead_bytes: int) -> int:
    """How many chunk blocks the default arena has: the chunk cache's, plus what Kafka's remote readers
    may hold at once - each its stream's current chunk, its prefetches, and the chunks its read-ahead
    (a ring's worth of announced, unreleased pieces) spans - at most ``ARENA_MAX_BYTES``.

    Why that many: when every block is taken a chunk is decoded on the heap and copied into a ring slot
    instead (measured: with 16 spare blocks, ten streaming readers sent 41% of their bytes that way).
    """
    per_reader = 1 + prefetch + -(-read_ahead_bytes // block_bytes) + 1  # + 1: read-ahead straddling two
    wanted = cache_bytes // block_bytes + KAFKA_READER_THREADS * per_reader
    return max(1, min(wanted, ARENA_MAX_BYTES // block_bytes))


def tune_allocator(mmap_threshold: int = DEFAULT_MMAP_THRESHOLD_BYTES) -> bool:
    """Keep large buffers (decoded chunks, several MiB each) in glibc's heap instead of fresh mmaps.

    Why: every chunk a fetch decodes allocates a few buffers of the chunk size; above glibc's mmap
    threshold each is a new mapping, page-faulted in and unmapped again, and those faults cost more CPU
    than the decryption and decompression themselves (measured: a cold compressed+encrypted 1 MiB
    fetch took about 4x the CPU). With a higher threshold (and trim threshold) freed chunks are reused.
    Returns False where it does not apply (not glibc, or ``mmap_threshold`` <= 0).
    """
    if mmap_threshold <= 0 or not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's mallopt parameter numbers
        return bool(libc.mallopt(m_mmap_threshold, mmap_threshold)) and bool(
            libc.mallopt(m_trim_threshold, 4 * mmap_threshold)
        )
    except (OSError, AttributeError):
        return False


def _load_class(spec: str) -> type:
    module_name, _, attr = spec.partition(":")
    if not attr:
        module_name, _, attr = spec.rpartition(".")
    module = importlib.import_module(module_name)
    return getattr(module, attr)


def serve(
    config_path: Path,
    socket_path: Path | None,
    *,
    rsm_class: str | None = None,
    parent_pid: int | None = None,
) -> int:
    """`rsm bridge serve`: configure the RSM from a broker properties file and serve until SIGTERM."""
    props = load_properties(config_path)
    rsm_configs, settings = split_rsm_configs(props)
    if socket_path is None:
        raw = settings.get("bridge.socket.path")
        if not raw:
            raise ValueError(f"no --socket given and no rsm.config.bridge.socket.path in {config_path}")
        socket_path = Path(raw)
    frame_bytes = int(settings.get("bridge.frame.bytes", DEFAULT_DATA_FRAME_BYTES))
    initial_frame_bytes = int(settings.get("bridge.frame.initial.bytes", DEFAULT_INITIAL_FRAME_BYTES))
    grace = float(settings.get("bridge.shutdown.grace.ms", "10000")) / 1000.0
    send_buffer = int(settings.get("bridge.socket.send.buffer.bytes", DEFAULT_SEND_BUFFER_BYTES))
    mmap_threshold = int(settings.get("bridge.malloc.mmap.threshold.bytes", DEFAULT_MMAP_THRESHOLD_BYTES))
    transport = settings.get("bridge.transport", "shm").strip().lower()
    if transport not in ("shm", "socket"):
        raise ValueError(f"bridge.transport={transport!r}: expected 'shm' or 'socket'")
    shm_dir_raw = settings.get("bridge.shm.dir")
    permits_raw = settings.get("bridge.fetch.permits", "").strip()
    arena_raw = settings.get("bridge.arena.blocks", "").strip()
    if tune_allocator(mmap_threshold):
        log.info("glibc mmap threshold set to %d bytes", mmap_threshold)
    if rsm_class:
        cls = _load_class(rsm_class)
    else:
        from rsm import RemoteStorageManager as cls  # noqa: N813 - the default class
    rsm = cls()
    log.info("configuring %s with %s", cls.__name__, mask_configs(rsm_configs))
    rsm.configure(dict(rsm_configs))
    server = BridgeServer(
        rsm,
        socket_path,
        configs=rsm_configs,
        frame_bytes=frame_bytes,
        initial_frame_bytes=initial_frame_bytes,
        shutdown_grace_s=grace,
        send_buffer_bytes=send_buffer,
        shm_enabled=transport == "shm",
        shm_dir=Path(shm_dir_raw) if shm_dir_raw else None,
        shm_slots=int(settings.get("bridge.shm.slots", shm.DEFAULT_SLOTS)),
        shm_slot_bytes=int(settings.get("bridge.shm.slot.bytes", shm.DEFAULT_SLOT_BYTES)),
        fetch_permits=int(permits_raw) if permits_raw else None,
        arena_blocks=int(arena_raw) if arena_raw else None,
    )
    server.bind()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal %d received", signum)
        server.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.serve_forever(parent_pid=parent_pid)
    return 0
