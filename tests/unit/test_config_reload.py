"""clusters.yaml read again while running (broker.config.reload): what a changed file changes, table by
table, and the watcher that applies a good file once and keeps the running config on a bad one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from broker import telemetry
from broker.config.reload import ConfigWatcher, changes
from broker.config.settings import FleetConfig, load_fleet_config, parse_fleet_config


def cluster(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "kubeconfig": f"/k/{name}.kubeconfig", **extra}


def fleet(*clusters: dict[str, Any], **settings: Any) -> FleetConfig:
    return parse_fleet_config({"clusters": list(clusters), "settings": settings}, "test", Path("/"))


A, B = cluster("a"), cluster("b", tier="cloud", pricePerGpuHour={"H100-80GB": 4.0})


@pytest.mark.parametrize(
    ("new", "added", "removed", "redeclared", "reconnected", "restart"),
    [
        (fleet(A, B), [], [], [], [], []),
        (fleet(A, B, cluster("c")), ["c"], [], [], [], []),
        (fleet(A), [], ["b"], [], [], []),
        # traits only: applied now
        (fleet(A, {**B, "pricePerGpuHour": {"H100-80GB": 2.5}}), [], [], ["b"], [], []),
        (fleet(A, {**B, "labels": {"site": "x"}, "spot": True}), [], [], ["b"], [], []),
        (fleet({**A, "kueue": {"localQueue": "gpu"}}, B), [], [], ["a"], [], []),
        # the connection: a new client, Job watch and poller, now
        (fleet({**A, "kubeconfig": "/k/other.kubeconfig"}, B), [], [], [], ["a"], []),
        (fleet({**A, "context": "admin@a"}, B), [], [], [], ["a"], []),
        (fleet({**A, "gpuAllocation": "dra"}, B), [], [], [], ["a"], []),
        # other sections: at the next start, named by key
        (fleet(A, B, leaseSeconds=20), [], [], [], [], ["settings.leaseSeconds"]),
        (
            fleet(A, cluster("c"), sweepIntervalSeconds=5),
            ["c"],
            ["b"],
            [],
            [],
            ["settings.sweepIntervalSeconds"],
        ),
    ],
)
def test_changes(
    new: FleetConfig,
    added: list[str],
    removed: list[str],
    redeclared: list[str],
    reconnected: list[str],
    restart: list[str],
) -> None:
    change = changes(fleet(A, B), new)
    assert [c.name for c in change.added] == added
    assert list(change.removed) == removed
    assert [c.name for c in change.redeclared] == redeclared
    assert [c.name for c in change.reconnected] == reconnected
    assert list(change.restart) == restart
    assert change.applied_now == bool(added or removed or redeclared or reconnected)


def _write(path: Path, doc: Any) -> None:
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))


def _count(result: str) -> float:
    return telemetry.REGISTRY.get_sample_value("gpufed_config_reloads_total", {"result": result}) or 0.0


def test_the_watcher_applies_each_good_file_once_and_keeps_the_running_config_on_a_bad_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "clusters.yaml"
    _write(path, {"clusters": [A]})
    applied: list[list[str]] = []
    watcher = ConfigWatcher(
        path,
        lambda: load_fleet_config(path, check_kubeconfigs=False),
        lambda cfg: applied.append([c.name for c in cfg.clusters]),
    )
    assert not watcher.check() and applied == []  # unchanged since the watcher started

    _write(path, {"clusters": [A, cluster("c")]})
    assert watcher.check() and applied == [["a", "c"]]
    assert not watcher.check() and applied == [["a", "c"]]  # once per change

    invalid_before = _count("invalid")
    _write(path, {"clusters": [A, cluster("Not A DNS Label")]})
    assert not watcher.check()
    assert applied == [["a", "c"]]  # nothing applied: the running config stays
    assert watcher.last_error is not None and "clusters[1]" in watcher.last_error
    assert _count("invalid") == invalid_before + 1

    _write(path, "clusters: [unclosed")
    assert not watcher.check() and watcher.last_error is not None and "YAML" in watcher.last_error

    _write(path, {"clusters": [cluster("c")]})  # fixed: applied
    assert watcher.check() and applied[-1] == ["c"] and watcher.last_error is None
