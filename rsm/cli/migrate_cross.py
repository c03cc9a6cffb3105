"""`rsm migrate move --from-config SOURCE.properties`: the command line of a move across backends.

Kept apart from `rsm.cli.migrate` (the other commands) because it handles two stores: the source, given by
`--from-config` and only ever read (and, with `--prune`, rid of the segments moved out of it), and the
destination, `--config`, the store the brokers will use after the switch, where the copies and forwards go
(its data buckets) and the overlays, location record and journal (its catalog home: `rsm.store.home`)
(`rsm.migrate.cross`, `rsm.migrate.cross_overlay`, `rsm.migrate.cross_prune`).

Everything that can refuse the move does so before anything is written, in one line: a source file that
is missing, the same store twice, a destination bucket that does not exist (the data `bucket` and
`catalog.bucket` are checked by `rsm.cli.migrate` for every command; here the bucket an overlay or a
pending overlay names, `--to-bucket`, and the buckets Kafka's metadata names, where forwards go), a key id
the destination's keyring lacks, and, with `--prune`, one store reached through both configurations.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.console import Console
from rich.markup import escape

from rsm.catalog import TopicCatalog
from rsm.config.keyring import keyring_for
from rsm.config.settings import RsmConfig
from rsm.migrate import cross
from rsm.migrate.context import MigrateError
from rsm.migrate.cross_overlay import apply_overlay, apply_pending, plan_overlay, plan_pending
from rsm.migrate.cross_prune import PRUNED, check_distinct, describe_prune, prune_locations
from rsm.store.layout import Location
from rsm.store.objects import ObjectStore

SOURCE_KEPT = (
    "the source, {source}, is left as it was (nothing in it is changed or deleted): once every broker reads "
    "from the destination, run the same command with --prune, or retire the source"
)
SOURCE_PRUNED = (
    "{count} segment(s) pruned from the source, {source}, each after its copy was verified; its overlays, "
    "pending overlays and location record are left as they were"
)
PRUNE_WARNING = (
    "--prune deletes the moved segments from {source}: brokers still configured for it cannot fetch them "
    "afterwards (those on the destination follow its forwards)"
)


def add_arguments(move: argparse.ArgumentParser) -> None:
    """The move's options for a move across stores."""
    move.add_argument("--from-config", type=Path, metavar="SOURCE.properties",
                      help="move from another store (backend) to the one --config names: the properties of "
                      "the store the topic is in now; nothing in it is changed unless --prune")  # fmt: skip
    move.add_argument("--prune", action="store_true",
                      help="with --from-config, once every broker reads from --config's store: delete the "
                      "moved segments from the source, each once its copy is verified byte for byte")  # fmt: skip


def cross_move(
    args: argparse.Namespace,
    configs: dict[str, str],
    catalog: TopicCatalog,
    out: Console,
    err: Console,
    cli: ModuleType,
) -> int:
    """`move --from-config`; ``cli`` is `rsm.cli.migrate`, which calls this, passed in rather than imported
    (its plan printing, run and report, its one-line error): imports go one way only (tests/tools/test_layout.py)."""
    _Error = cli._Error  # noqa: N806, SLF001
    source_configs, source_config, source_store, source = _open_source(args.from_config, catalog, cli)
    tid = cli._topic_id(source, args)  # noqa: SLF001
    keyring = keyring_for(catalog.config)
    prune = bool(getattr(args, "prune", False))
    try:
        overlay = plan_overlay(source, catalog, args.topic, tid, keyring)
        pending = plan_pending(source, catalog, args.topic, keyring)
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
    plan = cross.plan_cross_move(
        source, catalog.store, args.topic, tid, args.partition, destination, params, prune=prune
    )
    _refuse_unreadable_plan(plan, keyring, catalog, args.topic, destination, _Error)
    # a separate job from the move without it: its finished items are not pruned ones
    spec = cli._spec(args, configs, plan, {"prune": True} if prune else {})  # noqa: SLF001
    spec = dataclasses.replace(spec, source_configs=tuple(sorted(source_configs.items())))
    source_name = cross.describe_store(source_config)
    kept = SOURCE_KEPT.format(source=source_name)
    said = [d for c in (overlay, pending) if (d := c.describe(args.topic, dry_run=args.dry_run))]
    if args.dry_run:
        _show_dry_run(args, cli, plan, spec.job, source_store, source_name, catalog, out, prune=prune)
        for line in said:
            (err if args.json else out).print(escape(line))
        return 0
    if prune:  # one store behind both configurations: refused before anything is written (or deleted)
        buckets = {loc.bucket: loc for i in plan.items for loc in prune_locations(i)}
        for location in buckets.values():
            try:
                check_distinct(catalog.store, source_store, location, spec.job)
            except MigrateError as exc:
                raise _Error(str(exc)) from None
        err.print(escape(PRUNE_WARNING.format(source=source_name)))
    # before any segment: brokers switched early tier the topic, and a successor of its name, right
    apply_overlay(catalog, args.topic, tid, overlay)
    apply_pending(catalog, args.topic, pending)
    for line in said:
        (err if args.json else out).print(escape(line))
    report, elapsed = cli._execute(args, spec, plan, err, "move across stores", store=catalog.store)  # noqa: SLF001
    cli._print_report(report, args, out, elapsed)  # noqa: SLF001
    pruned = sum(r.message == PRUNED for r in report.results)
    closing = SOURCE_PRUNED.format(count=pruned, source=source_name) if prune else kept
    (err if args.json else out).print(escape(closing))
    return int(cli.EXIT_PROBLEMS) if report.failed else 0


