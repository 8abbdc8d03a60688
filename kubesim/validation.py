"""What the API server checks and fills in on writes: names, required and immutable fields, defaults.

Errors are store.InvalidError with (field, message) causes, answered as 422 Invalid Status bodies whose
details.causes name the fields, like the real server (`metadata.name: Invalid value: "Bad_Name": ...`).
"""

from __future__ import annotations

import base64
import copy
import re
import secrets
from typing import Any

from kubesim import dra
from kubesim.resources import ResourceType
from kubesim.store import InvalidError

Obj = dict[str, Any]

_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

# Resources whose main-resource writes cannot set status (they have a status subresource) but which
# keep a status sent on create (nodes) or get a fresh one (pods, namespaces).
_KEEP_STATUS_ON_CREATE = {"nodes"}


def _invalid(kind: str, name: str, causes: list[tuple[str, str]]) -> InvalidError:
    detail = ", ".join(f"{f}: {m}" for f, m in causes)
    return InvalidError(f'{kind} "{name}" is invalid: {detail}', causes)


def _check_name(rt: ResourceType, name: str, causes: list[tuple[str, str]]) -> None:
    if rt.key == "namespaces":
        if len(name) > 63 or not _LABEL.match(name):
            causes.append(("metadata.name", f'Invalid value: "{name}": {_LABEL_MSG}'))
    elif len(name) > 253 or not _SUBDOMAIN.match(name):
        causes.append(("metadata.name", f'Invalid value: "{name}": {_SUBDOMAIN_MSG}'))


# The API server's limit on all of an object's annotations together, keys and values (apimachinery
# api/validation TotalAnnotationSizeLimitB), and its message.
TOTAL_ANNOTATION_SIZE_LIMIT_B = 256 * (1 << 10)


def _check_annotations(meta: Obj, causes: list[tuple[str, str]]) -> None:
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict):
        return
    total = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
    if total > TOTAL_ANNOTATION_SIZE_LIMIT_B:
        causes.append(
            ("metadata.annotations", f"Too long: must have at most {TOTAL_ANNOTATION_SIZE_LIMIT_B} bytes")
        )


def _check_labels(meta: Obj, causes: list[tuple[str, str]]) -> None:
    for key, value in (meta.get("labels") or {}).items():
        prefix, _, name = key.rpartition("/")
        if (
            (prefix and (len(prefix) > 253 or not _SUBDOMAIN.match(prefix)))
            or len(name) > 63
            or not _QUALIFIED_NAME.match(name)
        ):
            causes.append(
                (
                    "metadata.labels",
                    f'Invalid value: "{key}": name part must consist of '
                    "alphanumeric characters, '-', '_' or '.'",
                )
            )
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            causes.append(
                (
                    "metadata.labels",
                    f'Invalid value: "{value}": a valid label must be an empty '
                    "string or consist of alphanumeric characters, '-', '_' or '.'",
                )
            )


def _check_pod_spec(spec: Any, path: str, causes: list[tuple[str, str]], restart: tuple[str, ...]) -> None:
    if not isinstance(spec, dict):
        causes.append((path, "Required value"))
        return
    causes.extend(dra.validate_pod_claims(spec, path))  # spec.resourceClaims and containers' claims
    containers = spec.get("containers")
    if not containers:
        causes.append((f"{path}.containers", "Required value"))
    else:
        seen: set[str] = set()
        for i, c in enumerate(containers):
            if not isinstance(c, dict):
                causes.append((f"{path}.containers[{i}]", "Invalid value: must be an object"))
                continue
            cname = c.get("name")
            if not cname:
                causes.append((f"{path}.containers[{i}].name", "Required value"))
            elif not _LABEL.match(cname) or len(cname) > 63:
                causes.append((f"{path}.containers[{i}].name", f'Invalid value: "{cname}": {_LABEL_MSG}'))
            elif cname in seen:
                causes.append((f"{path}.containers[{i}].name", f'Duplicate value: "{cname}"'))
            else:
                seen.add(cname)
            if not c.get("image"):
                causes.append((f"{path}.containers[{i}].image", "Required value"))
    policy = spec.get("restartPolicy")
    allowed = ", ".join(f'"{p}"' for p in restart)
    if policy is None and "Always" not in restart:
        causes.append((f"{path}.restartPolicy", f"Required value: valid values: {allowed}"))
    elif policy is not None and policy not in restart:
        causes.append(
            (f"{path}.restartPolicy", f'Unsupported value: "{policy}": supported values: {allowed}')
        )


