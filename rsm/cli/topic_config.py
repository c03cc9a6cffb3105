"""``rsm topic-config``: per-topic ``unchecked.*`` settings for brokers that refuse them as topic configs.

Kafka 4.4 rejects unknown topic configs, so a topic's ``unchecked.rsm.bucket``, ``.prefix``,
``.encryption.enabled``, ``.encryption.key.id``, ``.compression.enabled``, ``.chunk.size``,
``.record.validation.on.violation`` and ``unchecked.record.validation.policy`` are kept in an overlay in
the store (keyed by topic id) that every broker's RSM reads within ``topic.overlay.cache.ms``.
``--config`` names the broker's server.properties: its ``rsm.config.*`` keys say where the store is and
give the broker defaults that ``describe`` shows beside the overlay. Every change is checked by the broker's
topic management policy (``rsm.config.policy.*``, ``rsm.policy``) and refused, writing nothing, when it
breaks it. ``set --dry-run`` checks the keys and the policy and prints the effective configuration it would
produce with each value's source (secrets masked) and any violation, writing nothing (KIP-525's
validateOnly). ``--pending`` sets the overlay of a topic that does not exist yet: the topic created under
that name adopts it before its first segment is tiered (``rsm.policy.pending``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rsm.api.errors import ConfigException
from rsm.api.metadata import to_uuid, uuid_to_base64
from rsm.cli.console import err_console, out_console
from rsm.cli.options import config_and_json
from rsm.config.keyring import Keyring
from rsm.config.properties import RSM_CONFIG_PREFIX, check_known_keys, load_properties, split_rsm_configs
from rsm.config.redact import redact_text, shown
from rsm.config.settings import ConfigEntry, ConfigSource, RsmConfig, unknown_topic_key
from rsm.policy.api import (
    AlterTopicRequest,
    CreateTopicRequest,
    PolicyViolationException,
    RequestedTopicState,
    StaticClusterState,
    TopicManagementPolicy,
    TopicState,
    broker_configs_for_policy,
)
from rsm.policy.enforce import topic_configs
from rsm.policy.loading import load_topic_policy
from rsm.policy.pending import PendingOverlayStore
from rsm.store.home import CatalogHome, catalog_home
from rsm.store.objects import ObjectStore
from rsm.store.overlays import TopicOverlayStore
from rsm.stored.overlay import TopicOverlay, known_keys, validate_overlay_configs
from rsm.stored.pending_overlay import PendingOverlay

log = logging.getLogger(__name__)

ACTIONS = ("describe", "set", "unset", "list")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``topic-config`` subcommand and its actions."""
    parser = subparsers.add_parser(
        "topic-config",
        help="describe, set or unset a topic's unchecked.rsm.* settings (overlay in the store)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    config_and_json(parser, argparse.SUPPRESS)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    topic = argparse.ArgumentParser(add_help=False)
    topic.add_argument("--topic", required=True, help="topic name")
    topic.add_argument(
        "--topic-id",
        help="topic id (Kafka base64 or UUID); looked up with --bootstrap-server when omitted",
    )
    topic.add_argument(
        "--bootstrap-server", help="broker to look the topic id (and its configs, for the policy) up from"
    )
    topic.add_argument(
        "--pending",
        action="store_true",
        help="the overlay of a topic not created yet: adopted by the topic created under this name",
    )

    p = actions.add_parser("describe", parents=[topic], help="every effective setting with its source")
    config_and_json(p, argparse.SUPPRESS)
    p = actions.add_parser("set", parents=[topic], help="set overlay keys (KEY=VALUE ...)")
    p.add_argument("pairs", nargs="+", metavar="KEY=VALUE", help=f"keys: {', '.join(known_keys())}")
    p.add_argument("--dry-run", action="store_true", help="validate and show the result; write nothing")
    config_and_json(p, argparse.SUPPRESS)
    p = actions.add_parser("unset", parents=[topic], help="remove overlay keys")
    p.add_argument("keys", nargs="+", metavar="KEY")
    p.add_argument("--dry-run", action="store_true", help="validate and show the result; write nothing")
    config_and_json(p, argparse.SUPPRESS)
    p = actions.add_parser("list", help="every topic overlay (and pending overlay) in the store")
    config_and_json(p, argparse.SUPPRESS)
    parser.set_defaults(func=run, config=None, json=False, action=None)


class _Error(Exception):
    """A user error: printed as one line, exit status 1."""


def run(args: argparse.Namespace) -> int:
    out, err = out_console(), err_console()  # tables fit a terminal, and are never cut when piped
    if args.action is None:
        err.print("rsm topic-config: choose an action: " + ", ".join(ACTIONS))
        return 2
    if args.config is None:
        err.print("rsm topic-config: --config server.properties is required")
        return 2
    try:
        config, configs, props = _broker_config(args.config)
        # no action makes a bucket: one that does not exist is named first; describe and list only read,
        # so a file store's missing root is refused rather than made (as `rsm store` does)
        store = ObjectStore.from_config(config, create=args.action in ("set", "unset"))
        store.require_bucket(
            config.catalog_bucket, "catalog.bucket" if config.get("catalog.bucket") else None
        )
        home = CatalogHome(store, catalog_home(config), ttl_ms=0)
        home.check()  # overlays are never read from, nor written to, a catalog that was moved away
        overlays = TopicOverlayStore(store, home.bucket, home.prefix)
        pending = PendingOverlayStore(store, home.bucket, home.prefix)
        if args.action == "list":
            return _list(overlays, pending, args, out)
        target = _target(args)
        policy = load_topic_policy(str(config.get("policy.class.name") or "") or None, configs)
        try:
            return _act(args, out, err, config, configs, props, overlays, pending, target, policy)
        finally:
            policy.close()
    except (_Error, ConfigException, ValueError, OSError) as exc:
        err.print(f"rsm topic-config: {escape(redact_text(str(exc)))}")
        return 1


@dataclass(frozen=True)
class _Target:
    """The topic a command is about: an existing topic id, or (``--pending``) a name not created yet."""

    topic: str
    topic_id: uuid.UUID | None  # None: pending
    kafka_configs: Mapping[str, str] | None = None  # the topic's Kafka configs, when a broker was asked

    @property
    def pending(self) -> bool:
        return self.topic_id is None


def _act(
    args: argparse.Namespace,
    out: Console,
    err: Console,
    config: RsmConfig,
    configs: Mapping[str, str],
    props: Mapping[str, str],
    overlays: TopicOverlayStore,
    pending: PendingOverlayStore,
    target: _Target,
    policy: TopicManagementPolicy,
) -> int:
    current = _read(overlays, pending, target)
    current_configs = dict(current.configs) if current else {}
    broker = broker_configs_for_policy(props)
    if args.action == "describe":
        verdict = _verdict(policy, target, current_configs, current_configs, {}, broker)
        return _show(
            args, out, config, overlays, pending, target, current_configs, None, verdict, written=False
        )
    if args.action == "set":
        updates = _pairs(args.pairs)
        validate_overlay_configs(updates)
        if "unchecked.rsm.bucket" in updates:  # no bucket is made: a topic cannot be pointed at a missing one
            overlays.store.require_bucket(updates["unchecked.rsm.bucket"].strip(), "unchecked.rsm.bucket")
        changes: dict[str, str | None] = dict(updates)
        proposed = {**current_configs, **updates}
    else:
        for key in args.keys:
            if key not in known_keys():
                raise ConfigException(unknown_topic_key(key))
        changes = {k: None for k in args.keys}
        proposed = {k: v for k, v in current_configs.items() if k not in args.keys}
    verdict = _verdict(policy, target, current_configs, proposed, changes, broker)
    if verdict is None:  # what the RSM itself needs to copy, whatever the policy (a user's may not check)
        try:
            _check_effective(config, configs, proposed, target.topic)
        except ConfigException as exc:
            verdict = str(exc)
    write = not args.dry_run and verdict is None
    if write:
        if target.pending:
            pending.write(target.topic, proposed)
        else:
            assert target.topic_id is not None
            overlays.write(target.topic, target.topic_id, proposed)
    rc = _show(
        args, out, config, overlays, pending, target, proposed, current_configs, verdict, written=write
    )
    if verdict is not None:
        err.print(f"rsm topic-config: {escape(verdict)}" + ("" if args.dry_run else " (nothing written)"))
        return 1
    return rc


def _read(
    overlays: TopicOverlayStore, pending: PendingOverlayStore, target: _Target
) -> TopicOverlay | PendingOverlay | None:
    if target.topic_id is None:
        return pending.read(target.topic)
    return overlays.read(target.topic, target.topic_id)


def _verdict(
    policy: TopicManagementPolicy,
    target: _Target,
    before: Mapping[str, str],
    after: Mapping[str, str],
    changes: Mapping[str, str | None],
    broker: Mapping[str, str],
) -> str | None:
    """The policy's violation message for the overlay going from ``before`` to ``after``, or None.

    A pending overlay is judged as the creation of its topic; an existing topic's as an alteration, with
    the topic's Kafka configs when a broker was asked (without them ``remote.storage.enable`` is unknown,
    and the overlay is judged as a tiered topic's: it matters only to one).
    """
    kafka = target.kafka_configs or {}
    try:
        if target.topic_id is None:
            state = RequestedTopicState(configs=topic_configs(kafka, after), requested_configs=dict(after))
            policy.validate_create_topic(
                CreateTopicRequest(target.topic, state), StaticClusterState({}, broker)
            )
        else:
            current = TopicState(configs=topic_configs(kafka, before), topic_id=target.topic_id)
            state = RequestedTopicState(
                configs=topic_configs(kafka, after), requested_configs=dict(changes), topic_id=target.topic_id
            )
            policy.validate_alter_topic(
                AlterTopicRequest(target.topic, state), StaticClusterState({target.topic: current}, broker)
            )
    except PolicyViolationException as exc:
        return str(exc)
    return None


def _broker_config(path: Path) -> tuple[RsmConfig, dict[str, str], dict[str, str]]:
    """The broker's rsm.config.* keys (prefix stripped, bridge.* left out), parsed as the RSM does, and all
    of its properties (the policy sees its Kafka ``log.*`` defaults)."""
    props = load_properties(path)
    configs, _bridge = split_rsm_configs(props)
    check_known_keys(configs, path, RSM_CONFIG_PREFIX)  # a misspelled key: one line, the closest setting
    try:
        return RsmConfig(configs), configs, props
    except ConfigException as exc:
        raise _Error(f"{path}: {exc}") from None


def _target(args: argparse.Namespace) -> _Target:
    if args.pending:
        if args.topic_id:
            raise _Error("--pending is for a topic that does not exist yet: it has no --topic-id")
        if args.bootstrap_server:  # refuse to prepare settings for a topic that exists already
            found, _ = lookup_topic(args.bootstrap_server, args.topic)
            if found is not None:
                raise _Error(
                    f"topic {args.topic!r} exists on {args.bootstrap_server} (id {uuid_to_base64(found)}): "
                    "leave out --pending to change its overlay"
                )
        return _Target(args.topic, None)
    if args.topic_id:
        try:
            return _Target(args.topic, to_uuid(args.topic_id))
        except ValueError as exc:
            raise _Error(f"--topic-id: {exc}") from None
    if not args.bootstrap_server:
        raise _Error("give --topic-id, or --bootstrap-server to look it up (or --pending for a new topic)")
    found, kafka_configs = lookup_topic(args.bootstrap_server, args.topic)
    if found is None:
        raise _Error(
            f"topic {args.topic!r} not found on {args.bootstrap_server}; to set it up before creating it, "
            "add --pending (the topic created under that name adopts the settings)"
        )
    return _Target(args.topic, found, kafka_configs)


def lookup_topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    """The topic's id from a broker's metadata (see ``lookup_topic``); one line when it does not exist."""
    found, _ = lookup_topic(bootstrap, topic)
    if found is None:
        raise _Error(f"topic {topic!r} not found on {bootstrap}")
    return found


def lookup_topic(bootstrap: str, topic: str) -> tuple[uuid.UUID | None, dict[str, str] | None]:
    """The topic's id (None when it does not exist) and Kafka configs (None when they cannot be read) from
    a broker, through kafka-python (the ``kafka`` extra).

    A broker that does not answer is one line within seconds: the address is tried first, and the
    client's own retry logging is silenced (``--debug`` shows it).
    """
    try:
        from kafka import KafkaAdminClient  # noqa: PLC0415 - optional dependency
        from kafka.errors import KafkaError  # noqa: PLC0415
    except ImportError:
        raise _Error(
            "--bootstrap-server needs the Kafka client: pip install 'kafka-tiered-rsm[kafka]' "
            "(kafka-python); or give --topic-id"
        ) from None
    _check_reachable(bootstrap)
    kafka_log = logging.getLogger("kafka")
    level = kafka_log.level
    if not log.isEnabledFor(logging.DEBUG):
        kafka_log.setLevel(logging.CRITICAL)
    configs: dict[str, str] | None = None
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15_000)
        try:
            (description,) = admin.describe_topics([topic])
            tid = description.get("topic_id")
            if description.get("error_code") or tid is None:
                return None, None
            configs = _kafka_configs(admin, topic)
        finally:
            admin.close()
    except KafkaError as exc:
        raise _Error(f"cannot look topic {topic!r} up on {bootstrap}: {type(exc).__name__}: {exc}") from None
    finally:
        kafka_log.setLevel(level)
    return to_uuid(tid), configs


