"""A Spark standalone cluster for tests: one master and two workers from pyspark's own ``bin/spark-class``.

``spark-class org.apache.spark.deploy.master.Master`` and ``...deploy.worker.Worker`` run as
subprocesses on free 127.0.0.1 ports (``SPARK_LOCAL_IP`` too, so executors bind there), each worker
offering 1 core and 512 MiB to executors, with its logs and work directory (executors' stdout/stderr)
under ``work_dir``. Executors' Python workers run this interpreter (``PYSPARK_PYTHON``). Every daemon
gets its own process group, so :meth:`SparkCluster.stop` ends a worker together with the executors and
Python workers it started, and ``setpriv --pdeathsig`` ends the daemons if pytest itself is killed.

A driver connects with ``SparkSession.builder.master(cluster.master_url)``; only one SparkContext fits
in a JVM, so a test that already holds the local session runs its cluster driver in a subprocess.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from harness.maven import log_tail
from harness.ports import LOOPBACK, free_ports, port_open
from harness.procs import dies_with_parent

log = logging.getLogger(__name__)

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0
# the daemons themselves (not the executors they start): small heaps, quick start
DAEMON_JAVA_OPTS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.net.preferIPv4Stack=true"


class SparkClusterError(RuntimeError):
    """The cluster did not come up; the message carries the daemons' log tails."""


def spark_home() -> Path:
    """The pyspark package's directory: a SPARK_HOME with ``bin/spark-class`` and ``jars/``."""
    import pyspark  # noqa: PLC0415 - only tests that start a cluster need it

    return Path(pyspark.__file__).resolve().parent


