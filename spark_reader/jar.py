"""The columnar scan's jar: shipped prebuilt in a wheel, or built from `spark_reader/jvm` with `javac`.

    spark = SparkSession.builder.config("spark.jars", spark_reader.jar_path()).getOrCreate()
    spark-submit --jars "$(rsm spark jar)" app.py

An installed wheel carries the jar (`spark_reader/lib/kafka-tiered-spark.jar`, built when the wheel was,
setup.py), so users need no JDK compiler: it is used as it is, unless it was compiled for another Spark
line (major.minor) than the pyspark running here, which is said in one line (`SparkLineMismatch`).

A checkout (or an editable install) has no packaged jar and builds one on demand: `javac` against
pyspark's own jars. Why not Maven: the jar must match the Spark it runs in, and the installed pyspark is
that Spark, jars included; compiling against them needs no download, no repository and no Maven, only a
JDK 17+ (Spark already needs Java). The jar holds only the thin JVM shell (no dependencies are bundled:
Arrow, Jackson and Spark are on every Spark class path). Its name carries a hash of its sources, so an
edited checkout builds afresh and a stale jar is never used; it goes to `spark_reader/jvm/target/`, or to
the user's cache directory when that is read-only.

setup.py loads this file by its path while building a wheel, where the package's dependencies may be
missing: the standard library only, and pyspark is found without importing it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

JVM_DIR = Path(__file__).with_name("jvm")
SOURCES = JVM_DIR / "src" / "main"
JAR_STEM = "kafka-tiered-spark"
PACKAGED_JAR = Path(__file__).with_name("lib") / f"{JAR_STEM}.jar"
SPARK_VERSION_ATTRIBUTE = "Spark-Version"  # in the jar's manifest: the Spark it was compiled against
STALE_AFTER_S = 86400


class JarBuildError(RuntimeError):
    """The jar cannot be built or used here: the message says what is missing."""


class SparkLineMismatch(JarBuildError):
    """The packaged jar was compiled for another Spark line than the running pyspark's."""


def _sources() -> list[Path]:
    return sorted(p for p in SOURCES.rglob("*") if p.is_file())


def _interpreters_pyspark() -> Path | None:
    """Where this interpreter imports pyspark from when nothing hides it: pip's isolated wheel build runs
    the very interpreter the wheel is built for, with its site-packages hidden from imports."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
    code = "import importlib.util as u; s = u.find_spec('pyspark'); print(s.origin if s else '')"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    origin = done.stdout.strip() if done.returncode == 0 else ""
    return Path(origin).parent if origin else None


def spark_jars_dir() -> Path:
    """pyspark's `jars/`: the importable pyspark's, else the one this interpreter has when nothing hides
    it (a wheel built in pip's isolated environment), else `$SPARK_HOME/jars`."""
    spec = importlib.util.find_spec("pyspark")
    home = Path(spec.origin).parent if spec is not None and spec.origin else _interpreters_pyspark()
    candidates = [home / "jars"] if home is not None else []
    if os.environ.get("SPARK_HOME"):
        candidates.append(Path(os.environ["SPARK_HOME"]) / "jars")
    for jars in candidates:
        if jars.is_dir():
            return jars
    raise JarBuildError(
        "no Spark jars to compile the kafka-tiered scan against: install pyspark where the build runs, "
        "or point SPARK_HOME at a Spark distribution"
    )


def spark_version(jars: Path) -> str:
    """The Spark version of a `jars/` directory, from its spark-core jar's name."""
    for core in jars.glob("spark-core_*-*.jar"):
        return core.stem.rsplit("-", 1)[1]
    raise JarBuildError(f"{jars} holds no spark-core jar: not a Spark distribution's jars directory")


def source_hash() -> str:
    """A hash of the JVM sources and of the Spark they compile against."""
    h = hashlib.sha256(spark_version(spark_jars_dir()).encode())
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


def _javac() -> str:
    for candidate in (
        os.path.join(os.environ["JAVA_HOME"], "bin", "javac") if os.environ.get("JAVA_HOME") else None,
        shutil.which("javac"),
    ):
        if candidate and os.path.exists(candidate):
            return candidate
    raise JarBuildError("building the kafka-tiered jar needs a JDK 17+ (javac on the PATH or in JAVA_HOME)")


def _neither_jar_nor_sources() -> JarBuildError:
    return JarBuildError(
        f"the kafka-tiered scan jar is not packaged here ({PACKAGED_JAR}) and its Java sources are not "
        f"here to build it ({SOURCES}): install a kafka-tiered-rsm wheel, or use a source checkout"
    )


def build(out: Path) -> Path:
    """Compile the sources into the jar `out` (written atomically), its manifest naming the Spark version."""
    java_files = [str(p) for p in _sources() if p.suffix == ".java"]
    if not java_files:
        raise _neither_jar_nor_sources()
    javac = _javac()
    jars = spark_jars_dir()
    with tempfile.TemporaryDirectory(prefix="kafka-tiered-jar-") as tmp:
        classes = Path(tmp) / "classes"
        command = [javac, "--release", "17", "-nowarn", "-encoding", "UTF-8", "-d", str(classes),
                   "-cp", str(jars / "*"), *java_files]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode:
            raise JarBuildError(f"javac failed building the kafka-tiered jar:\n{done.stderr.strip()}")
        manifest = "Manifest-Version: 1.0\nCreated-By: kafka-tiered-rsm\n"
        manifest += f"{SPARK_VERSION_ATTRIBUTE}: {spark_version(jars)}\n"
        partial = out.with_suffix(f".{os.getpid()}.tmp")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", manifest)
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, str(path.relative_to(classes)))
            resources = SOURCES / "resources"
            for path in sorted(p for p in resources.rglob("*") if p.is_file()):
                jar.write(path, str(path.relative_to(resources)))
        os.replace(partial, out)
    return out


