"""The workload kinds (JobSet, TrainJob, PyTorchJob, RayJob) on the Kubernetes edge: which of their APIs
a member serves, and reading, listing and deleting the broker's objects of those kinds.

Owns:
    served_apis(rest)     the group/versions of the kinds a member serves (one GET /apis), and whether it
                          holds each ClusterTrainingRuntime (one LIST when it serves the Trainer API):
                          what the pollers publish (broker.capacity.kinds) and the filter reads
    KindApis              a gateway's memory of served_apis per cluster (asked again after TTL seconds),
                          so deletes and sweeps touch only the kinds a member serves
    read_object / delete_kinds / list_refs   the GET, DELETE (propagation Background, 404 is success)
                          and labelled LIST (as WorkloadRefs, for the sweep and a rebuild) of those objects
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from adapters.kube_rest import ApiStatus, KubeRest
from broker.core.errors import ClusterRejected
from broker.core.workloads import WorkloadRef
from broker.workload.kinds.registry import KINDS
from broker.workload.manifest import JOB_ID_LABEL

__all__ = ["KindApis", "KindDiscovery", "delete_kinds", "list_refs", "read_object", "served_apis"]

RUNTIMES_PATH = "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes"
_TRAINER = "trainer.kubeflow.org/v1alpha1"


def _path(api_version: str, plural: str, namespace: str, name: str | None = None) -> str:
    base = f"/apis/{api_version}/namespaces/{quote(namespace, safe='')}/{plural}"
    return base if name is None else f"{base}/{quote(name, safe='')}"


# Discovery runs on the liveness prober's thread: a short deadline, so a cluster that starts hanging delays
# the next probe (and so its health verdict) by seconds at most.
DISCOVERY_TIMEOUT = (1.5, 3.0)


def served_apis(rest: KubeRest) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the kinds' group/versions the member serves, its ClusterTrainingRuntime names), sorted."""
    groups = rest.request("GET", "/apis", timeout=DISCOVERY_TIMEOUT)
    versions = {
        str(v.get("groupVersion"))
        for g in (groups.get("groups") or ())
        if isinstance(g, Mapping)
        for v in (g.get("versions") or ())
        if isinstance(v, Mapping)
    }
    apis = tuple(sorted({k.api_version for k in KINDS.values()} & versions))
    runtimes: tuple[str, ...] = ()
    if _TRAINER in apis:
        items, _ = rest.list_pages(RUNTIMES_PATH, timeout=DISCOVERY_TIMEOUT)
        runtimes = tuple(sorted(str((r.get("metadata") or {}).get("name")) for r in items))
    return apis, runtimes


class KindDiscovery:
    """A poller's view of a member's workload-kind APIs and runtimes, read again every `interval` seconds
    (after a liveness probe that succeeded): `refresh` says whether it changed (publish a summary)."""

    def __init__(self, interval: float = 60.0) -> None:
        self.interval = interval
        self.apis: tuple[str, ...] = ()
        self.runtimes: tuple[str, ...] = ()
        self.observed = False
        self._next = 0.0

    def due(self) -> bool:
        """Whether refresh() would look again now (at most once per interval)."""
        return time.monotonic() >= self._next

    def refresh(self, rest: KubeRest) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.interval
        try:
            apis, runtimes = served_apis(rest)
        except Exception:  # a failed read keeps what was known; the next one tries again
            return False
        changed = not self.observed or (apis, runtimes) != (self.apis, self.runtimes)
        self.apis, self.runtimes, self.observed = apis, runtimes, True
        return changed


class KindApis:
    """Which kinds' APIs each member serves, remembered for `ttl` seconds (a failed look: all of them)."""

    def __init__(self, ttl: float = 300.0) -> None:
        self._ttl = ttl
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[float, tuple[str, ...]]] = {}

    def served(self, rest: KubeRest) -> tuple[str, ...]:
        now = time.monotonic()
        with self._lock:
            hit = self._seen.get(rest.cluster)
        if hit is not None and hit[0] > now:
            return hit[1]
        try:
            apis, _ = served_apis(rest)
        except Exception:  # unknown: try every kind (a 404 is success for a delete, nothing for a list)
            return tuple(sorted({k.api_version for k in KINDS.values()}))
        with self._lock:
            self._seen[rest.cluster] = (now + self._ttl, apis)
        return apis

    def forget(self, cluster: str) -> None:
        with self._lock:
            self._seen.pop(cluster, None)


def read_object(
    rest: KubeRest, api_version: str, kind: str, namespace: str, name: str
) -> dict[str, Any] | None:
    adapter = KINDS.get((api_version, kind))
    plural = adapter.plural if adapter else kind.lower() + "s"
    try:
        obj = rest.request("GET", _path(api_version, plural, namespace, name))
    except ApiStatus as e:
        if e.code == 404:
            return None
        raise ClusterRejected(rest.cluster, f"read {kind} {name}: {e.code} {e.message}") from e
    return obj if isinstance(obj, dict) else None


def delete_kinds(rest: KubeRest, apis: KindApis, namespace: str, name: str) -> None:
    served = apis.served(rest)
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
    for adapter in KINDS.values():
        if adapter.api_version not in served:
            continue
        try:
            rest.request("DELETE", _path(adapter.api_version, adapter.plural, namespace, name), body=body)
        except ApiStatus as e:
            if e.code != 404:
                raise ClusterRejected(
                    rest.cluster, f"delete {adapter.kind} {name}: {e.code} {e.message}"
                ) from e


def list_refs(rest: KubeRest, apis: KindApis, namespace: str) -> list[dict[str, Any]]:
    """The broker's objects of every served kind in the namespace (labelled gpufed.io/job-id)."""
    out: list[dict[str, Any]] = []
    for adapter in KINDS.values():
        if adapter.api_version not in apis.served(rest):
            continue
        try:
            items, _ = rest.list_pages(
                _path(adapter.api_version, adapter.plural, namespace),
                selector=[("labelSelector", JOB_ID_LABEL)],
            )
        except ApiStatus as e:
            if e.code == 404:
                continue
            raise ClusterRejected(rest.cluster, f"list {adapter.plural}: {e.code} {e.message}") from e
        out.extend(items)
    return out


def refs(items: list[dict[str, Any]], namespace: str, to_ref: Any) -> list[WorkloadRef]:
    return [r for r in (to_ref(o, namespace) for o in items) if r is not None]
