"""The simulated kube-scheduler: binds Pending pods to nodes the way the real plugins would.

Owns `Scheduler` (one per cluster, serving every scheduler profile the cluster runs: ClusterSpec
.schedulers names them and says which are NUMA-aware and which do coscheduling) and `fit_reasons`, the
filter chain the cluster autoscaler reuses:

  NodeUnschedulable / NotReady -> NodeAffinity (nodeSelector, required affinity) -> TaintToleration
  (NoSchedule, NoExecute) -> NodeResourcesFit (effective requests against allocatable minus what
  non-terminated bound pods request; cpu, memory, pods, nvidia.com/gpu, nvidia.com/mig-*) ->
  NodeResourceTopologyMatch (NUMA-aware profiles only, nodes whose NRT policy is single-numa-node: the
  pod's exclusive resources inside one zone's available, scope pod).

Feasible nodes are scored by preferred node affinity (sum of weights), then bin-packing (fewest of the
pod's first device resource left free), then name. Pods are taken by priority (spec.priority, else
their PriorityClass value), then creation time. Scheduling gates hold a pod (PodScheduled=False
SchedulingGated). Pods of a coscheduling profile labelled `scheduling.x-k8s.io/pod-group` are placed as
a gang: at least the PodGroup's minMember bound together, or none. A pod that fits nowhere gets
PodScheduled=False reason Unschedulable with kube-scheduler's message ("0/12 nodes are available: 12
Insufficient nvidia.com/gpu.") and a FailedScheduling event; a bound pod gets spec.nodeName,
PodScheduled=True and a Scheduled event. When it binds to a node with NUMA zones the scheduler also
records the kubelet's zone choice on the pod (see accounting.py).

Preemption (preemption.py chooses): a pod that fits nowhere, whose preemptionPolicy is not Never, evicts
lower-priority pods on the one node the default scheduler would pick. The pod gets
status.nominatedNodeName; each victim gets the DisruptionTarget condition (reason PreemptionByScheduler,
"default-scheduler: preempting to accommodate a higher priority pod"), a Preempted event ("Preempted by
pod <uid> on node <node>") and a graceful DELETE. While nominated, the pod's requests are held on that node
against pods of lower or equal priority, and it binds once the victims are gone. NUMA alignment and
PodDisruptionBudgets are not weighed when choosing victims; gangs do not preempt.
"""

from __future__ import annotations

import contextlib
import functools
from collections import Counter
from dataclasses import dataclass

from kubesim.clock import SimClock
from kubesim.controllers import gangs
from kubesim.controllers.accounting import Accounting, encode_split, exclusive_requests
from kubesim.controllers.computedomain import CANNOT_ALLOCATE
from kubesim.controllers.dra import DraController, DraPlan
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.gangs import UnitKey
from kubesim.controllers.matching import (
    preferred_score,
    selector_and_affinity_match,
    taint_text,
    tolerates,
    untolerated_taint,
)
from kubesim.controllers.pods import (
    ANN_NUMA_SPLIT,
    ANN_NUMA_ZONE,
    POD_GROUP_LABEL,
    Requests,
    condition,
    is_terminal,
    key_of,
    node_name,
    scheduler_name,
    set_condition,
)
from kubesim.controllers.preemption import (
    Candidate,
    Victim,
    eligible,
    pick_node,
    resource_only,
    select_victims,
)
from kubesim.fleet import ClusterSpec, SchedulerSpec
from kubesim.quantity import parse_resource_list
from kubesim.store import NotFoundError, Obj, ObjectStore, WatchEvent, rfc3339

PODGROUPS = "podgroups.scheduling.x-k8s.io"
PRIORITY_CLASSES = "priorityclasses.scheduling.k8s.io"
_EPS = 1e-9
_UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


@dataclass(slots=True)
class NodeView:
    """The parts of a Node the filters read, parsed once per node resourceVersion."""

    name: str
    rv: str
    labels: dict[str, str]
    taints: list[Obj]
    allocatable: Requests
    ready: bool
    unschedulable: bool