_PFP_ACTIONS = ("FailJob", "FailIndex", "Ignore", "Count")


def _check_job_failure_fields(spec: Obj, mode: Any, causes: list[tuple[str, str]]) -> None:
    """podFailurePolicy rules and backoffLimitPerIndex, with the API server's field paths."""
    for fld in ("backoffLimitPerIndex", "maxFailedIndexes"):
        if spec.get(fld) is not None and mode != "Indexed":
            causes.append((f"spec.{fld}", f"Invalid value: {spec[fld]}: requires indexed completion mode"))
    if spec.get("maxFailedIndexes") is not None and spec.get("backoffLimitPerIndex") is None:
        causes.append(("spec.maxFailedIndexes", "Required value: when maxFailedIndexes is specified"))
    pfp = spec.get("podFailurePolicy")
    if pfp is None:
        return
    restart = ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy")
    if restart != "Never":
        causes.append(
            (
                "spec.template.spec.restartPolicy",
                f'Invalid value: "{restart}": only "Never" is supported when podFailurePolicy is specified',
            )
        )
    rules = pfp.get("rules") if isinstance(pfp, dict) else None
    if not isinstance(rules, list):
        causes.append(("spec.podFailurePolicy.rules", "Required value"))
        return
    for i, rule in enumerate(rules):
        path = f"spec.podFailurePolicy.rules[{i}]"
        if not isinstance(rule, dict):
            causes.append((path, "Invalid value: must be an object"))
            continue
        action = rule.get("action")
        if action not in _PFP_ACTIONS:
            allowed = ", ".join(f'"{a}"' for a in _PFP_ACTIONS)
            causes.append((f"{path}.action", f'Unsupported value: "{action}": supported values: {allowed}'))
        if action == "FailIndex" and spec.get("backoffLimitPerIndex") is None:
            causes.append(
                (f"{path}.action", 'Invalid value: "FailIndex": requires the backoffLimitPerIndex to be set')
            )
        codes, conds = rule.get("onExitCodes"), rule.get("onPodConditions")
        if (codes is None) == (conds is None):
            causes.append(
                (path, "Invalid value: specifying one of OnExitCodes and OnPodConditions is required")
            )
        if isinstance(codes, dict):
            if codes.get("operator") not in ("In", "NotIn"):
                causes.append(
                    (
                        f"{path}.onExitCodes.operator",
                        f'Unsupported value: "{codes.get("operator")}": supported values: "In", "NotIn"',
                    )
                )
            values = codes.get("values")
            if not isinstance(values, list) or not values:
                causes.append((f"{path}.onExitCodes.values", "Invalid value: at least one value is required"))
            elif codes.get("operator") == "In" and 0 in values:
                causes.append(
                    (f"{path}.onExitCodes.values", "Invalid value: 0: must not be 0 for the In operator")
                )


def _check_spec(rt: ResourceType, obj: Obj, causes: list[tuple[str, str]]) -> None:
    spec = obj.get("spec")
    if rt.key == "pods":
        _check_pod_spec(spec, "spec", causes, ("Always", "OnFailure", "Never"))
    elif rt.key == "jobs.batch":
        if not isinstance(spec, dict) or not isinstance(spec.get("template"), dict):
            causes.append(("spec.template", "Required value"))
            return
        _check_pod_spec(spec["template"].get("spec"), "spec.template.spec", causes, ("OnFailure", "Never"))
        for fld in (
            "parallelism",
            "completions",
            "backoffLimit",
            "activeDeadlineSeconds",
            "ttlSecondsAfterFinished",
            "backoffLimitPerIndex",
            "maxFailedIndexes",
        ):
            value = spec.get(fld)
            if value is not None and (not isinstance(value, int) or value < 0):
                causes.append((f"spec.{fld}", f"Invalid value: {value}: must be greater than or equal to 0"))
        mode = spec.get("completionMode")
        if mode not in (None, "NonIndexed", "Indexed"):
            causes.append(
                (
                    "spec.completionMode",
                    f'Unsupported value: "{mode}": supported values: "NonIndexed", "Indexed"',
                )
            )
        if mode == "Indexed" and spec.get("completions") is None:
            causes.append(("spec.completions", "Required value: when completion mode is Indexed"))
        _check_job_failure_fields(spec, mode, causes)
    elif rt.key == "priorityclasses.scheduling.k8s.io":
        if not isinstance(obj.get("value"), int):
            causes.append(("value", "Required value"))
    elif rt.group == "resource.k8s.io":
        causes.extend(dra.validate(rt.kind, obj))
    elif rt.key == "localqueues.kueue.x-k8s.io" and (
        not isinstance(spec, dict) or not spec.get("clusterQueue")
    ):
        causes.append(("spec.clusterQueue", "Required value"))


