"""A real Apache Kafka broker for tests (4.4.0 unless told otherwise): single node, KRaft, broker and
controller in one JVM.

The broker runs ``java -cp <kafka-libs>/* kafka.Kafka server.properties`` as a subprocess on free
127.0.0.1 ports, with its data, config and logs under ``work_dir``. ``extra_props`` go into
server.properties as given (tiered storage: ``remote.log.storage.system.enable=true``,
``remote.log.storage.manager.class.name=...``, ``remote.log.manager.task.interval.ms=...``) and
``extra_classpath`` is appended to the classpath (plugin jars). The JVM gets a small heap: the
machines running the suite have 2 cores and run Spark and moto beside it.

``kafka_version`` (or ``RSM_TEST_KAFKA_VERSION``) runs another served Kafka from 3.9 on, its jars resolved
into their own cache directory (``harness.kafka_versions``); ``broker.kafka`` says which version runs and
which class of the plugin jar it loads (``broker.kafka.plugin_class``).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from harness.kafka_versions import KafkaLine, broker_libs, default_kafka_version
from harness.maven import JavaBuild, build_test_java, log_tail
from harness.ports import LOOPBACK, free_ports, port_open
from harness.procs import dies_with_parent

log = logging.getLogger(__name__)

DEFAULT_JVM_OPTS: tuple[str, ...] = (
    "-Xms128m",
    "-Xmx512m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Xss1m",
    "-Djava.awt.headless=true",
    "-Djava.net.preferIPv4Stack=true",
)
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0


_ERROR_LINE = re.compile(r"\] (ERROR|FATAL) |^Caused by: ")


def tiered_storage_props(
    rsm_class: str,
    rsm_config: Mapping[str, str] | None = None,
    *,
    task_interval_ms: int = 500,
    retention_check_interval_ms: int = 1000,
    metadata_replication_factor: int = 1,
) -> dict[str, str]:
    """Broker properties enabling tiered storage on this single-node broker with ``rsm_class``.

    ``rsm_config`` keys are passed to the RSM's ``configure`` (Kafka strips the ``rsm.config.`` prefix).
    The metadata manager is Kafka's default topic-based one, with a one-partition ``__remote_log_metadata``
    topic of replication factor ``metadata_replication_factor`` (1: a single node; min ISR 2 above that); copy/expiry tasks run every ``task_interval_ms`` and local
    retention is checked every ``retention_check_interval_ms`` so tests see segments move quickly.
    Topics opt in with ``remote.storage.enable=true`` (and e.g. ``local.retention.ms``).
    """
    props = {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": rsm_class,
        "remote.log.metadata.manager.listener.name": "PLAINTEXT",
        "rlmm.config.remote.log.metadata.topic.replication.factor": str(metadata_replication_factor),
        "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
        "rlmm.config.remote.log.metadata.topic.min.isr": str(min(2, metadata_replication_factor)),
        "remote.log.manager.task.interval.ms": str(task_interval_ms),
        "remote.log.manager.copier.thread.pool.size": "2",
        "remote.log.manager.expiration.thread.pool.size": "2",
        "remote.log.manager.follower.thread.pool.size": "1",
        "remote.log.reader.threads": "2",
        "log.retention.check.interval.ms": str(retention_check_interval_ms),
        # LogManager's retention task otherwise first runs 30 s after start-up (a testing-only knob).
        "log.initial.task.delay.ms": "0",
    }
    props.update({f"rsm.config.{k}": v for k, v in (rsm_config or {}).items()})
    return props


def python_path() -> str:
    """The test process's import path as PYTHONPATH (relative entries made absolute, missing ones left out)."""
    entries = (os.path.abspath(p) if p else os.getcwd() for p in sys.path)
    return os.pathsep.join(dict.fromkeys(p for p in entries if os.path.isdir(p)))


class KafkaStartError(RuntimeError):
    """The broker did not come up (or could not be formatted); the message carries its log tail."""


_RUNNING: set[KafkaBroker] = set()
_RUNNING_LOCK = threading.Lock()


def _stop_all_at_exit() -> None:
    with _RUNNING_LOCK:
        brokers = list(_RUNNING)
    for broker in brokers:
        broker.stop()


