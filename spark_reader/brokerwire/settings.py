"""The `kafka.*` options (Java client names, as Spark's Kafka source passes them) -> the wire client's settings.

The one place they are translated: the driver's questions to the brokers (`spark_reader.broker`) and the
tasks' reads of the live tail (`spark_reader.tail`) both use this client, so what one accepts the other
does, and a setting refused is refused on the driver before any task runs. The wire client is
kafka-python's network layer (`spark_reader.brokerwire.connection`), so the Java settings are translated
here, once, into a `WireSettings` value:

- `bootstrap.servers`, `client.id`, `security.protocol` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL);
- `sasl.mechanism` PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, with the username and password of
  `sasl.jaas.config` (a PlainLoginModule or ScramLoginModule line);
- TLS from PEM files: `ssl.truststore.location` with `ssl.truststore.type=PEM` (or the inline
  `ssl.truststore.certificates`), `ssl.keystore.location` with `ssl.keystore.type=PEM` (key and
  certificate chain in one file; `ssl.key.password` if the key is encrypted),
  `ssl.endpoint.identification.algorithm` ("" turns the host name check off, as in Java),
  `ssl.enabled.protocols` / `ssl.protocol` (TLSv1.2, TLSv1.3);
- the fetch sizes and timeouts: `max.partition.fetch.bytes`, `fetch.max.bytes`, `fetch.max.wait.ms`,
  `fetch.min.bytes`, `request.timeout.ms`, `default.api.timeout.ms`, `retry.backoff.ms`.

What cannot be honoured is refused in one line naming the option, never dropped: a dropped security
setting would connect in plaintext, or fail later with a worse message. So: what Spark's Kafka source
refuses too (`REFUSED`: the source owns offsets and deserialization), any other `sasl.*` or `ssl.*` key
(librdkafka's own names such as `sasl.username` included: the options are the Java client's), a login
module or mechanism other than PLAIN/SCRAM (GSSAPI, Java's default, included), a JKS or PKCS12 store
(Python's TLS reads PEM), and SASL or TLS settings beside a `security.protocol` that would not use
them. Other Java consumer settings (`max.poll.records`, `group.id`, ...) are about a Java consumer's
behaviour this client does not have and are ignored by name, as the Java client ignores a setting it
does not know. Values are never logged or shown (credentials): `WireSettings` leaves the secrets out of
its repr.
"""

from __future__ import annotations

import enum
import logging
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from spark_reader.options import OptionError

log = logging.getLogger(__name__)

# Spark's Kafka source refuses these (KafkaSourceProvider.validateGeneralOptions): the source owns them
REFUSED = {
    "auto.offset.reset": "set the source option startingOffsets instead",
    "key.deserializer": "keys are always read as bytes",
    "value.deserializer": "values are always read as bytes",
    "enable.auto.commit": "the source commits no offsets to Kafka",
    "interceptor.classes": "the source's consumers run no Java interceptors",
}
_JAAS_FIELD = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')

# Java consumer defaults, but for max.partition.fetch.bytes: one client reads one partition here, so a
# response holds up to 8 MiB (fewer round trips)
DEFAULT_PARTITION_FETCH_BYTES = 8 << 20
DEFAULT_FETCH_MAX_BYTES = 50 << 20
DEFAULT_FETCH_MAX_WAIT_MS = 500
DEFAULT_FETCH_MIN_BYTES = 1
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
DEFAULT_API_TIMEOUT_MS = 60_000
DEFAULT_RETRY_BACKOFF_MS = 100
DEFAULT_CLIENT_ID = "spark-kafka-tiered-wire"

_INTS = {
    "max.partition.fetch.bytes": DEFAULT_PARTITION_FETCH_BYTES,
    "fetch.max.bytes": DEFAULT_FETCH_MAX_BYTES,
    "fetch.max.wait.ms": DEFAULT_FETCH_MAX_WAIT_MS,
    "fetch.min.bytes": DEFAULT_FETCH_MIN_BYTES,
    "request.timeout.ms": DEFAULT_REQUEST_TIMEOUT_MS,
    "default.api.timeout.ms": DEFAULT_API_TIMEOUT_MS,
    "retry.backoff.ms": DEFAULT_RETRY_BACKOFF_MS,
}
_SSL_KEYS = frozenset(
    {
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.truststore.certificates",
        "ssl.truststore.password",  # a PEM truststore has none; accepted as Java accepts it
        "ssl.keystore.location",
        "ssl.keystore.type",
        "ssl.keystore.password",  # Java's PEM keystore ignores it too (the key's is ssl.key.password)
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
        "ssl.enabled.protocols",
        "ssl.protocol",
    }
)
_SASL_KEYS = frozenset({"sasl.mechanism", "sasl.jaas.config"})
_OTHER_KEYS = frozenset({"bootstrap.servers", "client.id", "security.protocol", *_INTS})
_TLS_VERSIONS = {"TLSV1.2": ssl.TLSVersion.TLSv1_2, "TLSV1.3": ssl.TLSVersion.TLSv1_3}


