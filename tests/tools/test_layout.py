"""The layout holds: dependencies point one way, no module imports another that imports it back, no module
grows into a room, and the RemoteStorageManager stays the contract (README's "Layout").

Imports are read from the source (every `import` and `from ... import`, those inside functions and under
`TYPE_CHECKING` too: a circle that only type checkers see is still a circle for the reader).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("segment_format", "rsm", "spark_reader")
MAX_LINES = 640  # "about 600": a module past it does two jobs
MAX_MANAGER_LINES = 300

# what each part may not import (a prefix forbids the package and everything under it)
FORBIDDEN = {
    "segment_format": ("rsm", "spark_reader"),
    # the stored format: what copy writes and everything else reads, so it imports none of them
    "rsm.stored": (
        *("rsm.copy", "rsm.fetch", "rsm.store", "rsm.catalog", "rsm.migrate", "rsm.bridge", "rsm.cli"),
        *("rsm.validation", "rsm.metrics", "rsm.policy", "rsm.manager", "rsm.state", "spark_reader"),
    ),
    # the RSM's core: the jobs the RemoteStorageManager delegates to
    "rsm.api": ("rsm.catalog", "rsm.migrate", "rsm.bridge", "rsm.cli", "spark_reader"),
    "rsm.config": ("rsm.catalog", "rsm.migrate", "rsm.bridge", "rsm.cli", "spark_reader"),
    "rsm.store": ("rsm.catalog", "rsm.migrate", "rsm.bridge", "rsm.cli", "spark_reader"),
    "rsm.copy": ("rsm.catalog", "rsm.migrate", "rsm.bridge", "rsm.cli", "spark_reader"),
    "rsm.fetch": ("rsm.catalog", "rsm.migrate", "rsm.bridge", "rsm.cli", "spark_reader"),
    "rsm.validation": ("rsm.catalog", "rsm.migrate", "rsm.bridge", "rsm.cli", "spark_reader"),
    "rsm.metrics": ("rsm.catalog", "rsm.migrate", "rsm.bridge", "rsm.cli", "spark_reader"),
    "rsm.policy": ("rsm.catalog", "rsm.migrate", "rsm.bridge", "rsm.cli", "spark_reader"),
    "rsm.manager": ("rsm.catalog", "rsm.migrate", "rsm.bridge", "rsm.cli", "spark_reader"),
    "rsm.state": ("rsm.catalog", "rsm.migrate", "rsm.bridge", "rsm.cli", "spark_reader"),
    # what configure decides and what it builds: below the jobs that use them and the state that holds them
    "rsm.broker_settings": (
        *("rsm.catalog", "rsm.migrate", "rsm.bridge", "rsm.cli", "spark_reader"),
        *("rsm.services", "rsm.copy", "rsm.fetch", "rsm.state", "rsm.manager"),
    ),
    "rsm.services": (
        *("rsm.catalog", "rsm.migrate", "rsm.bridge", "rsm.cli", "spark_reader"),
        *("rsm.copy", "rsm.fetch", "rsm.state", "rsm.manager"),
    ),
    # above the core
    "rsm.catalog": ("rsm.migrate", "rsm.bridge", "rsm.cli", "spark_reader"),
    "rsm.migrate": ("rsm.bridge", "rsm.cli"),
    "spark_reader": ("rsm.bridge", "rsm.cli", "rsm.migrate"),
}


def modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def imports(name: str, path: Path) -> set[str]:
    """Every module `name` imports (`from a import b` counts `a`, and `a.b` when that is a module)."""
    out: set[str] = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            out.add(module)
            out.update(f"{module}.{alias.name}" for alias in node.names)
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    found = dict(modules())
    edges = {}
    for name, path in found.items():
        # a module's own ancestors are packages it lives in, not dependencies (their __init__ runs first)
        edges[name] = {
            m for m in imports(name, path) if m in found and m != name and not name.startswith(m + ".")
        }
    return edges


def test_no_module_imports_one_that_imports_it_back(graph: dict[str, set[str]]) -> None:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert circles == []


def test_dependencies_point_one_way(graph: dict[str, set[str]]) -> None:
    wrong = []
    for module, targets in sorted(graph.items()):
        for part, forbidden in FORBIDDEN.items():
            if module == part or module.startswith(part + "."):
                wrong += [
                    f"{module} imports {t}"
                    for t in sorted(targets)
                    for f in forbidden
                    if t == f or t.startswith(f + ".")
                ]
    assert wrong == []


def test_no_module_grows_into_a_room() -> None:
    sizes = {name: len(path.read_text().splitlines()) for name, path in modules()}
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
    assert sizes["rsm.manager"] <= MAX_MANAGER_LINES


# Functions and classes past these do more than one job.
MAX_FUNCTION_LINES = 100
MAX_CLASS_LINES = 400
LONG_ALLOWED: set[str] = set()  # none: a function or class past its limit is split where it grew


def _definitions(path: Path) -> Iterator[tuple[str, ast.AST]]:
    """Every function and class of a module, nested ones too, named `Outer.inner`."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                yield prefix + child.name, child
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(ast.parse(path.read_text(), str(path)), "")


