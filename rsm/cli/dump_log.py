"""``rsm dump-log``: Kafka's ``kafka-dump-log`` (DumpLogSegments), built on :mod:`segment_format`.

Prints ``.log``, ``.index``, ``.timeindex``, ``.txnindex`` and producer ``.snapshot`` files with the
text, field names and order of Kafka's own tool (its flags too: ``--files a,b``, ``--print-data-log``,
``--deep-iteration``, ``--skip-record-metadata``, ``--verify-index-only``, ``--index-sanity-check``,
``--max-message-size``, ``--max-bytes``), payloads byte for byte; ``leader-epoch-checkpoint`` files as
``epoch: E startOffset: O`` lines. Ours on top: ``--verify`` checks every CRC, size and offset (index
entries against their ``.log``), says what it checked, and exits 1 on any corruption; ``--json`` prints
one JSON object per batch or entry; ``--max-payload N`` cuts keys and values (never cut by default).

A tiered segment is dumped from the store, through its manifest (the keyring decrypts it), and printed
as its local file would be: give the segment's ``.manifest`` (or any of its objects) in a file store, or
``--config server.properties --topic T --partition P --offset O`` (``--file-kind`` picks the log or one
of its indexes).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from rsm.cli.dump_files import dump_files
from rsm.store.layout import is_tiered_object

log = logging.getLogger(__name__)

UNSUPPORTED_DECODERS = (
    "offsets-decoder",
    "transaction-log-decoder",
    "cluster-metadata-decoder",
    "remote-log-metadata-decoder",
    "share-group-state-decoder",
)


def _non_negative(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {n}")
    return n


def _positive(text: str) -> int:
    n = _non_negative(text)
    if n == 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return n


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``dump-log`` subcommand."""
    parser = subparsers.add_parser(
        "dump-log",
        help="print Kafka log, index, snapshot and checkpoint files as kafka-dump-log does",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="*", type=str, metavar="FILE", help="files to dump")
    parser.add_argument("--files", help="Kafka's form: a comma-separated list of files")
    parser.add_argument(
        "--print-data-log", action="store_true", help="print every record's key and value (implies deep)"
    )
    parser.add_argument("--deep-iteration", action="store_true", help="print every record's metadata")
    parser.add_argument(
        "--skip-record-metadata", action="store_true", help="with --print-data-log: keys and values only"
    )
    parser.add_argument(
        "--verify-index-only", action="store_true", help="check index entries against the log, print none"
    )
    parser.add_argument(
        "--index-sanity-check", action="store_true", help="the broker's start-up check of index files"
    )
    parser.add_argument(
        "--max-message-size", type=_positive, default=5 * 1024 * 1024, help="largest batch (index checks)"
    )
    parser.add_argument(
        "--max-bytes", type=_non_negative, default=0x7FFFFFFF, help="read at most this many bytes of a log"
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="check CRCs, sizes and offsets, say what was checked; exit 1 on corruption",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per batch or entry")
    parser.add_argument(
        "--max-payload", type=_non_negative, default=None, help="cut keys and values to this many bytes"
    )
    for name in UNSUPPORTED_DECODERS:
        parser.add_argument(f"--{name}", action="store_true", help=argparse.SUPPRESS)
    for name in ("key-decoder-class", "value-decoder-class"):
        parser.add_argument(f"--{name}", nargs="?", const="", default=None, help=argparse.SUPPRESS)
    tiered = parser.add_argument_group("a tiered segment, from the store")
    tiered.add_argument("--config", type=Path, help="broker server.properties (its rsm.config.* keys)")
    tiered.add_argument("--topic", help="topic of the tiered segment")
    tiered.add_argument("--partition", type=_non_negative, help="partition of the tiered segment")
    tiered.add_argument("--offset", type=_non_negative, help="an offset the tiered segment holds")
    tiered.add_argument(
        "--topic-id", help="topic id (Kafka base64 or UUID) when several topics share the name"
    )
    tiered.add_argument("--keyring", help="keyring file of an encrypted segment (else from --config)")
    tiered.add_argument(
        "--file-kind",
        choices=("log", "index", "timeindex", "txnindex", "snapshot", "leader-epoch-checkpoint"),
        default="log",
        help="which of the tiered segment's files to dump (default log)",
    )
    parser.set_defaults(func=run)


def _files(args: argparse.Namespace) -> list[str]:
    files = list(args.paths)
    if args.files:
        files += [f for f in args.files.split(",") if f]
    return files


def run(args: argparse.Namespace) -> int:
    """Dump every file; 1 when any file cannot be read (with --verify, also on any corruption)."""

    err = sys.stderr
    used = [f"--{n}" for n in UNSUPPORTED_DECODERS if getattr(args, n.replace("-", "_"))]
    used += [
        f"--{n}"
        for n in ("key-decoder-class", "value-decoder-class")
        if getattr(args, n.replace("-", "_")) is not None
    ]
    if used:
        err.write(
            f"rsm dump-log: {used[0]} is not supported (payloads are printed as Kafka's default StringDecoder "
            "prints them); use Kafka's kafka-dump-log for decoded coordinator or metadata records\n"
        )
        return 2
    files = _files(args)
    if not files and (args.config or args.topic or args.offset is not None or args.partition is not None):
        from rsm.cli.dump_tiered import run_tiered  # the store only for a stored segment

        return run_tiered(args)
    if not files:
        err.write("rsm dump-log: give the files to dump (FILE... or --files a,b), or --config with --topic, "
                  "--partition and --offset for a tiered segment\n")  # fmt: skip
        return 2
    if any(is_tiered_object(f) for f in files):
        from rsm.cli.dump_tiered import run_tiered_objects

        return run_tiered_objects(args, files)
    return dump_files(args, files)
