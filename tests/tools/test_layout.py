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
ISSUE_REFERENCE = re.compile(r"issue [0-9]+|seed [0-9]+|seeds? 0[0-9]{2}", re.IGNORECASE)


def test_no_issue_numbers_in_source() -> None:
    found = []
    trees = [ROOT / p for p in PACKAGES] + [ROOT / "pyspark_kafka_tiered.py"]
    for tree in trees:
        for path in [tree] if tree.is_file() else sorted(tree.rglob("*")):
            rel = path.relative_to(ROOT).as_posix()
            if path.suffix not in (".py", ".java", ".c", ".h", ".md", ".pyi") or not path.is_file():
                continue
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if ISSUE_REFERENCE.search(line) or "DESIGN.md" in line or "FORMATS.md" in line:
                    found.append(f"{rel}:{n}: {line.strip()}")
    assert found == []
