"""Every metric the chart's alerts and Grafana dashboard query is one the broker exports: the names are
read from the broker's own /metrics (the app in-process, its Redis real), not from a list kept by hand."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import broker.ha.leadership  # registers gpufed_leader on the broker's registry, as every broker does
from adapters.redis_store import RedisStateStore
from broker.controller.service import BrokerService
from broker.core.model import ClusterTraits
from tests.integration.test_public_routes import write_tokens
from tests.integration.test_tenancy import Api
from tests.service_doubles import ManualClock, RecordingGateway
from tests.unit.test_operator_kit_chart import dashboard, rendered_rules

pytestmark = pytest.mark.integration


@pytest.fixture
def exported(redis_url: str, tmp_path: Path) -> Iterator[set[str]]:
    """The sample names /metrics can carry: each family's name, and a histogram's _bucket/_sum/_count."""
    assert broker.ha.leadership.is_leader is not None
    store = RedisStateStore(redis_url, prefix="kit" + uuid.uuid4().hex[:8])
    service = BrokerService(store, RecordingGateway(), ManualClock(), {"c1": ClusterTraits("c1")})
    api = Api(service, write_tokens(tmp_path))
    r = api.call(None, "GET", "/metrics")
    assert r.status_code == 200, r.text
    names: set[str] = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", r.text, re.M):
        names.add(name)
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    yield names
    store.close()


def _queried(exprs: list[str]) -> set[str]:
    return {m for e in exprs for m in re.findall(r"\bgpufed_[a-z_]+\b", e)}


def test_every_metric_the_dashboard_queries_is_exported(exported: set[str]) -> None:
    exprs = [t["expr"] for p in dashboard()["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dashboard()["templating"]["list"] if "definition" in v]
    queried = _queried(exprs)
    assert len(queried) >= 15
    assert queried - exported == set()


def test_every_metric_the_alerts_query_is_exported(exported: set[str]) -> None:
    queried = _queried([r["expr"] for g in rendered_rules()["groups"] for r in g["rules"]])
    assert "gpufed_leader" in queried and "gpufed_budget_stops_total" in queried
    assert {"gpufed_gpus_unhealthy", "gpufed_gpu_breaker_open"} <= queried
    assert queried - exported == set(), f"queried but not exported: {sorted(queried - exported)}"
