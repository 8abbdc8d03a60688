"""Per-GPU health of one simulated cluster: XIDs injected per GPU, what NVIDIA's device plugin makes of
them, and which pod holds which GPU.

Owns
- the XID rules kubesim applies (as NVIDIA's k8s-device-plugin does): an application XID
  (`APPLICATION_XIDS`: 13, 31, 43, 45, 68, 109, the list the plugin skips) leaves the GPU healthy; any other
  XID makes it unhealthy (it leaves the node's allocatable `nvidia.com/gpu`, capacity stays) until cleared.
  The DCGM counters an XID moves (double-bit ECC on 48/94/95, single-bit on 92, remapped rows on 63/64,
  row-remap pending on 63, failure on 64).
- `ClusterGpus`: the state of every GPU that ever had an XID (a GPU without one is at its defaults, so
  nothing here grows with the fleet), the allocation of whole GPUs to pods (the annotation
  `sim.gpufed.io/gpus`, written by the kubelet at admission and read back from pod events), the node
  allocatable update, and the queue of pods to fail after a fatal XID (the DCGM controller drains it).

Runs on the simulation's event loop (the store is not thread-safe); other threads go through `sim.call`.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubesim.store import NotFoundError, ObjectStore, WatchEvent

Obj = dict[str, Any]

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
GPUS_ANNOTATION = "sim.gpufed.io/gpus"
POOL_LABEL = "sim.gpufed.io/node-pool"
GPU_RESOURCE = "nvidia.com/gpu"
DBE_XIDS = frozenset({48, 94, 95})
SBE_XIDS = frozenset({92})
REMAP_XIDS = frozenset({63, 64})

# NVML device names (what dcgm-exporter's modelName shows) by GFD product label.
_NVML_NAMES = {
    "NVIDIA-A100-SXM4-40GB": "NVIDIA A100-SXM4-40GB",
    "NVIDIA-A100-SXM4-80GB": "NVIDIA A100-SXM4-80GB",
    "NVIDIA-H100-80GB-HBM3": "NVIDIA H100 80GB HBM3",
    "NVIDIA-H200": "NVIDIA H200",
    "NVIDIA-L4": "NVIDIA L4",
}
# PCI bus numbers of the GPUs of an 8-GPU HGX board, in index order.
_BUS_IDS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")


class GpuFaultError(ValueError):
    """A GPU fault that names no known node or GPU, or a code that is no XID (the admin answers 400)."""


def is_fatal(code: int) -> bool:
    """Whether the device plugin marks a GPU unhealthy on this XID (every XID but the application ones)."""
    return code not in APPLICATION_XIDS


@dataclass(slots=True)
class GpuState:
    """One GPU that has had an XID. Clear (a GPU reset) resets the gauges, the volatile ECC counts and the
    health; the exporter's XID totals and the remapped-row counts only grow."""

    last_xid: int = 0
    xid_totals: dict[int, int] = field(default_factory=dict)
    xid_times: list[tuple[float, int]] = field(default_factory=list)  # for the windowed count
    dbe: int = 0
    sbe: int = 0
    uncorrectable_rows: int = 0
    remap_pending: int = 0
    remap_failure: int = 0
    unhealthy_since: float | None = None
    unhealthy_xid: int = 0

    def window_counts(self, now: float, window: float) -> dict[int, int]:
        counts: dict[int, int] = {}
        for at, code in self.xid_times:
            if now - window <= at <= now:
                counts[code] = counts.get(code, 0) + 1
        return counts


@dataclass(frozen=True, slots=True)
class GpuNode:
    """What the exporter needs to know about one GPU node, read from its Node object."""

    name: str
    pool: str
    count: int
    model_name: str
    indexed: bool  # whole GPUs, one nvidia.com/gpu each (not MIG single, not time-sliced)
    replicas: int


