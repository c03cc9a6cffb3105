"""Configuration: broker-level `rsm.config.*` defaults, overridden per topic by `unchecked.rsm.*` keys.

Kafka hands the RSM the broker's `rsm.config.*` keys with the prefix stripped (`bucket`, `prefix`,
`storage.backend`, ...). The RSM's topic configs proposal lets a topic carry unvalidated `unchecked.*` keys and passes the topic's
LogConfig to every operation, so a topic can choose its own bucket, prefix, encryption, compression and
chunk size.

Today's brokers (Kafka 4.4) refuse unknown topic configs (`INVALID_CONFIG: Unknown topic config name:
unchecked.rsm.bucket`) and pass no LogConfig, so a topic cannot hold those keys yet. Until it can, the same
keys live in a per-topic overlay document kept in the store itself (`rsm.store.overlays`, keyed by topic id,
changed at run time by `rsm topic-config`): every broker, the Spark reader and the migration tool see one
copy, a change needs no restart, and a recreated topic does not inherit its predecessor's settings.

Resolution order for a topic-level setting: the topic's LogConfig `unchecked.rsm.<name>` key (when the
broker passes one, it wins), then the topic's overlay, then the broker's `<name>`, then a built-in default.
`describe()` answers every effective value with its source, like KIP-525's config sources,
masking sensitive values.

Record validation during offload is switched on per topic by `record.validation.policy` (or its
`unchecked.record.validation.policy` form, for brokers that reject unknown topic keys); the policy class is
a broker setting, `record.validation.policy.class.name`.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rsm.api.errors import ConfigException
from rsm.api.log_config import LogConfig
from rsm.api.names import CLOUD_BUCKET_RULES
from rsm.config.cloud_settings import CLOUD_SETTINGS, KMS_SETTINGS
from rsm.config.redact import HIDDEN_VALUE, looks_secret, redact_url
from rsm.config.setting_types import (  # noqa: F401 - re-exported: parsers and Setting lived here
    Setting,
    _bool,
    _bucket,
    _enum,
    _int,
    _prefix,
    _regex,
    _size,
    _str,
    _url,
)

BROKER_PREFIX = "rsm.config."
TOPIC_PREFIX = "unchecked.rsm."
MASK = "[hidden]"

MIN_CHUNK_SIZE = 4 * 1024
MAX_CHUNK_SIZE = 256 * 1024 * 1024


class ConfigSource(enum.Enum):
    """Where an effective value came from (names as in KIP-525's `ConfigSource`, plus TOPIC_UNCHECKED)."""

    TOPIC_UNCHECKED = "TOPIC_UNCHECKED"
    TOPIC_OVERLAY = (
        "TOPIC_OVERLAY"  # the per-topic overlay in the store (rsm.store.overlays), for today's brokers
    )
    TOPIC = "TOPIC"
    BROKER = "BROKER"
    DEFAULT = "DEFAULT"


class Backend(enum.Enum):
    """Where segments are stored: a local directory, or a cloud's object store (`rsm.store`)."""

    FILE = "file"
    S3 = "s3"
    GCS = "gcs"
    AZURE = "azure"


CLOUD_NAMES = {Backend.FILE: "the file store", Backend.S3: "S3", Backend.GCS: "GCS", Backend.AZURE: "Azure"}


class ViolationAction(enum.Enum):
    """What a topic wants when its record validation policy rejects records of a segment."""

    FAIL = "fail"  # refuse the copy: Kafka retries later and the segment stays local
    TIER = "tier"  # tier it anyway, recording the violations in the manifest for readers


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "storage.backend",
        "file",
        _enum(Backend),
        "file (a bucket is a directory under the root), s3, gcs or azure (a bucket is a container)",
    ),
    Setting("storage.file.root", None, _str, "root directory of the file store"),
    Setting("storage.s3.endpoint.url", None, _url, "S3 endpoint (MinIO, moto...); AWS when unset"),
    Setting("storage.s3.region", None, _str, "S3 region"),
    Setting(
        "storage.s3.access.key.id", None, _str, "S3 access key id (else the standard chain)", sensitive=True
    ),
    Setting(
        "storage.s3.secret.access.key", None, _str, "S3 secret key (else the standard chain)", sensitive=True
    ),
    Setting("storage.s3.session.token", None, _str, "S3 session token", sensitive=True),
    Setting(
        "storage.s3.multipart.part.size",
        str(8 << 20),
        lambda k, v: _size(k, v, 5 << 20, 5 << 30),
        "part size of multipart uploads (S3 minimum 5 MiB)",
    ),
    # deadlines of S3 requests; why these defaults: rsm.store.s3.s3_deadlines
    Setting(
        "storage.s3.connect.timeout.ms",
        "5000",
        lambda k, v: _int(k, v, 1, 300_000),
        "S3: wait for a connection at most this long (per attempt)",
    ),
    Setting(
        "storage.s3.read.timeout.ms",
        "20000",
        lambda k, v: _int(k, v, 1, 300_000),
        "S3: wait for the next bytes of an answer at most this long (per attempt)",
    ),
    Setting(
        "storage.s3.retry.max.attempts",
        "3",
        lambda k, v: _int(k, v, 1, 20),
        "S3: attempts per request, the first included (botocore's standard retry mode; a GET whose body "
        "fails after its headers is tried again as often)",
    ),
    Setting(
        "storage.s3.request.timeout.ms",
        "60000",
        lambda k, v: _int(k, v, 1, 3_600_000),
        "S3: the whole of one store request, attempts and backoff included; keep it below "
        "bridge.request.timeout.ms / 2",
    ),
    *CLOUD_SETTINGS,
    Setting("bucket", "kafka-tiered-storage", _bucket, "bucket of new segments", topic=True),
    Setting("prefix", "", _prefix, "key prefix of new segments", topic=True),
    Setting(
        "catalog.bucket",
        None,
        _bucket,
        "bucket of the store's own documents (topic overlays, location records, journals); unset: `bucket`. "
        "Set it to the old value when you change `bucket`, or move it with `rsm migrate catalog`",
    ),
    Setting(
        "catalog.prefix",
        None,
        _prefix,
        "key prefix of the store's own documents; unset: `prefix` (see catalog.bucket)",
    ),
    Setting("encryption.enabled", "false", _bool, "AES-256-GCM encryption of new segments", topic=True),
    Setting(
        "encryption.key.id",
        None,
        _str,
        "key wrapping new segments' data keys: a keyring key id, or kms:<key ARN or alias/...> (AWS KMS)",
        topic=True,
    ),
    Setting("encryption.keyring.path", None, _str, "JSON keyring file {key_id: base64 256-bit key}"),
    *KMS_SETTINGS,
    Setting(
        "compression.enabled", "true", _bool, "zstd per chunk (skipped for compressed batches)", topic=True
    ),
    Setting("compression.zstd.level", "3", lambda k, v: _int(k, v, -7, 22), "zstd level"),
    Setting(
        "chunk.size",
        str(4 << 20),
        lambda k, v: _size(k, v, MIN_CHUNK_SIZE, MAX_CHUNK_SIZE),
        "original bytes per chunk: the unit of ranged fetches",
        topic=True,
    ),
    Setting(
        "copy.timeout.ms",
        "240000",
        lambda k, v: _int(k, v, 1, 3_600_000),
        "the whole of one segment copy: its uploads and, when it fails, the removal of what it wrote (what "
        "is left then goes with Kafka's delete of the failed segment, or rsm migrate gc); keep it below "
        "bridge.request.timeout.ms (300000) so Kafka hears the copy's own error",
    ),
    Setting(
        "cache.manifest.bytes", str(8 << 20), lambda k, v: _size(k, v), "byte bound of the manifest cache"
    ),
    Setting("cache.chunk.bytes", str(64 << 20), lambda k, v: _size(k, v), "byte bound of the chunk cache"),
    Setting(
        "fetch.prefetch.chunks",
        "1",
        lambda k, v: _int(k, v, 0, 64),
        "chunks read ahead for sequential fetches",
    ),
    Setting("fetch.threads", "4", lambda k, v: _int(k, v, 1, 256), "threads downloading chunks ahead"),
    Setting(
        "manifest.require.authenticated",
        "false",
        _bool,
        "refuse to fetch segments whose manifest no key authenticates (version 1 manifests, unencrypted "
        "segments) and to copy unencrypted ones: for stores whose every topic is encrypted and re-keyed",
    ),
    Setting("record.validation.policy.class.name", None, _str, "RecordValidationPolicy class (module:Class)"),
    Setting(
        "record.validation.on.violation",
        "fail",
        _enum(ViolationAction),
        "fail the copy, or tier with a violation report",
        topic=True,
    ),
    Setting(
        "legal.hold",
        "false",
        _bool,
        "the topic is under legal hold: the topic policy refuses deleting it or its records, and the RSM keeps "
        "its tiered segments",
        topic=True,
    ),
    # the topic management policy (rsm.policy): the built-in one's rules, or a class of your own
    Setting(
        "policy.class.name",
        None,
        _str,
        "TopicManagementPolicy class (module:Class) replacing the built-in policy (rsm.policy.builtin)",
    ),
    Setting(
        "policy.buckets.allowed",
        None,
        _str,
        "comma-separated bucket names or glob patterns topics may tier to (any valid bucket when unset)",
    ),
    Setting(
        "policy.prefix.pattern", None, _regex, "regular expression every topic's prefix must match in full"
    ),
    Setting(
        "policy.encryption.required.topics",
        None,
        _regex,
        "regular expression of topic names whose tiered segments must be encrypted",
    ),
    Setting(
        "topic.overlay.cache.ms",
        "5000",
        lambda k, v: _int(k, v, 0, 3_600_000),
        "how long a topic's overlay (rsm topic-config) is cached: a change applies after at most this",
    ),
    # rsm.metrics: what the broker's JMX (through the bridge) and the Prometheus endpoint show
    Setting("metrics.enabled", "true", _bool, "record copy, fetch, delete, cache, error and S3 metrics"),
    Setting(
        "metrics.prometheus.port",
        None,
        lambda k, v: _int(k, v, 0, 65535),
        "serve the metrics as Prometheus text on this port (bridge, tools); unset: no endpoint",
    ),
    Setting("metrics.prometheus.host", "0.0.0.0", _str, "address the Prometheus endpoint listens on"),
)
SETTINGS_BY_NAME = {s.name: s for s in SETTINGS}


