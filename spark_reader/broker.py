"""The brokers' side of a hybrid read (`kafka.bootstrap.servers`): client settings and the driver's questions.

With `kafka.bootstrap.servers` the source reads history from the store and the live tail from the brokers
(`spark_reader.hybrid` splits each partition). Everything the driver asks the brokers is here, and it is
cheap on purpose: per query (or micro-batch) one Metadata request for the topics' partitions (the client
adds its own, see `BrokerView`) and one ListOffsets request (the high watermark, or the last stable offset under read_committed,
as Spark's Kafka source takes `latest`). A timestamp option the store cannot answer, or a partition the
store holds nothing of, adds one more ListOffsets (offsetsForTimes / earliest). The driver never fetches.

The `kafka.*` options are Java client settings, as Spark's Kafka source passes them to its consumer; the
clients here are librdkafka's (confluent-kafka), so the settings are translated: the names both share pass
as they are, SASL PLAIN/SCRAM's `sasl.jaas.config` becomes `sasl.username`/`sasl.password`, PEM and
PKCS#12 stores become librdkafka's locations, and what librdkafka cannot do (a JKS truststore, a login
module it does not have) is refused in one line, never dropped: a dropped security setting would connect
in plaintext or fail later with a worse message. Values are never logged (credentials).
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass

from spark_reader.errors import ReaderError
from spark_reader.offsets import EARLIEST, LATEST
from spark_reader.options import IsolationLevel, OptionError, SourceOptions

log = logging.getLogger(__name__)

DEFAULT_API_TIMEOUT_MS = 60_000
# Spark's Kafka source refuses these (KafkaSourceProvider.validateGeneralOptions): the source owns them
REFUSED = {
    "auto.offset.reset": "set the source option startingOffsets instead",
    "key.deserializer": "keys are always read as bytes",
    "value.deserializer": "values are always read as bytes",
    "enable.auto.commit": "the source commits no offsets to Kafka",
    "interceptor.classes": "the source's consumers run no Java interceptors",
}
# Java consumer settings with no librdkafka meaning, about tuning only: ignored
JAVA_TUNING = frozenset(
    {
        "default.api.timeout.ms",  # used here as the driver's timeout
        "max.poll.records",
        "request.timeout.ms",
        "client.dns.lookup",
        "ssl.truststore.type",
        "ssl.keystore.type",
        "ssl.truststore.password",
        "exclude.internal.topics",
        "check.crcs",
        "auto.include.jmx.reporter",
        "metric.reporters",
    }
)
_ATTEMPT = re.compile(r"\s*\(after \d+ms in state \w+(?:, \d+ identical error\(s\) suppressed)?\)")
_JAAS_FIELD = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


class BrokerError(ReaderError):
    """The brokers cannot answer (unreachable, authentication, authorization): one line naming them."""


def _jaas(value: str) -> dict[str, str]:
    """`sasl.jaas.config` of PLAIN or SCRAM -> librdkafka's sasl.username / sasl.password."""
    if "PlainLoginModule" not in value and "ScramLoginModule" not in value:
        module = value.split()[0] if value.split() else "?"
        raise OptionError(
            f"option kafka.sasl.jaas.config: login module {module} is not supported by the tail's Kafka "
            "client (PLAIN and SCRAM are; for OAUTHBEARER or GSSAPI set librdkafka's sasl.* keys as kafka.*)"
        )
    fields = dict(_JAAS_FIELD.findall(value))
    if "username" not in fields or "password" not in fields:
        raise OptionError('option kafka.sasl.jaas.config must give username="..." and password="..."')
    return {"sasl.username": fields["username"], "sasl.password": fields["password"]}


