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

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import NamedTuple

from broker.core.model import ClusterSummary, JobRecord, JobRequest, Placement

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


class Slot(NamedTuple):
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


class _Job(NamedTuple):
    """What the queue needs of a queued job, read once per pass."""

    record: JobRecord
    tenant: str
    priority: int
    need: int
    charge: str | None  # the key it is charged to for fair share before it is placed
    keys: tuple[str, ...]  # the quota keys it could be charged to


_AGE = attrgetter("created_at", "id")
# Tuples made at C speed (a NamedTuple's own __new__ is a Python call): ~20,000 of them a pass.
_new = tuple.__new__


def _jobs(queued: Iterable[JobRecord], policy: QueuePolicy, capacity: Mapping[str, int]) -> list[_Job]:
    any_product = tuple(sorted(k for k in capacity if k != ALL_GPUS and not k.startswith("mig-")))
    any_profile = tuple(sorted(k for k in capacity if k.startswith("mig-")))
    prio = policy.priorities
    out: list[_Job] = []
    for r in sorted(queued, key=_AGE):  # oldest first: each tenant's queue keeps this order
        req = r.request
        if req.mig_profile is not None or req.mig_need is not None:
            need = max(1, req.mig_slices_per_pod * req.pods)
            charge: str | None
            keys: tuple[str, ...]
            if req.mig_profile:
                profile_key = mig_key(req.mig_profile)
                charge, keys = profile_key, (profile_key,)
            else:
                charge, keys = None, any_profile
        else:
            need = req.gpus_per_pod * req.pods
            keys = req.gpu_products or any_product
            charge = req.gpu_products[0] if len(req.gpu_products) == 1 else ALL_GPUS
        out.append(_new(_Job, (r, req.tenant, prio.get(req.priority_class or "", 0), need, charge, keys)))
    return out


def _order(jobs: list[_Job], used: Usage, capacity: Mapping[str, int], policy: QueuePolicy) -> list[_Job]:
    """`jobs` oldest first. A tenant's share only grows with its own jobs, so the share each job is
    offered at is known from one walk in age order; within a priority, a stable sort by that share is
    the greedy "lowest share next, then the oldest" merge of the tenants' queues."""
    levels: dict[int, list[_Job]] = defaultdict(list)
    for j in jobs:
        levels[j.priority].append(j)
    inverse = {k: 1.0 / c for k, c in capacity.items() if c > 0}
    usage: dict[str, dict[str, int]] = {t: dict(keys) for t, keys in used.items()}
    # Usage only grows while the order is built, so a tenant's dominant share is a running maximum.
    dominant: dict[str, float] = {
        t: max((u * inverse.get(k, 0.0) for k, u in keys.items()), default=0.0) for t, keys in usage.items()
    }
    weights: dict[str, float] = {}
    out: list[_Job] = []
    for prio in sorted(levels, reverse=True):
        keyed: list[tuple[float, _Job]] = []
        for job in levels[prio]:
            tenant = job.tenant
            weight = weights.get(tenant)
            if weight is None:
                weight = weights[tenant] = policy.weight(tenant)
            top = dominant.get(tenant, 0.0)
            keyed.append((top / weight, job))
            key = job.charge
            if key is None:
                continue
            mine = usage.get(tenant)
            if mine is None:
                mine = usage[tenant] = {}
            for k in (key,) if key == ALL_GPUS or key.startswith("mig-") else (key, ALL_GPUS):
                units = mine.get(k, 0) + job.need
                mine[k] = units
                ratio = units * inverse.get(k, 0.0)
                if ratio > top:  # noqa: PLR1730 (a branch is cheaper than a call, ~17,000 times a pass)
                    top = ratio
            dominant[tenant] = top
        keyed.sort(key=_SHARE)  # stable: equal shares stay oldest first
        out.extend(j for _, j in keyed)
    return out


_SHARE = itemgetter(0)


def order(
    queued: Iterable[JobRecord], used: Usage, capacity: Mapping[str, int], policy: QueuePolicy
) -> list[JobRecord]:
    """Queued jobs in the order they are offered: priority, then dominant-resource fair share, then age."""
    return [j.record for j in _order(_jobs(queued, policy, capacity), used, capacity, policy)]