def parse_setting(setting: Setting, key: str, text: str) -> object:
    """Parse `text` given under `key` for `setting`; ConfigException naming the key when it is refused.

    A value that looks like a secret (`rsm.config.redact.looks_secret`: key material, an AWS key id, a random
    token) is refused for every setting that is not a credential, without showing it: it is a secret pasted
    into the wrong key, and the value of an ordinary key is shown by `describe`, `--dry-run` and the
    configured-RSM log line, stored in bucket-readable overlays and, for a prefix, in object keys.
    """
    if not setting.sensitive and looks_secret(text):
        raise ConfigException(
            f"config {key}: refusing {HIDDEN_VALUE}; is it a credential pasted into the wrong key? Credentials "
            "belong in storage.s3.access.key.id / secret.access.key / session.token or storage.azure.account.key, "
            "keys in the keyring file or KMS"
        )
    return setting.parse(key, text)


_VALIDATION_POLICY_SETTING = Setting("record.validation.policy", None, _str, "the topic's validation policy")
VALIDATION_POLICY_KEYS = ("record.validation.policy", "unchecked.record.validation.policy")
UNCHECKED_VALIDATION_POLICY_KEY = "unchecked.record.validation.policy"
TOPIC_KEYS: tuple[str, ...] = (
    *(TOPIC_PREFIX + s.name for s in SETTINGS if s.topic),
    UNCHECKED_VALIDATION_POLICY_KEY,
)


