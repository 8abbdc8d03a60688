"""Server-side printing: meta.k8s.io/v1 Table responses, which `kubectl get` asks for.

Columns follow the real server's printers (pkg/printers/internalversion) for the built-in kinds and the
CRDs' additionalPrinterColumns for Kueue; anything else gets Name and Age.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]
Cell = Callable[[Obj, float], Any]


def parse_time(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return datetime.strptime(value[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def _since(value: str | None, now: float) -> str:
    t = parse_time(value)
    return "<unknown>" if t is None else human_duration(now - t)


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _age(obj: Obj, now: float) -> str:
    return _since(_meta(obj).get("creationTimestamp"), now)


def _name(obj: Obj, _now: float) -> str:
    return str(_meta(obj).get("name", ""))


def _path(*parts: str, default: Any = "") -> Cell:
    def cell(obj: Obj, _now: float) -> Any:
        cur: Any = obj
        for p in parts:
            if not isinstance(cur, dict):
                return default
            cur = cur.get(p)
        return default if cur is None else cur

    return cell


def _condition(ctype: str) -> Cell:
    def cell(obj: Obj, _now: float) -> str:
        for c in (obj.get("status") or {}).get("conditions") or []:
            if c.get("type") == ctype:
                return str(c.get("status", ""))
        return ""

    return cell


def _has_condition(obj: Obj, ctype: str) -> bool:
    return any(
        c.get("type") == ctype and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


# ------------------------------------------------------------------------------------------ nodes


def _node_status(obj: Obj, _now: float) -> str:
    status = []
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            status.append("Ready" if c.get("status") == "True" else "NotReady")
    if not status:
        status.append("Unknown")
    if (obj.get("spec") or {}).get("unschedulable"):
        status.append("SchedulingDisabled")
    return ",".join(status)


def _node_roles(obj: Obj, _now: float) -> str:
    roles = set()
    for key, value in (_meta(obj).get("labels") or {}).items():
        if key.startswith("node-role.kubernetes.io/") and key.split("/", 1)[1]:
            roles.add(key.split("/", 1)[1])
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    return ",".join(sorted(roles)) or "<none>"


def _node_address(kind: str) -> Cell:
    def cell(obj: Obj, _now: float) -> str:
        for a in (obj.get("status") or {}).get("addresses") or []:
            if a.get("type") == kind:
                return str(a.get("address", ""))
        return "<none>"

    return cell


# ------------------------------------------------------------------------------------------ pods


def _pod_ready(obj: Obj, _now: float) -> str:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    ready = sum(1 for c in status.get("containerStatuses") or [] if c.get("ready"))
    return f"{ready}/{len(spec.get('containers') or [])}"


def _pod_status(obj: Obj, _now: float) -> str:
    status = obj.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for c in (obj.get("spec") or {}).get("schedulingGates") or []:
        if c:
            reason = "SchedulingGated"
            break
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if state.get("waiting", {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif state.get("terminated", {}).get("reason"):
            reason = state["terminated"]["reason"]
    if _meta(obj).get("deletionTimestamp"):
        reason = "Terminating"
    return str(reason)


def _pod_restarts(obj: Obj, _now: float) -> int:
    return sum(
        int(c.get("restartCount") or 0) for c in (obj.get("status") or {}).get("containerStatuses") or []
    )


# ------------------------------------------------------------------------------------------ jobs


def _job_status(obj: Obj, _now: float) -> str:
    for ctype, label in (("Complete", "Complete"), ("Failed", "Failed")):
        if _has_condition(obj, ctype):
            return label
    if _meta(obj).get("deletionTimestamp"):
        return "Terminating"
    for ctype in ("Suspended", "FailureTarget", "SuccessCriteriaMet"):
        if _has_condition(obj, ctype):
            return ctype
    return "Running"


def _job_completions(obj: Obj, _now: float) -> str:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    succeeded = status.get("succeeded") or 0
    if spec.get("completions") is not None:
        return f"{succeeded}/{spec['completions']}"
    parallelism = spec.get("parallelism") or 0
    return f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"


def _job_duration(obj: Obj, now: float) -> str:
    status = obj.get("status") or {}
    start = parse_time(status.get("startTime"))
    if start is None:
        return ""
    end = parse_time(status.get("completionTime"))
    return human_duration((end if end is not None else now) - start)


def _containers(field: str) -> Cell:
    def cell(obj: Obj, _now: float) -> str:
        tmpl = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        return ",".join(str(c.get(field, "")) for c in tmpl.get("containers") or [])

    return cell


def _job_selector(obj: Obj, _now: float) -> str:
    labels = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>"


# ------------------------------------------------------------------------------------------ events


def _quota_cell(obj: Obj, limits: bool) -> str:
    """`kubectl get quota`: "name: used/hard" for each resource (limits.* in the Limit column)."""
    status = obj.get("status") or {}
    hard, used = status.get("hard") or {}, status.get("used") or {}
    names = sorted(n for n in hard if n.startswith("limits.") == limits)
    return ", ".join(f"{n}: {used.get(n, '0')}/{hard[n]}" for n in names)


def _event_last_seen(obj: Obj, now: float) -> str:
    return _since(
        obj.get("lastTimestamp") or obj.get("eventTime") or _meta(obj).get("creationTimestamp"), now
    )


def _event_object(obj: Obj, _now: float) -> str:
    io = obj.get("involvedObject") or {}
    return f"{str(io.get('kind', '')).lower()}/{io.get('name', '')}"


def _claim_state(obj: Obj, _now: float) -> str:
    """The real ResourceClaim printer: pending | allocated | allocated,reserved (+ ,deleted)."""
    status = obj.get("status") or {}
    parts = ["allocated"] if status.get("allocation") else ["pending"]
    if status.get("reservedFor"):
        parts.append("reserved")
    if _meta(obj).get("deletionTimestamp"):
        parts.append("deleted")
    return ",".join(parts)


Column = tuple[str, str, int, Cell]  # name, type, priority, cell
NAME: Column = ("Name", "string", 0, _name)
AGE: Column = ("Age", "string", 0, _age)

COLUMNS: dict[str, list[Column]] = {
    "nodes": [
        NAME,
        ("Status", "string", 0, _node_status),
        ("Roles", "string", 0, _node_roles),
        AGE,
        ("Version", "string", 0, _path("status", "nodeInfo", "kubeletVersion")),
        ("Internal-IP", "string", 1, _node_address("InternalIP")),
        ("External-IP", "string", 1, _node_address("ExternalIP")),
        ("OS-Image", "string", 1, _path("status", "nodeInfo", "osImage")),
        ("Kernel-Version", "string", 1, _path("status", "nodeInfo", "kernelVersion")),
        ("Container-Runtime", "string", 1, _path("status", "nodeInfo", "containerRuntimeVersion")),
    ],
    "pods": [
        NAME,
        ("Ready", "string", 0, _pod_ready),
        ("Status", "string", 0, _pod_status),
        ("Restarts", "string", 0, _pod_restarts),
        AGE,
        ("IP", "string", 1, _path("status", "podIP", default="<none>")),
        ("Node", "string", 1, _path("spec", "nodeName", default="<none>")),
        ("Nominated Node", "string", 1, _path("status", "nominatedNodeName", default="<none>")),
        ("Readiness Gates", "string", 1, lambda o, n: "<none>"),
    ],
    "jobs.batch": [
        NAME,
        ("Status", "string", 0, _job_status),
        ("Completions", "string", 0, _job_completions),
        ("Duration", "string", 0, _job_duration),
        AGE,
        ("Containers", "string", 1, _containers("name")),
        ("Images", "string", 1, _containers("image")),
        ("Selector", "string", 1, _job_selector),
    ],
    "namespaces": [NAME, ("Status", "string", 0, _path("status", "phase")), AGE],
    "events": [
        ("Last Seen", "string", 0, _event_last_seen),
        ("Type", "string", 0, _path("type")),
        ("Reason", "string", 0, _path("reason")),
        ("Object", "string", 0, _event_object),
        ("Message", "string", 0, _path("message")),
    ],
    "resourcequotas": [
        NAME,
        AGE,
        ("Request", "string", 0, lambda o, _n: _quota_cell(o, limits=False)),
        ("Limit", "string", 0, lambda o, _n: _quota_cell(o, limits=True)),
    ],
    "limitranges": [NAME, ("Created At", "date", 0, _path("metadata", "creationTimestamp"))],
    "poddisruptionbudgets.policy": [
        NAME,
        ("Min Available", "string", 0, _path("spec", "minAvailable", default="N/A")),
        ("Max Unavailable", "string", 0, _path("spec", "maxUnavailable", default="N/A")),
        ("Allowed Disruptions", "integer", 0, _path("status", "disruptionsAllowed", default=0)),
        AGE,
    ],
    "priorityclasses.scheduling.k8s.io": [
        NAME,
        ("Value", "integer", 0, _path("value", default=0)),
        ("Global-Default", "boolean", 0, _path("globalDefault", default=False)),
        AGE,
        ("Preemption-Policy", "string", 0, _path("preemptionPolicy", default="PreemptLowerPriority")),
    ],
    "clusterqueues.kueue.x-k8s.io": [
        NAME,
        (
            "Cohort",
            "string",
            0,
            lambda o, n: _path("spec", "cohortName")(o, n) or _path("spec", "cohort")(o, n),
        ),
        ("Strategy", "string", 1, _path("spec", "queueingStrategy")),
        ("Pending Workloads", "integer", 0, _path("status", "pendingWorkloads", default=0)),
        ("Admitted Workloads", "integer", 1, _path("status", "admittedWorkloads", default=0)),
        AGE,
    ],
    "localqueues.kueue.x-k8s.io": [
        NAME,
        ("ClusterQueue", "string", 0, _path("spec", "clusterQueue")),
        ("Pending Workloads", "integer", 0, _path("status", "pendingWorkloads", default=0)),
        ("Admitted Workloads", "integer", 0, _path("status", "admittedWorkloads", default=0)),
        AGE,
    ],
    "workloads.kueue.x-k8s.io": [
        NAME,
        ("Queue", "string", 0, _path("spec", "queueName")),
        ("Reserved in", "string", 0, _path("status", "admission", "clusterQueue")),
        ("Admitted", "string", 0, _condition("Admitted")),
        ("Finished", "string", 0, _condition("Finished")),
        AGE,
    ],
    "resourceclaims.resource.k8s.io": [NAME, ("State", "string", 0, _claim_state), AGE],
    "resourceslices.resource.k8s.io": [
        NAME,
        ("Node", "string", 0, _path("spec", "nodeName", default="<none>")),
        ("Driver", "string", 0, _path("spec", "driver")),
        ("Pool", "string", 0, _path("spec", "pool", "name")),
        AGE,
    ],
    "podgroups.scheduling.x-k8s.io": [
        NAME,
        ("Phase", "string", 0, _path("status", "phase")),
        ("MinMember", "integer", 0, _path("spec", "minMember", default=0)),
        ("Running", "integer", 0, _path("status", "running", default=0)),
        AGE,
    ],
}


def column_definitions(key: str) -> list[Obj]:
    return [
        {
            "name": name,
            "type": typ,
            "format": "name" if cell is _name else "",
            "description": "",
            "priority": prio,
        }
        for name, typ, prio, cell in COLUMNS.get(key, [NAME, AGE])
    ]


def table_row(key: str, obj: Obj, now: float, include: str) -> Obj:
    cells = [cell(obj, now) for _, _, _, cell in COLUMNS.get(key, [NAME, AGE])]
    row: Obj = {"cells": cells}
    if include == "Object":
        row["object"] = obj
    elif include != "None":
        row["object"] = {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj.get("metadata") or {},
        }
    return row


def table(
    key: str, objs: list[Obj], now: float, include: str, list_meta: Obj | None = None, headers: bool = True
) -> Obj:
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta or {},
        "columnDefinitions": column_definitions(key) if headers else [],
        "rows": [table_row(key, o, now, include) for o in objs],
    }