class SecurityProtocol(enum.Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)


class SaslMechanism(enum.Enum):
    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"


@dataclass(frozen=True)
class TlsSettings:
    """What the TLS context is built from (PEM only). The key's password is left out of the repr."""

    cafile: str | None = None
    cadata: str | None = None
    certfile: str | None = None
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True
    minimum: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    maximum: ssl.TLSVersion = ssl.TLSVersion.MAXIMUM_SUPPORTED

    def context(self) -> ssl.SSLContext:
        """The client's TLS context: the CAs given (else the system's), a client certificate if given."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = self.minimum
        ctx.maximum_version = self.maximum
        ctx.check_hostname = self.check_hostname
        try:
            if self.cafile or self.cadata:
                ctx.load_verify_locations(cafile=self.cafile, cadata=self.cadata)
            else:
                ctx.load_default_certs()
        except (OSError, ssl.SSLError, ValueError) as exc:
            where = (
                f"kafka.ssl.truststore.location {self.cafile}"
                if self.cafile
                else "kafka.ssl.truststore.certificates"
            )
            raise OptionError(f"option {where}: not PEM certificates Python can read ({exc})") from None
        if self.certfile:
            try:  # Java's PEM keystore: the private key and its certificate chain in one file
                ctx.load_cert_chain(self.certfile, self.certfile, password=self.key_password)
            except (OSError, ssl.SSLError, ValueError) as exc:
                raise OptionError(
                    f"option kafka.ssl.keystore.location {self.certfile}: not a PEM private key and certificate "
                    f"chain Python can read, or kafka.ssl.key.password does not open it ({type(exc).__name__})"
                ) from None
        return ctx


@dataclass(frozen=True)
class WireSettings:
    """Everything the wire client needs to reach the brokers; secrets are not in the repr."""

    bootstrap_servers: str
    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    tls: TlsSettings | None = None
    client_id: str = DEFAULT_CLIENT_ID
    max_partition_fetch_bytes: int = DEFAULT_PARTITION_FETCH_BYTES
    fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES
    fetch_max_wait_ms: int = DEFAULT_FETCH_MAX_WAIT_MS
    fetch_min_bytes: int = DEFAULT_FETCH_MIN_BYTES
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    default_api_timeout_ms: int = DEFAULT_API_TIMEOUT_MS
    retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS

    @classmethod
    def from_kafka_params(cls, params: Mapping[str, str]) -> WireSettings:
        """The settings of `kafka.*` options (prefix stripped, as `SourceOptions.kafka_params` holds them).

        Raises `OptionError` (one line, naming the option, never its value if it may be a secret)."""
        params = {k.strip().lower(): v for k, v in params.items()}
        for key, why in REFUSED.items():
            if key in params:
                raise OptionError(f"option kafka.{key} is not supported: {why}")
        for key in sorted(params):
            if (key.startswith("ssl.") and key not in _SSL_KEYS) or (
                key.startswith("sasl.") and key not in _SASL_KEYS
            ):
                raise OptionError(
                    f"option kafka.{key} is not supported by the brokers' fetch layer (kafka-python): "
                    "it reads SASL PLAIN/SCRAM and TLS from PEM files only"
                )
            if key == "security.providers":
                raise OptionError("option kafka.security.providers is not supported: it names Java classes")
        ignored = sorted(k for k in params if k not in _SSL_KEYS | _SASL_KEYS | _OTHER_KEYS)
        if ignored:
            log.debug("kafka.* options without meaning for the brokers' fetch layer, ignored: %s", ignored)
        servers = (params.get("bootstrap.servers") or "").strip()
        if not servers:
            raise OptionError("option kafka.bootstrap.servers is required to read from the brokers")
        protocol = _protocol(params)
        mechanism, username, password = _sasl(params, protocol)
        ints = {name: _positive_int(name, params[name]) if name in params else d for name, d in _INTS.items()}
        return cls(
            bootstrap_servers=servers,
            security_protocol=protocol,
            sasl_mechanism=mechanism,
            sasl_username=username,
            sasl_password=password,
            tls=_tls(params, protocol),
            client_id=params.get("client.id") or DEFAULT_CLIENT_ID,
            max_partition_fetch_bytes=ints["max.partition.fetch.bytes"],
            fetch_max_bytes=ints["fetch.max.bytes"],
            fetch_max_wait_ms=ints["fetch.max.wait.ms"],
            fetch_min_bytes=ints["fetch.min.bytes"],
            request_timeout_ms=ints["request.timeout.ms"],
            default_api_timeout_ms=ints["default.api.timeout.ms"],
            retry_backoff_ms=ints["retry.backoff.ms"],
        )

    def client_configs(self) -> dict[str, object]:
        """kafka-python's connection settings (`KafkaNetClient(**configs)`); holds secrets: never log it."""
        configs: dict[str, object] = {
            "bootstrap_servers": self.bootstrap_servers,
            "client_id": self.client_id,
            "request_timeout_ms": self.request_timeout_ms,
            "security_protocol": self.security_protocol.value,
            # kafka-python refuses a response frame above this (1 MB by default): a Fetch response holds
            # at most fetch.max.bytes, but the broker always returns a first batch whole, however big
            "receive_message_max_bytes": 2**31 - 1,
        }
        if self.tls is not None:
            configs["ssl_context"] = self.tls.context()
        if self.sasl_mechanism is not None:
            configs.update(
                sasl_mechanism=self.sasl_mechanism.value,
                sasl_plain_username=self.sasl_username,
                sasl_plain_password=self.sasl_password,
            )
        return configs


