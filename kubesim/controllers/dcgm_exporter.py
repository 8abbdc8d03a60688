"""The GPU operator's dcgm-exporter DaemonSet and the device plugin's reaction to a dead GPU.

Owns `DcgmExporterController`, for a cluster whose fleet entry has `dcgmExporter` enabled:
- one exporter pod per node with device-plugin GPUs, as the DaemonSet makes it (namespace gpu-operator,
  label app=nvidia-dcgm-exporter, container port 9400 named metrics, tolerating every taint), bound to the
  node and started by the kubelet; re-created when deleted, deleted with its node;
- the pods on a GPU that got a fatal XID (`ClusterGpus.failures`): failed by the kubelet
  (`Kubelet.gpu_failed`) `failAfterSeconds` after the XID, if that pod still holds the GPU.
Without `dcgmExporter` it does nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq

from kubesim.clock import SimClock
from kubesim.controllers.kubelet import Kubelet
from kubesim.dcgm import EXPORTER_APP, EXPORTER_NAMESPACE, EXPORTER_PORT, EXPORTER_PORT_NAME
from kubesim.gpuhealth import ClusterGpus, gpu_node
from kubesim.store import AlreadyExistsError, NotFoundError, Obj, ObjectStore, WatchEvent

IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04"
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what the API server's generateName suffixes are made of


def exporter_pod_name(node: str) -> str:
    digest = hashlib.sha256(node.encode()).digest()
    return f"{EXPORTER_APP}-" + "".join(_ALPHABET[b % len(_ALPHABET)] for b in digest[:5])


def exporter_pod(node: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": exporter_pod_name(node),
            "namespace": EXPORTER_NAMESPACE,
            "labels": {"app": EXPORTER_APP, "pod-template-generation": "1"},
        },
        "spec": {
            "nodeName": node,
            "serviceAccountName": EXPORTER_APP,
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "terminationGracePeriodSeconds": 30,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": EXPORTER_APP,
                    "image": IMAGE,
                    "env": [
                        {"name": "DCGM_EXPORTER_LISTEN", "value": f":{EXPORTER_PORT}"},
                        {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
                        {"name": "NODE_NAME", "value": node},
                    ],
                    "ports": [
                        {"name": EXPORTER_PORT_NAME, "containerPort": EXPORTER_PORT, "protocol": "TCP"}
                    ],
                }
            ],
        },
        "status": {"phase": "Pending"},
    }


class DcgmExporterController:
    def __init__(
        self, store: ObjectStore, clock: SimClock, gpus: ClusterGpus, kubelet: Kubelet, enabled: bool
    ) -> None:
        self._store, self._clock, self.gpus, self._kubelet = store, clock, gpus, kubelet
        self.enabled = enabled
        self._missing: set[str] = set()  # GPU nodes whose exporter pod is to be created
        self._gone: set[str] = set()  # exporter pods whose node went
        if not enabled:
            return
        with contextlib.suppress(AlreadyExistsError):
            store.create(
                "namespaces",
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {
                        "name": EXPORTER_NAMESPACE,
                        "labels": {"kubernetes.io/metadata.name": EXPORTER_NAMESPACE},
                    },
                    "spec": {"finalizers": ["kubernetes"]},
                    "status": {"phase": "Active"},
                },
            )
        for node in store.list("nodes")[0]:
            if gpu_node(node) is not None:
                self._missing.add(node["metadata"]["name"])
        store.subscribe("nodes", self._on_node)
        store.subscribe("pods", self._on_pod)

    @property
    def dirty(self) -> bool:
        return bool(self._missing or self._gone)

    @property
    def next_due(self) -> float | None:
        return self.gpus.failures[0][0] if self.enabled and self.gpus.failures else None

    def _on_node(self, event: WatchEvent) -> None:
        name = event.obj["metadata"]["name"]
        if event.type == "DELETED":
            self._missing.discard(name)
            self._gone.add(name)
        elif event.type == "ADDED" and gpu_node(event.obj) is not None:
            self._missing.add(name)

    def _on_pod(self, event: WatchEvent) -> None:
        meta = event.obj["metadata"]
        if event.type != "DELETED" or meta.get("namespace") != EXPORTER_NAMESPACE:
            return
        if (meta.get("labels") or {}).get("app") != EXPORTER_APP:
            return
        node = (event.obj.get("spec") or {}).get("nodeName") or ""
        if node and self._store.find("nodes", "", node) is not None:
            self._missing.add(node)  # the DaemonSet controller puts it back

    def tick(self) -> None:
        if not self.enabled:
            return
        if self._gone:
            gone, self._gone = self._gone, set()
            for node in sorted(gone):
                with contextlib.suppress(NotFoundError):
                    self._store.request_delete("pods", EXPORTER_NAMESPACE, exporter_pod_name(node), 0)
        if self._missing:
            missing, self._missing = self._missing, set()
            for node in sorted(missing):
                if self._store.find("nodes", "", node) is None:
                    continue
                with contextlib.suppress(AlreadyExistsError):
                    self._store.create("pods", exporter_pod(node))
        now = self._clock.now()
        failures = self.gpus.failures
        while failures and failures[0][0] <= now:
            due, node, index, _ = heapq.heappop(failures)
            holder = self.gpus.holders(node).get(index)
            if holder is None:
                continue
            pod = self._store.find("pods", holder.namespace, holder.pod)
            if pod is None or pod["metadata"].get("uid") != holder.uid:
                continue
            self._kubelet.gpu_failed(pod, due)
