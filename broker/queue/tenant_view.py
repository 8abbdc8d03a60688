"""Per-tenant figures of the global queue (GET /v1/tenants, `gpufed tenants`, the dashboard's panel).

From the same ledger the scheduling pass charges (broker.queue.queueing.usage_of over the placed jobs,
the QueuePolicy's quotas and weights, the fleet's capacity per key), one TenantFigures per tenant:

    quota      per key (a product, "mig-<profile>", "*"): what the tenant may hold fleet-wide
    used       per key: what its PLACED/ADMITTED/RUNNING jobs hold
    borrowed   per key: used beyond its quota (idle capacity it borrows: queueing rule 3)
    lent       per key: its quota left unused while other tenants borrow that key (at most what they borrow)
    share      its dominant share (DRF over GPUs by product, divided by its weight: queueing rule 1)
    position   its place in the fair-share order: 1 is served first among the tenants (lowest share)
    queued / running / pending   its jobs per product ("any" for a queued job that names none)

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from broker.core.model import JobRecord
from broker.queue.queueing import QueuePolicy, usage_of

__all__ = ["TenantFigures", "tenant_figures"]


@dataclass(frozen=True)
class TenantFigures:
    tenant: str
    weight: float
    share: float
    position: int
    quota: Mapping[str, int] = field(default_factory=dict)
    used: Mapping[str, int] = field(default_factory=dict)
    borrowed: Mapping[str, int] = field(default_factory=dict)
    lent: Mapping[str, int] = field(default_factory=dict)
    queued: Mapping[str, int] = field(default_factory=dict)
    running: Mapping[str, int] = field(default_factory=dict)
    pending: int = 0


def _product_of_queued(r: JobRecord) -> str:
    req = r.request
    if req.mig_profile:
        return f"mig-{req.mig_profile}"
    return req.gpu_products[0] if len(req.gpu_products) == 1 else "any"


def tenant_figures(
    active: Iterable[JobRecord],
    queued: Iterable[JobRecord],
    pending: Iterable[JobRecord],
    policy: QueuePolicy,
    capacity: Mapping[str, int],
    including: Iterable[str] = (),
) -> list[TenantFigures]:
    """Every tenant the policy names, that has jobs or is `including` (a caller's own, even idle), in
    fair-share order (position 1 first)."""
    active = list(active)
    used = usage_of(active)
    tenants = set(policy.tenants) | set(used) | set(including)
    counts: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(int)))
    waiting: dict[str, int] = defaultdict(int)
    for r in active:
        product = r.placement.product if r.placement is not None else "any"
        counts[r.request.tenant]["running"][product] += 1
    for r in queued:
        counts[r.request.tenant]["queued"][_product_of_queued(r)] += 1
        tenants.add(r.request.tenant)
    for r in pending:
        waiting[r.request.tenant] += 1
        tenants.add(r.request.tenant)
    borrowed: dict[str, dict[str, int]] = {}
    for t in tenants:
        quotas = policy.tenants[t].quotas if t in policy.tenants else {}
        borrowed[t] = {k: used[t][k] - q for k, q in quotas.items() if used[t].get(k, 0) > q}
    shares = {t: _share(used.get(t, {}), capacity) / policy.weight(t) for t in tenants}
    order = sorted(tenants, key=lambda t: (shares[t], t))
    out: list[TenantFigures] = []
    for position, t in enumerate(order, start=1):
        quotas = dict(policy.tenants[t].quotas) if t in policy.tenants else {}
        lent: dict[str, int] = {}
        for k, q in quotas.items():
            others = sum(b.get(k, 0) for o, b in borrowed.items() if o != t)
            spare = max(0, q - used[t].get(k, 0))
            if others and spare:
                lent[k] = min(spare, others)
        out.append(
            TenantFigures(
                tenant=t,
                weight=policy.weight(t),
                share=round(shares[t], 6),
                position=position,
                quota=quotas,
                used={k: v for k, v in used.get(t, {}).items() if v},
                borrowed=borrowed[t],
                lent=lent,
                queued=dict(counts[t]["queued"]),
                running=dict(counts[t]["running"]),
                pending=waiting[t],
            )
        )
    return out


def _share(used: Mapping[str, int], capacity: Mapping[str, int]) -> float:
    """The dominant share: the largest fraction of any key's fleet capacity the tenant holds."""
    return max((n / capacity[k] for k, n in used.items() if capacity.get(k)), default=0.0)
