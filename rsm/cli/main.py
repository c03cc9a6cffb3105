"""Entry point of the `rsm` console script.

Subcommands live in their own modules and register themselves, so the CLI grows with the product
without this file knowing what each command does. Only the module of the command being run is imported
(`rsm dump-log` does not pay for the S3 client); `rsm --help` imports them all.

A mistake is one line on stderr naming the command, never a traceback: every error is caught here and
described (missing S3 credentials, a path that is a file, a refused configuration...); `--debug` shows
the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import re
import sys
from typing import Any, NoReturn

from rsm.config.redact import install_log_redaction

# command name -> module under rsm.cli; each exposes register(subparsers) which sets `func` on its parser
SUBCOMMANDS = {
    "quickstart": "quickstart",
    "dump-log": "dump_log",
    "bridge": "bridge",
    "topic-config": "topic_config",
    "store": "store",
    "keyring": "keyring",
    "migrate": "migrate",
    "spark": "spark",
}
SUBCOMMAND_MODULES = tuple(SUBCOMMANDS.values())
OWN_LOGGERS = ("rsm", "spark_reader", "segment_format")  # what --debug turns to DEBUG


def version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as dist_version

        return dist_version("kafka-tiered-rsm")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "0.1.0+checkout"


def _chosen(argv: list[str]) -> str | None:
    """The subcommand named on the command line (the first word that is not an option), if any."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg if arg in SUBCOMMANDS else None
    return None


_ROLE = re.compile(r":(?:mod|class|func|meth|attr|data|exc):`([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def plain_text(doc: str | None) -> str | None:
    """A docstring as help text: Sphinx roles and double backquotes (``x``, :mod:`x`) as `x`."""
    if doc is None:
        return None
    return _LITERAL.sub(r"`\1`", _ROLE.sub(r"`\1`", doc))


class Parser(argparse.ArgumentParser):
    """argparse, but a bad command line is one line: what is wrong, and where help is; descriptions
    (the commands' docstrings) shown without their markup."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if "description" in kwargs:
            kwargs["description"] = plain_text(kwargs["description"])
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    parser = Parser(prog="rsm", description="Python tiered storage for Apache Kafka")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an error instead of one line"
    )
    parser.add_argument("--version", action="version", version=f"rsm (kafka-tiered-rsm) {version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = _chosen(argv) if argv is not None else None
    for name, module_name in SUBCOMMANDS.items():
        if chosen is not None and name != chosen:
            continue
        try:
            module = importlib.import_module(f"rsm.cli.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"rsm.cli.{module_name}":
                raise
            continue
        module.register(subparsers)
    return parser


# S3's answers to credentials it does not take (botocore's message, as s3fs passes it on)
_REFUSED_CREDENTIALS = (
    "Access Key Id you provided does not exist",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "request signature we calculated does not match",
    "security token included in the request is invalid",
    "ExpiredToken",
)
# an endpoint nobody answers at (botocore, aiohttp)
_UNREACHABLE = frozenset({"EndpointConnectionError", "ConnectTimeoutError", "ClientConnectorError"})


def describe_error(exc: BaseException) -> str:
    """One line saying what went wrong, for an operator (no traceback, no secrets)."""
    name = type(exc).__name__
    module = type(exc).__module__ or ""
    if name == "NoCredentialsError" or (name == "PartialCredentialsError" and module.startswith("botocore")):
        return (
            "no S3 credentials found: set rsm.config.storage.s3.access.key.id and "
            "rsm.config.storage.s3.secret.access.key, or AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, "
            "or an AWS profile or instance role"
        )
    if isinstance(exc, OSError) and exc.strerror:
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror}"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if any(marker in text for marker in _REFUSED_CREDENTIALS):
        return (
            f"S3 refused the credentials ({text}): check rsm.config.storage.s3.access.key.id and "
            "rsm.config.storage.s3.secret.access.key, or the AWS default chain (AWS_ACCESS_KEY_ID / "
            "AWS_SECRET_ACCESS_KEY, a profile, an instance role)"
        )
    if name in _UNREACHABLE:
        setting = (
            "rsm.config.storage.s3.endpoint.url"
            if module.startswith("botocore")
            else "rsm.config.storage.gcs.endpoint.url or storage.azure.endpoint.url"
        )
        return f"cannot reach the store: {text} (check {setting}, and that the service runs there)"
    return f"{name}: {text}" if text and not isinstance(exc, RuntimeError | ValueError) else (text or name)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not complain of the closed pipe."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(raw)
    args = parser.parse_args(raw)
    # -v / -vv: every library's log; --debug: tracebacks and our own DEBUG lines, not every SDK's wire log
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # restored on return: `main` also runs inside other programs (tests, a notebook), whose logging it borrows
    previous = {name: logging.getLogger(name).level for name in OWN_LOGGERS}
    if args.debug:
        for name in OWN_LOGGERS:
            logging.getLogger(name).setLevel(logging.DEBUG)
    install_log_redaction()  # -vv turns botocore's DEBUG on, which shows tokens and signatures
    try:
        return _run(parser, args)
    finally:
        for name, was in previous.items():
            logging.getLogger(name).setLevel(was)


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """The chosen command, its errors as one line (a traceback with --debug)."""
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `rsm dump-log ... | head`: the reader has all it wanted
        _quiet_stdout()
        return 141
    except Exception as exc:
        if args.debug:
            raise
        from rsm.api.errors import ConfigException, RemoteStorageException

        cause = exc
        # the RSM wraps storage errors: say what is underneath (e.g. missing S3 credentials)
        while isinstance(cause, RemoteStorageException | ConfigException) and cause.__cause__ is not None:
            cause = cause.__cause__
        message = describe_error(cause) if cause is not exc else describe_error(exc)
        sys.stderr.write(f"rsm {args.command}: {message} (--debug shows the traceback)\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
