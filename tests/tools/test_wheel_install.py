"""The wheel as users get it: its two prebuilt jars work where neither Maven nor a JDK compiler is.

The wheel is built (setup.py builds the jars into it) from a copy of this work tree (`git ls-files`, new
files included: git's state is left alone), cached under `.cache/wheel/` by a hash of those files, the
Python and the Spark it compiles against. It goes into a fresh virtualenv with its dependencies from PyPI
(pyspark pinned to the Spark its scan jar was built for); nothing of the checkout is importable there.
Then, with `java` on the PATH but no `mvn` and no `javac`:

- `rsm bridge plugin-path` prints the wheel's plugin jar; a real Kafka 4.4 broker loads it (its bridge run
  by the virtualenv's Python), tiers a small topic into a file store, and a consumer from offset 0 reads
  every record back, the first segments from the store;
- `rsm spark jar` prints the wheel's scan jar; a plain SparkSession with it on `spark.jars` reads the
  tiered topic through the columnar scan (`KafkaTieredColumnarScan` in the plan), the consumer's records.

Fast: the lookups prefer a packaged jar to building one, and say in one line when there is neither a jar
nor what builds one.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from harness.kafka import KafkaBroker, tiered_storage_props
from harness.waiting import wait_until

import spark_reader.jar as scan_jar
from rsm.bridge import plugin_jar
from rsm.cli.main import main

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "wheel"
BUILD_TOOLS = ("mvn", "javac")
PLUGIN_CLASS = "io.tieredrsm.bridge.BridgeRemoteStorageManager"
TOPIC = "wheel-tiered"
RECORDS = 2400
VALUE_SIZE = 1000  # 2.4 MB: two 1 MiB segments tiered and trimmed locally

SPARK_APP = """
import base64, json, sys
from pyspark.sql import SparkSession

jar, store, topic, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.jars", jar).getOrCreate())
df = spark.read.format("kafka-tiered").options(**store).option("subscribe", topic).load()
plan = df._jdf.queryExecution().executedPlan().toString()
rows = [[r.offset, base64.b64encode(r.key).decode(), base64.b64encode(r.value).decode()]
        for r in df.select("offset", "key", "value").collect()]
json.dump({"plan": plan, "rows": sorted(rows)}, open(out, "w"))
spark.stop()
"""


def value_of(n: int) -> bytes:
    return hashlib.shake_256(f"wheel-{n}".encode()).digest(VALUE_SIZE)


# ---------------------------------------------------------------------------------------- the wheel
def _work_tree_files() -> list[str]:
    """What a commit of this work tree would hold: tracked files and new ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout  # fmt: skip
    return sorted(n for n in map(os.fsdecode, filter(None, listed.split(b"\0"))) if (REPO / n).is_file())


def _wheel_key(files: list[str]) -> str:
    jars = scan_jar.spark_jars_dir()
    h = hashlib.sha256(f"{sys.version}\0{scan_jar.spark_version(jars)}\0".encode())
    for name in files:
        h.update(f"{name}\0{hashlib.sha256((REPO / name).read_bytes()).hexdigest()}\0".encode())
    return h.hexdigest()[:16]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def built_wheel(work: Path) -> Path:
    """The wheel of this work tree: from the cache, else built by pip from a copy of the files."""
    files = _work_tree_files()
    home = CACHE / _wheel_key(files)
    with _locked(CACHE.with_suffix(".lock")):
        cached = sorted(home.glob("kafka_tiered_rsm-*.whl"))
        if cached:
            return cached[0]
        src, dist = work / "src", work / "dist"
        for name in files:
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, src / name)
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist), str(src)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
        assert done.returncode == 0, f"the wheel did not build:\n{(done.stdout + done.stderr)[-4000:]}"
        for older in CACHE.glob("*/"):  # earlier work trees' wheels (every entry here is this test's)
            shutil.rmtree(older)
        home.mkdir(parents=True)
        (wheel,) = dist.glob("kafka_tiered_rsm-*.whl")
        return Path(shutil.move(wheel, home / wheel.name))


@dataclass(frozen=True)
class Installed:
    venv: Path
    env: dict[str, str]  # java on the PATH, no mvn, no javac, no JAVA_HOME; the venv's bin first

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def rsm(self, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.venv / "bin" / "rsm"), *args],
            cwd=cwd, env=self.env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip


