"""Hostile and careless clients against the bridge process: its memory and threads stay bounded.

Each test starts a real ``rsm bridge serve`` (hosting test_bridge_server's in-memory RSM) and reads the
process's own figures from ``/proc/<pid>/status`` (VmRSS, RssShmem, Threads), so what is measured is the
bridge, not pytest. Bounds are margins over a baseline taken in the same run, never speeds; the waits
are for events (the bridge closing a connection), with generous deadlines.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import stat
import struct
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from harness.waiting import wait_until
from test_bridge_server import REPO, TESTS_DIR, tempfile_dir

from rsm.bridge import protocol
from rsm.bridge.client import BridgeClient
from rsm.bridge.protocol import FrameType
from rsm.cli.bridge import serve_command

MIB = 1024 * 1024

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/<pid>/status")


@dataclass
class Bridge:
    """A ``rsm bridge serve`` process and where it lives."""

    proc: subprocess.Popen
    socket: Path
    shm_dir: Path
    log: Path

    def status(self) -> dict[str, int]:
        """``/proc/<pid>/status``: the kB fields in bytes, the others as they are (Threads)."""
        out: dict[str, int] = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            parts = value.split()
            if len(parts) == 2 and parts[1] == "kB":
                out[key] = int(parts[0]) * 1024
            elif len(parts) == 1 and parts[0].isdigit():
                out[key] = int(parts[0])
        return out

    def rss(self) -> int:
        return self.status()["VmRSS"]

    def threads(self) -> int:
        return self.status()["Threads"]

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def client(self, **kwargs: object) -> BridgeClient:
        return BridgeClient(self.socket, timeout=10, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def start_bridge() -> Iterator[Callable[..., Bridge]]:
    """``start_bridge(**settings)``: a bridge with ``rsm.config.bridge.<key>=<value>`` for each setting
    (dots for underscores), its rings in a private directory on /dev/shm (tmpfs, as in production)."""
    started: list[tuple[Bridge, Path]] = []

    def start(**settings: object) -> Bridge:
        base = Path(tempfile_dir()) / f"rsmh-{uuid.uuid4().hex[:8]}"
        base.mkdir(mode=0o700)
        shm_root = Path("/dev/shm") if Path("/dev/shm").is_dir() else base
        shm_dir = shm_root / f"rsmh-shm-{uuid.uuid4().hex[:8]}"
        lines = ["rsm.config.bucket=x", f"rsm.config.bridge.shm.dir={shm_dir}"]
        lines += [f"rsm.config.bridge.{k.replace('_', '.')}={v}" for k, v in settings.items()]
        cfg = base / "server.properties"
        cfg.write_text("\n".join(lines) + "\n")
        log = base / "bridge.log"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS_DIR), str(REPO)]))
        with log.open("wb") as out:
            proc = subprocess.Popen(
                serve_command(cfg, base / "b.sock", "--rsm-class", "test_bridge_server:MemoryRSM"),
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        bridge = Bridge(proc, base / "b.sock", shm_dir, log)
        started.append((bridge, base))

        def up() -> bool:
            assert proc.poll() is None, bridge.log_text()
            try:
                with contextlib.closing(bridge.client()) as client:
                    return client.health()["status"] == "ok"
            except Exception:  # noqa: BLE001 - not listening yet
                return False

        wait_until("the bridge to answer", up, 30, interval=0.05)
        return bridge

    yield start
    for bridge, base in started:
        if bridge.proc.poll() is None:
            bridge.proc.terminate()
            try:
                bridge.proc.wait(15)
            except subprocess.TimeoutExpired:
                bridge.proc.kill()
                bridge.proc.wait()
        for d in (bridge.shm_dir, base):
            if d.exists():
                for p in sorted(d.rglob("*"), reverse=True):
                    p.rmdir() if p.is_dir() else p.unlink()
                d.rmdir()


def connect(path: Path) -> socket.socket:
    """A connected socket; a full listen backlog makes connect wait (up to 10 s), not fail."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 10, 0))
    s.connect(str(path))
    s.settimeout(10)
    return s


