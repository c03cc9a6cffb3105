"""Build the harness's Java bits (``tests/java``) with Maven into ``<repo>/.cache``.

Outputs: ``.cache/kafka-libs/`` (every jar a Kafka 4.4.0 broker needs) and ``.cache/oracle/oracle.jar``.
The build is skipped when a stamp records the same hash of the pom and Java sources (content, not
mtimes: a fresh clone has fresh mtimes but must not rebuild needlessly on a kept cache, and a clean
clone has no cache so it builds from scratch). Maven runs offline first when ``~/.m2`` already holds
artifacts, then online; its output goes to a log file whose tail is shown when the build fails.
Concurrent builds (several pytest processes on one checkout) are serialised with a file lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO_ROOT / ".cache"
JAVA_PROJECT = REPO_ROOT / "tests" / "java"
KAFKA_VERSION = "4.4.0"
MAVEN_TIMEOUT_S = 40 * 60


class MavenError(RuntimeError):
    """Maven failed (or is missing); the message carries the command and the tail of its log."""


@dataclass(frozen=True)
class JavaBuild:
    """Where the built Java bits are."""

    kafka_libs: Path
    oracle_jar: Path

    @property
    def classpath(self) -> str:
        """Classpath for the oracle: its jar plus every Kafka jar (a JVM wildcard entry)."""
        return f"{self.oracle_jar}{os.pathsep}{self.kafka_libs / '*'}"

    def broker_classpath(self, extra: Sequence[Path] = ()) -> str:
        """Classpath for a broker: Kafka's jars, then any plugin jars or class directories."""
        entries = [str(self.kafka_libs / "*"), *(str(p) for p in extra)]
        return os.pathsep.join(entries)


