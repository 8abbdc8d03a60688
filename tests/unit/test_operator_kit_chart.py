"""The chart's operator kit (docs/operations.md, "Alerts" and "Grafana dashboard"): the PrometheusRule
passes `promtool check rules` (Debian's promtool, `make prometheus`), covers the states an operator is
paged on, and every alert's runbook_url lands on a runbook entry in docs/operations.md; the dashboard
ConfigMap carries Grafana's sidecar label and valid dashboard JSON. That every metric the rules and the
dashboard query is one the broker exports: tests/integration/test_operator_kit_metrics.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.unit.test_helm_chart import CHART, REPO, _render

# The states docs/operations.md pages on, one alert each (the daily spend budget is the optional twin of
# the hard budget's GpufedSpendOverBudget).
PAGED_ON = {
    "GpufedNoLeader",
    "GpufedStateStoreDown",
    "GpufedCapacityStale",
    "GpufedClusterLost",
    "GpufedQueueWaitOverBudget",
    "GpufedSpendOverBudget",
    "GpufedDailySpendOverBudget",
    "GpufedGpuUnhealthy",
    "GpufedGpuBreakerOpen",
}


def rendered_rules() -> dict[str, Any]:
    """The PrometheusRule's spec (its groups) as rendered with tests/fixtures/helm/operator-kit.yaml."""
    rule = _render("operator-kit.yaml")[("PrometheusRule", "rel-gpufed")]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    spec: dict[str, Any] = rule["spec"]
    return spec


def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((CHART / "dashboards" / "gpufed.json").read_text())
    return doc


def test_the_rules_pass_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: run `make prometheus`"
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(rendered_rules()))
    out = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(PAGED_ON)} rules found" in out.stdout


def test_every_paged_state_has_an_alert_and_a_runbook_entry() -> None:
    rules = [r for g in rendered_rules()["groups"] for r in g["rules"]]
    assert {r["alert"] for r in rules} == PAGED_ON
    headings = {
        m.group(1).lower()
        for m in re.finditer(r"^### (Gpufed\w+)\s*$", (REPO / "docs" / "operations.md").read_text(), re.M)
    }
    for r in rules:
        base, _, anchor = r["annotations"]["runbook_url"].partition("#")
        assert base == "https://gpufed.example.com/docs/operations"
        assert anchor in headings, f"{r['alert']}: no '### {r['alert']}' runbook in docs/operations.md"
        assert r["labels"]["severity"] in ("critical", "warning")
        assert 'job="rel-gpufed"' in r["expr"]  # this release's series only


def test_no_rule_no_dashboard_unless_asked() -> None:
    kinds = {kind for kind, _ in _render("minimal.yaml")}
    assert "PrometheusRule" not in kinds
    assert ("ConfigMap", "rel-gpufed-dashboard") not in _render("minimal.yaml")


def test_the_dashboard_is_a_config_map_for_grafanas_sidecar_with_valid_dashboard_json() -> None:
    cm = _render("operator-kit.yaml")[("ConfigMap", "rel-gpufed-dashboard")]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "GPU"}
    doc = json.loads(cm["data"]["gpufed.json"])
    assert doc == dashboard()
    assert doc["title"] and doc["uid"] and isinstance(doc["schemaVersion"], int)
    variables = {v["name"] for v in doc["templating"]["list"]}
    assert {"datasource", "job"} <= variables
    panels = doc["panels"]
    assert len({p["id"] for p in panels}) == len(panels) >= 10
    for p in panels:
        assert p["type"] and p["title"] and p["datasource"]["uid"] == "${datasource}"
        assert {"x", "y", "w", "h"} <= set(p["gridPos"]) and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["refId"] and "gpufed_" in t["expr"] and '{job=~"$job"' in t["expr"], (p["title"], t)
