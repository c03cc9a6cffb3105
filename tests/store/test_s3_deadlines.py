"""S3 requests have deadlines.

An endpoint that accepts connections and never answers, or answers the headers and then stalls mid-body,
used to keep a fetch retrying for more than nine minutes (s3fs's nested retry loops around botocore's, 15 s
reads), past the bridge's 300 s request timeout, holding one of Kafka's remote reader threads. Now connect
and read timeouts, botocore's attempts and an overall per-request deadline (`rsm.config.storage.s3.*`)
bound every store request, and the operation fails with a RemoteStorageException naming the object.

The stalling endpoints are real TCP servers on 127.0.0.1 speaking (just enough) HTTP; where the test needs a
real S3 it uses moto's server (the `s3_server` fixture) over HTTP. Wall-clock assertions are generous
bounds (the machine is shared); each test asserts that the call failed, and how.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from kafka_segments import make_segment

from rsm import RemoteStorageException, RemoteStorageManager, TopicIdPartition
from rsm.api.errors import ConfigException
from rsm.config.settings import RsmConfig
from rsm.store.layout import Location, SegmentKeys
from rsm.stored import custom_metadata as cm

BUCKET = "stalled-bucket"
GENEROUS = 30.0  # seconds: a bound no deadline below should come near; before the fix calls ran minutes


class StallingServer:
    """A TCP server on 127.0.0.1 that answers HTTP requests with ``respond(method, path)``.

    ``respond`` returns the bytes to send, or None to stall: read nothing more and answer nothing until the
    server stops (a peer gone silent). Each connection runs in its own daemon thread.
    """

    def __init__(self, respond: Callable[[str, str], bytes | None]) -> None:
        self.respond = respond
        self.requests: list[tuple[str, str]] = []
        self._stop = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._conns: list[socket.socket] = []
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        while not self._stop.is_set():
            while b"\r\n\r\n" not in buf:
                try:
                    more = conn.recv(65536)
                except OSError:
                    return
                if not more:
                    return
                buf += more
            head, _, buf = buf.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            length = next(
                (
                    int(v)
                    for k, _, v in (h.partition(":") for h in lines[1:])
                    if k.lower() == "content-length"
                ),
                0,
            )
            while len(buf) < length:  # a request body (PUT): read it, answer after
                more = conn.recv(65536)
                if not more:
                    return
                buf += more
            buf = buf[length:]
            path = urlsplit(target).path
            self.requests.append((method, path))
            answer = self.respond(method, path)
            if answer is None:
                self._stop.wait()
                return
            conn.sendall(answer)

    def stop(self) -> None:
        self._stop.set()
        self._sock.close()
        for conn in self._conns:
            conn.close()


def silent(method: str, path: str) -> bytes | None:
    """Accept, never answer."""
    return None


def headers_then_stall(method: str, path: str) -> bytes | None:
    """Answer a 200 with a long body, send ten bytes of it, then stall (a GET cut off mid-body)."""
    head = b'HTTP/1.1 200 OK\r\nContent-Length: 100000\r\nETag: "e"\r\n\r\n'
    if method == "HEAD":
        return head
    return head + b"x" * 10 if method == "GET" else None


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[StallingServer]:
    srv = StallingServer(request.param)
    try:
        yield srv
    finally:
        srv.stop()


def _configs(endpoint: str, **timeouts: str) -> dict[str, str]:
    return {
        "storage.backend": "s3",
        "storage.s3.endpoint.url": endpoint,
        "storage.s3.region": "us-east-1",
        "storage.s3.access.key.id": "testing",
        "storage.s3.secret.access.key": "testing",
        "bucket": BUCKET,
        **{f"storage.s3.{k.replace('_', '.')}": v for k, v in timeouts.items()},
    }


def _fails_within(seconds: float, call: Callable[[], object]) -> tuple[BaseException, float]:
    """Run ``call`` in a daemon thread; the exception it raised and how long it took. Fails the test if it
    is still running after ``seconds`` (it is left to its daemon thread) or if it returned."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)
        else:
            outcome.append(None)

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    elapsed = time.monotonic() - started
    if thread.is_alive():
        pytest.fail(f"still waiting on the stalled endpoint after {seconds:.0f} s")
    assert outcome and outcome[0] is not None, "the call succeeded against a stalled endpoint"
    return outcome[0], elapsed


def _segment(tmp_path: Path) -> Any:
    return make_segment(tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "deadlines", 0), batches=5)


def _fetch(rsm: RemoteStorageManager, tmp_path: Path) -> Callable[[], object]:
    seg = _segment(tmp_path)
    md = dataclasses.replace(seg.metadata, custom_metadata=cm.encode(Location(BUCKET, "")))
    return lambda: rsm.fetch_log_segment(md, 0).read()


def _copy(rsm: RemoteStorageManager, tmp_path: Path) -> Callable[[], object]:
    seg = _segment(tmp_path)
    return lambda: rsm.copy_log_segment_data(seg.metadata, seg.data)