def closest_topic_key(key: str) -> str | None:
    """The topic-level key `key` most likely misspells (`unchecked.rsm.bukcet` -> `unchecked.rsm.bucket`)."""
    # compared without the shared "unchecked." so that it does not make every key look alike
    names = {k.removeprefix("unchecked."): k for k in TOPIC_KEYS}
    matches = difflib.get_close_matches(key.removeprefix("unchecked."), list(names), n=1, cutoff=0.8)
    return names[matches[0]] if matches else None


def closest_setting(name: str) -> str | None:
    """The setting `name` most likely misspells (`bukcet` -> `bucket`, `storage.file.rot` ->
    `storage.file.root`), from the one definition of every setting; None when nothing is close."""
    matches = difflib.get_close_matches(name, list(SETTINGS_BY_NAME), n=1, cutoff=0.75)
    return matches[0] if matches else None


def unknown_setting(key: str, prefix: str = "") -> str:
    """`key (did you mean prefix+closest?)`, or `key` alone when nothing is close: how an unknown key is named."""
    name = key[len(prefix) :] if prefix and key.startswith(prefix) else key
    guess = closest_setting(name)
    return f"{key} (did you mean {prefix}{guess}?)" if guess else key


def unknown_topic_key(key: str) -> str:
    """The message refusing an unknown topic-level key: the closest valid name, else every valid name."""
    guess = closest_topic_key(key)
    if guess:
        return f"unknown topic config {key!r}: did you mean {guess!r}?"
    return f"unknown topic config {key!r}; known: {', '.join(TOPIC_KEYS)}"


