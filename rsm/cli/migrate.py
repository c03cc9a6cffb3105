"""`rsm migrate`: move, re-key, verify, gc, import and export tiered data, on the store directly (no broker).

    rsm migrate --config server.properties move   --topic T [--partition P] [--to-bucket B] [--to-prefix P]
    rsm migrate --config DEST.properties   move   --topic T --from-config SOURCE.properties  (across backends)
    rsm migrate --config server.properties rekey  --topic T [--key-id K] [--reencrypt] [--encryption on|off]
    rsm migrate --config server.properties verify [--topic T] [--deep] [--retire K]
    rsm migrate --config server.properties gc     [--topic T] [--grace 1h] [--apply]
    rsm migrate --config server.properties import --dir /data/kafka/T-0 [--topic T] [--partition P]
    rsm migrate --config server.properties export --topic T --partition P --dir OUT
    rsm migrate --config server.properties catalog --to-bucket B [--to-prefix P]   (the catalog home)

`--config` names the broker's server.properties (its `rsm.config.*` keys) or an rsm.properties of bare
keys: where the store is, the keyring, and the defaults a topic's overlay overrides. The topic's resolved
configuration is the destination of a move and the key id of a re-key unless `--to-bucket`, `--to-prefix`
or `--key-id` say otherwise.

Every command prints its plan with `--dry-run` (what, where, how many bytes) and changes nothing; runs show
progress (bytes, rate, ETA) on stderr; `--parallel N` bounds concurrent transfers (default 4);
`--engine spark` runs the plan as a Spark job, one task per segment. A run keeps a journal in the store
(`rsm.migrate.journal`): killed at any moment, it resumes when the same command runs again. `--json` prints
one JSON document for scripts.

Exit status: 0 success; 1 an error stopped the command (one line); 2 usage; 3 the command ran but something
is wrong (segments failed, verify found problems, gc left removable orphans in a dry run).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from rsm.api.errors import ConfigException, RemoteStorageException
from rsm.api.metadata import to_uuid, uuid_to_base64
from rsm.catalog import TopicCatalog
from rsm.catalog.segments import CatalogError
from rsm.cli.console import err_console, out_console
from rsm.cli.migrate_catalog import catalog_setting, move_catalog_command
from rsm.cli.migrate_cross import add_arguments as cross_arguments
from rsm.cli.options import config_and_json
from rsm.config.keyring import keyring_for
from rsm.config.settings import RsmConfig
from rsm.metrics import serve_prometheus_from_config
from rsm.migrate import export as export_
from rsm.migrate import gc as gc_
from rsm.migrate import plan as plans
from rsm.migrate.catalog_move import CatalogMoveError
from rsm.migrate.context import Context, ItemResult, JobSpec, MigrateError
from rsm.migrate.engines import LocalEngine, RunReport, SparkEngine, execute
from rsm.migrate.gc_records import KIND as RECORD_KIND
from rsm.migrate.gc_records import StaleRecords
from rsm.migrate.journal import JournalError, job_id
from rsm.migrate.transfer import DEFAULT_COPY_PART_SIZE
from rsm.store.layout import Location
from rsm.store.objects import ObjectStore

COMMANDS = ("move", "rekey", "verify", "gc", "import", "export", "catalog")
EXIT_PROBLEMS = 3


class _Error(Exception):
    """A user error: one line, exit status 1."""


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "migrate",
        help="move, rekey, verify, gc, import, export tiered data (no broker)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(parser, None)
    commands = parser.add_subparsers(dest="migrate_command", metavar="COMMAND")

    def add(
        name: str,
        help_: str,
        *,
        topic: str = "optional",
        topic_id: str = TOPIC_ID_HELP,
        force: str = FORCE_HELP,
    ) -> argparse.ArgumentParser:
        p = commands.add_parser(name, help=help_)
        if topic != "none":
            p.add_argument("--topic", required=topic == "required", help="topic name")
            p.add_argument("--partition", type=int, action="append", help="only this partition (repeatable)")
            p.add_argument("--topic-id", help=topic_id)
        _common(p, argparse.SUPPRESS, force)
        return p

    p = add(
        "move",
        "relocate segments to the topic's configured (or the given) bucket and prefix",
        topic="required",
    )
    p.add_argument("--to-bucket", help="destination bucket (default: the topic's configured bucket)")
    p.add_argument("--to-prefix", help="destination prefix (default: the topic's configured prefix)")
    cross_arguments(p)  # --from-config, --prune
    p = add("rekey", "re-wrap data keys under a new key id; --reencrypt rewrites the data", topic="required")
    p.add_argument("--key-id", help="the key id to wrap under (default: the topic's configured key id)")
    p.add_argument("--reencrypt", action="store_true", help="rewrite the data under fresh data keys")
    p.add_argument(
        "--encryption", choices=("on", "off"), help="encrypt plain segments / decrypt encrypted ones"
    )
    p.add_argument("--new-run", action="store_true", help="re-encrypt again what an earlier run re-encrypted")
    p = add("verify", "check every segment against its manifest; report orphans and key ids")
    p.add_argument("--deep", action="store_true", help="also decode every batch (CRCs) and the indexes")
    p.add_argument("--retire", action="append", default=[], metavar="KEY_ID", help="report segments under it")
    p.add_argument("--grace", default="1h", help="orphans younger than this are reported as recent (1h)")
    p = add(
        "gc",
        "remove orphans, and the location records of deleted topics, older than the grace period "
        "(a dry run unless --apply)",
    )
    p.add_argument("--grace", default="1h", help="leave anything younger alone (default 1h; e.g. 30m, 2h, 0)")
    p.add_argument("--apply", action="store_true", help="remove them (default: only show them)")
    p = add("import", "tier a Kafka partition directory into the store (no broker needed)",
            topic_id="the topic id (default: the directory's partition.metadata; without one, the id of the "
            "store's topic of that name, else a new one)")  # fmt: skip
    p.add_argument("--dir", type=Path, required=True, help="the partition directory (<topic>-<partition>)")
    p = add(
        "catalog",
        "move the store's own documents (overlays, location records, journals) to another "
        "bucket or prefix: the catalog home (README: Moving the default bucket)",
        topic="none",
    )
    p.add_argument("--to-bucket", required=True, help="the new catalog.bucket")
    p.add_argument("--to-prefix", help="the new catalog.prefix (default: the current one)")
    p = add("export", "write a tiered partition as a Kafka partition directory", topic="required",
            force="replace a target <topic>-<partition>/ that holds files export did not write")  # fmt: skip
    p.add_argument("--dir", type=Path, required=True, help="output: <dir>/<topic>-<partition>/ is written")
    parser.set_defaults(func=run, config=None, json=False, dry_run=False, engine="local", parallel=4,
                        force=False, copy_part_size=str(DEFAULT_COPY_PART_SIZE), migrate_command=None)  # fmt: skip


TOPIC_ID_HELP = "a topic id other than the live (newest) one"
FORCE_HELP = "take over a journal's lock"


def _common(parser: argparse.ArgumentParser, default: Any, force_help: str = FORCE_HELP) -> None:
    """Options accepted before or after the command: --config and --json as the other store commands,
    and migrate's own."""
    config_and_json(parser, default)
    parser.add_argument(
        "--dry-run", action="store_true", default=default, help="show the plan; change nothing"
    )
    parser.add_argument(
        "--engine", choices=("local", "spark"), default=default, help="threads or a Spark job"
    )
    parser.add_argument("--parallel", type=int, default=default, help="concurrent transfers (local engine)")
    parser.add_argument("--force", action="store_true", default=default, help=force_help)
    parser.add_argument("--copy-part-size", default=default, help=argparse.SUPPRESS)


