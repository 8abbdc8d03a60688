"""The simulated kubelets of a cluster: bound pods start, run for a simulated time and exit.

Owns `Kubelet`. A pod bound to a Ready node becomes Running (startTime, hostIP/podIP, containerStatuses
running, conditions PodReadyToStartContainers/Initialized/ContainersReady/Ready True). After
`sim.gpufed.io/duration-seconds` simulated seconds (default: the cluster's podDurationSeconds) its
containers exit with `sim.gpufed.io/exit-code` (default 0): phase Succeeded for 0, Failed otherwise.
A pod with restartPolicy Always and no duration annotation (a bare `kubectl run` pod) runs until deleted.
A container's finishedAt is when its process ended (its due time), not the (possibly late) tick that saw it.

Topology manager admission: on a node whose NRT policy is single-numa-node (or restricted), a pod
with exclusive resources that the scheduler could not put in one zone (no `sim.gpufed.io/numa-zone`
annotation) is rejected like the real kubelet does: phase Failed, reason TopologyAffinityError.
Restarts (restartPolicy OnFailure after a non-zero exit, Always after any exit): the container restarts in
place: restartCount + 1, lastState.terminated, state waiting CrashLoopBackOff for the kubelet's crash
backoff (10 s doubling per restart, at most 300 s), Ready False meanwhile, then running again for another
duration; the pod stays Running. `sim.gpufed.io/exit-codes` ("1,1,0") gives the exit code of each run in
turn (the last repeats); `sim.gpufed.io/index-exit-codes` ("1:3,4:2") one per Job completion index.

Image pulls (controllers/image_pull.py): a pod whose image is under `registry.invalid/` stays Pending
with ErrImagePull, then ImagePullBackOff, pulled again after the kubelet's image back-off, with the
kubelet's Pulling/Failed/BackOff events.

Graceful deletion: a pod with metadata.deletionTimestamp keeps running until that time (deletion +
deletionGracePeriodSeconds; the containers are taken not to exit on SIGTERM), then its containers are
killed (exit code 137) and it is Failed; a checkpointing pod (controllers/checkpoints.py) given a grace
period of at least its save time saves and exits 143 with its progress as the termination message; a terminal or never-started pod is finished at once. The kubelet
then deletes it with grace period 0: it goes unless finalizers hold it (they keep it, terminal, until they
are removed).

GPUs (kubesim/gpuhealth.py): at admission the kubelet's device manager gives a pod asking for whole
`nvidia.com/gpu` that many free healthy GPU indices (annotation `sim.gpufed.io/gpus`), or refuses it as the
real one does (Failed, UnexpectedAdmissionError) when too few are left; `gpu_failed` is a pod whose GPU
died under it (a fatal XID): exit code 1, reason Error, its last periodic checkpoint as termination message.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
from datetime import UTC, datetime

from kubesim.clock import SimClock
from kubesim.controllers import checkpoints, image_pull
from kubesim.controllers.accounting import Accounting, exclusive_requests
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.pods import (
    ANN_DURATION,
    ANN_EXIT_CODE,
    ANN_EXIT_CODES,
    ANN_INDEX_EXIT_CODES,
    ANN_NUMA_ZONE,
    is_terminal,
    key_of,
    node_name,
    phase,
    qos_class,
    set_condition,
)
from kubesim.fleet import ClusterSpec, kubelet_conditions
from kubesim.gpuhealth import GPU_RESOURCE, GPUS_ANNOTATION, ClusterGpus
from kubesim.store import NotFoundError, Obj, ObjectStore, WatchEvent, rfc3339

_IMAGE_DIGEST = "sha256:" + "0" * 64
_BACKOFF_START, _BACKOFF_MAX = 10.0, 300.0
_KILLED = 137
GPU_FAULT_EXIT = 1  # a CUDA process whose device is gone errors out (the framework raises, exit 1)
_INDEX_KEY = "batch.kubernetes.io/job-completion-index"


def _pod_ip(uid: str) -> str:
    h = hashlib.blake2b(uid.encode(), digest_size=3).digest()
    return f"10.{64 + h[0] % 64}.{h[1]}.{h[2] or 1}"


def _float(text: object, default: float) -> float:
    try:
        return float(str(text))
    except (TypeError, ValueError):
        return default


def _epoch(ts: str, default: float) -> float:
    try:
        return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
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
        self._restarts: list[tuple[float, str, str, str]] = []
        self._kills: list[tuple[float, str, str, str]] = []
        self._pulls: list[tuple[float, str, str, str, int]] = []  # (due, ns, name, uid, failed pulls)
        self._kill_at: dict[tuple[str, str], str] = {}  # pod -> deletionTimestamp it is scheduled for
        self._saves: list[tuple[float, str, str, str]] = []  # checkpointing pods exiting on SIGTERM
        self._reports: list[tuple[float, str, str, str]] = []  # periodic checkpoint annotations
        self.gpus: ClusterGpus | None = None  # GPU indices and health (set by Controllers)
        self._node_status: set[str] = set()  # nodes whose kubelet-owned conditions someone removed
        for pod in store.list("pods")[0]:
            self._track(pod)
            if phase(pod) == "Running":
                self._schedule_exit(pod, self._clock.now())
        store.subscribe("pods", self._on_pod)
        store.subscribe("nodes", self._on_node)

    @property
    def next_due(self) -> float | None:
        heaps = (self._exits, self._restarts, self._kills, self._pulls, self._saves, self._reports)
        dues = [h[0][0] for h in heaps if h]
        return min(dues) if dues else None

    @property
    def dirty(self) -> bool:
        return bool(self._to_start or self._to_remove or self._node_status)

    def _on_node(self, event: WatchEvent) -> None:
        if event.type != "DELETED" and _missing_conditions(event.obj):
            self._node_status.add(event.obj["metadata"]["name"])

    def _sync_node_status(self, now: float) -> None:
        """The kubelet's node status update: its own condition types (Ready, MemoryPressure, ...) come back
        when a write removed them (a merge patch replaces the whole list); every other condition type, such
        as one a health agent set, is left as it is."""
        names, self._node_status = self._node_status, set()
        for name in sorted(names):
            node = self._store.find("nodes", "", name)
            if node is None or not _missing_conditions(node):
                continue

            def restore(obj: Obj) -> None:
                conditions = obj.setdefault("status", {}).setdefault("conditions", [])
                have = {c.get("type") for c in conditions}
                conditions.extend(c for c in kubelet_conditions(rfc3339(now)) if c["type"] not in have)

            with contextlib.suppress(NotFoundError):
                self._store.mutate("nodes", "", name, restore)

    def _track(self, pod: Obj) -> None:
        key = key_of(pod)
        meta = pod["metadata"]
        stamp = meta.get("deletionTimestamp")
        if stamp:
            self._to_start.discard(key)
            if is_terminal(pod) or phase(pod) != "Running":
                if meta.get("deletionGracePeriodSeconds") or not meta.get("finalizers"):
                    self._to_remove.add(key)
            elif self._kill_at.get(key) != stamp:
                self._kill_at[key] = stamp
                due = _epoch(stamp, self._clock.now())
                heapq.heappush(self._kills, (due, key[0], key[1], meta.get("uid", "")))
                saved = checkpoints.save_due(pod)  # it catches SIGTERM, saves and exits (143)
                if saved is not None and saved < due:
                    heapq.heappush(self._saves, (saved, key[0], key[1], meta.get("uid", "")))
        elif node_name(pod) and phase(pod) == "Pending":
            self._to_start.add(key)

    def _on_pod(self, event: WatchEvent) -> None:
        if event.type == "DELETED":
            key = key_of(event.obj)
            self._to_start.discard(key)
            self._to_remove.discard(key)
            self._kill_at.pop(key, None)
            return
        self._track(event.obj)

    def tick(self) -> None:
        now = self._clock.now()
        if self._node_status:
            self._sync_node_status(now)
        while self._saves and self._saves[0][0] <= now:
            due, ns, name, uid = heapq.heappop(self._saves)
            pod = self._store.find("pods", ns, name)
            if pod is None or pod["metadata"].get("uid") != uid or phase(pod) != "Running":
                continue
            if pod["metadata"].get("deletionTimestamp"):
                self._saved_exit(pod, due)  # when the process exited, not when this tick saw it
                self._to_remove.add((ns, name))
        while self._reports and self._reports[0][0] <= now:
            due, ns, name, uid = heapq.heappop(self._reports)
            pod = self._store.find("pods", ns, name)
            if pod is None or pod["metadata"].get("uid") != uid or phase(pod) != "Running":
                continue
            if not pod["metadata"].get("deletionTimestamp"):
                self._report_checkpoint(pod, due)  # its progress when it saved, not when a tick saw it
        while self._kills and self._kills[0][0] <= now:
            _, ns, name, uid = heapq.heappop(self._kills)
            pod = self._store.find("pods", ns, name)
            if (
                pod is None
                or pod["metadata"].get("uid") != uid
                or not pod["metadata"].get("deletionTimestamp")
            ):
                continue
            if _epoch(pod["metadata"]["deletionTimestamp"], now) > now:
                continue  # rescheduled (a shorter grace period pushed its own entry)
            self._kill(pod, now)
            self._to_remove.add((ns, name))
        if self._to_remove:
            keys, self._to_remove = self._to_remove, set()
            for ns, name in sorted(keys):
                with contextlib.suppress(NotFoundError):
                    self._store.request_delete("pods", ns, name, 0)
        while self._restarts and self._restarts[0][0] <= now:
            _, ns, name, uid = heapq.heappop(self._restarts)
            pod = self._store.find("pods", ns, name)
            if pod is None or pod["metadata"].get("uid") != uid or phase(pod) != "Running":
                continue
            if pod["metadata"].get("deletionTimestamp"):
                continue
            self._restart(pod, now)
        while self._pulls and self._pulls[0][0] <= now:
            _, ns, name, uid, failed = heapq.heappop(self._pulls)
            pod = self._store.find("pods", ns, name)
            if pod is None or pod["metadata"].get("uid") != uid or phase(pod) != "Pending":
                continue
            if not pod["metadata"].get("deletionTimestamp"):
                self._pull_sync(pod, now, failed)
        if self._to_start:
            keys, self._to_start = self._to_start, set()
            for ns, name in sorted(keys):
                pod = self._store.find("pods", ns, name)
                if pod is None or phase(pod) != "Pending" or not node_name(pod) or _pulling(pod):
                    continue
                self._start(pod, now)
        while self._exits and self._exits[0][0] <= now:
            due, ns, name, uid = heapq.heappop(self._exits)
            pod = self._store.find("pods", ns, name)
            if pod is None or pod["metadata"].get("uid") != uid or phase(pod) != "Running":
                continue
            self._exit(pod, due)  # finishedAt: when the process exited, not when this tick saw it

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
        gpu_indices = self._admit_gpus(pod, node, now)
        if gpu_indices is None:
            return
        host_ip = next(
            (
                a["address"]
                for a in ((node or {}).get("status") or {}).get("addresses") or ()
                if a.get("type") == "InternalIP"
            ),
            "10.0.0.1",
        )
        pod_ip = _pod_ip(pod["metadata"].get("uid", name))
        if image_pull.failing_images(pod):
            self._pull_failed(pod, now, 1, host_ip, pod_ip)
            return

        def run(obj: Obj) -> None:
            spec = obj.get("spec") or {}
            if gpu_indices:
                obj["metadata"].setdefault("annotations", {})[GPUS_ANNOTATION] = ",".join(
                    map(str, gpu_indices)
                )
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

    def _admit_gpus(self, pod: Obj, node: Obj | None, now: float) -> list[int] | None:
        """The device manager's allocation: the GPU indices given to the pod ([] when it asks for none or
        the node is not indexed), or None: too few healthy GPUs are free, the pod is refused."""
        if self.gpus is None or node is None:
            return []
        want = int(self._acct.requests(pod).get(GPU_RESOURCE, 0))
        if want <= 0:
            return []
        topo = self._acct.topology.get(node_name(pod))
        zones = len(topo.zones) if topo is not None else 1
        got = self.gpus.allocate(node, pod, want, zones)
        if got is not None:
            return got
        ns, name = key_of(pod)
        labels = node["metadata"].get("labels") or {}
        have = self.gpus.free_healthy(node_name(pod), int(labels.get("nvidia.com/gpu.count", "0") or 0))
        message = (
            f"Allocate failed due to requested number of devices unavailable for {GPU_RESOURCE}. "
            f"Requested: {want}, Available: {have}, which is unexpected"
        )
        ts = rfc3339(now)

        def reject(obj: Obj) -> None:
            st = obj.setdefault("status", {})
            st.update(
                {
                    "phase": "Failed",
                    "reason": "UnexpectedAdmissionError",
                    "message": message,
                    "startTime": ts,
                    "qosClass": qos_class(obj),
                }
            )

        self._store.mutate("pods", ns, name, reject)
        self._events.record(pod, "UnexpectedAdmissionError", message, "Warning", "kubelet")
        return None

    def gpu_failed(self, pod: Obj, now: float) -> None:
        """A GPU of this running pod died (fatal XID): its process exits 1 (reason Error); a checkpointing
        pod leaves its last periodic checkpoint as termination message. OnFailure/Always: it restarts in
        place as after any crash."""
        if phase(pod) != "Running" or is_terminal(pod):
            return
        if (pod.get("spec") or {}).get("restartPolicy", "Always") != "Never":
            self._crash(pod, GPU_FAULT_EXIT, now)
            return
        ns, name = key_of(pod)
        ts = rfc3339(now)
        annotations = pod["metadata"].get("annotations") or {}
        message = annotations.get(checkpoints.REPORTED_ANNOTATION) if checkpoints.every_seconds(pod) else None

        def fail(obj: Obj) -> None:
            st = obj.setdefault("status", {})
            started = st.get("startTime", ts)
            before = {c.get("name"): c for c in st.get("containerStatuses") or ()}
            st["phase"] = "Failed"
            statuses = []
            for c in (obj.get("spec") or {}).get("containers") or ():
                done = _container_done(c, started, ts, GPU_FAULT_EXIT, obj, before.get(c.get("name")))
                if message:
                    done["state"]["terminated"]["message"] = message
                statuses.append(done)
            st["containerStatuses"] = statuses
            set_condition(obj, "PodReadyToStartContainers", "False", now)
            set_condition(obj, "ContainersReady", "False", now, "PodFailed")
            set_condition(obj, "Ready", "False", now, "PodFailed")

        self._store.mutate("pods", ns, name, fail)

    def _pull_failed(self, pod: Obj, now: float, failed: int, host_ip: str = "", pod_ip: str = "") -> None:
        """A pull of the pod's image failed (the `failed`-th time): ErrImagePull, the pod stays Pending
        with its sandbox up; the next sync finds the image in back-off."""
        ns, name = key_of(pod)
        ts = rfc3339(now)
        names = [str(c.get("name", "")) for c in (pod.get("spec") or {}).get("containers") or ()]

        def waiting(obj: Obj) -> None:
            st = obj.setdefault("status", {})
            st.setdefault("startTime", ts)
            if host_ip:
                st.update({"hostIP": host_ip, "hostIPs": [{"ip": host_ip}], "podIP": pod_ip})
                st["podIPs"] = [{"ip": pod_ip}]
            st["qosClass"] = qos_class(obj)
            st["containerStatuses"] = image_pull.waiting_statuses(obj, backing_off=False)
            message = f"containers with unready status: [{' '.join(names)}]"
            for ctype in ("PodReadyToStartContainers", "Initialized", "PodScheduled"):
                set_condition(obj, ctype, "True", now)
            set_condition(obj, "ContainersReady", "False", now, "ContainersNotReady", message)
            set_condition(obj, "Ready", "False", now, "ContainersNotReady", message)

        self._store.mutate("pods", ns, name, waiting)
        for image in image_pull.failing_images(pod):
            for reason, kind, message in image_pull.pull_failed_events(image):
                self._events.record(pod, reason, message, kind, "kubelet")
        uid = pod["metadata"].get("uid", "")
        heapq.heappush(self._pulls, (now + image_pull.NEXT_SYNC_S, ns, name, uid, failed))

    def _pull_sync(self, pod: Obj, now: float, failed: int) -> None:
        """A sync of a pod whose pull failed: in back-off (ImagePullBackOff until the next try), or the
        back-off is over and the pull fails again."""
        ns, name = key_of(pod)
        waiting = [
            cs.get("state", {}).get("waiting", {}).get("reason")
            for cs in (pod.get("status") or {}).get("containerStatuses") or ()
        ]
        uid = pod["metadata"].get("uid", "")
        if "ErrImagePull" not in waiting:  # the back-off is over: pull again
            self._pull_failed(pod, now, failed + 1)
            return

        def backing_off(obj: Obj) -> None:
            obj.setdefault("status", {})["containerStatuses"] = image_pull.waiting_statuses(obj, True)

        self._store.mutate("pods", ns, name, backing_off)
        for image in image_pull.failing_images(pod):
            for reason, kind, message in image_pull.backoff_events(image):
                self._events.record(pod, reason, message, kind, "kubelet")
        due = now - image_pull.NEXT_SYNC_S + image_pull.backoff_s(failed)
        heapq.heappush(self._pulls, (max(due, now), ns, name, uid, failed))

    def _schedule_exit(self, pod: Obj, started: float, restarted: bool = False) -> None:
        annotations = pod["metadata"].get("annotations") or {}
        if (
            not restarted
            and ANN_DURATION not in annotations
            and (pod.get("spec") or {}).get("restartPolicy", "Always") == "Always"
        ):
            return
        duration = max(0.0, _float(annotations.get(ANN_DURATION), self._default_duration))
        if not restarted:  # started with GPUFED_RESUME_FROM=progress=<s>: only the remainder
            duration = max(0.0, duration - checkpoints.resumed_progress(pod))
        ns, name = key_of(pod)
        every = checkpoints.every_seconds(pod)
        if every is not None and not restarted:
            heapq.heappush(self._reports, (started + every, ns, name, pod["metadata"].get("uid", "")))
        heapq.heappush(self._exits, (started + duration, ns, name, pod["metadata"].get("uid", "")))

    def _exit_code(self, pod: Obj) -> int:
        annotations = pod["metadata"].get("annotations") or {}
        index = annotations.get(_INDEX_KEY)
        if index is not None:
            for part in str(annotations.get(ANN_INDEX_EXIT_CODES) or "").split(","):
                i, _, code = part.partition(":")
                if i.strip() == index and code.strip():
                    return _int(code, 0)
        codes = [c for c in str(annotations.get(ANN_EXIT_CODES) or "").split(",") if c.strip()]
        if codes:
            runs = max(
                (
                    int(cs.get("restartCount") or 0)
                    for cs in (pod.get("status") or {}).get("containerStatuses") or ()
                ),
                default=0,
            )
            return _int(codes[min(runs, len(codes) - 1)], 0)
        return _int(annotations.get(ANN_EXIT_CODE), 0)

    def _exit(self, pod: Obj, now: float) -> None:
        code = self._exit_code(pod)
        ts = rfc3339(now)
        ns, name = key_of(pod)
        policy = (pod.get("spec") or {}).get("restartPolicy", "Always")
        if policy == "Always" or (policy == "OnFailure" and code != 0):
            self._crash(pod, code, now)
            return

        def finish(obj: Obj) -> None:
            st = obj.setdefault("status", {})
            started = st.get("startTime", ts)
            st["phase"] = "Succeeded" if code == 0 else "Failed"
            restarts = {c.get("name"): c for c in st.get("containerStatuses") or ()}
            st["containerStatuses"] = [
                _container_done(c, started, ts, code, obj, restarts.get(c.get("name")))
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

    def _crash(self, pod: Obj, code: int, now: float) -> None:
        """The container exited and restarts in place after the crash backoff."""
        ns, name = key_of(pod)
        ts = rfc3339(now)
        restarts = 1 + max(
            (
                int(cs.get("restartCount") or 0)
                for cs in (pod.get("status") or {}).get("containerStatuses") or ()
            ),
            default=0,
        )
        delay = min(_BACKOFF_MAX, _BACKOFF_START * 2 ** (restarts - 1))
        uid = pod["metadata"].get("uid", "")
        names = [str(c.get("name", "")) for c in (pod.get("spec") or {}).get("containers") or ()]

        def crash(obj: Obj) -> None:
            st = obj.setdefault("status", {})
            started = st.get("startTime", ts)
            statuses = []
            for c in (obj.get("spec") or {}).get("containers") or ():
                done = _container_done(c, started, ts, code, obj)
                cname = c.get("name", "")
                statuses.append(
                    {
                        **done,
                        "restartCount": restarts,
                        "lastState": {"terminated": done["state"]["terminated"]},
                        "state": {
                            "waiting": {
                                "reason": "CrashLoopBackOff",
                                "message": f"back-off {int(delay)}s restarting failed container={cname} "
                                f"pod={name}_{ns}({uid})",
                            }
                        },
                    }
                )
            st["containerStatuses"] = statuses
            message = f"containers with unready status: [{' '.join(names)}]"
            set_condition(obj, "ContainersReady", "False", now, "ContainersNotReady", message)
            set_condition(obj, "Ready", "False", now, "ContainersNotReady", message)

        self._store.mutate("pods", ns, name, crash)
        self._events.record(
            pod,
            "BackOff",
            f"Back-off restarting failed container {' '.join(names)} in pod {name}_{ns}({uid})",
            "Warning",
            "kubelet",
        )
        heapq.heappush(self._restarts, (now + delay, ns, name, uid))

    def _restart(self, pod: Obj, now: float) -> None:
        ns, name = key_of(pod)
        ts = rfc3339(now)

        def rerun(obj: Obj) -> None:
            st = obj.setdefault("status", {})
            for cs in st.get("containerStatuses") or ():
                cs["state"] = {"running": {"startedAt": ts}}
                cs["ready"] = True
                cs["started"] = True
            for ctype in ("ContainersReady", "Ready"):
                set_condition(obj, ctype, "True", now)

        running = self._store.mutate("pods", ns, name, rerun)
        for c in (pod.get("spec") or {}).get("containers") or ():
            self._events.record(pod, "Started", f"Started container {c.get('name', '')}", "Normal", "kubelet")
        self._schedule_exit(running, now, restarted=True)

    def _duration(self, pod: Obj) -> float:
        annotations = pod["metadata"].get("annotations") or {}
        return max(0.0, _float(annotations.get(ANN_DURATION), self._default_duration))

    def _saved_exit(self, pod: Obj, now: float) -> None:  # `now`: when it exited
        """A checkpointing pod saved on SIGTERM (kubesim.controllers.checkpoints): its container exits
        143 (reason Error) with `progress=<seconds done>` as its termination message; the pod is Failed."""
        ns, name = key_of(pod)
        ts = rfc3339(now)
        save = checkpoints.save_seconds(pod) or 0.0
        message = checkpoints.progress_text(checkpoints.progress(pod, now - save, self._duration(pod)))

        def saved(obj: Obj) -> None:
            st = obj.setdefault("status", {})
            started = st.get("startTime", ts)
            before = {c.get("name"): c for c in st.get("containerStatuses") or ()}
            st["phase"] = "Failed"
            statuses = []
            for c in (obj.get("spec") or {}).get("containers") or ():
                done = _container_done(
                    c, started, ts, checkpoints.SIGTERM_EXIT, obj, before.get(c.get("name"))
                )
                done["state"]["terminated"]["message"] = message
                statuses.append(done)
            st["containerStatuses"] = statuses
            set_condition(obj, "PodReadyToStartContainers", "False", now)
            set_condition(obj, "ContainersReady", "False", now, "PodFailed")
            set_condition(obj, "Ready", "False", now, "PodFailed")

        self._store.mutate("pods", ns, name, saved)

    def _report_checkpoint(self, pod: Obj, now: float) -> None:
        """A running checkpointing pod's periodic checkpoint: its progress on the pod annotation."""
        ns, name = key_of(pod)
        text = checkpoints.progress_text(checkpoints.progress(pod, now, self._duration(pod)))

        def report(obj: Obj) -> None:
            obj["metadata"].setdefault("annotations", {})[checkpoints.REPORTED_ANNOTATION] = text

        self._store.mutate("pods", ns, name, report)
        every = checkpoints.every_seconds(pod)
        if every is not None:
            heapq.heappush(self._reports, (now + every, ns, name, pod["metadata"].get("uid", "")))

    def _kill(self, pod: Obj, now: float) -> None:
        """The grace period is over: the containers are killed and the pod is Failed."""
        if is_terminal(pod):
            return
        ns, name = key_of(pod)
        ts = rfc3339(now)

        def kill(obj: Obj) -> None:
            st = obj.setdefault("status", {})
            started = st.get("startTime", ts)
            before = {c.get("name"): c for c in st.get("containerStatuses") or ()}
            st["phase"] = "Failed"
            st["containerStatuses"] = [
                _container_done(c, started, ts, _KILLED, obj, before.get(c.get("name")))
                for c in (obj.get("spec") or {}).get("containers") or ()
            ]
            set_condition(obj, "PodReadyToStartContainers", "False", now)
            set_condition(obj, "ContainersReady", "False", now, "PodFailed")
            set_condition(obj, "Ready", "False", now, "PodFailed")

        self._store.mutate("pods", ns, name, kill)
        for c in (pod.get("spec") or {}).get("containers") or ():
            self._events.record(
                pod, "Killing", f"Stopping container {c.get('name', '')}", "Normal", "kubelet"
            )


