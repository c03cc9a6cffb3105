"""A fault-injecting HTTP reverse proxy in front of an S3 endpoint (moto's server in the tests).

The RSM is pointed at the proxy (`storage.s3.endpoint.url`); the proxy forwards each request to the real
endpoint and, as a seeded schedule decides, answers it with a fault instead of (or after) forwarding it:

| kind | what the client sees | forwarded? |
| --- | --- | --- |
| `error500` | `500 InternalError` with S3's XML error body (connection kept) | as drawn |
| `slowdown503` | `503 SlowDown` with S3's XML error body (connection kept) | as drawn |
| `reset_before` | the connection reset (RST) before any byte of the answer | as drawn |
| `reset_after` | the real status line and headers, then a reset (a bodiless answer may be whole) | yes |
| `stall` | nothing for `stall_seconds` (longer than the client's read timeout), then a close | as drawn |
| `stall_body` | the real headers and half the body, then nothing for `stall_seconds`, then a close | yes |
| `truncate` | the real headers (Content-Length N), fewer than N body bytes, a close (no body: part of the head) | yes |

"Forwarded" means the request reached the endpoint and took effect there (a PUT landed, a DELETE
deleted) although the client saw a failure: what a real network does to a client.

Bounds: a fault hits only a fraction of requests (`rate`), at most `max_faults` of them in all and at most
`max_stalls` stalls, each stall at most `stall_seconds`; `pass_through()` ends the faults. The schedule is a
`random.Random(seed)` drawn once per request in arrival order, so a sequential client meets the same
faults on every run. A `stall_body` for an answer without a body (PUT, DELETE, HEAD) sends the headers and
stalls.

`fail_next(kind, method, suffix, times)` scripts faults on top of the schedule: the next ``times``
requests of ``method`` whose path ends with ``suffix`` meet ``kind`` (a targeted test).

`black_hole(methods)` swallows every request of those methods from then on: read, never forwarded, never
answered, the connection held open (a firewall dropping packets, an endpoint that stopped answering
writes), or from the first request of a method and path suffix on (`starting_at`: the data upload, so
the clean-up after it meets the hole too); `lift_black_hole()` closes the held connections without an answer (what was swallowed never
reaches the endpoint) and lets requests through again. Each swallowed request counts as a `black_hole`.

`stats` counts requests, faults by kind and the retries seen: a request identical (method, path, query,
Range) to one that met a fault and has not been sent again yet.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import random
import socket
import struct
import threading
import uuid
from collections import Counter
from dataclasses import dataclass, field
from types import TracebackType
from typing import BinaryIO
from urllib.parse import urlsplit

from harness.ports import LOOPBACK

log = logging.getLogger(__name__)

KINDS = ("error500", "slowdown503", "reset_before", "reset_after", "stall", "stall_body", "truncate")
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "expect",
    }
)
MAX_HEAD_BYTES = 64 * 1024


@dataclass(frozen=True)
class Fault:
    """One decision of the schedule: ``kind`` (None: pass), whether the request is forwarded first, and for
    a truncation the fraction of the body sent."""

    kind: str | None
    forward: bool = True
    keep: float = 0.5


@dataclass
class FaultSchedule:
    """Which requests meet which fault, from a fixed seed (see the module)."""

    seed: int
    rate: float = 0.25
    max_faults: int = 20
    max_stalls: int = 3
    stall_seconds: float = 1.5
    kinds: tuple[str, ...] = KINDS
    _rng: random.Random = field(init=False, repr=False)
    _faults: int = field(default=0, init=False)
    _stalls: int = field(default=0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        unknown = set(self.kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}")
        self._rng = random.Random(self.seed)

    def next(self) -> Fault:
        """The decision for the next request (always drawn the same way, so the sequence is the seed's)."""
        with self._lock:
            rng = self._rng
            hit, kind, forward, keep = rng.random(), rng.choice(self.kinds), rng.random() < 0.5, rng.random()
            if hit >= self.rate or self._faults >= self.max_faults:
                return Fault(None)
            if kind in ("stall", "stall_body"):
                if self._stalls >= self.max_stalls:
                    return Fault(None)
                self._stalls += 1
            self._faults += 1
            if kind in ("reset_after", "truncate", "stall_body"):
                forward = True  # the answer's headers come from the endpoint
            return Fault(kind, forward, keep)


@dataclass
class ProxyStats:
    requests: int = 0
    forwarded: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    retries: int = 0

    def as_dict(self) -> dict[str, object]:
        return {
            "requests": self.requests,
            "forwarded": self.forwarded,
            "faults": dict(sorted(self.faults.items())),
            "retries": self.retries,
        }


@dataclass
class _Request:
    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name), None)

    @property
    def identity(self) -> tuple[str, str, str | None]:
        return (self.method, self.target, self.header("range"))