# -- configuration ------------------------------------------------------------------------------------------
def load_configs(path: Path) -> dict[str, str]:
    """The RSM keys of a server.properties (`rsm.config.*`, bridge keys left out) or an rsm.properties."""
    from rsm.config.properties import tool_configs

    configs = tool_configs(path)  # a key that is no setting is refused, naming the closest one
    try:
        RsmConfig(configs)
    except ConfigException as exc:
        raise _Error(f"{path}: {exc}") from None
    return configs


def parse_duration(text: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", text)
    if m is None:
        raise _Error(f"not a duration: {text!r} (e.g. 30m, 1h, 90s, 0)")
    unit = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}[m[2]]
    return float(m[1]) * unit


def _size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*(k|kib|m|mib|g|gib)?\s*", text.lower())
    if m is None:
        raise _Error(f"not a size: {text!r}")
    return int(m[1]) * {None: 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
                        "g": 1 << 30, "gib": 1 << 30}[m[2]]  # fmt: skip


# -- entry point --------------------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> int:
    out, err = out_console(), err_console()
    if args.migrate_command is None:
        err.print("rsm migrate: choose a command: " + ", ".join(COMMANDS))
        return 2
    if args.config is None:
        err.print("rsm migrate: --config server.properties (or rsm.properties) is required")
        return 2
    try:
        configs = load_configs(args.config)
        config = RsmConfig(configs)
        # a command that writes (dry or not) finds a file store's bucket made by its first write; one that only
        # reads refuses a missing root or bucket rather than make it and find nothing; no cloud bucket is made
        apply = args.migrate_command != "gc" or getattr(args, "apply", False)
        writes = args.migrate_command not in ("verify", "export") and apply
        store = ObjectStore.from_config(config, create=writes and not args.dry_run, writes=writes)
        if args.migrate_command == "catalog":  # before the catalog is opened: a half-moved one is refused
            return move_catalog_command(args, config, store, out)
        store.require_bucket(str(config.get("bucket")))
        store.require_bucket(config.catalog_bucket, catalog_setting(config))
        catalog = TopicCatalog(config, store)
        if config.get("metrics.enabled"):
            # its figures (rsm_migrate_*, the store's rsm_s3_*) for a scraper while it runs; off by default
            serve_prometheus_from_config(config)
        handler = {"move": _move, "rekey": _rekey, "verify": _verify, "gc": _gc, "import": _import,
                   "export": _export}[args.migrate_command]  # fmt: skip
        return handler(args, configs, catalog, out, err)
    except (_Error, MigrateError, JournalError, CatalogError, CatalogMoveError, ConfigException,
            RemoteStorageException, ValueError, OSError) as exc:  # fmt: skip
        err.print(f"rsm migrate {args.migrate_command}: {escape(' '.join(str(exc).split()))}")
        return 1


