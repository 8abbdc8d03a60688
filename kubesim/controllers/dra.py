"""DRA in the simulated control plane: the resourceclaim controller and the scheduler's DRA plugin.

Owns `DraController`:
- claims from templates (kube-controller-manager's resourceclaim controller): a pod whose
  `spec.resourceClaims[]` names a `resourceClaimTemplateName` gets a ResourceClaim
  `<pod>-<claim>-<5 chars>` in its namespace with the template's spec, the template's labels and
  annotations, the annotation `resource.kubernetes.io/pod-claim-name: <claim>`, and a controller
  ownerReference to the pod; the pod's `status.resourceClaimStatuses[]` names it.
- the scheduler's plugin (`prefilter`, `filter`, `reserve`): the pod waits until its claims exist; a
  node is feasible when every claim is already allocated there or can be allocated there
  (kubesim/dra.Allocator; a ComputeDomain channel claim is answered by `channel_filter`, set by
  controllers/computedomain.py); binding writes `status.allocation` (results + nodeSelector) and
  `status.reservedFor` of each claim.
- release: when a pod ends (Succeeded/Failed) or is deleted, it leaves `reservedFor` of its claims; a
  claim nobody reserves any more is deallocated, and a claim generated for the pod is deleted.

The scheduler calls `begin_pass()` once per pass; devices chosen during a pass are assumed until the
claims are written (so the members of a gang never share a device).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from kubesim.clock import SimClock
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.pods import is_terminal, key_of
from kubesim.dra import (
    CLAIMS,
    CLASSES,
    POD_CLAIM_ANNOTATION,
    SLICES,
    TEMPLATES,
    AllocationError,
    Allocator,
    allocated_node,
    allocation,
)
from kubesim.store import AlreadyExistsError, NotFoundError, Obj, ObjectStore, WatchEvent

__all__ = ["DraController", "DraPlan"]

_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

DraPlan = list[tuple[Obj, list[Obj] | None]]  # (claim, results to write or None: already allocated)


def pod_claim_refs(pod: Obj) -> list[Obj]:
    return list((pod.get("spec") or {}).get("resourceClaims") or ())


class DraController:
    def __init__(self, store: ObjectStore, clock: SimClock, events: EventRecorder) -> None:
        self._store = store
        self._clock = clock
        self._events = events
        self._to_create: set[tuple[str, str]] = set()
        self._to_release: dict[tuple[str, str], str] = {}  # pod key -> uid
        self._allocator: Allocator | None = None
        self.dirty = True
        self.on_change: list[Any] = []  # callables run when claims/slices change (the scheduler's dirty)
        # answers for ComputeDomain channel claims (controllers/computedomain.py), None for other claims
        self.channel_filter: Callable[[Obj, str], list[Obj] | str | None] | None = None
        for pod in store.list("pods")[0]:
            self._note_pod(pod, deleted=False)
        store.subscribe("pods", self._on_pod)
        store.subscribe(CLAIMS, self._on_inventory)
        store.subscribe(SLICES, self._on_inventory)
        store.subscribe(CLASSES, self._on_inventory)

    # ------------------------------------------------------------------ listeners

    def _note_pod(self, pod: Obj, deleted: bool) -> None:
        if not pod_claim_refs(pod):
            return
        key = key_of(pod)
        if deleted or is_terminal(pod):
            self._to_release[key] = pod["metadata"].get("uid", "")
            self._to_create.discard(key)
            self.dirty = True
        elif not pod["metadata"].get("deletionTimestamp") and self._missing_claims(pod):
            self._to_create.add(key)
            self.dirty = True

    def _on_pod(self, event: WatchEvent) -> None:
        self._note_pod(event.obj, deleted=event.type == "DELETED")

    def _on_inventory(self, event: WatchEvent) -> None:
        self._allocator = None
        for fn in self.on_change:
            fn()

    # ------------------------------------------------------------------ claims from templates

    def _missing_claims(self, pod: Obj) -> list[Obj]:
        have = {s.get("name") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()}
        return [
            r for r in pod_claim_refs(pod) if r.get("resourceClaimTemplateName") and r.get("name") not in have
        ]

    def _create_claims(self, ns: str, name: str) -> None:
        pod = self._store.find("pods", ns, name)
        if pod is None or is_terminal(pod) or pod["metadata"].get("deletionTimestamp"):
            return
        made: list[Obj] = []
        for ref in self._missing_claims(pod):
            template = self._store.find(TEMPLATES, ns, ref["resourceClaimTemplateName"])
            if template is None:
                self._events.record(
                    pod,
                    "FailedResourceClaimCreation",
                    f'PodResourceClaim {ref["name"]}: resource claim template "{ref["resourceClaimTemplateName"]}": '
                    f'resourceclaimtemplate.resource.k8s.io "{ref["resourceClaimTemplateName"]}" not found',
                    "Warning",
                    "resource_claim",
                )
                continue
            tmeta = template.get("metadata") or {}
            claim_name = f"{name}-{ref['name']}-" + "".join(secrets.choice(_ALPHABET) for _ in range(5))
            claim: Obj = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {
                    "name": claim_name[:253],
                    "namespace": ns,
                    "labels": dict(tmeta.get("labels") or {}),
                    "annotations": {**(tmeta.get("annotations") or {}), POD_CLAIM_ANNOTATION: ref["name"]},
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Pod",
                            "name": name,
                            "uid": pod["metadata"].get("uid", ""),
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": (template.get("spec") or {}).get("spec") or {},
                "status": {},
            }
            try:
                self._store.create(CLAIMS, claim)
            except AlreadyExistsError:
                continue
            made.append({"name": ref["name"], "resourceClaimName": claim_name[:253]})
        if not made:
            return

        def fn(obj: Obj) -> None:
            statuses = obj.setdefault("status", {}).setdefault("resourceClaimStatuses", [])
            statuses.extend(made)

        try:
            self._store.mutate("pods", ns, name, fn)
        except NotFoundError:
            return

    # ------------------------------------------------------------------ release

    def _release(self, ns: str, name: str, uid: str) -> None:
        for claim in list(self._store.list(CLAIMS, ns)[0]):
            status = claim.get("status") or {}
            reserved = status.get("reservedFor") or []
            owned = any(
                r.get("kind") == "Pod" and r.get("uid") == uid and r.get("controller")
                for r in claim["metadata"].get("ownerReferences") or ()
            )
            mine = [r for r in reserved if r.get("uid") == uid or (not uid and r.get("name") == name)]
            if not mine and not owned:
                continue
            cname = claim["metadata"]["name"]
            rest = [r for r in reserved if r not in mine]
            try:
                if owned and not rest:
                    self._store.delete(CLAIMS, ns, cname)
                    continue

                def fn(obj: Obj, rest: list[Obj] = rest) -> None:
                    st = obj.setdefault("status", {})
                    if rest:
                        st["reservedFor"] = rest
                    else:
                        st.pop("reservedFor", None)
                        st.pop("allocation", None)

                self._store.mutate(CLAIMS, ns, cname, fn)
            except NotFoundError:
                continue

    def tick(self) -> None:
        if not self.dirty:
            return
        self.dirty = False
        release, self._to_release = self._to_release, {}
        for (ns, name), uid in release.items():
            self._release(ns, name, uid)
        create, self._to_create = self._to_create, set()
        for ns, name in sorted(create):
            self._create_claims(ns, name)

    # ------------------------------------------------------------------ scheduler plugin

    def begin_pass(self) -> None:
        """Forget devices assumed in the previous pass that were never written."""
        self._allocator = None

    def _alloc(self) -> Allocator:
        if self._allocator is None:
            self._allocator = Allocator(
                self._store.list(SLICES)[0], self._store.list(CLASSES)[0], self._store.list(CLAIMS)[0]
            )
        return self._allocator

    @staticmethod
    def uses_claims(pod: Obj) -> bool:
        return bool(pod_claim_refs(pod))

    def prefilter(self, pod: Obj) -> tuple[list[Obj] | None, str]:
        """The pod's claims, or None and why the pod must wait."""
        ns = pod["metadata"].get("namespace", "")
        statuses = {
            s.get("name"): s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
        }
        claims = []
        for ref in pod_claim_refs(pod):
            cname = ref.get("resourceClaimName") or statuses.get(ref.get("name"))
            claim = self._store.find(CLAIMS, ns, cname) if cname else None
            if claim is None:
                what = cname or f"for pod claim {ref.get('name')}"
                return None, f'waiting for resourceclaim "{what}" to be created'
            if claim["metadata"].get("deletionTimestamp"):
                return None, f'resourceclaim "{cname}" is being deleted'
            claims.append(claim)
        return claims, ""

    def filter(self, claims: list[Obj], node: str) -> DraPlan | str:
        pending: list[Obj] = []
        by_uid: dict[str, list[Obj]] = {}
        for claim in claims:
            where = allocated_node(claim)
            if where is not None and where not in ("", node):
                return "resourceclaim not available on the node"
            if where is not None:
                continue
            special = self.channel_filter(claim, node) if self.channel_filter is not None else None
            if isinstance(special, str):
                return special
            if special is not None:  # a ComputeDomain channel (controllers/computedomain.py)
                by_uid[claim["metadata"]["uid"]] = special
            else:
                pending.append(claim)
        try:
            results = self._alloc().allocate(node, pending)
        except AllocationError as exc:
            return str(exc)
        by_uid.update((c["metadata"]["uid"], r) for c, r in zip(pending, results, strict=True))
        return [(c, by_uid.get(c["metadata"]["uid"])) for c in claims]

    def assume(self, plan: DraPlan) -> None:
        alloc = self._alloc()
        for _claim, results in plan:
            for r in results or ():
                key = (r["driver"], r["pool"], r["device"])
                device = next(
                    (
                        d
                        for devs in alloc._inv.devices.values()
                        for d in devs
                        if (d.driver, d.pool, d.name) == key
                    ),
                    None,
                )
                alloc._take(device, key)

    def reserve(self, pod: Obj, node: str, plan: DraPlan) -> None:
        """Write each claim's allocation (when new) and add the pod to its reservedFor."""
        consumer = {
            "resource": "pods",
            "name": pod["metadata"]["name"],
            "uid": pod["metadata"].get("uid", ""),
        }
        ns = pod["metadata"].get("namespace", "")
        for claim, results in plan:

            def fn(obj: Obj, results: list[Obj] | None = results) -> None:
                st = obj.setdefault("status", {})
                if results is not None:
                    st["allocation"] = allocation(node, results)
                reserved = st.setdefault("reservedFor", [])
                if consumer not in reserved:
                    reserved.append(consumer)

            try:
                self._store.mutate(CLAIMS, ns, claim["metadata"]["name"], fn)
            except NotFoundError:
                continue