def submit_env(python: str, **extra: str) -> dict[str, str]:
    """The environment of a `spark-submit` as a user runs it: this one without PYTHONPATH or SPARK_HOME
    (the application finds what it was given), driver and workers on `python`, loopback only."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    return {
        **env,
        "PYSPARK_PYTHON": python,
        "PYSPARK_DRIVER_PYTHON": python,
        "SPARK_LOCAL_IP": "127.0.0.1",
        **extra,
    }


_RUNNING: set[SparkCluster] = set()
_RUNNING_LOCK = threading.Lock()


def _stop_all_at_exit() -> None:
    with _RUNNING_LOCK:
        clusters = list(_RUNNING)
    for cluster in clusters:
        cluster.stop()


atexit.register(_stop_all_at_exit)


class SparkCluster:
    """A master and ``workers`` workers; start()/stop() or a context manager."""

    def __init__(
        self,
        work_dir: Path,
        *,
        workers: int = 2,
        worker_cores: int = 1,
        worker_memory: str = "512m",
        daemon_memory: str = "256m",
        extra_env: Mapping[str, str] | None = None,
        start_timeout: float = START_TIMEOUT_S,
    ) -> None:
        self.work_dir = Path(work_dir)
        self.workers = workers
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.daemon_memory = daemon_memory
        self.extra_env = dict(extra_env or {})
        self.start_timeout = start_timeout
        self.master_port: int | None = None
        self.master_ui_port: int | None = None
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self.start_seconds = 0.0  # how long start() took

    # ------------------------------------------------------------------ addresses and paths
    @property
    def master_url(self) -> str:
        if self.master_port is None:
            raise RuntimeError("spark cluster not started")
        return f"spark://{LOOPBACK}:{self.master_port}"

    @property
    def logs_dir(self) -> Path:
        return self.work_dir / "logs"

    def worker_dir(self, n: int) -> Path:
        """Worker ``n``'s work directory: ``app-*/<executor id>/stdout|stderr`` of its executors."""
        return self.work_dir / f"worker-{n}"

    def _log(self, name: str) -> Path:
        return self.logs_dir / f"{name}.log"

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of every daemon's log and every executor's stderr."""
        parts = [f"--- {p.name} ---\n{log_tail(p, lines)}" for p in sorted(self.logs_dir.glob("*.log"))]
        for n in range(self.workers):
            for stderr in sorted(self.worker_dir(n).glob("app-*/*/stderr")):
                parts.append(f"--- {stderr.relative_to(self.work_dir)} ---\n{log_tail(stderr, lines)}")
        return "\n".join(parts)

    # ------------------------------------------------------------------ lifecycle
    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        for key in ("CLASSPATH", "JAVA_TOOL_OPTIONS", "SPARK_CONF_DIR", "MASTER", "PYSPARK_SUBMIT_ARGS"):
            env.pop(key, None)
        conf_dir = self.work_dir / "conf"  # empty: no spark-env.sh or spark-defaults.conf from elsewhere
        conf_dir.mkdir(parents=True, exist_ok=True)
        env.update(
            {
                "SPARK_HOME": str(spark_home()),
                "SPARK_CONF_DIR": str(conf_dir),
                "SPARK_LOCAL_IP": LOOPBACK,
                "SPARK_LOCAL_HOSTNAME": LOOPBACK,
                "SPARK_DAEMON_MEMORY": self.daemon_memory,
                "SPARK_DAEMON_JAVA_OPTS": DAEMON_JAVA_OPTS,
                "SPARK_LOG_DIR": str(self.logs_dir),
                "PYSPARK_PYTHON": sys.executable,
                "PYSPARK_DRIVER_PYTHON": sys.executable,
            }
        )
        env.update(self.extra_env)
        return env

    def _spawn(self, name: str, java_class: str, *args: str) -> None:
        cmd = dies_with_parent([str(spark_home() / "bin" / "spark-class"), java_class, *args])
        out = self._log(name).open("ab")
        try:
            self._processes[name] = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.work_dir,
                env=self._env(),
                start_new_session=True,  # its own group: stop() ends its executors with it
            )
        finally:
            out.close()

    def start(self) -> SparkCluster:
        """Start the master, then the workers, and wait until every worker is ALIVE at the master."""
        if self._processes:
            return self
        started = time.monotonic()
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        ports = free_ports(2 + 2 * self.workers)
        self.master_port, self.master_ui_port = ports[0], ports[1]
        with _RUNNING_LOCK:
            _RUNNING.add(self)
        try:
            self._spawn(
                "master",
                MASTER_CLASS,
                *("--host", LOOPBACK, "--port", str(self.master_port)),
                *("--webui-port", str(self.master_ui_port)),
            )
            # a worker that finds no master retries only after 5-15 s: let the master listen first
            self._wait("the master to listen", lambda: port_open(LOOPBACK, self.master_port or 0))
            for n in range(self.workers):
                port, ui_port = ports[2 + 2 * n], ports[3 + 2 * n]
                self.worker_dir(n).mkdir(parents=True, exist_ok=True)
                self._spawn(
                    f"worker-{n}",
                    WORKER_CLASS,
                    *("--host", LOOPBACK, "--port", str(port), "--webui-port", str(ui_port)),
                    *("--cores", str(self.worker_cores), "--memory", self.worker_memory),
                    *("--work-dir", str(self.worker_dir(n))),
                    self.master_url,
                )
            self._wait(f"{self.workers} workers ALIVE", lambda: self.alive_workers() == self.workers)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started
        log.info("spark cluster up at %s with %d workers (%s)", self.master_url, self.workers, self.work_dir)
        return self

    def _wait(self, what: str, ready: Any) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not ready():
            for name, proc in self._processes.items():
                if proc.poll() is not None:
                    raise SparkClusterError(
                        f"spark {name} exited with code {proc.returncode} while waiting for {what}\n"
                        f"{self.log_tail()}"
                    )
            if time.monotonic() > deadline:
                raise SparkClusterError(
                    f"timed out after {self.start_timeout:.0f}s waiting for {what}\n{self.log_tail()}"
                )
            time.sleep(0.3)

    def master_state(self) -> dict[str, Any]:
        """The master's own view (its web UI's ``/json/``): workers, alive workers, cores, apps."""
        url = f"http://{LOOPBACK}:{self.master_ui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback, our port
            return dict(json.load(response))

    def alive_workers(self) -> int:
        try:
            return int(self.master_state().get("aliveworkers", 0))
        except (OSError, ValueError):
            return 0

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Workers first (each with its executors: its process group), then the master."""
        for name in sorted(self._processes, key=lambda n: n == "master"):
            proc = self._processes[name]
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    log.warning(
                        "spark %s pid %s ignored SIGTERM for %.0fs: killing it", name, proc.pid, timeout
                    )
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=30)
            # executors and Python workers left in the group once the daemon is gone
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        self._processes = {}
        with _RUNNING_LOCK:
            _RUNNING.discard(self)

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