def _open_source(
    path: Path | None, catalog: TopicCatalog, cli: ModuleType
) -> tuple[dict[str, str], RsmConfig, ObjectStore, TopicCatalog]:
    """The source store `--from-config` names, read-only, after every refusal of it (a missing or unreadable
    file, the destination's own store, a missing bucket): its configs, config, store and catalog."""
    _Error = cli._Error  # noqa: N806, SLF001
    if path is None:  # --prune alone
        raise _Error(
            "--prune is for a move across stores (with --from-config): a move within one store always deletes "
            "its source once the copy is verified"
        )
    if not path.is_file():
        raise _Error(f"--from-config {path}: no such file (the properties of the store the topic is in now)")
    if not os.access(path, os.R_OK):
        raise _Error(f"--from-config {path}: cannot be read")
    source_configs = cli.load_configs(path)
    source_config = RsmConfig(source_configs)
    if cross.store_identity(source_config) == cross.store_identity(catalog.config):
        raise _Error(
            f"--from-config {path} names the same store as --config ({cross.describe_store(source_config)}): "
            "to move within one store, run move without --from-config"
        )
    source_store = ObjectStore.from_config(source_config, create=False)
    source_store.require_bucket(str(source_config.get("bucket")), f"bucket in {path}")
    if source_config.catalog_bucket != source_config.get("bucket"):  # where its overlays are
        source_store.require_bucket(source_config.catalog_bucket, f"catalog.bucket in {path}")
    return source_configs, source_config, source_store, TopicCatalog(source_config, source_store)


def _refuse_unreadable_plan(
    plan: Any, keyring: Any, catalog: TopicCatalog, topic: str, destination: Location, error: type[Exception]
) -> None:
    """Refuses a plan whose copies the destination's brokers could not read: a key id its keyring lacks, a
    bucket Kafka's metadata names (where forwards go) that the destination store does not have."""
    missing_keys = sorted(
        {
            i.key_id
            for i in plan.items
            if i.key_id is not None and (keyring is None or i.key_id not in keyring)
        }
    )
    if missing_keys:
        raise error(
            f"key id(s) {', '.join(missing_keys)} of the topic's segments are not in the destination's keyring "
            "(encryption.keyring.path in --config): the brokers reading from it need them"
        )
    for bucket in dict.fromkeys(loc.bucket for i in plan.items for loc in cross.forwards_needed(i)):
        if catalog.store.bucket_exists(bucket) is False:
            raise error(
                f"bucket {bucket!r}, which Kafka's metadata names for segments of {topic!r}, does not exist "
                f"in the destination store ({catalog.store.backend.value} at {catalog.store.where}): create it "
                f"there (it will hold only forwards to {destination})"
            )


def _show_dry_run(
    args: argparse.Namespace,
    cli: ModuleType,
    plan: Any,
    job: str,
    source_store: ObjectStore,
    source_name: str,
    catalog: TopicCatalog,
    out: Console,
    *,
    prune: bool,
) -> None:
    """What `--dry-run` prints: the plan (its JSON document, with what `--prune` would delete), and where
    it goes from and to."""
    doomed = describe_prune(source_store, plan.items) if prune else []
    if args.json and prune:  # the plan's document, and what would be deleted
        found = {"from": source_name, "segments": len(plan.items), "objects": doomed}
        out.print_json(json.dumps({**plan.to_json(), "job": job, "dry_run": True, "prune": found}))
    else:
        cli._print_plan(plan, args, out, job)  # noqa: SLF001
    if args.json:
        return
    kept = SOURCE_KEPT.format(source=source_name)
    out.print(f"from {escape(source_name)} to {escape(cross.describe_store(catalog.config))}; "
              + escape(PRUNE_WARNING.format(source=source_name) if prune else kept))  # fmt: skip
    if prune:
        out.print(f"with --prune, each segment's copy verified byte for byte, {len(doomed)} object(s) "
                  f"would be deleted from the source:")  # fmt: skip
        for line in doomed[:20]:
            out.print(f"[dim]  {escape(line)}")
        if len(doomed) > 20:
            out.print(f"[dim]  ... and {len(doomed) - 20} more")
