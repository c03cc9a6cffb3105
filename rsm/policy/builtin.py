"""The built-in topic management policy, configured by the broker's `rsm.config.policy.*` keys.

Rules, each refusing with a message that names the key, the value at fault (never a secret) and the fix;
all of a request's problems are reported at once:

* topic configs: an unknown `unchecked.rsm.*` key is refused naming the closest valid one (a typo of one of
  ours under another `unchecked.` prefix too; other `unchecked.*` keys belong to other plugins and pass),
  a key that looks like a secret is refused without echoing it, values are parsed as the RSM parses them;
* names: a topic name Kafka would refuse; buckets by S3's rules (3 to 63 characters on the s3 backend,
  lowercase letters, digits, `.` and `-`, no `..`, not an IP address) and, with `policy.buckets.allowed`
  (names or glob patterns, comma-separated), only those; with `policy.prefix.pattern` (a regular
  expression), a prefix it matches in full;
* encryption: topics whose name matches `policy.encryption.required.topics` in full must be encrypted
  once tiered (`remote.storage.enable=true`, or unknown on a path that only sees the overlay);
* key ids: the key id a topic encrypts with (and any `unchecked.rsm.encryption.key.id` it names) must be in
  the keyring (`encryption.keyring.path`);
* tiered-storage sanity: remote storage needs `cleanup.policy=delete`, and local retention (time and bytes)
  may not exceed total retention (Kafka's own rule, with the broker's `log.*` defaults);
* record validation: the topic's `record.validation.policy` must name a built-in policy (`rsm.validation.builtin`)
  when no `record.validation.policy.class.name` interprets it;
* legal hold: a topic with `legal.hold=true` (`unchecked.rsm.legal.hold`, or the broker's default) may not
  be deleted, nor its records.

Creations are checked in full; alterations check the state the topic will have, except that key names
are checked only for the keys the request sets (keys already accepted are not re-litigated).
"""

from __future__ import annotations

import fnmatch
import re
import threading
from collections.abc import Mapping

from rsm.api.errors import ConfigException
from rsm.api.names import topic_problem
from rsm.config.keyring import Keyring
from rsm.config.kms import is_kms_key
from rsm.config.redact import is_sensitive_key
from rsm.config.settings import (
    TOPIC_KEYS,
    TOPIC_PREFIX,
    ConfigEntry,
    ConfigSource,
    RsmConfig,
    TopicSettings,
    closest_topic_key,
    parse_topic_config,
    unknown_topic_key,
)
from rsm.policy.api import (
    AlterTopicRequest,
    ClusterState,
    CreateTopicRequest,
    DeleteRecordsRequest,
    DeleteTopicRequest,
    PolicyViolationException,
    RequestedTopicState,
    TopicManagementPolicy,
)

__all__ = ["BuiltinTopicPolicy"]

REMOTE_STORAGE_ENABLE = "remote.storage.enable"
HOUR_MS = 3_600_000
FIX = "rsm topic-config --config server.properties"


def _flag(value: str | None) -> bool | None:
    if value is None:
        return None
    v = value.strip().lower()
    return True if v == "true" else False if v == "false" else None


def _origin(entry: ConfigEntry) -> str:
    """Where an effective value came from, for messages."""
    if entry.source is ConfigSource.BROKER:
        return f"rsm.config.{entry.name}"
    if entry.source is ConfigSource.DEFAULT:
        return "the built-in default"
    return entry.key