def without_build_tools(venv: Path, work: Path) -> dict[str, str]:
    """This environment as a user's with a JRE: PATH's directories holding `mvn` or `javac` replaced by
    directories of links to everything else in them, JAVA_HOME unset, nothing of the checkout's imports."""
    dirs = [str(venv / "bin")]
    for entry in os.environ["PATH"].split(os.pathsep):
        d = Path(entry)
        if not any((d / tool).exists() for tool in BUILD_TOOLS):
            dirs.append(entry)
            continue
        mirror = work / f"bin-{len(dirs)}"
        mirror.mkdir()
        for f in d.iterdir():
            if f.name not in BUILD_TOOLS:
                (mirror / f.name).symlink_to(f)
        dirs.append(str(mirror))
    dropped = (
        "JAVA_HOME",
        "PYTHONPATH",
        "SPARK_HOME",
        "VIRTUAL_ENV",
        "PYSPARK_PYTHON",
        "PYSPARK_DRIVER_PYTHON",
    )
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["PATH"] = os.pathsep.join(dirs)
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    work = tmp_path_factory.mktemp("wheel")
    wheel = built_wheel(work)
    names = zipfile.ZipFile(wheel).namelist()
    assert {"rsm/bridge/lib/rsm-bridge-plugin.jar", "spark_reader/lib/kafka-tiered-spark.jar"} <= set(names)
    assert not [n for n in names if "/jvm/" in n], "the Java sources stay out of the wheel"
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pyspark = f"pyspark=={scan_jar.running_spark_version()}"  # the Spark the wheel's scan jar is built for
    # nothing of the checkout on the installer's path: with PYTHONPATH naming the checkout (other test files set
    # it for Spark's workers) pip finds its egg-info there, calls the package installed and skips the wheel
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    install = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", f"{wheel}[spark]", pyspark],
        capture_output=True, text=True, timeout=1200, check=False, env=clean,
    )  # fmt: skip
    assert (venv / "bin" / "rsm").exists(), "the wheel itself was installed, not only its dependencies"
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    env = without_build_tools(venv, work)
    assert shutil.which("java", path=env["PATH"]), "java is on the user's PATH"
    assert not any(shutil.which(tool, path=env["PATH"]) for tool in BUILD_TOOLS)
    return Installed(venv, env)