def _ssl_store(kind: str, params: dict[str, str]) -> dict[str, str]:
    """A Java trust/key store -> librdkafka's PEM or PKCS#12 locations (JKS is refused: convert it)."""
    location = params.get(f"ssl.{kind}store.location")
    if location is None:
        return {}
    store_type = params.get(f"ssl.{kind}store.type", "JKS").strip().upper()
    if store_type not in ("PEM", "PKCS12"):
        raise OptionError(
            f"option kafka.ssl.{kind}store.location: the tail's Kafka client (librdkafka) reads PEM or PKCS12 "
            f"stores, not {store_type}: convert it and set kafka.ssl.{kind}store.type"
        )
    if kind == "trust":
        if store_type == "PKCS12":
            raise OptionError("option kafka.ssl.truststore.location: give the CA certificates as PEM")
        return {"ssl.ca.location": location}
    if store_type == "PEM":
        return {"ssl.certificate.location": location, "ssl.key.location": location}
    out = {"ssl.keystore.location": location}
    if "ssl.keystore.password" in params:
        out["ssl.keystore.password"] = params["ssl.keystore.password"]
    return out


def client_config(opts: SourceOptions) -> dict[str, str]:
    """librdkafka settings for the brokers named by the `kafka.*` options (see the module docstring)."""
    params = dict(opts.kafka_params)
    for key, why in REFUSED.items():
        if key in params:
            raise OptionError(f"option kafka.{key} is not supported: {why}")
    out: dict[str, str] = {}
    for key, value in params.items():
        if key in JAVA_TUNING or key.startswith(("ssl.truststore.", "ssl.keystore.")):
            continue
        if key == "sasl.jaas.config":
            out.update(_jaas(value))
        elif key == "ssl.endpoint.identification.algorithm":
            out[key] = value.strip().lower() or "none"  # Java's "" turns the check off
        elif key == "ssl.truststore.certificates":
            out["ssl.ca.pem"] = value
        else:
            out[key] = value
    out.update(_ssl_store("trust", params))
    out.update(_ssl_store("key", params))
    return out


def api_timeout_ms(opts: SourceOptions) -> int:
    """How long the driver waits for the brokers (`kafka.default.api.timeout.ms`, Java's default 60 s)."""
    raw = opts.kafka_params.get("default.api.timeout.ms")
    try:
        return int(raw) if raw else DEFAULT_API_TIMEOUT_MS
    except ValueError:
        raise OptionError(f"option kafka.default.api.timeout.ms must be milliseconds, got {raw!r}") from None


def make_client(kind: str, config: dict[str, str], errors: list | None = None):  # noqa: ANN201
    """A confluent-kafka AdminClient or Consumer; a setting librdkafka refuses is named in one line."""
    from confluent_kafka import Consumer, KafkaException
    from confluent_kafka.admin import AdminClient

    conf: dict[str, object] = {**config, "logger": log}
    if errors is not None:
        conf["error_cb"] = errors.append
    try:
        return AdminClient(conf) if kind == "admin" else Consumer(conf)
    except (KafkaException, ValueError, TypeError) as exc:
        text = str(exc.args[0] if exc.args else exc)
        found = re.search(r'property: "?([\w.]+)"?', text) or re.search(r'"([\w.]+)"', text)
        what = f"option kafka.{found.group(1)}" if found else "the kafka.* options"
        raise OptionError(f"{what}: the tail's Kafka client (librdkafka) refuses it: {text}") from None


def describe_failure(servers: str, exc: BaseException, errors: list, timeout_ms: int) -> BrokerError:
    """One line for a failed request: authentication, authorization, or unreachable brokers."""
    from confluent_kafka import KafkaError

    seen = [e for e in errors if isinstance(e, KafkaError)]
    first = exc.args[0] if exc.args else None
    if isinstance(first, KafkaError):
        seen.append(first)
    auth = {KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED}
    for e in seen:
        if e.code() in auth:
            return BrokerError(f"authentication to the Kafka brokers {servers} failed: {e.str()}")
    for e in seen:
        if e.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED):
            return BrokerError(f"the Kafka brokers {servers} refused access: {e.str()}")
    # librdkafka repeats a connection error with its timing: one of each, at most three
    reasons = dict.fromkeys(_ATTEMPT.sub("", e.str()).strip() for e in seen)
    reason = "; ".join(list(reasons)[:3]) or str(exc)
    return BrokerError(
        f"cannot reach the Kafka brokers {servers} (kafka.bootstrap.servers) within {timeout_ms / 1000:g} s: "
        f"{reason}"
    )


@dataclass(frozen=True)
class BrokerTopic:
    name: str
    partitions: tuple[int, ...]


