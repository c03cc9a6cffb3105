"""The JVM plugin driven as the broker drives it, against a real bridge hosting the real RSM (no broker).

``PluginDriver`` (rsm/bridge/jvm/src/test/java) calls BridgeRemoteStorageManager with Kafka's own value
types; the segment is written by Kafka's classes (the oracle). Covers: the plugin starting the bridge,
copy/fetch/index/delete through it, early close (cancel), error mapping to Kafka's exceptions, restart of
a bridge killed with SIGKILL, and shutdown.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rsm.cli.bridge import JVM_DIR, build_plugin

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    shutil.which("mvn") is None or shutil.which("java") is None, reason="needs JDK+Maven"
)


@pytest.fixture(scope="session")
def bridge_plugin_jar() -> Path:
    """The plugin jar, built with Maven unless it is newer than its sources."""
    return build_plugin()


def bridge_command() -> str:
    """How the plugin starts the bridge in tests: this interpreter, so the bridge sees the same packages."""
    return f"{sys.executable} -m rsm.cli.main -v bridge serve"


def write_keyring(path: Path) -> str:
    path.write_text(json.dumps({"k1": base64.b64encode(os.urandom(32)).decode()}))
    path.chmod(0o600)
    return "k1"


class Driver:
    """The Java driver process: one command per line, one JSON answer per line."""

    def __init__(self, classpath: str, cwd: Path, pythonpath: str = str(REPO)) -> None:
        self.proc = subprocess.Popen(
            ["java", "-cp", classpath, "io.tieredrsm.bridge.PluginDriver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(cwd / "driver.err", "wb"),  # noqa: SIM115 - lives as long as the process
            cwd=cwd,
            text=True,
            env=dict(os.environ, PYTHONPATH=pythonpath),
        )

    def __call__(self, command: str) -> dict[str, Any]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        while True:  # log lines (the JVM's logging may go to stdout) are skipped
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"driver exited during {command!r}")
            if line.startswith("@@ "):
                return json.loads(line[3:])

    def ok(self, command: str) -> dict[str, Any]:
        answer = self(command)
        assert answer["ok"], f"{command}: {answer}"
        return answer

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def driver_classpath(java_build: Any) -> str:
    """The plugin's classes, the driver's test classes and Kafka's jars, as the broker would load them."""
    return os.pathsep.join(
        [
            str(JVM_DIR / "target" / "classes"),
            str(JVM_DIR / "target" / "test-classes"),
            str(java_build.kafka_libs / "*"),
        ]
    )


def segment_data_files(sd: Any, epochs: Path) -> dict[str, Any]:
    """The driver's `segment` fields for a LogSegmentData (its leader epochs written to ``epochs``)."""
    return {
        "log": str(sd.log_segment),
        "index": str(sd.offset_index),
        "timeindex": str(sd.time_index),
        "txnindex": str(sd.transaction_index),
        "snapshot": str(sd.producer_snapshot_index),
        "epochs_file": str(epochs),
    }


def segment_files(seg_dir: Path) -> dict[str, Any]:
    log = next(seg_dir.glob("*.log"))
    base = log.stem
    txn = seg_dir / f"{base}.txnindex"
    return {
        "log": str(log),
        "index": str(seg_dir / f"{base}.index"),
        "timeindex": str(seg_dir / f"{base}.timeindex"),
        "txnindex": str(txn) if txn.exists() else None,
        "snapshot": str(next(seg_dir.glob("*.snapshot"))),
        "epochs_file": str(seg_dir / "leader-epoch-checkpoint"),
    }


