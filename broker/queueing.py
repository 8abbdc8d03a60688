"""The global queue: in which order QUEUED jobs are offered to placement, and which wait for a quota.

Pure (no I/O, no clock). Owns three rules, documented with examples in docs/tenancy.md:

1. Order. Higher priority first (the job's priorityClass -> value from settings.priorityClasses; no class
   or an unknown one is 0). Within one priority, fair share across tenants: the next job is the oldest
   job of the tenant whose *dominant share* is lowest, Dominant Resource Fairness over GPUs by product:

       share(tenant) = max over keys k of  used(tenant, k) / capacity(k)   divided by weight(tenant)

   where the keys are GPU products ("H100-80GB"), MIG profiles ("mig-1g.10gb") and "*" (all whole GPUs),
   `used` counts the tenant's PLACED/ADMITTED/RUNNING jobs plus the jobs already put ahead of this one
   in the order (so two tenants with equal shares interleave), and capacity is the fleet's allocatable.
   Then age (created_at), then id.

2. Quotas. settings.tenants.<tenant>.quotas caps what a tenant holds fleet-wide per key (a product or
   "mig-<profile>"); a key not listed is not limited. A job is *within quota* on a key when
   used + need <= quota, counting the tenant's running jobs and the jobs of the tenant admitted ahead
   of it in this pass.

3. Borrowing. A job over its tenant's quota on a key may still use that key when the fleet has idle
   capacity nobody with quota left is waiting for:

       free(k) - waiting_within_quota_of_other_tenants(k) >= need

   where free(k) is what the fleet has free now, less what was admitted ahead in this pass, and the
   waiting demand counts the queued jobs of other tenants that have a quota on k and are within it.
   A job may use the keys that are within quota or borrowable; when none is, it waits and its reason
   names the rule ("tenant ml-research over its H100-80GB quota 16/16").

`plan(...)` applies all three in one pass and returns a Slot per queued job, in order.
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from broker.model import ClusterSummary, JobRecord, JobRequest, Placement

__all__ = [
    "ALL_GPUS",
    "QueuePolicy",
    "Slot",
    "TenantPolicy",
    "fleet_capacity",
    "order",
    "plan",
    "usage_of",
]

ALL_GPUS = "*"  # the key that counts every whole GPU, whatever the product

Usage = dict[str, dict[str, int]]  # tenant -> key -> units held


@dataclass(frozen=True)
class TenantPolicy:
    weight: float = 1.0  # fair-share weight: a tenant of weight 2 is entitled to twice the share
    quotas: Mapping[str, int] = field(default_factory=dict)  # key -> units held at most fleet-wide


@dataclass(frozen=True)
class QueuePolicy:
    priorities: Mapping[str, int] = field(default_factory=dict)  # priority class -> value
    tenants: Mapping[str, TenantPolicy] = field(default_factory=dict)

    def priority(self, request: JobRequest) -> int:
        return self.priorities.get(request.priority_class or "", 0)

    def weight(self, tenant: str) -> float:
        t = self.tenants.get(tenant)
        return t.weight if t is not None and t.weight > 0 else 1.0

    def quota(self, tenant: str, key: str) -> int | None:
        t = self.tenants.get(tenant)
        return None if t is None else t.quotas.get(key)

    def has_quotas(self, tenant: str) -> bool:
        t = self.tenants.get(tenant)
        return t is not None and bool(t.quotas)


@dataclass(frozen=True)
class Slot:
    """A queued job's place: its 1-based position, why it waits, and what it may use now."""

    record: JobRecord
    position: int
    priority: int
    higher_ahead: int  # jobs ahead of it with a higher priority
    blocked: str | None = None  # the quota rule that holds it back; None = offered to placement
    products: tuple[str, ...] | None = None  # the products it may use now, when quotas narrow them
    borrowing: tuple[str, ...] = ()  # keys it may use only by borrowing idle capacity

    @property
    def reason(self) -> str:
        """Why it is where it is in the queue, for the job view."""
        if self.blocked:
            return self.blocked
        if self.higher_ahead:
            return f"behind {self.higher_ahead} higher-priority job{'s' if self.higher_ahead != 1 else ''}"
        ahead = self.position - 1
        if ahead:
            return (
                f"behind {ahead} job{'s' if ahead != 1 else ''} of the same priority (fair share, then age)"
            )
        return "first in the queue"


