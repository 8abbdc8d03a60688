"""The workload kinds the broker accepts beside batch/v1 Job, by apiVersion and kind.

    kind_of(body)            the Kind adapter for a submitted object, or None (a Job, or native)
    by_api(api_version, kind) the adapter for a stored workload
    to_native_all(body)      (native submission, problems, origin): the demand read into what JobSpec
                             validates, one refusal per problem found, and where each native field came
                             from (for refusals said in the kind's words)
    workload_of(body)        the object kept on the JobRequest: apiVersion, kind and spec, without
                             spec.managedBy (the member copy is the member controller's) and without status
    api_of(request)          the group/version a member must serve for a request ("" for a plain Job)
Pure.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from broker.core.errors import InvalidRequest
from broker.core.model import JobRequest
from broker.workload.kinds import jobset, pytorchjob, rayjob, trainjob
from broker.workload.kinds.base import Kind
from broker.workload.kinds.demand import native

__all__ = [
    "KINDS",
    "api_of",
    "by_api",
    "kind_field",
    "kind_of",
    "runtime_of",
    "to_native_all",
    "with_workload",
    "workload_of",
]

KINDS: dict[tuple[str, str], Kind] = {
    (k.api_version, k.kind): k for k in (jobset.KIND, trainjob.KIND, pytorchjob.KIND, rayjob.KIND)
}


def kind_of(body: object) -> Kind | None:
    if not isinstance(body, Mapping):
        return None
    return KINDS.get((str(body.get("apiVersion")), str(body.get("kind"))))


def by_api(api_version: object, kind: object) -> Kind | None:
    return KINDS.get((str(api_version), str(kind)))


def to_native_all(body: Mapping[str, Any]) -> tuple[dict[str, Any], list[InvalidRequest], dict[str, str]]:
    adapter = kind_of(body)
    if adapter is None:
        raise InvalidRequest("kind", f"not a workload kind: {body.get('apiVersion')} {body.get('kind')}")
    unknown = sorted(set(body) - {"apiVersion", "kind", "metadata", "spec", "status"})
    if unknown:
        return {}, [InvalidRequest(unknown[0], "unknown top-level field")], {}
    try:
        out, origin = native(adapter.demand(body))
    except InvalidRequest as e:
        return {}, [e], {}
    return out, [], origin


def _drop(obj: dict[str, Any], path: tuple[str, ...]) -> None:
    for key in path[:-1]:
        nxt = obj.get(key)
        if not isinstance(nxt, dict):
            return
        obj = nxt
    obj.pop(path[-1], None)


def workload_of(body: Mapping[str, Any]) -> dict[str, Any]:
    adapter = kind_of(body)
    if adapter is None:
        raise InvalidRequest("kind", f"not a workload kind: {body.get('apiVersion')} {body.get('kind')}")
    out = {"apiVersion": adapter.api_version, "kind": adapter.kind, "spec": copy.deepcopy(dict(body["spec"]))}
    _drop(out, adapter.managed_by_path)
    return out


def api_of(request: JobRequest) -> str:
    if request.workload is None:
        return ""
    return str(request.workload.get("apiVersion") or "")


def runtime_of(request: JobRequest) -> str | None:
    """The ClusterTrainingRuntime a TrainJob needs in its member (None for anything else)."""
    wl = request.workload
    if wl is None or wl.get("kind") != "TrainJob":
        return None
    kind, name = trainjob.runtime_ref(wl)
    return name if kind == "ClusterTrainingRuntime" else None


def kind_field(loc: list[str | int], origin: Mapping[str, str]) -> str:
    """A native field's refusal said as the kind's field (origin from to_native_all)."""
    if not loc:
        return "(body)"
    head, rest = str(loc[0]), loc[1:]
    out = origin.get(head, head)
    for part in rest:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def with_workload(body: object, request: JobRequest) -> JobRequest:
    """The request with the submitted kind's object kept on it (unchanged for a Job or native)."""
    if kind_of(body) is None:
        return request
    assert isinstance(body, Mapping)
    return replace(request, workload=workload_of(body))
