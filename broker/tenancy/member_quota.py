"""Quotas and limits of tenant namespaces in member clusters, as the API server's admission applies them.

Owns, purely (no I/O):
    parse_resource_quota / parse_limit_range   Kubernetes objects (plain dicts) -> QuotaStatus /
                         LimitRangeItems in the broker's units (cpu millicores, memory bytes, counts)
    tenant_namespace_matcher  whether a namespace is one of a cluster's tenant namespaces (traits)
    member_namespaces    the watched Namespaces, ResourceQuotas and LimitRanges -> MemberNamespaces (the
                         ones a predicate wants: the cluster's tenant namespaces)
    container_resources  what level 2 writes into the broker's container for an option (hints._resources)
    apply_limit_ranges   LimitRanger's defaulting: a limit the container lacks from the item's `default`,
                         a request it lacks (and states no limit for) from `defaultRequest`
    limit_range_refusal  LimitRanger's validation: min, max and maxLimitRequestRatio per Container and per
                         Pod, with the API server's messages ("maximum cpu usage per Container is 2, but
                         limit is 4")
    quota_usage          what a Job of n such pods charges a quota (ResourceQuota's pod evaluator:
                         requests.<r>, limits.<r>, bare cpu/memory, pods, count/pods, count/jobs.batch)
    quota_refusal        the first quota of the namespace that cannot take that usage, as a person reads
                         it: "quota gpufed-ml: nvidia.com/gpu 14/16, job needs 4"
    charge               a placement assumed into a summary's namespace quota (until the cluster counts it)

The broker's pod has one container, so per-Pod and per-Container figures coincide. Quota scopes
(scopeSelector, PriorityClass scopes) are not modelled: every quota is taken to cover every pod.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from broker.core.model import (
    TENANT_PLACEHOLDER,
    ClusterSummary,
    ClusterTraits,
    JobRequest,
    LimitRangeItem,
    MemberNamespace,
    QuotaStatus,
)
from broker.core.quantity import QuantityError, parse_quantity, to_int, to_millis

__all__ = [
    "Resources",
    "apply_limit_ranges",
    "charge",
    "container_resources",
    "effective_pod",
    "limit_range_refusal",
    "member_namespaces",
    "parse_limit_range",
    "parse_resource_quota",
    "quota_refusal",
    "quota_usage",
]

Resources = dict[str, int]  # resource name -> amount in the broker's units
_STANDARD = ("cpu", "memory", "ephemeral-storage")  # quota keys that name a request without a prefix
_PREFIXES = ("requests.", "limits.")


def _resource(key: str) -> str:
    """The resource a quota key is about: requests.nvidia.com/gpu -> nvidia.com/gpu."""
    for prefix in _PREFIXES:
        if key.startswith(prefix):
            return key[len(prefix) :]
    return key


def _amount(key: str, value: object) -> int:
    return to_millis(value) if _resource(key) == "cpu" else to_int(value)


def _list(raw: object, where: str) -> Resources:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected a map of quantities")
    out: Resources = {}
    for k, v in raw.items():
        try:
            out[str(k)] = _amount(str(k), v)
        except QuantityError as exc:
            raise ValueError(f"{where}[{k}]: {exc}") from None
    return out


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def parse_resource_quota(obj: Mapping[str, Any]) -> QuotaStatus:
    """A ResourceQuota: spec.hard, and status.used (0 for a key the quota controller has not counted)."""
    hard = _list((obj.get("spec") or {}).get("hard"), "spec.hard")
    used = _list((obj.get("status") or {}).get("used"), "status.used")
    return QuotaStatus(name=_name(obj), hard=hard, used={k: used.get(k, 0) for k in hard})


def parse_limit_range(obj: Mapping[str, Any]) -> tuple[LimitRangeItem, ...]:
    """A LimitRange's Container and Pod items, with the API server's defaulting of Container items
    (`default` from `max`, `defaultRequest` from `default`), so an object as written reads as stored."""
    items: list[LimitRangeItem] = []
    for i, raw in enumerate((obj.get("spec") or {}).get("limits") or []):
        if not isinstance(raw, Mapping) or raw.get("type") not in ("Container", "Pod"):
            continue  # PersistentVolumeClaim items do not touch pods
        where = f"spec.limits[{i}]"
        maximum = _list(raw.get("max"), f"{where}.max")
        default = _list(raw.get("default"), f"{where}.default")
        default_request = _list(raw.get("defaultRequest"), f"{where}.defaultRequest")
        if raw["type"] == "Container":
            default = {**maximum, **default}
            default_request = {**default, **default_request}
        ratios: dict[str, float] = {}
        for k, v in (raw.get("maxLimitRequestRatio") or {}).items():
            try:
                ratios[str(k)] = float(parse_quantity(v))
            except QuantityError as exc:
                raise ValueError(f"{where}.maxLimitRequestRatio[{k}]: {exc}") from None
        items.append(
            LimitRangeItem(
                type=str(raw["type"]),
                default=default if raw["type"] == "Container" else {},
                default_request=default_request if raw["type"] == "Container" else {},
                min=_list(raw.get("min"), f"{where}.min"),
                max=maximum,
                max_limit_request_ratio=ratios,
            )
        )
    return tuple(items)


def _namespace_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")


def member_namespaces(
    namespaces: Iterable[Mapping[str, Any]],
    quotas: Iterable[Mapping[str, Any]],
    limit_ranges: Iterable[Mapping[str, Any]],
    wanted: Callable[[str], bool],
    on_bad: Callable[[str, str], None] | None = None,
) -> tuple[MemberNamespace, ...]:
    """The wanted namespaces that exist, with their quotas and limits (sorted by name). A malformed
    quota or limit range is skipped and reported to on_bad("namespace/name", why)."""
    names = sorted(n for n in (_name(ns) for ns in namespaces) if n and wanted(n))
    by_ns_quota: dict[str, list[QuotaStatus]] = {n: [] for n in names}
    by_ns_limits: dict[str, list[LimitRangeItem]] = {n: [] for n in names}
    for q in sorted(quotas, key=_name):
        ns = _namespace_of(q)
        if ns in by_ns_quota:
            try:
                by_ns_quota[ns].append(parse_resource_quota(q))
            except ValueError as exc:
                if on_bad is not None:
                    on_bad(f"{ns}/{_name(q)}", str(exc))
    for lr in sorted(limit_ranges, key=_name):
        ns = _namespace_of(lr)
        if ns in by_ns_limits:
            try:
                by_ns_limits[ns].extend(parse_limit_range(lr))
            except ValueError as exc:
                if on_bad is not None:
                    on_bad(f"{ns}/{_name(lr)}", str(exc))
    return tuple(
        MemberNamespace(name=n, quotas=tuple(by_ns_quota[n]), limits=tuple(by_ns_limits[n])) for n in names
    )


# ------------------------------------------------------------------------------------------ pods


def container_resources(
    job: JobRequest, resource_name: str | None, units_per_pod: int, dra: bool = False
) -> tuple[Resources, Resources]:
    """(requests, limits) of the broker's container for an option, as level 2 writes them (hints):
    cpu and memory requested, GPUs requested and limited, memory limited, cpu limited only for
    NUMA-aligned jobs (Guaranteed QoS, whole CPUs)."""
    cpu = job.cpu_millis_per_pod
    requests: Resources = {
        "memory": job.memory_mib_per_pod * 2**20,
        "cpu": max(1, -(-cpu // 1000)) * 1000 if job.numa_aligned else cpu,
    }
    if resource_name and units_per_pod > 0 and not dra:
        requests[resource_name] = units_per_pod
    limits = dict(requests) if job.numa_aligned else {k: v for k, v in requests.items() if k != "cpu"}
    return requests, limits


def apply_limit_ranges(
    requests: Mapping[str, int], limits: Mapping[str, int], items: Iterable[LimitRangeItem]
) -> tuple[Resources, Resources]:
    """LimitRanger's defaulting of one container: for each Container item (in order), a limit the
    container lacks comes from `default`, a request it lacks from `defaultRequest` unless it states a
    limit (API defaulting made that limit its request); then a request still missing where a limit is
    set is that limit."""
    req, lim = dict(requests), dict(limits)
    for item in items:
        if item.type != "Container":
            continue
        stated = set(req) | set(lim)
        for r, v in item.default.items():
            lim.setdefault(r, v)
        for r, v in item.default_request.items():
            if r not in stated:
                req[r] = v
    for r, v in lim.items():
        req.setdefault(r, v)
    return req, lim


def effective_pod(
    job: JobRequest,
    resource_name: str | None,
    units_per_pod: int,
    namespace: MemberNamespace | None,
    dra: bool = False,
) -> tuple[Resources, Resources]:
    """(requests, limits) of one of the job's pods as the member cluster will admit it: level 2's
    container with the namespace's LimitRange defaults applied."""
    requests, limits = container_resources(job, resource_name, units_per_pod, dra)
    if namespace is None:
        return requests, limits
    return apply_limit_ranges(requests, limits, namespace.limits)


