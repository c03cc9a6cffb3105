"""The source's options: Spark's Kafka source options with their meaning and defaults, plus the store.

Switching `format("kafka")` to `format("kafka-tiered")` must be a one-word change, so every option of
Spark's Kafka source is accepted: the ones that mean something without a broker are honoured, the
consumer tuning ones (poll timeouts, group id prefixes) are accepted and ignored. The `kafka.*` options
mean something only with `kafka.bootstrap.servers`: the source then also reads the topic's live tail from
the brokers (`spark_reader.broker`) and hands them, prefix stripped, to its Kafka clients as Spark's Kafka
source does (security settings included); without it they are ignored and only the store is read.
Anything else is a mistake and is refused naming the option.

The store is named by the keys `RemoteStorageManager.configure` takes (`storage.backend`, `bucket`,
`storage.s3.endpoint.url`, `encryption.keyring.path`, ...; bare or with the broker's `rsm.config.`
prefix), or by one properties file (`rsm.properties`): an `rsm.properties` of bare keys, or the broker's
`server.properties` whose `rsm.config.*` keys are used. Options win over the file. Spark passes option
keys lowercased; every key here is matched case-insensitively. Values are never logged (credentials).
"""

from __future__ import annotations

import difflib
import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from rsm.api.errors import ConfigException
from rsm.config.settings import BROKER_PREFIX, SETTINGS_BY_NAME, RsmConfig
from spark_reader.errors import ReaderError


class OptionError(ReaderError, ValueError):
    """A bad option: one line naming it."""


class IsolationLevel(enum.Enum):
    READ_UNCOMMITTED = "read_uncommitted"
    READ_COMMITTED = "read_committed"


class Violations(enum.Enum):
    """What to do with records a validation policy flagged when the segment was tiered."""

    INCLUDE = "include"
    DROP = "drop"
    FLAG = "flag"


# Spark's Kafka source options that mean nothing without a broker: accepted, ignored
_IGNORED_SPELLED = (
    "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "groupIdPrefix",
    "maxTriggerDelay",
    "minOffsetsPerTrigger",
)
_SPARK_SPELLED = (
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsetsByTimestampStrategy",
    "failOnDataLoss",
    "includeHeaders",
    "minPartitions",
    "maxRecordsPerPartition",
    "maxOffsetsPerTrigger",
)
_OWN_SPELLED = ("topicId", "violations", "rsm.properties", "path")
ISOLATION = "kafka.isolation.level"
# Spark passes option names lowercased: these are the lowercased names, SPELLING gives them back as
# documented (a message says `startingOffsets`, not `startingoffsets`)
IGNORED_SPARK_OPTIONS = frozenset(o.lower() for o in _IGNORED_SPELLED)
SPARK_OPTIONS = frozenset(o.lower() for o in _SPARK_SPELLED)
OWN_OPTIONS = frozenset(o.lower() for o in _OWN_SPELLED)
SPELLING = {
    o.lower(): o for o in (*_SPARK_SPELLED, *_IGNORED_SPELLED, *_OWN_SPELLED, "kafka.isolation.level")
}
# the store's keys (RsmConfig's settings; the broker's bridge.* keys mean nothing to the reader)
STORE_KEYS = tuple(SETTINGS_BY_NAME)
# where a store key must look like one: a dotted name that is not Spark's
_STORE_KEY_STARTS = ("storage.", "encryption.", "compression.", "cache.", "fetch.", "policy.", "metrics.")


def spelled(name: str) -> str:
    """An option's name as documented (`startingoffsets` -> `startingOffsets`); others as given."""
    return SPELLING.get(name.lower(), name)


def unknown_option(key: str) -> str:
    """One line refusing an unknown option: the closest known option or store key when one is close."""
    name = key[len(BROKER_PREFIX) :] if key.startswith(BROKER_PREFIX) else key
    store_like = key.startswith(BROKER_PREFIX) or name.startswith(_STORE_KEY_STARTS)
    options = {o.lower(): o for o in (*_SPARK_SPELLED, *_OWN_SPELLED, "kafka.isolation.level")}
    candidates = {} if store_like else dict(options)
    candidates.update({k: k for k in STORE_KEYS})
    match = difflib.get_close_matches(name.lower(), list(candidates), n=1, cutoff=0.75)
    what = "store key" if store_like or (match and match[0] in SETTINGS_BY_NAME) else "option"
    if match:
        return f"unknown {what} {key!r} for format kafka-tiered: did you mean {candidates[match[0]]}?"
    return (
        f"unknown {what} {key!r} for format kafka-tiered (Spark's Kafka source options, kafka.* consumer "
        "options, topicId, violations, rsm.properties and the RSM's store keys are accepted)"
    )


