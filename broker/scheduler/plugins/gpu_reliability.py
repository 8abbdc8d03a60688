"""GPU reliability: a score that sends long jobs to clusters whose GPUs fail less (docs/health.md).

A long job on a cluster whose GPUs fail often loses more work per fault (more progress since its last
checkpoint, more restarts); a short one barely notices. The score reads the cluster's fatal GPU faults
inside its circuit-breaker window (ClusterSummary.gpu_health.recent_faults, per GPU of the cluster):

    short job (duration known and under `long_job_seconds`)   100 everywhere: reliability does not matter
    long job (or duration unknown)                            100 x max(0, 1 - rate / `rate_at_zero`)
        where rate = recent faults / the cluster's GPUs; `rate_at_zero` (default 0.05: one fault in the
        window per 20 GPUs) scores 0
A cluster without GPU health data scores 100 (no news is not bad news). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from broker.core.model import ClusterSummary, ClusterTraits
from broker.scheduler.framework import PreparedJob, RunOption


@dataclass(frozen=True)
class GpuReliabilityScore:
    name: ClassVar[str] = "gpu-reliability"
    weight: int = 1
    long_job_seconds: float = 3600.0
    rate_at_zero: float = 0.05

    def score(
        self, job: PreparedJob, summary: ClusterSummary, traits: ClusterTraits | None, option: RunOption
    ) -> int:
        duration = job.job.duration_seconds
        if duration is not None and duration < self.long_job_seconds:
            return 100
        faults = summary.gpu_health.recent_faults
        gpus = sum(p.total for p in summary.products)
        if not faults or gpus <= 0 or self.rate_at_zero <= 0:
            return 100
        return round(100 * max(0.0, 1 - (faults / gpus) / self.rate_at_zero))
