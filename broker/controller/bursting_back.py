"""Burst-back, the control loop's step: move cloud jobs back on-prem when that is worth it (docs/burst.md).

Owns gathering the numbers broker.burst.burst_back decides on, and what it must remember between
passes: the on-prem pools' free GPUs over time (FreeHistory: "free for N seconds"), when each job was
last moved (the cooldown) and when to look again. The move itself is `migrate_job` (the checkpoint stop
path and the requeue to the on-prem cluster, broker.controller's migration: issue 25, part A); this
module only decides and calls it with reason "burst-back", then records the expected saving in the
burst ledger (`gpufed spend`).

Cost follows change: the step reads nothing from the store in a pass where the on-prem capacity did
not change (the free GPUs per on-prem pool, from the FleetCache in memory, looked at only when its
generation moved) and no hysteresis deadline fell due, and at most
one evaluation runs per `settings.burst.burstBack.intervalSeconds`. An evaluation reads the run times
(one Redis read) only when some cloud job runs and some on-prem pool has been free long enough.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker.burst.burst_back import Candidate, FreeHistory, OnPremPool, choose, queued_demand, time_left
from broker.burst.wait_prediction import RunTimeModel
from broker.controller.base import ControllerBase
from broker.core.errors import Conflict, Fenced, NotFound
from broker.core.model import ClusterSummary, JobRecord, JobState, Tier
from broker.core.records import Saving
from broker.health import failover

log = logging.getLogger(__name__)

BURST_BACK_REASON = "burst-back"


@dataclass
class BurstBackState:
    """What the step keeps between passes (the leader's, in memory: a new leader watches afresh)."""

    history: FreeHistory = field(default_factory=FreeHistory)
    generation: int = -1  # the FleetCache generation last observed
    free: dict[str, int] = field(default_factory=dict)  # on-prem "cluster/product" -> free GPUs then
    evaluated: dict[str, int] | None = None  # ... and at the last evaluation
    not_before: float = float("-inf")  # the interval: no evaluation before this
    due: float | None = None  # a hysteresis deadline: evaluate then even without a change
    moved: dict[str, float] = field(default_factory=dict)  # job id -> when it was moved (cooldown)
    evaluations: int = 0  # evaluations run (what the cadence saves; tests and benchmarks read it)


class BurstingBack(ControllerBase):
    burst_back_state: BurstBackState

    if TYPE_CHECKING:  # the hook, typed: provided by the migration mixin (issue 25 part A)

        def migrate_job(self, job_id: str, *, to_cluster: str | None, reason: str, by: str) -> JobRecord:
            """Stop the job's attempt through its checkpoint path and requeue it to `to_cluster`. Only a
            declaration here (no body at run time), so the migration's own method is the one called
            whatever the order of BrokerService's bases."""
            ...

    def checkpoint_of(self, record: JobRecord) -> tuple[float | None, float | None]:
        """(grace period in seconds, or None when the job does not checkpoint; its progress into this
        attempt at its last reported checkpoint, or None when not known), from the checkpoint contract
        (JobRequest's checkpoint grace seconds; issue 25 part A)."""
        grace: object = getattr(record.request, "checkpoint_grace_seconds", None)
        last: object = getattr(record, "checkpoint_progress_seconds", None)
        return (
            float(grace) if isinstance(grace, int | float) else None,
            float(last) if isinstance(last, int | float) else None,
        )

    def burst_back(self) -> list[JobRecord]:
        """Move back on-prem the cloud jobs worth it now (broker.burst.burst_back); returns the jobs
        moved (as migrate_job returned them)."""
        if self.burst is None:
            return []
        settings = self.burst.settings.burst_back
        state = self.burst_back_state
        now = self.clock.now()
        generation = self.cache.generation
        if generation != state.generation:  # a summary was written (a heartbeat, or the capacity moved)
            state.generation = generation
            state.free = self._onprem_free(now)
            state.history.observe(now, state.free)
        if now < state.not_before:
            return []
        if state.free == state.evaluated and (state.due is None or now < state.due):
            return []  # the on-prem capacity did not change and no hysteresis deadline fell due
        state.evaluated = dict(state.free)
        state.not_before = now + settings.interval_seconds
        state.evaluations += 1
        window = settings.free_for_seconds
        state.due = state.history.next_change(now, window)
        state.moved = {j: t for j, t in state.moved.items() if now - t < settings.cooldown_seconds}
        running = [r for r in self._placed_jobs() if r.state is JobState.RUNNING and self._cloud_price(r) > 0]
        if not running:
            return []
        if not hasattr(self, "migrate_job"):  # a build without the migration (issue 25 part A)
            return []
        pools = self._stable_pools(now, window)
        if not pools:
            return []
        model = RunTimeModel(
            self.burst.ledger.run_times(),
            self.burst.settings.default_run_seconds,
            self.burst.settings.simulation_speed,
        )
        by_id = {r.id: r for r in running}
        candidates = [self._candidate(r, model, now) for r in running if not r.request.wants_mig]
        moved: list[JobRecord] = []
        for verdict in choose(candidates, pools, settings, now):
            if not verdict.move or verdict.to_cluster is None:
                continue
            record = by_id[verdict.job_id]
            try:
                step = self.migrate_job(
                    record.id, to_cluster=verdict.to_cluster, reason=BURST_BACK_REASON, by="broker"
                )
            except (Conflict, NotFound):
                continue  # it moved on meanwhile (finished, cancelled, moved by hand)
            except Fenced:
                raise  # this replica no longer leads: the pass ends (control_loop)
            except Exception:
                log.exception(
                    "burst-back of %s to %s failed; the others go on", record.id, verdict.to_cluster
                )
                continue
            state.moved[record.id] = now
            self._event(record, verdict.reason)
            self.burst.ledger.add_saving(
                Saving(
                    job_id=record.id,
                    attempt=record.attempt,
                    tenant=record.request.tenant,
                    cluster=record.cluster or "",
                    to_cluster=verdict.to_cluster,
                    at=now,
                    dollars=verdict.saving,
                    gpu_hours=verdict.saving / self._cloud_price(record),  # the cloud GPU-hours not run
                )
            )
            log.info(
                "%s moved back from %s to %s: %s",
                record.id,
                record.cluster,
                verdict.to_cluster,
                verdict.reason,
            )
            moved.append(step)
        return moved

    def _cloud_price(self, record: JobRecord) -> float:
        """Price per GPU-hour of the cluster and product the job runs on (0: on-prem or not placed)."""
        where = record.placement
        traits = self.traits.get(record.cluster or "")
        if where is None or traits is None or traits.tier is not Tier.CLOUD:
            return 0.0
        return float(traits.price_per_gpu_hour.get(where.product, 0.0))

    def _onprem(self, now: float) -> list[ClusterSummary]:
        """The on-prem clusters placement may use now (healthy, not fenced), reservations deducted."""
        healths = self._cluster_health({s.cluster: s for s in self.cache.observed()})
        return [
            s
            for s in self.cache.placeable_all(now)
            if s.tier is Tier.ONPREM
            and s.cluster not in self._fenced
            and s.cluster in healths
            and not failover.lost_health(healths[s.cluster])
        ]

    def _onprem_free(self, now: float) -> dict[str, int]:
        return {f"{s.cluster}/{p.product}": max(0, p.free) for s in self._onprem(now) for p in s.products}

    def _stable_pools(self, now: float, window: float) -> list[OnPremPool]:
        """The on-prem pools with GPUs free for the whole window that no queued job asks for."""
        pools = []
        queued = [r.request for r in self.records.in_states([JobState.QUEUED], ordered=False)]
        for s in self._onprem(now):
            for p in s.products:
                key = f"{s.cluster}/{p.product}"
                stable = min(max(0, p.free), self.burst_back_state.history.stable(key, now, window))
                stable -= queued_demand(s.cluster, p.product, queued)
                if stable <= 0:
                    continue
                fits = {g: p.pods_that_fit(g) for g in range(1, len(p.nodes_by_free))}
                pools.append(
                    OnPremPool(
                        s.cluster, p.product, stable, fits, self.burst_back_state.history.free_since(key, now)
                    )
                )
        return pools

    def _candidate(self, record: JobRecord, model: RunTimeModel, now: float) -> Candidate:
        where = record.placement
        assert where is not None  # _cloud_price > 0 only for placed jobs
        req = record.request
        elapsed = max(0.0, now - record.updated_at)  # RUNNING since (as spend times a run)
        remaining, basis = time_left(model, req, where.product, elapsed)
        grace, last = self.checkpoint_of(record)
        return Candidate(
            job_id=record.id,
            tenant=req.tenant,
            cluster=record.cluster or "",
            gpus=where.total_units,
            gpus_per_pod=where.units_per_pod,
            pods=where.pods,
            price_per_gpu_hour=self._cloud_price(record),
            elapsed_seconds=elapsed,
            remaining_seconds=remaining,
            remaining_basis=basis,
            checkpoint_grace_seconds=grace,
            last_checkpoint_seconds=last,
            products=req.gpu_products,
            clusters=req.clusters,
            moved_at=self.burst_back_state.moved.get(record.id),
        )
