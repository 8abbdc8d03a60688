"""Tenancy inside member clusters on real parts: kubesim over HTTPS, quotas and limits set with the real
kubectl, the broker's pollers (ClusterWatcher) writing summaries to real Redis, its gateway creating Jobs
with the official client's transport, and the service deciding passes on the wall clock.

sim-000 has H100s, sim-001 A100s; the tenant `ml` runs in `gpufed-ml` on both. The quota on sim-000 is
nearly used up, the LimitRange on sim-001 gives containers a default cpu limit.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from adapters.cluster_watcher import ClusterWatcher
from adapters.job_informer import WatchingGateway
from adapters.redis_store import RedisStateStore
from adapters.system_clock import SystemClock
from broker.api import schemas
from broker.api.views import FleetViews
from broker.controller.service import BrokerService
from broker.core.model import ClusterTraits, Health, JobRequest, JobState
from broker.tenancy import member_quota
from kubesim.fleet import synthetic_fleet
from kubesim.sim import Simulation
from tests.conftest import wait_for

pytestmark = pytest.mark.integration

KUBECTL = Path(__file__).resolve().parents[2] / "tools" / "bin" / "kubectl"
NS = "gpufed-ml"
CLUSTERS = ("sim-000", "sim-001")
TRAITS = {c: ClusterTraits(c, tenant_namespace="gpufed-{tenant}") for c in CLUSTERS}
LIMITS = f"""\
apiVersion: v1
kind: LimitRange
metadata: {{name: defaults, namespace: {NS}}}
spec:
  limits:
  - type: Container
    default: {{cpu: "2"}}
    defaultRequest: {{cpu: 500m}}
"""


class Kubectl:
    def __init__(self, sim: Simulation, cache: Path) -> None:
        self._sim, self._cache = sim, cache

    def __call__(self, cluster: str, *args: str, stdin: str | None = None) -> str:
        env = {**os.environ, "KUBECONFIG": str(self._sim.kubeconfig_path(cluster)), "HOME": str(self._cache)}
        proc = subprocess.run(
            [str(KUBECTL), "--cache-dir", str(self._cache), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stdout}{proc.stderr}"
        return proc.stdout


class Broker:
    """The broker's parts over the real edges, without Ray: a pass is run when the test says."""

    def __init__(self, sim: Simulation, redis_url: str) -> None:
        self.store = RedisStateStore(redis_url, prefix="mtenancy-int" + uuid.uuid4().hex[:8])
        self.watchers = {
            c: ClusterWatcher(c, sim.kubeconfig_path(c), flush_interval_s=0.02) for c in CLUSTERS
        }
        for w in self.watchers.values():
            w.start()
        # the broker's Jobs followed by one watch over every namespace (tenant namespaces)
        self.gateway = WatchingGateway.watching(
            {c: (sim.kubeconfig_path(c), None) for c in CLUSTERS}, dict.fromkeys(CLUSTERS, "")
        )
        self.gateway.start()
        self.service = BrokerService(self.store, self.gateway, SystemClock(), TRAITS)

    def publish(self) -> None:
        for c, w in self.watchers.items():
            self.store.put_summary(w.summary(TRAITS[c]))

    def close(self) -> None:
        for w in self.watchers.values():
            w.stop()
        self.gateway.close()
        self.store.close()


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    if not KUBECTL.is_file() or not os.access(KUBECTL, os.X_OK):
        pytest.fail(f"kubectl is missing at {KUBECTL}: run `make setup`; these tests do not skip")
    with Simulation(synthetic_fleet(2, 2), tmp_path_factory.mktemp("kubesim-tenancy"), speed=20.0) as s:
        yield s