def test_no_function_or_class_does_several_jobs() -> None:
    long = []
    for _, path in modules():
        for name, node in _definitions(path):
            size = node.end_lineno - node.lineno + 1  # type: ignore[attr-defined]
            limit = MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES
            where = f"{path.relative_to(ROOT)}::{name}"
            if size > limit and where not in LONG_ALLOWED:
                long.append(f"{where}: {size} lines (at most {limit})")
    assert long == []


# Source says what a thing is, not which tracker entry or proposal file asked for it.
ISSUE_REFERENCE = re.compile(r"\b(?:issue|seed|defect)s? ?#?[0-9]+", re.IGNORECASE)
# documents that live outside the repository: a reader of the source cannot open them; the design is named by
# its path, ours (docs/) or the plan beside the checkout (../shared/, which the suite needs anyway)
OUTSIDE_DOCUMENTS = tuple(f"{name}.md" for name in ("FORMATS",))
LOOSE_DESIGN = re.compile(r"(?<!docs/)(?<!\.\./shared/)DESIGN\.md")
SOURCE_SUFFIXES = (".py", ".pyi", ".java", ".c", ".h", ".md")
SOURCE_TREES = (*PACKAGES, "pyspark_kafka_tiered.py", "tests", "benchmarks", "docs", "README.md")
BUILD_OUTPUT = {"target", "__pycache__", "build", "dist"}
# a file of the repository named in prose: `tests/rsm/test_catalog.py`, `docs/INTERNALS.md`
NAMED_PATH = re.compile(
    r"(?<![\w./-])((?:tests|rsm|docs|benchmarks|segment_format|spark_reader)/[\w./-]*\.(?:py|md|java))\b"
)


def source_files() -> Iterator[tuple[str, Path]]:
    """Every source and documentation file of the packages, tests, benchmarks and docs (no build output)."""
    for top in SOURCE_TREES:
        tree = ROOT / top
        for path in [tree] if tree.is_file() else sorted(tree.rglob("*")):
            rel = path.relative_to(ROOT)
            if path.suffix in SOURCE_SUFFIXES and path.is_file() and not BUILD_OUTPUT & set(rel.parts):
                yield rel.as_posix(), path


def test_no_issue_numbers_in_source() -> None:
    found = []
    for rel, path in source_files():
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if (
                ISSUE_REFERENCE.search(line)
                or LOOSE_DESIGN.search(line)
                or any(d in line for d in OUTSIDE_DOCUMENTS)
            ):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert found == []


def _names_a_file(named: str) -> bool:
    """`rsm/metrics.py` still names the module `rsm.metrics` when that became a package."""
    path = ROOT / named
    return path.exists() or (path.suffix == ".py" and (path.with_suffix("") / "__init__.py").is_file())


def test_files_named_in_source_exist() -> None:
    missing = []
    for rel, path in source_files():
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for named in NAMED_PATH.findall(line):
                if "*" not in named and not _names_a_file(named):
                    missing.append(f"{rel}:{n}: {named}")
    assert missing == []