def gpu_node(node: Obj) -> GpuNode | None:
    """The GPU facts of a node served by the device plugin, or None (no GPUs, or DRA-managed)."""
    labels = node["metadata"].get("labels") or {}
    try:
        count = int(labels.get("nvidia.com/gpu.count", "0"))
    except ValueError:
        return None
    if count <= 0:
        return None
    product = str(labels.get("nvidia.com/gpu.product", ""))
    try:
        replicas = max(1, int(labels.get("nvidia.com/gpu.replicas", "1") or "1"))
    except ValueError:
        replicas = 1
    base = product.split("-MIG-", maxsplit=1)[0].removesuffix("-SHARED")
    return GpuNode(
        name=node["metadata"]["name"],
        pool=str(labels.get(POOL_LABEL, "")),
        count=count,
        model_name=_NVML_NAMES.get(base, base.replace("-", " ")),
        indexed="-MIG-" not in product and replicas == 1,
        replicas=replicas,
    )


def gpu_uuid(cluster: str, node: str, index: int) -> str:
    return "GPU-" + str(uuid.UUID(hashlib.sha256(f"{cluster}/{node}/{index}".encode()).hexdigest()[:32]))


def pci_bus_id(index: int) -> str:
    bus = _BUS_IDS[index] if index < len(_BUS_IDS) else f"{0x20 + index:02X}"
    return f"00000000:{bus}:00.0"


def pod_gpus(pod: Obj) -> list[int]:
    """The GPU indices the kubelet gave a pod (annotation sim.gpufed.io/gpus), [] when none."""
    text = (pod["metadata"].get("annotations") or {}).get(GPUS_ANNOTATION) or ""
    out = []
    for part in str(text).split(","):
        if part.strip().isdigit():
            out.append(int(part))
    return out


def _gpu_container(pod: Obj) -> str:
    containers = (pod.get("spec") or {}).get("containers") or []
    for c in containers:
        res = c.get("resources") or {}
        if GPU_RESOURCE in (res.get("limits") or {}) or GPU_RESOURCE in (res.get("requests") or {}):
            return str(c.get("name", ""))
    return str(containers[0].get("name", "")) if containers else ""


@dataclass(frozen=True, slots=True)
class Holder:
    """The running pod a GPU is allocated to (dcgm-exporter's pod, namespace, container labels)."""

    namespace: str
    pod: str
    container: str
    uid: str