def mig_key(profile: str) -> str:
    return f"mig-{profile}"


def need_of(request: JobRequest) -> int:
    """Units the job holds once placed: whole GPUs, or MIG devices."""
    if request.wants_mig:
        return max(1, request.mig_slices_per_pod * request.pods)
    return request.total_gpus


def placement_keys(p: Placement) -> tuple[str, ...]:
    """The keys a placement is charged to."""
    if p.mig_profile:
        return (mig_key(p.mig_profile),)
    return (p.product, ALL_GPUS)


def usage_of(active: Iterable[JobRecord]) -> Usage:
    """Units each tenant holds, per key, from its placed (PLACED/ADMITTED/RUNNING) jobs."""
    used: Usage = defaultdict(lambda: defaultdict(int))
    for r in active:
        if r.placement is None:
            continue
        for k in placement_keys(r.placement):
            used[r.request.tenant][k] += r.placement.total_units
    return used


def fleet_capacity(summaries: Iterable[ClusterSummary]) -> tuple[dict[str, int], dict[str, int]]:
    """(allocatable, free) per key over the fleet: products, MIG profiles and "*" (all whole GPUs)."""
    capacity: dict[str, int] = defaultdict(int)
    free: dict[str, int] = defaultdict(int)
    for s in summaries:
        for p in s.products:
            for k in (p.product, ALL_GPUS):
                capacity[k] += p.allocatable
                free[k] += max(0, p.free)
        for m in s.mig:
            capacity[mig_key(m.profile)] += m.allocatable
            free[mig_key(m.profile)] += max(0, m.free)
    return dict(capacity), dict(free)


def _candidate_keys(request: JobRequest, capacity: Mapping[str, int]) -> tuple[str, ...]:
    """The quota keys a job could be charged to: its products (or every product the fleet has), or its
    MIG profile (or every profile the fleet has, for MIG by need)."""
    if request.wants_mig:
        if request.mig_profile:
            return (mig_key(request.mig_profile),)
        return tuple(sorted(k for k in capacity if k.startswith("mig-")))
    if request.gpu_products:
        return request.gpu_products
    return tuple(sorted(k for k in capacity if k != ALL_GPUS and not k.startswith("mig-")))


def _charge_key(request: JobRequest) -> str | None:
    """The key a queued job is charged to for fair share before it is placed."""
    if request.wants_mig:
        return mig_key(request.mig_profile) if request.mig_profile else None
    if len(request.gpu_products) == 1:
        return request.gpu_products[0]
    return ALL_GPUS


class _Shares:
    """Dominant shares per tenant, updated as jobs are put in order."""

    def __init__(self, used: Usage, capacity: Mapping[str, int], policy: QueuePolicy) -> None:
        self.used: dict[str, dict[str, int]] = {t: dict(keys) for t, keys in used.items()}
        self.capacity = capacity
        self.policy = policy

    def share(self, tenant: str) -> float:
        keys = self.used.get(tenant)
        if not keys:
            return 0.0
        top = 0.0
        for k, units in keys.items():
            cap = self.capacity.get(k, 0)
            if cap > 0 and units / cap > top:
                top = units / cap
        return top / self.policy.weight(tenant)

    def charge(self, request: JobRequest) -> None:
        key = _charge_key(request)
        if key is None:
            return
        keys = self.used.setdefault(request.tenant, {})
        keys[key] = keys.get(key, 0) + need_of(request)
        if key != ALL_GPUS and not key.startswith("mig-"):
            keys[ALL_GPUS] = keys.get(ALL_GPUS, 0) + need_of(request)


def order(
    queued: Iterable[JobRecord], used: Usage, capacity: Mapping[str, int], policy: QueuePolicy
) -> list[JobRecord]:
    """Queued jobs in the order they are offered: priority, then dominant-resource fair share, then age."""
    levels: dict[int, dict[str, list[JobRecord]]] = defaultdict(lambda: defaultdict(list))
    for r in queued:
        levels[policy.priority(r.request)][r.request.tenant].append(r)
    shares = _Shares(used, capacity, policy)
    out: list[JobRecord] = []
    for prio in sorted(levels, reverse=True):
        queues = {
            t: deque(sorted(jobs, key=lambda r: (r.created_at, r.id))) for t, jobs in levels[prio].items()
        }
        heap = [(shares.share(t), q[0].created_at, q[0].id, t) for t, q in queues.items()]
        heapq.heapify(heap)
        while heap:
            _, _, _, tenant = heapq.heappop(heap)
            q = queues[tenant]
            job = q.popleft()
            out.append(job)
            shares.charge(job.request)
            if q:
                heapq.heappush(heap, (shares.share(tenant), q[0].created_at, q[0].id, tenant))
    return out