def _positive_int(name: str, value: str) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise OptionError(f"option kafka.{name} must be a positive integer, got {value!r}") from None
    if n <= 0:
        raise OptionError(f"option kafka.{name} must be a positive integer, got {value!r}")
    return n


def _protocol(params: Mapping[str, str]) -> SecurityProtocol:
    raw = (params.get("security.protocol") or "PLAINTEXT").strip().upper()
    try:
        return SecurityProtocol(raw)
    except ValueError:
        names = ", ".join(p.value for p in SecurityProtocol)
        raise OptionError(f"option kafka.security.protocol must be one of {names}, got {raw!r}") from None


def _sasl(params: Mapping[str, str], protocol: SecurityProtocol) -> tuple[SaslMechanism | None, str, str]:
    given = sorted(k for k in params if k.startswith("sasl."))
    if not protocol.uses_sasl:
        if given:
            raise OptionError(
                f"option kafka.{given[0]} is set but kafka.security.protocol is {protocol.value}: set "
                "SASL_PLAINTEXT or SASL_SSL (a client that dropped it would connect without authenticating)"
            )
        return None, "", ""
    raw = (params.get("sasl.mechanism") or "GSSAPI").strip().upper()  # GSSAPI: Java's default
    try:
        mechanism = SaslMechanism(raw)
    except ValueError:
        raise OptionError(
            f"option kafka.sasl.mechanism {raw} is not supported by the brokers' fetch layer "
            "(PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 are)"
        ) from None
    jaas = params.get("sasl.jaas.config")
    if not jaas:
        raise OptionError(f"option kafka.sasl.jaas.config is required for SASL {mechanism.value}")
    if "PlainLoginModule" not in jaas and "ScramLoginModule" not in jaas:
        module = jaas.split()[0] if jaas.split() else "?"
        raise OptionError(
            f"option kafka.sasl.jaas.config: login module {module} is not supported by the brokers' fetch "
            "layer (PlainLoginModule and ScramLoginModule are)"
        )
    fields = dict(_JAAS_FIELD.findall(jaas))
    if "username" not in fields or "password" not in fields:
        raise OptionError('option kafka.sasl.jaas.config must give username="..." and password="..."')
    return mechanism, fields["username"], fields["password"]


def _pem_store(params: Mapping[str, str], kind: str) -> str | None:
    location = params.get(f"ssl.{kind}store.location")
    if location is None:
        return None
    store_type = (params.get(f"ssl.{kind}store.type") or "JKS").strip().upper()  # JKS: Java's default
    if store_type != "PEM":
        raise OptionError(
            f"option kafka.ssl.{kind}store.location: the brokers' fetch layer reads PEM stores, not "
            f"{store_type}: convert it and set kafka.ssl.{kind}store.type=PEM"
        )
    return location


def _tls_versions(params: Mapping[str, str]) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    raw = params.get("ssl.enabled.protocols") or params.get("ssl.protocol") or ""
    names = [p.strip().upper() for p in raw.split(",") if p.strip() and p.strip().upper() != "TLS"]
    if not names:
        return ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.MAXIMUM_SUPPORTED
    unknown = [n for n in names if n not in _TLS_VERSIONS]
    if unknown:
        key = "ssl.enabled.protocols" if "ssl.enabled.protocols" in params else "ssl.protocol"
        raise OptionError(f"option kafka.{key}: only TLSv1.2 and TLSv1.3 are supported, not {unknown[0]}")
    versions = sorted(_TLS_VERSIONS[n] for n in names)
    return versions[0], versions[-1]


def _tls(params: Mapping[str, str], protocol: SecurityProtocol) -> TlsSettings | None:
    given = sorted(k for k in params if k.startswith("ssl."))
    if not protocol.uses_tls:
        if given:
            raise OptionError(
                f"option kafka.{given[0]} is set but kafka.security.protocol is {protocol.value}: set SSL "
                "or SASL_SSL (a client that dropped it would connect in plaintext)"
            )
        return None
    minimum, maximum = _tls_versions(params)
    algorithm = params.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    return TlsSettings(
        cafile=_pem_store(params, "trust"),
        cadata=params.get("ssl.truststore.certificates"),
        certfile=_pem_store(params, "key"),
        key_password=params.get("ssl.key.password"),
        check_hostname=algorithm == "https",
        minimum=minimum,
        maximum=maximum,
    )