class ClusterGpus:
    """Per-GPU health and allocation of one cluster (see the module docstring)."""

    def __init__(
        self,
        cluster: str,
        store: ObjectStore,
        *,
        excluded: frozenset[str] = frozenset(),
        pool_excluded: dict[str, frozenset[str]] | None = None,
        xid_window_seconds: float = 300.0,
        fail_after_seconds: float = 5.0,
        driver_version: str = "",
    ) -> None:
        self.cluster = cluster
        self.store = store
        self.excluded = excluded
        self.pool_excluded = pool_excluded or {}
        self.xid_window_seconds = xid_window_seconds
        self.fail_after_seconds = fail_after_seconds
        self.driver_version = driver_version
        self.states: dict[tuple[str, int], GpuState] = {}
        # told the node whose healthy GPUs changed (the NUMA topology updater rewrites its zones)
        self.on_health: list[Callable[[str], None]] = []
        self._alloc: dict[str, dict[int, Holder]] = {}  # node -> gpu index -> running pod
        self._pod_alloc: dict[tuple[str, str], tuple[str, tuple[int, ...]]] = {}
        # (due, node, gpu, code): pods on a GPU that went unhealthy, failed by the DCGM controller
        self.failures: list[tuple[float, str, int, int]] = []
        for pod in store.list("pods")[0]:
            self._track(pod)
        store.subscribe("pods", self._on_pod)
        store.subscribe("nodes", self._on_node)

    # ------------------------------------------------------------------ allocation

    def _on_pod(self, event: WatchEvent) -> None:
        self._track(event.obj, deleted=event.type == "DELETED")

    def _track(self, pod: Obj, deleted: bool = False) -> None:
        meta = pod["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        phase = (pod.get("status") or {}).get("phase")
        live = not deleted and phase in ("Pending", "Running")
        indices = tuple(pod_gpus(pod)) if live else ()
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        old = self._pod_alloc.get(key)
        if old == (node, indices):
            return
        if old is not None:
            on = self._alloc.get(old[0], {})
            for i in old[1]:
                if on.get(i) is not None and (on[i].namespace, on[i].pod) == key:
                    del on[i]
            del self._pod_alloc[key]
        if indices and node:
            holder = Holder(key[0], key[1], _gpu_container(pod), str(meta.get("uid", "")))
            on = self._alloc.setdefault(node, {})
            for i in indices:
                on[i] = holder
            self._pod_alloc[key] = (node, indices)

    def holders(self, node: str) -> dict[int, Holder]:
        """GPU index -> the pod holding it, on one node (running or admitted pods only)."""
        return self._alloc.get(node, {})

    def unhealthy(self, node: str) -> set[int]:
        return {i for (n, i), s in self.states.items() if n == node and s.unhealthy_since is not None}

    def allocate(self, node: Obj, pod: Obj, want: int, zones: int = 1) -> list[int] | None:
        """The kubelet's device allocation at admission: `want` free healthy indices (the pod's NUMA zone
        first, then the lowest), or None when there are not enough. [] for a node that is not indexed."""
        info = gpu_node(node)
        if info is None or not info.indexed or want <= 0:
            return []
        taken = set(self.holders(info.name)) | self.unhealthy(info.name)
        free = [i for i in range(info.count) if i not in taken]
        if len(free) < want:
            return None
        zone = (pod["metadata"].get("annotations") or {}).get("sim.gpufed.io/numa-zone", "")
        if zone.startswith("node-") and zones > 1:
            z = int(zone[5:]) if zone[5:].isdigit() else -1
            per = max(1, info.count // zones)
            free.sort(key=lambda i: (i // per != z, i))
        return sorted(free[:want])

    def free_healthy(self, node: str, count: int) -> int:
        taken = set(self.holders(node)) | self.unhealthy(node)
        return len([i for i in range(count) if i not in taken])

    # ------------------------------------------------------------------ faults

    def _on_node(self, event: WatchEvent) -> None:
        if event.type == "DELETED":
            name = event.obj["metadata"]["name"]
            for key in [k for k in self.states if k[0] == name]:
                del self.states[key]
            self._alloc.pop(name, None)

    def _node_info(self, node_name: str, index: int) -> tuple[Obj, GpuNode]:
        node = self.store.find("nodes", "", node_name)
        if node is None:
            raise GpuFaultError(f"node {node_name!r} not found in cluster {self.cluster!r}")
        info = gpu_node(node)
        if info is None:
            raise GpuFaultError(f"node {node_name!r} has no GPUs served by the NVIDIA device plugin")
        if not 0 <= index < info.count:
            raise GpuFaultError(f"node {node_name!r} has GPUs 0..{info.count - 1}, not {index}")
        return node, info

    def xid(self, node_name: str, index: int, code: int, now: float) -> GpuState:
        """The GPU reports XID `code` now: counters move; a fatal XID makes it unhealthy (allocatable -1)
        and queues the failure of the pod holding it."""
        if code <= 0:
            raise GpuFaultError(f"an XID is a positive number, not {code}")
        _, info = self._node_info(node_name, index)
        state = self.states.setdefault((node_name, index), GpuState())
        state.last_xid = code
        state.xid_totals[code] = state.xid_totals.get(code, 0) + 1
        state.xid_times = [t for t in state.xid_times if now - t[0] <= self.xid_window_seconds]
        state.xid_times.append((now, code))
        if code in DBE_XIDS:
            state.dbe += 1
        if code in SBE_XIDS:
            state.sbe += 1
        if code in REMAP_XIDS:
            state.uncorrectable_rows += 1
        if code == 63:
            state.remap_pending = 1
        if code == 64:
            state.remap_failure = 1
        if is_fatal(code):
            if state.unhealthy_since is None:
                state.unhealthy_since = now
                state.unhealthy_xid = code
                self._sync_allocatable(node_name, info)
            if index in self.holders(node_name):
                heapq.heappush(self.failures, (now + self.fail_after_seconds, node_name, index, code))
        return state

    def clear(self, node_name: str, index: int) -> GpuState:
        """The GPU is reset or replaced: healthy again; the last-XID gauge, the row-remap flags and the
        volatile ECC counters (since the last reset) back to 0. The exporter's XID counters and the
        remapped-row counts keep their values."""
        _, info = self._node_info(node_name, index)
        state = self.states.setdefault((node_name, index), GpuState())
        state.last_xid = 0
        state.dbe = 0
        state.sbe = 0
        state.remap_pending = 0
        state.remap_failure = 0
        was = state.unhealthy_since is not None
        state.unhealthy_since = None
        state.unhealthy_xid = 0
        if was:
            self._sync_allocatable(node_name, info)
        return state

    def _sync_allocatable(self, node_name: str, info: GpuNode) -> None:
        """The device plugin's ListAndWatch: allocatable nvidia.com/gpu = healthy devices (replicas each)."""
        bad = len(self.unhealthy(node_name))

        def update(obj: Obj) -> None:
            status = obj.setdefault("status", {})
            capacity = (status.get("capacity") or {}).get(GPU_RESOURCE)
            if capacity is None:
                return
            total = int(str(capacity))
            status.setdefault("allocatable", {})[GPU_RESOURCE] = str(max(0, total - bad * info.replicas))

        with contextlib.suppress(NotFoundError):
            self.store.mutate("nodes", "", node_name, update)
        for hook in self.on_health:
            hook(node_name)

    def faulty(self, now: float) -> list[Obj]:
        """Every GPU with a fault history, for the admin endpoint."""
        out = []
        for (node, index), s in sorted(self.states.items()):
            out.append(
                {
                    "node": node,
                    "gpu": index,
                    "uuid": gpu_uuid(self.cluster, node, index),
                    "lastXid": s.last_xid,
                    "xids": {str(k): v for k, v in sorted(s.xid_totals.items())},
                    "unhealthy": s.unhealthy_since is not None,
                    "since": s.unhealthy_since,
                    "reason": f"XID {s.unhealthy_xid}" if s.unhealthy_since is not None else "",
                }
            )
        return out

    def excluded_for(self, pool: str) -> frozenset[str]:
        return self.excluded | self.pool_excluded.get(pool, frozenset())


def parse_xid_spec(text: str, need_code: bool = True) -> tuple[str, int, int]:
    """NODE:GPU_INDEX:CODE (CODE optional when clearing) -> (node, index, code or 0)."""
    parts = text.rsplit(":", 2) if text.count(":") >= 2 else text.rsplit(":", 1)
    try:
        if len(parts) == 3:
            return parts[0], int(parts[1]), int(parts[2])
        if len(parts) == 2 and not need_code:
            return parts[0], int(parts[1]), 0
    except ValueError:
        pass
    raise GpuFaultError(
        f"--xid {text!r}: expected NODE:GPU_INDEX:CODE (e.g. onprem-a-a100-0:3:79)"
        + ("" if need_code else " or NODE:GPU_INDEX")
    )


def cluster_gpus(cluster: Any, store: ObjectStore) -> ClusterGpus:
    """A cluster's GPU health and allocation, configured from its fleet entry (a fleet ClusterSpec)."""
    spec = getattr(cluster, "dcgm_exporter", None)
    pools = [*getattr(cluster, "node_pools", ()), *getattr(cluster, "cloud_pools", ())]
    driver = getattr(getattr(cluster, "driver", None), "version", "")
    return ClusterGpus(
        cluster.name,
        store,
        excluded=frozenset(spec.exclude) if spec else frozenset(),
        pool_excluded={p.name: frozenset(p.dcgm_exporter.exclude) for p in pools if p.dcgm_exporter},
        xid_window_seconds=spec.xid_window_seconds if spec else 300.0,
        fail_after_seconds=spec.fail_after_seconds if spec else 5.0,
        driver_version=driver,
    )
