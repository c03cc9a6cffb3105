"""`rsm quickstart`: the product end to end on the embedded default, a local directory store.

It writes a demo partition with `segment_format` (one segment per codec, a committed and an aborted
transaction), verifies it, tiers it through the RemoteStorageManager into a local store as two topics
(one plain, one encrypted with its own bucket and prefix chosen by `unchecked.rsm.*` topic configs),
then fetches a byte range and an index back and checks them against the originals. Everything lands
under one directory the user can look at; nothing needs S3, Spark or a broker.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import uuid
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rsm.cli.console import RULED_PIPE_WIDTH, err_console, out_console
from segment_format import LogSegment

log = logging.getLogger(__name__)

DEFAULT_DIR = Path("rsm-quickstart")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "quickstart",
        help="write a demo partition, tier it into a local store, fetch it back",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=DEFAULT_DIR,
        help="working directory: new, empty, or one an earlier quickstart made (default %(default)s)",
    )
    parser.add_argument(
        "--records", type=_positive, default=2000, help="records per segment (default %(default)s)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the store and keyring of an earlier run")
    parser.add_argument(
        "--no-spark", action="store_true", help="skip the Spark SQL query over the tiered topics"
    )
    parser.set_defaults(func=run)


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {n}")
    return n


MARKER = ".rsm-quickstart"
PROPERTIES = "rsm.properties"
# what a quickstart creates under its directory: the only things it ever deletes
OURS = ("kafka-logs", "store", "secrets", PROPERTIES)
KEPT_WITH_KEEP = ("store", "secrets")


class _Refused(Exception):
    """The working directory cannot be used: one line for the user."""


def prepare_dir(root: Path, keep: bool) -> None:
    """Make ``root`` ready, deleting nothing the quickstart did not create.

    A new or empty directory is taken (and marked as ours); a directory an earlier quickstart marked has
    only its own entries removed (the store and keyring stay with ``--keep``); anything else is refused.
    """
    if root.exists() and not root.is_dir():
        raise _Refused(f"{root} is a file, not a directory")
    if root.is_dir() and not (root / MARKER).is_file():
        try:
            entries = sorted(p.name for p in root.iterdir())
        except OSError as exc:
            raise _Refused(f"cannot read {root}: {exc.strerror}") from None
        if entries:
            shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
            raise _Refused(
                f"{root} is not empty ({shown}) and was not made by rsm quickstart; "
                "give --dir a new or empty directory (nothing is deleted)"
            )
    try:
        root.mkdir(parents=True, exist_ok=True)
        (root / MARKER).write_text(
            "made by rsm quickstart: it deletes only kafka-logs/, store/, secrets/ and rsm.properties here\n"
        )
        for name in OURS:
            if keep and name in KEPT_WITH_KEEP:
                continue
            target = root / name
            if target.is_symlink() or target.is_file():
                target.unlink()
            elif target.is_dir():
                shutil.rmtree(target)
    except OSError as exc:
        raise _Refused(f"cannot write in {exc.filename or root}: {exc.strerror}") from None


def _write_keyring(path: Path) -> None:
    from rsm.config.keyring import generate_key

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"demo-k1": generate_key()}, fh)


def run(args: argparse.Namespace) -> int:
    from rsm.cli.demo import write_demo_partition

    console = out_console(RULED_PIPE_WIDTH)
    root: Path = args.dir.resolve()
    try:
        prepare_dir(root, args.keep)
    except _Refused as exc:
        err_console().print(f"rsm quickstart: {exc}", markup=False)
        return 1
    partition_dir = root / "kafka-logs" / "orders-0"
    store_root = root / "store"
    keyring_path = root / "secrets" / "keyring.json"

    console.rule("[bold]1. A demo partition written with segment_format")
    segments = write_demo_partition(partition_dir, records_per_segment=args.records)
    _show_segments(console, segments)

    console.rule("[bold]2. Tier it through the RemoteStorageManager (local directory store)")
    if not keyring_path.exists():
        _write_keyring(keyring_path)
    rsm = _demo_rsm(store_root, keyring_path)
    topics = _demo_topics()
    try:
        tiered = _tier(console, rsm, segments, topics)
        console.rule("[bold]3. Fetch back and check against the originals")
        failures = _fetch_back(console, rsm, tiered, topics)
    finally:
        rsm.close()

    failures += _plaintext_leaks(console, segments, store_root)
    if not args.no_spark:
        failures += _spark_query(console, store_root, keyring_path, segments)
    objects = sorted(p for p in store_root.rglob("*") if p.is_file())
    console.rule("[bold]Where things are")
    console.print(f"demo partition : {partition_dir}")
    console.print(f"object store   : {store_root} ({len(objects)} objects)")
    console.print(f"keyring        : {keyring_path} (owner-only; never commit it)")
    console.print(f"inspect a segment: rsm dump-log --print-data-log {segments[0].log}")
    _next_steps(console, _write_properties(root / PROPERTIES, store_root, keyring_path))
    if failures:
        console.print(f"[bold red]quickstart found {failures} mismatches")
        return 1
    console.print("[bold green]quickstart ok: tiered, fetched and verified")
    return 0


def _show_segments(console: Console, segments: list) -> None:  # type: ignore[type-arg]
    """Step 1's table: each demo segment verified as Kafka would (offsets, batches, records, bytes)."""
    table = _table("segment", "codec", "offsets", "batches", "records", "bytes", "verified")
    for seg in segments:
        summary = LogSegment(seg.log).verify(seg.base_offset, seg.end_offset)
        table.add_row(
            seg.log.name,
            seg.codec.name.lower(),
            f"{summary.base_offset}..{summary.last_offset}",
            str(summary.batch_count),
            str(summary.record_count),
            f"{summary.size_in_bytes:,}",
            "[green]ok",
        )
    console.print(table)


