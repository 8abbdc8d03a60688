"""Status sync: follow placed jobs in their member clusters, by event.

A Job whose status changed is put on the work queue by the informer's callback (watch_changes); a pass
reads only those, every job of a cluster whose watch is not synced (or a gateway that does not watch),
and every job from memory every STATUS_RESYNC_SECONDS. lifecycle.observe decides; a cluster's
transitions are written together (one round trip); reservations are released once the pods are counted
by a newer summary of their cluster (settling) or the job ended.
What the pods and the Job controller's events say beyond the Job's status (member trouble) is read and
acted on by MemberTroubles (broker.controller.member_troubles).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, replace

from broker import telemetry
from broker.controller import faults, log_keeping
from broker.controller.gpu_faults import GpuFaults
from broker.controller.job_records import PLACED_STATES
from broker.controller.member_troubles import MemberTroubles
from broker.controller.state_writer import Transition
from broker.core.errors import (
    ClusterError,
    Conflict,
    Fenced,
    StoreError,
)
from broker.core.model import (
    JobRecord,
    JobState,
)
from broker.core.ports import WorkloadCloser, WorkloadWatch
from broker.core.workloads import WorkloadStatus
from broker.workload import lifecycle
from broker.workload.kinds import follow

log = logging.getLogger(__name__)

# A settled reservation goes once its cluster's summary was written again (in full or by a heartbeat:
# SummaryMarks.written) AND this long has passed: a later write alone can be a heartbeat that the pods'
# events had not yet reached (the Job's
# status comes to the broker by its own watch, the pods to the poller by another). Seen once in CI: two
# brokers, a pod Pending "Insufficient nvidia.com/gpu" (tests/integration/test_two_brokers.py).
SETTLE_SECONDS = 1.0

# Followed by watch, a job's status is read when its Job changed; every job is compared with the
# informer caches (memory, no request) this often anyway.
STATUS_RESYNC_SECONDS = 60.0


def _frees(state: JobState) -> bool:
    """A transition to `state` releases the job's reservation at once (it ended, or went back to the
    queue); RUNNING releases it once its cluster's summary counts the pods (settling)."""
    return state is JobState.QUEUED or state.terminal


@dataclass(frozen=True)
class _Move:
    """A transition status sync decided for one job, written with its cluster's others."""

    record: JobRecord  # as read
    target: JobRecord  # as it will be written, before its state and reason
    state: JobState
    reason: str
    namespace: str