def log_tail(path: Path, lines: int = 60) -> str:
    """The last ``lines`` lines of a text file ('' when it does not exist)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _m2_has_artifacts() -> bool:
    repo = Path.home() / ".m2" / "repository"
    return (repo / "org" / "apache" / "kafka" / "kafka_2.13" / KAFKA_VERSION).is_dir()


def run_maven(
    pom: Path,
    goals: Sequence[str],
    log_file: Path,
    *,
    properties: dict[str, str] | None = None,
    offline_first: bool = True,
    timeout: float = MAVEN_TIMEOUT_S,
) -> None:
    """Run ``mvn -B -q -f pom goals`` with output to ``log_file``; raise :class:`MavenError` on failure.

    With ``offline_first`` and a populated ``~/.m2``, the first attempt is ``-o`` (no network, fast and
    immune to registry hiccups); if it fails (something missing from the cache) it runs online.
    """
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenError("Maven ('mvn') is not on the PATH: the test harness needs Java 17 and Maven 3.8+")
    props = [f"-D{k}={v}" for k, v in (properties or {}).items()]
    base = [mvn, "-B", "-q", "-f", str(pom), *props, *goals]
    attempts = [[*base[:3], "-o", *base[3:]], base] if offline_first and _m2_has_artifacts() else [base]
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log_file.write_text("")
    for i, cmd in enumerate(attempts):
        started = time.monotonic()
        with log_file.open("a") as out:
            out.write(f"$ {' '.join(cmd)}\n")
            out.flush()
            try:
                rc = subprocess.run(
                    cmd,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    timeout=timeout,
                    check=False,
                ).returncode
            except subprocess.TimeoutExpired:
                rc = -1
                out.write(f"\n[harness] Maven timed out after {timeout:.0f}s\n")
        log.info(
            "maven %s -> rc=%s in %.1fs (log %s)", " ".join(goals), rc, time.monotonic() - started, log_file
        )
        if rc == 0:
            return
        if i + 1 < len(attempts):
            log.info("offline Maven build failed, retrying online")
    raise MavenError(
        f"Maven failed: {' '.join(attempts[-1])}\nlog: {log_file}\n--- last lines ---\n{log_tail(log_file)}"
    )


def _inputs_digest(project: Path) -> str:
    """Hash of everything the build reads from the repo: the pom and the sources, by content."""
    digest = hashlib.sha256()
    files = [project / "pom.xml", *sorted(p for p in (project / "src").rglob("*") if p.is_file())]
    for path in files:
        digest.update(str(path.relative_to(project)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def build_test_java(*, force: bool = False, cache_dir: Path = CACHE_DIR) -> JavaBuild:
    """Build (or reuse) the Kafka broker jars and the oracle jar; returns where they are."""
    build = JavaBuild(kafka_libs=cache_dir / "kafka-libs", oracle_jar=cache_dir / "oracle" / "oracle.jar")
    stamp = cache_dir / "java-build" / "inputs.sha256"
    cache_dir.mkdir(parents=True, exist_ok=True)
    with (cache_dir / "java-build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        digest = _inputs_digest(JAVA_PROJECT)
        up_to_date = (
            not force
            and stamp.is_file()
            and stamp.read_text().strip() == digest
            and build.oracle_jar.is_file()
            and any(build.kafka_libs.glob("kafka_2.13-*.jar"))
        )
        if up_to_date:
            log.debug("java build up to date (%s)", digest[:12])
            return build
        # Start clean so no jar of an older Kafka version lingers on the broker's classpath.
        for stale in (build.kafka_libs, build.oracle_jar.parent):
            shutil.rmtree(stale, ignore_errors=True)
        stamp.unlink(missing_ok=True)
        started = time.monotonic()
        run_maven(
            JAVA_PROJECT / "pom.xml",
            ["package"],
            cache_dir / "logs" / "maven-tests-java.log",
            properties={"rsm.fetch.cache.dir": str(cache_dir)},
        )
        if not build.oracle_jar.is_file() or not any(build.kafka_libs.glob("kafka_2.13-*.jar")):
            raise MavenError(f"Maven succeeded but {build.oracle_jar} or {build.kafka_libs} is missing")
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(digest + "\n")
        log.info("built tests/java in %.1fs", time.monotonic() - started)
        return build


DUMP_LOG_PROJECT = JAVA_PROJECT / "dumplog"
DUMP_LOG_MAIN_CLASS = "org.apache.kafka.tools.DumpLogSegments"


def build_dump_log_tool(*, force: bool = False, cache_dir: Path = CACHE_DIR) -> Path:
    """Kafka's kafka-dump-log (kafka-tools 4.3.1 and what it needs at run time) resolved by Maven into
    ``.cache/dumplog-libs``; returns that directory (``<dir>/*`` on a classpath). Reused while the pom
    is unchanged, like :func:`build_test_java`."""
    libs = cache_dir / "dumplog-libs"
    stamp = cache_dir / "dumplog-build" / "inputs.sha256"
    cache_dir.mkdir(parents=True, exist_ok=True)
    with (cache_dir / "dumplog-build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        digest = hashlib.sha256((DUMP_LOG_PROJECT / "pom.xml").read_bytes()).hexdigest()
        if (
            not force
            and stamp.is_file()
            and stamp.read_text().strip() == digest
            and any(libs.glob("kafka-tools-*.jar"))
        ):
            return libs
        shutil.rmtree(libs, ignore_errors=True)
        stamp.unlink(missing_ok=True)
        run_maven(
            DUMP_LOG_PROJECT / "pom.xml",
            ["package"],
            cache_dir / "logs" / "maven-dumplog.log",
            properties={"rsm.fetch.cache.dir": str(cache_dir)},
            offline_first=(
                Path.home() / ".m2" / "repository" / "org" / "apache" / "kafka" / "kafka-tools"
            ).is_dir(),
        )
        if not any(libs.glob("kafka-tools-*.jar")):
            raise MavenError(f"Maven succeeded but {libs} holds no kafka-tools jar")
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(digest + "\n")
        return libs


def kafka_dump_log_command(libs: Path, *args: str, java: str = "java") -> list[str]:
    """The command line of Kafka's own kafka-dump-log, printing UTF-8 whatever the locale."""
    return [
        java,
        "-Xshare:auto",
        "-XX:TieredStopAtLevel=1",
        "-Dfile.encoding=UTF-8",
        "-Dstdout.encoding=UTF-8",
        "-Dstderr.encoding=UTF-8",
        "-cp",
        str(libs / "*"),
        DUMP_LOG_MAIN_CLASS,
        *args,
    ]
