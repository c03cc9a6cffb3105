"""dashboards/rsm.json: a Grafana dashboard that loads (its structure is valid) and names only metrics the
Prometheus endpoint serves."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import jsonschema

from rsm import metrics

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "dashboards" / "rsm.json"
SCHEMA = Path(__file__).resolve().parents[1] / "data" / "grafana_dashboard.schema.json"
# a metric name in PromQL: a word followed by a selector, a range or the end of an argument
METRIC = re.compile(r"\b((?:rsm|process)_[a-z0-9_]+)\b")


def test_dashboard_is_valid_and_laid_out():
    doc = json.loads(DASHBOARD.read_text())
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: set[tuple[int, int]] = set()
    for p in doc["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"panel {p['title']!r} overlaps another"
        cells |= mine
    variables = {v["name"] for v in doc["templating"]["list"]}
    for p in doc["panels"]:
        for t in p.get("targets", []):
            for var in re.findall(r"\$(\w+)", t["expr"]):
                assert var.startswith("__") or var in variables, (p["title"], var)


def test_dashboard_names_only_metrics_that_exist(tmp_path):
    doc = json.loads(DASHBOARD.read_text())
    used = {m for p in doc["panels"] for t in p.get("targets", []) for m in METRIC.findall(t["expr"])}
    used |= {m for v in doc["templating"]["list"] for m in METRIC.findall(json.dumps(v.get("query", "")))}
    assert used, "the dashboard names no metric"
    ours = {metrics.prometheus_name(n) for n in metrics.metric_names()}
    # the process_* figures come with the endpoint: what a live one serves
    port = metrics.serve_prometheus(0, "127.0.0.1")
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        metrics.stop_prometheus(port)
    served = set(re.findall(r"^(process_[a-z_]+)", text, re.M))
    unknown = sorted(used - ours - served)
    assert not unknown, f"the dashboard names metrics nobody serves: {unknown}"
    # and it shows each family of the RSM somewhere
    families = {f.name for f in metrics.FAMILIES}
    shown = {f for f in families if any(m.startswith(metrics.prometheus_name(f)) for m in used)}
    missing = sorted(
        families
        - shown
        - {
            "object-upload",
            "index-fetch-errors",
            "segment-copy-errors",
            "segment-fetch-errors",
            "segment-delete-errors",
            "segment-delete-bytes",
            "record-validation-segments",
            "record-validation-time",
        }
    )
    assert not missing, f"families the dashboard does not show: {missing}"
