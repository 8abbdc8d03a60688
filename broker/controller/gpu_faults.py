"""Jobs on broken GPUs (docs/health.md): moved off through the checkpoint path, or requeued when their
pod died of the fault, never FAILED for it.

Owns GpuFaults (a Migrating mixin of BrokerService):
    move_off_faulty_gpus()   a control-loop step: for each cluster whose summary shows a quarantined,
                             unhealthy GPU held by a running job's pod (dcgm-exporter's pod mapping), that
                             job is stopped through its stop path (Trigger.GPU_FAULT: a checkpointing job
                             saves and resumes with GPUFED_RESUME_FROM) and requeued with attempt + 1,
                             keeping off that node (level 2 anti-affinity, AVOID_NODE_SECONDS); its event
                             says "moved off GPU 3 of node X: XID 79 (...)". A fault held back by the
                             circuit breaker moves nobody. Costs nothing while no cluster shows a fault.
    _gpu_death(record)       for status sync: the fault that killed a job's pod, if any (a job about to
                             be FAILED whose pod held a faulted GPU is requeued the same way instead)
The decisions are broker.workload.gpu_moves'.
"""

from __future__ import annotations

import functools
import logging

from broker.controller.member_troubles import TroubleMemory
from broker.controller.migrating import Migrating
from broker.core.gpu_health import GpuFault
from broker.core.model import ClusterSummary, JobRecord, JobState
from broker.core.records import ClusterEvent
from broker.workload import gpu_moves
from broker.workload.stop_path import Trigger

log = logging.getLogger(__name__)


class GpuFaults(Migrating):
    _gpu_breakers: dict[str, bool]  # cluster -> its circuit breaker was open at the last pass
    _troubles: TroubleMemory  # StatusSync's: the failure held back is looked at again at its deadline
    _gpu_held: dict[tuple[str, int], float]  # (job id, attempt) -> when its failure was first held back

    def _gpu_jobs(self, cluster: str) -> list[JobRecord]:
        return [r for r in self._placed_jobs() if r.cluster == cluster and r.state is not JobState.PLACED]

    def move_off_faulty_gpus(self) -> list[JobRecord]:
        """Stop and requeue the running jobs whose GPU went fatal (see the module docstring)."""
        moved: list[JobRecord] = []  # the FleetCache as observe_clusters read it this pass (no read here)
        for summary in self.cache.observed():
            self._note_breaker(summary)
            faults = [f for f in summary.gpu_health.faults if gpu_moves.movable(f) and f.pod]
            if not faults or summary.cluster not in self.traits:
                continue
            cluster = summary.cluster
            jobs = self._gpu_jobs(cluster)
            for fault in faults:
                record = gpu_moves.job_on(fault, jobs, functools.partial(self._job_namespace, cluster))
                if record is None:
                    continue
                done = self._move_off(record, fault, gpu_moves.move_reason(fault))
                if done is not None:
                    moved.append(done)
                    jobs = [j for j in jobs if j.id != record.id]
        return moved

    def _note_breaker(self, summary: ClusterSummary) -> None:
        """The circuit breaker's alert as a cluster event, when it opens and when it closes."""
        h, was = summary.gpu_health, self._gpu_breakers.get(summary.cluster, False)
        if h.breaker_open == was:
            return
        self._gpu_breakers[summary.cluster] = h.breaker_open
        text = (
            f"GPU quarantine {h.breaker_reason}"
            if h.breaker_open
            else "GPU quarantine circuit breaker closed"
        )
        (log.warning if h.breaker_open else log.info)("cluster %s: %s", summary.cluster, text)
        self.store.append_cluster_event(ClusterEvent(summary.cluster, self.clock.now(), summary.health, text))

    def _job_namespace(self, cluster: str, record: JobRecord) -> str:
        return self._namespace(cluster, record.request.tenant)

    def _move_off(self, record: JobRecord, fault: GpuFault, why: str) -> JobRecord | None:
        until = self.clock.now() + gpu_moves.AVOID_NODE_SECONDS
        log.warning("job %s (attempt %d) on %s: %s", record.id, record.attempt, record.cluster, why)
        return self._stop_and_requeue(gpu_moves.with_avoided(record, fault, until), Trigger.GPU_FAULT, why)

    def _gpu_death(self, record: JobRecord) -> GpuFault | None:
        """The fault (fatal, quarantined or held back) on a GPU this job's pod held, from its cluster's
        summary; None when its cluster shows none."""
        if not record.cluster:
            return None
        state = self.cache.state(record.cluster)
        summary = state.summary if state is not None else None
        if summary is None or not summary.gpu_health.faults:
            return None
        namespace = self._namespace(record.cluster, record.request.tenant)
        for fault in summary.gpu_health.faults:
            if gpu_moves.job_on(fault, [record], lambda _: namespace) is not None:
                return fault
        return None

    def _failed_on_a_gpu(self, record: JobRecord) -> tuple[bool, JobRecord | None]:
        """Status sync is about to fail this job: (handled, the record written). Its pod died of a GPU
        fault: requeued (attempt + 1) from its checkpoint, off that node. No fault shown yet, on a cluster
        whose GPU health is read: the verdict waits GPU_DEATH_SETTLE_SECONDS (a pod dies seconds after its
        GPU, the health read may come after), the job looked at again then; then FAILED as before."""
        fault = self._gpu_death(record)
        key = (record.id, record.attempt)
        if fault is not None:
            self._gpu_held.pop(key, None)
            return True, self._move_off(record, fault, gpu_moves.died_reason(fault))
        state = self.cache.state(record.cluster) if record.cluster else None
        if state is None or not state.summary.gpu_health.observed:
            return False, None
        now = self.clock.now()
        first = self._gpu_held.setdefault(key, now)
        if now - first < gpu_moves.GPU_DEATH_SETTLE_SECONDS:
            self._troubles.look_again(record.id, first + gpu_moves.GPU_DEATH_SETTLE_SECONDS)
            return True, None
        self._gpu_held.pop(key, None)
        return False, None
