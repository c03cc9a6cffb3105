"""`rsm store`: what the store holds, read from manifests alone (the planner the Spark reader uses).

    rsm store --config server.properties du [--topic T] [--json]
    rsm store --config server.properties ls --topic T [--partition P] [--topic-id ID] [--json]
    rsm store --config server.properties locate [--topic T] [--record] [--bucket OLD [--prefix P]] [--json]

`du` answers per topic, partition and location: segments, stored bytes, offsets, the first and last
timestamps, key ids and orphans (objects without a committed manifest, temporary files of unfinished
writes); counts, bytes and orphans from listings, offsets, timestamps and key ids from the first and last
segments' manifests (`--every-manifest`: every segment's, for each key id in use). `ls` lists one topic's segments with the
history the readers use (which copy serves which offsets, and why a copy is not read). `locate` shows
every location a topic's segments are in; `--record` writes what a scan found into the location record
(`rsm.store.locations`) so readers need not scan again: the only action here that writes.
`--bucket OLD` (repeatable) also reads the location record of an earlier default location (`OLD` with
`--prefix`, default the configured prefix) and scans that bucket: after the brokers' default `bucket` or
`prefix` changed, `locate --record --bucket OLD` with the new configuration records the topics found there
in the new default's record, where the readers given the new configuration look.

A location the topic's record or overlay names that cannot be read (its bucket is gone, access is denied:
`rsm.catalog.unreadable`) is one line on stderr for each action, which then exits with status 1: what it
shows lacks whatever that location holds. `ls` also names each hole of a partition's history
(`rsm.catalog.holes`), the offsets before its first segment down to the RSM's log-start mark included.

A manifest that cannot be read or names another segment than its key (tampered, truncated) is one line on
stderr naming the object and what is wrong, and the action goes on with every other segment (`ls` leaves
that segment out; `du` counts it from the listing as it counts every manifest, and leaves it out of the
figures it reads from manifests). The exit status stays what it would be without it (0): `du` and `ls`
are inventories, complete for everything readable and naming what is not, whereas an unreadable location
(status 1) hides an unknown part of the store. Finding damage is `rsm migrate verify`'s job, and its exit
status (3) is the one to alert on.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rsm.api.errors import ConfigException
from rsm.api.metadata import to_uuid, uuid_to_base64
from rsm.catalog import TopicCatalog
from rsm.catalog.segments import CatalogError, reporting_damage
from rsm.catalog.unreadable import UnreadableLocation
from rsm.catalog.usage import topic_usage
from rsm.cli.console import err_console, out_console
from rsm.cli.options import config_and_json
from rsm.config.settings import RsmConfig
from rsm.store.layout import Location
from rsm.store.locations import FoundTopicDir
from rsm.store.objects import ObjectStore
from rsm.stored.location_record import FoundBy

ACTIONS = ("du", "ls", "locate")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "store",
        help="what the store holds: du, ls, locate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    config_and_json(parser, None)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    p = actions.add_parser("du", help="segments, bytes, offsets per topic, partition and location")
    p.add_argument("--topic", help="one topic (default: every topic in the store)")
    p.add_argument(
        "--every-manifest",
        action="store_true",
        help="read every segment's manifest (each key id; the largest offset and timestamp whatever copy "
        "holds them), not only the first and last segments' (counts and bytes come from listings)",
    )
    config_and_json(p, argparse.SUPPRESS)
    p = actions.add_parser("ls", help="the segments of a topic (or one partition) and their history")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int)
    p.add_argument("--topic-id", help="a topic id other than the live (newest) one")
    config_and_json(p, argparse.SUPPRESS)
    p = actions.add_parser("locate", help="every location of a topic's segments")
    p.add_argument("--topic", help="one topic (default: every topic in the store)")
    p.add_argument("--record", action="store_true", help="write scanned locations into the location record")
    p.add_argument(
        "--bucket",
        action="append",
        default=[],
        metavar="OLD",
        help="also read this earlier default bucket's location record and scan it (repeatable)",
    )
    p.add_argument("--prefix", help="the earlier default's prefix (default: the configured prefix)")
    config_and_json(p, argparse.SUPPRESS)
    parser.set_defaults(func=run, config=None, json=False, action=None)


def _catalog(path: Path, args: argparse.Namespace) -> TopicCatalog:
    """The catalog of the store the file names; read-only, so a root or bucket that does not exist is
    refused (not created, not read as an empty store)."""
    from rsm.config.properties import tool_configs

    try:
        config = RsmConfig(tool_configs(path))
        store = ObjectStore.from_config(config, create=False)
    except ConfigException as exc:
        raise ValueError(f"{path}: {exc}") from None
    also = _earlier_defaults(config, args)
    if not also:  # with --bucket OLD the default bucket may be one not made yet
        store.require_bucket(str(config.get("bucket")))
    # locate writes the record's completeness markers, so it scans whatever they say
    return TopicCatalog(config, store, also=also, trust_record=args.action != "locate")


def _earlier_defaults(config: RsmConfig, args: argparse.Namespace) -> list[Location]:
    """`locate --bucket OLD [--prefix P]`: the earlier default locations to read and scan."""
    from rsm.api.names import bucket_problem, prefix_problem

    buckets: list[str] = getattr(args, "bucket", None) or []
    prefix = getattr(args, "prefix", None)
    if prefix is not None and not buckets:
        raise ValueError("--prefix names the earlier default's prefix: give --bucket OLD with it")
    prefix = str(config.get("prefix")) if prefix is None else prefix
    for what, name, problem in [("--bucket", b, bucket_problem(b)) for b in buckets] + [
        ("--prefix", prefix, prefix_problem(prefix) if buckets else None)
    ]:
        if problem:
            raise ValueError(f"{what} {name!r}: it {problem}")
    return [Location(b, prefix) for b in buckets]


def run(args: argparse.Namespace) -> int:
    out, err = out_console(), err_console()
    if args.action is None:
        err.print("rsm store: choose an action: " + ", ".join(ACTIONS))
        return 2
    if args.config is None:
        err.print("rsm store: --config server.properties (or rsm.properties) is required")
        return 2
    try:
        catalog = _catalog(args.config, args)
        with reporting_damage() as damaged:
            status = {"du": _du, "ls": _ls, "locate": _locate}[args.action](catalog, args, out)
    except (CatalogError, ConfigException, ValueError, OSError) as exc:
        err.print(f"rsm store: {escape(str(exc))}")
        return 1
    for d in damaged:  # the status stands: see the module docstring
        err.print(f"rsm store: segment left out: {escape(d.problem)}")
    return status


def _topics(catalog: TopicCatalog, topic: str | None) -> list[str]:
    if topic is None:
        return catalog.topic_names()
    if not catalog.topic_ids(topic):
        raise CatalogError(f"topic {topic!r} has no tiered data in {catalog.searched()}")
    return [topic]


def _say_unreadable(found: list[UnreadableLocation]) -> int:
    """One line on stderr per known location that cannot be read; the action's exit status (1 if any)."""
    for lost in found:
        err_console().print(f"rsm store: {escape(lost.message())}")
    return 1 if found else 0


