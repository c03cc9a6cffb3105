"""README's compatibility table, rendered from what the version tests recorded.

Each passing case of a version test records what it proved in ``.cache/compat/<name>-<version>.json``::

    {"component": "kafka", "version": "4.1.2", "checks": ["copy: ...", ...],
     "degraded": ["what was adapted or is missing there, one phrase each"], "notes": ["..."],
     "date": "2026-11-29T08:00:00+00:00", "seconds": 41.2}

(tests/broker/test_kafka_versions.py writes ``kafka-*.json``, tests/spark/test_spark_versions.py ``spark-*.json`` with
component ``pyspark``; ``notes`` and ``seconds`` are optional). ``python -m tests.compat_table`` rewrites the
table between README's ``<!-- compat:begin -->`` and ``<!-- compat:end -->`` markers: one row per component
and version, from its record where there is one, else README's row as it was; ``--check`` only says whether
README is up to date (exit 1 when not). The versions a component's test is parametrized over are declared
here (:data:`CLAIMS`), so the table lists exactly those, and tests/tools/test_compat_table.py checks README
against the records (or, on a clone without any, against the claims). The date is in the records, not in
the table: re-running a test that proves the same leaves README as it is.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
README = REPO_ROOT / "README.md"
RECORDS_DIR = REPO_ROOT / ".cache" / "compat"
BEGIN = "<!-- compat:begin -->"
END = "<!-- compat:end -->"
HEADER = ("Component", "Version", "Checks passed", "Adapted or degraded there")


@dataclass(frozen=True)
class Component:
    """A component the project claims to work with, as its version test names it."""

    key: str  # the records' "component"
    title: str  # the table's first column
    claimed: tuple[str, ...] | None  # the versions its test is parametrized over (None: whatever is recorded)


# The newest patch of each Kafka line the plugin supports (tests/broker/test_kafka_versions.py runs each).
KAFKA_VERSIONS: tuple[str, ...] = ("3.9.2", "4.0.2", "4.1.2", "4.2.2", "4.3.1", "4.4.0")

COMPONENTS: tuple[Component, ...] = (
    Component("kafka", "Apache Kafka broker", KAFKA_VERSIONS),
    Component("pyspark", "PySpark", None),
)
CLAIMS: Mapping[str, tuple[str, ...] | None] = {c.key: c.claimed for c in COMPONENTS}


class CompatTableError(ValueError):
    """README has no table markers, or a record cannot be read: the message names the file."""


@dataclass(frozen=True)
class Record:
    """What one version test case proved (one JSON file)."""

    component: str
    version: str
    checks: tuple[str, ...]
    degraded: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    date: str = ""

    @classmethod
    def read(cls, path: Path) -> Record:
        try:
            doc = json.loads(path.read_text())
            return cls(
                component=str(doc["component"]),
                version=str(doc["version"]),
                checks=tuple(str(c) for c in doc["checks"]),
                degraded=tuple(str(d) for d in doc.get("degraded") or ()),
                notes=tuple(str(n) for n in doc.get("notes") or ()),
                date=str(doc.get("date", "")),
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CompatTableError(f"{path}: not a compatibility record ({exc})") from exc

    def write(self, directory: Path = RECORDS_DIR, *, name: str | None = None, **extra: object) -> Path:
        """Writes ``<name or component>-<version>.json`` (``extra`` keys go in too, e.g. seconds)."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{name or self.component}-{self.version}.json"
        doc = {
            "component": self.component,
            "version": self.version,
            "checks": list(self.checks),
            "degraded": list(self.degraded),
            "notes": list(self.notes),
            "date": self.date,
            **extra,
        }
        path.write_text(json.dumps(doc, indent=2) + "\n")
        return path


def load_records(directory: Path = RECORDS_DIR) -> list[Record]:
    """Every record in ``directory`` (none when it does not exist)."""
    return [Record.read(p) for p in sorted(directory.glob("*.json"))] if directory.is_dir() else []


def _cell(items: Iterable[str]) -> str:
    text = "; ".join(items) or "none"
    return text.replace("|", "\\|").replace("\n", " ")


def _title(key: str) -> str:
    return next((c.title for c in COMPONENTS if c.key == key), key)


def _version_key(version: str) -> tuple[int | str, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"[.-]", version))


def record_row(record: Record) -> tuple[str, ...]:
    """The table row of one record."""
    adapted = [*record.notes, *record.degraded]
    return (_title(record.component), record.version, _cell(record.checks), _cell(adapted))


def parse_rows(block: str) -> dict[tuple[str, str], tuple[str, ...]]:
    """The rows of a rendered table, by (component title, version)."""
    rows: dict[tuple[str, str], tuple[str, ...]] = {}
    for line in block.splitlines():
        if not line.startswith("|") or line.startswith("| ---") or line.startswith("| Component |"):
            continue
        cells = tuple(c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1])
        if len(cells) == len(HEADER):
            rows[(cells[0], cells[1])] = cells
    return rows


def _pending_row(title: str, version: str) -> tuple[str, ...]:
    return (title, version, "not recorded yet: run its version test", "")


def render_block(records: Sequence[Record], current: str = "") -> str:
    """The table (without the markers): recorded rows, README's ``current`` rows for versions without a
    record, a "not recorded yet" row for a claimed version with neither; unclaimed versions left out."""
    old = parse_rows(current)
    rows: dict[tuple[str, str], tuple[str, ...]] = {}
    for component in COMPONENTS:
        mine = {r.version: r for r in records if r.component == component.key}
        title = component.title
        if component.claimed is None:
            versions = set(mine) | {v for (t, v) in old if t == title}
        else:
            versions = set(component.claimed)
        for version in sorted(versions, key=_version_key):
            if version in mine:
                rows[(title, version)] = record_row(mine[version])
            else:
                rows[(title, version)] = old.get((title, version)) or _pending_row(title, version)
    lines = ["| " + " | ".join(HEADER) + " |", "| " + " | ".join("---" for _ in HEADER) + " |"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows.values()]
    return "\n".join(lines) + "\n"


def split_readme(text: str, path: Path = README) -> tuple[str, str, str]:
    """README's text before the table (through BEGIN), the table, and the rest (from END)."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise CompatTableError(f"{path}: no compatibility table markers ({BEGIN} ... {END})")
    head = text[: start + len(BEGIN)]
    return head, text[len(head) : end].strip("\n") + "\n", text[end:]


def updated_readme(text: str, records: Sequence[Record], path: Path = README) -> str:
    """README's text with the table between the markers rendered anew."""
    head, block, tail = split_readme(text, path)
    return f"{head}\n{render_block(records, block)}{tail}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.compat_table", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when README's table is not up to date")
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument("--records", type=Path, default=RECORDS_DIR)
    args = parser.parse_args(argv)
    try:
        text = args.readme.read_text()
        new = updated_readme(text, load_records(args.records), args.readme)
    except (OSError, CompatTableError) as exc:
        print(f"compat_table: {exc}", file=sys.stderr)
        return 2
    if new == text:
        print(f"{args.readme}: compatibility table up to date")
        return 0
    if args.check:
        print(
            f"{args.readme}: compatibility table out of date: run python -m tests.compat_table",
            file=sys.stderr,
        )
        return 1
    args.readme.write_text(new)
    print(f"{args.readme}: compatibility table rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
