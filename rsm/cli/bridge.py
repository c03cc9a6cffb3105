"""`rsm bridge serve` (the bridge process) and `rsm bridge build-plugin` (the broker's jar)."""

from __future__ import annotations

import argparse
import logging
import shutil
import subprocess
import sys
from pathlib import Path

log = logging.getLogger(__name__)

JVM_DIR = Path(__file__).resolve().parent.parent / "bridge" / "jvm"
JAR_NAME = "rsm-bridge-plugin.jar"


def serve_command(config: Path, socket: Path | None = None, *extra: str) -> list[str]:
    """`rsm bridge serve` run by this interpreter (so it sees the same packages): for tests, benchmarks and
    supervisors that start a bridge themselves."""
    cmd = [sys.executable, "-m", "rsm.cli.main", "bridge", "serve", "--config", str(config)]
    if socket is not None:
        cmd += ["--socket", str(socket)]
    return [*cmd, *extra]


def plugin_jar_path(jvm_dir: Path = JVM_DIR) -> Path:
    """Where `mvn package` leaves the plugin jar."""
    return jvm_dir / "target" / JAR_NAME


def plugin_jar_is_fresh(jvm_dir: Path = JVM_DIR) -> bool:
    """True when the jar exists and is newer than pom.xml and every Java source (tests' included)."""
    jar = plugin_jar_path(jvm_dir)
    if not jar.exists():
        return False
    built = jar.stat().st_mtime
    sources = [jvm_dir / "pom.xml", *(jvm_dir / "src").rglob("*")]
    return all(p.stat().st_mtime <= built for p in sources if p.is_file())


def build_plugin(jvm_dir: Path = JVM_DIR, force: bool = False) -> Path:
    """Build the plugin jar with Maven (skipped when fresh); returns its path."""
    jar = plugin_jar_path(jvm_dir)
    if not force and plugin_jar_is_fresh(jvm_dir):
        return jar
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Maven (mvn) is not on PATH; install Maven 3.8+ and a JDK 17+ to build the plugin")
    # `package` alone keeps an up-to-date jar as it is: --force cleans first, so it really rebuilds
    goals = ["clean", "package"] if force else ["package"]
    cmd = [mvn, "-B", "-q", "-f", str(jvm_dir / "pom.xml"), *goals, "-DskipTests"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(
            f"`{' '.join(cmd)}` failed ({result.returncode}):\n{result.stdout[-4000:]}{result.stderr[-4000:]}"
        )
    if not jar.exists():
        raise RuntimeError(f"Maven succeeded but {jar} is missing")
    return jar


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
    try:
        jar = build_plugin(force=args.force)
    except RuntimeError as exc:
        print(f"rsm bridge build-plugin: {exc}", file=sys.stderr)
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

    build_p = sub.add_parser("build-plugin", help="build the JVM plugin jar with Maven and print its path")
    build_p.add_argument("--force", action="store_true", help="rebuild even when the jar is up to date")
    build_p.set_defaults(func=_build)