class StatusSync(MemberTroubles, GpuFaults):
    def watch_changes(self) -> None:
        """Follow Job statuses by event (the leader's service): a gateway that watches says which Job
        changed, and a pass reads only those (plus every job on a cluster whose watch is not synced, and
        all of them from memory every STATUS_RESYNC_SECONDS)."""
        if isinstance(self.gateway, WorkloadWatch):
            self._watch = self.gateway
            self.gateway.subscribe(self.workload_changed)

    def workload_changed(self, cluster: str, job_id: str) -> None:
        """A Job's status changed in its cluster (an informer thread): read it in the next pass."""
        self.work.add_job(job_id)

    def status_due(self) -> bool:
        """Whether a pass that no job change woke must sync anyway (broker.controller.control_loop): the
        slow resync is due, reservations are settling, jobs wait for a busy worker or a cluster that did
        not answer, member trouble reaches its deadline, a cluster's watch is not synced, or jobs of a
        workload kind are placed where no informer follows the kinds (read every pass)."""
        now = self.clock.now()
        with self._settling_lock:
            settling = bool(self._settling)
        return (
            settling
            or not self.records.built
            or now >= self._next_resync
            or bool(self._held_back)
            or self.work.pending() > 0
            or self._troubles.any_due(now)
            or any(not self._watched(c) for c in self.traits)
            or self._kinds_unwatched()
        )

    def _kinds_unwatched(self) -> bool:
        """Whether a placed job of a workload kind sits where no informer follows the kinds."""
        watched = follow.kinds_watched(self.gateway)
        return any(not watched(r.cluster or "") for r in self.records.of_kinds(PLACED_STATES))

    def _watched(self, cluster: str) -> bool:
        return self._watch is not None and self._watch.synced(cluster)

    def sync_status(self) -> list[JobRecord]:
        """Follow the placed jobs in their member clusters, each cluster on its own worker (one slow
        cluster delays only its own jobs): those whose Job changed, or all where no watch tells.
        Returns the jobs that changed state (with the inline dispatcher)."""
        changed: list[JobRecord] = []
        self._release_settled()
        self.records.ensure()
        dirty = self.work.take_jobs() | self._troubled_due()  # + member trouble reaching its deadline
        skip = self._unavailable_clusters() | self._fenced
        for back in [c for c in self._held_back if c not in skip]:  # back: read what changed meanwhile
            dirty |= self._held_back.pop(back)
        now = self.clock.now()
        resync = now >= self._next_resync
        if resync:
            self._next_resync = now + STATUS_RESYNC_SECONDS
        by_cluster: dict[str, list[JobRecord]] = {}
        unwatched = {c for c in self.traits if not self._watched(c)}
        kinds_watched = follow.kinds_watched(self.gateway)
        if resync or unwatched:  # every placed job (from memory)
            candidates = self.records.in_states(PLACED_STATES, ordered=False)
        else:  # only those whose Job changed: idle, this loop does not grow with the jobs held
            candidates = [r for j in dirty if (r := self.records.get(j)) is not None]
            candidates += follow.unwatched(self.records.of_kinds(PLACED_STATES), dirty, kinds_watched)
        later: list[str] = []
        for record in candidates:
            cluster = record.cluster
            if record.state not in PLACED_STATES or not cluster:
                continue
            self._tenants_seen.add(record.request.tenant)
            if cluster in skip:
                if record.id in dirty:  # its cluster does not answer: read once it does
                    self._held_back.setdefault(cluster, set()).add(record.id)
            elif (
                resync
                or record.id in dirty
                or cluster in unwatched
                or (record.request.workload is not None and not kinds_watched(cluster))
            ):
                by_cluster.setdefault(cluster, []).append(record)
        for cluster, records in sorted(by_cluster.items()):
            task = functools.partial(self._sync_into, records, changed)
            if not self.dispatcher.submit_once(cluster, "sync", task):
                later.extend(r.id for r in records)  # its worker is still busy: the next pass
        self.work.requeue(later)
        return changed

    def _sync_into(self, records: list[JobRecord], changed: list[JobRecord]) -> None:
        try:
            changed.extend(self._sync_cluster(records))
        finally:
            if self.work.pending():
                self.work.wake()  # jobs put back while this worker was busy

    def _sync_cluster(self, records: list[JobRecord]) -> list[JobRecord]:
        changed: list[JobRecord] = []
        ready: list[JobRecord] = []
        moves: list[_Move] = []
        for record in records:
            try:
                step = self._sync_job(record, ready, moves)
            except (StoreError, Fenced):
                raise
            except Exception:
                log.exception(
                    "following %s failed; the other jobs go on and it is retried next pass", record.id
                )
                continue
            if step is not None:
                changed.append(step)
        # the reservations of jobs that ended or went back to the queue, and of jobs running on a cluster
        # with no summary: one round trip for the cluster's pass, before their transitions are written
        self._settle(ready, [(m.record.id, m.record.attempt) for m in moves if _frees(m.state)])
        changed.extend(self._write_moves(moves))
        return changed

    def _write_moves(self, moves: list[_Move]) -> list[JobRecord]:
        """The transitions a cluster's sync decided, in one round trip; a terminal one's Job is marked
        closed in its member."""
        if not moves:
            return []
        # the state AND the attempt read: a read that hung on a cluster while the job moved on to a new
        # attempt (now in the same state elsewhere) must not write the old attempt back
        written = self.writer.transition_many(
            [
                Transition(
                    m.target, m.state, m.reason, expected=m.record.state, expected_attempt=m.record.attempt
                )
                for m in moves
            ]
        )
        done: list[JobRecord] = []
        for m, result in zip(moves, written, strict=True):
            if isinstance(result, Conflict):
                continue  # cancelled or moved on meanwhile
            if result.state.terminal:
                self._mark_closed(m.record, m.namespace, result)
                # after the end is written (the end is not delayed by log reads); the member keeps the Job
                # finishedJobTtlSeconds, long enough unless that is 0
                log_keeping.keep_attempt_log(self.store, self.gateway, m.record, m.namespace)
            done.append(result)
        return done

    def _sync_job(self, record: JobRecord, ready: list[JobRecord], moves: list[_Move]) -> JobRecord | None:
        """Apply what the cluster says of one job: a transition joins `moves` (written with the cluster's
        others); a job whose pods are all ready joins `ready` (its reservation is released once the
        cluster's summary counts them: _settle). Returns a change written here (member trouble)."""
        if not record.cluster or not record.workload_name:
            return None
        namespace = self._namespace(record.cluster, record.request.tenant)
        try:
            status = follow.read_status(  # a workload kind by its own status; a Job as before
                self.gateway, record.cluster, namespace, record.workload_name, record.request
            )
        except ClusterError as exc:
            if record.cluster not in self._unreadable:  # said once, not per job per pass, until it answers
                self._unreadable.add(record.cluster)
                log.info(
                    "cannot read %s on %s: %s; its Jobs are read again every pass",
                    record.workload_name,
                    record.cluster,
                    exc,
                )
            return None
        if record.cluster in self._unreadable:
            self._unreadable.discard(record.cluster)
            log.info("Jobs on %s can be read again", record.cluster)
        step = lifecycle.observe(record, status, self.clock.now())
        if step is None and self._member_quiet(record, namespace):
            return None  # nothing moved and the member says nothing (most jobs of a resync): no context
        with telemetry.job_context(record.trace_parent):  # log lines and spans of what follows: its trace
            return self._apply_step(record, status, step, namespace, ready, moves)

    def _apply_step(
        self,
        record: JobRecord,
        status: WorkloadStatus,
        step: lifecycle.Transition | None,
        namespace: str,
        ready: list[JobRecord],
        moves: list[_Move],
    ) -> JobRecord | None:
        handled, step, written = self._member_step(record, status, step)  # the pods' and events' words
        if handled:
            return written if written is not None and written.state is not record.state else None
        if step is None:
            return None
        if step.state is JobState.FAILED:  # a GPU fault is the GPU's, not the job's (docs/health.md)
            held, written = self._failed_on_a_gpu(record)
            if held:
                return written
        faults.point("observed")
        if self.burst is not None and (step.state.terminal or step.state is JobState.QUEUED):
            self.burst.job_ended(record, step.state, self.clock.now(), self.traits)
        if step.state is JobState.RUNNING:
            ready.append(record)
        elif _frees(step.state):  # its reservation goes with the cluster's others (_settle)
            with self._settling_lock:
                self._settling.pop((record.id, record.attempt), None)
        target = record
        if step.state is JobState.QUEUED:
            target = replace(record, cluster=None, placement=None, workload_name=None)
        moves.append(_Move(record, target, step.state, step.reason, namespace))
        return None

    def _mark_closed(self, record: JobRecord, namespace: str, done: JobRecord) -> None:
        """Its end is recorded: mark the Job closed, so that a rebuild after a Redis loss skips it
        (broker.workload.finished_ttl). A mark that fails costs only a record rebuilt as ended."""
        if not isinstance(self.gateway, WorkloadCloser) or not record.cluster or not record.workload_name:
            return
        note = f"{done.state} at {done.updated_at:.3f}"
        try:
            self.gateway.close_workload(record.cluster, namespace, record.workload_name, note)
        except ClusterError as exc:
            log.debug("could not mark %s closed on %s: %s", record.workload_name, record.cluster, exc)

    def adopt_settling(self, record: JobRecord) -> None:
        """A new leader adopts the reservation of a job its predecessor saw RUNNING (the settling list
        lives in memory): it goes once the cluster's summary is newer, as _settle would have done."""
        self._settle([record])

    def _settle(self, records: list[JobRecord], released: list[tuple[str, int | None]] | None = None) -> None:
        """The jobs' pods are all ready: their reservations may go once their cluster's summary counts
        them (one read of the current versions for all). Released at once, a summary published before
        the pods were seen would show their GPUs free (the Job's status reaches the broker sooner than
        the pods reach the pollers' summary). `released`: reservations to release now anyway (jobs that
        ended): one release_many for them and for the jobs of a cluster with no summary."""
        free = list(released or ())
        if records:
            marks = self.store.cluster_marks(sorted({r.cluster or "" for r in records}))
            for record in records:
                cluster = record.cluster or ""
                mark = marks.get(cluster)
                if mark is None:
                    free.append((record.id, record.attempt))
                    continue
                with self._settling_lock:
                    self._settling[(record.id, record.attempt)] = (cluster, mark.written, self.clock.now())
        if free:
            self.store.release_many(free)

    def _release_settled(self) -> None:
        """Release the reservations of running jobs whose cluster has published a newer summary."""
        with self._settling_lock:
            settling = dict(self._settling)
        if not settling:
            return
        marks = self.store.cluster_marks(sorted({c for c, _, _ in settling.values()}))
        now = self.clock.now()
        counted = [
            key
            for key, (cluster, seen, since) in settling.items()
            if (mark := marks.get(cluster)) is None or (mark.written > seen and now - since >= SETTLE_SECONDS)
        ]
        self.store.release_many(counted)  # one round trip however many were counted
        with self._settling_lock:
            for key in counted:
                self._settling.pop(key, None)