def node_view(node: Obj) -> NodeView:
    meta = node["metadata"]
    status = node.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ()
    )
    spec = node.get("spec") or {}
    return NodeView(
        name=meta["name"],
        rv=str(meta.get("resourceVersion", "")),
        labels=dict(meta.get("labels") or {}),
        taints=list(spec.get("taints") or ()),
        allocatable=parse_resource_list(status.get("allocatable")),
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),
    )


def fit_reasons(pod_spec: Obj, requests: Requests, view: NodeView, used: Requests) -> list[str]:
    """Why the pod cannot go to this node (empty when it fits), in kube-scheduler's words."""
    if not view.ready:
        return ["node(s) had untolerated taint {node.kubernetes.io/not-ready: }"]
    if view.unschedulable and not any(
        tolerates(t, _UNSCHEDULABLE_TAINT) for t in pod_spec.get("tolerations") or ()
    ):
        return ["node(s) were unschedulable"]
    if not selector_and_affinity_match(pod_spec, view.labels, view.name):
        return ["node(s) didn't match Pod's node affinity/selector"]
    taint = untolerated_taint(pod_spec, view.taints)
    if taint is not None:
        return [f"node(s) had untolerated taint {taint_text(taint)}"]
    reasons = []
    alloc = view.allocatable
    if used.get("pods", 0.0) + 1 > alloc.get("pods", 110.0) + _EPS:
        reasons.append("Too many pods")
    for res in sorted(requests):
        if res == "pods":
            continue
        if requests[res] > alloc.get(res, 0.0) - used.get(res, 0.0) + _EPS:
            reasons.append(f"Insufficient {res}")
    return reasons


def _fits(pod_spec: Obj, requests: Requests, view: NodeView, used: Requests) -> list[str]:
    return fit_reasons(pod_spec, requests, view, used)


def fits_in(free: Requests, want: Requests) -> bool:
    return all(v <= free.get(r, 0.0) + _EPS for r, v in want.items())


# Filter verdicts kube-scheduler marks UnschedulableAndUnresolvable: evicting pods would not help there
_UNRESOLVABLE = ("node(s) didn't match", "node(s) had untolerated taint", "node(s) were unschedulable")
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"


def preemption_verdict(why: list[str]) -> str:
    """What preemption concludes about one node the pod did not fit (the PostFilter's per-node status)."""
    return NOT_HELPFUL if any(w.startswith(_UNRESOLVABLE) for w in why) else NO_VICTIMS


def unschedulable_message(
    total: int, reasons: Counter[str], preemption: Counter[str] | None = None, never: bool = False
) -> str:
    """kube-scheduler's FitError: the filters' reasons per node count, then (when given) the preemption
    PostFilter's verdict, as in `... 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available:
    3 No preemption victims found for incoming pod.`"""
    if total == 0:
        return "no nodes available to schedule pods"
    parts = sorted(f"{n} {r}" for r, n in reasons.items())
    message = f"0/{total} nodes are available: {', '.join(parts)}."
    if never:
        return f"{message} preemption: not eligible due to preemptionPolicy=Never."
    if preemption:
        verdicts = sorted(f"{n} {r}" for r, n in preemption.items())
        message += f" preemption: 0/{total} nodes are available: {', '.join(verdicts)}."
    return message


@dataclass(slots=True)
class _Choice:
    node: str
    zone: str | None = None
    split: dict[str, Requests] | None = None
    dra: DraPlan | None = None  # the pod's claims and the devices to allocate on the node


