"""Dispatch: record PLACED and create the Job in the member cluster (on the Dispatcher's threads).

Owns the member-cluster half of a placement: the PLACED compare-and-sets from QUEUED (a pass's reserved
jobs in one round trip), the create (409 is success), the requeue with backoff when a create fails, and
the delete of a Job created for a job cancelled meanwhile (cancel and create may cross in either order).
A create sent but not answered in time (OutcomeUnknown: an overloaded member may still make it) is sent
again by the same name, which answers 409 once made, a few times before the job is requeued: placing it
again would make a second Job on a second attempt while the first lands late and is swept. A new leader
resumes the creates of the PLACED jobs its predecessor left (resume_dispatch).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from dataclasses import replace

from broker import telemetry
from broker.controller import faults
from broker.controller.base import ControllerBase
from broker.controller.state_writer import Transition
from broker.core.errors import (
    ClusterError,
    ClusterRejected,
    Conflict,
    OutcomeUnknown,
)
from broker.core.model import (
    JobRecord,
    JobState,
    Placement,
)
from broker.workload import finished_ttl, manifest
from broker.workload.kinds import member

log = logging.getLogger(__name__)

# After the n-th refused or failed create, a job waits 2**n seconds (at most this) before the next try,
# so a cluster that keeps refusing a manifest is not hammered every pass.
DISPATCH_BACKOFF_MAX_SECONDS = 300.0
# A create sent but not answered in time is sent again (same name: 409 once it was made) this many times
# before the job is requeued; the sweep and the workload-lost grace (30 s) stay the backstops.
UNANSWERED_CREATE_RETRIES = 2


def _placed_reason(where: Placement) -> str:
    return (
        f"placed on {where.cluster}: {where.units_per_pod}x {where.resource_name} per pod "
        f"({where.product}), score {where.score}"
    )


class Dispatching(ControllerBase):
    def _commit_many(
        self, placements: list[tuple[JobRecord, Placement]], now: float
    ) -> list[JobRecord | None]:
        """_commit for many reserved jobs: their PLACED compare-and-sets in one round trip, then each
        create handed to the dispatcher. Per job, in order: the record as PLACED, or None (cancelled
        meanwhile, or another replica took it: its reservation is released)."""
        moves = []
        for record, where in placements:
            attempt = record.attempt + 1
            placed = replace(
                record,
                attempt=attempt,
                cluster=where.cluster,
                placement=where,
                workload_name=manifest.workload_name(record.id, attempt),
                move_to=(),  # a migration's constraint held for this placement only
            )
            moves.append(Transition(placed, JobState.PLACED, _placed_reason(where), expected=JobState.QUEUED))
        out: list[JobRecord | None] = []
        for (record, where), written in zip(placements, self.writer.transition_many(moves), strict=True):
            if isinstance(written, Conflict):
                self.store.release(record.id, record.attempt + 1, self.placer_id)
                out.append(None)
                continue
            faults.point("placed")
            self.dispatcher.submit(where.cluster, functools.partial(self._create, written, where))
            out.append(written)
        return out

    def resume_dispatch(self) -> int:
        """Submit the create of every PLACED job again (a new leader resumes its predecessor's creates;
        a create is idempotent). Returns how many were submitted."""
        count = 0
        self.records.ensure()
        for record in self.records.in_states([JobState.PLACED]):
            if record.state is JobState.PLACED and record.cluster in self.traits and record.placement:
                where = record.placement
                self.dispatcher.submit(where.cluster, functools.partial(self._create, record, where))
                count += 1
        return count

    def _create(self, placed: JobRecord, where: Placement, unanswered: int = 0) -> None:
        """The member-cluster half of a placement (on a dispatcher thread): create the Job; on failure
        release and requeue with backoff; if the job was cancelled meanwhile, delete what was created.
        `unanswered`: how many creates of this attempt were sent and not answered before this one."""
        attempt = placed.attempt
        name = placed.workload_name or manifest.workload_name(placed.id, attempt)
        traits = self.traits.get(where.cluster)
        try:
            if traits is None:  # it left the fleet since the placement (ClusterProfile deleted): requeue
                raise ClusterRejected(where.cluster, "no longer a member cluster")
            manifests = member.build_workload_any(  # a workload kind's object, else the batch/v1 Job
                placed.id,
                attempt,
                placed.request,
                where,
                traits,
                manifest.recovery_annotations(
                    placed.request, placed.created_at, placed.idempotency_key, self.settings.federation
                ),
                resume_from=placed.resume_from,
            )
            finished_ttl.apply(manifests.job, self.settings.finished_job_ttl_seconds)
            with (
                telemetry.job_context(placed.trace_parent),
                telemetry.job_span(
                    "gpufed.job.dispatch", placed.trace_parent, **{"gpufed.cluster": where.cluster}
                ),
                telemetry.dispatch_latency.labels(where.cluster).time(),
            ):
                self.gateway.create_workload(where.cluster, manifests.job, manifests.companions)
            faults.point("created")
        except ClusterError as exc:
            telemetry.dispatch_failures.labels(where.cluster).inc()
            if (
                isinstance(exc, OutcomeUnknown)
                and unanswered < UNANSWERED_CREATE_RETRIES
                and where.cluster not in self._fenced
            ):
                with telemetry.job_context(placed.trace_parent):
                    log.info(
                        "the create of %s on %s was not answered; sent again: %s", name, where.cluster, exc
                    )
                self.dispatcher.submit(
                    where.cluster, functools.partial(self._create, placed, where, unanswered + 1)
                )
                return
            with telemetry.job_context(placed.trace_parent):
                log.warning("dispatch of %s to %s failed: %s", placed.id, where.cluster, exc)
            self.store.release(placed.id, attempt, self.placer_id)
            failures = placed.dispatch_failures + 1
            backoff = min(DISPATCH_BACKOFF_MAX_SECONDS, 2.0**failures)
            with contextlib.suppress(Conflict):  # cancelled meanwhile: nothing to requeue
                self._transition(
                    replace(
                        placed,
                        cluster=None,
                        placement=None,
                        workload_name=None,
                        dispatch_failures=failures,
                        not_before=self.clock.now() + backoff,
                    ),
                    JobState.QUEUED,
                    f"dispatch-failed (attempt {attempt}, next try in {backoff:.0f} s): {exc}",
                    expected=JobState.PLACED,
                )
            return
        current = self._record_now(placed.id)
        if current is None or current.state is JobState.CANCELLED or current.workload_name != name:
            # Cancelled while the Job was being created: cancel() may have deleted before our create.
            self.store.release(placed.id, attempt, self.placer_id)
            self._delete_workload(where.cluster, name, current or placed)

    def _record_now(self, job_id: str) -> JobRecord | None:
        """The job's record as it is now, for the check after a create: the leader's records caught up
        (a read of the change stream shared by the dispatch threads waiting at the same time) rather than
        a read of the record per created Job; the store's record where the records do not hold it."""
        if self.records.built:
            self.records.catch_up()  # every write before this call (a cancel) is in the records
            found = self.records.get(job_id)
            if found is not None:
                return found
        return self.store.get_job(job_id)
