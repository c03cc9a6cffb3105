"""Build hooks; all metadata lives in pyproject.toml.

- the compiled columnar kernel (`segment_format._native`);
- a wheel's two jars, prebuilt so that its users need neither Maven nor a JDK compiler: the broker
  plugin (Maven, `rsm/bridge/jvm/pom.xml`) and the Spark columnar scan (`javac` against the jars of the
  pyspark the building interpreter has, which pip's isolated build hides from imports only; else
  `$SPARK_HOME/jars`). pyspark is no build requirement: ~450 MB in every isolated build, and the newest on
  PyPI rather than the Spark line the wheel is meant for (the jar's manifest names it; `rsm spark jar`
  refuses another line in one line).
  An editable install skips them: a checkout builds its jars on demand (`rsm bridge build-plugin`,
  `rsm spark jar`). A jar that cannot be built fails the wheel with one line, the tools' output in a log.
"""

import importlib.util
import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py
from setuptools.errors import SetupError

HERE = Path(__file__).resolve().parent


def _builder(relative: str):  # noqa: ANN202 - a module loaded by its path
    """The jar's own module, loaded by path: importing its package would need the runtime dependencies."""
    spec = importlib.util.spec_from_file_location(Path(relative).stem, HERE / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithJars(build_py):
    """build_py, then the jars into the build tree as package data (`*/lib/*.jar`)."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        lib = Path(self.build_lib)
        plugin, scan = _builder("rsm/bridge/plugin_jar.py"), _builder("spark_reader/jar.py")
        try:
            (lib / "rsm/bridge/lib").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(plugin.build_plugin(force=True), lib / "rsm/bridge/lib" / plugin.JAR_NAME)
            (lib / "spark_reader/lib").mkdir(parents=True, exist_ok=True)
            scan.build(lib / "spark_reader/lib" / scan.PACKAGED_JAR.name)
        except (OSError, RuntimeError) as exc:
            log = Path(self.get_finalized_command("build").build_temp).resolve() / "jars.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(f"{exc}\n")
            first = str(exc).splitlines()[0]
            raise SetupError(f"building the wheel's jars failed: {first} (see {log})") from None


setup(
    cmdclass={"build_py": BuildPyWithJars},
    ext_modules=[
        Extension(
            "segment_format._native",
            sources=["segment_format/_native.c"],
            extra_compile_args=["-O3", "-std=c11"],
        )
    ],
)
