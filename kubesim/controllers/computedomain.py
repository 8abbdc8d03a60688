"""The NVIDIA DRA driver's ComputeDomain controller and channel plugin, as kubesim runs them.

Owns `ComputeDomainController`, the parts of the driver (kubernetes-sigs/dra-driver-nvidia-gpu:
compute-domain-controller and compute-domain-kubelet-plugin) a broker can observe:

- for every `resource.nvidia.com/v1beta1` ComputeDomain, the workload channel ResourceClaimTemplate
  named by `spec.channel.resourceClaimTemplate.name`, in the domain's namespace, labelled
  `resource.nvidia.com/computeDomain: <domain uid>` and `resource.nvidia.com/computeDomainTarget:
  Workload`, with one request `channel` of DeviceClass `compute-domain-default-channel.nvidia.com` and
  the opaque `ComputeDomainChannelConfig {domainID: <uid>}` for driver `compute-domain.nvidia.com`;
  a template that already exists under that name is left alone;
- deleting a domain deletes the templates labelled with its uid (the driver's cleanup);
- `status`: `status: NotReady` until `spec.numNodes` nodes (at least 1) hold an allocated channel of
  the domain, then `Ready`; `nodes[]` = {name, ipAddress (the node's InternalIP), cliqueID (its
  `nvidia.com/gpu.clique` label), index (the node's place in its clique, by name), status: Ready};
- `channel_filter(claim, node)`, the scheduler's DRA filter for channel claims: the claim's device is
  `channel-0` of the node's pool (driver compute-domain.nvidia.com), only on a node with an NVLink
  clique label and only in the clique where the domain's other channels are allocated. The scheduler
  (gangs.py) places a domain's pods together inside one clique, so a domain never spans two.

The channel device classes are not installed as objects (kubesim's DRA allocator never sees channel
claims: this filter answers for them). No IMEX daemons run: a node counts as Ready once its channel
is allocated.
"""

from __future__ import annotations

import contextlib

from kubesim.clock import SimClock
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.gangs import CLIQUE_LABEL, COMPUTE_DOMAINS
from kubesim.dra import CLAIMS, TEMPLATES, allocated_node
from kubesim.store import AlreadyExistsError, NotFoundError, Obj, ObjectStore, WatchEvent

__all__ = [
    "CHANNEL_CLASS",
    "DOMAIN_DRIVER",
    "DOMAIN_LABEL",
    "ComputeDomainController",
    "channel_template",
    "is_channel_claim",
]

DOMAIN_DRIVER = "compute-domain.nvidia.com"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
DOMAIN_LABEL = "resource.nvidia.com/computeDomain"
TARGET_LABEL = "resource.nvidia.com/computeDomainTarget"
CANNOT_ALLOCATE = "cannot allocate all claims"


def channel_template(cd: Obj) -> Obj | None:
    """The workload channel ResourceClaimTemplate the driver makes for a domain (None: no name set)."""
    meta = cd["metadata"]
    name = (((cd.get("spec") or {}).get("channel") or {}).get("resourceClaimTemplate") or {}).get("name")
    if not name:
        return None
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": name,
            "namespace": meta.get("namespace", ""),
            "labels": {DOMAIN_LABEL: meta.get("uid", ""), TARGET_LABEL: "Workload"},
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "channel",
                            "exactly": {
                                "deviceClassName": CHANNEL_CLASS,
                                "allocationMode": "ExactCount",
                                "count": 1,
                            },
                        }
                    ],
                    "config": [
                        {
                            "requests": ["channel"],
                            "opaque": {
                                "driver": DOMAIN_DRIVER,
                                "parameters": {
                                    "apiVersion": "resource.nvidia.com/v1beta1",
                                    "kind": "ComputeDomainChannelConfig",
                                    "domainID": meta.get("uid", ""),
                                },
                            },
                        }
                    ],
                }
            }
        },
    }


def is_channel_claim(claim: Obj) -> bool:
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ()
    return bool(requests) and all(
        ((r.get("exactly") or {}).get("deviceClassName") == CHANNEL_CLASS) for r in requests
    )


