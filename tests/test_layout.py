"""The layout holds: dependencies point one way, no module imports another that imports it back, no module
grows into a room, and the RemoteStorageManager stays the contract (README's "Layout").

Imports are read from the source (every `import` and `from ... import`, those inside functions and under
`TYPE_CHECKING` too: a circle that only type checkers see is still a circle for the reader).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("segment_format", "rsm", "spark_reader")
MAX_LINES = 640  # "about 600": a module past it does two jobs
MAX_MANAGER_LINES = 300

# what each part may not import (a prefix forbids the package and everything under it)
FORBIDDEN = {
    "segment_format": ("rsm", "spark_reader"),
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
