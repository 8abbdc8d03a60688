"""Helpers the workload operators' controllers share (jobsets.py, pytorch.py, ray.py): owner references,
the children of an owner, pods and Jobs created for an owner through the API server's admission, and
the managedBy rule (an object managed by another controller is left alone).
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from kubesim import admission
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.pods import qos_class
from kubesim.store import AlreadyExistsError, NotFoundError, Obj, ObjectStore

__all__ = ["children", "create_child", "create_pod", "delete_child", "owner_ref", "reconciled_by"]


def reconciled_by(value: object, own: str) -> bool:
    """Whether the built-in controller reconciles an object with this spec.managedBy."""
    return value in (None, "", own)


def owner_ref(owner: Obj) -> Obj:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"].get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def children(store: ObjectStore, key: str, owner: Obj) -> list[Obj]:
    """The objects of `key` in the owner's namespace whose controller is the owner (by uid)."""
    ns = owner["metadata"].get("namespace") or ""
    uid = owner["metadata"].get("uid", "")
    return [
        o
        for o in store.list(key, ns)[0]
        if any(
            r.get("uid") == uid and r.get("controller") for r in o["metadata"].get("ownerReferences") or ()
        )
    ]


def create_child(store: ObjectStore, key: str, owner: Obj, obj: Obj) -> Obj | None:
    """Create an object owned by `owner` (None when one of that name exists already)."""
    obj["metadata"]["namespace"] = owner["metadata"].get("namespace") or ""
    obj["metadata"]["ownerReferences"] = [owner_ref(owner)]
    try:
        return store.create(key, obj)
    except AlreadyExistsError:
        return None


def delete_child(store: ObjectStore, key: str, obj: Obj) -> None:
    with contextlib.suppress(NotFoundError):
        store.request_delete(key, obj["metadata"].get("namespace") or "", obj["metadata"]["name"], 0)


def create_pod(
    store: ObjectStore,
    events: EventRecorder,
    owner: Obj,
    name: str,
    template: Any,
    labels: dict[str, str],
    component: str,
) -> Obj | None:
    """A pod of an operator's owner from a pod template, admitted as an API create (priority, limit
    ranges, quota); a refusal is a FailedCreate event and None (tried again on a later pass)."""
    tmpl = copy.deepcopy(template or {})
    tmeta = tmpl.get("metadata") or {}
    spec = tmpl.get("spec") or {}
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {**dict(tmeta.get("labels") or {}), **labels},
            "annotations": dict(tmeta.get("annotations") or {}),
        },
        "spec": spec,
        "status": {"phase": "Pending"},
    }
    try:
        admission.admit_priority(store, pod)
        pod["metadata"]["namespace"] = owner["metadata"].get("namespace") or ""
        admission.admit_limit_ranges(store, pod)
        admission.admit_quota(store, "pods", pod)
    except admission.AdmissionError as e:
        events.record(
            owner, "FailedCreate", f'Error creating: pods "{name}" is forbidden: {e}', "Warning", component
        )
        return None
    pod["status"]["qosClass"] = qos_class(pod)
    created = create_child(store, "pods", owner, pod)
    if created is not None:
        events.record(owner, "SuccessfulCreate", f"Created pod: {name}", "Normal", component)
    return created