def test_plugin_copy_fetch_cancel_restart_delete(
    bridge_plugin_jar, java_oracle, java_build, short_dir, tmp_path
):
    seg_dir = tmp_path / "seg"
    seg_dir.mkdir()
    java_oracle.write_segment(seg_dir, "zstd", records=3000, value_size=300, transactional=True)
    files = segment_files(seg_dir)
    expected = java_oracle.expected(seg_dir)
    last_offset = max(b["lastOffset"] for b in expected["batches"])
    log_bytes = Path(files["log"]).read_bytes()
    store = tmp_path / "store"
    key_id = write_keyring(short_dir / "keyring.json")
    props = short_dir / "plugin.properties"
    props.write_text(
        "\n".join(
            [
                "storage.backend=file",
                f"storage.file.root={store}",
                "bucket=tiered",
                "prefix=p1/",
                "encryption.enabled=true",
                f"encryption.keyring.path={short_dir / 'keyring.json'}",
                f"encryption.key.id={key_id}",
                f"bridge.socket.path={short_dir / 'b.sock'}",
                f"bridge.command={bridge_command()}",
                f"bridge.log.file={short_dir / 'bridge.log'}",
                "bridge.restart.backoff.ms=100",
                "broker.id=7",
            ]
        )
        + "\n"
    )
    classpath = driver_classpath(java_build)
    driver = Driver(classpath, tmp_path)
    try:
        driver.ok(f"configure {props}")
        sock_mode = os.stat(short_dir / "b.sock").st_mode & 0o777
        assert sock_mode == 0o600
        seg = {**files, "start": 0, "end": last_offset, "topic": "orders", "partition": 2}
        driver.ok("segment " + json.dumps(seg))
        # fetching before the copy: Kafka's RemoteResourceNotFoundException
        missing = driver("fetch 0")
        assert missing["exception"] == "RemoteResourceNotFoundException", missing
        copied = driver.ok("copy")
        assert 0 < copied["custom_metadata_bytes"] <= 128
        # the generated config the plugin handed to the bridge is owner-only
        assert (short_dir / "bridge-7.properties").stat().st_mode & 0o777 == 0o600
        # the store holds encrypted objects only: no 64-byte window of the segment appears in them
        stored = b"".join(p.read_bytes() for p in store.rglob("*") if p.is_file())
        assert stored and all(
            log_bytes[i : i + 64] not in stored for i in range(0, len(log_bytes) - 64, 4096)
        )
        full = driver.ok("fetch 0")
        assert (full["length"], full["sha256"]) == (len(log_bytes), sha(log_bytes))
        part = driver.ok("fetch 1000 50999")
        assert (part["length"], part["sha256"]) == (50_000, sha(log_bytes[1000:51000]))
        # Kafka reads what it needs and closes: the stream is cancelled, the connection reused
        head = driver.ok("fetch_partial 17 5000")
        assert head["sha256"] == sha(log_bytes[17:5017])
        # ten of Kafka's reader threads at once, over the pooled connections
        concurrent = driver.ok("fetch_concurrent 10")
        assert concurrent["digests"] == [sha(log_bytes)]
        for index_type, path in [
            ("OFFSET", files["index"]),
            ("TIMESTAMP", files["timeindex"]),
            ("PRODUCER_SNAPSHOT", files["snapshot"]),
            ("LEADER_EPOCH", files["epochs_file"]),
        ]:
            got = driver.ok(f"index {index_type}")
            assert got["sha256"] == sha(Path(path).read_bytes()), index_type
        if files["txnindex"]:
            assert driver.ok("index TRANSACTION")["sha256"] == sha(Path(files["txnindex"]).read_bytes())
        health = driver.ok("health")
        assert health["status"] == "ok" and health["in_flight"] == 1
        # the plugin negotiated the shared-memory transport: fetched bytes went through the rings
        assert health["shm_bytes_streamed"] >= 2 * len(log_bytes), health
        # ... most of them read in place from the chunk arena (decoded there, not copied into a slot)
        assert health["arena_bytes_streamed"] >= len(log_bytes), health
        old_pid = health["pid"]

        # kill -9 the bridge: once it is gone, the very next call finds a fresh one the plugin started
        # (pooled connections to the dead bridge are noticed and dropped, not used for the call)
        os.kill(old_pid, signal.SIGKILL)
        # wait until the JVM reaped it: a killed multi-threaded process shows as a zombie while its other
        # threads still exit, and its sockets close only then
        deadline = time.monotonic() + 10
        while Path(f"/proc/{old_pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        after = driver.ok("health")
        assert after["pid"] != old_pid and after["restarts"] >= 1, after
        good = [after]
        again = driver.ok("fetch 0")
        assert again["sha256"] == sha(log_bytes)

        driver.ok("delete")
        gone = driver("fetch 0")
        assert gone["exception"] == "RemoteResourceNotFoundException", gone
        assert not any(p.name.endswith(".manifest") for p in store.rglob("*"))
        new_pid = good[-1]["pid"]
        driver.ok("close")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and _alive(new_pid):
            time.sleep(0.1)
        assert not _alive(new_pid), "bridge still running after the plugin closed"
        assert not (short_dir / "b.sock").exists()
    finally:
        driver.stop()
        print(
            (short_dir / "bridge.log").read_text() if (short_dir / "bridge.log").exists() else "",
            file=sys.stderr,
        )


def test_plugin_reports_a_bridge_that_cannot_start(bridge_plugin_jar, java_build, short_dir, tmp_path):
    props = short_dir / "plugin.properties"
    props.write_text(
        f"bridge.socket.path={short_dir / 'b.sock'}\n"
        f"bridge.command={bridge_command()} --rsm-class no_such_module:Nope\n"
        f"bridge.log.file={short_dir / 'bridge.log'}\n"
        "bridge.restart.backoff.ms=60000\n"
        "storage.file.root=/nonexistent\n"
    )
    classpath = driver_classpath(java_build)
    driver = Driver(classpath, tmp_path)
    try:
        driver.ok(f"configure {props}")  # Kafka must not fail to start because the bridge is down
        seg = {
            "log": "/x.log", "index": "/x.index", "timeindex": "/x.t", "txnindex": None, "snapshot": "/x.s",
            "epochs_file": str(props), "start": 0, "end": 1, "topic": "t", "partition": 0,
        }  # fmt: skip
        driver("segment " + json.dumps(seg))
        failed = driver("health")
        assert failed["exception"] == "RemoteStorageException"
        assert "backoff" in failed["message"] or "exited" in failed["message"], failed
        assert "no_such_module" in (short_dir / "bridge.log").read_text()
    finally:
        driver.stop()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie child of the (exited) driver JVM counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_build_plugin_command_prints_the_jar(bridge_plugin_jar):
    result = subprocess.run(
        [sys.executable, "-m", "rsm.cli.main", "bridge", "build-plugin"],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert result.returncode == 0, result.stderr
    jar = Path(result.stdout.strip())
    assert jar == bridge_plugin_jar and jar.is_file()
    import zipfile

    names = zipfile.ZipFile(jar).namelist()
    assert "io/tieredrsm/bridge/BridgeRemoteStorageManager.class" in names
    assert not [n for n in names if n.startswith("org/apache/kafka/")], "Kafka classes must not be bundled"
    assert not [n for n in names if "Driver" in n], "test drivers must not be in the plugin jar"


def test_plugin_gives_up_on_a_bridge_that_does_not_answer(bridge_plugin_jar, java_build, short_dir, tmp_path):
    from test_bridge_server import MemoryRSM

    from rsm.bridge.server import BridgeServer

    release = threading.Event()
    server = BridgeServer(
        MemoryRSM(),
        short_dir / "b.sock",
        handlers={"health": lambda ctx: release.wait(30) and {"status": "late"}},
    )
    server.bind()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    props = short_dir / "plugin.properties"
    props.write_text(
        f"bridge.socket.path={short_dir / 'b.sock'}\nbridge.command=\nbridge.request.timeout.ms=1000\n"
    )
    classpath = driver_classpath(java_build)
    driver = Driver(classpath, tmp_path)
    try:
        driver.ok(f"configure {props}")
        started = time.monotonic()
        late = driver("health")
        assert late["exception"] == "RemoteStorageException"
        assert "no answer from the bridge within 1000 ms" in late["message"], late
        assert time.monotonic() - started < 10
    finally:
        release.set()
        driver.stop()
        server.stop()
        thread.join(15)


def test_plugin_takes_a_busy_bridge_for_a_live_one(bridge_plugin_jar, java_build, short_dir, tmp_path):
    """A bridge at bridge.max.connections refuses a connection with BUSY: the plugin fails that call with
    the bridge's reason (it must not take the refusing bridge for a dead one, which it would kill and
    restart), and works again once a connection is free."""
    import socket as socket_module

    from test_bridge_server import MemoryRSM

    from rsm.bridge import protocol
    from rsm.bridge.admission import Limits
    from rsm.bridge.server import BridgeServer

    server = BridgeServer(MemoryRSM(), short_dir / "b.sock", limits=Limits(max_connections=1))
    server.bind()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    hog = socket_module.socket(socket_module.AF_UNIX)
    hog.settimeout(10)
    hog.connect(str(short_dir / "b.sock"))
    protocol.send_frame(hog, protocol.FrameType.HELLO, 0, protocol.client_hello("hog"))
    assert protocol.recv_frame(hog).type == protocol.FrameType.HELLO  # the one connection served
    props = short_dir / "plugin.properties"
    props.write_text(f"bridge.socket.path={short_dir / 'b.sock'}\nbridge.command=\n")
    driver = Driver(driver_classpath(java_build), tmp_path)
    try:
        driver.ok(f"configure {props}")
        busy = driver("health")
        assert busy["exception"] == "RemoteStorageException", busy
        assert "BUSY" in busy["message"] and "bridge.max.connections" in busy["message"], busy
        hog.close()
        deadline = time.monotonic() + 10
        while server._conns and time.monotonic() < deadline:
            time.sleep(0.02)
        assert driver.ok("health")
    finally:
        hog.close()
        driver.stop()
        server.stop()
        thread.join(15)


@pytest.mark.parametrize("transport", ["shm", "socket"])
def test_plugin_transport_shm_and_socket_fallback(
    bridge_plugin_jar, java_build, short_dir, tmp_path, transport
):
    """bridge.transport=shm (default) fetches through shared-memory rings; =socket keeps DATA frames.
    Both give the same bytes, cancel early closes, and leave no ring file behind."""
    from test_bridge_server import MemoryRSM, make_segment

    from rsm.bridge.server import BridgeServer

    shm_dir = short_dir / "shm"
    server = BridgeServer(MemoryRSM(), short_dir / "b.sock", shm_dir=shm_dir)
    server.bind()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _, sd, data = make_segment(tmp_path, 5 * 1024 * 1024 + 4321)
    epochs = tmp_path / "epochs"
    epochs.write_bytes(sd.leader_epoch_index)
    props = short_dir / "plugin.properties"
    props.write_text(
        f"bridge.socket.path={short_dir / 'b.sock'}\nbridge.command=\nbridge.transport={transport}\n"
    )
    classpath = driver_classpath(java_build)
    driver = Driver(classpath, tmp_path)
    try:
        driver.ok(f"configure {props}")
        seg = {**segment_data_files(sd, epochs), "start": 0, "end": 99, "topic": "t", "partition": 0}
        driver.ok("segment " + json.dumps(seg))
        driver.ok("copy")
        full = driver.ok("fetch 0")
        assert (full["length"], full["sha256"]) == (len(data), sha(data))
        part = driver.ok("fetch 1000 2500000")
        assert part["sha256"] == sha(data[1000:2500001])
        head = driver.ok("fetch_partial 17 1500000")  # past the first MiB, then closed: cancelled
        assert head["sha256"] == sha(data[17:1500017])
        # Kafka's pattern: exactly the first answer (1 MiB), then close: no CANCEL, the slot goes back
        # with the next request on the pooled connection, which must still answer right
        for start in (17, 3 * 1024 * 1024):
            exact = driver.ok(f"fetch_partial {start} {1024 * 1024}")
            assert exact["sha256"] == sha(data[start : start + 1024 * 1024])
        tail = driver.ok(f"fetch {len(data) - 1024 * 1024 - 5}")  # ends 5 bytes past the first answer
        assert tail["sha256"] == sha(data[len(data) - 1024 * 1024 - 5 :])
        concurrent = driver.ok("fetch_concurrent 10")
        assert concurrent["digests"] == [sha(data)]
        health = driver.ok("health")
        if transport == "shm":
            assert health["shm_bytes_streamed"] >= 2 * len(data), health
        else:
            assert health["shm_bytes_streamed"] == 0 and health["bytes_streamed"] >= 2 * len(data), health
        assert list(shm_dir.iterdir()) == []  # mapped rings are unlinked at once
        driver.ok("close")
    finally:
        driver.stop()
        server.stop()
        thread.join(15)
    assert list(shm_dir.iterdir()) == []


def test_plugin_shm_stream_fails_cleanly_when_the_bridge_is_killed_mid_stream(
    bridge_plugin_jar, java_build, short_dir, tmp_path
):
    """SIGKILL of the bridge while Kafka holds a half-read stream over shm: the read fails with an
    IOException (no hang, no crash of the JVM), and the next call gets a restarted bridge."""
    from test_bridge_server import make_segment

    tests_dir = Path(__file__).resolve().parents[1]
    _, sd, data = make_segment(tmp_path, 6 * 1024 * 1024)
    epochs = tmp_path / "epochs"
    epochs.write_bytes(sd.leader_epoch_index)
    props = short_dir / "plugin.properties"
    props.write_text(
        f"bridge.socket.path={short_dir / 'b.sock'}\n"
        f"bridge.command={bridge_command()} --rsm-class test_bridge_server:MemoryRSM\n"
        f"bridge.log.file={short_dir / 'bridge.log'}\n"
        f"bridge.shm.dir={short_dir / 'shm'}\n"
        "fetch.delay.ms=5\nbridge.restart.backoff.ms=100\n"
    )
    classpath = driver_classpath(java_build)
    driver = Driver(
        classpath, tmp_path, os.pathsep.join([str(tests_dir), str(tests_dir / "broker"), str(REPO)])
    )
    try:
        driver.ok(f"configure {props}")
        seg = {**segment_data_files(sd, epochs), "start": 0, "end": 99, "topic": "t", "partition": 0}
        driver.ok("segment " + json.dumps(seg))
        driver.ok("copy")
        health = driver.ok("health")
        assert driver.ok("open 0 1500000")["length"] == 1_500_000
        assert driver.ok("health")["shm_bytes_streamed"] > 0
        os.kill(health["pid"], signal.SIGKILL)
        rest = driver("rest")
        assert not rest["ok"] and rest["exception"] in ("IOException", "RemoteStorageException"), rest
        after = driver.ok("health")  # the plugin restarted the bridge
        assert after["pid"] != health["pid"]
        driver.ok("close")
    finally:
        driver.stop()
    leftovers = list((short_dir / "shm").iterdir()) if (short_dir / "shm").exists() else []
    assert leftovers == []