_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(key: str, message: str) -> None:
    """A warning logged once per process (a stream's triggers would repeat it every micro-batch)."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning("%s", message)


class BrokerView:
    """The driver's questions to the brokers for one query or micro-batch (see the module docstring).

    A librdkafka AdminClient, not a consumer: a consumer needs a group id, and librdkafka then looks up
    the group's coordinator and refreshes metadata when that connection closes, requests the driver has no
    use for. `list_topics` is one Metadata request; `list_offsets` one ListOffsets request per leader for
    every partition at once, latest, earliest and timestamps mixed, at the query's isolation level (so
    latest is the last stable offset under read_committed). librdkafka adds Metadata requests of its own
    (the leaders before a ListOffsets, a refresh as the first connection comes up); never a Fetch
    (tests/test_kafka_hybrid.py counts them). Close it when done."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.servers = opts.bootstrap_servers or ""
        self.timeout_ms = api_timeout_ms(opts)
        self.errors: list = []
        self.client = make_client("admin", client_config(opts), self.errors)

    def close(self) -> None:
        self.client.poll(0)  # hand librdkafka's queued log lines (kafka.debug) to logging

    def _fail(self, exc: BaseException) -> BrokerError:
        self.client.poll(
            0
        )  # serve error_cb: the client's own errors (authentication, transport) name the cause
        return describe_failure(self.servers, exc, self.errors, self.timeout_ms)

    def topics(self) -> dict[str, BrokerTopic]:
        """The selected topics that exist on the brokers, with their partitions (one Metadata request)."""
        from confluent_kafka import KafkaError, KafkaException

        opts, timeout = self.opts, self.timeout_ms / 1000
        named = None if opts.subscribe_pattern is not None else list(opts.subscribe or opts.assign or ())
        try:
            # every topic's metadata: an admin client asking for one topic by name has the brokers
            # create it when auto.create.topics.enable is on (a consumer would not; nor does this)
            meta = self.client.list_topics(timeout=timeout)
        except KafkaException as exc:
            raise self._fail(exc) from None
        if named is None:
            pattern = re.compile(opts.subscribe_pattern or "")
            named = sorted(t for t in meta.topics if pattern.fullmatch(t) and not t.startswith("__"))
        out: dict[str, BrokerTopic] = {}
        for name in named:
            tm = meta.topics.get(name)
            if tm is None or (tm.error is not None and tm.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
                continue
            if tm.error is not None:
                raise self._fail(KafkaException(tm.error))
            parts = tuple(sorted(tm.partitions))
            if opts.assign is not None:
                parts = tuple(p for p in parts if p in opts.assign.get(name, ()))
            out[name] = BrokerTopic(name, parts)
        return out

    def offsets(self, specs: dict[tuple[str, int], int]) -> dict[tuple[str, int], int | None]:
        """One ListOffsets round: per partition LATEST, EARLIEST, or a timestamp (offsetsForTimes).

        Latest is the high watermark, or the last stable offset under read_committed. A timestamp no
        record reaches gives None."""
        if not specs:
            return {}
        from confluent_kafka import IsolationLevel as KafkaIsolation
        from confluent_kafka import KafkaException, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        def spec(value: int) -> OffsetSpec:
            if value == LATEST:
                return OffsetSpec.latest()
            if value == EARLIEST:
                return OffsetSpec.earliest()
            return OffsetSpec.for_timestamp(value)

        level = (
            KafkaIsolation.READ_COMMITTED
            if self.opts.isolation_level is IsolationLevel.READ_COMMITTED
            else KafkaIsolation.READ_UNCOMMITTED
        )
        request = {TopicPartition(t, p): spec(v) for (t, p), v in specs.items()}
        out: dict[tuple[str, int], int | None] = {}
        try:
            futures = self.client.list_offsets(
                request, isolation_level=level, request_timeout=self.timeout_ms / 1000
            )
            for tp, future in futures.items():
                offset = future.result().offset
                out[(tp.topic, tp.partition)] = None if offset < 0 else int(offset)
        except KafkaException as exc:
            raise self._fail(exc) from None
        return out
