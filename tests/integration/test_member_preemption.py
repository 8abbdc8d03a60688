"""Preemption on real parts: kubesim (PriorityClasses set with the real kubectl), the broker's pollers,
gateway and service over real Redis. A production job that fits nowhere evicts the batch job that has run
the shortest, runs, and the victim is requeued and finishes later; the storm limit holds a second
preemption back (the second production job waits its turn instead)."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.cluster_watcher import ClusterWatcher
from adapters.kube_gateway import KubeGateway
from adapters.redis_store import RedisStateStore
from adapters.system_clock import SystemClock
from broker.controller.service import BrokerService, ServiceSettings
from broker.core.model import ClusterTraits, JobRequest, JobState
from broker.queue import queueing
from broker.scheduler.preemption import PreemptionPolicy
from kubesim.fleet import synthetic_fleet
from kubesim.sim import Simulation
from tests.conftest import wait_for

pytestmark = pytest.mark.integration

KUBECTL = Path(__file__).resolve().parents[2] / "tools" / "bin" / "kubectl"
CLUSTER = "sim-000"  # one node of 8 H100s: two NUMA zones of 4 (single-numa-node)
TRAITS = {CLUSTER: ClusterTraits(CLUSTER)}


class Broker:
    def __init__(self, sim: Simulation, redis_url: str) -> None:
        self.store = RedisStateStore(redis_url, prefix="mpreempt" + uuid.uuid4().hex[:8])
        self.watcher = ClusterWatcher(CLUSTER, sim.kubeconfig_path(CLUSTER), flush_interval_s=0.02)
        self.watcher.start()
        self.gateway = KubeGateway.from_kubeconfigs({CLUSTER: (sim.kubeconfig_path(CLUSTER), None)})
        settings = ServiceSettings(
            queue=queueing.QueuePolicy(priorities={"production": 100000, "batch": 0}),
            preemption=PreemptionPolicy(frozenset({"production"}), max_per_tenant=1, max_global=4),
        )
        self.service = BrokerService(self.store, self.gateway, SystemClock(), TRAITS, settings=settings)

    def step(self) -> None:
        """One turn of the control loop: publish, place, follow."""
        self.store.put_summary(self.watcher.summary(TRAITS[CLUSTER]))
        self.service.schedule_once()
        self.service.sync_status()

    def state(self, job_id: str) -> JobState:
        self.step()
        return self.service.get(job_id).state

    def reason(self, job_id: str) -> str:
        self.step()
        return self.service.get(job_id).reason

    def summary_written(self) -> bool:
        self.step()
        return self.store.get_summary(CLUSTER) is not None

    def close(self) -> None:
        self.watcher.stop()
        self.gateway.close()
        self.store.close()


@pytest.fixture
def broker(tmp_path: Path, redis_url: str) -> Iterator[Broker]:
    if not KUBECTL.is_file() or not os.access(KUBECTL, os.X_OK):
        pytest.fail(f"kubectl is missing at {KUBECTL}: run `make setup`; these tests do not skip")
    with Simulation(synthetic_fleet(1, 1), tmp_path / "sim", speed=50.0) as sim:
        env = {**os.environ, "KUBECONFIG": str(sim.kubeconfig_path(CLUSTER)), "HOME": str(tmp_path)}
        for name, value, policy in (("production", 100000, "PreemptLowerPriority"), ("batch", 0, "Never")):
            subprocess.run(
                [
                    str(KUBECTL),
                    "create",
                    "priorityclass",
                    name,
                    f"--value={value}",
                    f"--preemption-policy={policy}",
                ],
                env=env,
                check=True,
                capture_output=True,
                timeout=60,
            )
        b = Broker(sim, redis_url)
        try:
            wait_for(b.summary_written, timeout=20, what="a summary")
            yield b
        finally:
            b.close()


def test_a_production_job_preempts_the_cheapest_victim_runs_and_the_victim_finishes_later(
    broker: Broker,
) -> None:
    service = broker.service

    def submit(name: str, tenant: str, klass: str, seconds: float) -> str:
        request = JobRequest(
            name, tenant=tenant, gpus_per_pod=4, priority_class=klass, duration_seconds=seconds
        )
        return service.submit(request)[0].id

    old = submit("old", "cv", "batch", 150)
    wait_for(lambda: broker.state(old) is JobState.RUNNING, timeout=30, what="the old batch job running")
    young = submit("young", "cv", "batch", 150)
    wait_for(lambda: broker.state(young) is JobState.RUNNING, timeout=30, what="the young batch job running")

    urgent = submit("urgent", "ml", "production", 30)
    wait_for(
        lambda: (service.get(young).attempt == 1 and broker.state(young) is JobState.QUEUED) or None,
        timeout=30,
        what="a preemption",
    )
    assert service.get(young).reason.startswith(
        f"preempted by {urgent} (priority 100000) to free 4 H100-80GB on {CLUSTER}"
    )
    assert broker.state(old) is JobState.RUNNING  # it has run longer: evicting it would lose more

    # the storm limit: ml may preempt once per window; its second production job waits, saying why
    second = submit("urgent-2", "ml", "production", 30)
    wait_for(
        lambda: "preemption held back" in broker.reason(second),
        timeout=30,
        what="the storm limit",
    )
    assert broker.state(old) is JobState.RUNNING

    wait_for(
        lambda: broker.state(urgent) is JobState.SUCCEEDED, timeout=60, what="the production job to finish"
    )
    wait_for(lambda: broker.state(second) is JobState.SUCCEEDED, timeout=60, what="the second production job")
    wait_for(lambda: broker.state(young) is JobState.SUCCEEDED, timeout=60, what="the victim to finish later")
    assert service.get(young).attempt == 2 and broker.state(old) is JobState.SUCCEEDED
