"""Preemption across the fleet: which running jobs a high-priority job that fits nowhere may evict.

Owns, purely (no I/O, `now` handed in):
    PreemptionPolicy  settings.preemption: which priority classes preempt (PreemptLowerPriority), and the
                      storm limits (victims per tenant and fleet-wide per window)
    Victim            a running job as a possible victim: where, how many GPUs, its priority, its tenant,
                      since when it runs (what evicting it loses)
    fair_shares       which tenants hold more whole GPUs than their weighted fair share
    choose            the cluster and victims for a preemptor, or why none: only lower priority, on a
                      product the job can use, enough to make the job fit there; tenants over their fair
                      share first, then the fewest GPU-hours lost (GPUs x time run, the work a restart
                      throws away), then fewer victims, then the cluster's name
    storm_refusal     why the rate limits hold a preemption back now ("tenant ml preempted 4 jobs in the
                      last 600 s (limit 4)")

Fit is judged per cluster from its summary: the GPUs free on the product plus the victims' GPUs cover the
job, and one pod fits on one node of the product (its allocatable per node). The job itself is placed by
the normal passes once the victims' pods are gone: its priority puts it first in the queue.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from broker.core.model import ClusterSummary, JobRequest

__all__ = [
    "Choice",
    "PreemptionPolicy",
    "Victim",
    "choose",
    "fair_shares",
    "storm_refusal",
]


@dataclass(frozen=True)
class PreemptionPolicy:
    """Who may preempt, and how much preemption the fleet takes per window."""

    classes: frozenset[str] = frozenset()  # priority classes whose jobs may preempt lower priorities
    max_per_tenant: int = 4  # victims a tenant's jobs may evict per window
    max_global: int = 10  # victims evicted fleet-wide per window
    window_seconds: float = 600.0

    def may_preempt(self, request: JobRequest) -> bool:
        return request.priority_class is not None and request.priority_class in self.classes


@dataclass(frozen=True)
class Victim:
    """A running job that lower priority could make a victim."""

    job_id: str
    tenant: str
    cluster: str
    product: str
    gpus: int  # whole GPUs it holds (all pods)
    priority: int
    running_since: float  # epoch seconds

    def gpu_hours(self, now: float) -> float:
        """The work an eviction throws away: its GPUs times how long it has run."""
        return self.gpus * max(0.0, now - self.running_since) / 3600.0


@dataclass(frozen=True)
class Choice:
    """Where to preempt and whom: the victims free `freed` GPUs of `product` on `cluster`."""

    cluster: str
    product: str
    victims: tuple[Victim, ...]
    freed: int
    gpu_hours_lost: float


def fair_shares(
    held: Mapping[str, int], weights: Mapping[str, float], capacity: int
) -> dict[str, tuple[float, float]]:
    """Per tenant (those in `held` or `weights`): (its share of the fleet's whole GPUs, its fair share =
    its weight over the weights of the tenants present)."""
    tenants = set(held) | set(weights)
    total = sum(weights.get(t, 1.0) for t in tenants) or 1.0
    return {
        t: (held.get(t, 0) / capacity if capacity > 0 else 0.0, weights.get(t, 1.0) / total) for t in tenants
    }


def _per_node(summary: ClusterSummary, product: str) -> int:
    p = summary.product(product)
    if p is None or p.nodes <= 0:
        return 0
    return p.allocatable // p.nodes


def choose(
    job: JobRequest,
    priority: int,
    summaries: Iterable[ClusterSummary],
    victims: Iterable[Victim],
    over_share: frozenset[str],
    now: float,
) -> Choice | str:
    """The cheapest preemption that lets `job` (whole GPUs, at `priority`) fit, or why there is none."""
    if job.gpus_per_pod <= 0 or job.wants_mig:
        return "only jobs of whole GPUs preempt"
    need = job.total_gpus
    wanted = set(job.gpu_products)
    by_cluster: dict[tuple[str, str], list[Victim]] = {}
    for v in victims:
        allowed = (not wanted or v.product in wanted) and (not job.clusters or v.cluster in job.clusters)
        if v.priority < priority and v.gpus > 0 and allowed:
            by_cluster.setdefault((v.cluster, v.product), []).append(v)
    if not by_cluster:
        return f"no running job below priority {priority} to preempt"
    summary_of = {s.cluster: s for s in summaries}
    best: tuple[tuple[int, float, int, str], Choice] | None = None
    for (cluster, product), candidates in sorted(by_cluster.items()):
        summary = summary_of.get(cluster)
        if summary is None or _per_node(summary, product) < job.gpus_per_pod:
            continue
        cap = summary.product(product)
        free = max(0, cap.free) if cap is not None else 0
        # tenants over their fair share first, then the lowest priority, then the least work lost
        ordered = sorted(
            candidates,
            key=lambda v: (v.tenant not in over_share, v.priority, v.gpu_hours(now), v.job_id),
        )
        taken: list[Victim] = []
        for v in ordered:
            if free + sum(t.gpus for t in taken) >= need:
                break
            taken.append(v)
        if free + sum(t.gpus for t in taken) < need:
            continue
        # drop victims the others make unnecessary, the most costly first
        for v in sorted(taken, key=lambda v: -v.gpu_hours(now)):
            if free + sum(t.gpus for t in taken) - v.gpus >= need:
                taken.remove(v)
        lost = sum(v.gpu_hours(now) for v in taken)
        within_share = sum(1 for v in taken if v.tenant not in over_share)
        choice = Choice(cluster, product, tuple(taken), sum(v.gpus for v in taken), lost)
        key = (within_share, round(lost, 6), len(taken), cluster)
        if best is None or key < best[0]:
            best = (key, choice)
    if best is None:
        return f"evicting every job below priority {priority} would not free {need} GPUs in one cluster"
    return best[1]


def storm_refusal(
    tenant: str,
    victims: int,
    history: Sequence[tuple[float, str, int]],
    policy: PreemptionPolicy,
    now: float,
) -> str | None:
    """Why evicting `victims` more jobs for `tenant` now would break a storm limit; `history` holds
    (when, preempting tenant, victims) of past preemptions. None when it may go ahead."""
    recent = [(t, who, n) for t, who, n in history if now - t < policy.window_seconds]
    mine = sum(n for _, who, n in recent if who == tenant)
    everyone = sum(n for _, _, n in recent)
    window = f"{policy.window_seconds:g} s"
    if mine + victims > policy.max_per_tenant:
        return (
            f"preemption held back: tenant {tenant} preempted {mine} job(s) in the last {window} "
            f"(limit {policy.max_per_tenant}), this needs {victims} more"
        )
    if everyone + victims > policy.max_global:
        return (
            f"preemption held back: {everyone} job(s) preempted fleet-wide in the last {window} "
            f"(limit {policy.max_global}), this needs {victims} more"
        )
    return None