class FaultProxy:
    """A reverse proxy on 127.0.0.1 in front of ``upstream_url`` injecting ``schedule``'s faults.

    ``start()``/``stop()`` or a context manager; ``endpoint_url`` is what clients use. Each client
    connection runs in a daemon thread with its own connection to the endpoint.
    """

    def __init__(self, upstream_url: str, schedule: FaultSchedule | None = None) -> None:
        parts = urlsplit(upstream_url)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"the upstream must be http://host:port, not {upstream_url!r}")
        self.upstream = (parts.hostname, parts.port)
        self.schedule = schedule
        self.stall_seconds = schedule.stall_seconds if schedule is not None else 1.5
        self._scripted: list[tuple[str, str, Fault]] = []  # (method, path suffix, fault), in order
        self.stats = ProxyStats()
        self.log: list[tuple[str, str, str | None]] = []  # (method, target, fault kind) per request
        self._faulted: set[tuple[str, str, str | None]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._passing = threading.Event()
        self._holed: frozenset[str] = frozenset()  # methods the black hole swallows
        self._lifted = threading.Event()
        self._hole_start: tuple[str, str] | None = None  # the request that opens the black hole
        self._sock: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self.port = 0

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> FaultProxy:
        self._sock = socket.create_server((LOOPBACK, 0))
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._accept, name=f"fault-proxy-{self.port}", daemon=True).start()
        return self

    def pass_through(self) -> None:
        """No more faults: every request from now on is forwarded and answered as the endpoint answers."""
        self._passing.set()

    def fail_next(self, kind: str, method: str, suffix: str, times: int = 1, forward: bool = True) -> None:
        """The next ``times`` ``method`` requests whose path ends with ``suffix`` meet ``kind``."""
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind!r}")
        with self._lock:
            forward = forward or kind in ("reset_after", "truncate", "stall_body")
            self._scripted += [(method, suffix, Fault(kind, forward))] * times

    def drop_scripted(self) -> None:
        """Forget the scripted faults not met yet (a request retried fewer times than scripted)."""
        with self._lock:
            self._scripted.clear()

    def black_hole(
        self,
        methods: tuple[str, ...] = ("PUT", "POST", "DELETE", "PATCH"),
        starting_at: tuple[str, str] | None = None,
    ) -> None:
        """From now on requests of ``methods`` are swallowed (see the module); with ``starting_at``
        (method, path suffix), from the first such request on (it is swallowed too)."""
        with self._lock:
            self._lifted.clear()
            self._holed = frozenset(methods)
            self._hole_start = starting_at

    def lift_black_hole(self) -> None:
        """Close the swallowed requests' connections unanswered; requests pass again."""
        with self._lock:
            self._holed = frozenset()
            self._hole_start = None
            self._lifted.set()

    def _swallowed(self, request: _Request) -> bool:
        """Whether the black hole takes ``request``; if so, wait until it is lifted (or the proxy stops)."""
        with self._lock:
            if request.method not in self._holed:
                return False
            if self._hole_start is not None:
                method, suffix = self._hole_start
                if request.method != method or not urlsplit(request.target).path.endswith(suffix):
                    return False
                self._hole_start = None  # the hole is open from here on
            self.stats.requests += 1
            self.stats.faults["black_hole"] += 1
            self.log.append((request.method, request.target, "black_hole"))
        while not (self._lifted.is_set() or self._stop.is_set()):
            self._lifted.wait(0.2)
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._sock is not None:
            self._sock.close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- connections --------------------------------------------------------------------------------------
    def _accept(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self._conns.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        upstream: http.client.HTTPConnection | None = None
        reader = conn.makefile("rb")
        try:
            while not self._stop.is_set():
                request = self._read_request(conn, reader)
                if request is None or self._swallowed(request):
                    return
                fault = self._decide(request)
                if fault.kind is None or fault.forward:
                    if upstream is None:
                        upstream = http.client.HTTPConnection(*self.upstream, timeout=60)
                    try:
                        answer = self._forward(upstream, request)
                    except (OSError, http.client.HTTPException):
                        log.warning("fault proxy: upstream failed for %s %s", request.method, request.target)
                        upstream.close()
                        upstream = None
                        return
                    with self._lock:
                        self.stats.forwarded += 1
                else:
                    answer = None
                if not self._answer(conn, request, fault, answer):
                    return
        except OSError:
            return  # the client went away
        finally:
            if upstream is not None:
                upstream.close()
            with contextlib.suppress(OSError):
                reader.close()
            with contextlib.suppress(OSError):
                conn.close()
            with self._lock:
                self._conns.discard(conn)

    def _decide(self, request: _Request) -> Fault:
        fault = Fault(None) if self.schedule is None or self._passing.is_set() else self.schedule.next()
        with self._lock:
            path = urlsplit(request.target).path
            for i, (method, suffix, scripted) in enumerate(self._scripted):
                if not self._passing.is_set() and request.method == method and path.endswith(suffix):
                    fault = scripted
                    del self._scripted[i]
                    break
            self.stats.requests += 1
            identity = request.identity
            if identity in self._faulted:
                self._faulted.discard(identity)
                self.stats.retries += 1
            if fault.kind is not None:
                self._faulted.add(identity)
                self.stats.faults[fault.kind] += 1
            self.log.append((request.method, request.target, fault.kind))
        return fault

    # -- HTTP ---------------------------------------------------------------------------------------------
    @staticmethod
    def _read_request(conn: socket.socket, reader: BinaryIO) -> _Request | None:
        line = reader.readline(MAX_HEAD_BYTES)
        if not line:
            return None
        method, target, version = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
        headers: list[tuple[str, str]] = []
        while True:
            raw = reader.readline(MAX_HEAD_BYTES)
            if not raw:
                return None
            if raw in (b"\r\n", b"\n"):
                break
            name, _, value = raw.decode("latin-1").partition(":")
            headers.append((name.strip(), value.strip()))
        request = _Request(method, target, version, headers, b"")
        if (request.header("expect") or "").lower() == "100-continue":
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        if (request.header("transfer-encoding") or "").lower() == "chunked":
            parts = []
            while True:
                size = int(reader.readline(MAX_HEAD_BYTES).split(b";")[0].strip(), 16)
                if size == 0:
                    while reader.readline(MAX_HEAD_BYTES) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                parts.append(reader.read(size))
                reader.readline(MAX_HEAD_BYTES)
            request.body = b"".join(parts)
        else:
            length = int(request.header("content-length") or 0)
            request.body = reader.read(length) if length else b""
            if len(request.body) != length:
                return None
        return request

    @staticmethod
    def _forward(
        upstream: http.client.HTTPConnection, request: _Request
    ) -> tuple[http.client.HTTPResponse, bytes]:
        upstream.putrequest(request.method, request.target, skip_host=True, skip_accept_encoding=True)
        for name, value in request.headers:
            if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                upstream.putheader(name, value)
        if request.body or request.method in ("PUT", "POST"):
            upstream.putheader("Content-Length", str(len(request.body)))
        upstream.endheaders(request.body or None)
        response = upstream.getresponse()
        body = response.read()
        if response.will_close:
            upstream.close()
        return response, body

    def _answer(
        self,
        conn: socket.socket,
        request: _Request,
        fault: Fault,
        answer: tuple[http.client.HTTPResponse, bytes] | None,
    ) -> bool:
        """Send the answer ``fault`` calls for; False when the connection is to be closed."""
        kind = fault.kind
        if kind in ("error500", "slowdown503"):
            status, code, message = (
                (500, "InternalError", "We encountered an internal error. Please try again.")
                if kind == "error500"
                else (503, "SlowDown", "Please reduce your request rate.")
            )
            conn.sendall(_s3_error(request, status, code, message))
            return True
        if kind == "reset_before":
            _reset(conn)
            return False
        if kind == "stall" or (kind == "stall_body" and answer is None):
            self._stop.wait(self.stall_seconds)
            return False
        assert answer is not None
        response, body = answer
        head = _response_head(request, response, body)
        if kind == "stall_body":
            conn.sendall(head + (b"" if request.method == "HEAD" else body[: len(body) // 2]))
            self._stop.wait(self.stall_seconds)
            return False
        if kind == "truncate":
            if len(body) > 1 and request.method != "HEAD":
                conn.sendall(head + body[: min(len(body) - 1, int(len(body) * fault.keep))])
            else:  # no body to cut: the head is cut instead
                conn.sendall(head[: max(1, int(len(head) * fault.keep))])
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_WR)
            return False
        if kind == "reset_after":
            conn.sendall(head)
            _reset(conn)
            return False
        conn.sendall(head + (b"" if request.method == "HEAD" else body))
        return not response.will_close and (request.header("connection") or "").lower() != "close"


def _response_head(request: _Request, response: http.client.HTTPResponse, body: bytes) -> bytes:
    lines = [f"HTTP/1.1 {response.status} {response.reason}"]
    for name, value in response.getheaders():
        low = name.lower()
        if low in HOP_BY_HOP or (low == "content-length" and request.method != "HEAD"):
            continue
        lines.append(f"{name}: {value}")
    if request.method != "HEAD" and response.status not in (204, 304):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _s3_error(request: _Request, status: int, code: str, message: str) -> bytes:
    """S3's error answer: the XML body (none for HEAD), a request id, the connection kept open."""
    request_id = uuid.uuid4().hex[:16].upper()
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        f"<RequestId>{request_id}</RequestId><HostId>fault-proxy</HostId></Error>"
    ).encode()
    reason = "Internal Server Error" if status == 500 else "Slow Down"
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n"
        f"x-amz-request-id: {request_id}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head if request.method == "HEAD" else head + body


def _reset(conn: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a peer or middlebox dropping the connection does."""
    with contextlib.suppress(OSError):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        conn.close()
