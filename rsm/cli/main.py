"""Entry point of the `rsm` console script.

Subcommands live in their own modules and register themselves, so the CLI grows with the product
without this file knowing what each command does.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from rsm.redact import install_log_redaction

# module name under rsm.cli -> each exposes register(subparsers) which sets `func` on its parser
SUBCOMMAND_MODULES = ("quickstart", "dump_log", "bridge", "topic_config")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rsm", description="Python tiered storage for Apache Kafka")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(f"rsm.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"rsm.cli.{name}":
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    install_log_redaction()  # -vv turns botocore's DEBUG on, which shows tokens and signatures
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