def _topic_id(catalog: TopicCatalog, args: argparse.Namespace) -> uuid.UUID:
    if args.topic_id:
        try:
            return to_uuid(args.topic_id)
        except ValueError as exc:
            raise _Error(f"--topic-id: {exc}") from None
    return catalog.live_topic_id(args.topic)


def _spec(
    args: argparse.Namespace, configs: dict[str, str], plan: plans.Plan, extra: dict[str, Any]
) -> JobSpec:
    params = {**plan.params, "partitions": sorted(args.partition) if args.partition else None, **extra}
    plan.params = params
    job = job_id(plan.command, plan.topic, plan.topic_id, params)
    options = (("copy_part_size", _size(str(args.copy_part_size))),)
    return JobSpec(tuple(sorted(configs.items())), job, 1, options)


def _engine(args: argparse.Namespace) -> LocalEngine | SparkEngine:
    if args.engine == "spark":
        try:
            import pyspark  # noqa: F401
        except ImportError:
            raise _Error("--engine spark needs pyspark (pip install 'kafka-tiered-rsm[spark]')") from None
        return SparkEngine()
    if args.parallel < 1:
        raise _Error("--parallel must be at least 1")
    return LocalEngine(args.parallel)


# -- output -------------------------------------------------------------------------------------------------
class RichReporter:
    """Progress on stderr: a bar of bytes with rate and ETA, and segments done out of the plan's."""

    def __init__(self, console: Console, what: str, enabled: bool) -> None:
        self.enabled = enabled
        self.what = what
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
            TimeRemainingColumn(), console=console, transient=False,
        )  # fmt: skip
        self.task: Any = None
        self.items = 0
        self.done = 0

    def start(self, items: int, total_bytes: int) -> None:
        if not self.enabled or not items:  # nothing to do: no bar (the report says so)
            return
        self.items = items
        self.progress.start()
        self.task = self.progress.add_task(self._label(), total=max(total_bytes, 1))

    def _label(self) -> str:
        return f"{self.what} {self.done}/{self.items} segments"

    def advance(self, n: int) -> None:
        if self.enabled and self.task is not None:
            self.progress.advance(self.task, n)

    def segment_done(self) -> None:
        if self.enabled and self.task is not None:
            self.done += 1
            self.progress.update(self.task, description=self._label())

    def item_done(self, result: ItemResult) -> None:
        if self.enabled and self.task is not None:
            self.segment_done()
            if result.status == "failed":
                self.progress.console.print(
                    f"[red]failed[/] {escape(result.item.describe())}: {escape(result.message)}"
                )

    def stop(self) -> None:
        if self.enabled and self.task is not None:
            self.progress.stop()