# Modules no test imports by name, each with the tests that prove its behaviour anyway: the command line's
# parts (run through `rsm.cli.main` as an operator runs them), the bridge's and the Spark workers' (reached
# through their processes), and the steps a public entry point runs (proved through that entry point).
NOT_IMPORTED_BY_TESTS: dict[str, str] = {
    # the RemoteStorageManager's steps, proved through its operations
    "rsm.api.checks": (
        "its argument checks: refused through the RSM's operations in tests/rsm/test_api_types.py"
    ),
    "rsm.api.moved": "the old import paths it answers, each warning once: tests/rsm/test_public_api_paths.py",
    "rsm.copy.downgrade": "no silent downgrade of a copy: tests/rsm/test_no_silent_downgrade.py",
    "rsm.copy.pipeline": "the copy: every copy_log_segment_data, tests/rsm/test_rsm_roundtrip.py",
    "rsm.copy.upload": (
        "the copy's uploads: tests/rsm/test_rsm_roundtrip.py, against S3 in tests/store/test_s3_faults.py"
    ),
    "rsm.store.deletion": (
        "delete_log_segment_data: tests/rsm/test_rsm_roundtrip.py, tests/rsm/test_rsm_forward.py"
    ),
    "rsm.store.location_notes": "the locations the RSM records: tests/rsm/test_location_lifecycle.py",
    "rsm.store.log_starts": (
        "a partition's log-start marks: tests/rsm/test_hostile_paths.py, tests/rsm/test_holes.py"
    ),
    "rsm.store.listings": (
        "listings alike on every backend: tests/store/test_debris.py, tests/store/test_clouds_debris.py"
    ),
    "rsm.store.s3": (
        "the S3 store, against moto: tests/store/test_s3_faults.py, tests/store/test_s3_deadlines.py"
    ),
    "rsm.metrics.s3": (
        "S3 figures from botocore's events: tests/rsm/test_metrics.py, tests/broker/test_kafka_metrics_jmx.py"
    ),
    "rsm.policy.enforce": (
        "the RSM's use of the topic policy (copies refused, legal hold): tests/rsm/test_topic_policy.py"
    ),
    # the catalog's parts, proved through TopicCatalog
    "rsm.catalog.keys": "a partition's committed copies as listed: tests/rsm/test_catalog.py",
    "rsm.catalog.listing": "which copies a range lists, counted: tests/rsm/test_ranged_planning.py",
    "rsm.catalog.topic_listing": (
        "a topic's partitions listed for ranges, counted: tests/rsm/test_ranged_planning.py"
    ),
    "rsm.catalog.unreadable": (
        "locations the catalog cannot read, as verify reports them: tests/rsm/test_holes.py"
    ),
    # the bridge: a process the broker's JVM plugin talks to over its socket
    "rsm.bridge.serve": "`rsm bridge serve`, started by the JVM plugin: tests/broker/test_bridge_plugin.py",
    "rsm.bridge.connection": (
        "a connection the bridge serves: over its socket in tests/broker/test_bridge_server.py"
    ),
    "rsm.bridge.session": (
        "handshake and frames: tests/broker/test_bridge_server.py, tests/broker/test_bridge_hostile.py"
    ),
    "rsm.bridge.operations": (
        "operations over the socket: tests/broker/test_bridge_server.py, tests/broker/test_bridge_plugin.py"
    ),
    # the command line, run as an operator runs it
    "rsm.cli.options": (
        "--config and --json: tests/tools/test_store_cli.py, tests/tools/test_topic_config_cli.py"
    ),
    "rsm.cli.dump_files": "`rsm dump-log` of files on disk: tests/tools/test_dump_log.py",
    "rsm.cli.dump_tiered": "`rsm dump-log` of a tiered segment: tests/tools/test_dump_log.py",
    "rsm.cli.kafka_dump.control": (
        "control records' text, against Kafka's own tool: tests/tools/test_dump_log_kafka.py"
    ),
    "rsm.cli.kafka_dump.indexes": (
        "index and snapshot files' text, against Kafka's tool: tests/tools/test_dump_log_kafka.py"
    ),
    "rsm.cli.kafka_dump.log": (
        "a .log file's text, against Kafka's own tool: tests/tools/test_dump_log_kafka.py"
    ),
    "rsm.cli.keyring": "`rsm keyring new|add|list`: tests/tools/test_keyring_stays_owner_only.py",
    "rsm.cli.quickstart": (
        "`rsm quickstart`: tests/tools/test_quickstart.py, tests/tools/test_quickstart_output.py"
    ),
    "rsm.cli.spark": "`rsm spark jar` in README's spark-submit line: tests/spark/test_spark_sessions.py",
    "rsm.cli.store": "`rsm store`: tests/tools/test_store_cli.py",
    "rsm.cli.migrate": "`rsm migrate`'s command line: tests/migrate/test_migrate.py",
    "rsm.cli.migrate_catalog": "`rsm migrate catalog`: tests/rsm/test_catalog_home.py",
    "rsm.cli.migrate_cross": "`rsm migrate move --from-config`: tests/migrate/test_migrate_cross.py",
    "rsm.migrate.catalog_move": "`rsm migrate catalog`: tests/rsm/test_catalog_home.py",
    "rsm.migrate.cross_overlay": (
        "a cross-backend move's settings documents: tests/migrate/test_migrate_cross.py"
    ),
    "rsm.migrate.engines": (
        "--engine local: tests/migrate/test_migrate.py; --engine spark: tests/migrate/test_migrate_spark.py"
    ),
    "rsm.migrate.export": (
        "`rsm migrate export`: tests/migrate/test_migrate.py, tests/migrate/test_migrate_export_import.py"
    ),
    "rsm.migrate.import_": (
        "`rsm migrate import`: tests/migrate/test_migrate.py, tests/migrate/test_migrate_export_import.py"
    ),
    "rsm.migrate.findings": "what `rsm migrate verify` finds beyond segments: tests/rsm/test_holes.py",
    "rsm.migrate.journal": "a run killed at any moment resumes: tests/migrate/test_migrate_resume.py",
    "rsm.migrate.move": (
        "`rsm migrate move`: tests/migrate/test_migrate.py, tests/migrate/test_migrate_resume.py"
    ),
    "rsm.migrate.plan": "the plan `--dry-run` prints and a run follows: tests/migrate/test_migrate.py",
    "rsm.migrate.rekey": (
        "`rsm migrate rekey|reencrypt`: tests/migrate/test_migrate.py, tests/rsm/test_kms.py"
    ),
    "rsm.migrate.verify": "`rsm migrate verify`: tests/migrate/test_migrate.py, tests/rsm/test_holes.py",
    # the Spark source's parts, reached through Spark and its Python workers
    "spark_reader.jvm_worker": (
        "the columnar scan's Python worker, started by the jar: tests/spark/test_spark_columnar.py"
    ),
    "spark_reader.fallback": (
        "the Python source's second name when the jar serves it: tests/spark/test_spark_sessions.py"
    ),
    "spark_reader.session": (
        "the local sessions: tests/tools/test_quickstart.py, tests/migrate/test_migrate_spark.py"
    ),
    "spark_reader.topics": "subscribe, subscribePattern and assign: tests/spark/test_spark_reader.py",
    "spark_reader.brokerwire.aborts": (
        "read_committed from a live broker's Fetch: tests/spark/test_broker_wire.py"
    ),
    "spark_reader.brokerwire.batches": "the whole batches of a Fetch answer: tests/spark/test_broker_wire.py",
    "spark_reader.brokerwire.connection": "connections to real brokers: tests/spark/test_broker_wire.py",
    "spark_reader.brokerwire.metadata": (
        "leaders from a real broker's Metadata: tests/spark/test_broker_wire.py"
    ),
    "spark_reader.brokerwire.offsets": (
        "earliest and latest from a real broker's ListOffsets: tests/spark/test_broker_wire.py"
    ),
    "spark_reader.brokerwire.redact": (
        "no credential in kafka-python's DEBUG lines: tests/spark/test_broker_wire.py"
    ),
    "spark_reader.brokerwire.stats": "what a wire client did, counted: tests/spark/test_broker_wire.py",
}
IMPORTED_BY_NAME = re.compile(r"(?:^|-m\s+)((?:segment_format|rsm|spark_reader)(?:\.\w+)*)(?::\w+)?(?:\s|$)")