def _show(resource: str, amount: float) -> str:
    """An amount as a quantity a person reads: cpu in cores or m, memory in Gi/Mi, else the number."""
    if resource == "cpu":
        return f"{amount / 1000:g}" if amount % 1000 == 0 else f"{amount:g}m"
    if resource in ("memory", "ephemeral-storage"):
        for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount % size == 0 and amount:
                return f"{amount / size:g}{unit}"
    return f"{amount:g}"


def limit_range_refusal(
    requests: Mapping[str, int], limits: Mapping[str, int], items: Iterable[LimitRangeItem]
) -> str | None:
    """The first LimitRange bound the (defaulted) container breaks, in the API server's words; None
    when it passes. The broker's pod has one container: Pod items see the same figures."""
    for item in items:
        kind = item.type
        for r, want in sorted(item.min.items()):
            if r not in requests:
                return f"minimum {r} usage per {kind} is {_show(r, want)}.  No request is specified"
            if requests[r] < want:
                return f"minimum {r} usage per {kind} is {_show(r, want)}, but request is {_show(r, requests[r])}"
        for r, want in sorted(item.max.items()):
            if r not in limits:
                return f"maximum {r} usage per {kind} is {_show(r, want)}.  No limit is specified"
            if limits[r] > want:
                return f"maximum {r} usage per {kind} is {_show(r, want)}, but limit is {_show(r, limits[r])}"
        for r, ratio in sorted(item.max_limit_request_ratio.items()):
            if not limits.get(r) or not requests.get(r):
                return f"{r} max limit to request ratio per {kind} is {ratio:g}, but no limit or request is specified"
            if limits[r] / requests[r] > ratio + 1e-9:
                return (
                    f"{r} max limit to request ratio per {kind} is {ratio:g}, but provided ratio is "
                    f"{limits[r] / requests[r]:f}"
                )
    return None