@pytest.mark.parametrize(
    "server", [silent, headers_then_stall], indirect=True, ids=["silent", "stall-mid-body"]
)
@pytest.mark.parametrize("operation", [_fetch, _copy], ids=["fetch", "copy"])
def test_the_overall_deadline_ends_a_stalled_operation(
    server: StallingServer, tmp_path: Path, operation: Callable[..., Callable[[], object]]
) -> None:
    """Reads could wait 10 s each, but the whole request, retries included, has 3 s (enough for a loaded
    machine to connect and send the request; the assertions below hold whatever the load)."""
    rsm = RemoteStorageManager()
    rsm.configure(_configs(server.endpoint_url, read_timeout_ms="10000", request_timeout_ms="3000"))
    try:
        exc, elapsed = _fails_within(GENEROUS, operation(rsm, tmp_path))
    finally:
        rsm.close()
    assert isinstance(exc, RemoteStorageException), repr(exc)
    assert "storage.s3.request.timeout.ms" in str(exc) and "within 3 s" in str(exc), exc
    assert f"s3://{BUCKET}/" in str(exc) and "testing" not in str(exc)
    assert elapsed < 10, elapsed  # well before one read timeout: the deadline ended it
    assert server.requests, "the store never reached the endpoint"


@pytest.mark.parametrize("server", [silent], indirect=True)
def test_read_timeouts_and_bounded_attempts_end_a_stalled_fetch(
    server: StallingServer, tmp_path: Path
) -> None:
    """With the overall deadline far away, each read gives up after 0.3 s and botocore tries twice."""
    rsm = RemoteStorageManager()
    rsm.configure(
        _configs(
            server.endpoint_url, read_timeout_ms="300", request_timeout_ms="120000", retry_max_attempts="2"
        )
    )
    try:
        exc, elapsed = _fails_within(GENEROUS, _fetch(rsm, tmp_path))
    finally:
        rsm.close()
    assert isinstance(exc, RemoteStorageException), repr(exc)
    assert "timeout" in str(exc).lower() and f"s3://{BUCKET}/" in str(exc), exc
    assert len(server.requests) == 2, server.requests  # two attempts, no retry loop around them
    assert elapsed < 15, elapsed


def test_a_chunk_read_that_stalls_mid_fetch_fails_in_time(s3_server: Any, tmp_path: Path) -> None:
    """A segment copied to (moto's) S3; then the endpoint serves its manifest but stalls on the chunks:
    the stream Kafka is reading fails within the deadline instead of holding the reader thread."""
    bucket = s3_server.make_bucket()
    seg = _segment(tmp_path)
    writer = RemoteStorageManager()
    writer.configure(s3_server.rsm_configs(bucket=bucket, **{"storage.s3.request.timeout.ms": "30000"}))
    try:
        md = dataclasses.replace(
            seg.metadata, custom_metadata=writer.copy_log_segment_data(seg.metadata, seg.data)
        )
    finally:
        writer.close()
    keys = SegmentKeys.of(Location(bucket, ""), md)
    manifest = s3_server.boto3_client().get_object(Bucket=bucket, Key=keys.manifest)["Body"].read()

    def respond(method: str, path: str) -> bytes | None:
        if not path.endswith(keys.manifest):
            return None  # the chunks of the .log object: stall
        head = f'HTTP/1.1 200 OK\r\nContent-Length: {len(manifest)}\r\nETag: "m"\r\n\r\n'.encode()
        return head if method == "HEAD" else head + manifest

    server = StallingServer(respond)
    reader = RemoteStorageManager()
    reader.configure(
        {**s3_server.rsm_configs(), "storage.s3.endpoint.url": server.endpoint_url,
         "storage.s3.request.timeout.ms": "4000"}
    )  # fmt: skip
    try:
        stream = reader.fetch_log_segment(md, 0)  # the manifest is served: the stream opens
        exc, _ = _fails_within(GENEROUS, stream.read)
        stream.close()
    finally:
        reader.close()
        server.stop()
    assert isinstance(exc, RemoteStorageException), repr(exc)
    assert keys.log in str(exc) and "storage.s3.request.timeout.ms" in str(exc), exc


def test_deadline_settings_defaults_and_bounds() -> None:
    """Defaults stay well below the bridge's 300 s request timeout (Kafka's reader threads wait on it);
    nonsense values are refused naming the key."""
    config = RsmConfig({"storage.backend": "s3"})
    assert config.get("storage.s3.connect.timeout.ms") == 5_000
    assert config.get("storage.s3.read.timeout.ms") == 20_000
    assert config.get("storage.s3.request.timeout.ms") == 60_000
    assert config.get("storage.s3.retry.max.attempts") == 3
    # a fetch makes at most two requests in a row before its first bytes (manifest, chunk): both fit
    assert 2 * int(config.get("storage.s3.request.timeout.ms")) < 300_000  # type: ignore[arg-type]
    for key, bad in [
        ("storage.s3.connect.timeout.ms", "0"),
        ("storage.s3.read.timeout.ms", "-5"),
        ("storage.s3.request.timeout.ms", "soon"),
        ("storage.s3.retry.max.attempts", "0"),
    ]:
        with pytest.raises(ConfigException, match=key.replace(".", r"\.")):
            RsmConfig({"storage.backend": "s3", key: bad})