def _missing_conditions(node: Obj) -> bool:
    """Whether a write removed the kubelet's Ready condition (a merge patch of status.conditions replaces
    the list); the kubelet then reports its conditions again."""
    status = node.get("status") or {}
    return "conditions" in status and not any(c.get("type") == "Ready" for c in status["conditions"] or ())


def _pulling(pod: Obj) -> bool:
    """The pod's image pull failed and the kubelet is retrying it (its _pulls entry drives it)."""
    return any(
        (cs.get("state") or {}).get("waiting", {}).get("reason") in ("ErrImagePull", "ImagePullBackOff")
        for cs in (pod.get("status") or {}).get("containerStatuses") or ()
    )


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


def _container_done(
    c: Obj, started: str, finished: str, code: int, pod: Obj, before: Obj | None = None
) -> Obj:
    return {
        "name": c.get("name", ""),
        "image": c.get("image", ""),
        "imageID": _image_id(c),
        "containerID": _container_id(pod, c),
        "ready": False,
        "started": False,
        "restartCount": int((before or {}).get("restartCount") or 0),
        "state": {
            "terminated": {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": started,
                "finishedAt": finished,
                "containerID": _container_id(pod, c),
            }
        },
        "lastState": dict((before or {}).get("lastState") or {}),
    }
