"""``rsm topic-config``: per-topic ``unchecked.*`` settings for brokers that refuse them as topic configs.

Kafka 4.4 rejects unknown topic configs, so a topic's ``unchecked.rsm.bucket``, ``.prefix``,
``.encryption.enabled``, ``.encryption.key.id``, ``.compression.enabled``, ``.chunk.size``,
``.record.validation.on.violation`` and ``unchecked.record.validation.policy`` are kept in an overlay in
the store (keyed by topic id) that every broker's RSM reads within ``topic.overlay.cache.ms``.
``--config`` names the broker's server.properties: its ``rsm.config.*`` keys say where the store is and
give the broker defaults that ``describe`` shows beside the overlay. ``set --dry-run`` checks the keys and
prints the effective configuration it would produce, writing nothing (like KIP-525's validateOnly).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rsm.bridge.server import load_properties, split_rsm_configs
from rsm.cli.console import err_console, out_console
from rsm.cli.options import config_and_json
from rsm.config import ConfigEntry, ConfigSource, RsmConfig
from rsm.errors import ConfigException
from rsm.keyring import Keyring
from rsm.metadata import to_uuid, uuid_to_base64
from rsm.overlay import TopicOverlay, TopicOverlayStore, known_keys, validate_overlay_configs
from rsm.redact import redact_text, shown
from rsm.storage import ObjectStore

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
    topic.add_argument("--bootstrap-server", help="broker to look the topic id up from")

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
    p = actions.add_parser("list", help="every topic overlay in the store")
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
        config, configs = _broker_config(args.config)
        store = ObjectStore.from_config(config)
        overlays = TopicOverlayStore(store, str(config.get("bucket")), str(config.get("prefix")))
        if args.action == "list":
            return _list(overlays, args, out)
        topic_id = _topic_id(args)
        current = overlays.read(args.topic, topic_id)
        current_configs = dict(current.configs) if current else {}
        if args.action == "describe":
            return _show(args, out, config, overlays, topic_id, current_configs, None, written=False)
        if args.action == "set":
            updates = _pairs(args.pairs)
            validate_overlay_configs(updates)
            proposed = {**current_configs, **updates}
        else:
            for key in args.keys:
                if key not in known_keys():
                    raise ConfigException(f"unknown topic config {key!r}; known: {', '.join(known_keys())}")
            proposed = {k: v for k, v in current_configs.items() if k not in args.keys}
        _check_effective(config, configs, proposed, args.topic)
        if not args.dry_run:
            overlays.write(args.topic, topic_id, proposed)
        return _show(
            args, out, config, overlays, topic_id, proposed, current_configs, written=not args.dry_run
        )
    except (_Error, ConfigException, ValueError, OSError) as exc:
        err.print(f"rsm topic-config: {escape(redact_text(str(exc)))}")
        return 1


def _broker_config(path: Path) -> tuple[RsmConfig, dict[str, str]]:
    """The broker's rsm.config.* keys (prefix stripped, bridge.* left out), parsed as the RSM does."""
    props = load_properties(path)
    configs, _bridge = split_rsm_configs(props)
    try:
        return RsmConfig(configs), configs
    except ConfigException as exc:
        raise _Error(f"{path}: {exc}") from None


def _topic_id(args: argparse.Namespace) -> uuid.UUID:
    if args.topic_id:
        try:
            return to_uuid(args.topic_id)
        except ValueError as exc:
            raise _Error(f"--topic-id: {exc}") from None
    if not args.bootstrap_server:
        raise _Error("give --topic-id, or --bootstrap-server to look it up")
    return lookup_topic_id(args.bootstrap_server, args.topic)


def lookup_topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    """The topic's id from a broker's metadata, through kafka-python (the ``kafka`` extra).

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
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15_000)
        try:
            (description,) = admin.describe_topics([topic])
        finally:
            admin.close()
    except KafkaError as exc:
        raise _Error(f"cannot look topic {topic!r} up on {bootstrap}: {type(exc).__name__}: {exc}") from None
    finally:
        kafka_log.setLevel(level)
    tid = description.get("topic_id")
    if description.get("error_code") or tid is None:
        raise _Error(f"topic {topic!r} not found on {bootstrap} (error {description.get('error_code')})")
    return to_uuid(tid)


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
    topic_id: uuid.UUID,
    overlay: Mapping[str, str],
    before: Mapping[str, str] | None,
    *,
    written: bool,
) -> int:
    entries = config.describe(None, overlay)
    where = overlays.describe(args.topic, topic_id)
    dry_run = bool(getattr(args, "dry_run", False))
    if args.json:
        doc: dict[str, Any] = {
            "topic": args.topic,
            "topic_id": uuid_to_base64(topic_id),
            "action": args.action,
            "dry_run": dry_run,
            "written": written,
            "overlay": {"location": where, "configs": dict(sorted(overlay.items()))},
            "configs": [_entry_json(e) for e in entries],
        }
        if before is not None:
            doc["previous_overlay"] = dict(sorted(before.items()))
        out.out(json.dumps(doc, indent=2), highlight=False)
        return 0
    title = f"{args.topic} ({uuid_to_base64(topic_id)})"
    if dry_run:
        title += ": dry run, nothing written"
    elif written:
        title += ": overlay written" if overlay else ": overlay removed"
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
    out.print(f"overlay: {escape(where)}" + ("" if overlay else " (none)"))
    if before is not None:
        out.print("* = changed by this command")
    return 0


def _list(overlays: TopicOverlayStore, args: argparse.Namespace, out: Console) -> int:
    found: list[TopicOverlay] = overlays.list()
    if args.json:
        out.out(
            json.dumps(
                [
                    {
                        "topic": o.topic,
                        "topic_id": o.topic_id_base64,
                        "configs": dict(o.configs),
                        "updated_ms": o.updated_ms,
                        "location": overlays.describe(o.topic, o.topic_id),
                    }
                    for o in found
                ],
                indent=2,
            ),
            highlight=False,
        )
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
    out.print(table)
    if not found:
        out.print("no topic overlays")
    return 0


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - convenience for `python -m`
    parser = argparse.ArgumentParser(prog="rsm")
    register(parser.add_subparsers())
    args = parser.parse_args(["topic-config", *(argv or sys.argv[1:])])
    return int(args.func(args))