def _demo_rsm(store_root: Path, keyring_path: Path):  # type: ignore[no-untyped-def]
    """A RemoteStorageManager on the demo's directory store, encrypting with the demo keyring's key."""
    from rsm import RemoteStorageManager

    rsm = RemoteStorageManager()
    rsm.configure(
        {
            "storage.backend": "file",
            "storage.file.root": str(store_root),
            "bucket": "tiered",
            "encryption.keyring.path": str(keyring_path),
            "encryption.key.id": "demo-k1",
        }
    )
    return rsm


def _demo_topics() -> dict[str, object]:
    """The two demo topics' LogConfigs: `orders` as the broker has it, `payments` in its own bucket and
    prefix, encrypted."""
    from rsm import LogConfig

    return {
        "orders": LogConfig({"remote.storage.enable": "true"}),
        "payments": LogConfig(
            {
                "remote.storage.enable": "true",
                "unchecked.rsm.bucket": "secure",
                "unchecked.rsm.prefix": "pci/",
                "unchecked.rsm.encryption.enabled": "true",
                # no compression, so only encryption stands between the plaintext and the store
                "unchecked.rsm.compression.enabled": "false",
            }
        ),
    }


def _tier(console: Console, rsm, segments: list, topics: dict) -> list[tuple[str, object, object]]:  # type: ignore[no-untyped-def,type-arg]
    """Step 2: every demo segment copied for each topic, as Kafka's RemoteLogManager does; a row per copy."""
    from rsm import LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

    rng = random.Random(1)
    tiered: list[tuple[str, object, object]] = []
    table = _table("topic", "base offset", "custom metadata", "bucket/prefix (effective config)")
    for topic, log_config in topics.items():
        tip = TopicIdPartition(uuid.UUID(int=rng.getrandbits(128), version=4), topic, 0)
        settings = rsm.config.resolve(log_config)
        for seg in segments:
            metadata = RemoteLogSegmentMetadata(
                RemoteLogSegmentId(tip, uuid.UUID(int=rng.getrandbits(128), version=4)),
                start_offset=seg.base_offset,
                end_offset=seg.end_offset,
                max_timestamp_ms=seg.max_timestamp_ms,
                broker_id=0,
                event_timestamp_ms=seg.max_timestamp_ms,
                segment_size_in_bytes=seg.size_in_bytes,
                segment_leader_epochs={0: 0},
            )
            data = LogSegmentData(
                seg.log,
                seg.offset_index,
                seg.time_index,
                seg.transaction_index,
                seg.producer_snapshot,
                seg.leader_epoch_checkpoint,
            )
            custom = rsm.copy_log_segment_data(metadata, data, log_config)
            tiered.append((topic, replace(metadata, custom_metadata=custom), seg))
            where = f"{settings.bucket}/{settings.prefix}" + (
                " encrypted" if settings.encryption_enabled else ""
            )
            table.add_row(topic, str(seg.base_offset), f"{len(custom.value) if custom else 0} bytes", where)
    console.print(table)
    return tiered


