"""Moving running jobs (docs/migration.md): migrate, drain, and the one stop every mover uses.

Owns:
    migrate_job(job_id, to_cluster=, reason=, by=)   the contract burst-back and `gpufed migrate` call:
                        the current attempt is stopped through its stop path and the job requeued with a
                        placement constraint (to `to_cluster`, else anywhere it may go but where it is)
    _stop_and_requeue   the stop of a running job for any trigger (broker.workload.stop_path): the record
                        goes back to QUEUED first (compare-and-set at its state and attempt; preemption and
                        budget stops by the job's failover policy) with the next attempt held back while
                        the old one saves (at most grace + a margin), then the stop runs on the source
                        cluster's dispatcher thread; the reference it reads becomes the record's
                        `resume_from` (and an event), and the hold is lifted once the pods are gone; a
                        stop the member does not take (down, not yet declared lost) lifts it at once, and
                        the next attempt resumes from the last reported checkpoint (_unreachable_stop)
    drain_cluster / undrain_cluster   planned maintenance: the cluster is fenced with a drain reason (no
                        new placements, not unfenced by health), its jobs moved with their checkpoints
    note_reported_checkpoints   the checkpoints running pods report through the annotation
                        gpufed.io/checkpoint, kept on their records: a lost cluster's jobs resume from them
    _apply_pending_traits   a member that left the fleet: its checkpointing jobs are moved
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import replace

from broker.controller import faults, log_keeping
from broker.controller.base import ControllerBase
from broker.controller.job_records import PLACED_STATES
from broker.controller.work_queue import Wake
from broker.core.errors import ClusterError, Conflict, NotFound
from broker.core.model import JobRecord, JobState
from broker.core.ports import CheckpointGateway
from broker.health import failover
from broker.workload import lifecycle, stop_path
from broker.workload.manifest import job_id_label_value
from broker.workload.stop_path import StopPath, StopPlan, Trigger

log = logging.getLogger(__name__)

# Triggers that follow the job's failover policy (never: FAILED); a move on purpose always requeues.
_BY_POLICY = frozenset({Trigger.PREEMPTION, Trigger.BUDGET, Trigger.FAILOVER, Trigger.CLUSTER_LOST})
# How often running pods' reported checkpoints are read (per cluster, off the loop's thread).
REPORTED_CHECKPOINT_SECONDS = 30.0


class Migrating(ControllerBase):
    _reported_due: float = 0.0  # when note_reported_checkpoints reads the clusters again

    def migrate_job(self, job_id: str, *, to_cluster: str | None, reason: str, by: str) -> JobRecord:
        """Stop the job's current attempt through its stop path and requeue it for `to_cluster` (None:
        any cluster it may use but its current one). NotFound: no such job; Conflict (with the reason):
        finished, not running anywhere, no such target, or nowhere else to go."""
        record = self.store.get_job(job_id)
        if record is None:
            raise NotFound(f"job {job_id} not found")
        if record.state.terminal:
            raise Conflict(f"job {job_id} is already {record.state}: there is nothing to move")
        if record.state is JobState.QUEUED or not record.cluster:
            raise Conflict(f"job {job_id} is queued, not running anywhere: there is nothing to move")
        move_to = self._targets(record, to_cluster)
        why = f"migrating from {record.cluster} ({reason}; by {by})"
        moved = self._stop_and_requeue(record, Trigger.MIGRATE, why, move_to=move_to)
        if moved is None:
            raise Conflict(f"job {job_id} changed state meanwhile; migrate again")
        return moved

    def _targets(self, record: JobRecord, to_cluster: str | None) -> tuple[str, ...]:
        allowed = record.request.clusters or tuple(sorted(self.traits))
        drained = self._drained()
        if to_cluster is not None:
            if to_cluster not in self.traits:
                raise Conflict(f"no member cluster {to_cluster!r}; known: {', '.join(sorted(self.traits))}")
            if to_cluster == record.cluster:
                raise Conflict(f"job {record.id} already runs on {to_cluster}")
            if to_cluster not in allowed:
                raise Conflict(f"job {record.id} may run only on {', '.join(allowed)}")
            if to_cluster in drained:
                raise Conflict(f"cluster {to_cluster} is drained: {drained[to_cluster]}")
            return (to_cluster,)
        targets = tuple(c for c in allowed if c != record.cluster and c in self.traits and c not in drained)
        if not targets:
            raise Conflict(f"job {record.id} may run on no cluster other than {record.cluster}")
        return targets

    def _stop_and_requeue(
        self,
        record: JobRecord,
        trigger: Trigger,
        why: str,
        *,
        at: float | None = None,
        move_to: tuple[str, ...] = (),
        answers: bool = True,
        namespace: str | None = None,
    ) -> JobRecord | None:
        """Stop a placed job for `trigger` and put it back in the queue (or FAILED, by its failover
        policy, for the triggers that follow it). Returns the record written, or None when the job
        moved on meanwhile (finished, cancelled, placed again). `namespace`: where its Job is, when the
        cluster's traits are gone already (a member that left)."""
        now = self.clock.now() if at is None else at
        plan = stop_path.choose(trigger, record.request.checkpoint_grace_seconds, answers)
        if plan.path is StopPath.CHECKPOINT:
            why = f"{why}; stopping attempt {record.attempt} with a {plan.grace_seconds} s checkpoint grace period"
        step = lifecycle.failover(record, why)
        if trigger not in _BY_POLICY:
            step = lifecycle.Transition(
                JobState.QUEUED, f"{why}; requeued (attempt {record.attempt} stopped)"
            )
        if self.burst is not None and record.state in (JobState.ADMITTED, JobState.RUNNING):
            self.burst.job_ended(record, step.state, now, self.traits)
        self.store.release(record.id, record.attempt)
        faults.point("failed-over")
        target = replace(record, placement=None, workload_name=None, move_to=move_to)
        if step.state is JobState.QUEUED:
            hold = now + plan.first_hold_seconds
            target = replace(target, cluster=None, not_before=max(record.not_before, hold))
        try:
            moved = self._transition(
                target,
                step.state,
                step.reason,
                expected=record.state,
                expected_attempt=record.attempt,
                at=now,
            )
        except Conflict:
            return None
        cluster, name = record.cluster, record.workload_name
        if cluster and name and plan.path is not StopPath.REPORTED:
            stop = (
                functools.partial(self._checkpoint_stop, moved, cluster, name, plan, namespace)
                if plan.asks_the_job and isinstance(self.gateway, CheckpointGateway)
                else functools.partial(self._delete_workload, cluster, name, record)
            )
            where = namespace or self._namespace(cluster, record.request.tenant)
            self.dispatcher.submit(cluster, functools.partial(self._keep_log_then, record, where, stop))
        return moved

    def _keep_log_then(self, record: JobRecord, namespace: str, stop: Callable[[], None]) -> None:
        """On the source cluster's worker: keep the attempt's log (its pods are about to go), then stop it."""
        log_keeping.keep_attempt_log(self.store, self.gateway, record, namespace)
        stop()

    def _checkpoint_stop(
        self, moved: JobRecord, cluster: str, name: str, plan: StopPlan, namespace: str | None = None
    ) -> None:
        """On the source cluster's dispatcher thread: stop the attempt so it saves, and record what it
        said (the reference, an event) on the record, lifting the hold once its pods are gone."""
        assert isinstance(self.gateway, CheckpointGateway)
        attempt = moved.attempt
        namespace = namespace or self._namespace(cluster, moved.request.tenant)
        self._hold_from_now(moved.id, attempt, plan)
        try:
            reference, gone = self.gateway.stop_for_checkpoint(
                cluster, namespace, name, moved.id, attempt, plan.grace_seconds, plan.hold_seconds
            )
        except ClusterError as exc:
            log.warning("checkpoint stop of %s on %s failed: %s", moved.id, cluster, exc)
            self._unreachable_stop(moved, cluster, exc)
            return
        current = self.store.get_job(moved.id)
        if current is None or current.attempt != attempt:
            return  # placed again meanwhile (the hold ran out): it resumed from what it had
        saved = (
            f"checkpoint of attempt {attempt} on {cluster}: {reference}"
            if reference
            else (f"attempt {attempt} on {cluster} stopped without a checkpoint reference")
        )
        resume = reference or current.resume_from
        tail = f"; the next attempt resumes from {resume}" if resume else "; the next attempt starts afresh"
        changed = replace(current, resume_from=resume)
        if gone and current.state is JobState.QUEUED:
            changed = replace(changed, not_before=min(current.not_before, self.clock.now()))
        try:
            self._transition(
                changed, current.state, saved + tail, expected=current.state, expected_attempt=attempt
            )
        except Conflict:
            log.info("%s moved on before its checkpoint (%s) was recorded", moved.id, reference)

    def _unreachable_stop(self, moved: JobRecord, cluster: str, exc: ClusterError) -> None:
        """The member did not take the stop (down, not yet declared lost): the failover path at once. The
        hold is lifted, so the next attempt starts now (not when grace + margin + start ran out, 80-90 s)
        from the last checkpoint the job reported (resume_from, note_reported_checkpoints); the old
        attempt's Job is deleted by the sweep once the member answers (its attempt is not current)."""
        attempt = moved.attempt
        current = self.store.get_job(moved.id)
        if current is None or current.attempt != attempt or current.state is not JobState.QUEUED:
            self._event(moved, f"checkpoint stop of attempt {attempt} on {cluster} failed: {exc}")
            return
        resume = current.resume_from
        tail = (
            f"the next attempt starts now from its last reported checkpoint {resume}"
            if resume
            else "the next attempt starts now, afresh (no checkpoint reported)"
        )
        changed = replace(current, not_before=min(current.not_before, self.clock.now()))
        try:
            self._transition(
                changed,
                current.state,
                f"cannot reach {cluster} to stop attempt {attempt} ({exc}); {tail}",
                expected=current.state,
                expected_attempt=attempt,
            )
        except Conflict:
            return  # it moved on meanwhile

    def _hold_from_now(self, job_id: str, attempt: int, plan: StopPlan) -> None:
        """The stop starts (it may have waited for a dispatcher thread): the next attempt is held back
        for the whole of its grace period and margin from now, not from the requeue."""
        current = self.store.get_job(job_id)
        until = self.clock.now() + plan.hold_seconds
        if current is None or current.attempt != attempt or current.state is not JobState.QUEUED:
            return
        if current.not_before < until:
            try:
                self._save(replace(current, not_before=until))
            except Conflict:
                return  # it moved on meanwhile

    # ------------------------------------------------------------------ drain

    def _drained(self) -> dict[str, str]:
        return {c: why for c, why in self.store.fenced().items() if failover.is_drain(why)}

    def drain_cluster(self, cluster: str, *, reason: str, by: str) -> list[JobRecord]:
        """Planned maintenance: no new work on `cluster` (fenced with a drain reason, which health does
        not lift), its jobs moved with their checkpoints. Again on a drained cluster: moves what is
        left. Conflict: no such cluster, or it is fenced as lost. Returns the jobs moved."""
        if cluster not in self.traits:
            raise NotFound(f"cluster {cluster} not found")
        why = failover.drain_reason(by, reason)
        if not self.store.fence(cluster, why):
            current = self.store.fenced().get(cluster)
            if current is not None and not failover.is_drain(current):
                raise Conflict(f"cluster {cluster} is fenced ({current}); drain it once it answers again")
        self._fenced.add(cluster)
        self._fence_reasons[cluster] = self.store.fenced().get(cluster, why)
        moved = []
        for record in self.store.list_jobs(list(PLACED_STATES)):
            if record.cluster != cluster:
                continue
            allowed = record.request.clusters or tuple(sorted(self.traits))
            targets = tuple(c for c in allowed if c != cluster)
            step = self._stop_and_requeue(record, Trigger.DRAIN, f"cluster {cluster} {why}", move_to=targets)
            if step is not None:
                moved.append(step)
        log.warning("cluster %s %s: %d job(s) moved", cluster, why, len(moved))
        return moved

    def undrain_cluster(self, cluster: str) -> bool:
        """Offer a drained cluster again. Returns whether it was drained; Conflict: fenced as lost."""
        if cluster not in self.traits:
            raise NotFound(f"cluster {cluster} not found")
        current = self.store.fenced().get(cluster)
        if current is None:
            return False
        if not failover.is_drain(current):
            raise Conflict(
                f"cluster {cluster} is fenced ({current}), not drained: it is offered once it answers"
            )
        self.store.unfence(cluster)
        self._fenced.discard(cluster)
        self._fence_reasons.pop(cluster, None)
        self._lift_drain_targets(cluster)
        self.work.wake(Wake.CLUSTER)  # offered again: the queue may place there
        return True

    def _lift_drain_targets(self, cluster: str) -> None:
        """The jobs drain moved off `cluster` and still waiting may go back there: their next attempt's
        "anywhere but here" (move_to, exactly what drain set) ends with the drain. A migrate's own
        target stays."""
        for record in self.store.list_jobs([JobState.QUEUED]):
            allowed = record.request.clusters or tuple(sorted(self.traits))
            if not record.move_to or cluster not in allowed:
                continue
            if record.move_to != tuple(c for c in allowed if c != cluster):
                continue
            try:
                self._save(replace(record, move_to=()))
            except Conflict:
                continue  # it moved on meanwhile

    # ------------------------------------------------------------------ members, reported checkpoints

    def _apply_pending_traits(self) -> None:
        before = dict(self.traits)
        super()._apply_pending_traits()
        left = {c: t for c, t in before.items() if c not in self.traits}
        if not left:
            return
        for record in self._placed_jobs():
            gone = left.get(record.cluster or "")
            if gone is not None and record.request.checkpoint_grace_seconds is not None:
                self._stop_and_requeue(
                    record,
                    Trigger.MEMBER_LEFT,
                    f"cluster {gone.name} left the fleet",
                    namespace=gone.namespace_for(record.request.tenant),
                )

    def note_reported_checkpoints(self) -> None:
        """Read, per cluster and at most every REPORTED_CHECKPOINT_SECONDS, the checkpoints the running
        checkpointing jobs' pods report (off the loop's thread); a new one is kept on the record."""
        if not isinstance(self.gateway, CheckpointGateway):
            return
        now = self.clock.now()
        if now < self._reported_due:
            return
        self._reported_due = now + REPORTED_CHECKPOINT_SECONDS
        by_cluster: dict[str, list[JobRecord]] = {}
        for r in self.records.checkpointing([JobState.RUNNING]) if self.records.built else []:
            if r.cluster:  # the checkpointing jobs alone (an index): not a walk of every running job
                by_cluster.setdefault(r.cluster, []).append(r)
        for cluster, jobs in by_cluster.items():
            task = functools.partial(self._read_reported, cluster, jobs)
            self.dispatcher.submit_once(cluster, "checkpoints", task)

    def _read_reported(self, cluster: str, jobs: list[JobRecord]) -> None:
        assert isinstance(self.gateway, CheckpointGateway)
        for namespace in sorted({self._namespace(cluster, r.request.tenant) for r in jobs}):
            reported = self.gateway.reported_checkpoints(cluster, namespace)
            for r in jobs:
                ref = reported.get((job_id_label_value(r.id), r.attempt))
                if (
                    ref is None
                    or ref == r.resume_from
                    or self._namespace(cluster, r.request.tenant) != namespace
                ):
                    continue
                try:
                    self._save(replace(r, resume_from=ref))
                except Conflict:
                    continue  # it finished or moved meanwhile
