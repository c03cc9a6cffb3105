"""`rsm migrate catalog`: the command line of moving the catalog home (`rsm.migrate.catalog_move`)."""

from __future__ import annotations

import argparse
import json

from rich.console import Console

from rsm.config.settings import RsmConfig
from rsm.migrate.catalog_move import move_catalog
from rsm.store.home import catalog_home
from rsm.store.layout import Location
from rsm.store.objects import ObjectStore


def catalog_setting(config: RsmConfig) -> str | None:
    """The setting that names the catalog's bucket, for a missing bucket's line."""
    return "catalog.bucket" if config.get("catalog.bucket") else None


def move_catalog_command(
    args: argparse.Namespace, config: RsmConfig, store: ObjectStore, out: Console
) -> int:
    """`rsm migrate catalog --to-bucket B [--to-prefix P]` (rsm.migrate.catalog_move)."""
    from rsm.api.names import bucket_problem, prefix_problem

    prefix = config.catalog_prefix if args.to_prefix is None else args.to_prefix
    for what, value, problem in (("--to-bucket", args.to_bucket, bucket_problem(args.to_bucket)),
                                 ("--to-prefix", prefix, prefix_problem(prefix))):  # fmt: skip
        if problem:
            raise ValueError(f"{what} {value!r}: it {problem}")
    store.require_bucket(config.catalog_bucket, catalog_setting(config))
    store.require_bucket(args.to_bucket, "--to-bucket")
    settle = int(config.get("topic.overlay.cache.ms")) / 1000.0 + 1.0  # type: ignore[arg-type]
    report = move_catalog(
        store, catalog_home(config), Location(args.to_bucket, prefix), settle_s=settle, dry_run=args.dry_run
    )
    if args.json:
        out.print_json(json.dumps(report.to_json()))
    elif report.state == "already moved":
        out.print(
            f"the catalog was moved from {report.source} to {report.destination} already: nothing to do"
        )
    elif report.state == "would move":
        out.print(
            f"would move {report.documents} catalog document(s) from {report.source} to {report.destination}"
        )
    else:
        out.print(
            f"moved the catalog from {report.source} to {report.destination}: {report.copied} document(s) "
            f"copied ({report.bytes:,} bytes), {report.skipped} already there"
        )
    if report.state != "would move":
        out.print(
            f"now set catalog.bucket={args.to_bucket} catalog.prefix={prefix} on every broker and tool "
            "(until then their copies are refused and retried by Kafka)"
        )
    return 0