def _fetch_back(console: Console, rsm, tiered: list, topics: dict) -> int:  # type: ignore[no-untyped-def,type-arg]
    """Step 3: a byte range and the time index of each copy fetched and compared; the mismatches."""
    from rsm import IndexType

    failures = 0
    table = _table("topic", "base offset", "byte range fetched", "range matches", "time index matches")
    for topic, metadata, seg in tiered:
        original = seg.log.read_bytes()
        start = len(original) // 3
        end = min(len(original) - 1, start + 64 * 1024)
        with rsm.fetch_log_segment(metadata, start, end, topics[topic]) as stream:
            got = stream.read()
        range_ok = got == original[start : end + 1]
        with rsm.fetch_index(metadata, IndexType.TIMESTAMP, topics[topic]) as stream:
            index_ok = stream.read() == seg.time_index.read_bytes()
        failures += (not range_ok) + (not index_ok)
        table.add_row(topic, str(seg.base_offset), f"{start:,}..{end:,}", _mark(range_ok), _mark(index_ok))
    console.print(table)
    return failures


def _plaintext_leaks(console: Console, segments: list, store_root: Path) -> int:  # type: ignore[type-arg]
    """1 when plaintext from inside the first record shows in the encrypted topic's stored objects."""
    probe = segments[0].log.read_bytes()[61 + 40 : 61 + 72]
    leaked = [p for p in (store_root / "secure").rglob("*") if p.is_file() and probe in p.read_bytes()]
    console.print(
        f"plaintext of the encrypted topic found in its stored objects: {_mark(not leaked, 'none')}"
    )
    return int(bool(leaked))


def _write_properties(path: Path, store_root: Path, keyring_path: Path) -> Path:
    """The store as your own tools reach it (`rsm store`, `rsm migrate`, the Spark reader): no secrets, the
    keyring is named by its path."""
    path.write_text(
        "# written by rsm quickstart: its store, for rsm store / rsm migrate --config and the Spark reader's\n"
        "# rsm.properties option (no secrets here: the keyring is a path)\n"
        "storage.backend=file\n"
        f"storage.file.root={store_root}\n"
        "bucket=tiered\n"
        "prefix=\n"
        f"encryption.keyring.path={keyring_path}\n"
    )
    return path


def next_steps(properties: Path) -> tuple[str, str]:
    """The shell line and the Python snippet the quickstart ends with, as printed."""
    import json
    import shlex

    shell = f"rsm store --config {shlex.quote(str(properties))} du"
    # read_committed, as the query of step 4: the counts it prints are the table's
    python = (
        "from pyspark.sql import SparkSession\n"
        'spark = SparkSession.builder.master("local[2]").getOrCreate()\n'
        f'df = spark.read.format("kafka-tiered").option("rsm.properties", {json.dumps(str(properties))})'
        '.option("subscribe", "orders,payments").option("kafka.isolation.level", "read_committed").load()\n'
        'df.groupBy("topic").count().orderBy("topic").show()'
    )
    return shell, python


