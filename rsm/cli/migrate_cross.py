"""`rsm migrate move --from-config SOURCE.properties`: the command line of a move across backends.

Kept apart from `rsm.cli.migrate` (the other commands) because it handles two stores: the source, given by
`--from-config` and only ever read, and the destination, `--config`, the store the brokers will use after
the switch, where the copies, forwards, location record and journal go (`rsm.migrate.cross`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from types import ModuleType
from typing import Any

from rich.console import Console
from rich.markup import escape

from rsm.catalog import TopicCatalog
from rsm.config.keyring import keyring_for
from rsm.config.settings import RsmConfig
from rsm.migrate import cross
from rsm.migrate.context import MigrateError
from rsm.migrate.cross_overlay import apply_overlay, plan_overlay
from rsm.store.layout import Location
from rsm.store.objects import ObjectStore

SOURCE_KEPT = (
    "the source, {source}, is left as it was (nothing in it is changed or deleted): retire it once the "
    "brokers read from the destination"
)


def cross_move(
    args: argparse.Namespace,
    configs: dict[str, str],
    catalog: TopicCatalog,
    out: Console,
    err: Console,
    cli: ModuleType,
) -> int:
    """`move --from-config`; ``cli`` is `rsm.cli.migrate`, which calls this, passed in rather than imported
    (its plan printing, run and report, its one-line error): imports go one way only (tests/test_layout.py)."""
    _Error, load_configs = cli._Error, cli.load_configs  # noqa: N806, SLF001
    path = args.from_config
    if not path.is_file():
        raise _Error(f"--from-config {path}: no such file (the properties of the store the topic is in now)")
    if not os.access(path, os.R_OK):
        raise _Error(f"--from-config {path}: cannot be read")
    source_configs = load_configs(path)
    source_config = RsmConfig(source_configs)
    if cross.store_identity(source_config) == cross.store_identity(catalog.config):
        raise _Error(
            f"--from-config {path} names the same store as --config ({cross.describe_store(source_config)}): "
            "to move within one store, run move without --from-config"
        )
    source_store = ObjectStore.from_config(source_config, create=False)
    source_store.require_bucket(str(source_config.get("bucket")), f"bucket in {path}")
    source = TopicCatalog(source_config, source_store)
    tid = cli._topic_id(source, args)  # noqa: SLF001
    keyring = keyring_for(catalog.config)
    try:
        overlay = plan_overlay(source, catalog, args.topic, tid, keyring)
    except MigrateError as exc:
        raise _Error(str(exc)) from None
    # the topic's settings in the destination: its overlay there, or the source's once copied
    settings = catalog.config.resolve(None, overlay.configs or None)
    destination = Location(args.to_bucket or settings.bucket,
                           settings.prefix if args.to_prefix is None else args.to_prefix)  # fmt: skip
    cli._check_location(destination)  # noqa: SLF001
    catalog.store.require_bucket(destination.bucket, "--to-bucket" if args.to_bucket else None)
    params: dict[str, Any] = {
        "source": list(cross.store_identity(source_config)),
        "source_location": str(source.default),
    }
    plan = cross.plan_cross_move(source, catalog.store, args.topic, tid, args.partition, destination, params)
    missing_keys = sorted(
        {
            i.key_id
            for i in plan.items
            if i.key_id is not None and (keyring is None or i.key_id not in keyring)
        }
    )
    if missing_keys:
        raise _Error(
            f"key id(s) {', '.join(missing_keys)} of the topic's segments are not in the destination's keyring "
            "(encryption.keyring.path in --config): the brokers reading from it need them"
        )
    for bucket in dict.fromkeys(loc.bucket for i in plan.items for loc in cross.forwards_needed(i)):
        if catalog.store.bucket_exists(bucket) is False:
            raise _Error(
                f"bucket {bucket!r}, which Kafka's metadata names for segments of {args.topic!r}, does not exist "
                f"in the destination store: create it there (it will hold only forwards to {destination})"
            )
    spec = cli._spec(args, configs, plan, {})  # noqa: SLF001
    spec = dataclasses.replace(spec, source_configs=tuple(sorted(source_configs.items())))
    kept = SOURCE_KEPT.format(source=cross.describe_store(source_config))
    if args.dry_run:
        cli._print_plan(plan, args, out, spec.job)  # noqa: SLF001
        if not args.json:
            out.print(f"from {escape(cross.describe_store(source_config))} to "
                      f"{escape(cross.describe_store(catalog.config))}; {escape(kept)}")  # fmt: skip
        if said := overlay.describe(args.topic, dry_run=True):
            (err if args.json else out).print(escape(said))
        return 0
    apply_overlay(catalog, args.topic, tid, overlay)  # before any segment: brokers switched early tier right
    if said := overlay.describe(args.topic):
        (err if args.json else out).print(escape(said))
    report, elapsed = cli._execute(args, spec, plan, err, "move across stores", store=catalog.store)  # noqa: SLF001
    cli._print_report(report, args, out, elapsed)  # noqa: SLF001
    if not args.json:
        out.print(escape(kept))
    else:
        err.print(escape(kept))
    return int(cli.EXIT_PROBLEMS) if report.failed else 0