def plan(
    queued: Iterable[JobRecord],
    active: Iterable[JobRecord],
    policy: QueuePolicy,
    capacity: Mapping[str, int],
    free: Mapping[str, int],
) -> list[Slot]:
    """One pass of the queue: order, quotas and borrowing. A Slot per queued job, in order."""
    used = usage_of(active)
    ordered = order(queued, used, capacity, policy)
    prios = [policy.priority(r.request) for r in ordered]
    higher = _higher_ahead(prios)
    if not any(policy.has_quotas(r.request.tenant) for r in ordered):
        return [Slot(r, i + 1, prios[i], higher[i]) for i, r in enumerate(ordered)]

    held: dict[str, dict[str, int]] = {t: dict(keys) for t, keys in used.items()}
    keys_of = [_candidate_keys(r.request, capacity) for r in ordered]
    # What tenants within their quota wait for, per key and per tenant (walked in order, cumulatively).
    waiting: dict[str, int] = defaultdict(int)
    waiting_by: dict[tuple[str, str], int] = defaultdict(int)
    claim_at: list[str | None] = []  # the key each job's within-quota claim is counted on
    tentative: dict[str, dict[str, int]] = {t: dict(keys) for t, keys in used.items()}
    for r, keys in zip(ordered, keys_of, strict=True):
        tenant, need = r.request.tenant, need_of(r.request)
        mine = tentative.setdefault(tenant, {})
        ok: set[str] = set()
        for k in keys:
            quota = policy.quota(tenant, k)
            if quota is not None and mine.get(k, 0) + need <= quota:
                ok.add(k)
        first = next((k for k in keys if k in ok), None)
        claim_at.append(first)
        if first is not None:
            mine[first] = mine.get(first, 0) + need
            waiting[first] += need
            waiting_by[(tenant, first)] += need
    left = dict(free)
    slots: list[Slot] = []
    for i, (r, keys) in enumerate(zip(ordered, keys_of, strict=True)):
        tenant, need = r.request.tenant, need_of(r.request)
        mine = held.setdefault(tenant, {})
        claim = claim_at[i]
        if claim is not None:  # its own claim no longer holds anything back: it is being decided now
            waiting[claim] -= need
            waiting_by[(tenant, claim)] -= need
        allowed: list[str] = []
        borrowing: list[str] = []
        refused: list[str] = []
        for k in keys:
            quota = policy.quota(tenant, k)
            if quota is None or mine.get(k, 0) + need <= quota:
                allowed.append(k)
                continue
            others = waiting[k] - waiting_by[(tenant, k)]
            if left.get(k, 0) - others >= need:
                allowed.append(k)
                borrowing.append(k)
            else:
                idle = left.get(k, 0)
                why = f"tenant {tenant} over its {k} quota {mine.get(k, 0)}/{quota}" + (
                    f"; the {idle} idle are claimed by tenants within their quota"
                    if idle >= need
                    else f"; {idle} idle to borrow, needs {need}"
                )
                refused.append(why)
        if not allowed:
            more = f" (and {len(refused) - 1} other product(s))" if len(refused) > 1 else ""
            slots.append(Slot(r, i + 1, prios[i], higher[i], blocked=refused[0] + more))
            continue
        charged = allowed[0]
        mine[charged] = mine.get(charged, 0) + need
        left[charged] = left.get(charged, 0) - need
        narrowed = None
        if not r.request.wants_mig and len(allowed) < len(keys):
            narrowed = tuple(allowed)
        slots.append(Slot(r, i + 1, prios[i], higher[i], products=narrowed, borrowing=tuple(borrowing)))
    return slots


def _higher_ahead(prios: Sequence[int]) -> list[int]:
    """For each position, how many jobs ahead have a strictly higher priority (prios is descending)."""
    out: list[int] = []
    start = 0
    for i, p in enumerate(prios):
        if i and p != prios[i - 1]:
            start = i
        out.append(start)
    return out