@dataclass(frozen=True)
class SourceOptions:
    """Parsed options (strings from Spark turned into values, checked once on the driver)."""

    subscribe: tuple[str, ...] | None = None
    subscribe_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    starting_offsets: str | None = None
    ending_offsets: str | None = None
    starting_offsets_by_timestamp: str | None = None
    ending_offsets_by_timestamp: str | None = None
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    starting_by_timestamp_strategy: str = "error"
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    topic_id: str | None = None
    violations: Violations = Violations.INCLUDE
    rsm_configs: dict[str, str] = field(default_factory=dict, repr=False)  # may hold credentials
    # the `kafka.*` options but the isolation level, prefix stripped: Kafka client settings (may hold
    # credentials, e.g. sasl.jaas.config); empty unless kafka.bootstrap.servers is given
    kafka_params: dict[str, str] = field(default_factory=dict, repr=False)
    poll_timeout_ms: int | None = None  # kafkaConsumer.pollTimeoutMs: how long a tail task waits for data

    @property
    def bootstrap_servers(self) -> str | None:
        """The brokers to read the live tail from (None: the store only, as without a broker)."""
        return self.kafka_params.get("bootstrap.servers") or None

    def rsm_config(self) -> RsmConfig:
        try:
            return RsmConfig(self.rsm_configs)
        except ConfigException as exc:
            raise OptionError(f"store options: {exc}") from None


def _bool(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "false"):
        return v == "true"
    raise OptionError(f"option {name} must be true or false, got {value!r}")


def _positive_int(name: str, value: str) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise OptionError(f"option {name} must be a positive integer, got {value!r}") from None
    if n <= 0:
        raise OptionError(f"option {name} must be a positive integer, got {value!r}")
    return n