def _print_plan(plan: plans.Plan, args: argparse.Namespace, out: Console, job: str | None) -> None:
    if args.json:
        out.print_json(json.dumps({**plan.to_json(), "job": job, "dry_run": True}))
        return
    table = Table("segment", "offsets", "from", "to", "bytes", "key", title=f"{plan.command}: plan")
    for i in plan.items:
        table.add_row(
            f"{escape(i.topic)}-{i.partition} {i.segment_id}", f"{i.start_offset:,}.." + (f"{i.end_offset:,}" if i.end_offset >= i.start_offset else ""),
            escape(str(i.source)), escape(str(i.destination or "")), f"{i.bytes:,}", i.key_id or "-",
        )  # fmt: skip
    out.print(table)
    out.print(f"{len(plan.items)} segment(s), {plan.bytes:,} bytes; {len(plan.skipped)} left alone"
              + (f"; journal job {job}" if job else ""))  # fmt: skip
    for what, why in plan.skipped[:20]:
        out.print(f"[dim]  {escape(what)}: {escape(why)}")
    if len(plan.skipped) > 20:
        out.print(f"[dim]  ... and {len(plan.skipped) - 20} more")
    out.print("[yellow]dry run: nothing was changed")


def _run_plan(
    args: argparse.Namespace, configs: dict[str, str], plan: plans.Plan, out: Console, err: Console,
    what: str, *, extra: dict[str, Any] | None = None, sticky: bool = False, store: ObjectStore | None = None,
) -> int:  # fmt: skip
    spec = _spec(args, configs, plan, extra or {})
    if store is not None:  # a destination a topic's settings name must exist too: no bucket is made
        for bucket in dict.fromkeys(i.destination.bucket for i in plan.items if i.destination is not None):
            store.require_bucket(bucket)
    if args.dry_run:
        _print_plan(plan, args, out, spec.job)
        return 0
    report, elapsed = _execute(args, spec, plan, err, what, sticky, store)
    _print_report(report, args, out, elapsed)
    return EXIT_PROBLEMS if report.failed else 0


def _execute(
    args: argparse.Namespace, spec: JobSpec, plan: plans.Plan, err: Console, what: str, sticky: bool = False,
    store: ObjectStore | None = None,
) -> tuple[RunReport, float]:  # fmt: skip
    reporter = RichReporter(err, what, enabled=not args.json)
    started = time.monotonic()
    context = Context(spec, store=store)  # the catalog's store: its client is made already
    report = execute(plan, spec, engine=_engine(args), reporter=reporter, sticky=sticky, force=args.force,
                     context=context)  # fmt: skip
    return report, time.monotonic() - started


def _print_report(report: RunReport, args: argparse.Namespace, out: Console, elapsed: float) -> None:
    rate = report.bytes / elapsed if elapsed > 0 else 0.0
    if args.json:
        out.print_json(json.dumps({
            "job": report.job, "run": report.run, "resumed": report.resumed, "journal": report.journal,
            "summary": report.summary(), "seconds": round(elapsed, 3), "bytes_per_second": round(rate),
            "results": [r.to_json() for r in report.results],
        }))  # fmt: skip
        return
    counts = ", ".join(f"{v} {k}" for k, v in report.summary().items() if k not in ("items", "bytes"))
    out.print(
        f"job {report.job} run {report.run}{' (resumed)' if report.resumed else ''}: {counts or 'nothing to do'}; "
        f"{report.bytes:,} bytes in {elapsed:.1f} s ({rate / 1e6:.1f} MB/s); journal {escape(report.journal)}"
    )
    for r in report.failed[:20]:
        out.print(f"[red]failed[/] {escape(r.item.describe())}: {escape(r.message)}")


# -- commands -----------------------------------------------------------------------------------------------
def _move(
    args: argparse.Namespace, configs: dict[str, str], catalog: TopicCatalog, out: Console, err: Console
) -> int:
    if getattr(args, "from_config", None) is not None or getattr(args, "prune", False):
        from rsm.cli.migrate_cross import cross_move

        return cross_move(args, configs, catalog, out, err, sys.modules[__name__])
    tid = _topic_id(catalog, args)
    settings = plans.topic_settings(catalog, args.topic, tid)
    destination = Location(args.to_bucket or settings.bucket,
                           settings.prefix if args.to_prefix is None else args.to_prefix)  # fmt: skip
    _check_location(destination)
    if args.to_bucket:
        catalog.store.require_bucket(destination.bucket, "--to-bucket")
    plan = plans.plan_move(catalog, args.topic, tid, args.partition, destination)
    return _run_plan(args, configs, plan, out, err, "move", store=catalog.store)


