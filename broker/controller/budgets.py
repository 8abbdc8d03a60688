"""Hard budgets (docs/burst.md): stop the cloud jobs of a tenant whose hard budget is spent.

Each stopped job is paid for up to now, goes back to the queue by its failover policy and its Job is
stopped through its stop path (a checkpointing job saves first: broker.controller.migrating); the placed jobs come from the leader's records.
"""

from __future__ import annotations

import logging

from broker import telemetry
from broker.controller.migrating import Migrating
from broker.core.model import (
    JobRecord,
)
from broker.workload.stop_path import Trigger

log = logging.getLogger(__name__)


class Budgets(Migrating):
    def enforce_budgets(self) -> list[JobRecord]:
        """Hard budgets (docs/burst.md): the cloud jobs of a tenant whose hard budget is spent are stopped.
        Each is paid for up to now, goes back to the queue by its failover policy (where it waits: no
        burst over budget) and its Job is deleted. Returns the jobs moved."""
        if self.burst is None or not self.burst.has_hard_budgets:
            return []
        now = self.clock.now()
        active = self._placed_jobs()
        by_id = {r.id: r for r in active}
        moved: list[JobRecord] = []
        for stop in self.burst.budget_stops(now, active, self.traits):
            for job_id in stop.job_ids:
                # its run so far is paid for; a checkpointing job saves first (its stop path)
                step = self._stop_and_requeue(by_id[job_id], Trigger.BUDGET, stop.reason, at=now)
                if step is None:
                    continue  # it moved on meanwhile (finished, cancelled)
                moved.append(step)
                telemetry.budget_stops.labels(stop.tenant).inc()
            log.warning(
                "hard budget of tenant %s spent ($%.2f of $%.2f this %s): %d cloud job(s) stopped",
                stop.tenant,
                stop.spent,
                stop.budget.amount,
                stop.budget.period,
                len(stop.job_ids),
            )
        return moved