atexit.register(_stop_all_at_exit)


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (Kafka's Uuid text form)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class KafkaBroker:
    """One KRaft Kafka broker+controller process. Use as a context manager or call start()/stop()."""

    def __init__(
        self,
        work_dir: Path,
        extra_props: Mapping[str, str] | None = None,
        extra_classpath: Sequence[Path] = (),
        *,
        java_build: JavaBuild | None = None,
        jvm_opts: Sequence[str] = DEFAULT_JVM_OPTS,
        extra_env: Mapping[str, str] | None = None,
        start_timeout: float = START_TIMEOUT_S,
        node_id: int = 1,
        kafka_version: str | None = None,
    ) -> None:
        self.work_dir = Path(work_dir)
        self.kafka = KafkaLine(kafka_version or default_kafka_version())
        self.extra_props = dict(extra_props or {})
        self.extra_classpath = [Path(p) for p in extra_classpath]
        self.jvm_opts = list(jvm_opts)
        self.extra_env = dict(extra_env or {})
        self.start_timeout = start_timeout
        self.node_id = node_id
        self._java_build = java_build
        self._process: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self.controller_port: int | None = None
        self.cluster_id: str | None = None

    # ------------------------------------------------------------------ paths and addresses
    @property
    def config_file(self) -> Path:
        return self.work_dir / "server.properties"

    @property
    def logs_dir(self) -> Path:
        """Where the broker's own log files go (server.log, stdout.log, format.log)."""
        return self.work_dir / "logs"

    @property
    def data_dir(self) -> Path:
        return self.work_dir / "data"

    @property
    def log_dirs(self) -> list[Path]:
        """Kafka's ``log.dirs``: the partition directories live here."""
        return [self.data_dir]

    def partition_dir(self, topic: str, partition: int = 0) -> Path:
        """The directory holding ``topic-partition``'s segments."""
        return self.data_dir / f"{topic}-{partition}"

    @property
    def bootstrap_servers(self) -> str:
        if self.port is None:
            raise RuntimeError("broker not started")
        return f"{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # ------------------------------------------------------------------ lifecycle
    # Overridden by a node of a multi-node cluster (harness.kafka_cluster): one voter, RF 1 here.
    replication_factor = 1

    def _quorum_voters(self) -> str:
        """``controller.quorum.voters``: this node alone."""
        return f"{self.node_id}@{LOOPBACK}:{self.controller_port}"

    def _properties(self) -> dict[str, str]:
        assert self.port is not None and self.controller_port is not None
        min_isr = min(2, self.replication_factor)
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self._quorum_voters(),
            "listeners": f"PLAINTEXT://{LOOPBACK}:{self.port},CONTROLLER://{LOOPBACK}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "default.replication.factor": str(self.replication_factor),
            "offsets.topic.replication.factor": str(self.replication_factor),
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": str(self.replication_factor),
            "transaction.state.log.min.isr": str(min_isr),
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": str(self.replication_factor),
            "share.coordinator.state.topic.min.isr": str(min_isr),
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "log.cleaner.threads": "1",
            "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
        }
        props.update(self.extra_props)
        return props

    def _java_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("CLASSPATH", None)
        env.pop("JAVA_TOOL_OPTIONS", None)
        env.update(self.extra_env)
        # a bridge the broker starts (`python -m rsm.cli.main ...`) imports what the tests import: this
        # checkout, not another editable install of the package (extra_env's PYTHONPATH, if any, first)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (self.extra_env.get("PYTHONPATH"), python_path()) if p)
        return env

    def _classpath(self) -> str:
        if not self.kafka.is_default:  # another Kafka version: its own jars, the plugin jars after them
            libs = broker_libs(self.kafka.version)
            return os.pathsep.join([str(libs / "*"), *(str(p) for p in self.extra_classpath)])
        build = self._java_build or build_test_java()
        self._java_build = build
        return build.broker_classpath(self.extra_classpath)

    def start(self) -> KafkaBroker:
        """Format storage, start the broker and wait until it answers metadata requests."""
        if self.is_running():
            return self
        self.launch()
        return self.wait_until_ready()

    def launch(self) -> KafkaBroker:
        """Format storage (first start only) and start the JVM without waiting for it to be ready.

        A multi-node cluster launches every node first: no node is ready before a quorum of
        controllers is up.
        """
        if self.is_running():
            return self
        classpath = self._classpath()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        if self.port is None:  # keep the ports across a restart: clients keep their bootstrap address
            self.port, self.controller_port = free_ports(2)
        props = self._properties()
        self.config_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        java_opts = [
            *self.jvm_opts,
            *self.kafka.logging.configure(self.work_dir, self.logs_dir),
            f"-Dkafka.logs.dir={self.logs_dir}",
        ]
        if not (self.data_dir / "meta.properties").exists():
            self._format(classpath, java_opts)
        cmd = dies_with_parent(["java", *java_opts, "-cp", classpath, "kafka.Kafka", str(self.config_file)])
        stdout = (self.logs_dir / "stdout.log").open("ab")
        try:
            self._process = subprocess.Popen(
                cmd,
                stdout=stdout,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.work_dir,
                env=self._java_env(),
                start_new_session=True,
            )
        finally:
            stdout.close()
        with _RUNNING_LOCK:
            _RUNNING.add(self)
        return self

    def wait_until_ready(self) -> KafkaBroker:
        """Wait until the launched broker answers metadata requests (stops it and raises if it does not)."""
        try:
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise
        log.info(
            "kafka broker up on %s (pid %s, work dir %s)", self.bootstrap_servers, self.pid, self.work_dir
        )
        return self

    def _format(self, classpath: str, java_opts: list[str]) -> None:
        self.cluster_id = self.cluster_id or new_cluster_id()
        format_log = self.logs_dir / "format.log"
        cmd = dies_with_parent(
            [
                "java",
                *java_opts,
                "-cp",
                classpath,
                "kafka.tools.StorageTool",
                "format",
                "-t",
                self.cluster_id,
                "-c",
                str(self.config_file),
            ]
        )
        with format_log.open("wb") as out:
            rc = subprocess.run(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self._java_env(),
                timeout=180,
            ).returncode
        if rc != 0:
            raise KafkaStartError(
                f"kafka storage format failed (rc={rc}) in {self.work_dir}\n{log_tail(format_log, 40)}"
            )

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        last_error: str = "port not open yet"
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                rc = None if self._process is None else self._process.returncode
                raise KafkaStartError(f"kafka broker exited with code {rc} while starting\n{self.log_tail()}")
            if port_open(LOOPBACK, self.port or 0):
                try:
                    self._check_metadata()
                    return
                except Exception as exc:  # noqa: BLE001 - any client error means "not ready yet"
                    last_error = f"{type(exc).__name__}: {exc}"
            time.sleep(0.3)
        raise KafkaStartError(
            f"kafka broker did not answer on {self.bootstrap_servers} within {self.start_timeout:.0f}s "
            f"(last: {last_error})\n{self.log_tail()}"
        )

    def _check_metadata(self) -> None:
        from kafka import KafkaAdminClient  # noqa: PLC0415 - only tests that start a broker need it

        admin = KafkaAdminClient(
            bootstrap_servers=self.bootstrap_servers, request_timeout_ms=5000, client_id="harness-probe"
        )
        try:
            cluster = admin.describe_cluster()
            if not cluster.get("brokers"):
                raise RuntimeError("no broker registered yet")
            if cluster.get("controller_id", -1) in (None, -1):
                raise RuntimeError("no controller yet")
        finally:
            admin.close()

    # ------------------------------------------------------------------ client helpers
    def admin_client(self, **kwargs: Any) -> Any:
        """A kafka-python ``KafkaAdminClient`` for this broker (close it when done)."""
        from kafka import KafkaAdminClient  # noqa: PLC0415

        kwargs.setdefault("request_timeout_ms", 30_000)
        return KafkaAdminClient(bootstrap_servers=self.bootstrap_servers, **kwargs)

    def create_topic(
        self,
        topic: str,
        partitions: int = 1,
        configs: Mapping[str, str] | None = None,
        *,
        timeout: float = 60.0,
        replication_factor: int | None = None,
    ) -> dict[str, Any]:
        """Create ``topic`` and wait until every partition has a leader; returns its description.

        CreateTopics answers before the new topic reaches the broker's metadata cache, so a produce
        or describe right after it can miss the topic: this waits it out.
        """
        from kafka.admin import NewTopic  # noqa: PLC0415

        admin = self.admin_client()
        try:
            admin.create_topics(
                [
                    NewTopic(
                        topic,
                        num_partitions=partitions,
                        replication_factor=replication_factor or self.replication_factor,
                        topic_configs=dict(configs or {}),
                    )
                ]
            )
            deadline = time.monotonic() + timeout
            while True:
                (description,) = admin.describe_topics([topic])
                parts = description.get("partitions") or []
                if (
                    description.get("error_code") == 0
                    and len(parts) == partitions
                    and all(p.get("error_code") == 0 and p.get("leader_id", -1) >= 0 for p in parts)
                ):
                    return dict(description)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"topic {topic} has no leader after {timeout:.0f}s: {description}")
                time.sleep(0.1)
        finally:
            admin.close()

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM (a clean shutdown), then SIGKILL to the whole process group after ``timeout``."""
        proc = self._process
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log.warning("kafka broker pid %s ignored SIGTERM for %.0fs: killing it", proc.pid, timeout)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        self._process = None
        with _RUNNING_LOCK:
            _RUNNING.discard(self)

    def kill(self) -> None:
        """``kill -9``: SIGKILL to the JVM's whole process group (the bridge it started included), no shutdown."""
        proc = self._process
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        self._process = None
        with _RUNNING_LOCK:
            _RUNNING.discard(self)

    def restart(self) -> KafkaBroker:
        """Stop and start again on the same ports and data (a broker restart)."""
        self.stop()
        return self.start()

    def log_tail(self, lines: int = 80) -> str:
        """The broker's first errors, then the last lines of server.log and stdout, for error messages."""
        parts = []
        errors = self.first_errors()
        if errors:
            parts.append(f"--- first errors in {self.logs_dir / 'server.log'} ---\n{errors}")
        for name in ("server.log", "stdout.log"):
            tail = log_tail(self.logs_dir / name, lines)
            if tail:
                parts.append(f"--- {self.logs_dir / name} (last {lines} lines) ---\n{tail}")
        return "\n".join(parts) or f"(no broker logs in {self.logs_dir})"

    def first_errors(self, limit: int = 20) -> str:
        """The first ERROR/FATAL lines and 'Caused by' lines of server.log: usually the root cause."""
        try:
            text = (self.logs_dir / "server.log").read_text(errors="replace")
        except OSError:
            return ""
        hits = [line for line in text.splitlines() if _ERROR_LINE.search(line)]
        return "\n".join(hits[:limit])

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"running on {self.bootstrap_servers}" if self.is_running() else "stopped"
        return f"KafkaBroker({self.work_dir}, Kafka {self.kafka.version}, {state})"
