"""Which Apache Kafka a test broker runs, and that version's jars.

The suite's broker is Kafka 4.4.0 (``harness.maven.KAFKA_VERSION``, jars in ``.cache/kafka-libs``, built
with the oracle). ``RSM_TEST_KAFKA_VERSION`` (or ``KafkaBroker(kafka_version=...)``) picks another served
version: ``tests/java/broker/pom.xml`` resolves its broker jars with Maven into
``.cache/kafka-libs-<version>``, once (a stamp records the pom's hash), so a run of the whole suite or of
tests/broker/test_kafka_versions.py can target any Kafka from 3.9 on.

What differs between versions is described by :class:`KafkaLine`: how the broker logs (log4j2 from Kafka
4.0, reload4j before) and which class of the plugin jar a broker of that version loads as its
RemoteStorageManager (KIP-877's Monitorable arrived in 4.1, see rsm/bridge/jvm KafkaApi.java).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from harness.maven import CACHE_DIR, JAVA_PROJECT, KAFKA_VERSION, MavenError, build_test_java, run_maven

log = logging.getLogger(__name__)

ENV_VAR = "RSM_TEST_KAFKA_VERSION"
BROKER_POM = JAVA_PROJECT / "broker" / "pom.xml"
PLUGIN_CLASS = "io.tieredrsm.bridge.BridgeRemoteStorageManager"
PORTABLE_PLUGIN_CLASS = "io.tieredrsm.bridge.PortableBridgeRemoteStorageManager"
_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
# what Maven says when the registry does not serve an artifact (as opposed to a network or build failure)
_NOT_SERVED = re.compile(
    r"Could not find artifact org\.apache\.kafka|could not be resolved: .*org\.apache\.kafka"
    r"|Failure to find org\.apache\.kafka|was not found in"
)


class KafkaVersionNotServed(MavenError):
    """Maven could not find this Kafka version's broker jars in the registry it reaches."""


_LOG4J2 = """\
status = warn
name = rsm-test-broker
appender.server.type = File
appender.server.name = server
appender.server.fileName = {logs}/server.log
appender.server.layout.type = PatternLayout
appender.server.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.server.ref = server
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
logger.network.name = kafka.network
logger.network.level = WARN
"""

_LOG4J1 = """\
log4j.rootLogger=INFO, server
log4j.appender.server=org.apache.log4j.FileAppender
log4j.appender.server.File={logs}/server.log
log4j.appender.server.layout=org.apache.log4j.PatternLayout
log4j.appender.server.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.org.apache.kafka.clients=WARN
log4j.logger.kafka.network=WARN
"""


class BrokerLogging:
    """How a broker version is told where to log: writes its config file, returns the JVM options."""

    def configure(self, work_dir: Path, logs_dir: Path) -> list[str]:
        raise NotImplementedError


class Log4j2Logging(BrokerLogging):
    """Kafka 4.x: log4j2, configured by ``-Dlog4j2.configurationFile``."""

    def configure(self, work_dir: Path, logs_dir: Path) -> list[str]:
        path = work_dir / "log4j2.properties"
        path.write_text(_LOG4J2.format(logs=logs_dir))
        return [f"-Dlog4j2.configurationFile={path}"]


class Reload4jLogging(BrokerLogging):
    """Kafka 3.x: log4j 1.2 (reload4j), configured by ``-Dlog4j.configuration`` (a URL)."""

    def configure(self, work_dir: Path, logs_dir: Path) -> list[str]:
        path = work_dir / "log4j.properties"
        path.write_text(_LOG4J1.format(logs=logs_dir))
        return [f"-Dlog4j.configuration={path.as_uri()}"]


@dataclass(frozen=True)
class KafkaLine:
    """One Kafka version and what the harness does differently for it."""

    version: str

    def __post_init__(self) -> None:
        if not _VERSION.match(self.version):
            raise ValueError(f"Kafka version {self.version!r}: expected MAJOR.MINOR.PATCH, e.g. 4.1.2")

    @property
    def release(self) -> tuple[int, int, int]:
        major, minor, patch = _VERSION.match(self.version).groups()  # type: ignore[union-attr]
        return int(major), int(minor), int(patch)

    @property
    def is_default(self) -> bool:
        """The suite's own broker version (its jars live in ``.cache/kafka-libs``)."""
        return self.version == KAFKA_VERSION

    @property
    def logging(self) -> BrokerLogging:
        return Log4j2Logging() if self.release >= (4, 0, 0) else Reload4jLogging()

    @property
    def has_plugin_metrics(self) -> bool:
        """KIP-877 (Monitorable plugins get the broker's PluginMetrics): Kafka 4.1 and later."""
        return self.release >= (4, 1, 0)

    @property
    def plugin_class(self) -> str:
        """The plugin jar's RemoteStorageManager class a broker of this version loads."""
        return PLUGIN_CLASS if self.has_plugin_metrics else PORTABLE_PLUGIN_CLASS

    @property
    def libs_dir_name(self) -> str:
        return "kafka-libs" if self.is_default else f"kafka-libs-{self.version}"


def default_kafka_version() -> str:
    """``RSM_TEST_KAFKA_VERSION`` if set, else the suite's Kafka (4.4.0)."""
    return os.environ.get(ENV_VAR, "").strip() or KAFKA_VERSION


def _m2_has(version: str) -> bool:
    return (Path.home() / ".m2" / "repository" / "org" / "apache" / "kafka" / "kafka_2.13" / version).is_dir()


def broker_libs(version: str, *, force: bool = False, cache_dir: Path = CACHE_DIR) -> Path:
    """The directory holding every jar a broker of ``version`` needs (``<dir>/*`` on a classpath).

    4.4.0's are the suite's own (``build_test_java``); any other version is resolved by Maven once into
    ``.cache/kafka-libs-<version>``. Raises :class:`KafkaVersionNotServed` when the registry does not
    have that version, :class:`MavenError` on any other failure.
    """
    line = KafkaLine(version)
    if line.is_default:
        return build_test_java(cache_dir=cache_dir).kafka_libs
    libs = cache_dir / line.libs_dir_name
    stamp = cache_dir / "broker-build" / version / "inputs.sha256"
    cache_dir.mkdir(parents=True, exist_ok=True)
    with (cache_dir / "broker-build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        digest = hashlib.sha256(BROKER_POM.read_bytes()).hexdigest()
        if (
            not force
            and stamp.is_file()
            and stamp.read_text().strip() == digest
            and _has_broker(libs, version)
        ):
            return libs
        shutil.rmtree(libs, ignore_errors=True)
        stamp.unlink(missing_ok=True)
        properties = {"rsm.cache.dir": str(cache_dir), "kafka.version": version}
        if isinstance(line.logging, Reload4jLogging):
            properties["kafka.reload4j"] = "true"
        log_file = cache_dir / "logs" / f"maven-broker-{version}.log"
        try:
            run_maven(
                BROKER_POM, ["package"], log_file, properties=properties, offline_first=_m2_has(version)
            )
        except MavenError as exc:
            if _NOT_SERVED.search(log_file.read_text(errors="replace")):
                raise KafkaVersionNotServed(
                    f"Kafka {version}: the Maven registry does not serve its broker jars (log: {log_file})"
                ) from exc
            raise
        if not _has_broker(libs, version):
            raise MavenError(f"Maven succeeded but {libs} holds no kafka_2.13-{version}.jar")
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(digest + "\n")
        log.info("resolved Kafka %s's broker jars into %s", version, libs)
        return libs


def _has_broker(libs: Path, version: str) -> bool:
    return (libs / f"kafka_2.13-{version}.jar").is_file()