def built_for(jar: Path) -> str | None:
    """The Spark version a jar's manifest names (None when it names none)."""
    with zipfile.ZipFile(jar) as z:
        manifest = z.read("META-INF/MANIFEST.MF").decode()
    for line in manifest.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == SPARK_VERSION_ATTRIBUTE:
            return value.strip()
    return None


def running_spark_version() -> str:
    """The version of the pyspark this interpreter runs."""
    try:
        return importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        import pyspark  # a pyspark on the path without its metadata (SPARK_HOME/python)

        return pyspark.__version__


def _line(version: str) -> tuple[str, ...]:
    return tuple(version.split(".")[:2])


def packaged_jar() -> Path | None:
    """The wheel's prebuilt jar, if this installation has one and it fits the running Spark line."""
    if not PACKAGED_JAR.is_file():
        return None
    built, running = built_for(PACKAGED_JAR), running_spark_version()
    if built is not None and _line(built) != _line(running):
        raise SparkLineMismatch(
            f"the packaged kafka-tiered scan jar ({PACKAGED_JAR}) was built for Spark {built} and this "
            f"pyspark is {running}: Spark {'.'.join(_line(running))} needs a kafka-tiered-rsm wheel built "
            f"against it (pip wheel from a source checkout with that pyspark installed)"
        )
    return PACKAGED_JAR


def jar_path(*, build_if_missing: bool = True, on_build: Callable[[str], None] | None = None) -> str:
    """The path of the columnar scan's jar: the packaged one, else the one built for this checkout and
    this pyspark, built first if needed (`on_build(path)` is told before a build starts: it takes a while)."""
    packaged = packaged_jar()
    if packaged is not None:
        return str(packaged)
    if not _sources():
        raise _neither_jar_nor_sources()
    out = _out_dir() / f"{JAR_STEM}-{source_hash()}.jar"
    if not out.exists():
        if not build_if_missing:
            raise JarBuildError(f"the kafka-tiered jar is not built yet ({out})")
        _javac()  # no JDK: said before a build is announced
        if on_build is not None:
            on_build(str(out))
        build(out)
        # older sources' jars go after a day (a session started before the edit may still be loading one)
        for stale in out.parent.glob(f"{JAR_STEM}-*.jar"):
            if stale != out and time.time() - stale.stat().st_mtime > STALE_AFTER_S:
                stale.unlink(missing_ok=True)
    return str(out)
