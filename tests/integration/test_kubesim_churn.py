"""`kubesim serve --churn-rate`: a fleet whose pods come and go in the background, as the 1,000-member
freshness benchmark needs (benchmarks/thousand_clusters.py --churn). Read with the official client."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from tests.conftest import wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CHURN_LABEL = "sim.gpufed.io/churn=true"


@pytest.fixture
def churning(tmp_path: Path) -> Iterator[Path]:
    out = tmp_path / "sim"
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kubesim.cli",
            "serve",
            "--fleet",
            str(REPO / "kubesim" / "fleets" / "small.yaml"),
            "--out",
            str(out),
            "--churn-rate",
            "40",
            "--churn-pods-per-node",
            "2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for((out / "kubesim.json").exists, timeout=60, what="kubesim serving")
        yield out
    finally:
        serve.terminate()
        serve.wait(timeout=30)


def _churn_pods(kubeconfig: str) -> set[str]:
    api = config.new_client_from_config(kubeconfig, persist_config=False)  # type: ignore[no-untyped-call]
    try:
        pods = client.CoreV1Api(api).list_namespaced_pod("default", label_selector=CHURN_LABEL)
        return {
            str(p.metadata.name) for p in pods.items if p.metadata is not None and p.spec and p.spec.node_name
        }
    finally:
        api.close()


def test_serve_with_a_churn_rate_keeps_replacing_bound_pods_on_every_gpu_node(churning: Path) -> None:
    clusters = json.loads((churning / "kubesim.json").read_text())["clusters"]
    kubeconfig = next(c["kubeconfig"] for c in clusters if c["name"] == "small-a")
    before = wait_for(lambda: _churn_pods(kubeconfig), timeout=30, what="churn pods bound to nodes")
    assert isinstance(before, set) and len(before) == 2 * 2  # 2 pods on each of small-a's 2 GPU nodes
    # replaced one by one: the same number on the nodes, new names
    wait_for(
        lambda: (now := _churn_pods(kubeconfig)) and len(now) == len(before) and not (now & before),
        timeout=60,
        what="every churn pod replaced",
    )
