"""Price: a filter (job.max_price_per_gpu_hour) and a score (cheaper GPU-hours score higher).

Clusters that declare no price (typically on-prem) pass the cap and score as free.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.framework import CycleState, Status
from broker.model import ClusterSummary, JobRequest


@dataclass(frozen=True)
class PriceCap:
    name: str = "price-cap"

    def filter(self, job: JobRequest, summary: ClusterSummary, ctx: CycleState) -> Status:
        cap = job.max_price_per_gpu_hour
        if cap is None:
            return Status.success()
        options = [
            o
            for o in ctx.options
            if not o.resource_name or summary.price_per_gpu_hour.get(o.product, 0.0) <= cap
        ]
        if not options:
            return Status.unresolvable("over the price cap")
        ctx.options = options
        return Status.success()


@dataclass(frozen=True)
class PriceScore:
    name: str = "price"
    weight: int = 1

    def score(self, job: JobRequest, summary: ClusterSummary, ctx: CycleState) -> int:
        if ctx.chosen is None:
            return 0
        per_gpu = summary.price_per_gpu_hour.get(ctx.chosen.product)
        if not per_gpu or ctx.price_ceiling <= 0:
            return 100
        return round(100 * max(0.0, 1 - per_gpu / ctx.price_ceiling))
