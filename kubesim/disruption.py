"""PodDisruptionBudgets (policy/v1) and the pods/eviction subresource, as the API server and the disruption
controller handle them.

Owns:
- `pdb_status(pdb, pods, ...)`: what the disruption controller writes into a PDB's status: expectedPods,
  currentHealthy (Running and Ready, not terminating), desiredHealthy (from minAvailable, or expectedPods
  minus maxUnavailable; percentages round up as the real controller does), disruptionsAllowed, the
  DisruptionAllowed condition, observedGeneration. Simplification: expectedPods is the number of matching
  pods (the real controller reads the scale of the pods' controllers).
- `evict(store, ns, name, options, now)`: the eviction subresource. A pod that is Pending, Succeeded,
  Failed or already terminating is deleted without looking at budgets; otherwise the one PDB whose selector
  matches it must allow a disruption (429 TooManyRequests with the real message and a DisruptionBudget
  cause when not; more than one matching PDB is a 500, as on a real server); the PDB's disruptionsAllowed is
  decremented and the pod recorded in status.disruptedPods, then the pod is deleted with the eviction's
  DeleteOptions.
"""

from __future__ import annotations

import math
from typing import Any

from kubesim.selectors import label_selector_matches
from kubesim.store import ObjectStore, rfc3339

Obj = dict[str, Any]
PDB_KEY = "poddisruptionbudgets.policy"


class EvictionError(Exception):
    """An eviction refused: code, reason, message and Status details."""

    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}


def _ready(pod: Obj) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running" or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _resolve(value: Any, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        pct = int(value[:-1]) * total / 100
        return math.ceil(pct) if round_up else math.floor(pct)
    return int(value)


def matching_pods(pdb: Obj, pods: list[Obj]) -> list[Obj]:
    selector = (pdb.get("spec") or {}).get("selector")
    if selector is None:
        return []
    return [
        p for p in pods if label_selector_matches(selector, (p.get("metadata") or {}).get("labels") or {})
    ]


def pdb_status(pdb: Obj, pods: list[Obj], now: float) -> Obj:
    """The status the disruption controller keeps for `pdb`, given the pods of its namespace."""
    spec = pdb.get("spec") or {}
    matched = [
        p
        for p in matching_pods(pdb, pods)
        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
    expected = len(matched)
    healthy = sum(1 for p in matched if _ready(p))
    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _resolve(spec["maxUnavailable"], expected, round_up=False))
    elif spec.get("minAvailable") is not None:
        desired = _resolve(spec["minAvailable"], expected, round_up=True)
    else:
        desired = expected  # neither set: the API defaults minAvailable to 1 on create; treat as strict
    old = pdb.get("status") or {}
    disrupted = dict(old.get("disruptedPods") or {})
    live = {(p.get("metadata") or {}).get("name") for p in pods}
    disrupted = {n: t for n, t in disrupted.items() if n in live}
    allowed = max(0, healthy - desired - len(disrupted))
    reason = "SufficientPods" if allowed > 0 else "InsufficientPods"
    prev = next((c for c in old.get("conditions") or [] if c.get("type") == "DisruptionAllowed"), None)
    status_str = "True" if allowed > 0 else "False"
    changed = prev is None or prev.get("status") != status_str
    condition = {
        "type": "DisruptionAllowed",
        "status": status_str,
        "reason": reason,
        "message": "",
        "observedGeneration": (pdb.get("metadata") or {}).get("generation", 1),
        "lastTransitionTime": rfc3339(now)
        if changed
        else prev.get("lastTransitionTime")
        if prev
        else rfc3339(now),
    }
    out: Obj = {
        "observedGeneration": (pdb.get("metadata") or {}).get("generation", 1),
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [condition],
    }
    if disrupted:
        out["disruptedPods"] = disrupted
    return out


def refresh(store: ObjectStore, namespace: str, now: float) -> None:
    """Bring every PDB of a namespace up to date (the disruption controller's pass); writes only changes."""
    pdbs, _ = store.list(PDB_KEY, namespace)
    if not pdbs:
        return
    pods, _ = store.list("pods", namespace)
    for pdb in pdbs:
        status = pdb_status(pdb, pods, now)
        if status != pdb.get("status"):

            def put(o: Obj, status: Obj = status) -> None:
                o["status"] = status

            store.mutate(PDB_KEY, namespace, pdb["metadata"]["name"], put)


def _can_ignore_pdb(pod: Obj) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed", "Pending") or bool(
        (pod.get("metadata") or {}).get("deletionTimestamp")
    )


def check_eviction(store: ObjectStore, pod: Obj, now: float) -> Obj | None:
    """Whether `pod` may be evicted now: raises EvictionError when a budget forbids it, else returns the
    PDB to charge (None when no budget applies). Refreshes the namespace's PDB statuses first."""
    meta = pod["metadata"]
    ns, name = meta.get("namespace", ""), meta["name"]
    if _can_ignore_pdb(pod):
        return None
    refresh(store, ns, now)
    pdbs, _ = store.list(PDB_KEY, ns)
    matching = [p for p in pdbs if matching_pods(p, [pod])]
    if not matching:
        return None
    if len(matching) > 1:
        raise EvictionError(
            500,
            "InternalError",
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
        )
    pdb = matching[0]
    status = pdb.get("status") or {}
    if int(status.get("disruptionsAllowed") or 0) <= 0:
        pdb_name = pdb["metadata"]["name"]
        raise EvictionError(
            429,
            "TooManyRequests",
            "Cannot evict pod as it would violate the pod's disruption budget.",
            {
                "causes": [
                    {
                        "reason": "DisruptionBudget",
                        "message": f"The disruption budget {pdb_name} needs {status.get('desiredHealthy', 0)} "
                        f"healthy pods and has {status.get('currentHealthy', 0)} currently",
                    }
                ]
            },
        )
    del name
    return pdb


def charge(store: ObjectStore, pdb: Obj, pod_name: str, now: float) -> None:
    """Record an allowed eviction on the PDB (disruptionsAllowed - 1, the pod in disruptedPods)."""

    def take(o: Obj) -> None:
        status = o.setdefault("status", {})
        status["disruptionsAllowed"] = max(0, int(status.get("disruptionsAllowed") or 0) - 1)
        status.setdefault("disruptedPods", {})[pod_name] = rfc3339(now)

    meta = pdb["metadata"]
    store.mutate(PDB_KEY, meta.get("namespace", ""), meta["name"], take)