def parse_topic_config(key: str, value: str) -> object:
    """Parse one topic-level `unchecked.*` key with the parser the RSM itself uses for it.

    Raises ConfigException naming the key for an unknown key or a bad value (the overlay and the
    `rsm topic-config` CLI check values with this, so nothing the RSM would refuse later gets stored).
    """
    if not isinstance(value, str):
        raise ConfigException(f"config {key} must be a string, got {type(value).__name__}")
    if key == UNCHECKED_VALIDATION_POLICY_KEY:
        v = value.strip()
        if not v:
            raise ConfigException(f"config {key} must name a policy, got an empty value")
        return parse_setting(_VALIDATION_POLICY_SETTING, key, v)
    if key.startswith(TOPIC_PREFIX):
        setting = SETTINGS_BY_NAME.get(key[len(TOPIC_PREFIX) :])
        if setting is not None and setting.topic:
            return parse_setting(setting, key, value)
    raise ConfigException(unknown_topic_key(key))


@dataclass(frozen=True)
class ConfigEntry:
    """One effective value as `describe()` answers it: value as a string (masked when sensitive)."""

    name: str
    value: str | None
    source: ConfigSource
    sensitive: bool
    key: str  # the key that supplied the value (`unchecked.rsm.bucket`, `bucket`, or the name for defaults)
    documentation: str = ""


@dataclass(frozen=True)
class TopicSettings:
    """The settings one operation runs with, resolved from the topic's LogConfig and the broker's."""

    bucket: str
    prefix: str
    encryption_enabled: bool
    encryption_key_id: str | None
    compression_enabled: bool
    compression_level: int
    chunk_size: int
    validation_policy: str | None
    on_violation: ViolationAction
    legal_hold: bool = False
    # where encryption.enabled and encryption.key.id came from (the copy's downgrade check: rsm.copy.downgrade)
    encryption_source: ConfigSource = ConfigSource.DEFAULT
    encryption_setting: str = "encryption.enabled"
    key_source: ConfigSource = ConfigSource.DEFAULT
    key_setting: str = "encryption.key.id"