def _when(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _du(catalog: TopicCatalog, args: argparse.Namespace, out: Console) -> int:
    rows = []
    lost: list[UnreadableLocation] = []
    for topic in _topics(catalog, args.topic):
        found = topic_usage(catalog, topic, every_manifest=args.every_manifest)
        rows += found
        for tid in catalog.topic_ids(topic):
            lost += catalog.unreadable(topic, tid, {r.location for r in found if r.topic_id == tid})
    status = _say_unreadable(lost)
    if args.json:
        out.print_json(json.dumps([r.to_json() for r in rows]))
        return status
    table = Table(
        "topic",
        "topic id",
        "part",
        "location",
        "segments",
        "bytes",
        "offsets",
        "records from",
        "to",
        "keys",
        "orphans",
    )
    for r in rows:
        offsets = "-" if r.first_offset is None else f"{r.first_offset:,}..{r.last_offset:,}"
        table.add_row(
            escape(r.topic), uuid_to_base64(r.topic_id), str(r.partition), escape(str(r.location)),
            f"{r.segments:,}", f"{r.bytes:,}", offsets, _when(r.first_timestamp), _when(r.last_timestamp),
            ", ".join(sorted(r.key_ids)) or "-", str(len(r.orphans)) if r.orphans else "-",
        )  # fmt: skip
    out.print(table)
    total = sum(r.bytes for r in rows)
    out.print(
        f"{len(rows)} partition location(s), {sum(r.segments for r in rows):,} segments, {total:,} bytes"
    )
    return status


def _ls(catalog: TopicCatalog, args: argparse.Namespace, out: Console) -> int:
    topic_id = to_uuid(args.topic_id) if args.topic_id else catalog.live_topic_id(args.topic)
    partitions = None if args.partition is None else [args.partition]
    histories = catalog.histories(args.topic, topic_id, partitions)
    status = _say_unreadable(catalog.unreadable(args.topic, topic_id))
    items: list[dict[str, Any]] = []
    for partition, history in histories.items():
        serving = {id(s.segment): s for s in history.slices}
        why = {id(seg): reason for seg, reason in history.superseded}
        segs = [s.segment for s in history.slices] + [seg for seg, _ in history.superseded]
        for seg in sorted(segs, key=lambda s: (s.start_offset, s.manifest.created_ms)):
            s = serving.get(id(seg))
            m = seg.manifest
            items.append(
                {
                    "partition": partition,
                    "start_offset": seg.start_offset,
                    "end_offset": seg.end_offset,
                    "segment_id": seg.segment_id,
                    "leader_epochs": {str(e): o for e, o in seg.epochs},
                    "size": m.log.size,
                    "stored_bytes": m.log.stored_size,
                    "chunks": m.log.count,
                    "key_id": None if m.encryption is None else m.encryption.key_id,
                    "created_ms": m.created_ms,
                    "location": str(seg.location),
                    "serves": None if s is None else [s.first_offset, s.last_offset],
                    "not_read_because": why.get(id(seg)),
                }
            )
    if args.json:
        out.print_json(json.dumps(items))
        return status
    table = Table("part", "offsets", "segment id", "epochs", "bytes", "stored", "key", "location", "read for")
    for i in items:
        serves = (
            f"{i['serves'][0]:,}..{i['serves'][1]:,}"
            if i["serves"]
            else f"[dim]not read: {i['not_read_because']}"
        )
        epochs = " ".join(f"{e}@{o}" for e, o in i["leader_epochs"].items())
        table.add_row(
            str(i["partition"]), f"{i['start_offset']:,}..{i['end_offset']:,}", i["segment_id"], epochs,
            f"{i['size']:,}", f"{i['stored_bytes']:,}", i["key_id"] or "-", escape(i["location"]), serves,
        )  # fmt: skip
    out.print(table)
    for history in histories.values():
        for hole in catalog.holes(args.topic, topic_id, history):
            out.print(f"[yellow]{escape(hole.message())}")
    return status


def _locate(catalog: TopicCatalog, args: argparse.Namespace, out: Console) -> int:
    began = int(time.time() * 1000)  # a store-wide scan vouches for topic ids first written after it began
    found = []
    stray: list[FoundTopicDir] = []
    seen: set[str] = set()  # buckets holding segments
    lost: list[UnreadableLocation] = []
    for topic in _topics(catalog, args.topic):
        for topic_id in catalog.topic_ids(topic):
            # where segments are, in the order first seen (the default location only if it holds some)
            locations = list(dict.fromkeys(seg.location for seg in catalog.segments(topic, topic_id)))
            lost += catalog.unreadable(topic, topic_id, locations)
            seen.update(loc.bucket for loc in locations)
            if args.record:
                for location in locations:
                    catalog.registry.record(topic, topic_id, location, found_by=FoundBy.SCAN)
                catalog.registry.mark_complete(topic, topic_id, catalog.scan_buckets())
            found.append(
                {
                    "topic": topic,
                    "topic_id": uuid_to_base64(topic_id),
                    "locations": [str(x) for x in locations],
                }
            )
    if args.record and args.topic is None:
        # vouch for later topic ids only if every directory the scan found is now recorded: one whose
        # manifest could not be read (retention deleting it meanwhile) names no topic, so it is not
        recorded = {f["topic_id"] for f in found}
        stray = [d for d in catalog.scanned_dirs() if uuid_to_base64(d.topic_id) not in recorded]
        if stray:
            first, first_id = stray[0], uuid_to_base64(stray[0].topic_id)
            err_console().print(
                f"rsm store: {len(stray)} topic director{'y' if len(stray) == 1 else 'ies'} (first: "
                f"{escape(catalog.store.describe(first.bucket, f'{first.directory}{first.name}-{first_id}/'))}) "
                "could not be told to a topic (no readable manifest): topics first tiered from now on are "
                "not vouched for; run locate --record again"
            )
        else:
            catalog.registry.mark_scanned(began, catalog.scan_buckets(), "locate")
    for old in catalog.also:  # a mistyped --bucket finds nothing: say so rather than succeed silently
        if old.bucket not in seen:
            err_console().print(
                f"rsm store: no segment found in {escape(catalog.store.describe(old.bucket, ''))} "
                "(--bucket): no such bucket, or nothing tiered there"
            )
    status = _say_unreadable(lost)
    if args.json:
        out.print_json(json.dumps(found))
        return status
    table = Table("topic", "topic id", "locations")
    for f in found:
        table.add_row(escape(f["topic"]), f["topic_id"], escape(", ".join(f["locations"])))
    out.print(table)
    if args.record:
        later = " nor for topics first tiered from now on" if args.topic is None and not stray else ""
        out.print(
            f"recorded in {catalog.registry.describe()}: readers need not scan for these topics again{later}"
        )
    return status