def reexports() -> dict[tuple[str, str], str]:
    """(module, name) -> the module it imports that name from: a package's `__init__`, or a module kept at an
    old path, hands out names defined elsewhere."""
    out: dict[tuple[str, str], str] = {}
    for name, path in modules():
        own = len(name.split(".")) + (1 if path.name == "__init__.py" else 0)
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ImportFrom):
                base = name.split(".")[: own - node.level] if node.level else []
                source = ".".join([*base, *([node.module] if node.module else [])])
                out.update(((name, alias.asname or alias.name), source) for alias in node.names)
    return out


def imported_by_tests() -> set[str]:
    """What the tests import: `import x`, `from x import y` (x, x.y, and the module x has y from), a name
    used through a module (`protocol.encode_metadata`), and a module handed to a child process as a string
    (`"pkg.module:Class"`, `"-m pkg.module"`)."""
    found = dict(modules())
    names = reexports()
    out: set[str] = set()

    def use(module: str, name: str) -> None:
        out.add(f"{module}.{name}")
        where = (module, name)
        while where in names and names[where] != where[0]:
            out.add(names[where])
            where = (names[where], name)

    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path == Path(__file__).resolve():  # this file names modules to judge them, not to use them
            continue
        tree = ast.parse(path.read_text(), str(path))
        aliases: dict[str, str] = {}  # a local name bound to one of our modules
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                out.update(alias.name for alias in node.names)
                aliases.update((a.asname, a.name) for a in node.names if a.asname and a.name in found)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                out.add(node.module)
                for alias in node.names:
                    use(node.module, alias.name)
                    if f"{node.module}.{alias.name}" in found:
                        aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.update(IMPORTED_BY_NAME.findall(node.value.strip()))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
            ):
                use(aliases[node.value.id], node.attr)
    # importing a module runs the packages it lives in
    return out | {".".join(m.split(".")[:i]) for m in out for i in range(1, m.count(".") + 1)}


def test_every_module_is_imported_by_a_test_or_says_why() -> None:
    found = dict(modules())
    imported = imported_by_tests()
    assert sorted(m for m in found if m not in imported and m not in NOT_IMPORTED_BY_TESTS) == []
    # a reason for a module that is gone, or that a test now imports, is stale
    assert sorted(m for m in NOT_IMPORTED_BY_TESTS if m not in found or m in imported) == []
