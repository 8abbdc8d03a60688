"""Member trouble in the status sync: what a placed job's pods and the Job controller's events say went
wrong inside its member, shown in the job's reason and acted on (docs/health.md).

Owns MemberTroubles (a ControllerBase mixin of StatusSync) and TroubleMemory (when each job's trouble was
first seen, in the leader's memory: a new leader starts the clocks afresh, which only waits
longer). Decisions are broker.workload.member_trouble's; this applies them:

    NOTE      the reason (and one event) once per change of what the member says
    WITHDRAW  the attempt's Job is deleted first, then the record goes back to QUEUED at attempt + 1 by
              the same fenced compare-and-set (state and attempt) failover uses, with the cluster in the
              record's `avoid` list for memberAvoidSeconds; as the record leaves the attempt only after
              its Job is gone, no new attempt exists while the old one may (a stale leader's write is
              refused: Fenced; a failed delete leaves the job where it is, tried again next pass)
    FAIL      the same, ending FAILED (image pull), or lifecycle's FAILED with the last termination
    PARK      a WITHDRAW that leaves the job avoiding every cluster it may use (withdrawn from each
              within memberAvoidSeconds): it stops bouncing. QUEUED with the reason, its avoid list
              cleared, and parked as a never-fit job is (scheduling: until the fleet's structure, node
              sizes included, changes); then offered to every cluster again (issue 48 finding 9)

A job whose trouble has a deadline is looked at again once it passes (due()), not every pass: only the
jobs in trouble are, so an idle fleet of running jobs costs nothing more.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, replace

from broker import telemetry
from broker.controller.base import ControllerBase
from broker.core.errors import ClusterError, Conflict
from broker.core.model import JobRecord, JobState
from broker.core.ports import MemberWatch
from broker.core.workloads import PodTrouble, WorkloadStatus
from broker.workload import lifecycle, member_trouble
from broker.workload.member_trouble import Act

log = logging.getLogger(__name__)


@dataclass
class TroubleMemory:
    """job id -> (attempt, trouble group, first seen); job id -> when to look again. Thread-safe: the
    per-cluster sync workers write it. Holds only the jobs in trouble."""

    since: dict[str, tuple[int, str, float]] = field(default_factory=dict)
    deadlines: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def seen(self, job_id: str, attempt: int, trouble: PodTrouble, now: float) -> tuple[float, bool]:
        """When this spell of `trouble` of this attempt began, and whether it begins now."""
        g = member_trouble.group(trouble.kind)
        with self.lock:
            old = self.since.get(job_id)
            if old is not None and old[:2] == (attempt, g):
                return old[2], False
            self.since[job_id] = (attempt, g, now)
            return now, True

    def holds(self, job_id: str) -> bool:
        """Whether the job's trouble is remembered. Without the lock: a job's entries are added only by
        its own cluster's sync worker (the caller; due() only removes), and a dict's membership test is
        atomic."""
        return job_id in self.since or job_id in self.deadlines

    def forget(self, job_id: str) -> None:
        if not self.holds(job_id):
            return  # nothing held (a running job's every resync): no lock taken
        with self.lock:
            self.since.pop(job_id, None)
            self.deadlines.pop(job_id, None)

    def look_again(self, job_id: str, at: float | None) -> None:
        with self.lock:
            if at is None:
                self.deadlines.pop(job_id, None)
            else:
                self.deadlines[job_id] = at

    def any_due(self, now: float) -> bool:
        """Whether due(now) would give a job (nothing taken)."""
        with self.lock:
            return any(at <= now for at in self.deadlines.values())

    def due(self, now: float) -> set[str]:
        """The jobs whose trouble's deadline has passed (each given once; set again if still in trouble)."""
        with self.lock:
            ready = {j for j, at in self.deadlines.items() if at <= now}
            for j in ready:
                del self.deadlines[j]
            return ready


