"""The LimitRanger and ResourceQuota admission plugins, and ResourceQuota status (the quota controller).

Owns:
- `limit_range_defaults(lr)`: what the API server defaults in a LimitRange on create (a Container limit's
  `default` from `max`, `defaultRequest` from `default`).
- `admit_limit_ranges(store, pod)`: LimitRanger on a pod create, in place: each container without a limit
  or request gets the namespace's LimitRange `default` / `defaultRequest` (and the annotation
  `kubernetes.io/limit-ranger: LimitRanger plugin set: ...`); then `min`, `max` and `maxLimitRequestRatio`
  per Container and per Pod are checked with the real messages (`maximum cpu usage per Container is 2, but
  limit is 4`); failures raise AdmissionError (403 `pods "x" is forbidden: ...`).
- `admit_quota(store, key, obj)`: ResourceQuota on a create: the object's usage (a pod's `pods`,
  `requests.<r>`, `limits.<r>`, `cpu`/`memory`; `count/<resource>` for any object) added to each quota's
  current usage in the namespace must stay within `spec.hard`, else 403 `exceeded quota: q, requested:
  requests.nvidia.com/gpu=4, used: requests.nvidia.com/gpu=14, limited: requests.nvidia.com/gpu=16`; a
  quota on cpu or memory requires every container to state it (`failed quota: q: must specify
  limits.cpu for: main`).
- `refresh_quotas(store, namespace)`: each ResourceQuota's `status.hard` and `status.used` recomputed from
  the namespace's objects (non-terminal pods; every object for `count/*`), written only when changed.

Simplified: quota scopes and scopeSelector are ignored (every quota covers every object); usage is counted
from the store at each admission (no reservation races in a single-threaded simulator).
"""

from __future__ import annotations

from typing import Any

from kubesim.quantity import QuantityError, format_quantity, parse_resource_list
from kubesim.store import ObjectStore

Obj = dict[str, Any]
QUOTA_KEY = "resourcequotas"
LIMIT_RANGE_KEY = "limitranges"
_STANDARD = ("cpu", "memory", "ephemeral-storage")
_EPS = 1e-9


class AdmissionError(Exception):
    """A create refused by an admission plugin: 403 Forbidden with this message."""


# ------------------------------------------------------------------------------------------ usage


def _effective(pod: Obj, part: str) -> dict[str, float]:
    """Sum of the containers' `part` (requests or limits), at least the largest init container's."""
    spec = pod.get("spec") or {}
    total: dict[str, float] = {}
    for c in spec.get("containers") or []:
        for k, v in parse_resource_list((c.get("resources") or {}).get(part)).items():
            total[k] = total.get(k, 0.0) + v
    for c in spec.get("initContainers") or []:
        for k, v in parse_resource_list((c.get("resources") or {}).get(part)).items():
            total[k] = max(total.get(k, 0.0), v)
    for k, v in parse_resource_list(spec.get("overhead")).items():
        total[k] = total.get(k, 0.0) + v
    return total


def _terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def usage_of(key: str, obj: Obj) -> dict[str, float]:
    """What one object counts against a quota."""
    out = {f"count/{key}": 1.0}
    if key != "pods":
        return out
    if _terminal(obj):
        return {}
    out["pods"] = 1.0
    for r, v in _effective(obj, "requests").items():
        out[f"requests.{r}"] = v
        if r in _STANDARD:
            out[r] = v
    for r, v in _effective(obj, "limits").items():
        out[f"limits.{r}"] = v
    return out


def _counted_keys(hard: dict[str, Any]) -> set[str]:
    keys = {"pods"}
    keys |= {name[len("count/") :] for name in hard if name.startswith("count/")}
    return keys


def namespace_usage(store: ObjectStore, namespace: str, hard: dict[str, Any]) -> dict[str, float]:
    total: dict[str, float] = {}
    for key in _counted_keys(hard):
        objs, _ = store.list(key, namespace)
        for obj in objs:
            for name, v in usage_of(key, obj).items():
                total[name] = total.get(name, 0.0) + v
    return total


def _resource_of(name: str) -> str:
    for prefix in ("requests.", "limits."):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def _fmt(name: str, value: float) -> str:
    return format_quantity(value, _resource_of(name))


def _pretty(values: dict[str, float]) -> str:
    return ",".join(f"{k}={_fmt(k, values[k])}" for k in sorted(values))


# ------------------------------------------------------------------------------------------ quota


def refresh_quotas(store: ObjectStore, namespace: str) -> None:
    """Recompute status.hard/status.used of every ResourceQuota in the namespace (the quota controller)."""
    quotas, _ = store.list(QUOTA_KEY, namespace)
    for q in quotas:
        hard = dict((q.get("spec") or {}).get("hard") or {})
        try:
            used = namespace_usage(store, namespace, hard)
        except QuantityError:
            continue
        status = {"hard": hard, "used": {k: _fmt(k, used.get(k, 0.0)) for k in hard}}
        if q.get("status") != status:

            def put(o: Obj, status: Obj = status) -> None:
                o["status"] = status

            store.mutate(QUOTA_KEY, namespace, q["metadata"]["name"], put)


