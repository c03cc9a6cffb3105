"""Shared fixtures: the real components the suite runs against (see tests/harness).

Session fixtures start each component once and always stop it; tests that use one are marked
automatically (kafka, s3, spark, oracle), so ``-m "not kafka"`` skips every broker test whether or not
the test marked itself.
"""

from __future__ import annotations

import faulthandler
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# The harness package and the helper modules sit beside this file; the tests live in one folder per feature
# (format, rsm, store, broker, spark, migrate, tools) and some import a sibling's fixtures or helpers by module
# name, so every folder is importable whatever pytest's rootdir/import mode (file names are unique across them).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.paths import FEATURE_DIRS  # noqa: E402

sys.path[1:1] = [str(d) for d in FEATURE_DIRS if str(d) not in sys.path]

from harness import prewarm  # noqa: E402
from harness.clouds import AzuriteServer, FakeGcsServer  # noqa: E402
from harness.emulators import EmulatorUnavailable, azurite_blob_command, fake_gcs_command, unavailable  # noqa: E402
from harness.kafka import KafkaBroker  # noqa: E402
from harness.maven import JavaBuild, build_dump_log_tool, build_test_java  # noqa: E402
from harness.oracle import JavaOracle  # noqa: E402
from harness.s3 import S3Server  # noqa: E402
from harness.spark_cluster import SparkCluster  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# fixture name -> marker added to every test that uses it (directly or through other fixtures)
FIXTURE_MARKERS: dict[str, str] = {
    "kafka_broker": "kafka",
    "kafka_broker_factory": "kafka",
    "kafka_libs": "kafka",
    "s3_server": "s3",
    "gcs_server": "gcs",
    "azurite_server": "azure",
    "spark": "spark",
    "spark_cluster": "spark",
    "java_oracle": "oracle",
    "java_build": "oracle",
    "kafka_dump_log": "oracle",
}


# How long past its pytest-timeout a test may still run before the watchdog ends the session (below).
_PREWARM = pytest.StashKey["object"]()