def _site_packages(installed: Installed) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    out = subprocess.run([installed.python, "-c", code], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


# --------------------------------------------------------------------- one broker, one tiered topic
@dataclass(frozen=True)
class Tiered:
    broker: KafkaBroker
    store: dict[str, str]  # the reader's options: the broker's rsm.config.* store settings


@pytest.fixture(scope="module")
def tiered(installed: Installed, java_build, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiered]:  # noqa: ANN001
    """A broker loading `rsm bridge plugin-path`'s jar, its topic's first segments tiered and trimmed."""
    from kafka import KafkaProducer

    work = tmp_path_factory.mktemp("wheel-broker")
    found = installed.rsm("bridge", "plugin-path", cwd=work)
    assert found.returncode == 0 and not found.stderr, found.stderr
    jar = Path(found.stdout.strip())
    assert jar == _site_packages(installed) / "rsm" / "bridge" / "lib" / plugin_jar.JAR_NAME
    short = Path(tempfile.mkdtemp(prefix="rsm-whl-", dir="/tmp"))  # a Unix socket path is short
    store = {"storage.backend": "file", "storage.file.root": str(work / "store"), "bucket": "tiered"}
    (work / "store" / "tiered").mkdir(parents=True)
    # -I: the bridge imports the virtualenv's package alone (the harness gives the broker our PYTHONPATH)
    bridge = {
        "bridge.command": f"{installed.python} -I -m rsm.cli.main bridge serve",
        "bridge.socket.path": str(short / "bridge.sock"),
        "bridge.log.file": str(work / "bridge.log"),
    }
    props = tiered_storage_props(PLUGIN_CLASS, {**store, **bridge})
    props["remote.log.storage.manager.class.path"] = str(jar)
    broker = KafkaBroker(work / "broker", extra_props=props, java_build=java_build)
    try:
        broker.start()
        broker.create_topic(TOPIC, 1, {"remote.storage.enable": "true", "segment.bytes": str(1024 * 1024),
                                       "local.retention.ms": "1000", "retention.ms": "-1"})  # fmt: skip
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks="all", linger_ms=10)
        for n in range(RECORDS):
            producer.send(TOPIC, key=str(n).encode(), value=value_of(n))
        producer.flush()
        producer.close()

        def trimmed() -> bool:  # the first local segment starts past 0: offset 0 lives in the store only
            logs = sorted(int(p.stem) for p in broker.partition_dir(TOPIC).glob("*.log"))
            return bool(logs) and logs[0] > 0

        wait_until("the first segments tiered and deleted locally", trimmed, 180, 1.0)
        yield Tiered(broker, store)
    finally:
        broker.stop()
        shutil.rmtree(short, ignore_errors=True)


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.timeout(1500)
def test_a_broker_loads_the_wheels_plugin_and_reads_back_from_offset_0(tiered: Tiered) -> None:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=tiered.broker.bootstrap_servers, enable_auto_commit=False)
    tp = TopicPartition(TOPIC, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got: list[tuple[int, bytes, bytes]] = []

    def read_all() -> bool:
        for records in consumer.poll(timeout_ms=1000).values():
            got.extend((r.offset, r.key, r.value) for r in records)
        return len(got) >= RECORDS

    try:
        wait_until(f"{RECORDS} records from offset 0", read_all, 120, 0)
    finally:
        consumer.close()
    assert got == [(n, str(n).encode(), value_of(n)) for n in range(RECORDS)]


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.timeout(1500)
def test_a_plain_spark_session_reads_through_the_wheels_columnar_scan(
    installed: Installed, tiered: Tiered, tmp_path: Path
) -> None:
    found = installed.rsm("spark", "jar", cwd=tmp_path)
    assert found.returncode == 0 and not found.stderr, found.stderr  # no "building ... with javac"
    jar = Path(found.stdout.strip())
    assert jar == _site_packages(installed) / "spark_reader" / "lib" / scan_jar.PACKAGED_JAR.name
    app, out = tmp_path / "read.py", tmp_path / "out.json"
    app.write_text(SPARK_APP)
    env = {**installed.env, "PYSPARK_PYTHON": str(installed.python), "SPARK_LOCAL_IP": "127.0.0.1"}
    run = subprocess.run(
        [str(installed.python), str(app), str(jar), json.dumps(tiered.store), TOPIC, str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-6000:]
    result = json.loads(out.read_text())
    assert "KafkaTieredColumnarScan" in result["plan"], result["plan"]
    rows = [(o, base64.b64decode(k), base64.b64decode(v)) for o, k, v in result["rows"]]
    # the tiered segments: a prefix of the topic from offset 0, at least what the broker trimmed
    first_local = min(int(p.stem) for p in tiered.broker.partition_dir(TOPIC).glob("*.log"))
    assert len(rows) >= first_local > 0
    assert rows == [(n, str(n).encode(), value_of(n)) for n in range(len(rows))]


# ------------------------------------------------------------------------------ the lookups, fast
def _manifest_jar(path: Path, spark_version: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", f"Manifest-Version: 1.0\nSpark-Version: {spark_version}\n")
    return path


def test_a_packaged_jar_is_preferred_to_building_one(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    """With both a packaged jar and the sources beside it, and no build tool on the PATH, the packaged
    jars are what the commands print: nothing is built."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    plugin = _manifest_jar(tmp_path / "rsm-lib" / plugin_jar.JAR_NAME, "n/a")
    monkeypatch.setattr(plugin_jar, "PACKAGED_JAR", plugin)
    scan = _manifest_jar(tmp_path / "spark-lib" / "scan.jar", scan_jar.running_spark_version())
    monkeypatch.setattr(scan_jar, "PACKAGED_JAR", scan)
    assert (plugin_jar.JVM_DIR / "pom.xml").is_file() and scan_jar.SOURCES.is_dir()  # a checkout's sources

    assert main(["bridge", "plugin-path"]) == 0
    assert capsys.readouterr().out == f"{plugin}\n"
    assert main(["bridge", "build-plugin"]) == 0
    out, err = capsys.readouterr()
    assert out == f"{plugin}\n" and err == f"rsm bridge build-plugin: the plugin ships prebuilt at {plugin}\n"
    assert main(["spark", "jar"]) == 0
    assert capsys.readouterr() == (f"{scan}\n", "")


def test_neither_a_jar_nor_what_builds_one_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    """An installation without the packaged jars or their sources, and a checkout without Maven or javac:
    each command says what is missing in one line, no traceback."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(plugin_jar, "PACKAGED_JAR", tmp_path / "rsm-lib" / plugin_jar.JAR_NAME)
    monkeypatch.setattr(scan_jar, "PACKAGED_JAR", tmp_path / "spark-lib" / "scan.jar")

    def one_line(argv: list[str], *words: str) -> None:
        assert main(argv) != 0
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and all(w in err for w in words), err

    # a checkout: the sources are here, the tools are not
    monkeypatch.setattr(plugin_jar, "plugin_jar_is_fresh", lambda *_: False)
    one_line(["bridge", "plugin-path"], "Maven (mvn) is not on PATH")
    monkeypatch.setattr(scan_jar, "_out_dir", lambda: tmp_path)
    one_line(["spark", "jar"], "javac")
    # an installation: no packaged jar and no sources
    monkeypatch.setattr(plugin_jar, "JVM_DIR", tmp_path / "no-jvm")
    monkeypatch.setattr(scan_jar, "SOURCES", tmp_path / "no-src")
    one_line(["bridge", "plugin-path"], "not packaged here", "rsm-lib")
    one_line(["bridge", "build-plugin"], "not packaged here", "rsm-lib")
    one_line(["spark", "jar"], "not packaged here", "spark-lib")


def test_a_scan_jar_built_for_another_spark_line_is_refused_in_one_line(
    tmp_path: Path,
    monkeypatch,
    capsys,  # noqa: ANN001
) -> None:
    running = scan_jar.running_spark_version()
    other = f"{int(running.split('.')[0]) - 1}.5.0"
    monkeypatch.setattr(scan_jar, "PACKAGED_JAR", _manifest_jar(tmp_path / "scan.jar", other))
    assert main(["spark", "jar"]) != 0
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert f"built for Spark {other}" in err and f"this pyspark is {running}" in err