def _missing_constraints(pod: Obj, hard: dict[str, Any]) -> list[str]:
    """The pod evaluator's constraint: a quota on cpu/memory needs every container to state it."""
    errs = []
    for name in sorted(hard):
        res = _resource_of(name)
        if res not in ("cpu", "memory"):
            continue
        part = "limits" if name.startswith("limits.") else "requests"
        missing = [
            str(c.get("name"))
            for c in (pod.get("spec") or {}).get("containers") or []
            if res not in ((c.get("resources") or {}).get(part) or {})
        ]
        if missing:
            errs.append(f"must specify {name} for: {','.join(missing)}")
    return errs


def _aggregate(errs: list[str]) -> str:
    return errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]"


def admit_quota(store: ObjectStore, key: str, obj: Obj) -> None:
    """ResourceQuota admission of a create of `obj` (resource `key`) in its namespace."""
    namespace = (obj.get("metadata") or {}).get("namespace") or ""
    quotas, _ = store.list(QUOTA_KEY, namespace)
    if not quotas:
        return
    delta = usage_of(key, obj)
    for q in sorted(quotas, key=lambda o: o["metadata"]["name"]):
        name = q["metadata"]["name"]
        hard = parse_resource_list((q.get("spec") or {}).get("hard"))
        if key == "pods" and not _terminal(obj):
            errs = _missing_constraints(obj, hard)
            if errs:
                raise AdmissionError(f"failed quota: {name}: {_aggregate(errs)}")
        requested = {k: v for k, v in delta.items() if k in hard and v}
        if not requested:
            continue
        used = namespace_usage(store, namespace, hard)
        exceeded = [k for k, v in requested.items() if used.get(k, 0.0) + v > hard[k] + _EPS]
        if exceeded:
            raise AdmissionError(
                f"exceeded quota: {name}, requested: {_pretty({k: requested[k] for k in exceeded})}, "
                f"used: {_pretty({k: used.get(k, 0.0) for k in exceeded})}, "
                f"limited: {_pretty({k: hard[k] for k in exceeded})}"
            )


# ------------------------------------------------------------------------------------------ limit ranges