class BuiltinTopicPolicy(TopicManagementPolicy):
    """The rules of the module docstring; thread-safe (the keyring is loaded once, re-read on change)."""

    def __init__(self) -> None:
        self.config: RsmConfig | None = None
        self._keyring: Keyring | None = None
        self._lock = threading.Lock()

    def configure(self, configs: Mapping[str, str]) -> None:
        config = RsmConfig(configs)
        allowed = config.get("policy.buckets.allowed")
        self.allowed_buckets = (
            tuple(b.strip() for b in str(allowed).split(",") if b.strip()) if allowed else ()
        )
        self.prefix_pattern: re.Pattern[str] | None = config.get("policy.prefix.pattern")  # type: ignore[assignment]
        self.encrypted_topics: re.Pattern[str] | None = config.get("policy.encryption.required.topics")  # type: ignore[assignment]
        self.validation_class = config.get("record.validation.policy.class.name")
        self.keyring_path = config.get("encryption.keyring.path")
        self.config = config

    def _config(self) -> RsmConfig:
        if self.config is None:
            raise PolicyViolationException("the topic policy is not configured; every request is refused")
        return self.config

    # -- the four operations ---------------------------------------------------------------------------
    def validate_create_topic(self, request: CreateTopicRequest, cluster_state: ClusterState) -> None:
        problems: list[str] = []
        name_problem = topic_problem(request.topic)
        if name_problem:
            problems.append(f"the topic name {request.topic!r} is invalid: it {name_problem}")
        state = request.requested_state
        self._check_keys({**state.configs, **state.requested_configs}, problems)
        self._check_state(request.topic, state, cluster_state, problems)
        self._raise(request.topic, "creation", problems)

    def validate_alter_topic(self, request: AlterTopicRequest, cluster_state: ClusterState) -> None:
        problems: list[str] = []
        state = request.requested_state
        self._check_keys(state.requested_configs, problems)
        self._check_state(request.topic, state, cluster_state, problems)
        self._raise(request.topic, "change", problems)

    def validate_delete_topic(self, request: DeleteTopicRequest, cluster_state: ClusterState) -> None:
        hold = self._legal_hold(request.topic, cluster_state)
        if hold:
            raise PolicyViolationException(
                f"topic {request.topic}: deleting the topic is refused: it is under legal hold ({hold}); "
                f"lift the hold first ({FIX} unset --topic {request.topic} unchecked.rsm.legal.hold)"
            )

    def validate_delete_records(self, request: DeleteRecordsRequest, cluster_state: ClusterState) -> None:
        hold = self._legal_hold(request.topic, cluster_state)
        if hold:
            parts = ", ".join(
                f"{p} before offset {o}" for p, o in sorted(request.deleted_message_offsets.items())
            )
            raise PolicyViolationException(
                f"topic {request.topic}: deleting records{f' (partition {parts})' if parts else ''} is "
                f"refused: the topic is under legal hold ({hold}); lift the hold first "
                f"({FIX} unset --topic {request.topic} unchecked.rsm.legal.hold)"
            )

    # -- rules -------------------------------------------------------------------------------------------
    @staticmethod
    def _raise(topic: str, what: str, problems: list[str]) -> None:
        if problems:
            unique = list(dict.fromkeys(problems))
            raise PolicyViolationException(
                f"topic {topic}: {what} refused by the topic policy: " + "; ".join(unique)
            )

    def _check_keys(self, configs: Mapping[str, str | None], problems: list[str]) -> None:
        """Names (and values) of the `unchecked.*` keys a request sets."""
        for key, value in configs.items():
            if not key.startswith("unchecked."):
                continue
            if is_sensitive_key(key):
                problems.append(
                    f"topic config {key!r} looks like a secret: secrets are never topic configs "
                    "(keep them in the broker's rsm.config.* settings or the keyring)"
                )
            elif key in TOPIC_KEYS:
                if value is not None:
                    try:
                        parse_topic_config(key, value)
                    except ConfigException as exc:
                        problems.append(str(exc))
            elif key.startswith(TOPIC_PREFIX) or closest_topic_key(key):
                # ours, or one of ours misspelled under another unchecked. prefix (other plugins' keys pass)
                problems.append(unknown_topic_key(key))

    def _check_state(
        self, topic: str, state: RequestedTopicState, cluster_state: ClusterState, problems: list[str]
    ) -> None:
        config = self._config()
        configs = {k: v for k, v in state.configs.items() if v is not None}
        try:
            settings = config.resolve(configs)
        except ConfigException as exc:
            problems.append(str(exc))
            return
        entries = {e.name: e for e in config.describe(configs)}
        tiered = _flag(configs.get(REMOTE_STORAGE_ENABLE))
        self._check_location(settings, entries, problems)
        self._check_encryption(topic, tiered, settings, entries, configs, problems)
        if tiered:
            self._check_tiered_sanity(configs, cluster_state.broker_state().configs, problems)
        if settings.validation_policy and not self.validation_class:
            from rsm.validation.builtin import parse_policy  # noqa: PLC0415 - numpy and pyarrow: only when needed

            try:
                parse_policy(settings.validation_policy)
            except ValueError as exc:
                key = entries["record.validation.policy"].key
                problems.append(f"{key} {exc}; no record.validation.policy.class.name is configured")

    def _check_location(
        self, settings: TopicSettings, entries: Mapping[str, ConfigEntry], problems: list[str]
    ) -> None:
        if self.allowed_buckets and not any(
            fnmatch.fnmatchcase(settings.bucket, pattern) for pattern in self.allowed_buckets
        ):
            problems.append(
                f"bucket {settings.bucket!r} ({_origin(entries['bucket'])}) is not allowed: "
                f"rsm.config.policy.buckets.allowed={','.join(self.allowed_buckets)}"
            )
        if self.prefix_pattern is not None and not self.prefix_pattern.fullmatch(settings.prefix):
            problems.append(
                f"prefix {settings.prefix!r} ({_origin(entries['prefix'])}) does not match "
                f"rsm.config.policy.prefix.pattern={self.prefix_pattern.pattern}"
            )

    def _check_encryption(
        self,
        topic: str,
        tiered: bool | None,
        settings: TopicSettings,
        entries: Mapping[str, ConfigEntry],
        configs: Mapping[str, str],
        problems: list[str],
    ) -> None:
        required = self.encrypted_topics is not None and self.encrypted_topics.fullmatch(topic)
        if required and tiered is not False and not settings.encryption_enabled:
            assert self.encrypted_topics is not None
            problems.append(
                f"its tiered segments must be encrypted (rsm.config.policy.encryption.required.topics="
                f"{self.encrypted_topics.pattern}) but encryption.enabled is false "
                f"({_origin(entries['encryption.enabled'])}); set it first: {FIX} set --topic {topic} "
                "unchecked.rsm.encryption.enabled=true [unchecked.rsm.encryption.key.id=ID] (add --pending "
                "before the topic exists: the settings are adopted by the topic created under that name)"
            )
        named = configs.get(TOPIC_PREFIX + "encryption.key.id")
        wanted = [settings.encryption_key_id] if settings.encryption_enabled else []
        if named and named.strip() not in wanted:
            wanted.append(named.strip())
        if settings.encryption_enabled and not settings.encryption_key_id:
            problems.append(
                "encryption is enabled but no key id is set (unchecked.rsm.encryption.key.id or "
                "rsm.config.encryption.key.id)"
            )
        wanted = [w for w in wanted if w and not is_kms_key(w)]  # KMS says at first use whether it has a key
        if not wanted:
            return
        if not self.keyring_path:
            problems.append(
                f"key id {wanted[0]!r} cannot be checked: the broker has no rsm.config.encryption.keyring.path"
            )
            return
        keyring = self._load_keyring(problems)
        if keyring is None:
            return
        for key_id in wanted:
            if key_id not in keyring:
                source = (
                    _origin(entries["encryption.key.id"])
                    if key_id == settings.encryption_key_id
                    else TOPIC_PREFIX + "encryption.key.id"
                )
                problems.append(
                    f"key id {key_id!r} is not in the keyring {self.keyring_path} ({source}); known ids: "
                    f"{', '.join(keyring.key_ids()) or '(none)'} (add one with: rsm keyring add "
                    f"{self.keyring_path} {key_id})"
                )

    def _load_keyring(self, problems: list[str]) -> Keyring | None:
        with self._lock:
            if self._keyring is None:
                try:
                    self._keyring = Keyring(str(self.keyring_path))
                except ConfigException as exc:  # never the keys: Keyring's messages hold none
                    problems.append(f"the keyring cannot be read: {exc}")
                    return None
            return self._keyring

    @staticmethod
    def _check_tiered_sanity(
        configs: Mapping[str, str], broker: Mapping[str, str], problems: list[str]
    ) -> None:
        cleanup = configs.get("cleanup.policy", broker.get("log.cleanup.policy", "delete"))
        policies = {p.strip().lower() for p in cleanup.split(",") if p.strip()}
        if policies != {"delete"}:
            problems.append(
                f"remote storage needs cleanup.policy=delete, got {cleanup!r} (compacted topics cannot be tiered)"
            )
        retention_ms = (
            _long(configs.get("retention.ms")) if "retention.ms" in configs else _broker_retention_ms(broker)
        )
        local_ms = _long(configs.get("local.retention.ms", broker.get("log.local.retention.ms", "-2")))
        _check_local(problems, "local.retention.ms", local_ms, "retention.ms", retention_ms)
        retention_bytes = _long(configs.get("retention.bytes", broker.get("log.retention.bytes", "-1")))
        local_bytes = _long(
            configs.get("local.retention.bytes", broker.get("log.local.retention.bytes", "-2"))
        )
        _check_local(problems, "local.retention.bytes", local_bytes, "retention.bytes", retention_bytes)

    def _legal_hold(self, topic: str, cluster_state: ClusterState) -> str | None:
        """Why the topic is under legal hold (the key that says so), or None."""
        config = self._config()
        state = cluster_state.topic_state(topic)
        configs = state.configs if state is not None else {}
        key = TOPIC_PREFIX + "legal.hold"
        if key in configs:
            held = _flag(configs[key])
            if held is None:  # unreadable: keep the data
                return f"{key}={configs[key]!r} is not true or false"
            return f"{key}=true" if held else None
        return "rsm.config.legal.hold=true, the broker's default" if config.get("legal.hold") else None


def _long(value: str | None) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _broker_retention_ms(broker: Mapping[str, str]) -> int | None:
    """Kafka's topic default retention.ms from the broker's log.retention.{ms,minutes,hours}."""
    if "log.retention.ms" in broker:
        return _long(broker["log.retention.ms"])
    if "log.retention.minutes" in broker:
        minutes = _long(broker["log.retention.minutes"])
        return None if minutes is None else minutes * 60_000
    hours = _long(broker.get("log.retention.hours", "168"))
    return None if hours is None else hours * HOUR_MS


def _check_local(
    problems: list[str], local_key: str, local: int | None, total_key: str, total: int | None
) -> None:
    """Kafka's rule (LogConfig.validateRemoteStorageRetention*): -2 = as total, -1 = unlimited."""
    if local is None or total is None or total == -1 or local == -2:
        return
    if local == -1 or local > total:
        problems.append(
            f"local retention may not exceed total retention: {local_key}={local} but {total_key}={total} "
            f"(set {local_key} to at most {total}, or -2 to keep it equal)"
        )
