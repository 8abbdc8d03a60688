"""What a pod asks for and where it stands: effective requests, phase, priority, conditions, owners.

Owns the pod arithmetic every controller shares:
- `effective_requests(pod)`: containers summed, the max with each init container, restartable sidecars
  (init containers with restartPolicy Always) added, plus pod overhead (reference section 5). A resource
  given only as a limit requests its limit, as the API server defaults it.
- small readers (`phase`, `is_terminal`, `controller_owner`, `set_condition`) that never mutate their input
  unless told to (set_condition edits the dict it is given: callers pass a copy inside store.mutate).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubesim.quantity import parse_resource_list
from kubesim.store import Obj, rfc3339

Requests = dict[str, float]

ANN_DURATION = "sim.gpufed.io/duration-seconds"
ANN_EXIT_CODE = "sim.gpufed.io/exit-code"
ANN_EXIT_CODES = "sim.gpufed.io/exit-codes"
ANN_INDEX_EXIT_CODES = "sim.gpufed.io/index-exit-codes"
ANN_NUMA_ZONE = "sim.gpufed.io/numa-zone"
ANN_NUMA_SPLIT = "sim.gpufed.io/numa-split"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
TERMINAL_PHASES = ("Succeeded", "Failed")


def _container_requests(container: Obj) -> Requests:
    resources = container.get("resources") or {}
    limits = parse_resource_list(resources.get("limits"))
    requests = parse_resource_list(resources.get("requests"))
    return {**limits, **requests}


def _add(into: Requests, other: Requests) -> None:
    for k, v in other.items():
        into[k] = into.get(k, 0.0) + v


def _max(into: Requests, other: Requests) -> None:
    for k, v in other.items():
        if v > into.get(k, 0.0):
            into[k] = v


def effective_requests(pod: Obj) -> Requests:
    """The pod's effective requests, as kube-scheduler and `kubectl describe node` compute them."""
    spec = pod.get("spec") or {}
    total: Requests = {}
    for c in spec.get("containers") or ():
        _add(total, _container_requests(c))
    sidecars: Requests = {}
    init_peak: Requests = {}
    for c in spec.get("initContainers") or ():
        req = _container_requests(c)
        if c.get("restartPolicy") == "Always":
            _add(sidecars, req)
            _add(total, req)
            _max(init_peak, sidecars)
        else:
            during = dict(sidecars)
            _add(during, req)
            _max(init_peak, during)
    _max(total, init_peak)
    _add(total, parse_resource_list(spec.get("overhead")))
    return {k: v for k, v in total.items() if v}


def is_guaranteed(pod: Obj) -> bool:
    """Guaranteed QoS: every container sets cpu and memory limits equal to its requests."""
    for c in (pod.get("spec") or {}).get("containers") or ():
        resources = c.get("resources") or {}
        limits = parse_resource_list(resources.get("limits"))
        requests = {**limits, **parse_resource_list(resources.get("requests"))}
        for res in ("cpu", "memory"):
            if res not in limits or requests.get(res) != limits[res]:
                return False
    return True


def qos_class(pod: Obj) -> str:
    if is_guaranteed(pod):
        return "Guaranteed"
    for c in (pod.get("spec") or {}).get("containers") or ():
        resources = c.get("resources") or {}
        if resources.get("requests") or resources.get("limits"):
            return "Burstable"
    return "BestEffort"


def phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def is_terminal(pod: Obj) -> bool:
    return phase(pod) in TERMINAL_PHASES


def node_name(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def scheduler_name(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("schedulerName") or "default-scheduler")


def key_of(obj: Obj) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace") or "", meta["name"]


def controller_owner(obj: Obj, kind: str) -> Obj | None:
    for ref in obj["metadata"].get("ownerReferences") or ():
        if ref.get("kind") == kind and ref.get("controller"):
            return dict(ref)
    return None


def condition(obj: Obj, ctype: str) -> Obj | None:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c.get("type") == ctype:
            return dict(c)
    return None


def condition_true(obj: Obj, ctype: str) -> bool:
    c = condition(obj, ctype)
    return bool(c and c.get("status") == "True")


def set_condition(
    obj: Obj,
    ctype: str,
    status: str,
    now: float,
    reason: str = "",
    message: str = "",
    probe_times: bool = False,
) -> bool:
    """Set a status condition in place (keeping lastTransitionTime when the status is unchanged).

    Returns whether anything changed.
    """
    st = obj.setdefault("status", {})
    conds: list[Obj] = st.setdefault("conditions", [])
    ts = rfc3339(now)
    for i, c in enumerate(conds):
        if c.get("type") != ctype:
            continue
        if c.get("status") == status and c.get("reason", "") == reason and c.get("message", "") == message:
            return False
        new: dict[str, Any] = {**c, "status": status, "reason": reason, "message": message}
        if c.get("status") != status:
            new["lastTransitionTime"] = ts
        if probe_times:
            new["lastProbeTime"] = ts
        conds[i] = {k: v for k, v in new.items() if v != "" or k in ("status", "type")}
        return True
    new = {"type": ctype, "status": status, "lastTransitionTime": ts}
    if probe_times:
        new["lastProbeTime"] = ts
    if reason:
        new["reason"] = reason
    if message:
        new["message"] = message
    conds.append(new)
    return True


def replace_field(field: str, value: Any) -> Callable[[Obj], None]:
    """A store.mutate function that sets one top-level field (e.g. `status`)."""

    def apply(obj: Obj) -> None:
        obj[field] = value

    return apply