def _kafka_configs(admin: Any, topic: str) -> dict[str, str] | None:
    """The topic's effective Kafka configs (defaults included, sensitive ones left out), or None."""
    from kafka.admin import ConfigResource, ConfigResourceType  # noqa: PLC0415
    from kafka.errors import KafkaError  # noqa: PLC0415

    try:
        answer = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all"
        )
        entries = answer.get("topic", {}).get(topic, {})
    except (KafkaError, AttributeError, TypeError, ValueError) as exc:
        log.debug("cannot read the configs of topic %s: %s", topic, exc)
        return None
    return {
        name: str(entry.get("value"))
        for name, entry in entries.items()
        if entry.get("value") is not None and not entry.get("is_sensitive")
    }


def _check_reachable(bootstrap: str, timeout_s: float = 5.0) -> None:
    """Refuse at once when no bootstrap address accepts a connection (the client would retry ~30 s)."""
    import socket  # noqa: PLC0415

    reasons = []
    for address in (a.strip() for a in bootstrap.split(",") if a.strip()):
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit():
            raise _Error(f"--bootstrap-server {address!r}: expected HOST:PORT")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
            return
        except OSError as exc:
            reasons.append(f"{address}: {exc.strerror or type(exc).__name__}")
    raise _Error(f"no broker answers at {'; '.join(reasons)}; start it, or give --topic-id")