def _check_location(location: Location) -> None:
    from rsm.api.names import bucket_problem, prefix_problem

    for what, name, problem in (("--to-bucket", location.bucket, bucket_problem(location.bucket)),
                                ("--to-prefix", location.prefix, prefix_problem(location.prefix))):  # fmt: skip
        if problem:
            raise _Error(f"{what} {name!r}: it {problem}")


def _rekey(
    args: argparse.Namespace, configs: dict[str, str], catalog: TopicCatalog, out: Console, err: Console
) -> int:
    tid = _topic_id(catalog, args)
    settings = plans.topic_settings(catalog, args.topic, tid)
    key_id = args.key_id or settings.encryption_key_id
    if args.encryption == "off":
        if args.key_id:
            raise _Error("--encryption off writes segments unencrypted: --key-id makes no sense with it")
        plan = plans.plan_reencrypt(catalog, args.topic, tid, args.partition, None, only_changing=True)
        return _run_plan(args, configs, plan, out, err, "decrypt", sticky=True, store=catalog.store,
                         extra={"new_run": uuid.uuid4().hex if args.new_run else None})  # fmt: skip
    if not key_id:
        raise _Error("no key id: give --key-id, or set the topic's encryption.key.id")
    keyring = keyring_for(catalog.config)
    if key_id not in keyring:
        raise _Error(f"key id {key_id!r} is not in the keyring (encryption.keyring.path)")
    if args.reencrypt or args.encryption == "on":
        plan = plans.plan_reencrypt(catalog, args.topic, tid, args.partition, key_id,
                                    only_changing=not args.reencrypt)  # fmt: skip
        if args.reencrypt and args.encryption != "on":  # --reencrypt alone: the encrypted copies only
            plan.skipped += [
                (i.describe(), "not encrypted (add --encryption on)") for i in plan.items if i.key_id is None
            ]
            plan.items = [i for i in plan.items if i.key_id is not None]
        return _run_plan(args, configs, plan, out, err, "re-encrypt", sticky=True, store=catalog.store,
                         extra={"new_run": uuid.uuid4().hex if args.new_run else None,
                                "encryption": args.encryption})  # fmt: skip
    plan = plans.plan_rekey(catalog, args.topic, tid, args.partition, key_id)
    return _run_plan(args, configs, plan, out, err, "rekey", store=catalog.store)


def _targets(catalog: TopicCatalog, args: argparse.Namespace) -> list[tuple[str, uuid.UUID]]:
    if args.topic is None:
        return [(t, tid) for t in catalog.topic_names() for tid in sorted(catalog.topic_ids(t), key=str)]
    if args.topic_id:
        return [(args.topic, _topic_id(catalog, args))]
    ids = catalog.topic_ids(args.topic)
    if not ids:
        raise _Error(f"topic {args.topic!r} has no tiered data in {catalog.searched()}")
    return [(args.topic, tid) for tid in sorted(ids, key=str)]


def _units(catalog: TopicCatalog, args: argparse.Namespace) -> list[tuple[str, str]]:
    """Where orphans are looked for: the topic's locations, or every bucket the store's records name."""
    if args.topic is not None:
        return [(loc.bucket, f"{loc.prefix}{t}-{uuid_to_base64(tid)}/")
                for t, tid in _targets(catalog, args) for loc in catalog.locations(t, tid)]  # fmt: skip
    buckets = list(catalog.scan_buckets())
    for topic, ids in catalog.registry.topics().items():
        for tid in ids:
            buckets += [loc.bucket for loc in catalog.registry.locations(topic, tid)]
    return [(b, "") for b in dict.fromkeys(buckets)]


