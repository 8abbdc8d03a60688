"""Price: a filter (job.max_price_per_gpu_hour) and a score (cheaper GPU-hours score higher).

Clusters that declare no price (typically on-prem) pass the cap and score as free. The score's knob,
the price that scores 0, lives on the plugin (`ceiling_per_gpu_hour`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from broker.core.model import ClusterSummary, ClusterTraits
from broker.scheduler.framework import FilterResult, PreparedJob, RunOption, Status


@dataclass(frozen=True)
class PriceCap:
    name: ClassVar[str] = "price-cap"

    def applies(self, job: PreparedJob) -> bool:
        return job.job.max_price_per_gpu_hour is not None

    def filter(
        self,
        job: PreparedJob,
        summary: ClusterSummary,
        traits: ClusterTraits | None,
        now: float,
        options: Sequence[RunOption],
    ) -> FilterResult:
        cap = job.job.max_price_per_gpu_hour
        if cap is None:
            return options
        prices = summary.price_per_gpu_hour
        narrowed = [o for o in options if not o.resource_name or prices.get(o.product, 0.0) <= cap]
        if not narrowed:
            return Status.unresolvable("over the price cap")
        return options if len(narrowed) == len(options) else narrowed


@dataclass(frozen=True)
class PriceScore:
    """100 for a free (undeclared) price, 0 at or above `ceiling_per_gpu_hour`, linear between."""

    name: ClassVar[str] = "price"
    weight: int = 1
    ceiling_per_gpu_hour: float = 10.0

    def score(
        self, job: PreparedJob, summary: ClusterSummary, traits: ClusterTraits | None, option: RunOption
    ) -> int:
        per_gpu = summary.price_per_gpu_hour.get(option.product)
        if not per_gpu or self.ceiling_per_gpu_hour <= 0:
            return 100
        return round(100 * max(0.0, 1 - per_gpu / self.ceiling_per_gpu_hour))