class RsmConfig:
    """Parsed broker configuration, answering per-topic settings and their sources."""

    def __init__(self, configs: Mapping[str, object] | None = None) -> None:
        raw: dict[str, str] = {}
        for key, value in dict(configs or {}).items():
            if value is None:
                continue
            name = key[len(BROKER_PREFIX) :] if key.startswith(BROKER_PREFIX) else key
            raw[name] = value if isinstance(value, str) else ("true" if value is True else str(value))
        self._raw = raw
        self._values: dict[str, object] = {}
        for s in SETTINGS:
            text = raw.get(s.name, s.default)
            self._values[s.name] = None if text is None else parse_setting(s, s.name, text)
        self.unknown_keys = sorted(k for k in raw if k not in SETTINGS_BY_NAME)
        self.backend: Backend = self._values["storage.backend"]  # type: ignore[assignment]
        if self.backend is Backend.FILE and not self._values["storage.file.root"]:
            raise ConfigException(
                "config storage.file.root is required when storage.backend=file"
                + self._misspelled("storage.file.root")
            )
        self._check_backend_bucket(str(self._values["bucket"]), "bucket")
        if self._values["catalog.bucket"] is not None:
            self._check_backend_bucket(str(self._values["catalog.bucket"]), "catalog.bucket")

    def _misspelled(self, name: str) -> str:
        """` (K is not a setting: did you mean NAME?)` for the unknown keys that misspell `name`, else ''."""
        typos = [k for k in self.unknown_keys if closest_setting(k) == name]
        if not typos:
            return ""
        keys = " and ".join(typos)
        return f" ({keys} {'is' if len(typos) == 1 else 'are'} not a setting: did you mean {name}?)"

    def get(self, name: str) -> object:
        """The broker-level (or built-in) value of a setting."""
        return self._values[name]

    @property
    def catalog_bucket(self) -> str:
        """Where the store's own documents live (`catalog.bucket`, else `bucket`): see `rsm.store.home`."""
        value = self._values["catalog.bucket"]
        return str(value if value is not None else self._values["bucket"])

    @property
    def catalog_prefix(self) -> str:
        """The key prefix of the store's own documents (`catalog.prefix`, else `prefix`)."""
        value = self._values["catalog.prefix"]
        return str(value if value is not None else self._values["prefix"])

    @property
    def file_root(self) -> Path | None:
        root = self._values["storage.file.root"]
        return Path(str(root)) if root else None

    def _resolve(
        self, name: str, log_config: Mapping[str, str] | None, overlay: Mapping[str, str] | None = None
    ) -> tuple[object, ConfigEntry]:
        s = SETTINGS_BY_NAME[name]
        topic_key = TOPIC_PREFIX + name
        # topic layers first, in order: the LogConfig's unchecked.* keys, then the store's overlay
        layers = ((log_config, ConfigSource.TOPIC_UNCHECKED), (overlay, ConfigSource.TOPIC_OVERLAY))
        for layer, layer_source in layers if s.topic else ():
            if layer is not None and topic_key in layer:
                text = layer[topic_key]
                value, source, key = parse_setting(s, topic_key, text), layer_source, topic_key
                break
        else:
            if name in self._raw:
                value, source, key, text = self._values[name], ConfigSource.BROKER, name, self._raw[name]
            else:
                value, source, key, text = self._values[name], ConfigSource.DEFAULT, name, s.default
        # a URL's user information and secret query parameters never show (storage.s3.endpoint.url)
        display = MASK if (s.sensitive and text is not None) else redact_url(text) if text else text
        return value, ConfigEntry(name, display, source, s.sensitive, key, s.doc)

    def resolve(
        self,
        log_config: Mapping[str, str] | LogConfig | None = None,
        overlay: Mapping[str, str] | None = None,
    ) -> TopicSettings:
        """The effective settings for an operation on a topic with this LogConfig and overlay.

        `overlay` is the topic's `unchecked.*` keys from the store (`rsm.store.overlays`), used for every key the
        LogConfig does not carry. Raises ConfigException naming the offending key (never echoing a
        sensitive value).
        """
        lc = log_config or {}
        resolved = {s.name: self._resolve(s.name, lc, overlay) for s in SETTINGS if s.topic}
        v = {name: value for name, (value, _) in resolved.items()}
        bucket, bucket_entry = resolved["bucket"]
        self._check_backend_bucket(str(bucket), bucket_entry.key)
        policy, _ = self._validation_policy(lc, overlay)
        key_id = v["encryption.key.id"]
        return TopicSettings(
            bucket=str(v["bucket"]),
            prefix=str(v["prefix"]),
            encryption_enabled=bool(v["encryption.enabled"]),
            encryption_key_id=str(key_id) if key_id else None,
            compression_enabled=bool(v["compression.enabled"]),
            compression_level=int(self._values["compression.zstd.level"]),  # type: ignore[arg-type]
            chunk_size=int(v["chunk.size"]),  # type: ignore[arg-type]
            validation_policy=policy,
            on_violation=v["record.validation.on.violation"],  # type: ignore[arg-type]
            legal_hold=bool(v["legal.hold"]),
            encryption_source=resolved["encryption.enabled"][1].source,
            encryption_setting=resolved["encryption.enabled"][1].key,
            key_source=resolved["encryption.key.id"][1].source,
            key_setting=resolved["encryption.key.id"][1].key,
        )

    def _check_backend_bucket(self, bucket: str, key: str) -> None:
        """Each cloud's own bucket (Azure: container) naming rules, checked when the name is configured or
        resolved, naming the key, not at the first upload (`rsm.api.names.CLOUD_BUCKET_RULES`).

        Why not in the `bucket` parser: a topic's value is parsed without knowing the backend (the overlay
        and the CLI check it alone), and the file store, where a bucket is a directory, takes shorter names.
        """
        rule = CLOUD_BUCKET_RULES.get(self.backend.value)
        problem = rule(bucket) if rule is not None else None
        if problem:
            raise ConfigException(
                f"config {key} is not a valid bucket name on {CLOUD_NAMES[self.backend]}: {bucket!r} {problem}"
            )

    @staticmethod
    def _validation_policy(
        lc: Mapping[str, str], overlay: Mapping[str, str] | None = None
    ) -> tuple[str | None, ConfigEntry]:
        candidates = [(key, lc.get(key)) for key in VALIDATION_POLICY_KEYS]
        candidates.append(
            (UNCHECKED_VALIDATION_POLICY_KEY, (overlay or {}).get(UNCHECKED_VALIDATION_POLICY_KEY))
        )
        for i, (key, value) in enumerate(candidates):
            if value is not None and value.strip():
                parse_setting(_VALIDATION_POLICY_SETTING, key, value)  # refuses a pasted secret
                source = (
                    ConfigSource.TOPIC
                    if key == "record.validation.policy"
                    else ConfigSource.TOPIC_UNCHECKED
                    if i < len(VALIDATION_POLICY_KEYS)
                    else ConfigSource.TOPIC_OVERLAY
                )
                return value.strip(), ConfigEntry(
                    "record.validation.policy", value.strip(), source, False, key
                )
        return None, ConfigEntry(
            "record.validation.policy", None, ConfigSource.DEFAULT, False, "record.validation.policy"
        )

    def describe(
        self,
        log_config: Mapping[str, str] | LogConfig | None = None,
        overlay: Mapping[str, str] | None = None,
    ) -> list[ConfigEntry]:
        """Every effective setting for a topic with this LogConfig and overlay, with its source.

        Sensitive values are masked.
        """
        lc = log_config or {}
        entries = [self._resolve(s.name, lc, overlay)[1] for s in SETTINGS]
        entries.append(self._validation_policy(lc, overlay)[1])
        return entries

    def __repr__(self) -> str:
        values = {
            e.name: e.value
            for e in self.describe()
            if e.source is not ConfigSource.DEFAULT or e.value is not None
        }
        return f"RsmConfig({values!r})"
