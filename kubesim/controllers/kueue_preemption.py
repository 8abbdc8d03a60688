"""Kueue's classical preemption, simulated: which admitted Workloads to evict for a pending one.

Owns `find_targets` (pure over the usage it is given; the KueueController writes the result) and the
real condition texts (`preemption_message`, `HUMAN_REASONS`). For a Workload that does not fit its
ClusterQueue, for the first flavor where preemption makes it fit:
- candidates in its own ClusterQueue follow `spec.preemption.withinClusterQueue` (LowerPriority: lower
  priority; LowerOrNewerEqualPriority: also equal priority admitted later); candidates in other
  ClusterQueues of the cohort follow `reclaimWithinCohort` (Any, LowerPriority) and only while their
  ClusterQueue borrows the flavor-resource (usage above nominal quota);
- order: Workloads already being evicted, then other ClusterQueues before its own, lower priority first,
  then the most recently admitted first; taken one by one until the Workload fits, then the earlier ones
  are given back (reverse order) where it still fits without them.
Reasons: InClusterQueue ("prioritization in the ClusterQueue") and InCohortReclamation ("reclamation within
the cohort"). Not simulated: borrowWithinCohort, fair sharing, InCohortReclaimWhileBorrowing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kubesim.controllers.pods import Requests, condition, condition_true
from kubesim.quantity import parse_quantity
from kubesim.store import Obj

Usage = dict[str, dict[str, float]]  # flavor -> resource -> amount
Available = Callable[[dict[str, Usage], str, str], float]  # (usage by CQ, flavor, resource) -> free
_EPS = 1e-9

HUMAN_REASONS = {
    "InClusterQueue": "prioritization in the ClusterQueue",
    "InCohortReclamation": "reclamation within the cohort",
}


@dataclass(slots=True)
class Target:
    workload: Obj
    cluster_queue: str
    reason: str  # InClusterQueue | InCohortReclamation


def workload_usage(wl: Obj) -> Usage:
    out: Usage = {}
    admission = (wl.get("status") or {}).get("admission") or {}
    for psa in admission.get("podSetAssignments") or ():
        for res, flavor in (psa.get("flavors") or {}).items():
            amount = parse_quantity((psa.get("resourceUsage") or {}).get(res, "0"))
            per = out.setdefault(flavor, {})
            per[res] = per.get(res, 0.0) + amount
    return out


def cohort_of(cq: Obj) -> str:
    spec = cq.get("spec") or {}
    return str(spec.get("cohortName") or spec.get("cohort") or "")


def cq_path(cq: Obj) -> str:
    cohort = cohort_of(cq)
    return f"/{cohort}/{cq['metadata']['name']}" if cohort else f"/{cq['metadata']['name']}"


def preemption_message(preemptor: Obj, reason: str, preemptor_path: str, preemptee_path: str) -> str:
    uid = preemptor["metadata"].get("uid") or "UNKNOWN"
    job_uid = (preemptor["metadata"].get("labels") or {}).get("kueue.x-k8s.io/job-uid") or "UNKNOWN"
    return (
        f"Preempted to accommodate a workload (UID: {uid}, JobUID: {job_uid}) due to "
        f"{HUMAN_REASONS.get(reason, 'UNKNOWN')}; preemptor path: {preemptor_path}; preemptee path: {preemptee_path}"
    )


def _priority(wl: Obj) -> int:
    return int((wl.get("spec") or {}).get("priority") or 0)


def _admitted_at(wl: Obj) -> str:
    c = condition(wl, "QuotaReserved") or {}
    return str(c.get("lastTransitionTime") or wl["metadata"].get("creationTimestamp") or "")


def _nominal(cq: Obj, flavor: str, res: str) -> float:
    for group in (cq.get("spec") or {}).get("resourceGroups") or ():
        for fq in group.get("flavors") or ():
            if fq.get("name") == flavor:
                for r in fq.get("resources") or ():
                    if r.get("name") == res:
                        return parse_quantity(r.get("nominalQuota", "0"))
    return 0.0


def _subtract(usage: dict[str, Usage], cq: str, wl_usage: Usage, sign: float = -1.0) -> None:
    per_cq = usage.setdefault(cq, {})
    for flavor, res in wl_usage.items():
        per = per_cq.setdefault(flavor, {})
        for r, v in res.items():
            per[r] = per.get(r, 0.0) + sign * v


def find_targets(
    wl: Obj,
    cq: Obj,
    cqs: dict[str, Obj],
    usage: dict[str, Usage],
    admitted: list[tuple[Obj, str]],
    need: Requests,
    flavors: list[tuple[str, list[str]]],
    available: Available,
) -> list[Target] | None:
    """The Workloads to evict so that `wl` fits, or None when preemption cannot make it fit.

    `admitted`: (Workload, its ClusterQueue) of every Workload holding quota; `flavors`: (flavor, the
    resources of `need` it covers) in the order the ClusterQueue lists them."""
    policy = (cq.get("spec") or {}).get("preemption") or {}
    within = policy.get("withinClusterQueue", "Never")
    reclaim = policy.get("reclaimWithinCohort", "Never")
    me = cq["metadata"]["name"]
    cohort = cohort_of(cq)
    prio = _priority(wl)
    created = str(wl["metadata"].get("creationTimestamp") or "")
    for flavor, covered in flavors:
        candidates: list[tuple[tuple[int, int, int, str], Obj, str]] = []
        for other, other_cq in admitted:
            used = workload_usage(other).get(flavor, {})
            if not any(used.get(r, 0.0) > 0 for r in covered):
                continue
            evicted = condition_true(other, "Evicted")
            if other_cq == me:
                p = _priority(other)
                ok = (within == "LowerPriority" and p < prio) or (
                    within == "LowerOrNewerEqualPriority"
                    and (
                        p < prio
                        or (p == prio and str(other["metadata"].get("creationTimestamp") or "") > created)
                    )
                )
            elif cohort and cohort_of(cqs.get(other_cq, {"spec": {}})) == cohort:
                ok = reclaim == "Any" or (reclaim == "LowerPriority" and _priority(other) < prio)
            else:
                continue
            if not ok and not evicted:
                continue
            stamp = _admitted_at(other)
            inverted = "".join(chr(255 - ord(ch)) for ch in stamp)  # most recently admitted first
            key = (0 if evicted else 1, 0 if other_cq != me else 1, _priority(other), inverted)
            candidates.append((key, other, other_cq))
        candidates.sort(key=lambda c: c[0])
        trial = {k: {f: dict(r) for f, r in v.items()} for k, v in usage.items()}

        def fits(u: dict[str, Usage], covered: list[str] = covered, flavor: str = flavor) -> bool:
            return all(need[r] <= available(u, flavor, r) + _EPS for r in covered)

        taken: list[tuple[Obj, str]] = []
        for _, other, other_cq in candidates:
            if other_cq != me and not condition_true(other, "Evicted"):
                ocq = cqs.get(other_cq)
                if ocq is None or not any(
                    trial.get(other_cq, {}).get(flavor, {}).get(r, 0.0) > _nominal(ocq, flavor, r) + _EPS
                    for r in covered
                ):
                    continue  # reclaim only from a ClusterQueue that borrows
            _subtract(trial, other_cq, workload_usage(other))
            taken.append((other, other_cq))
            if fits(trial):
                break
        else:
            continue
        for i in range(len(taken) - 2, -1, -1):
            other, other_cq = taken[i]
            _subtract(trial, other_cq, workload_usage(other), 1.0)
            if fits(trial):
                taken.pop(i)
            else:
                _subtract(trial, other_cq, workload_usage(other))
        return [Target(o, ocq, "InClusterQueue" if ocq == me else "InCohortReclamation") for o, ocq in taken]
    return None
