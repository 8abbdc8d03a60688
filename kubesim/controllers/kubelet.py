"""The simulated kubelets of a cluster: bound pods start, run for a simulated time and exit.

Owns `Kubelet`. A pod bound to a Ready node becomes Running (startTime, hostIP/podIP, containerStatuses
running, conditions PodReadyToStartContainers/Initialized/ContainersReady/Ready True). After
`sim.gpufed.io/duration-seconds` simulated seconds (default: the cluster's podDurationSeconds) its
containers exit with `sim.gpufed.io/exit-code` (default 0): phase Succeeded for 0, Failed otherwise.
A pod with restartPolicy Always and no duration annotation (a bare `kubectl run` pod) runs until deleted.

Topology manager admission: on a node whose NRT policy is single-numa-node (or restricted), a pod
with exclusive resources that the scheduler could not put in one zone (no `sim.gpufed.io/numa-zone`
annotation) is rejected like the real kubelet does: phase Failed, reason TopologyAffinityError.
A pod with metadata.deletionTimestamp is finished off (removed from the store).
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq

from kubesim.clock import SimClock
from kubesim.controllers.accounting import Accounting, exclusive_requests
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.pods import (
    ANN_DURATION,
    ANN_EXIT_CODE,
    ANN_NUMA_ZONE,
    is_terminal,
    key_of,
    node_name,
    phase,
    qos_class,
    set_condition,
)
from kubesim.fleet import ClusterSpec
from kubesim.store import NotFoundError, Obj, ObjectStore, WatchEvent, rfc3339

_IMAGE_DIGEST = "sha256:" + "0" * 64


def _pod_ip(uid: str) -> str:
    h = hashlib.blake2b(uid.encode(), digest_size=3).digest()
    return f"10.{64 + h[0] % 64}.{h[1]}.{h[2] or 1}"


def _float(text: object, default: float) -> float:
    try:
        return float(str(text))
    except (TypeError, ValueError):
        return default


def _int(text: object, default: int) -> int:
    try:
        return int(str(text))
    except (TypeError, ValueError):
        return default


class Kubelet:
    """Runs the pods bound to one cluster's nodes on simulated time."""

    def __init__(
        self,
        store: ObjectStore,
        clock: SimClock,
        cluster: ClusterSpec,
        accounting: Accounting,
        events: EventRecorder,
    ) -> None:
        self._store = store
        self._clock = clock
        self._default_duration = cluster.pod_duration_seconds
        self._acct = accounting
        self._events = events
        self._to_start: set[tuple[str, str]] = set()
        self._to_remove: set[tuple[str, str]] = set()
        self._exits: list[tuple[float, str, str, str]] = []  # (due, ns, name, uid)
        for pod in store.list("pods")[0]:
            self._track(pod)
            if phase(pod) == "Running":
                self._schedule_exit(pod, self._clock.now())
        store.subscribe("pods", self._on_pod)

    @property
    def next_due(self) -> float | None:
        return self._exits[0][0] if self._exits else None

    @property
    def dirty(self) -> bool:
        return bool(self._to_start or self._to_remove)

    def _track(self, pod: Obj) -> None:
        key = key_of(pod)
        if pod["metadata"].get("deletionTimestamp"):
            self._to_remove.add(key)
        elif node_name(pod) and phase(pod) == "Pending":
            self._to_start.add(key)

    def _on_pod(self, event: WatchEvent) -> None:
        if event.type == "DELETED":
            key = key_of(event.obj)
            self._to_start.discard(key)
            self._to_remove.discard(key)
            return
        self._track(event.obj)

    def tick(self) -> None:
        now = self._clock.now()
        if self._to_remove:
            keys, self._to_remove = self._to_remove, set()
            for ns, name in sorted(keys):
                with contextlib.suppress(NotFoundError):
                    self._store.delete("pods", ns, name)
        if self._to_start:
            keys, self._to_start = self._to_start, set()
            for ns, name in sorted(keys):
                pod = self._store.find("pods", ns, name)
                if pod is None or phase(pod) != "Pending" or not node_name(pod):
                    continue
                self._start(pod, now)
        while self._exits and self._exits[0][0] <= now:
            _, ns, name, uid = heapq.heappop(self._exits)
            pod = self._store.find("pods", ns, name)
            if pod is None or pod["metadata"].get("uid") != uid or phase(pod) != "Running":
                continue
            self._exit(pod, now)

    # ------------------------------------------------------------------ transitions

    def _node_ready(self, name: str) -> bool:
        node = self._store.find("nodes", "", name)
        if node is None:
            return False
        return any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (node.get("status") or {}).get("conditions") or ()
        )

    def _topology_rejects(self, pod: Obj) -> bool:
        topo = self._acct.topology.get(node_name(pod))
        if topo is None or topo.policy not in ("single-numa-node", "restricted"):
            return False
        if (pod["metadata"].get("annotations") or {}).get(ANN_NUMA_ZONE):
            return False
        tracked = {r for zone in topo.zones.values() for r in zone}
        exclusive = exclusive_requests(pod, self._acct.requests(pod))
        return any(r in tracked for r in exclusive)

    def _start(self, pod: Obj, now: float) -> None:
        if not self._node_ready(node_name(pod)):
            return
        ns, name = key_of(pod)
        ts = rfc3339(now)
        if self._topology_rejects(pod):
            message = "Resources cannot be allocated with Topology locality"

            def reject(obj: Obj) -> None:
                st = obj.setdefault("status", {})
                st.update(
                    {
                        "phase": "Failed",
                        "reason": "TopologyAffinityError",
                        "message": message,
                        "startTime": ts,
                        "qosClass": qos_class(obj),
                    }
                )

            self._store.mutate("pods", ns, name, reject)
            self._events.record(pod, "TopologyAffinityError", message, "Warning", "kubelet")
            return
        node = self._store.find("nodes", "", node_name(pod))
        host_ip = next(
            (
                a["address"]
                for a in ((node or {}).get("status") or {}).get("addresses") or ()
                if a.get("type") == "InternalIP"
            ),
            "10.0.0.1",
        )
        pod_ip = _pod_ip(pod["metadata"].get("uid", name))

        def run(obj: Obj) -> None:
            spec = obj.get("spec") or {}
            st = obj.setdefault("status", {})
            st.update(
                {
                    "phase": "Running",
                    "startTime": ts,
                    "hostIP": host_ip,
                    "hostIPs": [{"ip": host_ip}],
                    "podIP": pod_ip,
                    "podIPs": [{"ip": pod_ip}],
                    "qosClass": qos_class(obj),
                }
            )
            st["containerStatuses"] = [_container_running(c, ts, obj) for c in spec.get("containers") or ()]
            inits = spec.get("initContainers") or ()
            if inits:
                st["initContainerStatuses"] = [
                    _container_running(c, ts, obj)
                    if c.get("restartPolicy") == "Always"
                    else _container_done(c, ts, ts, 0, obj)
                    for c in inits
                ]
            for ctype in (
                "PodReadyToStartContainers",
                "Initialized",
                "ContainersReady",
                "Ready",
                "PodScheduled",
            ):
                set_condition(obj, ctype, "True", now)

        self._store.mutate("pods", ns, name, run)
        for c in (pod.get("spec") or {}).get("containers") or ():
            self._events.record(pod, "Started", f"Started container {c.get('name', '')}", "Normal", "kubelet")
        running = self._store.find("pods", ns, name)
        if running is not None:
            self._schedule_exit(running, now)

    def _schedule_exit(self, pod: Obj, started: float) -> None:
        annotations = pod["metadata"].get("annotations") or {}
        if (
            ANN_DURATION not in annotations
            and (pod.get("spec") or {}).get("restartPolicy", "Always") == "Always"
        ):
            return
        duration = max(0.0, _float(annotations.get(ANN_DURATION), self._default_duration))
        ns, name = key_of(pod)
        heapq.heappush(self._exits, (started + duration, ns, name, pod["metadata"].get("uid", "")))

    def _exit(self, pod: Obj, now: float) -> None:
        annotations = pod["metadata"].get("annotations") or {}
        code = _int(annotations.get(ANN_EXIT_CODE), 0)
        ts = rfc3339(now)
        ns, name = key_of(pod)

        def finish(obj: Obj) -> None:
            st = obj.setdefault("status", {})
            started = st.get("startTime", ts)
            st["phase"] = "Succeeded" if code == 0 else "Failed"
            st["containerStatuses"] = [
                _container_done(c, started, ts, code, obj)
                for c in (obj.get("spec") or {}).get("containers") or ()
            ]
            if st.get("initContainerStatuses"):
                st["initContainerStatuses"] = [
                    _container_done(c, started, ts, 0, obj)
                    for c in (obj.get("spec") or {}).get("initContainers") or ()
                ]
            reason = "PodCompleted" if code == 0 else "PodFailed"
            set_condition(obj, "PodReadyToStartContainers", "False", now)
            set_condition(obj, "ContainersReady", "False", now, reason)
            set_condition(obj, "Ready", "False", now, reason)

        if not is_terminal(pod):
            self._store.mutate("pods", ns, name, finish)


def _image_id(container: Obj) -> str:
    image = str(container.get("image") or "busybox")
    return f"{image.split(':', maxsplit=1)[0]}@{_IMAGE_DIGEST}"


def _container_id(pod: Obj, container: Obj) -> str:
    uid = pod["metadata"].get("uid", "")
    return "containerd://" + hashlib.sha256(f"{uid}/{container.get('name')}".encode()).hexdigest()


def _container_running(c: Obj, ts: str, pod: Obj) -> Obj:
    return {
        "name": c.get("name", ""),
        "image": c.get("image", ""),
        "imageID": _image_id(c),
        "containerID": _container_id(pod, c),
        "ready": True,
        "started": True,
        "restartCount": 0,
        "state": {"running": {"startedAt": ts}},
        "lastState": {},
    }


def _container_done(c: Obj, started: str, finished: str, code: int, pod: Obj) -> Obj:
    return {
        "name": c.get("name", ""),
        "image": c.get("image", ""),
        "imageID": _image_id(c),
        "containerID": _container_id(pod, c),
        "ready": False,
        "started": False,
        "restartCount": 0,
        "state": {
            "terminated": {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": started,
                "finishedAt": finished,
                "containerID": _container_id(pod, c),
            }
        },
        "lastState": {},
    }