# ------------------------------------------------------------------------------------------ quota


def quota_usage(requests: Mapping[str, int], limits: Mapping[str, int], pods: int) -> Resources:
    """What a Job of `pods` pods of these (effective) requests and limits charges a ResourceQuota."""
    usage: Resources = {"pods": pods, "count/pods": pods, "count/jobs.batch": 1}
    for r, v in requests.items():
        usage[f"requests.{r}"] = v * pods
        if r in _STANDARD:
            usage[r] = v * pods
    for r, v in limits.items():
        usage[f"limits.{r}"] = v * pods
    return usage


def quota_refusal(
    namespace: MemberNamespace, requests: Mapping[str, int], limits: Mapping[str, int], pods: int
) -> str | None:
    """Why the namespace's quotas would refuse the job's pods (or its Job), or None when they take it.

    A quota on cpu or memory needs the container to state it ("quota gpufed-ml: must specify limits.cpu",
    the pod evaluator's rule); a quota key whose used + need exceeds hard refuses it, the tightest first
    ("quota gpufed-ml: nvidia.com/gpu 14/16, job needs 4")."""
    usage = quota_usage(requests, limits, pods)
    for quota in namespace.quotas:
        for key in sorted(quota.hard):
            res = _resource(key)
            if res in ("cpu", "memory"):
                stated = limits if key.startswith("limits.") else requests
                if res not in stated:
                    return f"quota {namespace.name}: must specify {key} (set a LimitRange default)"
        over = [
            (quota.hard[k] - quota.used.get(k, 0) - need, k, need)
            for k, need in usage.items()
            if k in quota.hard and need and quota.used.get(k, 0) + need > quota.hard[k]
        ]
        if over:
            _, key, need = min(over)
            res = _resource(key)
            shown = res if key.startswith("requests.") or key == res else key
            used, hard = quota.used.get(key, 0), quota.hard[key]
            return (
                f"quota {namespace.name}: {shown} {_show(res, used)}/{_show(res, hard)}, "
                f"job needs {_show(res, need)}"
            )
    return None


def charge(summary: ClusterSummary, namespace: str, usage: Mapping[str, int]) -> ClusterSummary:
    """The summary with `usage` added to what the namespace's quotas have used: a placement assumed into
    the snapshot (like a reservation) until the member cluster's quota status counts its pods."""
    found = summary.namespace(namespace)
    if found is None or not found.quotas:
        return summary
    quotas = tuple(
        replace(q, used={k: q.used.get(k, 0) + usage.get(k, 0) for k in q.hard}) for q in found.quotas
    )
    namespaces = tuple(replace(n, quotas=quotas) if n.name == namespace else n for n in summary.namespaces)
    return replace(summary, namespaces=namespaces)


def tenant_namespace_matcher(traits: ClusterTraits) -> Callable[[str], bool]:
    """Whether a namespace is one of the cluster's tenant namespaces (or its own `namespace`)."""
    pattern = traits.tenant_namespace
    if pattern is None:
        return lambda name: name == traits.namespace
    head, _, tail = pattern.partition(TENANT_PLACEHOLDER)
    regex = re.compile(re.escape(head) + r"[a-z0-9]([-a-z0-9]*[a-z0-9])?" + re.escape(tail))
    return lambda name: name == traits.namespace or regex.fullmatch(name) is not None
