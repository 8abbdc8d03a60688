"""The simulated cluster autoscaler for a cluster's cloud pools.

Owns `Autoscaler`. When a pod is Unschedulable and a fresh node of a cloud pool would fit it (same
filters as the scheduler: resources, selectors, affinity, taints, and one NUMA zone for pods of a
NUMA-aware scheduler on single-numa-node pools), a node is ordered: it appears `provisioningDelaySeconds`
of simulated time later (Event TriggeredScaleUp on the pod, in cluster-autoscaler's words). Several
pending pods share an ordered node while it has room; a pool never exceeds `max`. A pool node with no
non-terminated pods for `scaleDownIdleSeconds` is deleted while the pool stays above `min` (its NRT goes
with it through the garbage collector).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kubesim.clock import SimClock
from kubesim.controllers.accounting import Accounting, exclusive_requests
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.pods import Requests, condition, node_name, scheduler_name
from kubesim.controllers.scheduler import NodeView, fit_reasons, fits_in, node_view
from kubesim.fleet import (
    POOL_LABEL,
    CloudPoolSpec,
    ClusterSpec,
    NodeTemplate,
    create_node,
)
from kubesim.fleet import (
    node_name as pool_node_name,
)
from kubesim.quantity import parse_quantity
from kubesim.store import NotFoundError, Obj, ObjectStore, WatchEvent


@dataclass(slots=True)
class _Pool:
    spec: CloudPoolSpec
    template: NodeTemplate
    view: NodeView
    zones: list[Requests]
    policy: str


@dataclass(slots=True)
class _Order:
    due: float
    pool: str
    name: str
    room: Requests
    zones: list[Requests] = field(default_factory=list)
    pods: set[str] = field(default_factory=set)


class Autoscaler:
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
        self._cluster = cluster
        self._acct = accounting
        self._events = events
        self._pools: dict[str, _Pool] = {}
        now = clock.now()
        for spec in cluster.cloud_pools:
            template = NodeTemplate(cluster, spec, now, cloud=spec)
            node, nrt = template.render(f"{cluster.name}-{spec.name}-template", now)
            zones = []
            policy = "none"
            if nrt is not None:
                zones = [
                    {r["name"]: parse_quantity(r["allocatable"]) for r in z["resources"]}
                    for z in nrt["zones"]
                ]
                policy = spec.numa.policy if spec.numa else "none"
            self._pools[spec.name] = _Pool(spec, template, node_view(node), zones, policy)
        self._orders: list[_Order] = []
        self._covered: dict[str, str] = {}  # pod uid -> ordered node name
        self._recheck: set[str] = set()
        self._idle_since: dict[str, float] = {}
        self._next_idle_check: float | None = None
        self._serial = 0
        self.dirty = bool(self._pools)
        if self._pools:
            store.subscribe("pods", self._on_pod)
            store.subscribe("nodes", self._on_node)

    @property
    def next_due(self) -> float | None:
        dues = [o.due for o in self._orders]
        if self._next_idle_check is not None:
            dues.append(self._next_idle_check)
        return min(dues) if dues else None

    def _on_pod(self, event: WatchEvent) -> None:
        pod = event.obj
        if node_name(pod):
            self.dirty = True  # a pool node may have become busy or idle
            return
        c = condition(pod, "PodScheduled")
        if c and c.get("reason") == "Unschedulable":
            self.dirty = True

    def _on_node(self, event: WatchEvent) -> None:
        if (event.obj["metadata"].get("labels") or {}).get(POOL_LABEL) in self._pools:
            self.dirty = True

    def tick(self) -> None:
        if not self._pools:
            return
        now = self._clock.now()
        due = self.next_due
        if not self.dirty and not self._recheck and (due is None or due > now):
            return
        self.dirty = False
        for uid in self._recheck:
            self._covered.pop(uid, None)
        self._recheck = set()
        self._deliver(now)
        self._scale_up(now)
        self._scale_down(now)

    # ------------------------------------------------------------------ up

    def _pool_nodes(self) -> dict[str, list[Obj]]:
        out: dict[str, list[Obj]] = {name: [] for name in self._pools}
        for node in self._store.list("nodes")[0]:
            pool = (node["metadata"].get("labels") or {}).get(POOL_LABEL)
            if pool in out:
                out[pool].append(node)
        return out

    def _deliver(self, now: float) -> None:
        ready = [o for o in self._orders if o.due <= now]
        if not ready:
            return
        self._orders = [o for o in self._orders if o.due > now]
        for order in ready:
            pool = self._pools[order.pool]
            create_node(self._store, pool.template, order.name, now)
            self._recheck |= order.pods  # reconsidered after the scheduler has seen the new node

    def _fits_fresh(self, pool: _Pool, pod: Obj, requests: Requests) -> bool:
        if fit_reasons(pod.get("spec") or {}, requests, pool.view, {}):
            return False
        return self._zone_fit(pool, pod, requests, pool.zones) is not None

    def _zone_fit(self, pool: _Pool, pod: Obj, requests: Requests, zones: list[Requests]) -> int | None:
        profile = self._cluster.scheduler(scheduler_name(pod))
        if not zones or pool.policy != "single-numa-node" or not (profile and profile.numa_aware):
            return -1
        tracked = {r for z in zones for r in z}
        want = {r: v for r, v in exclusive_requests(pod, requests).items() if r in tracked}
        for i, z in enumerate(zones):
            if fits_in(z, want):
                return i
        return None

    def _scale_up(self, now: float) -> None:
        pods = [
            p
            for p in self._store.list("pods")[0]
            if not node_name(p)
            and (condition(p, "PodScheduled") or {}).get("reason") == "Unschedulable"
            and p["metadata"].get("uid") not in self._covered
        ]
        if not pods:
            return
        pods.sort(key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"]))
        counts = {name: len(nodes) for name, nodes in self._pool_nodes().items()}
        for pod in pods:
            requests = {**self._acct.requests(pod), "pods": 1.0}
            uid = pod["metadata"].get("uid", "")
            fitting = [p for p in self._pools.values() if self._fits_fresh(p, pod, requests)]
            if not fitting:
                continue
            order = self._join_order(fitting, pod, requests)
            if order is None:
                order = self._new_order(fitting, counts, pod, now)
                if order is None:
                    self._events.record(
                        pod,
                        "NotTriggerScaleUp",
                        f"pod didn't trigger scale-up: {len(fitting)} max node group size reached",
                        "Normal",
                        "cluster-autoscaler",
                    )
                    continue
                self._take(order, self._pools[order.pool], pod, requests)
            order.pods.add(uid)
            self._covered[uid] = order.name

    def _take(self, order: _Order, pool: _Pool, pod: Obj, requests: Requests) -> None:
        for r, v in requests.items():
            order.room[r] = order.room.get(r, 0.0) - v
        zone = self._zone_fit(pool, pod, requests, order.zones)
        if zone is not None and zone >= 0:
            for r, v in exclusive_requests(pod, requests).items():
                if r in order.zones[zone]:
                    order.zones[zone][r] -= v

    def _join_order(self, fitting: list[_Pool], pod: Obj, requests: Requests) -> _Order | None:
        names = {p.spec.name for p in fitting}
        for order in self._orders:
            if order.pool in names and fits_in(order.room, requests):
                pool = self._pools[order.pool]
                if self._zone_fit(pool, pod, requests, order.zones) is None:
                    continue
                self._take(order, pool, pod, requests)
                return order
        return None

    def _new_order(self, fitting: list[_Pool], counts: dict[str, int], pod: Obj, now: float) -> _Order | None:
        for pool in fitting:
            name = pool.spec.name
            ordered = sum(1 for o in self._orders if o.pool == name)
            current = counts.get(name, 0) + ordered
            if current >= pool.spec.max:
                continue
            existing = {n["metadata"]["name"] for nodes in self._pool_nodes().values() for n in nodes}
            existing |= {o.name for o in self._orders}
            while True:
                self._serial += 1
                node = pool_node_name(self._cluster, name, current + self._serial - 1)
                if node not in existing:
                    break
            order = _Order(
                now + pool.spec.provisioning_delay_seconds,
                name,
                node,
                dict(pool.view.allocatable),
                [dict(z) for z in pool.zones],
            )
            self._orders.append(order)
            self._events.record(
                pod,
                "TriggeredScaleUp",
                f"pod triggered scale-up: [{{{name} {current}->{current + 1} (max: {pool.spec.max})}}]",
                "Normal",
                "cluster-autoscaler",
            )
            return order
        return None

    # ------------------------------------------------------------------ down

    def _scale_down(self, now: float) -> None:
        nodes = self._pool_nodes()
        next_check: list[float] = []
        seen: set[str] = set()
        for pool_name, members in nodes.items():
            spec = self._pools[pool_name].spec
            count = len(members)
            for node in sorted(members, key=lambda n: n["metadata"]["name"], reverse=True):
                name = node["metadata"]["name"]
                seen.add(name)
                if self._acct.pods_on(name):
                    self._idle_since.pop(name, None)
                    continue
                since = self._idle_since.setdefault(name, now)
                if count <= spec.min:
                    continue
                if now - since >= spec.scale_down_idle_seconds:
                    try:
                        self._store.delete("nodes", "", name)
                        count -= 1
                    except NotFoundError:
                        pass
                    self._idle_since.pop(name, None)
                else:
                    next_check.append(since + spec.scale_down_idle_seconds)
        for gone in set(self._idle_since) - seen:
            del self._idle_since[gone]
        self._next_idle_check = min(next_check) if next_check else None