@pytest.fixture(scope="module")
def kubectl(sim: Simulation, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    run = Kubectl(sim, tmp_path_factory.mktemp("kubectl-cache"))
    for c in CLUSTERS:
        run(c, "create", "namespace", NS)
    run("sim-000", "create", "quota", "gpu", "-n", NS, "--hard=requests.nvidia.com/gpu=6")
    # something of the tenant's already holds 4 of its 6 GPUs there
    overrides = '{"spec": {"containers": [{"name": "held", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}'
    run(  # running for the whole module (kubesim's kubelet ends a pod after its simulated duration)
        "sim-000",
        "run",
        "held",
        "-n",
        NS,
        "--image=busybox",
        "--restart=Never",
        "--annotations=sim.gpufed.io/duration-seconds=10000000",
        f"--overrides={overrides}",
    )
    run("sim-001", "apply", "-f", "-", stdin=LIMITS)
    return run


@pytest.fixture
def broker(sim: Simulation, kubectl: Kubectl, redis_url: str) -> Iterator[Broker]:
    b = Broker(sim, redis_url)

    def ready() -> bool:
        b.publish()
        a, other = (b.store.get_summary(c) for c in CLUSTERS)
        quota = a.namespace(NS) if a else None
        return bool(
            quota
            and quota.quotas
            and quota.quotas[0].used.get("requests.nvidia.com/gpu") == 4
            and other
            and (lr := other.namespace(NS)) is not None
            and lr.limits
            # and both observed healthy: a summary can hold the namespaces before its first probe
            # answered ("not yet observed", not placeable; seen once in CI)
            and a is not None
            and a.health is Health.HEALTHY
            and other.health is Health.HEALTHY
        )

    wait_for(ready, timeout=30, what="both clusters' tenant namespaces in healthy summaries")
    try:
        yield b
    finally:
        b.close()


def _jobs(sim: Simulation, cluster: str, job_id: str) -> list[Any]:
    api = config.new_client_from_config(str(sim.kubeconfig_path(cluster)), persist_config=False)  # type: ignore[no-untyped-call]
    items: list[Any] = (
        client.BatchV1Api(api).list_namespaced_job(NS, label_selector=f"gpufed.io/job-id={job_id}").items
    )
    return items


def _pods(sim: Simulation, cluster: str, job_id: str) -> list[Any]:
    api = config.new_client_from_config(str(sim.kubeconfig_path(cluster)), persist_config=False)  # type: ignore[no-untyped-call]
    items: list[Any] = (
        client.CoreV1Api(api).list_namespaced_pod(NS, label_selector=f"gpufed.io/job-id={job_id}").items
    )
    return items


def test_a_tenant_at_its_namespace_quota_runs_on_another_cluster_with_limitrange_defaults_as_the_broker_saw_them(
    sim: Simulation, broker: Broker
) -> None:
    record, _ = broker.service.submit(JobRequest("train", tenant="ml", gpus_per_pod=4, duration_seconds=30))
    broker.service.schedule_once()
    placed = broker.service.get(record.id)
    assert placed.cluster == "sim-001", placed.reason
    verdicts = {
        v.cluster: str(v)
        for v in FleetViews.of(broker.service).explain(JobRequest("again", tenant="ml", gpus_per_pod=4))[1]
    }
    assert "quota gpufed-ml: nvidia.com/gpu 4/6, job needs 4" in verdicts["sim-000"]

    assert len(_jobs(sim, "sim-001", record.id)) == 1 and _jobs(sim, "sim-000", record.id) == []
    pod = wait_for(
        lambda: next(iter(_pods(sim, "sim-001", record.id)), None), timeout=30, what="the job's pod"
    )
    admitted = pod.spec.containers[0].resources  # type: ignore[attr-defined]
    assert admitted.limits["cpu"] == "2"  # LimitRanger's default, set by the member cluster
    wait_for(
        lambda: broker.gateway.synced("sim-001"), timeout=30, what="the Jobs of every namespace followed"
    )
    before = broker.gateway.served_from_cache
    broker.service.sync_status()
    assert broker.gateway.served_from_cache > before  # the tenant namespace's Job read from the watch

    # the broker's view of the pod's requests and limits has the same default
    summary = broker.store.get_summary("sim-001")
    assert summary is not None
    where = placed.placement
    assert where is not None
    requests, limits = member_quota.effective_pod(
        placed.request, where.resource_name, where.units_per_pod, summary.namespace(NS)
    )
    assert limits["cpu"] == 2000 and requests["cpu"] == 1000  # its own request kept, no defaultRequest
    shown = {n["name"]: n for n in schemas.summary_view(summary, summary.heartbeat)["namespaces"]}
    assert shown[NS]["limits"][0]["default"] == {"cpu": 2000}  # as GET /v1/fleet shows it


def test_a_job_the_quota_would_refuse_is_never_created(sim: Simulation, broker: Broker) -> None:
    pinned = JobRequest("pinned", tenant="ml", gpus_per_pod=4, clusters=("sim-000",))
    record, _ = broker.service.submit(pinned)
    for _ in range(3):
        broker.publish()
        broker.service.schedule_once()
    waiting = broker.service.get(record.id)
    assert waiting.state is JobState.QUEUED
    assert "quota gpufed-ml: nvidia.com/gpu 4/6, job needs 4" in waiting.reason
    assert _jobs(sim, "sim-000", record.id) == []


def test_kubesim_admits_the_job_controllers_pods_as_the_api_server_does(
    sim: Simulation, kubectl: Kubectl
) -> None:
    """A Job created past the broker (kubectl) whose pod the quota refuses: no pod, a FailedCreate event
    with the API server's message, as `kubectl get events` shows it on a real cluster."""
    job = f"""\
apiVersion: batch/v1
kind: Job
metadata: {{name: too-big, namespace: {NS}}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{{name: main, image: busybox, resources: {{limits: {{nvidia.com/gpu: "4"}}}}}}]
"""
    kubectl("sim-000", "apply", "-f", "-", stdin=job)

    def refused() -> str:
        out = kubectl("sim-000", "get", "events", "-n", NS, "--field-selector", "reason=FailedCreate")
        return out if "too-big" in out else ""

    out = wait_for(refused, timeout=30, what="the FailedCreate event")
    assert 'Error creating: pods "too-big-' in str(out)
    assert (
        "is forbidden: exceeded quota: gpu, requested: requests.nvidia.com/gpu=4, used: "
        "requests.nvidia.com/gpu=4, limited: requests.nvidia.com/gpu=6"
    ) in str(out).replace("\n", " ")
    assert "too-big" not in kubectl("sim-000", "get", "pods", "-n", NS)
    kubectl("sim-000", "delete", "job", "too-big", "-n", NS)