def _verify(
    args: argparse.Namespace, configs: dict[str, str], catalog: TopicCatalog, out: Console, err: Console
) -> int:
    grace = parse_duration(args.grace)
    plan = plans.Plan("verify", args.topic, None, params={"deep": args.deep, "retire": sorted(args.retire)})
    for topic, tid in _targets(catalog, args):
        sub = plans.plan_verify(catalog, topic, tid, args.partition, args.deep, plan.findings)
        plan.items += [
            plans.with_kind(i, "verify", extra={**i.extra, "retire": sorted(args.retire)}) for i in sub.items
        ]
        if args.topic is not None:
            plan.topic_id = sub.topic_id if len(_targets(catalog, args)) == 1 else None
    spec = _spec(args, configs, plan, {})
    if args.dry_run:
        _print_plan(plan, args, out, spec.job)
        return 0
    report, _elapsed = _execute(args, spec, plan, err, "verify --deep" if args.deep else "verify",
                                store=catalog.store)  # fmt: skip
    now = time.time()
    orphans = gc_.scan(catalog.store, _units(catalog, args))
    everything = report.results + report.earlier
    problems = plan.findings + [dict(p, segment=r.item.describe()) for r in everything for p in r.problems]
    failed = [r for r in report.results if r.status == "failed"]
    old = [o for o in orphans if o.age(now) >= grace]
    key_ids: dict[str, int] = {}
    for r in everything:
        key_ids[r.item.key_id or "(unencrypted)"] = key_ids.get(r.item.key_id or "(unencrypted)", 0) + 1
    bad = bool(problems or failed or old)
    if args.json:
        out.print_json(json.dumps({
            "ok": not bad, "segments": len(everything), "bytes_checked": report.bytes, "deep": args.deep,
            "problems": problems, "failed": [r.to_json() for r in failed],
            "orphans": [o.to_json(catalog.store, now, grace) for o in orphans], "key_ids": key_ids,
            "job": report.job, "run": report.run,
        }))  # fmt: skip
        return EXIT_PROBLEMS if bad else 0
    out.print(f"verified {len(everything)} segment(s), {report.bytes:,} bytes read"
              f"{' (deep)' if args.deep else ''}; key ids: "
              + ", ".join(f"{k} ({n})" for k, n in sorted(key_ids.items())))  # fmt: skip
    if problems:
        table = Table("kind", "segment", "object", "detail", title="problems")
        for p in problems:
            table.add_row(p["kind"], escape(p["segment"]), escape(p["object"]), escape(p["detail"]))
        out.print(table)
    for r in failed:
        out.print(f"[red]could not verify[/] {escape(r.item.describe())}: {escape(r.message)}")
    _print_orphans(orphans, catalog, out, now, grace)
    out.print("[green]everything checks" if not bad else "[red]problems found")
    return EXIT_PROBLEMS if bad else 0


def _print_orphans(
    orphans: list[gc_.Orphan], catalog: TopicCatalog, out: Console, now: float, grace: float
) -> None:
    if not orphans:
        out.print("no orphans")
        return
    table = Table("kind", "objects", "bytes", "age", "", title="orphans")
    for o in orphans:
        table.add_row(o.kind, escape("\n".join(catalog.store.describe(o.bucket, k) for k in o.keys)), f"{o.size:,}",
                      f"{o.age(now) / 60:.0f} min", "" if o.age(now) >= grace else "[dim]recent (may be in flight)")  # fmt: skip
    out.print(table)


def _gc(
    args: argparse.Namespace, configs: dict[str, str], catalog: TopicCatalog, out: Console, err: Console
) -> int:
    grace = parse_duration(args.grace)
    now = time.time()
    orphans = gc_.scan(catalog.store, _units(catalog, args))
    # location records of topic ids with nothing left, judged before this run removes any orphan (a topic
    # id whose only objects are orphans keeps its record until a later run)
    records = StaleRecords(catalog.store, catalog.default, catalog.home)
    orphans += records.scan(None if args.topic is None else set(_targets(catalog, args)))
    eligible = gc_.removable(orphans, grace, now)
    removed: list[gc_.Orphan] = []
    kept: list[gc_.Orphan] = []
    if args.apply and not args.dry_run:
        for o in eligible:
            gone = records.remove(o) if o.kind == RECORD_KIND else gc_.remove(catalog.store, o)
            (removed if gone else kept).append(o)
    if args.json:
        out.print_json(json.dumps({
            "apply": bool(args.apply and not args.dry_run), "grace_s": grace,
            "orphans": [o.to_json(catalog.store, now, grace) for o in orphans],
            "removable": len(eligible), "removed": len(removed), "bytes_removed": sum(o.size for o in removed),
            "kept_committed_meanwhile": len(kept),
        }))  # fmt: skip
    else:
        _print_orphans(orphans, catalog, out, now, grace)
        if args.apply and not args.dry_run:
            out.print(f"removed {len(removed)} orphan(s), {sum(o.size for o in removed):,} bytes"
                      + (f"; {len(kept)} committed meanwhile, kept" if kept else ""))  # fmt: skip
        else:
            out.print(f"{len(eligible)} orphan(s) older than {args.grace} would be removed: "
                      "[yellow]dry run, add --apply")  # fmt: skip
    return 0 if (args.apply and not args.dry_run) or not eligible else EXIT_PROBLEMS