class Scheduler:
    """Binds pending pods of one cluster; cheap when nothing changed (dirty flag from store listeners)."""

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
        self._profiles = {s.name: s for s in cluster.schedulers}
        self._acct = accounting
        self._events = events
        self._pending: dict[tuple[str, str], int] = {}
        self._views: dict[str, NodeView] = {}
        self._classes: dict[str, int] = {}
        self._default_priority = 0
        self.dra: DraController | None = None  # DRA plugin (controllers/dra.py), set by Controllers
        self.dirty = True
        for pod in store.list("pods")[0]:
            if self._is_candidate(pod):
                self._pending[key_of(pod)] = int(pod["metadata"].get("generation", 1))
        store.subscribe("pods", self._on_pod)
        store.subscribe("nodes", self._on_node)
        store.subscribe(PODGROUPS, self._on_podgroup)
        store.subscribe(gangs.WORKLOADS, self._on_podgroup)
        store.subscribe(gangs.COMPUTE_DOMAINS, self._on_podgroup)

    # ------------------------------------------------------------------ listeners

    def _is_candidate(self, pod: Obj) -> bool:
        return (
            not node_name(pod)
            and not is_terminal(pod)
            and not pod["metadata"].get("deletionTimestamp")
            and scheduler_name(pod) in self._profiles
        )

    def _on_pod(self, event: WatchEvent) -> None:
        pod = event.obj
        key = key_of(pod)
        if event.type != "DELETED" and self._is_candidate(pod):
            gen = int(pod["metadata"].get("generation", 1))
            if self._pending.get(key) != gen:
                self._pending[key] = gen
                self.dirty = True
            return
        self._pending.pop(key, None)
        if node_name(pod) and (event.type == "DELETED" or is_terminal(pod)):
            self.dirty = True  # capacity freed

    def _on_node(self, event: WatchEvent) -> None:
        self._views.pop(event.obj["metadata"]["name"], None)
        self.dirty = True

    def _on_podgroup(self, event: WatchEvent) -> None:
        if event.type != "MODIFIED":
            self.dirty = True

    @property
    def pending(self) -> int:
        return len(self._pending)

    # ------------------------------------------------------------------ the pass

    def _node_views(self) -> list[NodeView]:
        nodes, _ = self._store.list("nodes")
        out = []
        for node in nodes:
            name = node["metadata"]["name"]
            view = self._views.get(name)
            if view is None or view.rv != node["metadata"].get("resourceVersion"):
                view = self._views[name] = node_view(node)
            out.append(view)
        out.sort(key=lambda v: v.name)
        return out

    def _priority_of(self, pod: Obj, classes: dict[str, int], default: int) -> int:
        spec = pod.get("spec") or {}
        if spec.get("priority") is not None:
            return int(spec["priority"])
        name = spec.get("priorityClassName")
        return classes.get(name, default) if name else default

    def tick(self) -> None:
        if not self.dirty:
            return
        self.dirty = False
        if not self._pending:
            return
        classes: dict[str, int] = {}
        default = 0
        for pc in self._store.list(PRIORITY_CLASSES)[0]:
            classes[pc["metadata"]["name"]] = int(pc.get("value") or 0)
            if pc.get("globalDefault"):
                default = int(pc.get("value") or 0)
        pods = []
        for ns, name in list(self._pending):
            pod = self._store.find("pods", ns, name)
            if pod is not None and self._is_candidate(pod):
                pods.append(pod)
        pods.sort(
            key=lambda p: (
                -self._priority_of(p, classes, default),
                p["metadata"].get("creationTimestamp", ""),
                p["metadata"]["name"],
            )
        )
        views = self._node_views()
        if self.dra is not None:
            self.dra.begin_pass()
        groups: dict[tuple[str, str], list[Obj]] = {}
        units: dict[UnitKey, list[Obj]] = {}
        order: list[Obj | tuple[str, str] | UnitKey] = []
        for pod in pods:
            spec = pod.get("spec") or {}
            if spec.get("schedulingGates"):
                self._mark(
                    pod,
                    "SchedulingGated",
                    "Scheduling is blocked due to non-empty scheduling gates",
                    event=False,
                )
                continue
            unit = gangs.unit_of(self._store, pod)
            if unit is not None:
                if unit not in units:
                    units[unit] = []
                    order.append(unit)
                units[unit].append(pod)
                continue
            group = (pod["metadata"].get("labels") or {}).get(POD_GROUP_LABEL)
            if group and self._profiles[scheduler_name(pod)].coscheduling:
                gkey = (pod["metadata"].get("namespace", ""), group)
                if gkey not in groups:
                    groups[gkey] = []
                    order.append(gkey)
                groups[gkey].append(pod)
            else:
                order.append(pod)
        failed: dict[str, str] = {}
        self._classes, self._default_priority = classes, default
        for item in order:
            if isinstance(item, UnitKey):
                self._schedule_unit(item, units[item], views)
            elif isinstance(item, tuple):
                self._schedule_gang(item, groups[item], views)
            else:
                self._schedule_one(item, views, failed, pods)

    # ------------------------------------------------------------------ one pod

    def _signature(self, pod: Obj, requests: Requests) -> str:
        spec = pod.get("spec") or {}
        return repr(
            (
                scheduler_name(pod),
                sorted(requests.items()),
                spec.get("nodeSelector"),
                spec.get("affinity"),
                spec.get("tolerations"),
                spec.get("topologySpreadConstraints"),
                spec.get("resourceClaims"),
                (pod.get("status") or {}).get("resourceClaimStatuses"),
            )
        )

    def _schedule_one(
        self, pod: Obj, views: list[NodeView], failed: dict[str, str], pending: list[Obj]
    ) -> None:
        requests = self._acct.requests(pod)
        priority = self._priority_of(pod, self._classes, self._default_priority)
        overlay = self._nominated_overlay(pod, priority, pending)
        sig = self._signature(pod, requests)
        if sig in failed and not overlay:
            self._mark(pod, "Unschedulable", failed[sig])
            self._preempt(pod, requests, priority, views)
            return
        choice, message = self._find(pod, requests, views, overlay, {})
        if choice is None:
            if not overlay:
                failed[sig] = message
            self._mark(pod, "Unschedulable", message)
            self._preempt(pod, requests, priority, views)
            return
        self._bind(pod, choice)

    # ------------------------------------------------------------------ preemption

    def _nominated_overlay(self, pod: Obj, priority: int, pending: list[Obj]) -> dict[str, Requests]:
        """Requests of other pending pods nominated to a node with priority >= this pod's (they are held)."""
        overlay: dict[str, Requests] = {}
        me = key_of(pod)
        for other in pending:
            node = (other.get("status") or {}).get("nominatedNodeName")
            if not node or key_of(other) == me:
                continue
            if self._priority_of(other, self._classes, self._default_priority) < priority:
                continue
            extra = overlay.setdefault(node, {})
            for r, v in {**self._acct.requests(other), "pods": 1.0}.items():
                extra[r] = extra.get(r, 0.0) + v
        return overlay

    def _running_on(self, node: str) -> list[tuple[Obj, int]]:
        out = []
        for ns, name in sorted(self._acct.pods_on(node)):
            p = self._store.find("pods", ns, name)
            if p is not None and not is_terminal(p):
                out.append((p, self._priority_of(p, self._classes, self._default_priority)))
        return out

    def _preempt(self, pod: Obj, requests: Requests, priority: int, views: list[NodeView]) -> None:
        nominated = str((pod.get("status") or {}).get("nominatedNodeName") or "")
        waiting = bool(nominated) and any(
            p["metadata"].get("deletionTimestamp") and prio < priority
            for p, prio in self._running_on(nominated)
        )
        if not eligible(pod, waiting) or waiting:
            return
        spec = pod.get("spec") or {}
        candidates: list[Candidate] = []
        for view in views:
            used = self._acct.used(view.name)
            if not resource_only(fit_reasons(spec, requests, view, used)):
                continue
            running = [
                Victim(
                    p,
                    prio,
                    str((p.get("status") or {}).get("startTime") or ""),
                    {**self._acct.requests(p), "pods": 1.0},
                )
                for p, prio in self._running_on(view.name)
                if not p["metadata"].get("deletionTimestamp")
            ]
            found = select_victims(
                view.name, used, running, priority, functools.partial(_fits, spec, requests, view)
            )
            if found is not None:
                candidates.append(found)
        if not candidates:
            return
        chosen = pick_node(candidates)
        now = self._clock.now()
        ns, name = key_of(pod)
        uid = pod["metadata"].get("uid", "")
        scheduler = scheduler_name(pod)
        for victim in chosen.victims:
            vns, vname = key_of(victim.pod)

            def disrupt(obj: Obj) -> None:
                set_condition(
                    obj,
                    "DisruptionTarget",
                    "True",
                    now,
                    "PreemptionByScheduler",
                    f"{scheduler}: preempting to accommodate a higher priority pod",
                )

            try:
                self._store.mutate("pods", vns, vname, disrupt)
                grace = int((victim.pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
                self._store.request_delete("pods", vns, vname, grace)
            except NotFoundError:
                continue
            self._events.record(
                victim.pod, "Preempted", f"Preempted by pod {uid} on node {chosen.node}", "Normal", scheduler
            )

        def nominate(obj: Obj) -> None:
            obj.setdefault("status", {})["nominatedNodeName"] = chosen.node

        with contextlib.suppress(NotFoundError):
            self._store.mutate("pods", ns, name, nominate)

    def _find(
        self,
        pod: Obj,
        requests: Requests,
        views: list[NodeView],
        overlay: dict[str, Requests],
        zone_overlay: dict[tuple[str, str], Requests],
    ) -> tuple[_Choice | None, str]:
        spec = pod.get("spec") or {}
        profile: SchedulerSpec = self._profiles[scheduler_name(pod)]
        exclusive = exclusive_requests(pod, requests)
        primary = next((r for r in sorted(requests) if r.startswith("nvidia.com/")), "cpu")
        reasons: Counter[str] = Counter()
        preemption: Counter[str] = Counter()
        feasible: list[tuple[tuple[int, float, str], NodeView]] = []
        claims: list[Obj] | None = None
        plans: dict[str, DraPlan] = {}
        if self.dra is not None and self.dra.uses_claims(pod):
            claims, waiting = self.dra.prefilter(pod)
            if claims is None:
                return None, waiting
        for view in views:
            used = self._acct.used(view.name)
            extra = overlay.get(view.name)
            if extra:
                used = {r: used.get(r, 0.0) + extra.get(r, 0.0) for r in set(used) | set(extra)}
            why = fit_reasons(spec, requests, view, used)
            if not why and claims is not None and self.dra is not None:
                plan = self.dra.filter(claims, view.name)
                if isinstance(plan, str):
                    why = [plan]
                else:
                    plans[view.name] = plan
            if why:
                reasons.update(why)
                preemption[preemption_verdict(why)] += 1
                continue
            free_after = (
                view.allocatable.get(primary, 0.0) - used.get(primary, 0.0) - requests.get(primary, 0.0)
            )
            feasible.append(((-preferred_score(spec, view.labels, view.name), free_after, view.name), view))
        feasible.sort(key=lambda item: item[0])
        # NUMA alignment last and lazily, best-scored node first: the first node that aligns wins.
        for _, view in feasible:
            choice = _Choice(view.name)
            topo = self._acct.topology.get(view.name)
            if topo is not None and exclusive:
                zone = self._pick_zone(view.name, exclusive, zone_overlay)
                if zone is not None:
                    choice.zone = zone
                elif profile.numa_aware and topo.policy == "single-numa-node":
                    reasons["node(s) cannot align pod"] += 1
                    preemption[NO_VICTIMS] += 1
                    continue
                elif topo.policy not in ("single-numa-node", "restricted"):
                    choice.split = self._spread(view.name, exclusive, zone_overlay)
            if view.name in plans and self.dra is not None:
                choice.dra = plans[view.name]
                self.dra.assume(choice.dra)
            return choice, ""
        never = spec.get("preemptionPolicy") == "Never"
        return None, unschedulable_message(len(views), reasons, preemption, never)

    def _zone_free(self, node: str, zone_overlay: dict[tuple[str, str], Requests]) -> dict[str, Requests]:
        free = self._acct.zone_free(node)
        for zone, res in free.items():
            extra = zone_overlay.get((node, zone))
            if extra:
                free[zone] = {r: v - extra.get(r, 0.0) for r, v in res.items()}
        return free

    def _pick_zone(
        self, node: str, exclusive: Requests, zone_overlay: dict[tuple[str, str], Requests]
    ) -> str | None:
        free = self._zone_free(node, zone_overlay)
        tracked = {r for res in free.values() for r in res}
        want = {r: v for r, v in exclusive.items() if r in tracked}
        if not want:
            return None
        primary = sorted(want)[0]
        fitting = [(res.get(primary, 0.0), zone) for zone, res in free.items() if fits_in(res, want)]
        return min(fitting)[1] if fitting else None

    def _spread(
        self, node: str, exclusive: Requests, zone_overlay: dict[tuple[str, str], Requests]
    ) -> dict[str, Requests]:
        free = self._zone_free(node, zone_overlay)
        split: dict[str, Requests] = {zone: {} for zone in free}
        for res, amount in sorted(exclusive.items()):
            left = amount
            for zone in sorted(free):
                take = min(left, max(free[zone].get(res, 0.0), 0.0))
                if take > 0:
                    split[zone][res] = take
                    left -= take
                if left <= _EPS:
                    break
        return {z: r for z, r in split.items() if r}

    # ------------------------------------------------------------------ gangs

    def _schedule_gang(self, gkey: tuple[str, str], pending: list[Obj], views: list[NodeView]) -> None:
        ns, group = gkey
        pg = self._store.find(PODGROUPS, ns, group)
        if pg is None:
            for pod in pending:
                self._mark(pod, "Unschedulable", f"PodGroup {ns}/{group} not found")
            return
        min_member = int((pg.get("spec") or {}).get("minMember") or 1)
        siblings = [
            p
            for p in self._store.list("pods", ns)[0]
            if (p["metadata"].get("labels") or {}).get(POD_GROUP_LABEL) == group
        ]
        bound = sum(1 for p in siblings if node_name(p) and not is_terminal(p))
        if bound + len(pending) < min_member:
            for pod in pending:
                self._mark(
                    pod,
                    "Unschedulable",
                    f"pre-filter pod {pod['metadata']['name']} cannot find enough sibling pods, "
                    f"current pods number: {bound + len(pending)}, minMember: {min_member}",
                )
            return
        placed, left = self._place_together(pending, views)
        if bound + len(placed) >= min_member:
            for pod, choice in placed:
                self._bind(pod, choice)
            for pod, message in left:
                self._mark(pod, "Unschedulable", message)
            self._set_group_phase(pg, "Running" if bound + len(placed) >= min_member else "Scheduling")
            return
        first = left[0][1] if left else ""
        for pod in pending:
            self._mark(
                pod,
                "Unschedulable",
                f"{first} pod group {group} rejected: {bound + len(placed)}/{min_member} members fit".strip(),
            )
        self._set_group_phase(pg, "Pending")

    def _place_together(
        self, pending: list[Obj], views: list[NodeView]
    ) -> tuple[list[tuple[Obj, _Choice]], list[tuple[Obj, str]]]:
        """Nodes for pods placed at once (each sees the others' requests): (placed, left with why)."""
        overlay: dict[str, Requests] = {}
        zone_overlay: dict[tuple[str, str], Requests] = {}
        placed: list[tuple[Obj, _Choice]] = []
        left: list[tuple[Obj, str]] = []
        for pod in pending:
            requests = self._acct.requests(pod)
            choice, message = self._find(pod, requests, views, overlay, zone_overlay)
            if choice is None:
                left.append((pod, message))
                continue
            placed.append((pod, choice))
            node_extra = overlay.setdefault(choice.node, {})
            for r, v in {**requests, "pods": requests.get("pods", 0.0) + 1}.items():
                node_extra[r] = node_extra.get(r, 0.0) + v
            zones = {choice.zone: exclusive_requests(pod, requests)} if choice.zone else (choice.split or {})
            for zone, res in zones.items():
                zextra = zone_overlay.setdefault((choice.node, zone), {})
                for r, v in res.items():
                    zextra[r] = zextra.get(r, 0.0) + v
        return placed, left

    def _schedule_unit(self, key: UnitKey, pending: list[Obj], views: list[NodeView]) -> None:
        """A Workload gang and/or a ComputeDomain's pods (gangs.py): all bound together or none."""
        alive = gangs.members(self._store, key)
        held = [node_name(p) for p in alive if node_name(p)]
        need = gangs.needs(self._store, key, len(pending), len(held))
        if need.waiting:
            for pod in pending:
                self._mark(pod, "Unschedulable", need.waiting, event=False)
            return
        for pod in pending:
            claims, waiting = self.dra.prefilter(pod) if self.dra is not None else ([], "")
            if claims is None:  # a claim of the pod is not made yet: the unit waits for it
                for each in pending:
                    self._mark(each, "Unschedulable", waiting)
                return
        if need.min_count <= 1 and not need.one_clique:  # a basic pod group: pod by pod
            failed: dict[str, str] = {}
            for pod in pending:
                self._schedule_one(pod, views, failed, pending)
            return
        trials: list[tuple[str, list[NodeView]]] = [("", views)]
        if need.one_clique:
            by_clique: dict[str, list[NodeView]] = {}
            for view in views:
                clique = view.labels.get(gangs.CLIQUE_LABEL, "")
                if clique:
                    by_clique.setdefault(clique, []).append(view)
            labels = {v.name: v.labels.get(gangs.CLIQUE_LABEL, "") for v in views}
            holding = {labels.get(n, "") for n in held}
            trials = (
                sorted(by_clique.items()) if not holding else [(c, by_clique.get(c, [])) for c in holding]
            )
        best: tuple[int, str] = (-1, "")
        first = ""
        for clique, subset in trials:
            placed, left = self._place_together(pending, subset)
            if len(held) + len(placed) >= need.min_count and not (need.all_pending and left):
                for pod, choice in placed:
                    self._bind(pod, choice)
                for pod, message in left:
                    self._mark(pod, "Unschedulable", message)
                return
            best = max(best, (len(held) + len(placed), clique))
            first = first or (left[0][1] if left else "")
        if need.one_clique:
            total = len(views)
            where = f"best: {best[0]} in {best[1]}" if best[1] else "no node has an NVLink clique"
            message = (
                f"0/{total} nodes are available: {total} {CANNOT_ALLOCATE}. computedomain "
                f'"{key.domain}": no NVLink clique takes all {need.min_count} of its pods ({where}).'
            )
            for pod in pending:
                self._mark(pod, "Unschedulable", message)
            return
        for pod in pending:  # the Workload gang: the pods that fit wait on permit, the others say why
            self._mark(
                pod, "Unschedulable", first or "waiting for minCount pods from a gang to be waiting on permit"
            )

    def _set_group_phase(self, pg: Obj, phase: str) -> None:
        if (pg.get("status") or {}).get("phase") == phase:
            return
        now = self._clock.now()

        def fn(obj: Obj) -> None:
            status = obj.setdefault("status", {})
            status["phase"] = phase
            if phase != "Pending":
                status.setdefault("scheduleStartTime", rfc3339(now))

        self._store.mutate(PODGROUPS, pg["metadata"].get("namespace", ""), pg["metadata"]["name"], fn)

    # ------------------------------------------------------------------ writes

    def _mark(self, pod: Obj, reason: str, message: str, event: bool = True) -> None:
        current = condition(pod, "PodScheduled")
        if current and current.get("reason") == reason and current.get("message") == message:
            return
        now = self._clock.now()

        def fn(obj: Obj) -> None:
            obj.setdefault("status", {}).setdefault("phase", "Pending")
            set_condition(obj, "PodScheduled", "False", now, reason, message, probe_times=True)

        ns, name = key_of(pod)
        try:
            self._store.mutate("pods", ns, name, fn)
        except NotFoundError:
            return
        if event:
            self._events.record(pod, "FailedScheduling", message, "Warning", scheduler_name(pod))

    def _bind(self, pod: Obj, choice: _Choice) -> None:
        now = self._clock.now()
        if choice.dra is not None and self.dra is not None:
            self.dra.reserve(pod, choice.node, choice.dra)

        def fn(obj: Obj) -> None:
            obj.setdefault("spec", {})["nodeName"] = choice.node
            annotations = obj["metadata"].setdefault("annotations", {})
            if choice.zone:
                annotations[ANN_NUMA_ZONE] = choice.zone
            elif choice.split:
                annotations[ANN_NUMA_SPLIT] = encode_split(choice.split)
            obj.setdefault("status", {}).setdefault("phase", "Pending")
            set_condition(obj, "PodScheduled", "True", now)

        ns, name = key_of(pod)
        try:
            self._store.mutate("pods", ns, name, fn)
        except NotFoundError:
            return
        self._events.record(
            pod,
            "Scheduled",
            f"Successfully assigned {ns}/{name} to {choice.node}",
            "Normal",
            scheduler_name(pod),
        )
