"""The shared-memory transport of fetch answers (capability "shm"), through the real server and client.

Covers the slot protocol (flow control, slot reuse, cancel, concurrency), its failure modes (bridge
killed mid-stream, stale files) and its safety rules (owner-only files, unlinked once mapped, fallback
to socket data frames when either side does not offer the capability).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import stat
import subprocess
import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from harness.waiting import wait_until
from test_bridge_server import (
    REPO,
    TESTS_DIR,
    MemoryRSM,
    check_reader_stopping_at_the_fetch_size,
    make_segment,
    tempfile_dir,
)

from rsm.bridge import protocol
from rsm.bridge.client import BridgeClient
from rsm.bridge.protocol import FrameType
from rsm.bridge.server import BridgeServer
from rsm.bridge.shm import ShmRing, ensure_private_dir, remove_stale_rings
from rsm.cli.bridge import serve_command
from rsm.processes import pid_alive

MIB = 1024 * 1024


@pytest.fixture
def dirs() -> tuple[Path, Path]:
    base = Path(tempfile_dir()) / f"rsms-{uuid.uuid4().hex[:8]}"
    base.mkdir(mode=0o700)
    yield base, base / "shm"
    for p in sorted(base.rglob("*"), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    base.rmdir()


def start(dirs: tuple[Path, Path], **kwargs) -> tuple[BridgeServer, MemoryRSM, threading.Thread]:
    sock_dir, shm_dir = dirs
    rsm = MemoryRSM()
    server = BridgeServer(rsm, sock_dir / "b.sock", shm_dir=shm_dir, **kwargs)
    server.bind()
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    return server, rsm, t


def stop(server: BridgeServer, t: threading.Thread) -> None:
    server.stop()
    t.join(15)
    assert server.wait_stopped(5)


@pytest.fixture
def bridge(dirs):
    server, rsm, t = start(dirs)
    client = BridgeClient(server.socket_path, pool_size=16, transport="shm")
    yield server, rsm, client
    client.close()
    stop(server, t)


def raw_connect(path: Path, caps: list[str] | None) -> tuple[socket.socket, dict]:
    conn = socket.socket(socket.AF_UNIX)
    conn.settimeout(10)
    conn.connect(str(path))
    protocol.send_frame(conn, FrameType.HELLO, 0, protocol.client_hello("raw", caps))
    hello = protocol.recv_frame(conn)
    assert hello.type == FrameType.HELLO
    return conn, hello.header


def release(conn: socket.socket, count: int) -> None:
    protocol.send_frame(conn, FrameType.SHM_RELEASE, 0, None, protocol.SHM_RELEASE_PAYLOAD.pack(count))


def read_exact(stream, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = stream.read(n - len(out))
        assert chunk, f"stream ended after {len(out)} of {n} bytes"
        out += chunk
    return bytes(out)


def test_round_trip_uses_the_ring_and_matches_the_socket_path(bridge, tmp_path):
    server, rsm, client = bridge
    md, sd, data = make_segment(tmp_path, 5 * MIB + 123)
    client.copy_log_segment_data(md, sd)
    with client.fetch_log_segment(md, 0) as s:
        assert s._conn.ring is not None  # the capability was negotiated
        assert s.read() == data
    with client.fetch_log_segment(md, 777, 3 * MIB) as s:
        assert s.read() == data[777 : 3 * MIB + 1]
    with client.fetch_log_segment(md, len(data)) as s:
        assert s.read() == b""
    socket_client = BridgeClient(server.socket_path, transport="socket")
    try:
        with socket_client.fetch_log_segment(md, 0) as s:
            assert s._conn.ring is None
            assert s.read() == data
    finally:
        socket_client.close()


def test_ring_file_is_owner_only_and_removed_once_mapped_and_after_close(dirs, tmp_path):
    server, rsm, t = start(dirs)
    shm_dir = dirs[1]
    try:
        assert stat.S_IMODE(shm_dir.stat().st_mode) == 0o700
        conn, hello = raw_connect(server.socket_path, [protocol.CAP_SHM])
        assert hello["capabilities"] == [protocol.CAP_SHM]
        ring_path = Path(hello["shm"]["path"])
        assert ring_path.parent == shm_dir
        st = ring_path.stat()
        assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.getuid()
        assert st.st_size == hello["shm"]["slots"] * hello["shm"]["slot_bytes"]
        release(conn, 0)  # "mapped": the bridge drops the name
        wait_until("the ring file's name removed", lambda: not ring_path.exists(), 5, interval=0.01)
        conn.close()
        # a client that never sends anything after the handshake: removed on close
        conn2, hello2 = raw_connect(server.socket_path, [protocol.CAP_SHM])
        path2 = Path(hello2["shm"]["path"])
        assert path2.exists()
        conn2.close()
        wait_until("the unused ring file removed", lambda: not path2.exists(), 5, interval=0.01)
        assert list(shm_dir.iterdir()) == []
    finally:
        stop(server, t)


def test_stale_rings_of_dead_bridges_are_removed_at_start(dirs):
    shm_dir = dirs[1]
    shm_dir.mkdir(mode=0o700)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = shm_dir / f"ring-{dead.pid}-{'ab' * 8}"
    stale.write_bytes(b"x" * 10)
    live = shm_dir / f"ring-{os.getppid()}-{'cd' * 8}"  # a live process's ring stays
    live.write_bytes(b"y")
    other = shm_dir / "unrelated"
    other.write_bytes(b"z")
    server, rsm, t = start(dirs)
    try:
        assert not stale.exists()
        assert live.exists() and other.exists()
    finally:
        stop(server, t)
    live.unlink()
    other.unlink()
    assert remove_stale_rings(shm_dir) == 0


def test_refuses_a_shm_directory_open_to_others(dirs):
    shm_dir = dirs[1]
    shm_dir.mkdir(mode=0o700)
    os.chmod(shm_dir, 0o755)
    server, rsm, t = start(dirs)
    try:
        assert not server.shm_enabled  # disabled with a warning, socket frames still work
        conn, hello = raw_connect(server.socket_path, [protocol.CAP_SHM])
        assert "shm" not in hello and "capabilities" not in hello
        conn.close()
    finally:
        stop(server, t)
    with pytest.raises(ValueError, match="open to group/others"):
        ensure_private_dir(shm_dir)
    with pytest.raises(ValueError, match="slots"):
        ShmRing.create(shm_dir, slots=0)


def test_slots_are_reused_in_order_under_flow_control(dirs, tmp_path):
    server, rsm, t = start(dirs, shm_slots=2, shm_slot_bytes=64 * 1024, initial_frame_bytes=64 * 1024)
    try:
        md, sd, data = make_segment(tmp_path, 3 * MIB)
        BridgeClient(server.socket_path).copy_log_segment_data(md, sd)
        conn, hello = raw_connect(server.socket_path, [protocol.CAP_SHM])
        import mmap

        with open(hello["shm"]["path"], "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        release(conn, 0)
        req = {"op": "fetch_log_segment", "metadata": protocol.encode_metadata(md), "start_position": 0,
               "transport": "shm"}  # fmt: skip
        protocol.send_frame(conn, FrameType.REQUEST, 5, req)
        got = bytearray()
        slots_seen = []
        for _ in range(2):
            f = protocol.recv_frame(conn)
            assert f.type == FrameType.SHM_DATA and f.request_id == 5
            slot, length = protocol.SHM_DATA_PAYLOAD.unpack(f.payload)
            slots_seen.append(slot)
            got += mm[slot * 65536 : slot * 65536 + length]
        # both slots are held: the bridge must not write a third piece
        assert select.select([conn], [], [], 0.3)[0] == []
        before = rsm.bytes_read
        release(conn, 1)
        f = protocol.recv_frame(conn)
        slot, length = protocol.SHM_DATA_PAYLOAD.unpack(f.payload)
        slots_seen.append(slot)
        got += mm[slot * 65536 : slot * 65536 + length]
        assert slots_seen == [0, 1, 0]  # slot 0 reused only after its release
        assert rsm.bytes_read >= before
        # release as we go: the whole segment arrives through two slots
        release(conn, 2)
        while True:
            f = protocol.recv_frame(conn)
            if f.type == FrameType.END:
                break
            slot, length = protocol.SHM_DATA_PAYLOAD.unpack(f.payload)
            got += mm[slot * 65536 : slot * 65536 + length]
            release(conn, 1)
        assert bytes(got) == data
        assert f.header["bytes"] == len(data)
        mm.close()
        conn.close()
    finally:
        stop(server, t)


def test_release_of_more_slots_than_held_is_a_protocol_error(dirs):
    server, rsm, t = start(dirs)
    try:
        conn, hello = raw_connect(server.socket_path, [protocol.CAP_SHM])
        release(conn, 3)
        assert conn.recv(1) == b""  # the bridge closed the connection
        conn.close()
    finally:
        stop(server, t)


def test_cancel_mid_stream_stops_reading_and_reuses_the_connection(bridge, tmp_path):
    server, rsm, client = bridge
    md, sd, data = make_segment(tmp_path, 64 * MIB)
    client.copy_log_segment_data(md, sd)
    rsm.bytes_read = 0
    s = client.fetch_log_segment(md, 0)
    assert s.read(1000) == data[:1000]
    s.close()
    assert s.cancelled
    assert rsm.bytes_read < 12 * MIB
    wait_until("the cancelled stream closed", lambda: rsm.streams_closed == 1, 5, interval=0.01)
    assert client._idle.qsize() == 1
    # past the 1 MiB mark, then cancel while slots are in flight
    s = client.fetch_log_segment(md, 5)
    assert read_exact(s, 3 * MIB) == data[5 : 5 + 3 * MIB]
    s.close()
    assert s.cancelled and client._idle.qsize() == 1
    with client.fetch_log_segment(md, 10, 2 * MIB) as s2:
        assert s2.read() == data[10 : 2 * MIB + 1]
    assert client._idle.qsize() == 1


def test_kafka_like_reader_stops_at_the_fetch_size(bridge, tmp_path, monkeypatch):
    check_reader_stopping_at_the_fetch_size(bridge, tmp_path, monkeypatch)


def test_ten_concurrent_readers(bridge, tmp_path):
    server, rsm, client = bridge
    segments = [make_segment(tmp_path, 2_500_000 + i * 7919, seed=i) for i in range(4)]
    for md, sd, _ in segments:
        client.copy_log_segment_data(md, sd)
    barrier = threading.Barrier(10)
    rsm.configs["fetch.delay.ms"] = "1"

    def reader(i: int) -> int:
        md, _, data = segments[i % len(segments)]
        barrier.wait(10)
        for j in range(6):
            start = (i * 1013 + j * 50_021) % len(data)
            end = min(len(data) - 1, start + 1_300_000 + j)
            with client.fetch_log_segment(md, start, end) as s:
                assert s._conn.ring is not None
                got = s.read()
            assert got == data[start : end + 1]
            if j % 2:  # and some that stop early
                s = client.fetch_log_segment(md, start)
                assert read_exact(s, 200_000) == data[start : start + 200_000]
                s.close()
        return j + 1

    with ThreadPoolExecutor(10) as pool:
        assert sum(pool.map(reader, range(10))) == 60
    assert rsm.max_open_streams >= 2
    wait_until("every stream closed", lambda: rsm.open_streams == 0, 5, interval=0.01)


def test_fallback_when_either_side_lacks_the_capability(dirs, tmp_path):
    server, rsm, t = start(dirs, shm_enabled=False)
    try:
        md, sd, data = make_segment(tmp_path, 2 * MIB)
        client = BridgeClient(server.socket_path, transport="shm")
        client.copy_log_segment_data(md, sd)
        with client.fetch_log_segment(md, 0) as s:
            assert s._conn.ring is None
            assert s.read() == data
        client.close()
        assert not dirs[1].exists() or list(dirs[1].iterdir()) == []
    finally:
        stop(server, t)
    # a server offering shm to a client that did not ask: plain HELLO, DATA frames
    server, rsm, t = start(dirs)
    try:
        conn, hello = raw_connect(server.socket_path, None)
        assert "shm" not in hello
        conn.close()
    finally:
        stop(server, t)


def test_bridge_killed_mid_stream_fails_the_read_cleanly(dirs, tmp_path):
    sock_dir, shm_dir = dirs
    cfg = sock_dir / "server.properties"
    cfg.write_text(f"rsm.config.bucket=x\nrsm.config.bridge.shm.dir={shm_dir}\nrsm.config.fetch.delay.ms=5\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS_DIR), str(TESTS_DIR / "broker"), str(REPO)]))
    sock = sock_dir / "k.sock"
    proc = subprocess.Popen(
        serve_command(cfg, sock, "--rsm-class", "test_bridge_server:MemoryRSM"),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    client = BridgeClient(sock, transport="shm")
    try:
        wait_until(
            "the bridge's socket (or its exit)", lambda: sock.exists() or proc.poll() is not None, 30, 0.01
        )
        assert sock.exists(), proc.stdout.read().decode() if proc.poll() is not None else ""
        md, sd, data = make_segment(tmp_path, 16 * MIB)
        client.copy_log_segment_data(md, sd)
        s = client.fetch_log_segment(md, 0)
        assert s._conn.ring is not None
        assert read_exact(s, 2 * MIB) == data[: 2 * MIB]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        with pytest.raises(OSError, match="lost mid-stream|bridge"):
            while s.read(MIB):
                pass
        s.close()
    finally:
        client.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
    # the mapping was already unlinked: nothing left behind by the dead bridge
    assert list(shm_dir.iterdir()) == []


def test_a_ring_without_room_falls_back_to_socket_frames(dirs, tmp_path, monkeypatch):
    """A full tmpfs (ENOSPC at posix_fallocate, when a fetch first reserves the ring's memory) must not
    break fetches: those fetches use DATA frames, and one after room came back uses the ring."""
    import errno

    from rsm.bridge import shm as shm_module

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    server, rsm, t = start(dirs)
    try:
        client = BridgeClient(server.socket_path, transport="shm")
        md, sd, data = make_segment(tmp_path, 2 * MIB + 5)
        client.copy_log_segment_data(md, sd)
        with monkeypatch.context() as m:
            m.setattr(shm_module.os, "posix_fallocate", full)
            with client.fetch_log_segment(md, 0) as s:
                assert s._conn.ring is not None  # offered and mapped: it costs nothing until reserved
                assert s.read() == data
            assert client.health()["shm_bytes_streamed"] == 0
        with client.fetch_log_segment(md, 0) as s:
            assert s.read() == data
        assert client.health()["shm_bytes_streamed"] == len(data)
        client.close()
        wait_until("the ring file removed", lambda: list(dirs[1].iterdir()) == [], 5, interval=0.01)
    finally:
        stop(server, t)


def test_a_killed_owner_is_dead_before_its_parent_reaps_it() -> None:
    """What a killed bridge or migration leaves (rings, a parent watch, a job lock) is reclaimed once its
    owner is dead: a process killed but not yet reaped (a zombie) is dead, a running one (ours, or pid 1
    whoever owns it) is alive, and a pid that is not positive never is (`kill(0, 0)` signals a group)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        assert pid_alive(child.pid)
        child.kill()
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # it has exited; it is not reaped
        assert not pid_alive(child.pid)
    finally:
        child.kill()
        child.wait()
    assert pid_alive(os.getpid()) and pid_alive(1)
    assert not pid_alive(0) and not pid_alive(-1)
