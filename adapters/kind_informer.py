"""Follow the broker's objects of the workload kinds (JobSet, TrainJob, PyTorchJob, RayJob) in a member
by watch, as adapters.job_informer follows its batch/v1 Jobs: no GET per kind job per pass.

Owns:
    kind_resource(kind, namespace)  the watched collection of one kind: its objects labelled
                      gpufed.io/job-id in one namespace (or all), optional (a member that does not serve
                      the kind's API is ABSENT, looked at again every absent_recheck_s)
    KindCache         one kind's objects of one cluster's namespace, as the watch last said (an
                      InformerSink, thread-safe): {name: object}; on_change(cluster, job id) for every
                      object that appears, changes (a new resourceVersion) or goes: what wakes status sync
                      the way a Job's change does. `answers` once listed and while its watch is healthy,
                      or while the member serves no such API (ABSENT: nothing of the kind can be there)
adapters.job_informer.JobFollower builds one KindCache and informer per kind next to each cluster's Jobs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from adapters.kube_informer import ABSENT, PENDING, SYNCED, Resource
from adapters.kube_rest import Obj
from broker.workload.kinds.base import Kind
from broker.workload.manifest import JOB_ID_LABEL

__all__ = ["KindCache", "kind_resource"]

log = logging.getLogger(__name__)


def kind_resource(kind: Kind, namespace: str) -> Resource:
    """The broker's objects of `kind` in `namespace` ("" : every namespace)."""
    base = f"/apis/{kind.api_version}"
    path = (
        f"{base}/{kind.plural}"
        if not namespace
        else f"{base}/namespaces/{quote(namespace, safe='')}/{kind.plural}"
    )
    return Resource(kind.plural, (path,), optional=True, selector=(("labelSelector", JOB_ID_LABEL),))


def _name(obj: Obj) -> str | None:
    name = (obj.get("metadata") or {}).get("name")
    return name if isinstance(name, str) and name else None


def _job_id(obj: Obj) -> str | None:
    job_id = ((obj.get("metadata") or {}).get("labels") or {}).get(JOB_ID_LABEL)
    return job_id if isinstance(job_id, str) and job_id else None


def _version(obj: Obj) -> object:
    return (obj.get("metadata") or {}).get("resourceVersion")


class KindCache:
    """One workload kind's broker objects in one cluster's namespace (or all: namespace "")."""

    def __init__(
        self, cluster: str, namespace: str, kind: Kind, on_change: Callable[[str, str], None] | None = None
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.kind = kind
        self.on_change = on_change
        self._lock = threading.Lock()
        self._objects: dict[str, Obj] = {}
        self._state = PENDING
        self._stopping = False

    @property
    def state(self) -> str:
        return self._state

    @property
    def answers(self) -> bool:
        """Whether the cache can answer for the cluster: listed and watching, or the API not served."""
        return self._state in (SYNCED, ABSENT)

    def covers(self, namespace: str) -> bool:
        return self.namespace in ("", namespace)

    def get(self, name: str, namespace: str) -> Mapping[str, Any] | None:
        """The object as the watch last said, or None when the cache holds none of that name there."""
        with self._lock:
            obj = self._objects.get(name)
        if obj is None or str((obj.get("metadata") or {}).get("namespace") or namespace) != namespace:
            return None
        return obj

    def _changed(self, objs: list[Obj]) -> None:
        if self.on_change is None:
            return
        for obj in objs:
            if (job_id := _job_id(obj)) is not None:
                self.on_change(self.cluster, job_id)

    # ------------------------------------------------------------------ informer sink

    def replace(self, resource: str, items: list[Obj], rv: str) -> None:
        objects = {n: o for o in items if (n := _name(o)) is not None}
        with self._lock:
            before, self._objects = self._objects, objects
        moved = [o for n, o in objects.items() if (b := before.get(n)) is None or _version(b) != _version(o)]
        self._changed(moved + [o for n, o in before.items() if n not in objects])

    def apply(self, resource: str, event_type: str, obj: Obj, rv: str) -> None:
        name = _name(obj)
        if name is None:
            return
        with self._lock:
            if event_type == "DELETED":
                old = self._objects.pop(name, None)
            else:
                old = self._objects.get(name)
                self._objects[name] = obj
        if old is None or event_type == "DELETED" or _version(old) != _version(obj):
            self._changed([obj])

    def touch(self, resource: str, rv: str) -> None:
        """A bookmark: nothing changed up to rv."""

    def report(
        self, resource: str, state: str, detail: str = "", cause: str = "", *, call: bool = True
    ) -> None:
        if self._stopping:
            return
        before, self._state = self._state, state
        if before != state and state not in (SYNCED, ABSENT, PENDING):
            log.warning(
                "cluster %s: watch of %s %s (%s); their status reads fall back to GET",
                self.cluster,
                self.kind.plural,
                state,
                detail,
            )
        if state == ABSENT:
            with self._lock:
                self._objects = {}

    def stopping(self) -> None:
        self._stopping = True
        self._state = PENDING