class ComputeDomainController:
    def __init__(self, store: ObjectStore, clock: SimClock, events: EventRecorder) -> None:
        self._store = store
        self._clock = clock
        self._events = events
        self.dirty = bool(store.count(COMPUTE_DOMAINS))
        self._gone: list[tuple[str, str]] = []  # (namespace, uid) of deleted domains
        store.subscribe(COMPUTE_DOMAINS, self._on_domain)
        store.subscribe(CLAIMS, self._on_claim)

    def _on_domain(self, event: WatchEvent) -> None:
        if event.type == "DELETED":
            meta = event.obj["metadata"]
            self._gone.append((meta.get("namespace", ""), meta.get("uid", "")))
        self.dirty = True

    def _on_claim(self, event: WatchEvent) -> None:
        if DOMAIN_LABEL in (event.obj["metadata"].get("labels") or {}):
            self.dirty = True

    # ------------------------------------------------------------------ the pass

    def tick(self) -> None:
        if not self.dirty:
            return
        self.dirty = False
        gone, self._gone = self._gone, []
        for ns, uid in gone:
            for t in self._store.list(TEMPLATES, ns)[0]:
                if (t["metadata"].get("labels") or {}).get(DOMAIN_LABEL) == uid:
                    with contextlib.suppress(NotFoundError):
                        self._store.delete(TEMPLATES, ns, t["metadata"]["name"])
        for cd in self._store.list(COMPUTE_DOMAINS)[0]:
            if cd["metadata"].get("deletionTimestamp"):
                continue
            self._ensure_template(cd)
            self._sync_status(cd)

    def _ensure_template(self, cd: Obj) -> None:
        template = channel_template(cd)
        if template is None:
            return
        meta = template["metadata"]
        if self._store.find(TEMPLATES, meta["namespace"], meta["name"]) is not None:
            return
        with contextlib.suppress(AlreadyExistsError):
            self._store.create(TEMPLATES, template)

    def _channels(self, ns: str, uid: str) -> list[str]:
        """Nodes holding an allocated channel of the domain, sorted."""
        nodes = set()
        for claim in self._store.list(CLAIMS, ns)[0]:
            if (claim["metadata"].get("labels") or {}).get(DOMAIN_LABEL) != uid:
                continue
            node = allocated_node(claim)
            if node:
                nodes.add(node)
        return sorted(nodes)

    def _sync_status(self, cd: Obj) -> None:
        meta = cd["metadata"]
        ns = meta.get("namespace", "")
        by_clique: dict[str, int] = {}
        nodes: list[Obj] = []
        for name in self._channels(ns, meta.get("uid", "")):
            node = self._store.find("nodes", "", name) or {"metadata": {}, "status": {}}
            clique = (node["metadata"].get("labels") or {}).get(CLIQUE_LABEL, "")
            ip = next(
                (
                    a.get("address", "")
                    for a in (node.get("status") or {}).get("addresses") or ()
                    if a.get("type") == "InternalIP"
                ),
                "",
            )
            index = by_clique.get(clique, 0)
            by_clique[clique] = index + 1
            nodes.append(
                {"name": name, "ipAddress": ip, "cliqueID": clique, "index": index, "status": "Ready"}
            )
        want = max(int((cd.get("spec") or {}).get("numNodes") or 1), 1)
        status: Obj = {"status": "Ready" if len(nodes) >= want else "NotReady"}
        if nodes:
            status["nodes"] = nodes
        if cd.get("status") == status:
            return

        def fn(obj: Obj) -> None:
            obj["status"] = status

        with contextlib.suppress(NotFoundError):
            self._store.mutate(COMPUTE_DOMAINS, ns, meta["name"], fn)

    # ------------------------------------------------------------------ the scheduler's DRA filter

    def channel_filter(self, claim: Obj, node: str) -> list[Obj] | str | None:
        """The allocation results of a channel claim on `node`, why it cannot go there, or None when the
        claim is no channel claim (the generic allocator answers)."""
        if not is_channel_claim(claim):
            return None
        view = self._store.find("nodes", "", node)
        clique = ((view or {}).get("metadata", {}).get("labels") or {}).get(CLIQUE_LABEL, "")
        if not clique:
            return CANNOT_ALLOCATE
        uid = (claim["metadata"].get("labels") or {}).get(DOMAIN_LABEL, "")
        ns = claim["metadata"].get("namespace", "")
        for other in self._channels(ns, uid) if uid else ():
            peer = self._store.find("nodes", "", other)
            if ((peer or {}).get("metadata", {}).get("labels") or {}).get(CLIQUE_LABEL, "") != clique:
                return CANNOT_ALLOCATE
        requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ()
        return [
            {
                "request": r.get("name", "channel"),
                "driver": DOMAIN_DRIVER,
                "pool": node,
                "device": "channel-0",
            }
            for r in requests
        ]