def _quantity_str(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    return str(int(value)) if float(value).is_integer() else f"{round(value * 1000)}m"


def normalize_lists(obj: Obj, fields: tuple[str, ...]) -> None:
    """Quantities as strings in the named ResourceList maps of `obj` (in place): `2` -> "2"."""
    for f in fields:
        if isinstance(obj.get(f), dict):
            obj[f] = {k: _quantity_str(v) for k, v in obj[f].items()}


def normalize_admission_object(key: str, obj: Obj) -> None:
    """ResourceQuota `spec.hard` and LimitRange items' quantities as strings, as the server stores them."""
    spec = obj.get("spec") or {}
    if key == QUOTA_KEY:
        normalize_lists(spec, ("hard",))
    elif key == LIMIT_RANGE_KEY:
        for item in spec.get("limits") or []:
            if isinstance(item, dict):
                normalize_lists(item, ("default", "defaultRequest", "min", "max", "maxLimitRequestRatio"))


def limit_range_defaults(lr: Obj) -> None:
    """LimitRange defaulting on create (in place): Container `default` from `max`, `defaultRequest` from
    `default`."""
    for item in (lr.get("spec") or {}).get("limits") or []:
        if not isinstance(item, dict) or item.get("type") != "Container":
            continue
        for r, v in (item.get("max") or {}).items():
            item.setdefault("default", {}).setdefault(r, v)
        for r, v in (item.get("default") or {}).items():
            item.setdefault("defaultRequest", {}).setdefault(r, v)


def _check(
    kind: str,
    item: Obj,
    requests: dict[str, float],
    limits: dict[str, float],
    raw: dict[tuple[str, str], Any],
) -> list[str]:
    """min / max / maxLimitRequestRatio of one LimitRange item against requests and limits."""
    errs: list[str] = []
    for r, v in (item.get("min") or {}).items():
        want = parse_resource_list({r: v})[r]
        if r not in requests:
            errs.append(f"minimum {r} usage per {kind} is {v}.  No request is specified")
        elif requests[r] + _EPS < want:
            errs.append(f"minimum {r} usage per {kind} is {v}, but request is {raw.get(('requests', r))}")
        elif r in limits and limits[r] + _EPS < want:
            errs.append(f"minimum {r} usage per {kind} is {v}, but limit is {raw.get(('limits', r))}")
    for r, v in (item.get("max") or {}).items():
        want = parse_resource_list({r: v})[r]
        if r not in limits:
            errs.append(f"maximum {r} usage per {kind} is {v}.  No limit is specified")
        elif limits[r] > want + _EPS:
            errs.append(f"maximum {r} usage per {kind} is {v}, but limit is {raw.get(('limits', r))}")
        elif r in requests and requests[r] > want + _EPS:
            errs.append(f"maximum {r} usage per {kind} is {v}, but request is {raw.get(('requests', r))}")
    for r, v in (item.get("maxLimitRequestRatio") or {}).items():
        ratio = parse_resource_list({r: v})[r]
        if r not in limits or not limits[r]:
            errs.append(
                f"{r} max limit to request ratio per {kind} is {v}, but no limit is specified or limit is 0"
            )
        elif r not in requests or not requests[r]:
            errs.append(
                f"{r} max limit to request ratio per {kind} is {v}, but no request is specified or request is 0"
            )
        elif limits[r] / requests[r] > ratio + _EPS:
            errs.append(
                f"{r} max limit to request ratio per {kind} is {v}, but provided ratio is "
                f"{limits[r] / requests[r]:f}"
            )
    return errs


def admit_limit_ranges(store: ObjectStore, pod: Obj) -> None:
    """LimitRanger on a pod create: defaults filled in (in place), then min/max/ratio checked."""
    namespace = (pod.get("metadata") or {}).get("namespace") or ""
    ranges, _ = store.list(LIMIT_RANGE_KEY, namespace)
    if not ranges:
        return
    items = [
        i
        for lr in sorted(ranges, key=lambda o: o["metadata"]["name"])
        for i in (lr.get("spec") or {}).get("limits") or []
    ]
    containers = [c for c in (pod.get("spec") or {}).get("containers") or [] if isinstance(c, dict)]
    inits = [c for c in (pod.get("spec") or {}).get("initContainers") or [] if isinstance(c, dict)]
    notes: list[str] = []
    for item in items:
        if item.get("type") != "Container":
            continue
        for c in containers + inits:
            res = c.setdefault("resources", {})
            # a limit the pod states is also its request (API defaulting), so it takes no default request
            stated = set(res.get("requests") or {}) | set(res.get("limits") or {})
            set_req = [r for r in (item.get("defaultRequest") or {}) if r not in stated]
            set_lim = [r for r in (item.get("default") or {}) if r not in (res.get("limits") or {})]
            for r in set_lim:
                res.setdefault("limits", {})[r] = item["default"][r]
            for r in set_req:
                res.setdefault("requests", {})[r] = item["defaultRequest"][r]
            if set_req:
                notes.append(f"{', '.join(set_req)} request for container {c.get('name')}")
            if set_lim:
                notes.append(f"{', '.join(set_lim)} limit for container {c.get('name')}")
            if not res:
                c.pop("resources", None)
    if notes:
        annotations = pod.setdefault("metadata", {}).setdefault("annotations", {})
        annotations["kubernetes.io/limit-ranger"] = "LimitRanger plugin set: " + "; ".join(notes)
    errs: list[str] = []
    for item in items:
        kind = item.get("type")
        if kind == "Container":
            for c in containers + inits:
                res = c.get("resources") or {}
                raw = {("requests", r): v for r, v in (res.get("requests") or {}).items()}
                raw |= {("limits", r): v for r, v in (res.get("limits") or {}).items()}
                # a request defaults to the limit (API defaulting runs before admission)
                limits = parse_resource_list(res.get("limits"))
                requests = {**limits, **parse_resource_list(res.get("requests"))}
                for r, v in limits.items():
                    raw.setdefault(("requests", r), (res.get("limits") or {})[r])
                    del v
                errs += _check("Container", item, requests, limits, raw)
        elif kind == "Pod":
            requests, limits = _effective(pod, "requests"), _effective(pod, "limits")
            for r, v in _effective(pod, "limits").items():
                requests.setdefault(r, v)
            raw = {("requests", r): format_quantity(v, r) for r, v in requests.items()}
            raw |= {("limits", r): format_quantity(v, r) for r, v in limits.items()}
            errs += _check("Pod", item, requests, limits, raw)
    if errs:
        raise AdmissionError(_aggregate(errs))


def admit_priority(store: ObjectStore, pod: Obj) -> None:
    """The Priority admission plugin (mutating): spec.priority from the pod's PriorityClass, or from the
    globalDefault class when it names none; a name no PriorityClass has is refused. It runs before the
    server generates a name, so a refusal names the pod's generateName prefix."""
    spec = pod.setdefault("spec", {})
    name = spec.get("priorityClassName")
    classes = store.list("priorityclasses.scheduling.k8s.io")[0]
    if name:
        pc = next((c for c in classes if (c.get("metadata") or {}).get("name") == name), None)
        if pc is None:
            raise AdmissionError(f"no PriorityClass with name {name} was found")
    else:
        pc = next((c for c in classes if c.get("globalDefault")), None)
    if spec.get("priority") is None:
        spec["priority"] = int(pc.get("value") or 0) if pc else 0
    if pc:
        spec.setdefault("preemptionPolicy", pc.get("preemptionPolicy", "PreemptLowerPriority"))
