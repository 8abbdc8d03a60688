"""The controllers that make one simulated cluster live, and `Controllers`, which runs them all.

Owns `Controllers(store, clock, cluster)`:
- `tick()`: one synchronous pass of every controller, in the order namespace controller -> garbage
  collector -> Kueue -> Job controller -> ComputeDomain controller -> DRA claims -> scheduler -> NRT updater -> kubelet -> autoscaler -> spot
  interrupter -> disruption (PDB status) -> quota (ResourceQuota usage). Each controller keeps dirty
  flags fed
  by store listeners and a next-due time for simulated-time work (pod exits, provisioning delays, idle
  nodes), so a tick where nothing changed costs a few attribute reads.
- `settle(max_passes)`: tick until nothing is left to do now (tests and the admin endpoint).
- the simulation runner (kubesim.sim) ticks every cluster's `Controllers` from one task.

One module per controller: computedomain.py (+ gangs.py: Workload gangs, domains in one clique), spot.py, namespaces.py, jobs.py (+ jobfailure.py), scheduler.py (+ preemption.py), kubelet.py, nrt.py, kueue.py, autoscaler.py, gc.py,
disruption.py, quota.py,
events.py (the Event recorder); accounting.py tracks allocation per node and NUMA zone, matching.py the
selector/affinity/taint predicates, pods.py the pod arithmetic.
"""

from __future__ import annotations

from kubesim.clock import SimClock
from kubesim.controllers.accounting import Accounting
from kubesim.controllers.autoscaler import Autoscaler
from kubesim.controllers.computedomain import ComputeDomainController
from kubesim.controllers.dcgm_exporter import DcgmExporterController
from kubesim.controllers.disruption import DisruptionController
from kubesim.controllers.dra import DraController
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.gc import GarbageCollector
from kubesim.controllers.jobs import JobController
from kubesim.controllers.jobsets import JobSetController
from kubesim.controllers.kubelet import Kubelet
from kubesim.controllers.kueue import KueueController
from kubesim.controllers.namespaces import NamespaceController
from kubesim.controllers.nrt import TopologyUpdater
from kubesim.controllers.pytorch import PyTorchJobController
from kubesim.controllers.quota import QuotaController
from kubesim.controllers.ray import RayController
from kubesim.controllers.scheduler import Scheduler
from kubesim.controllers.spot import SpotInterrupter
from kubesim.fleet import ClusterSpec
from kubesim.gpuhealth import ClusterGpus, cluster_gpus
from kubesim.store import ObjectStore

__all__ = ["Controllers"]


class Controllers:
    """Every controller of one simulated cluster."""

    def __init__(
        self, store: ObjectStore, clock: SimClock, cluster: ClusterSpec, gpus: ClusterGpus | None = None
    ) -> None:
        self.store = store
        self.clock = clock
        self.cluster = cluster
        self.events = EventRecorder(store, clock)
        self.accounting = Accounting(store)
        self.namespaces = NamespaceController(store, clock)
        self.gc = GarbageCollector(store, clock)
        self.kueue = KueueController(store, clock, self.events)
        self.jobs = JobController(store, clock, self.events)
        # workload operators (jobsets.py, ray.py, pytorch.py): their objects are only served where installed
        self.jobsets = JobSetController(store, clock, self.events)
        self.ray = RayController(store, clock, self.events)
        self.pytorch = PyTorchJobController(store, clock, self.events)
        self.scheduler = Scheduler(store, clock, cluster, self.accounting, self.events)
        self.dra = DraController(store, clock, self.events)
        self.scheduler.dra = self.dra
        self.dra.on_change.append(self._dra_changed)
        self.domains = ComputeDomainController(store, clock, self.events)
        self.dra.channel_filter = self.domains.channel_filter
        self.topology = TopologyUpdater(store, self.accounting)
        self.kubelet = Kubelet(store, clock, cluster, self.accounting, self.events)
        self.autoscaler = Autoscaler(store, clock, cluster, self.accounting, self.events)
        self.spot = SpotInterrupter(store, clock, cluster, self.events)
        self.disruption = DisruptionController(store, clock)
        self.quota = QuotaController(store)
        self.gpus = gpus or cluster_gpus(cluster, store)
        self.kubelet.gpus = self.gpus
        self.topology.unhealthy = self.gpus.unhealthy  # an unhealthy GPU leaves its NUMA zone too
        self.gpus.on_health.append(self._gpu_health_changed)
        exporter = cluster.dcgm_exporter
        self.dcgm = DcgmExporterController(
            store, clock, self.gpus, self.kubelet, exporter is not None and exporter.enabled
        )

    def _dra_changed(self) -> None:
        self.scheduler.dirty = True

    def _gpu_health_changed(self, node: str) -> None:
        self.accounting.dirty_topology.add(node)  # (the set is swapped each tick: no bound .add)

    def busy(self) -> bool:
        """Whether a tick now would have work: a dirty controller or simulated-time work that is due."""
        if (
            self.namespaces.dirty
            or self.gc.dirty
            or self.kueue.dirty
            or self.jobs.dirty
            or self.jobsets.dirty
            or self.ray.dirty
            or self.pytorch.dirty
            or self.dra.dirty
            or self.domains.dirty
            or self.scheduler.dirty
            or self.topology.dirty
            or self.kubelet.dirty
            or self.autoscaler.dirty
            or self.disruption.dirty
            or self.quota.dirty
            or self.dcgm.dirty
        ):
            return True
        now = self.clock.now()
        return any(d is not None and d <= now for d in self._dues())

    def _dues(self) -> tuple[float | None, ...]:
        return (
            self.gc.next_due,
            self.jobs.next_due,
            self.kubelet.next_due,
            self.autoscaler.next_due,
            self.spot.next_due,
            self.ray.next_due,
            self.dcgm.next_due,
        )

    def next_due(self) -> float | None:
        """The earliest simulated time at which timed work (a pod exit, a node arriving...) is due."""
        dues = [d for d in self._dues()[1:] if d is not None]
        return min(dues) if dues else None

    def tick(self) -> None:
        if not self.busy():
            return
        self.namespaces.tick()
        self.gc.tick()
        self.kueue.tick()
        self.jobsets.tick()
        self.ray.tick()
        self.pytorch.tick()
        self.jobs.tick()
        self.domains.tick()
        self.dra.tick()
        self.scheduler.tick()
        self.topology.tick()
        self.kubelet.tick()
        self.autoscaler.tick()
        self.spot.tick()
        self.disruption.tick()
        self.quota.tick()
        self.dcgm.tick()

    def settle(self, max_passes: int = 100) -> int:
        """Tick until no controller has work due now; returns the passes taken."""
        for n in range(max_passes):
            if not self.busy():
                return n
            self.tick()
        return max_passes