def plan(
    queued: Iterable[JobRecord],
    active: Iterable[JobRecord],
    policy: QueuePolicy,
    capacity: Mapping[str, int],
    free: Mapping[str, int],
) -> list[Slot]:
    """One pass of the queue: order, quotas and borrowing. A Slot per queued job, in order."""
    used = usage_of(active)
    ordered = _order(_jobs(queued, policy, capacity), used, capacity, policy)
    higher = _higher_ahead([j.priority for j in ordered])
    limited = {t for t in {j.tenant for j in ordered} if policy.has_quotas(t)}
    if not limited:
        return [
            _new(Slot, (j.record, i + 1, j.priority, higher[i], None, None, ()))
            for i, j in enumerate(ordered)
        ]

    quotas = {t: policy.tenants[t].quotas for t in limited}
    held: dict[str, dict[str, int]] = {t: dict(used.get(t, {})) for t in limited}
    # What tenants within their quota wait for, per key, in total and per tenant: walked in order,
    # cumulatively; a job's claim is released when the main walk reaches it.
    waiting: dict[str, int] = defaultdict(int)
    waiting_by: dict[str, dict[str, int]] = {t: defaultdict(int) for t in limited}
    claim_at: list[str | None] = [None] * len(ordered)
    tentative: dict[str, dict[str, int]] = {t: dict(used.get(t, {})) for t in limited}
    for i, j in enumerate(ordered):
        quota = quotas.get(j.tenant)
        if quota is None:
            continue
        mine, need = tentative[j.tenant], j.need
        for k in j.keys:
            q = quota.get(k)
            if q is not None and mine.get(k, 0) + need <= q:
                mine[k] = mine.get(k, 0) + need
                waiting[k] += need
                waiting_by[j.tenant][k] += need
                claim_at[i] = k
                break
    left = dict(free)
    reasons: dict[tuple[str, str, int, int, int, int, int], str] = {}
    slots: list[Slot] = []
    append = slots.append
    for i, j in enumerate(ordered):
        tenant, need, keys = j.tenant, j.need, j.keys
        quota = quotas.get(tenant)
        if quota is None:  # no quotas: offered as asked; what it takes is no longer idle
            if keys:
                left[keys[0]] = left.get(keys[0], 0) - need
            append(_new(Slot, (j.record, i + 1, j.priority, higher[i], None, None, ())))
            continue
        mine = held[tenant]
        mine_waiting = waiting_by[tenant]
        claim = claim_at[i]
        if claim is not None:  # its own claim no longer holds anything back: it is being decided now
            waiting[claim] -= need
            mine_waiting[claim] -= need
            if claim == keys[0] and mine.get(claim, 0) + need <= quota[claim]:  # within on its first choice
                mine[claim] = mine.get(claim, 0) + need
                left[claim] = left.get(claim, 0) - need
                append(_new(Slot, (j.record, i + 1, j.priority, higher[i], None, None, ())))
                continue
        allowed: list[str] = []
        borrowing: list[str] = []
        refused = 0
        first_refused: tuple[str, int, int] | None = None  # (key, quota, idle): formatted only if held
        for k in keys:
            q = quota.get(k)
            if q is None or mine.get(k, 0) + need <= q:
                allowed.append(k)
                continue
            idle = left.get(k, 0)
            if idle - (waiting[k] - mine_waiting[k]) >= need:
                allowed.append(k)
                borrowing.append(k)
                continue
            refused += 1
            if first_refused is None:
                first_refused = (k, q, idle)
        if not allowed:
            if first_refused is None:  # no key at all (MIG by need, no MIG in the fleet): placement says why
                append(_new(Slot, (j.record, i + 1, j.priority, higher[i], None, None, ())))
                continue
            k, q, idle = first_refused
            facts = (tenant, k, mine.get(k, 0), q, idle, need, refused)
            why = reasons.get(facts)
            if why is None:  # held jobs of one tenant mostly share their reason: format it once
                why = reasons[facts] = _held_reason(*facts)
            append(_new(Slot, (j.record, i + 1, j.priority, higher[i], why, None, ())))
            continue
        charged = allowed[0]
        mine[charged] = mine.get(charged, 0) + need
        left[charged] = left.get(charged, 0) - need
        narrowed = (
            tuple(allowed)
            if len(allowed) < len(keys) and j.charge is not None and not j.charge.startswith("mig-")
            else None
        )
        append(_new(Slot, (j.record, i + 1, j.priority, higher[i], None, narrowed, tuple(borrowing))))
    return slots


def _held_reason(tenant: str, key: str, held: int, quota: int, idle: int, need: int, refused: int) -> str:
    """Why a quota holds a job back: the rule, the numbers, and why it cannot borrow."""
    tail = (
        f"the {idle} idle are claimed by tenants within their quota"
        if idle >= need
        else f"{max(0, idle)} idle to borrow, needs {need}"
    )
    more = f" (and {refused - 1} other product(s))" if refused > 1 else ""
    return f"tenant {tenant} over its {key} quota {held}/{quota}; {tail}{more}"


def _higher_ahead(prios: Sequence[int]) -> list[int]:
    """For each position, how many jobs ahead have a strictly higher priority (prios is descending)."""
    out: list[int] = []
    for p in sorted(set(prios), reverse=True):
        out.extend([len(out)] * prios.count(p))
    return out
