"""Hostile and careless clients against the bridge process: its memory and threads stay bounded.

Each test starts a real ``rsm bridge serve`` (hosting test_bridge_server's in-memory RSM) and reads the
process's own figures from ``/proc/<pid>/status`` (VmRSS, RssShmem, Threads), so what is measured is the
bridge, not pytest. Bounds are margins over a baseline taken in the same run, never speeds; the waits
are for events (the bridge closing a connection), with generous deadlines.
"""

from __future__ import annotations

import contextlib
import dataclasses
import mmap
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from harness.waiting import wait_until
from test_bridge_server import REPO, TESTS_DIR, make_segment, tempfile_dir

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
    """``start_bridge(rsm_configs=None, **settings)``: a bridge with ``rsm.config.bridge.<key>=<value>`` for
    each setting (dots for underscores), its rings in a private directory on /dev/shm (tmpfs, as in
    production); hosting the in-memory RSM, or with ``rsm_configs`` the real one configured with them."""
    started: list[tuple[Bridge, Path]] = []

    def start(rsm_configs: dict[str, str] | None = None, **settings: object) -> Bridge:
        base = Path(tempfile_dir()) / f"rsmh-{uuid.uuid4().hex[:8]}"
        base.mkdir(mode=0o700)
        shm_root = Path("/dev/shm") if Path("/dev/shm").is_dir() else base
        shm_dir = shm_root / f"rsmh-shm-{uuid.uuid4().hex[:8]}"
        lines = [f"rsm.config.bridge.shm.dir={shm_dir}"]
        lines += [f"rsm.config.{k}={v}" for k, v in (rsm_configs or {"bucket": "x"}).items()]
        lines += [f"rsm.config.bridge.{k.replace('_', '.')}={v}" for k, v in settings.items()]
        hosted = () if rsm_configs else ("--rsm-class", "test_bridge_server:MemoryRSM")
        cfg = base / "server.properties"
        cfg.write_text("\n".join(lines) + "\n")
        log = base / "bridge.log"
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join([str(TESTS_DIR), str(TESTS_DIR / "broker"), str(REPO)])
        )
        with log.open("wb") as out:
            proc = subprocess.Popen(
                serve_command(cfg, base / "b.sock", *hosted),
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


def test_frame_lengths_claimed_before_the_handshake_allocate_nothing(start_bridge) -> None:
    """50 connections each send 14 bytes claiming a 20 MiB first frame: the bridge refuses each at once
    (a HELLO is at most 64 KiB) instead of allocating what the length field claims."""
    bridge = start_bridge()
    base = bridge.rss()
    claim = protocol.PREFIX.pack(protocol.MAX_FRAME_BYTES, FrameType.HELLO, 0, 0) + b"{"
    assert len(claim) == 14
    socks = [connect(bridge.socket) for _ in range(50)]
    for s in socks:
        s.sendall(claim)
    peak = [base]
    closures = Closures(socks)
    left = wait_closed(closures, 15, lambda: peak.append(bridge.rss()))
    grown = (max(peak) - base) / MIB
    assert not left, f"{left} of 50 still open; bridge RSS {base / MIB:.0f} -> {max(peak) / MIB:.0f} MiB"
    assert grown < 16, f"bridge RSS grew by {grown:.0f} MiB for 50 x 14 bytes"
    frames = closures.first_frames()
    assert frames and all(f.type == FrameType.ERROR for f in frames)
    assert "before the handshake" in frames[0].header["message"], frames[0].header
    assert bridge.rss() - base < 16 * MIB
    with contextlib.closing(bridge.client()) as client:
        assert client.health()["status"] == "ok"
    for s in socks:
        s.close()


def test_frames_after_the_handshake_are_read_as_they_arrive_and_memory_returns(start_bridge) -> None:
    """Handshaken connections claiming 20 MiB frames and sending one byte cost what they sent, not what
    they claim (and are cut off by the read timeout); after a load of real 16 MiB frames the bridge's
    memory goes back to where it was."""
    bridge = start_bridge(read_timeout_ms=2000, max_connections=64)
    base = bridge.rss()
    socks = [handshake(bridge.socket)[0] for _ in range(50)]
    claim = protocol.PREFIX.pack(protocol.MAX_FRAME_BYTES, FrameType.REQUEST, 1, 0) + b"{"
    for s in socks:
        s.sendall(claim)
    peak = [base]
    left = wait_closed(Closures(socks), 20, lambda: peak.append(bridge.rss()))
    grown = (max(peak) - base) / MIB
    assert not left, f"{left} of 50 never cut off; bridge RSS {base / MIB:.0f} -> {max(peak) / MIB:.0f} MiB"
    assert grown < 16, f"bridge RSS grew by {grown:.0f} MiB for 50 one-byte frame starts"
    assert "bridge.read.timeout.ms" in bridge.log_text()
    for s in socks:
        s.close()

    # a load of real large frames (a request with a 16 MiB payload each), then quiet
    payload = b"x" * (16 * MIB)
    busy = [handshake(bridge.socket)[0] for _ in range(16)]
    for s in busy:
        protocol.send_frame(s, FrameType.REQUEST, 7, {"op": "no_such_op"}, payload)
    for s in busy:
        answer = protocol.recv_frame(s)
        assert answer.header["code"] == "UNSUPPORTED_OPERATION"
    loaded = bridge.rss()
    for s in busy:
        s.close()
    deadline = time.monotonic() + 20
    while (returned := bridge.rss()) >= base + 32 * MIB and time.monotonic() < deadline:
        time.sleep(0.2)
    assert returned < base + 32 * MIB, (
        f"bridge RSS {base / MIB:.0f} MiB, {loaded / MIB:.0f} MiB under the load, still"
        f" {returned / MIB:.0f} MiB 20 s after it"
    )
    print(f"\nRSS base {base / MIB:.0f} MiB, loaded {loaded / MIB:.0f} MiB, after {returned / MIB:.0f} MiB")


def test_memory_returns_after_a_fetch_load(start_bridge, tmp_path) -> None:
    """Ten readers stream a compressed segment through the real RSM (decoded on the heap: no arena, no
    chunk cache), then stop: once the load has stopped, the bridge's memory goes back close to where it
    was, rather than staying at its peak (freed chunk buffers kept by the allocator for reuse)."""
    from kafka_segments import make_segment as make_kafka_segment

    from rsm import TopicIdPartition

    store = tmp_path / "store"
    configs = {
        "storage.backend": "file",
        "storage.file.root": str(store),
        "bucket": "b",
        "compression.enabled": "true",
        "cache.chunk.bytes": "0",
    }
    bridge = start_bridge(configs, arena_blocks=0)
    seg = make_kafka_segment(
        tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "load", 0), batches=1500, value_size=3000
    )
    client = bridge.client(pool_size=10)
    try:
        md = dataclasses.replace(
            seg.metadata, custom_metadata=client.copy_log_segment_data(seg.metadata, seg.data)
        )
        size = seg.data.log_segment.stat().st_size
        base = bridge.rss()

        def read_twice() -> int:
            n = 0
            for _ in range(2):
                with client.fetch_log_segment(md, 0) as s:
                    while chunk := s.read(MIB):
                        n += len(chunk)
            return n

        peak = base
        with ThreadPoolExecutor(10) as pool:
            reads = [pool.submit(read_twice) for _ in range(10)]
            while not all(r.done() for r in reads):
                peak = max(peak, bridge.rss())
                time.sleep(0.05)
        assert [r.result() for r in reads] == [2 * size] * 10
        allowed = base + max(32 * MIB, (peak - base) // 4)
        deadline = time.monotonic() + 15
        while (after := bridge.rss()) > allowed and time.monotonic() < deadline:
            time.sleep(0.2)
        figures = f"bridge RSS {base / MIB:.0f} MiB, peak {peak / MIB:.0f} MiB, after {after / MIB:.0f} MiB"
        print(f"\nfetch load: {figures}")
        assert after <= allowed, figures
    finally:
        client.close()


def test_connections_are_capped_and_idle_ones_time_out(start_bridge) -> None:
    """600 idle connections: the bridge serves at most bridge.max.connections of them (one thread each)
    and refuses the rest with a BUSY error and one warning; those that never say HELLO are closed after
    bridge.handshake.timeout.ms, handshaken ones after bridge.idle.timeout.ms without a frame."""
    bridge = start_bridge(max_connections=32, handshake_timeout_ms=1500, idle_timeout_ms=3000)
    base_threads = bridge.threads()
    socks = [connect(bridge.socket) for _ in range(600)]
    closures = Closures(socks)
    peak = [base_threads]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        closures.poll(0.05)
        peak.append(bridge.threads())
        if sum(1 for raw in closures.received.values() if raw) >= 600 - 32:
            break
    refused = [f for f in closures.first_frames() if f.type == FrameType.ERROR]
    assert len(refused) >= 600 - 32, f"{len(refused)} refused; bridge threads {base_threads} -> {max(peak)}"
    assert {f.header["code"] for f in refused} == {"BUSY"}
    assert max(peak) <= base_threads + 32 + 2, f"bridge threads {base_threads} -> {max(peak)}"
    assert wait_closed(closures, 20) == 0  # the refused at once, the others at the handshake deadline
    wait_until("the connection threads to end", lambda: bridge.threads() <= base_threads, 10, interval=0.1)
    print(f"\n600 idle connections: bridge threads {base_threads} -> {max(peak)} -> {bridge.threads()}")
    warnings = [line for line in bridge.log_text().splitlines() if "bridge.max.connections" in line]
    assert 1 <= len(warnings) <= 3, warnings  # rate-limited: not one line per refusal
    for s in socks:
        s.close()

    # handshaken connections: an idle one is closed after the idle timeout, a busy one is not
    idle = [handshake(bridge.socket)[0] for _ in range(5)]
    talker, _ = handshake(bridge.socket)
    idle_closures = Closures(idle)
    talked_until = time.monotonic() + 5
    rid = 1
    while time.monotonic() < talked_until:
        protocol.send_frame(talker, FrameType.REQUEST, rid, {"op": "health"})
        assert protocol.recv_frame(talker).type == FrameType.RESPONSE
        rid += 1
        idle_closures.poll(0.5)
    assert idle_closures.poll() == 0  # 5 s > the 3 s idle timeout
    assert rid > 5
    with contextlib.closing(bridge.client()) as client:
        health = client.health()
    assert health["connections_refused"] >= 600 - 32
    talker.close()
    for s in idle:
        s.close()


def test_a_pooled_client_retires_idle_connections_before_the_bridge_closes_them() -> None:
    """The HELLO answer carries bridge.idle.timeout.ms; a pooling client drops a connection idle for half of
    it instead of reusing it, so the bridge never closes a connection just as a call picks it up."""
    from test_bridge_server import MemoryRSM

    from rsm.bridge.admission import Limits
    from rsm.bridge.server import BridgeServer

    d = Path(tempfile_dir()) / f"rsmh-{uuid.uuid4().hex[:8]}"
    d.mkdir(mode=0o700)
    server = BridgeServer(MemoryRSM(), d / "b.sock", shm_enabled=False, limits=Limits(idle_timeout_s=60))
    server.bind()
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    client = BridgeClient(d / "b.sock")
    try:
        client.health()
        first = client._idle.queue[0]
        assert first.server_hello["idle_timeout_ms"] == 60_000 and first.retire_after_s == 30
        client.health()
        assert client._idle.queue[0] is first  # reused while young
        first.idle_since -= 31  # idle for more than half the bridge's idle timeout
        client.health()
        assert first.broken and client._idle.queue[0] is not first
    finally:
        client.close()
        server.stop()
        t.join(15)
        d.rmdir()


def test_a_slow_sender_is_cut_off(start_bridge) -> None:
    """A HELLO or a request trickled a byte at a time (each byte well within any per-read timeout) is cut
    off once the frame takes longer than its deadline, and its thread ends."""
    bridge = start_bridge(handshake_timeout_ms=1000, read_timeout_ms=1000)
    base_threads = bridge.threads()

    def trickle(s: socket.socket, frame: bytes) -> int:
        """Send ``frame`` a byte per 50 ms until the bridge closes; returns the bytes it took."""
        for i in range(len(frame)):
            try:
                s.send(frame[i : i + 1])
            except OSError:
                return i
            readable, _, _ = select.select([s], [], [], 0.05)
            if readable:
                with contextlib.suppress(OSError):
                    while s.recv(65536):
                        pass
                return i
        return len(frame)

    hello = protocol.encode_frame(FrameType.HELLO, 0, {**protocol.client_hello("slow"), "padding": "x" * 300})
    taken = trickle(connect(bridge.socket), hello)
    assert taken < len(hello), "a HELLO trickled over 15 s was accepted"
    s, _ = handshake(bridge.socket)
    request = protocol.encode_frame(FrameType.REQUEST, 1, {"op": "health", "padding": "x" * 300})
    taken = trickle(s, request)
    assert taken < len(request), "a request trickled over 15 s was accepted"
    wait_until("the slow senders' threads to end", lambda: bridge.threads() <= base_threads, 10, 0.1)
    log = bridge.log_text()
    assert "bridge.handshake.timeout.ms" in log and "bridge.read.timeout.ms" in log, log


def _ring_bytes(fds: list[int]) -> int:
    """Memory the ring files hold (allocated blocks, whether or not anyone touched them)."""
    return sum(os.fstat(fd).st_blocks * 512 for fd in fds)


def _fetch_through_ring(
    s: socket.socket, rid: int, metadata: dict, size: int, hold_last: bool = False
) -> int:
    """One whole fetch of a ``size``-byte segment answered through the connection's ring, each slot
    released at once but, with ``hold_last``, the one ending the segment; returns that last slot."""
    header = {"op": "fetch_log_segment", "metadata": metadata, "start_position": 0, "transport": "shm"}
    protocol.send_frame(s, FrameType.REQUEST, rid, header)
    got, slot = 0, -1
    while True:
        frame = protocol.recv_frame(s)
        if frame.type == FrameType.END:
            assert got == size
            return slot
        assert frame.type == FrameType.SHM_DATA, frame
        slot, length = protocol.SHM_DATA_PAYLOAD.unpack(frame.payload)
        got += length
        if not (hold_last and got == size):
            protocol.send_frame(s, FrameType.SHM_RELEASE, 0, None, protocol.SHM_RELEASE_PAYLOAD.pack(1))


def test_idle_shm_offers_hold_no_memory_and_rings_are_given_back(start_bridge, tmp_path) -> None:
    """100 connections offering shm: their rings cost nothing until a fetch uses them; a ring used and
    then idle for bridge.shm.idle.release.ms gives its memory back, but for a slot its client still holds
    (that one keeps its bytes); fetches still work after that."""
    bridge = start_bridge(max_connections=128, shm_idle_release_ms=1000)
    with contextlib.closing(bridge.client()) as client:
        md, sd, data = make_segment(tmp_path, 8 * MIB)
        client.copy_log_segment_data(md, sd)
    metadata = protocol.encode_metadata(md)
    base = bridge.status()
    conns, fds = [], []
    for _ in range(100):
        s, hello = handshake(bridge.socket, [protocol.CAP_SHM])
        assert hello["capabilities"] == [protocol.CAP_SHM]
        fds.append(os.open(hello["shm"]["path"], os.O_RDONLY))  # watched after its name goes
        protocol.send_frame(s, FrameType.SHM_RELEASE, 0, None, protocol.SHM_RELEASE_PAYLOAD.pack(0))
        conns.append(s)
    try:
        idle_bytes = _ring_bytes(fds)
        assert idle_bytes < MIB, f"100 idle shm offers hold {idle_bytes / MIB:.0f} MiB of rings"
        for s in conns[1:10]:
            assert _fetch_through_ring(s, 2, metadata, len(data)) == 7
        # the first client keeps reading its last slot: its bytes must survive the give-back
        assert _fetch_through_ring(conns[0], 2, metadata, len(data), hold_last=True) == 7
        used = bridge.status()
        assert _ring_bytes(fds[:10]) == 10 * 8 * MIB and _ring_bytes(fds[10:]) == 0
        assert used["RssShmem"] - base["RssShmem"] > 40 * MIB  # ten rings written, mapped by the bridge
        wait_until("the idle rings to be given back", lambda: _ring_bytes(fds) == MIB, 15, interval=0.1)
        with mmap.mmap(fds[0], 8 * MIB, prot=mmap.PROT_READ) as ring:
            assert ring[7 * MIB : 8 * MIB] == data[7 * MIB :]  # the held slot, intact
        after = bridge.status()
        assert after["RssShmem"] - base["RssShmem"] < 4 * MIB, (base, after)
        print(
            f"\nbridge RssShmem: idle offers {base['RssShmem'] / MIB:.0f} MiB, ten rings used"
            f" {used['RssShmem'] / MIB:.0f} MiB, released {after['RssShmem'] / MIB:.0f} MiB"
        )
        protocol.send_frame(conns[0], FrameType.SHM_RELEASE, 0, None, protocol.SHM_RELEASE_PAYLOAD.pack(1))
        assert _fetch_through_ring(conns[0], 3, metadata, len(data)) == 7  # a given-back ring works again
    finally:
        for fd in fds:
            os.close(fd)
        for s in conns:
            s.close()


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
