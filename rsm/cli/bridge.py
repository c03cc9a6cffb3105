"""`rsm bridge serve` (the bridge process), `rsm bridge plugin-path` and `build-plugin` (the broker's jar).

The jar's whereabouts are `rsm.bridge.plugin_jar`'s: shipped in a wheel, built with Maven in a checkout.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from rsm.bridge.plugin_jar import (  # noqa: F401 - the jar's helpers, as tests and tools import them
    JAR_NAME,
    JVM_DIR,
    build_plugin,
    packaged_jar,
    plugin_jar_is_fresh,
    plugin_jar_path,
    plugin_path,
)

log = logging.getLogger(__name__)


def serve_command(config: Path, socket: Path | None = None, *extra: str) -> list[str]:
    """`rsm bridge serve` run by this interpreter (so it sees the same packages): for tests, benchmarks and
    supervisors that start a bridge themselves."""
    cmd = [sys.executable, "-m", "rsm.cli.main", "bridge", "serve", "--config", str(config)]
    if socket is not None:
        cmd += ["--socket", str(socket)]
    return [*cmd, *extra]


def _serve(args: argparse.Namespace) -> int:
    from rsm.bridge.serve import serve

    try:
        return serve(
            Path(args.config),
            Path(args.socket) if args.socket else None,
            rsm_class=args.rsm_class,
            parent_pid=args.parent_pid,
        )
    except (ValueError, ImportError, AttributeError) as exc:
        print(f"rsm bridge serve: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - e.g. the RSM refusing its configuration: one clear line
        from rsm.api.errors import RemoteStorageException

        if not isinstance(exc, RemoteStorageException):
            raise
        print(f"rsm bridge serve: cannot configure the RemoteStorageManager: {exc}", file=sys.stderr)
        return 2


def _build(args: argparse.Namespace) -> int:
    packaged = packaged_jar()
    if packaged is not None:  # an installed wheel: nothing to build, and no sources to build from
        print(f"rsm bridge build-plugin: the plugin ships prebuilt at {packaged}", file=sys.stderr)
        sys.stdout.write(f"{packaged}\n")
        return 0
    try:
        jar = build_plugin(force=args.force)
    except RuntimeError as exc:
        print(f"rsm bridge build-plugin: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(f"{jar}\n")
    return 0


def _plugin_path(_args: argparse.Namespace) -> int:
    try:
        jar = plugin_path()
    except RuntimeError as exc:
        print(f"rsm bridge plugin-path: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(f"{jar}\n")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bridge", help="the broker bridge: serve the RSM to the JVM plugin")
    sub = parser.add_subparsers(dest="bridge_command", metavar="SUBCOMMAND")
    parser.set_defaults(func=lambda _args: (parser.print_help(), 2)[1])

    serve_p = sub.add_parser("serve", help="host one RemoteStorageManager on a Unix domain socket")
    serve_p.add_argument("--config", required=True, help="broker server.properties (its rsm.config.* lines)")
    serve_p.add_argument("--socket", help="socket path (default: rsm.config.bridge.socket.path)")
    serve_p.add_argument("--rsm-class", help="module:Class to host instead of rsm.RemoteStorageManager")
    serve_p.add_argument(
        "--parent-pid", type=int, default=None, help="exit when this process (the broker) is gone"
    )
    serve_p.set_defaults(func=_serve)

    path_p = sub.add_parser(
        "plugin-path",
        help="print the plugin jar's path for the broker's remote.log.storage.manager.class.path "
        "(the wheel's prebuilt jar; in a checkout, built with Maven first if needed)",
    )
    path_p.set_defaults(func=_plugin_path)

    build_p = sub.add_parser("build-plugin", help="build the JVM plugin jar with Maven and print its path")
    build_p.add_argument("--force", action="store_true", help="rebuild even when the jar is up to date")
    build_p.set_defaults(func=_build)
