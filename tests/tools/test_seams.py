"""The seams hold: only the store classes know which backend they are, and no package reaches into another's
private names.

A fifth store is one class beside `rsm/store/s3.py`, `gcs.py`, `azure.py` and `local.py`, chosen once by the
factory: code that asked "am I on S3?" anywhere else would have to learn the new kind too, and a call into
another package's `_private` function breaks the day that package changes its insides. Both are read from the
source (every module of rsm, segment_format and spark_reader).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("segment_format", "rsm", "spark_reader")
# where a backend kind may be named: the closed set itself, each backend's own class, and the one table of
# URL schemes the factory reads
BACKEND_HOMES = {
    "rsm/config/settings.py",
    "rsm/store/s3.py",
    "rsm/store/gcs.py",
    "rsm/store/azure.py",
    "rsm/store/local.py",
    "rsm/store/objects.py",
}
BACKEND_KINDS = {"FILE", "S3", "GCS", "AZURE"}
BACKEND_VALUES = {"file", "s3", "gcs", "gs", "azure", "az", "abfs", "local"}


def sources() -> Iterator[tuple[str, Path, ast.Module]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            yield name, path, ast.parse(path.read_text(), str(path))


def package_of(module: str) -> str:
    """`rsm.store.s3` -> `rsm.store`; `spark_reader.brokerwire.fetch` -> `spark_reader` (one package)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "rsm" and len(parts) > 1 else parts[0]


def backend_kinds_named(where: str, tree: ast.Module) -> list[str]:
    """Each place `tree` names a backend kind: `Backend.S3` or a comparison with a kind's string."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in BACKEND_KINDS
            and isinstance(node.value, ast.Name)
            and node.value.id == "Backend"
        ):
            found.append(f"{where}:{node.lineno}: Backend.{node.attr}")
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Constant) and side.value in BACKEND_VALUES:
                    found.append(f"{where}:{node.lineno}: compares with {side.value!r}")
    return found


def imported_names(module: str, where: str, tree: ast.Module, offenders: list[str]) -> dict[str, str]:
    """Local name -> the module or object it names; a private name imported from another package is an
    offence (appended to `offenders`)."""
    imported: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and package_of(node.module) != package_of(module):
                    offenders.append(f"{where}:{node.lineno}: from {node.module} import {alias.name}")
                imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                imported[local] = alias.name if alias.asname else local
    return imported


def private_reaches(module: str, where: str, tree: ast.Module) -> list[str]:
    """Each place `tree` imports or uses another package's `_private` name."""
    offenders: list[str] = []
    imported = imported_names(module, where, tree, offenders)
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
        ):
            continue
        chain, value = [], node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if not (isinstance(value, ast.Name) and value.id in imported):
            continue
        target = ".".join([imported[value.id], *reversed(chain)])
        if target.split(".")[0] in PACKAGES and package_of(target) != package_of(module):
            offenders.append(f"{where}:{node.lineno}: {target}.{node.attr}")
    return offenders


def test_only_the_store_classes_name_a_backend_kind() -> None:
    offenders = [
        found
        for _, path, tree in sources()
        if (where := path.relative_to(ROOT).as_posix()) not in BACKEND_HOMES
        for found in backend_kinds_named(where, tree)
    ]
    assert offenders == []


def test_no_package_reaches_into_another_packages_private_names() -> None:
    offenders = [
        found for module, path, tree in sources() for found in private_reaches(module, path.name, tree)
    ]
    assert offenders == []


def test_the_checks_find_what_they_look_for() -> None:
    """Source written to break both rules is caught by both checks (they are not vacuous)."""
    bad = ast.parse(
        "from rsm.store.objects import _bounded\n"
        "import rsm.store.objects as objects\n"
        "if config.backend is Backend.S3 or scheme == 's3':\n"
        "    objects._bounded()\n"
    )
    assert sorted(backend_kinds_named("bad.py", bad)) == [
        "bad.py:3: Backend.S3",
        "bad.py:3: compares with 's3'",
    ]
    assert private_reaches("rsm.copy.bad", "bad.py", bad) == [
        "bad.py:1: from rsm.store.objects import _bounded",
        "bad.py:4: rsm.store.objects._bounded",
    ]
    assert private_reaches("rsm.store.bad", "bad.py", bad) == []  # inside its own package: its business


def module_edges() -> set[tuple[str, str]]:
    """(module, module it imports) across two packages (a module's own ancestors excluded: they run first)."""
    from test_layout import imports, modules

    found = dict(modules())
    return {
        (name, target)
        for name, path in found.items()
        for target in imports(name, path)
        if target in found and not name.startswith(target + ".") and package_of(target) != package_of(name)
    }


def package_graph(edges: set[tuple[str, str]]) -> dict[str, set[str]]:
    """Package -> the packages its modules import."""
    graph: dict[str, set[str]] = {}
    for module, target in edges:
        graph.setdefault(package_of(module), set()).add(package_of(target))
    return graph


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = [stack.pop()]
            while component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_two_packages_import_each_other() -> None:
    """At package level (rsm.api, rsm.config, rsm.stored, rsm.store, ..., spark_reader), imports point one
    way: in a circle no package can be understood, tested or replaced without the others."""
    edges = module_edges()
    graph = package_graph(edges)
    found = circles(graph)
    inside = {package for component in found for package in component}
    why = sorted(
        f"{m} imports {t}"
        for m, t in edges
        if package_of(m) in inside
        and package_of(t) in inside
        and any(package_of(m) in c and package_of(t) in c for c in found)
    )
    assert found == [], "\n".join(why)


def test_the_circle_finder_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


DESIGN = ROOT / "docs/DESIGN.md"
LAYERS_MARK = "<!-- package layers"


def drawn_layers() -> list[list[str]]:
    """The packages of each line of docs/DESIGN.md's drawing, top line first."""
    text = DESIGN.read_text()
    block = text[text.index(LAYERS_MARK) :].split("```")[1]
    layers = []
    for line in block.splitlines()[1:]:  # after the fence's "text"
        if line.strip():
            names = line.split("  ")[0]
            layers.append([name.strip() for name in names.split(",")])
    return layers


def test_the_drawing_in_design_md_is_the_package_graph() -> None:
    """Every package is drawn once, and each imports only packages drawn on lines above it."""
    layers = drawn_layers()
    line_of = {name: n for n, names in enumerate(layers) for name in names}
    edges = module_edges()
    packages = {package_of(module) for module, _ in edges} | {package_of(target) for _, target in edges}
    assert sorted(line_of) == sorted({*packages, *line_of}), "a package drawn that does not exist"
    assert sorted(packages - set(line_of)) == [], "packages missing from docs/DESIGN.md's drawing"
    assert sum(map(len, layers)) == len(line_of), "a package drawn twice"
    wrong = sorted(
        f"{module} imports {target} (line {line_of[package_of(target)] + 1} is not above "
        f"line {line_of[package_of(module)] + 1})"
        for module, target in edges
        if line_of[package_of(target)] >= line_of[package_of(module)]
    )
    assert wrong == []