HANG_GRACE_S = float(os.environ.get("RSM_TEST_HANG_GRACE_S", "120"))
_hang_fd: int | None = None


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python's protocol schema loader uses deprecated importlib.resources calls on every import.
    config.addinivalue_line("filterwarnings", "ignore:read_text is deprecated:DeprecationWarning")
    config.addinivalue_line("filterwarnings", "ignore:open_text is deprecated:DeprecationWarning")
    global _hang_fd
    if _hang_fd is None:
        _hang_fd = os.dup(2)  # the real stderr: output capture is suspended while plugins configure


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A watchdog for hangs that pytest-timeout cannot break.

    pytest-timeout's signal raises once, in the main thread. A test stuck where the signal's exception
    cannot end it (native code holding the GIL, or the exception unwinding into a `ThreadPoolExecutor`
    that then waits for a stuck worker) would otherwise hold the whole run until CI's own limit, with no
    word of where. So each test also arms faulthandler's C watchdog: past its timeout plus a grace, it
    writes every thread's stack to the real stderr and ends the session (exit 1)."""
    marker = item.get_closest_marker("timeout")
    if marker and marker.args:
        timeout = float(marker.args[0])
    else:  # pytest-timeout's own order: --timeout, then PYTEST_TIMEOUT, then the ini file
        given = item.config.getoption("timeout", None) or os.environ.get("PYTEST_TIMEOUT")
        timeout = float(given or item.config.getini("timeout") or 0)
    debugging = item.config.getoption("usepdb", False)  # a session stopped at a breakpoint is no hang
    if timeout > 0 and _hang_fd is not None and not debugging:
        faulthandler.dump_traceback_later(timeout + HANG_GRACE_S, exit=True, file=_hang_fd)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        # a test parametrized over clouds (the `cloud` fixture, or any parameter naming one: "gcs", "azure",
        # "s3") is marked with the cloud it runs on, so `-m "not azure"` leaves it out
        callspec = getattr(item, "callspec", None)
        for value in callspec.params.values() if callspec is not None else ():
            if isinstance(value, str) and value in CLOUD_FIXTURES:
                names.add(CLOUD_FIXTURES[value])
        for fixture, marker in FIXTURE_MARKERS.items():
            if fixture in names and item.get_closest_marker(marker) is None:
                item.add_marker(getattr(pytest.mark, marker))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the slow installs the selected tests need in the background (harness.prewarm)."""
    if session.config.getoption("collectonly", False):
        return
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0":  # under xdist, one worker starts them
        return
    files = {Path(str(item.fspath)).name for item in session.items}
    session.config.stash[_PREWARM] = prewarm.start(files)


def pytest_sessionfinish(session: pytest.Session) -> None:
    prewarm.stop(session.config.stash.get(_PREWARM, None))


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A private directory with a short path under /tmp (Unix socket paths are limited to 107 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="rsm-", dir="/tmp"))
    d.chmod(0o700)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def java_build() -> JavaBuild:
    """tests/java built with Maven (Kafka 4.4.0 jars + oracle jar), reused across runs via .cache/."""
    return build_test_java()


@pytest.fixture(scope="session")
def kafka_dump_log() -> Path:
    """Kafka's kafka-dump-log (DumpLogSegments of kafka-tools 4.3.1) resolved by Maven: its libs directory.

    Run it with ``harness.maven.kafka_dump_log_command(libs, *args)``."""
    return build_dump_log_tool()


@pytest.fixture(scope="session")
def kafka_libs(java_build: JavaBuild) -> Path:
    """The directory holding every jar of a Kafka 4.4.0 broker (use ``<dir>/*`` on a classpath)."""
    return java_build.kafka_libs


@pytest.fixture(scope="session")
def kafka_broker(java_build: JavaBuild, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """One default broker for the whole session (no tiered storage); never restart or reconfigure it."""
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka-broker"), java_build=java_build)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


KafkaBrokerFactory = Callable[..., KafkaBroker]


@pytest.fixture
def kafka_broker_factory(
    java_build: JavaBuild, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaBrokerFactory]:
    """Start brokers with extra server properties / classpath; all are stopped when the test ends.

    ``factory(extra_props={...}, extra_classpath=[jar], extra_env={...}, start=True) -> KafkaBroker``
    """
    brokers: list[KafkaBroker] = []

    def factory(
        extra_props: Mapping[str, str] | None = None,
        extra_classpath: Sequence[Path] = (),
        *,
        extra_env: Mapping[str, str] | None = None,
        start: bool = True,
    ) -> KafkaBroker:
        broker = KafkaBroker(
            tmp_path_factory.mktemp("kafka-broker"),
            extra_props=extra_props,
            extra_classpath=extra_classpath,
            extra_env=extra_env,
            java_build=java_build,
        )
        brokers.append(broker)
        return broker.start() if start else broker

    try:
        yield factory
    finally:
        for broker in brokers:
            broker.stop()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server on a free loopback port (dummy credentials); use make_bucket() per test."""
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[FakeGcsServer]:
    """fake-gcs-server on a free loopback port (anonymous, in memory); use make_bucket() per test.
    Installed with `go install` into .cache/ on first use (harness.emulators)."""
    try:
        server = FakeGcsServer(binary=fake_gcs_command()).start()
    except (EmulatorUnavailable, RuntimeError) as exc:
        unavailable(f"fake-gcs-server: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def azurite_server() -> Iterator[AzuriteServer]:
    """Azurite's Blob service on a free loopback port (the development account, in memory); use
    make_bucket() per test. Installed with npm into .cache/ on first use (harness.emulators)."""
    try:
        server = AzuriteServer(script=azurite_blob_command()).start()
    except (EmulatorUnavailable, RuntimeError) as exc:
        unavailable(f"azurite: {exc}")
    try:
        yield server
    finally:
        server.stop()


CLOUD_FIXTURES = {"s3": "s3_server", "gcs": "gcs_server", "azure": "azurite_server"}


@pytest.fixture(params=sorted(CLOUD_FIXTURES))
def cloud(request: pytest.FixtureRequest) -> S3Server | FakeGcsServer | AzuriteServer:
    """Each cloud's emulator in turn (moto's S3, fake-gcs-server, Azurite), all with the same helpers:
    `rsm_configs(**extra)`, `make_bucket()`, `env()`, `endpoint_url`."""
    return request.getfixturevalue(CLOUD_FIXTURES[request.param])  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A local[2] Spark session (UI off, 2 shuffle partitions, workers on this interpreter)."""
    from harness.spark import make_spark_session  # noqa: PLC0415 - pyspark import is slow

    session = make_spark_session()
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module", params=["python", "columnar"])
def tiered_spark(spark, request: pytest.FixtureRequest):  # noqa: ANN001, ANN201
    """The session with `format("kafka-tiered")` registered, served by the Python Data Source or by the
    columnar scan: a module's Spark reader tests run on both, expecting the same rows."""
    from harness.spark import COLUMNAR_CONF, use_path  # noqa: PLC0415

    import spark_reader  # noqa: PLC0415

    spark_reader.register(spark)
    use_path(spark, request.param)
    try:
        yield spark
    finally:
        spark.conf.set(COLUMNAR_CONF, "false")


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A Spark standalone cluster: a master and two workers (1 core, 512 MiB each) from pyspark's own
    ``bin/spark-class`` on 127.0.0.1; connect a driver (in a subprocess) to ``master_url``."""
    cluster = SparkCluster(tmp_path_factory.mktemp("spark-cluster"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def java_oracle(java_build: JavaBuild) -> Iterator[JavaOracle]:
    """Kafka's own classes writing, dumping, re-indexing and checking segment files (one JVM)."""
    oracle = JavaOracle(java_build)
    try:
        yield oracle
    finally:
        oracle.close()
