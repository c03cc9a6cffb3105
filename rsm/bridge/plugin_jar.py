"""The broker plugin's jar: shipped prebuilt in a wheel, or built from `rsm/bridge/jvm` with Maven.

An installed wheel carries the jar (`rsm/bridge/lib/rsm-bridge-plugin.jar`, built when the wheel was,
setup.py), so an operator needs no Maven: `rsm bridge plugin-path` prints it for the broker's
`remote.log.storage.manager.class.path`. A checkout (or an editable install) has no packaged jar and
builds one on demand with Maven into `rsm/bridge/jvm/target/`, rebuilt when a source is newer.

setup.py loads this file by its path while building a wheel, where the package's dependencies may be
missing: the standard library only.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
JVM_DIR = HERE / "jvm"
JAR_NAME = "rsm-bridge-plugin.jar"
PACKAGED_JAR = HERE / "lib" / JAR_NAME


class PluginJarError(RuntimeError):
    """The plugin jar cannot be built or found here: the message says what is missing."""


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


def packaged_jar() -> Path | None:
    """The wheel's prebuilt jar, if this installation has one."""
    return PACKAGED_JAR if PACKAGED_JAR.is_file() else None


def build_plugin(jvm_dir: Path | None = None, force: bool = False) -> Path:
    """Build the plugin jar with Maven (skipped when fresh); returns its path."""
    jvm_dir = jvm_dir or JVM_DIR
    jar = plugin_jar_path(jvm_dir)
    if not (jvm_dir / "pom.xml").is_file():
        raise PluginJarError(
            f"the broker plugin jar is not packaged here ({PACKAGED_JAR}) and its Maven project is not here "
            f"to build it ({jvm_dir / 'pom.xml'}): install a kafka-tiered-rsm wheel, or use a source checkout"
        )
    if not force and plugin_jar_is_fresh(jvm_dir):
        return jar
    mvn = shutil.which("mvn")
    if mvn is None:
        raise PluginJarError(
            "Maven (mvn) is not on PATH; install Maven 3.8+ and a JDK 17+ to build the plugin"
        )
    # `package` alone keeps an up-to-date jar as it is: --force cleans first, so it really rebuilds
    goals = ["clean", "package"] if force else ["package"]
    cmd = [mvn, "-B", "-q", "-f", str(jvm_dir / "pom.xml"), *goals, "-DskipTests"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise PluginJarError(
            f"`{' '.join(cmd)}` failed ({result.returncode}):\n{result.stdout[-4000:]}{result.stderr[-4000:]}"
        )
    if not jar.exists():
        raise PluginJarError(f"Maven succeeded but {jar} is missing")
    return jar


def plugin_path() -> Path:
    """The jar a broker loads: the packaged one, else the checkout's, built first if needed."""
    return packaged_jar() or build_plugin()
