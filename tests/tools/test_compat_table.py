"""README's compatibility table is what the version tests recorded (tests/compat_table.py).

With records in ``.cache/compat`` (a run of tests/broker/test_kafka_versions.py or tests/spark/test_spark_versions.py
on this machine), README's rows for those versions must be the rows rendered from them; without any (a
fresh clone), README's Kafka rows must name exactly the versions tests/broker/test_kafka_versions.py is
parametrized over. Then the renderer itself, on files of its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import compat_table as ct
import pytest


def test_readme_rows_are_the_versions_the_tests_claim() -> None:
    _, block, _ = ct.split_readme(ct.README.read_text())
    rows = ct.parse_rows(block)
    for component in ct.COMPONENTS:
        if component.claimed is None:
            continue
        listed = sorted(v for (title, v) in rows if title == component.title)
        assert listed == sorted(component.claimed), (
            f"README's {component.title} rows {listed} are not the versions its test runs {component.claimed}: "
            "run python -m tests.compat_table"
        )
    pending = [key for key, cells in rows.items() if cells[2].startswith("not recorded yet")]
    assert not pending, f"README's table has versions nobody recorded: {pending}"


def test_readme_table_matches_the_recorded_results() -> None:
    rows = ct.parse_rows(ct.split_readme(ct.README.read_text())[1])
    for record in ct.load_records():
        claimed = ct.CLAIMS.get(record.component)
        if claimed is not None and record.version not in claimed:
            continue  # a record of a version the test no longer runs
        want = ct.record_row(record)
        assert rows.get(want[:2]) == want, (
            f"README's row for {want[0]} {want[1]} is not what its record in {ct.RECORDS_DIR} says: "
            "run python -m tests.compat_table"
        )


def _record(tmp: Path, component: str, version: str, checks: list[str], degraded: list[str] = []) -> None:  # noqa: B006
    name = "spark" if component == "pyspark" else component
    doc = {"component": component, "version": version, "checks": checks, "degraded": degraded, "date": "d"}
    (tmp / f"{name}-{version}.json").write_text(json.dumps(doc))


def test_rendering_keeps_unrecorded_rows_and_follows_the_claims(tmp_path: Path) -> None:
    records = tmp_path / "compat"
    records.mkdir()
    _record(records, "kafka", "4.0.2", ["copy", "fetch | index"], ["metrics in JMX"])
    _record(records, "kafka", "9.9.9", ["copy"])  # not a claimed version: left out
    _record(records, "pyspark", "4.1.4", ["batch read"])
    readme = tmp_path / "README.md"
    old_row = "| Apache Kafka broker | 4.4.0 | kept | none |"
    readme.write_text(f"# x\n\n{ct.BEGIN}\n{old_row}\n{ct.END}\n\nafter\n")

    assert ct.main(["--check", "--readme", str(readme), "--records", str(records)]) == 1
    assert ct.main(["--readme", str(readme), "--records", str(records)]) == 0
    text = readme.read_text()
    assert text.startswith(f"# x\n\n{ct.BEGIN}\n| Component |") and text.endswith(f"{ct.END}\n\nafter\n")
    rows = ct.parse_rows(ct.split_readme(text)[1])
    assert rows[("Apache Kafka broker", "4.0.2")] == (
        "Apache Kafka broker", "4.0.2", "copy; fetch \\| index", "metrics in JMX",
    )  # fmt: skip
    assert rows[("Apache Kafka broker", "4.4.0")][2] == "kept"  # no record: README's row stays
    assert rows[("Apache Kafka broker", "3.9.2")][2].startswith("not recorded yet")
    assert ("Apache Kafka broker", "9.9.9") not in rows
    assert rows[("PySpark", "4.1.4")][2] == "batch read"
    versions = [v for (t, v) in rows if t == "Apache Kafka broker"]
    assert versions == list(ct.KAFKA_VERSIONS)
    assert ct.main(["--check", "--readme", str(readme), "--records", str(records)]) == 0


def test_a_readme_without_markers_or_a_broken_record_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# no table\n")
    assert ct.main(["--readme", str(readme), "--records", str(tmp_path)]) == 2
    assert f"{readme}: no compatibility table markers" in capsys.readouterr().err
    readme.write_text(f"{ct.BEGIN}\n{ct.END}\n")
    (tmp_path / "kafka-4.4.0.json").write_text("{not json")
    assert ct.main(["--readme", str(readme), "--records", str(tmp_path)]) == 2
    assert f"{tmp_path / 'kafka-4.4.0.json'}: not a compatibility record" in capsys.readouterr().err