def _pairs(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise _Error(f"expected KEY=VALUE, got {shown(pair)}")
        out[key.strip()] = value
    return out


def _check_effective(
    config: RsmConfig, configs: Mapping[str, str], overlay: Mapping[str, str], topic: str
) -> None:
    """Refuse an overlay the RSM could not copy with (encryption without a usable key), as it would."""
    settings = config.resolve(None, overlay)
    if not settings.encryption_enabled:
        return
    keyring_path = configs.get("encryption.keyring.path")
    if not keyring_path:
        raise ConfigException(
            f"topic {topic}: unchecked.rsm.encryption.enabled=true but the broker has no "
            "rsm.config.encryption.keyring.path"
        )
    if not settings.encryption_key_id:
        raise ConfigException(
            f"topic {topic}: encryption is enabled but no key id is set "
            "(unchecked.rsm.encryption.key.id or rsm.config.encryption.key.id)"
        )
    try:
        keyring = Keyring(keyring_path)
    except ConfigException as exc:  # the RSM could not encrypt this topic's segments either
        raise ConfigException(f"topic {topic}: encryption is enabled but {exc}") from None
    if settings.encryption_key_id not in keyring:
        raise ConfigException(
            f"config unchecked.rsm.encryption.key.id: key id {settings.encryption_key_id!r} is not in the "
            f"keyring {keyring_path}"
        )


def _entry_json(e: ConfigEntry) -> dict[str, Any]:
    return {
        "name": e.name,
        "value": e.value,
        "source": e.source.value,
        "key": e.key,
        "sensitive": e.sensitive,
    }


def _show(
    args: argparse.Namespace,
    out: Console,
    config: RsmConfig,
    overlays: TopicOverlayStore,
    pending: PendingOverlayStore,
    target: _Target,
    overlay: Mapping[str, str],
    before: Mapping[str, str] | None,
    violation: str | None,
    *,
    written: bool,
) -> int:
    entries = config.describe(None, overlay)
    if target.topic_id is None:
        where = pending.describe(target.topic)
        shown_id = "pending"
    else:
        where = overlays.describe(target.topic, target.topic_id)
        shown_id = uuid_to_base64(target.topic_id)
    dry_run = bool(getattr(args, "dry_run", False))
    policy_class = str(config.get("policy.class.name") or "built-in")
    if args.json:
        doc: dict[str, Any] = {
            "topic": target.topic,
            "topic_id": None if target.topic_id is None else shown_id,
            "pending": target.pending,
            "action": args.action,
            "dry_run": dry_run,
            "written": written,
            "overlay": {"location": where, "configs": dict(sorted(overlay.items()))},
            "configs": [_entry_json(e) for e in entries],
            "policy": {"class": policy_class, "violation": violation},
        }
        if before is not None:
            doc["previous_overlay"] = dict(sorted(before.items()))
        out.out(json.dumps(doc, indent=2), highlight=False)
        return 0
    title = f"{target.topic} ({shown_id})"
    if dry_run:
        title += ": dry run, nothing written"
    elif violation is not None and before is not None:
        title += ": refused by the topic policy, nothing written"
    elif written:
        noun = "pending overlay" if target.pending else "overlay"
        title += f": {noun} written" if overlay else f": {noun} removed"
    table = Table(title=escape(title), title_justify="left")
    for column in ("setting", "value", "source", "key"):
        table.add_column(column, overflow="fold")
    styles = {
        ConfigSource.TOPIC_UNCHECKED: "bold green",
        ConfigSource.TOPIC: "bold green",
        ConfigSource.TOPIC_OVERLAY: "bold cyan",
        ConfigSource.BROKER: "yellow",
        ConfigSource.DEFAULT: "dim",
    }
    for e in entries:
        changed = before is not None and before.get(e.key) != overlay.get(e.key)
        name = f"* {e.name}" if changed else e.name
        value = "(unset)" if e.value is None else e.value
        table.add_row(escape(name), escape(value), f"[{styles[e.source]}]{e.source.value}[/]", escape(e.key))
    out.print(table)
    noun = "pending overlay (adopted by the topic created under this name)" if target.pending else "overlay"
    out.print(f"{noun}: {escape(where)}" + ("" if overlay else " (none)"))
    if before is not None:
        out.print("* = changed by this command")
    out.print(
        f"topic policy ({escape(policy_class)}): " + ("ok" if violation is None else "violated (below)")
    )
    return 0


def _list(
    overlays: TopicOverlayStore, pending_store: PendingOverlayStore, args: argparse.Namespace, out: Console
) -> int:
    found: list[TopicOverlay] = overlays.list()
    waiting: list[PendingOverlay] = pending_store.list()
    if args.json:
        listed: list[dict[str, Any]] = [
            {
                "topic": o.topic,
                "topic_id": o.topic_id_base64,
                "configs": dict(o.configs),
                "updated_ms": o.updated_ms,
                "location": overlays.describe(o.topic, o.topic_id),
            }
            for o in found
        ]
        listed += [
            {
                "topic": p.topic,
                "topic_id": None,
                "pending": True,
                "expired": p.expired(),
                "configs": dict(p.configs),
                "updated_ms": p.created_ms,
                "expires_ms": p.expires_ms,
                "location": pending_store.describe(p.topic),
            }
            for p in waiting
        ]
        out.out(json.dumps(listed, indent=2), highlight=False)
        return 0
    table = Table(
        title=f"topic overlays in {escape(overlays.store.describe(overlays.bucket, overlays.prefix))}"
    )
    for column in ("topic", "topic id", "configs"):
        table.add_column(column, overflow="fold")
    for o in found:
        table.add_row(
            escape(o.topic),
            o.topic_id_base64,
            escape(", ".join(f"{k}={v}" for k, v in sorted(o.configs.items()))),
        )
    for p in waiting:
        table.add_row(
            escape(p.topic),
            "expired" if p.expired() else "pending",
            escape(", ".join(f"{k}={v}" for k, v in sorted(p.configs.items()))),
        )
    out.print(table)
    if not found and not waiting:
        out.print("no topic overlays")
    return 0


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - convenience for `python -m`
    parser = argparse.ArgumentParser(prog="rsm")
    register(parser.add_subparsers())
    args = parser.parse_args(["topic-config", *(argv or sys.argv[1:])])
    return int(args.func(args))