def _next_steps(console: Console, properties: Path) -> None:
    shell, python = next_steps(properties)
    console.rule("[bold]Next steps")
    console.print(f"store settings : {properties} (no secrets)")
    console.print("what the store holds, with your own tools:")
    console.print(shell, markup=False, highlight=False)
    console.print("read it with Spark (Python):")
    console.print(python, markup=False, highlight=False)


QUERY = """
SELECT topic, partition, count(*) AS records, min(offset) AS first, max(offset) AS last,
       count(DISTINCT key) AS keys, round(avg(length(value)), 1) AS value_bytes
FROM tiered GROUP BY topic, partition ORDER BY topic
"""


def _spark_query(console: Console, store_root: Path, keyring_path: Path, segments: list) -> int:  # type: ignore[type-arg]
    """Step 4: Spark SQL straight over the store (format "kafka-tiered"); returns the mismatch count."""
    from spark_reader.session import SparkUnavailable, local_session

    console.rule("[bold]4. Query the tiered topics with Spark SQL, straight from the store")
    try:
        from pyspark.sql import SparkSession

        ours = SparkSession.getActiveSession() is None  # never stop a session the caller already runs
        spark = local_session("rsm-quickstart")
    except (SparkUnavailable, ImportError) as exc:
        console.print(f"skipped the Spark query: {exc}")
        return 0
    from segment_format.columnar import decode_batches

    try:
        df = (
            spark.read.format("kafka-tiered")
            .option("storage.file.root", str(store_root))
            .option("bucket", "tiered")
            .option("encryption.keyring.path", str(keyring_path))
            .option("subscribePattern", "orders|payments")
            .option("kafka.isolation.level", "read_committed")
            .load()
        )
        df.createOrReplaceTempView("tiered")
        console.print(
            "-- tiered: format(\"kafka-tiered\"), kafka.isolation.level=read_committed (an aborted "
            "transaction's records left out)",
            style="dim", soft_wrap=True, markup=False, highlight=False,
        )  # fmt: skip
        console.print(QUERY.strip(), style="dim", soft_wrap=True, markup=False, highlight=False)
        rows = spark.sql(QUERY).collect()
    finally:
        if ours:
            spark.stop()
    table = _table(*(rows[0].__fields__ if rows else ["result"]))
    for row in rows:
        table.add_row(*(f"{v:,}" if isinstance(v, int) else str(v) for v in row))
    console.print(table)
    # a consumer's count: data records, less control records and the aborted transaction
    expected = 0
    for seg in segments:
        batch = decode_batches(seg.log.read_bytes())
        data = [not c for c in batch.column("is_control").to_pylist()]
        expected += sum(data)
    aborted = sum(1 for _ in _aborted_records(segments))
    ok = len(rows) == 2 and all(r["records"] == expected - aborted for r in rows)
    console.print(f"Spark read every committed record of both topics: {_mark(ok)}")
    return 0 if ok else 1


def _aborted_records(segments: list):  # type: ignore[no-untyped-def,type-arg]
    """Offsets of records in aborted transactions, from the segments' own transaction indexes."""
    from segment_format import TransactionIndex
    from segment_format.columnar import decode_batches

    for seg in segments:
        if seg.transaction_index is None:
            continue
        batch = decode_batches(seg.log.read_bytes())
        for txn in TransactionIndex.read(seg.transaction_index):
            for off, pid, txnl, ctrl in zip(
                batch.column("offset").to_pylist(),
                batch.column("producer_id").to_pylist(),
                batch.column("is_transactional").to_pylist(),
                batch.column("is_control").to_pylist(),
                strict=True,
            ):
                if (
                    txnl
                    and not ctrl
                    and pid == txn.producer_id
                    and txn.first_offset <= off <= txn.last_offset
                ):
                    yield off


def _table(*columns: str) -> Table:
    """A table whose cells fold onto more lines rather than being cut (a name is never shortened)."""
    table = Table()
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _mark(ok: bool, good: str = "yes") -> str:
    return f"[green]{good}" if ok else "[bold red]NO"
