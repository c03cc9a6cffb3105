"""The bridge server and its Python client, against an in-memory RemoteStorageManager.

The in-memory RSM (``MemoryRSM``) stands in for the real one so these tests isolate the bridge: framing,
concurrency, error mapping, cancellation, shutdown and socket permissions. The real RSM is exercised
through the bridge in test_bridge_plugin.py and the Kafka end-to-end test.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import signal
import socket
import stat
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from harness.waiting import wait_until

from rsm import (
    CustomMetadata,
    IndexType,
    LogConfig,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    TopicIdPartition,
)
from rsm.bridge import protocol
from rsm.bridge.client import BridgeClient
from rsm.bridge.protocol import FrameType
from rsm.bridge.server import BridgeServer, check_socket_path, load_properties, split_rsm_configs
from rsm.cli.bridge import serve_command

TESTS_DIR = Path(__file__).resolve().parents[1]
REPO = TESTS_DIR.parent


class CountingStream(io.RawIOBase):
    """A lazy stream over bytes that records how much was read (to prove cancellation stops reads)."""

    def __init__(self, data: bytes, rsm: MemoryRSM, delay_s: float = 0.0) -> None:
        self._data = memoryview(data)
        self._pos = 0
        self._rsm = rsm
        self._delay = delay_s

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self._delay:
            time.sleep(self._delay)
        n = min(len(b), len(self._data) - self._pos, 64 * 1024)
        b[:n] = self._data[self._pos : self._pos + n]
        self._pos += n
        with self._rsm.lock:
            self._rsm.bytes_read += n
        return n

    def close(self) -> None:
        if not self.closed:
            with self._rsm.lock:
                self._rsm.streams_closed += 1
                self._rsm.open_streams -= 1
        super().close()


class MemoryRSM:
    """A RemoteStorageManager keeping segments in memory; configs ``fail.copy`` and ``slow.ms`` steer it."""

    def __init__(self) -> None:
        self.configs: dict[str, str] = {}
        self.segments: dict[uuid.UUID, dict[str, bytes]] = {}
        self.lock = threading.Lock()
        self.bytes_read = 0
        self.streams_closed = 0
        self.open_streams = 0
        self.max_open_streams = 0
        self.closed = False
        self.log_configs: list[LogConfig | None] = []

    def configure(self, configs: dict[str, str]) -> None:
        self.configs = dict(configs)

    def copy_log_segment_data(self, metadata, segment_data: LogSegmentData, log_config=None):
        self.log_configs.append(log_config)
        if self.configs.get("fail.copy") == "storage":
            raise RemoteStorageException(f"store unavailable for {metadata.remote_log_segment_id}")
        if self.configs.get("fail.copy") == "bug":
            raise ZeroDivisionError("a bug")
        delay = float(self.configs.get("slow.ms", "0")) / 1000
        if delay:
            time.sleep(delay)
        files = {
            "log": segment_data.log_segment.read_bytes(),
            IndexType.OFFSET.name: segment_data.offset_index.read_bytes(),
            IndexType.TIMESTAMP.name: segment_data.time_index.read_bytes(),
            IndexType.PRODUCER_SNAPSHOT.name: segment_data.producer_snapshot_index.read_bytes(),
            IndexType.LEADER_EPOCH.name: segment_data.leader_epoch_index,
        }
        if segment_data.transaction_index is not None:
            files[IndexType.TRANSACTION.name] = segment_data.transaction_index.read_bytes()
        with self.lock:
            self.segments[metadata.remote_log_segment_id.id] = files
        return CustomMetadata(b"mem:" + metadata.remote_log_segment_id.id.bytes[:4])

    def _get(self, metadata) -> dict[str, bytes]:
        with self.lock:
            files = self.segments.get(metadata.remote_log_segment_id.id)
        if files is None:
            raise RemoteResourceNotFoundException(f"segment {metadata.remote_log_segment_id} not found")
        return files

    def fetch_log_segment(self, metadata, start_position, end_position=None, log_config=None):
        data = self._get(metadata)["log"]
        end = len(data) if end_position is None else min(end_position + 1, len(data))
        with self.lock:
            self.open_streams += 1
            self.max_open_streams = max(self.max_open_streams, self.open_streams)
        return CountingStream(
            data[start_position:end], self, float(self.configs.get("fetch.delay.ms", "0")) / 1000
        )

    def fetch_index(self, metadata, index_type, log_config=None):
        files = self._get(metadata)
        if index_type.name not in files:
            raise RemoteResourceNotFoundException(
                f"no {index_type.name} index for {metadata.remote_log_segment_id}"
            )
        return io.BytesIO(files[index_type.name])

    def delete_log_segment_data(self, metadata, log_config=None) -> None:
        with self.lock:
            self.segments.pop(metadata.remote_log_segment_id.id, None)

    def close(self) -> None:
        self.closed = True


def make_segment(
    tmp_path: Path, size: int, seed: int = 0
) -> tuple[RemoteLogSegmentMetadata, LogSegmentData, bytes]:
    d = tmp_path / f"seg-{seed}"
    d.mkdir()
    data = hashlib.shake_256(str(seed).encode()).digest(size)
    (d / "0.log").write_bytes(data)
    (d / "0.index").write_bytes(b"I" * 80)
    (d / "0.timeindex").write_bytes(b"T" * 120)
    (d / "0.snapshot").write_bytes(b"S" * 30)
    (d / "0.txnindex").write_bytes(b"X" * 40)
    tip = TopicIdPartition(uuid.uuid4(), "t", seed)
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, uuid.uuid4()), 0, 99, 1000, 0, 2000, size, {0: 0})
    sd = LogSegmentData(
        d / "0.log", d / "0.index", d / "0.timeindex", d / "0.txnindex", d / "0.snapshot", b"0\n1\n0 0\n"
    )
    return md, sd, data


@pytest.fixture
def sock_dir(tmp_path_factory) -> Path:
    # short path: Unix socket paths are limited to 107 bytes
    d = Path(tempfile_dir()) / f"rsmb-{uuid.uuid4().hex[:8]}"
    d.mkdir(mode=0o700)
    yield d
    for p in d.iterdir():
        p.unlink()
    d.rmdir()


def tempfile_dir() -> str:
    import tempfile

    return tempfile.gettempdir()


@pytest.fixture
def bridge(sock_dir):
    rsm = MemoryRSM()
    rsm.configure({})
    server = BridgeServer(
        rsm, sock_dir / "b.sock", configs={"bucket": "x", "storage.s3.secret.key": "s3cr3t"}
    )
    server.bind()
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    client = BridgeClient(sock_dir / "b.sock", pool_size=16)
    yield server, rsm, client
    client.close()
    server.stop()
    t.join(15)
    assert server.wait_stopped(5)


def test_copy_fetch_index_delete_round_trip(bridge, tmp_path):
    server, rsm, client = bridge
    md, sd, data = make_segment(tmp_path, 3 * 1024 * 1024 + 17)
    lc = LogConfig({"unchecked.rsm.bucket": "b1"})
    custom = client.copy_log_segment_data(md, sd, lc)
    assert custom == CustomMetadata(b"mem:" + md.remote_log_segment_id.id.bytes[:4])
    assert rsm.log_configs == [lc]
    with client.fetch_log_segment(md, 0) as s:
        assert s.read() == data
    with client.fetch_log_segment(md, 1000, 1999) as s:  # end inclusive
        assert s.read() == data[1000:2000]
    for index_type, content in [
        (IndexType.OFFSET, b"I" * 80),
        (IndexType.TIMESTAMP, b"T" * 120),
        (IndexType.TRANSACTION, b"X" * 40),
        (IndexType.PRODUCER_SNAPSHOT, b"S" * 30),
        (IndexType.LEADER_EPOCH, b"0\n1\n0 0\n"),
    ]:
        with client.fetch_index(md, index_type) as s:
            assert s.read() == content
    client.delete_log_segment_data(md)
    with pytest.raises(RemoteResourceNotFoundException, match="not found"):
        client.fetch_log_segment(md, 0)
    client.delete_log_segment_data(md)  # idempotent through the bridge too


def test_empty_and_exact_frame_sized_fetches(bridge, tmp_path):
    server, rsm, client = bridge
    md, sd, data = make_segment(tmp_path, 2 * server.frame_bytes)
    client.copy_log_segment_data(md, sd)
    with client.fetch_log_segment(md, len(data)) as s:
        assert s.read() == b""
    with client.fetch_log_segment(md, 0) as s:
        assert s.read() == data
    with client.fetch_log_segment(md, 5, 5) as s:
        assert s.read() == data[5:6]


def test_ten_concurrent_readers(bridge, tmp_path):
    server, rsm, client = bridge
    segments = [make_segment(tmp_path, 1_500_000 + i * 7919, seed=i) for i in range(4)]
    for md, sd, _ in segments:
        client.copy_log_segment_data(md, sd)
    barrier = threading.Barrier(10)
    rsm.configs["fetch.delay.ms"] = "2"  # each 64 KiB read takes 2 ms: a serial server could not overlap

    def reader(i: int) -> int:
        md, _, data = segments[i % len(segments)]
        barrier.wait(10)
        ok = 0
        for j in range(8):
            start = (i * 1013 + j * 50_021) % len(data)
            end = min(len(data) - 1, start + 300_000 + j)
            with client.fetch_log_segment(md, start, end) as s:
                got = s.read()
            assert got == data[start : end + 1]
            ok += 1
        return ok

    with ThreadPoolExecutor(10) as pool:
        assert sum(pool.map(reader, range(10))) == 80
    assert rsm.max_open_streams >= 5, f"at most {rsm.max_open_streams} fetches ran at once"
    # a stream is closed just after its END is sent: the client can look first
    wait_until("the bridge to close its last stream", lambda: rsm.open_streams == 0, 5, interval=0.01)
    health = client.health()
    assert health["status"] == "ok" and health["requests"] >= 84


def test_error_mapping_through_the_socket(bridge, tmp_path):
    server, rsm, client = bridge
    md, sd, _ = make_segment(tmp_path, 1000)
    rsm.configs["fail.copy"] = "storage"
    with pytest.raises(RemoteStorageException, match="STORAGE.*store unavailable") as err:
        client.copy_log_segment_data(md, sd)
    assert type(err.value) is RemoteStorageException
    rsm.configs["fail.copy"] = "bug"
    with pytest.raises(RemoteStorageException, match="INTERNAL.*ZeroDivisionError"):
        client.copy_log_segment_data(md, sd)
    rsm.configs.pop("fail.copy")
    with pytest.raises(RemoteResourceNotFoundException):
        client.fetch_index(md, IndexType.OFFSET)
    client.copy_log_segment_data(md, dataclasses_replace_txn_none(sd))
    with pytest.raises(RemoteResourceNotFoundException, match="TRANSACTION"):
        client.fetch_index(md, IndexType.TRANSACTION)
    bad = protocol.encode_metadata(md)
    del bad["topic"]
    with pytest.raises(RemoteStorageException, match="INVALID_REQUEST.*missing 'topic'"):
        client.call("delete_log_segment_data", {"metadata": bad})
    with pytest.raises(RemoteStorageException, match="UNSUPPORTED_OPERATION"):
        client.call("validate_create_topic", {"topic": "x"})
    with pytest.raises(RemoteStorageException, match="INVALID_REQUEST.*start_position"):
        client.fetch_log_segment(md, -1)
    # after all those errors the pooled connections still work
    assert client.health()["status"] == "ok"


def dataclasses_replace_txn_none(sd: LogSegmentData) -> LogSegmentData:
    import dataclasses

    return dataclasses.replace(sd, transaction_index=None)


def test_cancel_midway_stops_reading_and_reuses_the_connection(bridge, tmp_path):
    server, rsm, client = bridge
    size = 64 * 1024 * 1024
    md, sd, data = make_segment(tmp_path, size)
    client.copy_log_segment_data(md, sd)
    rsm.bytes_read = 0
    s = client.fetch_log_segment(md, 0)
    head = s.read(1000)
    assert head == data[:1000]
    s.close()
    assert s.cancelled
    # the server stopped after a few frames instead of streaming 64 MiB into the socket
    assert rsm.bytes_read < 8 * 1024 * 1024
    deadline = time.monotonic() + 5
    while rsm.streams_closed < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert rsm.streams_closed == 1
    # the same (only) pooled connection serves the next request
    assert client._idle.qsize() == 1
    with client.fetch_log_segment(md, 10, 20) as s2:
        assert s2.read() == data[10:21]
    assert client._idle.qsize() == 1


def test_client_disconnect_midway_frees_the_server_thread(bridge, tmp_path):
    server, rsm, client = bridge
    md, sd, _ = make_segment(tmp_path, 32 * 1024 * 1024)
    client.copy_log_segment_data(md, sd)
    conn = socket.socket(socket.AF_UNIX)
    conn.connect(str(server.socket_path))
    protocol.send_frame(conn, FrameType.HELLO, 0, protocol.client_hello("raw"))
    assert protocol.recv_frame(conn).type == FrameType.HELLO
    req = {"op": "fetch_log_segment", "metadata": protocol.encode_metadata(md), "start_position": 0}
    protocol.send_frame(conn, FrameType.REQUEST, 1, req)
    assert protocol.recv_frame(conn).type == FrameType.DATA
    conn.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and client.health()["connections"] > 1:
        time.sleep(0.02)
    assert client.health()["connections"] == 1  # only the health caller's own connection is left


def test_handshake_rules(bridge):
    server, _, _ = bridge
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(str(server.socket_path))
        protocol.send_frame(conn, FrameType.HELLO, 0, {"magic": "rsm-bridge", "versions": [99]})
        f = protocol.recv_frame(conn)
        assert f.type == FrameType.ERROR and f.header["code"] == "VERSION_MISMATCH"
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(str(server.socket_path))
        protocol.send_frame(conn, FrameType.REQUEST, 1, {"op": "health"})
        f = protocol.recv_frame(conn)
        assert f.type == FrameType.ERROR and "HELLO" in f.header["message"]
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(str(server.socket_path))
        protocol.send_frame(conn, FrameType.HELLO, 0, protocol.client_hello("t"))
        f = protocol.recv_frame(conn)
        assert f.header["version"] == 1 and "fetch_log_segment" in f.header["ops"]
        assert f.header["pid"] == os.getpid()


def test_configure_info_masks_secrets(bridge):
    _, _, client = bridge
    info = client.configure_info()
    assert info["configs"] == {"bucket": "x", "storage.s3.secret.key": "[hidden]"}
    assert info["rsm_class"].endswith("MemoryRSM")


def test_socket_is_owner_only_and_directory_checked(bridge, tmp_path):
    server, _, _ = bridge
    mode = stat.S_IMODE(os.stat(server.socket_path).st_mode)
    assert mode == 0o600
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ValueError, match="writable by group/others"):
        check_socket_path(shared / "b.sock")
    shared.chmod(0o1777)  # sticky, like /tmp: acceptable
    check_socket_path(shared / "b.sock")
    with pytest.raises(ValueError, match="longer than"):
        check_socket_path(tmp_path / ("x" * 120))
    with pytest.raises(ValueError, match="not usable"):
        check_socket_path(tmp_path / "missing" / "b.sock")


def test_second_server_refuses_a_live_socket_and_replaces_a_stale_one(bridge, sock_dir):
    server, _, _ = bridge
    other = BridgeServer(MemoryRSM(), server.socket_path)
    with pytest.raises(ValueError, match="already listening"):
        other.bind()
    stale = sock_dir / "stale.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(stale))
    s.close()  # file left behind, nobody listening
    third = BridgeServer(MemoryRSM(), stale)
    third.bind()
    assert stale.exists()
    third._listener.close()
    not_a_socket = sock_dir / "file.sock"
    not_a_socket.write_text("x")
    with pytest.raises(ValueError, match="not a socket"):
        BridgeServer(MemoryRSM(), not_a_socket).bind()


def test_load_properties_and_split(tmp_path):
    p = tmp_path / "server.properties"
    p.write_text(
        "# broker\n"
        "broker.id=1\n"
        "rsm.config.storage.backend = file\n"
        "rsm.config.storage.file.root: /data/store\n"
        "rsm.config.prefix=tiered/\\\n"
        "    v1/\n"
        "! comment\n"
        "rsm.config.bridge.socket.path=/run/rsm/b.sock\n"
        "rsm.config.weird\\=key=a\\tb\n"
    )
    props = load_properties(p)
    assert props["broker.id"] == "1"
    rsm_configs, bridge_settings = split_rsm_configs(props)
    assert rsm_configs == {
        "storage.backend": "file",
        "storage.file.root": "/data/store",
        "prefix": "tiered/v1/",
        "weird=key": "a\tb",
    }
    assert bridge_settings == {"bridge.socket.path": "/run/rsm/b.sock"}
    with pytest.raises(ValueError, match="cannot read properties file"):
        load_properties(tmp_path / "nope.properties")


def _start_serve(sock_dir: Path, extra: str = "") -> subprocess.Popen:
    cfg = sock_dir / "server.properties"
    cfg.write_text(f"rsm.config.bucket=x\nrsm.config.fetch.delay.ms=20\n{extra}")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS_DIR), str(TESTS_DIR / "broker"), str(REPO)]))
    proc = subprocess.Popen(
        serve_command(cfg, sock_dir / "p.sock", "--rsm-class", "test_bridge_server:MemoryRSM"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(proc.stdout.read().decode())
        try:
            BridgeClient(sock_dir / "p.sock").health()
            return proc
        except (OSError, RemoteStorageException):
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("bridge did not come up")


def test_sigterm_aborts_streams_finishes_copies_and_removes_the_socket(sock_dir, tmp_path):
    proc = _start_serve(sock_dir, "rsm.config.slow.ms=1500\nrsm.config.bridge.shutdown.grace.ms=5000\n")
    try:
        client = BridgeClient(sock_dir / "p.sock")
        md, sd, data = make_segment(tmp_path, 8 * 1024 * 1024)
        client.copy_log_segment_data(md, sd)  # takes 1.5 s (slow.ms)
        stream = client.fetch_log_segment(md, 0)  # 20 ms per 64 KiB read: ~2.5 s for the whole segment
        md2, sd2, _ = make_segment(tmp_path, 1000, seed=2)
        copy_result: list[object] = []
        copier = threading.Thread(target=lambda: copy_result.append(client.copy_log_segment_data(md2, sd2)))
        copier.start()
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        got = b""
        with pytest.raises(OSError, match="SHUTTING_DOWN"):
            while chunk := stream.read(65536):
                got += chunk
        assert 0 < len(got) < len(data) and data.startswith(got)
        copier.join(10)
        assert copy_result and isinstance(copy_result[0], CustomMetadata)  # in-flight copy finished
        assert proc.wait(15) == 0
        assert not (sock_dir / "p.sock").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_refuses_a_bad_rsm_configuration_in_one_line(sock_dir):
    cfg = sock_dir / "server.properties"
    cfg.write_text("rsm.config.storage.backend=file\n")  # no storage.file.root: the RSM refuses it
    result = subprocess.run(
        serve_command(cfg, sock_dir / "x.sock"),
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert result.returncode == 2
    assert "storage.file.root" in result.stderr and "Traceback" not in result.stderr
    assert not (sock_dir / "x.sock").exists()
    missing = subprocess.run(
        serve_command(sock_dir / "nope.properties"),
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert missing.returncode == 2 and "cannot read properties file" in missing.stderr


def test_client_drops_pooled_connections_of_a_restarted_bridge(sock_dir, tmp_path):
    path = sock_dir / "r.sock"
    first = BridgeServer(MemoryRSM(), path)
    first.bind()
    t1 = threading.Thread(target=first.serve_forever, daemon=True)
    t1.start()
    client = BridgeClient(path, pool_size=4)
    pid_conn_count = client.health()["connections"]
    assert pid_conn_count == 1 and client._idle.qsize() == 1
    first.stop()
    t1.join(10)
    second = BridgeServer(MemoryRSM(), path)
    second.bind()
    t2 = threading.Thread(target=second.serve_forever, daemon=True)
    t2.start()
    try:
        # the pooled connection points at the stopped server: it is noticed and replaced, the call works
        assert client.health()["status"] == "ok"
        assert client._idle.qsize() == 1
    finally:
        client.close()
        second.stop()
        t2.join(10)


def test_a_reader_that_stops_at_the_fetch_size_costs_nothing_past_it(bridge, tmp_path, monkeypatch):
    """Kafka reads its fetch size (1 MiB) and closes: the bridge stops at that mark until the reader
    drained it and either cancels (nothing more is read or sent) or keeps reading (it gets the rest)."""
    check_reader_stopping_at_the_fetch_size(bridge, tmp_path, monkeypatch)


def check_reader_stopping_at_the_fetch_size(bridge, tmp_path, monkeypatch) -> None:
    """The body of that test, for either transport (test_bridge_shm runs it over the ring)."""
    from rsm.bridge import streaming

    monkeypatch.setattr(streaming, "CANCEL_GRACE_S", 0.5)  # generous: a loaded CI machine is slow
    server, rsm, client = bridge
    mib = 1024 * 1024
    md, sd, data = make_segment(tmp_path, 8 * mib)
    client.copy_log_segment_data(md, sd)
    sent0 = client.health()["bytes_streamed"]
    rsm.bytes_read = 0
    s = client.fetch_log_segment(md, 12345)
    got = bytearray()
    while len(got) < mib:
        got += s.read(mib - len(got))
    s.close()
    assert bytes(got) == data[12345 : 12345 + mib]
    assert s.cancelled
    assert client.health()["bytes_streamed"] - sent0 == mib
    assert rsm.bytes_read == mib
    # a reader that goes on past the mark gets every byte, in order
    with client.fetch_log_segment(md, 7) as s2:
        assert s2.read() == data[7:]
    assert client.health()["bytes_streamed"] - sent0 == mib + len(data) - 7


def plain_file_rsm(tmp_path: Path, chunk: int, extra: dict[str, str]):
    """The real RSM on a file store under tmp_path: plain chunks (no compression, no encryption)."""
    from rsm import RemoteStorageManager

    rsm = RemoteStorageManager()
    rsm.configure(
        {
            "storage.backend": "file",
            "storage.file.root": str(tmp_path / "store"),
            "chunk.size": str(chunk),
            "compression.enabled": "false",
            "encryption.enabled": "false",
            **extra,
        }
    )
    return rsm


def test_real_rsm_streams_chunk_views_across_chunk_boundaries(sock_dir, tmp_path):
    """The real RSM lends views of its decoded chunks (read_view) and the bridge sends them as they are:
    every range, across chunk boundaries and frame sizes, arrives intact; readinto matches the bytes."""
    from kafka_segments import make_segment as make_kafka_segment

    chunk = 100 * 1024 + 3  # chunks never line up with frames
    rsm = plain_file_rsm(tmp_path, chunk, {"fetch.prefetch.chunks": "2"})
    server = BridgeServer(rsm, sock_dir / "r.sock", frame_bytes=64 * 1024, initial_frame_bytes=64 * 1024)
    server.bind()
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    client = BridgeClient(sock_dir / "r.sock")
    try:
        seg = make_kafka_segment(
            tmp_path / "kseg", TopicIdPartition(uuid.uuid4(), "z", 0), batches=150, value_size=4000
        )
        data = seg.data.log_segment.read_bytes()
        assert len(data) > 4 * chunk
        md = dataclasses.replace(
            seg.metadata, custom_metadata=client.copy_log_segment_data(seg.metadata, seg.data)
        )
        for start, end in [
            (0, None),
            (chunk, None),
            (chunk + 2, 3 * chunk + 9),
            (5, 5),
            (len(data) - 1, None),
        ]:
            with client.fetch_log_segment(md, start, end) as s:
                assert s.read() == data[start : None if end is None else end + 1], (start, end)
        direct = rsm.fetch_log_segment(md, 50_000)
        try:
            buf = bytearray(333_333)  # spans chunks: filled in one call, one copy per chunk piece
            assert direct.readinto(buf) == len(buf)
            assert bytes(buf) == data[50_000 : 50_000 + len(buf)]
            pos = 50_000 + len(buf)
            view = direct.read_view(10**9)  # at most up to the end of the current chunk, no copy
            assert bytes(view) == data[pos : (pos // chunk + 1) * chunk]
        finally:
            direct.close()
    finally:
        client.close()
        server.stop()
        t.join(15)
        rsm.close()


@pytest.mark.parametrize("transport", ["socket", "shm"])
def test_a_stalled_reader_lends_its_work_permit(sock_dir, tmp_path, transport):
    """With one work permit, a reader that stops reading (its stream waits on it) does not block others."""
    rsm = MemoryRSM()
    rsm.configure({})
    server = BridgeServer(rsm, sock_dir / "b.sock", fetch_permits=1)
    server.bind()
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    client = BridgeClient(sock_dir / "b.sock", pool_size=4, transport=transport, timeout=10)
    try:
        md, sd, data = make_segment(tmp_path, 32 * 1024 * 1024)
        client.copy_log_segment_data(md, sd)
        stalled = client.fetch_log_segment(md, 0)
        assert stalled.read(1) == data[:1]  # and no more: its stream waits for this reader
        with ThreadPoolExecutor(2) as pool:
            other = pool.submit(lambda: client.fetch_log_segment(md, 5, 5 + 3 * 1024 * 1024).read())
            assert other.result(timeout=10) == data[5 : 5 + 3 * 1024 * 1024 + 1]
        stalled.close()
    finally:
        client.close()
        server.stop()
        t.join(15)


@pytest.mark.parametrize("transport", ["socket", "shm"])
def test_stop_after_ends_the_answer_with_more_and_reads_nothing_past_it(sock_dir, tmp_path, transport):
    """``stop_after`` (the JVM plugin's Kafka fetches): pieces end exactly there, END says whether the range
    goes on, in the same write as the last piece; nothing past it is decoded; a follow-up from there gets
    the rest; a bad value is an INVALID_REQUEST."""
    from kafka_segments import make_segment as make_kafka_segment

    from rsm.bridge.client import BridgeConnection

    chunk = 256 * 1024
    rsm = plain_file_rsm(tmp_path, chunk, {"cache.chunk.bytes": "0", "fetch.prefetch.chunks": "0"})
    server = BridgeServer(rsm, sock_dir / "s.sock", shm_dir=tmp_path / "shm")
    server.bind()
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    conn = BridgeConnection(sock_dir / "s.sock", timeout=10, transport=transport)
    assert (conn.ring is not None) == (transport == "shm")
    try:
        seg = make_kafka_segment(
            tmp_path / "kseg", TopicIdPartition(uuid.uuid4(), "stop", 0), batches=200, value_size=4000
        )
        data = seg.data.log_segment.read_bytes()
        assert len(data) > 3 * 1024 * 1024
        md = dataclasses.replace(
            seg.metadata, custom_metadata=rsm.copy_log_segment_data(seg.metadata, seg.data)
        )
        meta = protocol.encode_metadata(md)

        def answer(rid: int, start: int, end: int | None, stop_after: object) -> tuple[bytes, dict]:
            header = {
                "op": "fetch_log_segment",
                "metadata": meta,
                "start_position": start,
                "end_position": end,
            }
            if stop_after is not None:
                header["stop_after"] = stop_after
            if transport == "shm":
                header["transport"] = "shm"
            protocol.send_frame(conn.sock, FrameType.REQUEST, rid, header)
            got = bytearray()
            while True:
                f = protocol.recv_frame(conn.sock)
                assert f.request_id == rid
                if f.type == FrameType.DATA:
                    got += f.payload
                elif f.type == FrameType.SHM_DATA:
                    slot, n = protocol.SHM_DATA_PAYLOAD.unpack(f.payload)
                    got += conn.ring.slot(slot, n)
                    conn.release_slots(1)
                else:
                    return bytes(got), {"type": f.type, **f.header}

        mib = 1024 * 1024
        read0 = rsm.store.stats.snapshot()["bytes_read"]
        start = chunk + 7
        head, end = answer(1, start, None, mib)
        assert head == data[start : start + mib]
        assert end == {"type": FrameType.END, "bytes": mib, "more": True}
        # chunks decoded: those under [start, start + 1 MiB) (plus the small manifest), not one more
        covering = ((start + mib - 1) // chunk - start // chunk + 1) * chunk
        assert covering <= rsm.store.stats.snapshot()["bytes_read"] - read0 < covering + chunk
        rest, end = answer(2, start + mib, None, None)  # the follow-up: the rest, as a plain fetch
        assert head + rest == data[start:]
        assert end["type"] == FrameType.END and "more" not in end
        # a range that ends exactly at the stop, or before it: no "more"
        exact, end = answer(3, 10, 10 + mib - 1, mib)
        assert exact == data[10 : 10 + mib] and end["more"] is False
        short, end = answer(4, len(data) - 100, None, mib)
        assert short == data[-100:] and end == {"type": FrameType.END, "bytes": 100}
        for bad in (0, -5, "1", True):
            _, err = answer(5, 0, None, bad)
            assert err["type"] == FrameType.ERROR and err["code"] == "INVALID_REQUEST", bad
            assert "stop_after" in err["message"]
    finally:
        conn.close()
        server.stop()
        t.join(15)
        rsm.close()


def test_health_reports_record_validation_counters(sock_dir, tmp_path):
    """An operator sees validation work in the bridge's stats: per topic, segments, records, violations."""
    from kafka_segments import make_segment as make_kafka_segment

    from rsm import LogConfig, TopicIdPartition

    rsm = plain_file_rsm(tmp_path, 1 << 20, {"record.validation.on.violation": "tier"})
    server = BridgeServer(rsm, sock_dir / "v.sock")
    server.bind()
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    client = BridgeClient(sock_dir / "v.sock")
    try:
        assert client.health()["record_validation"] == {}
        seg = make_kafka_segment(tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "checked", 0), batches=4)
        lc = LogConfig({"unchecked.record.validation.policy": "header:h"})
        client.copy_log_segment_data(seg.metadata, seg.data, lc)
        stats = client.health()["record_validation"]["checked"]
        records = seg.metadata.end_offset - seg.metadata.start_offset + 1
        assert stats["segments"] == 1 and stats["records"] == records
        # make_segment gives every other record of a batch the header "h"
        assert 0 < stats["violations"] < records
    finally:
        client.close()
        server.stop()
        t.join(10)
        rsm.close()
