"""The columnar scan's jar: built from `spark_reader/jvm` with `javac` against pyspark's own jars.

    spark = SparkSession.builder.config("spark.jars", spark_reader.jar_path()).getOrCreate()
    spark-submit --jars "$(rsm spark jar)" app.py

Why javac against `pyspark/jars` rather than Maven: the jar must match the Spark it runs in, and the
installed pyspark is that Spark (4.3 here), jars included; compiling against them needs no download, no
repository and no Maven, only a JDK 17+ (Spark already needs Java). The jar holds only the thin JVM shell
(no dependencies are bundled: Arrow, Jackson and Spark are on every Spark class path).

The jar's name carries a hash of its sources, so an edited checkout builds afresh and a stale jar is
never used. It goes to `spark_reader/jvm/target/` in a checkout, or to the user's cache directory when the
package's directory is read-only (an installed wheel).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

JVM_DIR = Path(__file__).with_name("jvm")
SOURCES = JVM_DIR / "src" / "main"
JAR_STEM = "kafka-tiered-spark"
STALE_AFTER_S = 86400


class JarBuildError(RuntimeError):
    """The jar cannot be built here: the message says what is missing."""


def _sources() -> list[Path]:
    return sorted(p for p in SOURCES.rglob("*") if p.is_file())


def source_hash() -> str:
    """A hash of the JVM sources and of the Spark they compile against."""
    import pyspark

    h = hashlib.sha256(pyspark.__version__.encode())
    for path in _sources():
        h.update(str(path.relative_to(SOURCES)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def _out_dir() -> Path:
    target = JVM_DIR / "target"
    try:
        target.mkdir(exist_ok=True)
        if os.access(target, os.W_OK):
            return target
    except OSError:
        pass
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kafka-tiered-rsm"
    cache.mkdir(parents=True, exist_ok=True)
    return cache


def spark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def _javac() -> str:
    for candidate in (
        os.path.join(os.environ["JAVA_HOME"], "bin", "javac") if os.environ.get("JAVA_HOME") else None,
        shutil.which("javac"),
    ):
        if candidate and os.path.exists(candidate):
            return candidate
    raise JarBuildError("building the kafka-tiered jar needs a JDK 17+ (javac on the PATH or in JAVA_HOME)")


def build(out: Path) -> Path:
    """Compile the sources into the jar `out` (written atomically)."""
    javac = _javac()
    java_files = [str(p) for p in _sources() if p.suffix == ".java"]
    with tempfile.TemporaryDirectory(prefix="kafka-tiered-jar-") as tmp:
        classes = Path(tmp) / "classes"
        command = [javac, "--release", "17", "-nowarn", "-encoding", "UTF-8", "-d", str(classes),
                   "-cp", str(spark_jars_dir() / "*"), *java_files]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode:
            raise JarBuildError(f"javac failed building the kafka-tiered jar:\n{done.stderr.strip()}")
        partial = out.with_suffix(f".{os.getpid()}.tmp")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: kafka-tiered-rsm\n")
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, str(path.relative_to(classes)))
            resources = SOURCES / "resources"
            for path in sorted(p for p in resources.rglob("*") if p.is_file()):
                jar.write(path, str(path.relative_to(resources)))
        os.replace(partial, out)
    return out


def jar_path(*, build_if_missing: bool = True, on_build: Callable[[str], None] | None = None) -> str:
    """The path of the columnar scan's jar for this checkout and this pyspark, built first if needed
    (`on_build(path)` is told before a build starts: it takes a while)."""
    out = _out_dir() / f"{JAR_STEM}-{source_hash()}.jar"
    if not out.exists():
        if not build_if_missing:
            raise JarBuildError(f"the kafka-tiered jar is not built yet ({out})")
        if on_build is not None:
            on_build(str(out))
        build(out)
        # older sources' jars go after a day (a session started before the edit may still be loading one)
        for stale in out.parent.glob(f"{JAR_STEM}-*.jar"):
            if stale != out and time.time() - stale.stat().st_mtime > STALE_AFTER_S:
                stale.unlink(missing_ok=True)
    return str(out)