def validate_create(rt: ResourceType, obj: Obj) -> None:
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    causes: list[tuple[str, str]] = []
    if not name:
        causes.append(("metadata.name", "Required value: name or generateName is required"))
    else:
        _check_name(rt, name, causes)
    _check_labels(meta, causes)
    _check_annotations(meta, causes)
    _check_spec(rt, obj, causes)
    if causes:
        raise _invalid(rt.kind, name, causes)


# Job template fields Kueue (and users) may change while a job is suspended and has not started.
_SUSPENDED_MUTABLE = ("nodeSelector", "tolerations", "affinity", "schedulingGates")


def _job_template_view(template: Any, suspended_unstarted: bool) -> Any:
    if not suspended_unstarted or not isinstance(template, dict):
        return template
    view = copy.deepcopy(template)
    meta = view.get("metadata") or {}
    meta.pop("labels", None)
    meta.pop("annotations", None)
    for fld in _SUSPENDED_MUTABLE:
        (view.get("spec") or {}).pop(fld, None)
    return view


_POD_MUTABLE = ("activeDeadlineSeconds", "tolerations", "schedulingGates", "terminationGracePeriodSeconds")


def _pod_spec_view(spec: Any) -> Any:
    """A pod spec without the fields an update may change."""
    if not isinstance(spec, dict):
        return spec
    view = {k: v for k, v in spec.items() if k not in _POD_MUTABLE}
    view["containers"] = [
        {k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c
        for c in spec.get("containers") or []
    ]
    return view


def validate_update(rt: ResourceType, old: Obj, new: Obj) -> None:
    meta = new.get("metadata") or {}
    name = meta.get("name") or ""
    causes: list[tuple[str, str]] = []
    _check_labels(meta, causes)
    _check_annotations(meta, causes)
    _check_spec(rt, new, causes)
    if rt.key == "jobs.batch":
        old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
        if old_spec.get("selector") != new_spec.get("selector"):
            causes.append(("spec.selector", "Invalid value: field is immutable"))
        if old_spec.get("completions") != new_spec.get("completions"):
            causes.append(("spec.completions", "Invalid value: field is immutable"))
        if old_spec.get("completionMode") != new_spec.get("completionMode"):
            causes.append(("spec.completionMode", "Invalid value: field is immutable"))
        if old_spec.get("managedBy") != new_spec.get("managedBy"):  # JobManagedBy (GA in 1.35)
            causes.append(("spec.managedBy", "Invalid value: field is immutable"))
        unstarted = bool(old_spec.get("suspend")) and not (old.get("status") or {}).get("startTime")
        if _job_template_view(old_spec.get("template"), unstarted) != _job_template_view(
            new_spec.get("template"), unstarted
        ):
            causes.append(("spec.template", "Invalid value: field is immutable"))
    elif rt.group == "resource.k8s.io":
        causes.extend(dra.validate_update(rt.kind, old, new))
    elif rt.key == "pods" and _pod_spec_view(old.get("spec")) != _pod_spec_view(new.get("spec")):
        causes.append(
            (
                "spec",
                "Forbidden: pod updates may not change fields other than `spec.containers[*]"
                ".image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing "
                "tolerations), `spec.schedulingGates` or `spec.terminationGracePeriodSeconds`",
            )
        )
    if causes:
        raise _invalid(rt.kind, name, causes)


# ------------------------------------------------------------------------------------------------ defaults


def _qos(pod_spec: Obj) -> str:
    containers = list(pod_spec.get("containers") or []) + list(pod_spec.get("initContainers") or [])
    requests_any = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            requests_any = True
        for r in ("cpu", "memory"):
            if r not in lim or str(req.get(r, lim.get(r))) != str(lim.get(r)):
                guaranteed = False
    if not requests_any:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _quantity(value: Any) -> Any:
    """Quantities are strings on the wire: 1 -> "1", 0.5 -> "500m" (the server's canonical form)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if float(value).is_integer():
        return str(int(value))
    return f"{round(value * 1000)}m"


def normalize_quantities(obj: Any) -> None:
    """Quantities in every `resources.requests`/`resources.limits` of an object as strings (in place), as
    the server stores them: an applied `nvidia.com/gpu: 2` must compare equal to the stored "2"."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in ("requests", "limits") and isinstance(v, dict):
                obj[k] = {rk: _quantity(rv) for rk, rv in v.items()}
            else:
                normalize_quantities(v)
    elif isinstance(obj, list):
        for v in obj:
            normalize_quantities(v)


def _default_pod_spec(spec: Obj) -> None:
    for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
        res = c.get("resources") if isinstance(c, dict) else None
        if isinstance(res, dict):
            for part in ("requests", "limits"):
                if isinstance(res.get(part), dict):
                    res[part] = {k: _quantity(v) for k, v in res[part].items()}
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    for c in spec.get("containers") or []:
        if isinstance(c, dict):
            c.setdefault(
                "imagePullPolicy",
                "Always"
                if str(c.get("image", "")).endswith(":latest") or ":" not in str(c.get("image", ""))
                else "IfNotPresent",
            )
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            res = c.get("resources")
            if isinstance(res, dict) and res.get("limits"):
                reqs = res.setdefault("requests", {})
                for k, v in res["limits"].items():
                    reqs.setdefault(k, v)


def apply_create_defaults(rt: ResourceType, obj: Obj, now_rfc3339: str) -> None:
    """Fill in what a real API server's defaulting and create strategies would (in place, on a copy)."""
    meta = obj.setdefault("metadata", {})
    key = rt.key
    if key == "namespaces":
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta.get("name")
        obj["spec"] = {"finalizers": ["kubernetes"], **(obj.get("spec") or {})}
        obj["status"] = {"phase": "Active"}
    elif key == "pods":
        spec = obj.setdefault("spec", {})
        _default_pod_spec(spec)
        obj["status"] = {"phase": "Pending", "qosClass": _qos(spec)}
    elif key == "jobs.batch":
        spec = obj.setdefault("spec", {})
        uid = meta["uid"]
        tmeta = spec["template"].setdefault("metadata", {})
        labels = tmeta.setdefault("labels", {})
        if not spec.get("manualSelector"):
            labels.update(
                {
                    "batch.kubernetes.io/controller-uid": uid,
                    "batch.kubernetes.io/job-name": meta["name"],
                    "controller-uid": uid,
                    "job-name": meta["name"],
                }
            )
            spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        spec.setdefault("parallelism", 1)
        spec.setdefault(
            "completions", 1 if spec.get("completionMode") != "Indexed" else spec.get("completions")
        )
        spec.setdefault("backoffLimit", 2147483647 if spec.get("backoffLimitPerIndex") is not None else 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        spec.setdefault(
            "podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
        )
        _default_pod_spec(spec["template"].setdefault("spec", {}))
        obj["status"] = {}
    elif key == "secrets":
        # the real server folds stringData into data (base64) and defaults the type
        string_data = obj.pop("stringData", None) or {}
        data = obj.setdefault("data", {})
        for k, v in string_data.items():
            data[k] = base64.b64encode(str(v).encode()).decode()
        obj.setdefault("type", "Opaque")
    elif key in ("nodes",):
        obj.setdefault("spec", {})
        obj.setdefault("status", {})
    elif rt.subresources and "status" in rt.subresources and key not in _KEEP_STATUS_ON_CREATE:
        obj.pop("status", None)


def generate_name(meta: Obj) -> None:
    """metadata.generateName: the server appends 5 random characters when no name is given."""
    if not meta.get("name") and meta.get("generateName"):
        alphabet = "bcdfghjklmnpqrstvwxz2456789"
        meta["name"] = meta["generateName"] + "".join(secrets.choice(alphabet) for _ in range(5))