class MemberTroubles(ControllerBase):
    _troubles: TroubleMemory
    # (gateway, the gateway as a MemberWatch or None): isinstance over a runtime_checkable Protocol walks
    # the Protocol's members on every call, too dear once per job per resync; asked once per gateway
    _member_watch_of: tuple[object, MemberWatch | None] | None = None

    def _member_watch(self) -> MemberWatch | None:
        seen = self._member_watch_of
        if seen is None or seen[0] is not self.gateway:
            gateway = self.gateway
            seen = (gateway, gateway if isinstance(gateway, MemberWatch) else None)
            self._member_watch_of = seen
        return seen[1]

    def _member_quiet(self, record: JobRecord, namespace: str) -> bool:
        """Whether _member_step has nothing to do for a job lifecycle saw no step for: the member reports
        no trouble, none is remembered, and its reason shows none. The question a resync asks of
        every running job, so it takes no lock of the broker's and writes nothing."""
        gateway = self._member_watch()
        if gateway is None or not record.cluster or not record.workload_name:
            return True
        if self._troubles.holds(record.id) or record.reason.startswith(member_trouble.TROUBLE_PREFIX):
            return False
        return gateway.member_trouble(record.cluster, namespace, record.workload_name).trouble is None

    def _member_step(
        self, record: JobRecord, status: WorkloadStatus, step: lifecycle.Transition | None
    ) -> tuple[bool, lifecycle.Transition | None, JobRecord | None]:
        """(handled, step, written): handled -> the job is done with for this pass (`written` is what was
        written, if anything); otherwise go on with `step` (perhaps with the member's words added)."""
        gateway = self._member_watch()
        if gateway is None or not record.cluster or not record.workload_name:
            return False, step, None
        namespace = self._namespace(record.cluster, record.request.tenant)
        if step is not None and (step.state.terminal or step.state is JobState.QUEUED):
            self._troubles.forget(record.id)
            if step.state is JobState.FAILED and status.exists and not status.disrupted:
                seen = gateway.last_termination(record.cluster, namespace, record.workload_name)
                if seen.termination is not None:
                    telemetry.member_stuck.labels("crashed").inc()
                    step = replace(step, reason=member_trouble.failed_reason(step.reason, seen.termination))
            return False, step, None
        trouble = gateway.member_trouble(record.cluster, namespace, record.workload_name).trouble
        if trouble is None:
            self._troubles.forget(record.id)
            if step is None and record.reason.startswith(member_trouble.TROUBLE_PREFIX):
                return True, None, self._note(record, _calm_reason(record, status))  # it cleared
            return False, step, None
        now = self.clock.now()
        since, new = self._troubles.seen(record.id, record.attempt, trouble, now)
        if new:
            telemetry.member_stuck.labels(trouble.kind).inc()
        policy = self.settings.trouble_policy
        verdict = member_trouble.judge(record, trouble, since, now, policy)
        if verdict.act is Act.NOTE:
            self._troubles.look_again(record.id, member_trouble.deadline(trouble, since, policy))
            if step is not None and step.state is JobState.RUNNING:
                return False, step, None  # every pod ready: the state says more than a passing trouble
            if step is not None:
                return False, replace(step, reason=verdict.reason), None
            if verdict.reason == record.reason:
                return True, None, None  # said already: once per change, not once per pass
            return True, None, self._note(record, verdict.reason)
        return True, None, self._act(record, verdict, namespace, now)

    def _note(self, record: JobRecord, reason: str) -> JobRecord | None:
        try:
            return self.writer.note(record, reason)
        except Conflict:
            return None  # it moved on meanwhile: the next change is read afresh

    def _act(
        self, record: JobRecord, verdict: member_trouble.Verdict, namespace: str, now: float
    ) -> JobRecord | None:
        """Withdraw (requeue elsewhere, or FAILED by a failover policy of never) or fail the attempt: its
        Job deleted first, then the record moved off it (compare-and-set at state and attempt, fenced)."""
        cluster = record.cluster or ""
        try:
            self.gateway.delete_workload(cluster, namespace, record.workload_name or "")
        except ClusterError as exc:
            log.warning("cannot withdraw %s from %s: %s; tried again next pass", record.id, cluster, exc)
            self._troubles.look_again(record.id, now)
            return None
        if verdict.act is Act.WITHDRAW:
            step = lifecycle.failover(record, verdict.reason)
            telemetry.member_stuck.labels("withdrawn").inc()
        else:
            step = lifecycle.Transition(JobState.FAILED, verdict.reason)
            telemetry.member_stuck.labels("image-pull-failed").inc()
        if self.burst is not None and record.state in (JobState.ADMITTED, JobState.RUNNING):
            self.burst.job_ended(record, step.state, now, self.traits)
        with self._settling_lock:
            self._settling.pop((record.id, record.attempt), None)
        self.store.release(record.id, record.attempt)
        self._troubles.forget(record.id)
        target = replace(record, placement=None, workload_name=None)
        if step.state is JobState.QUEUED:
            policy = self.settings.trouble_policy
            avoid = member_trouble.avoid(record, cluster, now, policy)
            allowed = set(record.request.clusters or self.traits)
            if allowed and allowed <= {c for c, until in avoid if until > now}:
                step = lifecycle.Transition(
                    JobState.QUEUED,
                    f"parked: withdrawn from every cluster it may use ({', '.join(sorted(allowed))}), last "
                    f"{verdict.reason}; offered again when a member's nodes or the fleet change",
                )
                target = replace(target, cluster=None, avoid=())
                self._parked[record.id] = self._offered_fleet()
            else:
                target = replace(target, cluster=None, avoid=avoid)
        log.info("job %s: %s", record.id, step.reason)
        try:
            return self._transition(
                target, step.state, step.reason, expected=record.state, expected_attempt=record.attempt
            )
        except Conflict:
            return None  # cancelled or moved on meanwhile (its Job is gone either way)

    def _offered_fleet(self) -> str:
        """What a parked job waits to change (Scheduling's, first in the service's bases, is the one)."""
        raise NotImplementedError

    def _troubled_due(self) -> set[str]:
        """The jobs whose member trouble reaches its deadline now: read them in this pass."""
        return self._troubles.due(self.clock.now())


def _calm_reason(record: JobRecord, status: WorkloadStatus) -> str:
    """The reason once the member's trouble cleared (lifecycle's words for the state the job is in)."""
    where = record.cluster or "?"
    if record.state is JobState.RUNNING:
        return f"running on {where} ({status.ready} pod(s) ready)"
    if record.state is JobState.PLACED and status.suspended:
        return f"waiting for Kueue admission on {where}"
    return f"admitted on {where}, pods starting"
