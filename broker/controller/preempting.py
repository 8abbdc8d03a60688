"""Preemption: a job of a preempting priority class that fits nowhere evicts lower-priority jobs.

Owns the arithmetic of one preemption (the victims of one cluster, fair shares, the storm limits):
broker.scheduler.preemption decides; the victims go back to the queue under their failover policy and their Jobs
are stopped through their stop path (broker.controller.migrating: a checkpointing victim saves first). The running jobs come from the leader's records, not the store.
"""

from __future__ import annotations

import logging

from broker import telemetry
from broker.controller.migrating import Migrating
from broker.core.k8s_names import GPU
from broker.core.model import (
    JobRecord,
    JobState,
    NoFit,
)
from broker.queue import queueing
from broker.scheduler import preemption
from broker.workload.stop_path import Trigger

log = logging.getLogger(__name__)

# A preemptor does not preempt again this soon: its victims' pods are on their way out.
_PREEMPT_SETTLE_SECONDS = 30.0


class Preempting(Migrating):
    def _maybe_preempt(self, record: JobRecord, decision: NoFit, now: float) -> str | None:
        """A job of a preempting priority class that fits nowhere evicts the cheapest lower-priority
        running jobs of one cluster (broker.scheduler.preemption); the victims go back to the queue under their
        failover policy and the job is placed by the next passes, first by its priority. Returns the
        storm limit's words when a limit holds the preemption back, else None."""
        policy = self.settings.preemption
        if policy is None or decision.never_fits or not policy.may_preempt(record.request):
            return None
        since = self._preempted_for.get(record.id)
        if since is not None and now - since < _PREEMPT_SETTLE_SECONDS:
            return None  # its victims are still on their way out
        queue = self.settings.queue_policy()
        priority = queue.priority(record.request)
        running = self.records.in_states([JobState.RUNNING])
        victims = [
            preemption.Victim(
                r.id,
                r.request.tenant,
                r.cluster,
                r.placement.product,
                r.placement.total_units,
                queue.priority(r.request),
                r.updated_at,
            )
            for r in running
            if r.cluster and r.placement is not None and r.placement.resource_name == GPU
        ]
        summaries = [self._charged(s) for s in self.cache.placeable_all(now) if s.cluster not in self._fenced]
        capacity, _ = queueing.fleet_capacity(summaries)
        held: dict[str, int] = {}
        for v in victims:
            held[v.tenant] = held.get(v.tenant, 0) + v.gpus
        present = set(held) | {record.request.tenant}
        shares = preemption.fair_shares(held, {t: queue.weight(t) for t in present}, capacity.get("*", 0))
        over = frozenset(t for t, (share, fair) in shares.items() if share > fair)
        choice = preemption.choose(record.request, priority, summaries, victims, over, now)
        if isinstance(choice, str):
            return None
        refused = preemption.storm_refusal(
            record.request.tenant, len(choice.victims), self._preemptions, policy, now
        )
        if refused is not None:
            telemetry.preemptions_held.inc()
            return refused
        telemetry.preemptions.labels(choice.cluster).inc(len(choice.victims))
        self._preemptions = [p for p in self._preemptions if now - p[0] < policy.window_seconds]
        self._preemptions.append((now, record.request.tenant, len(choice.victims)))
        # victims that checkpoint hold their GPUs while they save: the settle counts from when the
        # longest save may end, so no second round of victims is taken meanwhile
        by_id = {r.id: r for r in running}
        saving = max(
            (by_id[v.job_id].request.checkpoint_grace_seconds or 0 for v in choice.victims), default=0
        )
        self._preempted_for[record.id] = now + saving
        why = (
            f"preempted by {record.id} (priority {priority}) to free {choice.freed} {choice.product} "
            f"on {choice.cluster}"
        )
        for v in choice.victims:  # stopped through their stop path: a checkpointing victim saves first
            self._stop_and_requeue(by_id[v.job_id], Trigger.PREEMPTION, why, at=now)
        self._event(
            record,
            f"preempting {len(choice.victims)} job(s) on {choice.cluster} to free {choice.freed} "
            f"{choice.product} ({choice.gpu_hours_lost:.1f} GPU-hours lost): "
            + ", ".join(v.job_id for v in choice.victims),
        )
        log.info("%s preempted %s on %s", record.id, [v.job_id for v in choice.victims], choice.cluster)
        return None