def handshake(path: Path, caps: list[str] | None = None) -> tuple[socket.socket, dict]:
    s = connect(path)
    protocol.send_frame(s, FrameType.HELLO, 0, protocol.client_hello("hostile-test", caps))
    hello = protocol.recv_frame(s)
    assert hello.type == FrameType.HELLO, hello
    return s, hello.header


class Closures:
    """Which of many sockets the bridge has closed: each is read (frames it sent kept) until EOF."""

    def __init__(self, socks: list[socket.socket]) -> None:
        self.open = {s.fileno(): s for s in socks}
        self.received: dict[int, bytes] = {s.fileno(): b"" for s in socks}

    def poll(self, timeout: float = 0.0) -> int:
        """Read what has arrived; returns how many are still open."""
        p = select.poll()
        for fd in self.open:
            p.register(fd, select.POLLIN)
        for fd, _ in p.poll(timeout * 1000):
            s = self.open[fd]
            try:
                data = s.recv(65536, socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if data:
                self.received[fd] += data
            else:
                del self.open[fd]
        return len(self.open)

    def first_frames(self) -> list[protocol.Frame]:
        """The first frame each closed socket received (those that received one)."""
        frames = []
        for raw in self.received.values():
            if len(raw) >= protocol.PREFIX_SIZE:
                length = int.from_bytes(raw[:4], "big")
                view = memoryview(raw)[: 4 + length]
                frame_type, rid, header, at = protocol._parse_head(view)
                frames.append(protocol.Frame(frame_type, rid, header, bytes(view[at:])))
        return frames


def wait_closed(closures: Closures, timeout: float, sample: Callable[[], None] = lambda: None) -> int:
    """Poll until every socket is closed or ``timeout``; ``sample`` runs between polls. Returns how many
    are still open."""
    deadline = time.monotonic() + timeout
    left = closures.poll()
    while left and time.monotonic() < deadline:
        sample()
        left = closures.poll(0.05)
    sample()
    return left


def test_the_socket_file_appears_only_once_the_bridge_listens(tmp_path, monkeypatch) -> None:
    """Nobody may find the socket's name before the bridge listens on it: a connect there is refused, so
    the JVM plugin fails its call, and a second bridge starting at the same time takes the socket for a
    stale one and removes it. The listen is slowed down here to widen the window; a poller connects
    whenever the name exists."""
    from test_bridge_server import MemoryRSM

    from rsm.bridge.server import BridgeServer

    d = Path(tempfile_dir()) / f"rsmh-{uuid.uuid4().hex[:8]}"
    d.mkdir(mode=0o700)
    path = d / "b.sock"
    name_at_listen: list[bool] = []
    real_socket = socket.socket

    class SlowListen(real_socket):
        def listen(self, *args: int) -> None:
            name_at_listen.append(path.exists())
            time.sleep(0.3)
            super().listen(*args)

    outcomes: list[str] = []
    done = threading.Event()

    def poll_the_name() -> None:
        while not done.is_set():
            if path.exists():
                probe = real_socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    probe.connect(str(path))
                    outcomes.append("connected")
                except OSError as exc:
                    outcomes.append(type(exc).__name__)
                finally:
                    probe.close()
            time.sleep(0.001)

    poller = threading.Thread(target=poll_the_name, daemon=True)
    poller.start()
    server = BridgeServer(MemoryRSM(), path, shm_enabled=False)
    try:
        monkeypatch.setattr(socket, "socket", SlowListen)
        server.bind()
        monkeypatch.setattr(socket, "socket", real_socket)
        wait_until("the poller to connect", lambda: "connected" in outcomes, 5, interval=0.01)
    finally:
        done.set()
        poller.join(5)
        monkeypatch.setattr(socket, "socket", real_socket)
    try:
        assert name_at_listen == [False], "the socket's name existed before listen()"
        assert set(outcomes) == {"connected"}, outcomes
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_ISSOCK(path.stat().st_mode)
        assert [p.name for p in d.iterdir()] == ["b.sock"]  # no temporary name left behind
    finally:
        t = threading.Thread(target=server.serve_forever, daemon=True)
        t.start()
        server.stop()
        t.join(15)
        for p in d.iterdir():
            p.unlink()
        d.rmdir()