def _timestamp(name: str, value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise OptionError(f"option {name} must be a timestamp in milliseconds, got {value!r}") from None


def _assign(value: str) -> dict[str, tuple[int, ...]]:
    try:
        doc = json.loads(value)
        if not isinstance(doc, dict) or not doc:
            raise ValueError("not an object")
        return {str(t): tuple(sorted(int(p) for p in ps)) for t, ps in doc.items()}
    except (ValueError, TypeError) as exc:
        raise OptionError(
            f'option assign must be JSON like {{"topicA":[0,1],"topicB":[2,4]}}, got {value!r} ({exc})'
        ) from None


def _load_properties(path: str) -> dict[str, str]:
    # the one reader of a server.properties' rsm.config.* keys or an rsm.properties' bare keys
    from rsm.config.properties import rsm_configs_from_file

    try:
        return rsm_configs_from_file(Path(path))
    except ValueError as exc:
        raise OptionError(f"option rsm.properties: {exc}") from None


def parse_options(raw: Mapping[str, str]) -> SourceOptions:
    """Check every option and parse the ones this source uses; OptionError names the first bad one."""
    opts = {str(k).lower(): str(v) for k, v in raw.items()}
    rsm = _store_configs(opts)
    subscribe = _subscribe(opts)
    isolation_level, violations, strategy = _choices(opts)
    parsed = SourceOptions(
        subscribe=subscribe,
        subscribe_pattern=opts.get("subscribepattern"),
        assign=_assign(opts["assign"]) if "assign" in opts else None,
        starting_offsets=opts.get("startingoffsets"),
        ending_offsets=opts.get("endingoffsets"),
        starting_offsets_by_timestamp=opts.get("startingoffsetsbytimestamp"),
        ending_offsets_by_timestamp=opts.get("endingoffsetsbytimestamp"),
        starting_timestamp=_timestamp("startingTimestamp", opts["startingtimestamp"])
        if "startingtimestamp" in opts
        else None,
        ending_timestamp=_timestamp("endingTimestamp", opts["endingtimestamp"])
        if "endingtimestamp" in opts
        else None,
        starting_by_timestamp_strategy=strategy,
        fail_on_data_loss=_bool("failOnDataLoss", opts.get("failondataloss", "true")),
        include_headers=_bool("includeHeaders", opts.get("includeheaders", "false")),
        min_partitions=_positive_int("minPartitions", opts["minpartitions"])
        if "minpartitions" in opts
        else None,
        max_records_per_partition=_positive_int("maxRecordsPerPartition", opts["maxrecordsperpartition"])
        if "maxrecordsperpartition" in opts
        else None,
        max_offsets_per_trigger=_positive_int("maxOffsetsPerTrigger", opts["maxoffsetspertrigger"])
        if "maxoffsetspertrigger" in opts
        else None,
        isolation_level=isolation_level,
        topic_id=opts.get("topicid"),
        violations=violations,
        rsm_configs=rsm,
    )
    if opts.get("kafka.bootstrap.servers", "").strip():
        parsed = replace(
            parsed,
            kafka_params={
                k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.") and k != ISOLATION
            },
            poll_timeout_ms=_positive_int("kafkaConsumer.pollTimeoutMs", opts["kafkaconsumer.polltimeoutms"])
            if "kafkaconsumer.polltimeoutms" in opts
            else None,
        )
    parsed.rsm_config()  # refuse a bad store option on the driver, before any task
    return parsed


def _store_configs(opts: Mapping[str, str]) -> dict[str, str]:
    """The RSM keys the options give (``rsm.properties``'s file, then store keys and ``rsm.config.*``
    ones), after refusing every option this source does not know; OptionError when they name no store."""
    rsm: dict[str, str] = {}
    if "rsm.properties" in opts:
        rsm.update(_load_properties(opts["rsm.properties"]))
    for key, value in opts.items():
        name = key[len(BROKER_PREFIX) :] if key.startswith(BROKER_PREFIX) else key
        if name in SETTINGS_BY_NAME or name.startswith("bridge.") and key.startswith(BROKER_PREFIX):
            rsm[name] = value
        elif (
            key.startswith("kafka.")
            and key != ISOLATION
            and difflib.get_close_matches(key, [ISOLATION], 1, 0.85)
        ):
            # the one kafka.* option that means something here: a typo must not read uncommitted data
            raise OptionError(f"unknown option {key!r} for format kafka-tiered: did you mean {ISOLATION}?")
        elif key.startswith("kafka.") or key in IGNORED_SPARK_OPTIONS or key in SPARK_OPTIONS:
            continue
        elif key not in OWN_OPTIONS:
            raise OptionError(unknown_option(key))
    rsm = {k: v for k, v in rsm.items() if not k.startswith("bridge.")}
    if not rsm:
        raise OptionError(
            "no store given: set the option rsm.properties (the broker's server.properties or an "
            "rsm.properties file) or the store keys (storage.backend with storage.file.root, or "
            "storage.backend=s3 with bucket and storage.s3.*)"
        )
    unknown = sorted(k for k in rsm if k not in SETTINGS_BY_NAME)
    if unknown and len(unknown) == len(rsm):
        raise OptionError(
            f"option rsm.properties: {opts['rsm.properties']} names no store: it has neither rsm.config.* keys "
            "(a broker's server.properties) nor RSM keys such as storage.backend (an rsm.properties)"
        )
    if unknown:  # only a properties file can bring one: an option with an unknown name is refused above
        raise OptionError(f"in rsm.properties {opts['rsm.properties']}: " + unknown_option(unknown[0]))
    return rsm


def _subscribe(opts: Mapping[str, str]) -> tuple[str, ...] | None:
    """The topics of ``subscribe`` (None with ``subscribePattern`` or ``assign``), exactly one of the three
    given."""
    selectors = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(selectors) != 1:
        raise OptionError(
            "exactly one of the options subscribe, subscribePattern, assign must be given"
            + (f" (got {', '.join(selectors)})" if selectors else "")
        )
    subscribe = None
    if "subscribe" in opts:
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise OptionError("option subscribe names no topic")
    return subscribe


def _choices(opts: Mapping[str, str]) -> tuple[IsolationLevel, Violations, str]:
    """The options that pick one of a few values: the isolation level, what to do with violations, the
    strategy for a starting timestamp past a partition's records."""
    isolation = opts.get("kafka.isolation.level", "read_uncommitted").strip().lower()
    try:
        isolation_level = IsolationLevel(isolation)
    except ValueError:
        raise OptionError(
            f"option kafka.isolation.level must be read_uncommitted or read_committed, got {isolation!r}"
        ) from None
    try:
        violations = Violations(opts.get("violations", "include").strip().lower())
    except ValueError:
        raise OptionError(
            f"option violations must be include, drop or flag, got {opts['violations']!r}"
        ) from None
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(
            f"option startingOffsetsByTimestampStrategy must be error or latest, got {strategy!r}"
        )
    return isolation_level, violations, strategy
