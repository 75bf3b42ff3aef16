"""docs/grafana/gpudesk.json: a Grafana dashboard model that imports (its data source an input),
and whose every query names only metrics the engine exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from test_metrics_snapshot import snapshot_by_hand  # same folder: on sys.path under pytest

from gpudesk.metrics.collector import SnapshotCollector

DASHBOARD = Path(__file__).parents[2] / "docs" / "grafana" / "gpudesk.json"
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}

# PromQL words that look like metric names but are not
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool"}
KEYWORDS |= {"and", "or", "unless", "inf", "nan"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^{}]*\}")  # label matchers (and Grafana's $variables inside them)
_RANGE = re.compile(r"\[[^\]]*\]")  # [5m], [1h:1m]
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NAME = re.compile(r"(?<![\w:$.])([a-zA-Z_:][\w:]*)(?![\w:]|\s*\()")  # whole, not a call


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (functions, keywords, label names and the
    values of label matchers left out)."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    return {
        name
        for name in _NAME.findall(text)
        if name.lower() not in KEYWORDS and not re.fullmatch(r"\d.*", name)
    }


def exported_names() -> set[str]:
    """Every sample name the engine exports, rendered from a snapshot that has each family."""
    registry = CollectorRegistry(auto_describe=False)
    snapshot = snapshot_by_hand()
    registry.register(SnapshotCollector(lambda: snapshot))
    text = generate_latest(registry).decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def queries(dashboard: dict[str, Any]) -> list[str]:
    found = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    for variable in dashboard["templating"]["list"]:
        query = variable["query"]
        found.append(query["query"] if isinstance(query, dict) else query)
    return found


def test_the_name_parser_finds_metrics_and_only_metrics() -> None:
    assert metric_names(
        'sum by (mode) (increase(gpudesk_placements_total{a="b",c=~"$x"}[5m]))'
    ) == {"gpudesk_placements_total"}
    assert metric_names(
        "histogram_quantile(0.99, sum by (le) (rate(x_bucket[5m]))) / on(gpu) y * 100"
    ) == {"x_bucket", "y"}
    assert metric_names("label_values(gpudesk_station_info, instance)") == {
        "gpudesk_station_info",
        "instance",  # a label_values() argument: checked apart below
    }
    assert metric_names('DCGM_FI_DEV_GPU_UTIL{gpu="0"} > bool 50 and nope_metric') == {
        "DCGM_FI_DEV_GPU_UTIL",
        "nope_metric",
    }


def test_the_dashboard_imports_into_grafana() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    assert dashboard["id"] is None and dashboard["uid"] and dashboard["title"] == "gpudesk"
    (source,) = dashboard["__inputs"]
    assert source["name"] == "DS_PROMETHEUS"
    assert (source["type"], source["pluginId"]) == ("datasource", "prometheus")
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)) >= 10
    for panel in dashboard["panels"]:
        assert panel["type"] in {"timeseries", "stat"}, panel["title"]
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE and target["refId"] and target["expr"]
    (variable,) = dashboard["templating"]["list"]
    assert variable["datasource"] == DATASOURCE and variable["name"] == "instance"
    # the SIMULATED station says so on the dashboard
    assert any("simulated" in t["legendFormat"] for p in dashboard["panels"] for t in p["targets"])


def test_every_query_names_only_metrics_the_engine_exports() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exported = exported_names()
    assert {"DCGM_FI_DEV_GPU_UTIL", "gpudesk_placements_total", "gpudesk_jobs"} <= exported
    used: set[str] = set()
    for expr in queries(dashboard):
        names = metric_names(expr)
        if expr.startswith("label_values("):
            names.discard(expr.rstrip(")").rsplit(",", 1)[1].strip())  # the label's name
        assert names, expr
        assert names <= exported, f"{expr}: {sorted(names - exported)} not exported"
        used |= names
    # the dashboard shows both kinds: the DCGM readings with job labels and gpudesk's own
    assert any(n.startswith("DCGM_") for n in used) and any(n.startswith("gpudesk_") for n in used)
    assert "gpudesk_placement_decision_seconds_bucket" in used