def _import(
    args: argparse.Namespace, configs: dict[str, str], catalog: TopicCatalog, out: Console, err: Console
) -> int:
    from rsm.migrate import import_

    if args.partition is not None and len(args.partition) != 1:
        raise _Error("import takes one --partition (the directory's)")

    def without_metadata(topic: str, directory: Path) -> str:
        known = catalog.topic_ids(topic)
        new = uuid.uuid5(uuid.NAMESPACE_URL, directory.resolve().as_uri())  # a dry run's is the run's
        tid = catalog.live_topic_id(topic) if known else new
        what = (f"topic id {uuid_to_base64(tid)}, the store's for topic {escape(topic)}" if known
                else f"new topic id {uuid_to_base64(tid)}")  # fmt: skip
        err.print(
            f"no partition.metadata in {escape(str(directory))}: using {what} (pass --topic-id to choose)"
        )
        return uuid_to_base64(tid)

    pdir = import_.read_partition_dir(args.dir, args.topic, args.partition[0] if args.partition else None,
                                      args.topic_id, without_metadata)  # fmt: skip
    plan = import_.plan_import(catalog, pdir)
    return _run_plan(args, configs, plan, out, err, "import", store=catalog.store)


def _export(
    args: argparse.Namespace, configs: dict[str, str], catalog: TopicCatalog, out: Console, err: Console
) -> int:
    if not args.partition or len(args.partition) != 1:
        raise _Error("export takes one --partition")
    if args.engine == "spark":
        raise _Error("export writes a local directory: it runs on the local engine")
    partition = args.partition[0]
    tid = _topic_id(catalog, args)
    history = export_.plan_export(catalog, args.topic, tid, partition)
    target = args.dir / export_.partition_dir_name(args.topic, partition)
    # one figure in the plan, the progress and the result: the bytes of the .log files, as Kafka wrote them
    total = sum(export_.log_bytes(s) for s in history.slices)
    # refused before anything is written: a directory holding files export did not write (--force replaces)
    replaced = export_.check_target(target, args.topic, partition, tid, force=args.force)
    if args.dry_run:
        if args.json:
            out.print_json(json.dumps({"dry_run": True, "directory": str(target), "segments": len(history.slices),
                                       "bytes": total, "offsets": [history.first_offset, (history.next_offset or 0) - 1],
                                       "replaces": [p.name for p in replaced]}))  # fmt: skip
        else:
            out.print(f"export {len(history.slices)} segment(s), {total:,} bytes of .log, offsets "
                      f"{history.first_offset}..{(history.next_offset or 0) - 1} to {target}")  # fmt: skip
            if replaced:
                out.print(f"--force: would first remove {len(replaced)} file(s) in {escape(str(target))}")
            out.print("[yellow]dry run: nothing was changed")
        return 0
    export_.claim(target, args.topic, partition, tid, replaced)
    reporter = RichReporter(err, "export", enabled=not args.json)
    reporter.start(len(history.slices), total)
    started = time.monotonic()
    done = []
    try:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max(1, args.parallel), thread_name_prefix="rsm-export") as pool:
            for seg in pool.map(
                lambda s: export_.export_slice(catalog, s, target, reporter.advance), history.slices
            ):
                done.append(seg)
                reporter.segment_done()
    finally:
        reporter.stop()
    export_.finish(target, history, tid, (history.next_offset or 0) - 1)
    elapsed = time.monotonic() - started
    written = sum(s.size for s in done if not s.skipped)
    if args.json:
        out.print_json(json.dumps({"directory": str(target), "segments": len(done), "skipped": sum(s.skipped for s in done),
                                   "bytes": written, "seconds": round(elapsed, 3)}))  # fmt: skip
    else:
        out.print(f"exported {len(done)} segment(s) to {escape(str(target))}: {written:,} bytes of .log in {elapsed:.1f} s"
                  + (f" ({sum(s.skipped for s in done)} already there)" if any(s.skipped for s in done) else ""))  # fmt: skip
    return 0
