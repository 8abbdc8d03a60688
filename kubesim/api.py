"""The Kubernetes API of one simulated cluster, over an ObjectStore: discovery, CRUD, patch, watch, Status.

Routing and discovery come from kubesim.resources. Objects are served as JSON; `kubectl get` gets
meta.k8s.io/v1 Tables (kubesim.tables). Kueue kinds are stored in their v1beta2 shape and converted on
the way in and out of v1beta1. Watchers are pushed events by a store listener (one per resource with
watchers), filtered by namespace and selectors, with BOOKMARKs, timeoutSeconds and 410 Expired.
Faults (kubesim.faults) are applied here per request, except `down`, which closes the listener.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import copy
import logging
import random
import secrets
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import orjson
import yaml

from kubesim import admission, disruption, podlogs, protobuf, rbac, tables
from kubesim import apply as ssa
from kubesim.clock import SimClock
from kubesim.faults import FaultState
from kubesim.gpuhealth import ClusterGpus
from kubesim.http import Connection, Request, Response
from kubesim.metrics import CONTENT_TYPE_LATEST, RequestMetrics, resource_label
from kubesim.patch import PatchError, json_patch, merge_patch, strategic_merge
from kubesim.podproxy import proxy_to_pod
from kubesim.prom_api import PrometheusApi
from kubesim.rbac import ADMIN, Identity
from kubesim.resources import CREATE_ONLY, RESOURCES, ResourceType, groups, lookup
from kubesim.selectors import SelectorError, matcher, parse_field_selector, parse_label_selector
from kubesim.store import GoneError, InvalidError, NotFoundError, ObjectStore, StoreError, WatchEvent, rfc3339
from kubesim.validation import (
    apply_create_defaults,
    generate_name,
    normalize_quantities,
    validate_create,
    validate_update,
)

Obj = dict[str, Any]
log = logging.getLogger("kubesim.api")

KUBE_VERSION = {
    "major": "1",
    "minor": "37",
    "gitVersion": "v1.37.0-kubesim",
    "gitCommit": "kubesim",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.25",
    "compiler": "gc",
    "platform": "linux/amd64",
    "emulationMajor": "1",
    "emulationMinor": "37",
    "minCompatibilityMajor": "1",
    "minCompatibilityMinor": "36",
}
VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SUB_VERBS = {
    "status": ["get", "patch", "update"],
    "binding": ["create"],
    "eviction": ["create"],
    "log": ["get"],
    "token": ["create"],
}
# Subresources whose kind is not the parent's: (group, version, kind).
SUB_KINDS = {
    "binding": ("", "v1", "Binding"),
    "eviction": ("policy", "v1", "Eviction"),
    "token": ("authentication.k8s.io", "v1", "TokenRequest"),
}
DISCOVERY_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
# Custom resources (served from CRDs on a real cluster) accept no strategic merge patch.
CRD_GROUPS = {"kueue.x-k8s.io", "topology.node.k8s.io", "scheduling.x-k8s.io", "multicluster.x-k8s.io"}
JOB_DELETE_WARNING = (
    '299 - "child pods are preserved by default when jobs are deleted; set '
    "propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress "
    'this warning"'
)
WATCH_QUEUE_LIMIT = 100_000
CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - objects "
    "that were created, modified, or deleted between the time the first chunk was returned and now may show "
    "up in the list."
)
LOG_FOLLOW_POLL = 0.1  # real seconds between looks at a followed container's log
_JSON = "application/json"


class ApiError(Exception):
    """An error answered as a Status body."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: Obj | None = None,
        headers: list[tuple[str, str]] | None = None,
        list_meta: Obj | None = None,
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details, self.headers = details, headers or []
        self.list_meta = list_meta

    def status(self) -> Obj:
        body = status_obj(self.code, self.reason, self.message, self.details)
        if self.list_meta:
            body["metadata"] = self.list_meta
        return body

    def response(self) -> Response:
        return Response(self.code, orjson.dumps(self.status()), headers=self.headers)


def status_obj(code: int, reason: str, message: str, details: Obj | None = None) -> Obj:
    body: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def _cause_reason(message: str) -> str:
    for prefix, reason in (
        ("Required value", "FieldValueRequired"),
        ("Duplicate value", "FieldValueDuplicate"),
        ("Unsupported value", "FieldValueNotSupported"),
        ("Forbidden", "FieldValueForbidden"),
        ("Too long", "FieldValueTooLong"),
    ):
        if message.startswith(prefix):
            return reason
    return "FieldValueInvalid"


def _not_found(msg: str = "the server could not find the requested resource") -> ApiError:
    return ApiError(404, "NotFound", msg, {})


def _bad_request(msg: str) -> ApiError:
    return ApiError(400, "BadRequest", msg)


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _running_on(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def _verb(method: str, name: str | None, watch: bool) -> str:
    """The Kubernetes verb of a resource request (get, list, watch, create, update, patch, delete,
    deletecollection)."""
    if method == "GET":
        return "watch" if watch else ("list" if name is None else "get")
    if method == "DELETE":
        return "deletecollection" if name is None else "delete"
    return _VERBS.get(method, method.lower())


def _sort_key(obj: Obj) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace") or "", meta.get("name") or ""


# ------------------------------------------------------------------------------------------ conversion


def to_version(rt: ResourceType, obj: Obj, version: str) -> Obj:
    """The stored (preferred-version) object as served at `version`, with apiVersion and kind set."""
    api_version = rt.api_version(version)
    if version != rt.versions[0]:
        obj = _kueue_to_v1beta1(rt, obj)
    if obj.get("apiVersion") == api_version and obj.get("kind") == rt.kind:
        return obj
    out = {"apiVersion": api_version, "kind": rt.kind}
    out.update((k, v) for k, v in obj.items() if k not in ("apiVersion", "kind"))
    return out


def from_version(rt: ResourceType, obj: Obj, version: str) -> Obj:
    """An object sent at `version` in the stored shape (apiVersion set to the preferred version)."""
    if version != rt.versions[0]:
        obj = _kueue_from_v1beta1(rt, obj)
    obj["apiVersion"], obj["kind"] = rt.api_version(), rt.kind
    return obj


def _kueue_to_v1beta1(rt: ResourceType, obj: Obj) -> Obj:
    if rt.kind == "ClusterQueue":
        spec = dict(obj.get("spec") or {})
        if "cohortName" in spec:
            spec["cohort"] = spec.pop("cohortName")
        strategy = spec.pop("admissionChecksStrategy", None)
        if strategy and strategy.get("admissionChecks"):
            spec["admissionChecks"] = [c.get("name") for c in strategy["admissionChecks"]]
        return {**obj, "spec": spec}
    if rt.kind == "LocalQueue" and "flavorsUsage" in (obj.get("status") or {}):
        status = dict(obj["status"])
        status["flavorUsage"] = status.pop("flavorsUsage")
        return {**obj, "status": status}
    return obj


def _kueue_from_v1beta1(rt: ResourceType, obj: Obj) -> Obj:
    if rt.kind == "ClusterQueue" and isinstance(obj.get("spec"), dict):
        spec = obj["spec"]
        if "cohort" in spec:
            spec["cohortName"] = spec.pop("cohort")
        if "admissionChecks" in spec:
            spec["admissionChecksStrategy"] = {
                "admissionChecks": [{"name": n} for n in spec.pop("admissionChecks")]
            }
    elif rt.kind == "LocalQueue" and isinstance(obj.get("status"), dict) and "flavorUsage" in obj["status"]:
        obj["status"]["flavorsUsage"] = obj["status"].pop("flavorUsage")
    return obj


# ------------------------------------------------------------------------------------------ discovery


def _resource_entries(version: str, group: str) -> list[ResourceType]:
    return [r for r in RESOURCES if r.group == group and version in r.versions]


def api_resource_list(group: str, version: str) -> Obj:
    resources: list[Obj] = []
    for r in _resource_entries(version, group):
        entry: Obj = {
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": ["create"] if r.key in CREATE_ONLY else VERBS,
        }
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.categories:
            entry["categories"] = list(r.categories)
        resources.append(entry)
        for sub in r.subresources:
            sub_entry: Obj = {
                "name": f"{r.plural}/{sub}",
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": SUB_VERBS.get(sub, ["get"]),
            }
            if sub in SUB_KINDS:
                sub_group, sub_version, sub_entry["kind"] = SUB_KINDS[sub]
                if sub_group != group:
                    sub_entry["group"], sub_entry["version"] = sub_group, sub_version
            resources.append(sub_entry)
    gv = version if not group else f"{group}/{version}"
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}


def api_group(name: str, versions: tuple[str, ...]) -> Obj:
    vs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": vs, "preferredVersion": vs[0]}


def discovery_v2(core: bool, hidden: frozenset[str] = frozenset()) -> Obj:
    """Aggregated discovery (apidiscovery.k8s.io/v2) for /api or /apis (without the `hidden` groups)."""
    items = []
    group_versions = {"": ("v1",)} if core else {g: v for g, v in groups().items() if g not in hidden}
    for group, versions in group_versions.items():
        gv_items = []
        for version in versions:
            resources = []
            for r in _resource_entries(version, group):
                rk = {"group": group, "version": version, "kind": r.kind}
                entry: Obj = {
                    "resource": r.plural,
                    "responseKind": rk,
                    "scope": "Namespaced" if r.namespaced else "Cluster",
                    "singularResource": r.singular,
                    "verbs": ["create"] if r.key in CREATE_ONLY else VERBS,
                }
                if r.short_names:
                    entry["shortNames"] = list(r.short_names)
                if r.categories:
                    entry["categories"] = list(r.categories)
                if r.subresources:
                    entry["subresources"] = [
                        {
                            "subresource": s,
                            "verbs": SUB_VERBS.get(s, ["get"]),
                            "responseKind": dict(
                                zip(
                                    ("group", "version", "kind"),
                                    SUB_KINDS.get(s, (group, version, r.kind)),
                                    strict=True,
                                )
                            ),
                        }
                        for s in r.subresources
                    ]
                resources.append(entry)
            gv_items.append({"version": version, "resources": resources, "freshness": "Current"})
        items.append({"metadata": {"name": group, "creationTimestamp": None}, "versions": gv_items})
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    }


def openapi_v3_root(hidden: frozenset[str] = frozenset()) -> Obj:
    """/openapi/v3: one document per group-version (kubectl reads it to see that the server validates fields)."""
    gvs = ["api/v1"] + [f"apis/{g}/{v}" for g, vs in groups().items() if g not in hidden for v in vs]
    return {
        "paths": {
            gv: {"serverRelativeURL": f"/openapi/v3/{gv}?hash=kubesim-{KUBE_VERSION['gitVersion']}"}
            for gv in gvs
        }
    }


def openapi_v3_doc(group: str, version: str) -> Obj:
    """A minimal OpenAPI v3 document for a group-version: its paths, with PATCH operations naming their kind
    and the fieldValidation parameter (what kubectl's query-parameter verifier looks for); no schemas."""
    prefix = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    params = [
        {"name": p, "in": "query", "schema": {"type": "string"}}
        for p in ("dryRun", "fieldManager", "fieldValidation", "force", "pretty")
    ]
    paths: Obj = {}
    for r in _resource_entries(version, group):
        gvk = {"group": group, "version": version, "kind": r.kind}
        base = f"{prefix}/namespaces/{{namespace}}/{r.plural}" if r.namespaced else f"{prefix}/{r.plural}"
        op = {
            "x-kubernetes-group-version-kind": gvk,
            "parameters": params,
            "responses": {"200": {"description": "OK"}},
        }
        paths[base] = {
            "get": {**op, "x-kubernetes-action": "list"},
            "post": {**op, "x-kubernetes-action": "post"},
        }
        paths[f"{base}/{{name}}"] = {
            verb: {**op, "x-kubernetes-action": action}
            for verb, action in (("get", "get"), ("put", "put"), ("patch", "patch"), ("delete", "delete"))
        }
        for sub in r.subresources:
            if sub == "status":
                paths[f"{base}/{{name}}/status"] = {
                    verb: {**op, "x-kubernetes-action": verb} for verb in ("get", "put", "patch")
                }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (kubesim)", "version": KUBE_VERSION["gitVersion"]},
        "paths": paths,
        "components": {"schemas": {}},
    }


# ------------------------------------------------------------------------------------------ watch


class Watch:
    """One open watch stream: events filtered for it, waiting to be written."""

    __slots__ = (
        "abort",
        "closed",
        "cut",
        "draining",
        "headers_sent",
        "include",
        "match",
        "ns",
        "out",
        "rt",
        "table",
        "version",
        "wake",
    )

    def __init__(
        self,
        rt: ResourceType,
        version: str,
        ns: str | None,
        match: Callable[[Obj], bool] | None,
        table: bool,
        include: str,
    ) -> None:
        self.rt, self.version, self.ns, self.match = rt, version, ns, match
        self.table, self.include = table, include
        self.out: deque[tuple[str, Obj] | bytes] = deque()
        self.wake = asyncio.Event()
        self.closed = False
        self.cut = False
        self.headers_sent = False
        self.draining = False  # the writer waits for the client to read
        self.abort: Callable[[], None] | None = None  # drops the connection once the stream is open

    def offer(self, etype: str, obj: Obj, prev: Obj | None = None) -> None:
        """Queue an event if it concerns this watcher. With a selector, as the real watch cache does: an
        object that starts matching is ADDED, one that stops matching is DELETED carrying its previous
        (last matching) state stamped with this event's resourceVersion, and one matching neither before
        nor after is skipped."""
        if self.ns is not None and obj["metadata"].get("namespace", "") != self.ns:
            return
        if self.match is not None:
            now_ok = etype != "DELETED" and self.match(obj)
            was_ok = prev is not None and self.match(prev)
            if now_ok:
                etype = "MODIFIED" if was_ok else "ADDED"
            elif was_ok and prev is not None:
                etype = "DELETED"
                obj = {
                    **prev,
                    "metadata": {**prev["metadata"], "resourceVersion": obj["metadata"]["resourceVersion"]},
                }
            else:
                return
        self.out.append((etype, obj))
        self.wake.set()
        if len(self.out) > WATCH_QUEUE_LIMIT:  # a client that does not read: end its watch, as servers do
            self.stop(cut=True)

    def stop(self, cut: bool = False) -> None:
        """End the stream; with cut=True the connection is dropped after what was queued is written, or at
        once when the writer is blocked on a client that does not read (else it would wait for ever)."""
        self.closed = True
        self.cut = self.cut or cut
        self.wake.set()
        if cut and self.draining and self.abort is not None:
            self.abort()


# ------------------------------------------------------------------------------------------ the API


class ClusterApi:
    """Serves one cluster's store; `handle` is the HttpServer handler."""

    def __init__(
        self,
        name: str,
        store: ObjectStore,
        clock: SimClock,
        token: str,
        *,
        bookmark_interval: float = 5.0,
        rng: random.Random | None = None,
    ) -> None:
        self.name, self.store, self.clock, self.token = name, store, clock, token
        self.faults = FaultState()
        self.bookmark_interval = bookmark_interval
        self._rng = rng or random.Random()
        self._watches: dict[str, set[Watch]] = {}
        self._unsubscribe: dict[str, Callable[[], None]] = {}
        self._hung: set[Connection] = set()
        # Requests served per (verb, resource), as the API server's apiserver_request_total counts them;
        # read from any thread with request_counts(). Requests refused before routing (auth, faults) are
        # not counted.
        self.requests: dict[tuple[str, str], int] = {}
        self.metrics = RequestMetrics()  # the same requests with their status, on /metrics
        self.users: dict[str, Identity] = {}  # bearer token -> the user it authenticates (besides admin)
        self.hidden_groups: frozenset[str] = frozenset()  # operators not installed (kubesim/operators.py)
        self.gpus: ClusterGpus | None = None  # GPU health (kubesim/gpuhealth.py), set by the simulation
        self.prometheus: PrometheusApi | None = None  # /prometheus (kubesim/prom_api.py)
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None

    def _groups(self) -> dict[str, tuple[str, ...]]:
        """The API groups this cluster serves (the workload operators' only where installed)."""
        return {g: v for g, v in groups().items() if g not in self.hidden_groups}

    # ------------------------------------------------------------------ faults

    def cut_watches(self) -> int:
        """Close every open watch stream of this cluster; returns how many. Safe from any thread."""
        loop = self._loop
        if loop is not None and not _running_on(loop):

            async def on_loop() -> int:
                return self.cut_watches()

            return asyncio.run_coroutine_threadsafe(on_loop(), loop).result(30)
        count = 0
        for watchers in self._watches.values():
            for w in list(watchers):
                w.stop(cut=True)
                count += 1
        return count

    def release_hung(self) -> None:
        """Drop the connections held by the hang fault (called when it is cleared)."""
        for conn in list(self._hung):
            conn.abort()
        self._hung.clear()

    def request_counts(self) -> dict[tuple[str, str], int]:
        """A copy of the request counters: {(verb, resource): count}; resource is the store key with any
        subresource after a slash ("jobs.batch", "pods/status")."""
        return dict(self.requests)  # one C-level copy under the GIL: safe against the loop's writes

    def _count(self, verb: str, rt: ResourceType, sub: str | None) -> None:
        key = (verb, rt.key if sub is None else f"{rt.key}/{sub}")
        self.requests[key] = self.requests.get(key, 0) + 1
        self.metrics.mark(verb, resource_label(rt.key, sub))

    def add_user(self, user: str, groups: tuple[str, ...] | list[str] = (), token: str | None = None) -> str:
        """Bind a bearer token to a user (and groups); RBAC decides what it may do. Returns the token (a new
        random one unless given). The admin token (`self.token`) stays all-powerful."""
        if not user or user == rbac.ADMIN_USER:
            raise ValueError(f"user name must be set and not {rbac.ADMIN_USER!r}")
        token = token or secrets.token_urlsafe(32)
        if token == self.token:
            raise ValueError("a user token must differ from the admin token")
        self.users[token] = Identity(user, tuple(groups))
        return token

    @property
    def watch_count(self) -> int:
        return sum(len(w) for w in self._watches.values())

    # ------------------------------------------------------------------ entry point

    async def handle(self, req: Request, conn: Connection) -> Response | None:
        token = RequestMetrics.begin()
        code = 500
        try:
            response = await self._handle(req, conn)
            code = response.status if response is not None else 200
            return response
        finally:
            self.metrics.end(token, code)

    async def _handle(self, req: Request, conn: Connection) -> Response | None:
        faults = self.faults
        if faults.hang:
            self._hung.add(conn)
            await conn.closed.wait()
            self._hung.discard(conn)
            return None
        if faults.latency:
            await asyncio.sleep(faults.latency)
        try:
            ident = self._authenticate(req)
            if ident is not None and ident is not ADMIN:
                self._check_rbac(req, ident)
            code = faults.pick_error(self._rng)
            if code is not None:
                raise self._fault_error(code)
            return await self._route(req, conn, ident or ADMIN)
        except ApiError as e:
            return e.response()
        except StoreError as e:
            return self._store_error(e).response()
        except SelectorError as e:
            return _bad_request(str(e)).response()
        except PatchError as e:
            reason = "Invalid" if e.code == 422 else "BadRequest"
            return ApiError(e.code, reason, str(e)).response()
        except (ConnectionError, asyncio.CancelledError):
            raise
        except Exception as e:
            log.exception("cluster %s: %s %s failed", self.name, req.method, req.target)
            return ApiError(
                500, "InternalError", f"Internal error occurred: {type(e).__name__}: {e}"
            ).response()

    def _authenticate(self, req: Request) -> Identity | None:
        """The request's identity from its bearer token (None: anonymous public info), impersonation
        applied; 401 for a missing or unknown token."""
        header = req.headers.get("authorization", "")
        path = req.path.rstrip("/")
        if (
            not header
            and path in ("/version", "/healthz", "/livez", "/readyz")
            and not self.faults.expired_token
        ):
            return None  # anonymous access to public info, as system:public-info-viewer allows
        token = header[7:].strip() if header.startswith("Bearer ") else ""
        ident = ADMIN if token and token == self.token else self.users.get(token)
        if ident is None or self.faults.expired_token:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        if self.faults.forbidden:
            raise ApiError(
                403,
                "Forbidden",
                f'forbidden: User "system:serviceaccount:gpufed:broker" cannot '
                f'{req.method.lower()} path "{req.path}"',
                {},
            )
        as_user = req.headers.get("impersonate-user")
        if as_user:
            attrs = rbac.Attributes("impersonate", True, "", "users", name=as_user)
            if not rbac.authorize(self.store, ident, attrs).allowed:
                msg, details = rbac.forbidden_message(ident, attrs)
                raise ApiError(403, "Forbidden", msg, details)
            groups = [g.strip() for g in req.headers.get("impersonate-group", "").split(",") if g.strip()]
            return Identity(as_user, tuple(groups))
        return ident

    def _check_rbac(self, req: Request, ident: Identity) -> None:
        attrs = rbac.attributes_of(req.method, req.path, req.param("watch") in ("true", "1"))
        if not rbac.authorize(self.store, ident, attrs).allowed:
            msg, details = rbac.forbidden_message(ident, attrs)
            raise ApiError(403, "Forbidden", msg, details)

    def _fault_error(self, code: int) -> ApiError:
        retry = [("Retry-After", str(self.faults.retry_after))]
        if code == 429:
            return ApiError(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
                {"retryAfterSeconds": self.faults.retry_after},
                retry,
            )
        if code == 503:
            return ApiError(
                503,
                "ServiceUnavailable",
                "The server is currently unable to handle the request",
                {"retryAfterSeconds": self.faults.retry_after},
                retry,
            )
        if code == 504:
            return ApiError(504, "Timeout", "Timeout: request did not complete within the allotted timeout")
        return ApiError(
            500,
            "InternalError",
            "Internal error occurred: injected fault",
            {"causes": [{"message": "injected fault"}]},
        )

    def _store_error(self, e: StoreError, rt: ResourceType | None = None, name: str = "") -> ApiError:
        details: Obj = {}
        if rt is not None:
            details = {"name": name, "group": rt.group, "kind": rt.plural}
        if isinstance(e, InvalidError):
            details["kind"] = rt.kind if rt else ""
            details["causes"] = [{"reason": _cause_reason(m), "message": m, "field": f} for f, m in e.causes]
        if isinstance(e, GoneError):
            details = {}
        return ApiError(e.code, e.reason, str(e), details)

    # ------------------------------------------------------------------ routing

    async def _route(self, req: Request, conn: Connection, ident: Identity = ADMIN) -> Response | None:
        segs = [s for s in req.path.split("/") if s]
        if not segs:
            return self._json(
                {
                    "paths": [
                        "/api",
                        "/api/v1",
                        "/apis",
                        *[f"/apis/{g}" for g in self._groups()],
                        "/healthz",
                        "/livez",
                        "/readyz",
                        "/version",
                    ]
                }
            )
        head = segs[0]
        if head in ("healthz", "livez", "readyz"):
            return Response(200, b"ok", "text/plain; charset=utf-8")
        if head == "version" and len(segs) == 1:
            return self._json(KUBE_VERSION)
        if head == "metrics" and len(segs) == 1:
            return Response(200, self.metrics.exposition(), CONTENT_TYPE_LATEST)
        if head == "prometheus" and self.prometheus is not None:
            return self.prometheus.handle(req, segs[1:])
        if head == "openapi" and len(segs) >= 2 and segs[1] == "v3":
            return self._openapi(segs[2:])
        if head == "api":
            if len(segs) == 1:
                if DISCOVERY_V2 in req.headers.get("accept", "").replace(" ", ""):
                    return self._json(discovery_v2(core=True), DISCOVERY_V2)
                return self._json(
                    {
                        "kind": "APIVersions",
                        "versions": ["v1"],
                        "serverAddressByClientCIDRs": [
                            {"clientCIDR": "0.0.0.0/0", "serverAddress": req.headers.get("host", "")}
                        ],
                    }
                )
            group, version, rest = "", segs[1], segs[2:]
            if version != "v1":
                raise _not_found()
        elif head == "apis":
            served = self._groups()
            if len(segs) == 1:
                if DISCOVERY_V2 in req.headers.get("accept", "").replace(" ", ""):
                    return self._json(discovery_v2(core=False, hidden=self.hidden_groups), DISCOVERY_V2)
                return self._json(
                    {
                        "kind": "APIGroupList",
                        "apiVersion": "v1",
                        "groups": [api_group(g, v) for g, v in served.items()],
                    }
                )
            group = segs[1]
            if group not in served:
                raise _not_found()
            if len(segs) == 2:
                return self._json({"kind": "APIGroup", "apiVersion": "v1", **api_group(group, served[group])})
            version, rest = segs[2], segs[3:]
            if version not in served[group]:
                raise _not_found()
        else:
            raise _not_found()
        if not rest:
            if req.method != "GET":
                raise ApiError(
                    405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
                )
            return self._json(api_resource_list(group, version))
        return await self._resource(req, conn, group, version, rest, ident)

    def _openapi(self, gv: list[str]) -> Response:
        if not gv:
            return self._json(openapi_v3_root(self.hidden_groups))
        served = self._groups()
        if gv == ["api", "v1"]:
            return self._json(openapi_v3_doc("", "v1"))
        if len(gv) == 3 and gv[0] == "apis" and gv[2] in served.get(gv[1], ()):
            return self._json(openapi_v3_doc(gv[1], gv[2]))
        raise _not_found()

    async def _resource(
        self, req: Request, conn: Connection, group: str, version: str, rest: list[str], ident: Identity
    ) -> Response | None:
        watch_path = rest[0] == "watch"
        if watch_path:
            rest = rest[1:]
        ns: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            inner = lookup(group, rest[2])
            if inner is not None and inner.namespaced:
                ns, rest = rest[1], rest[2:]
        if ns is not None and group == "" and len(rest) >= 3 and rest[0] == "pods" and rest[2] == "proxy":
            self._count(_verb(req.method, rest[1], False), lookup("", "pods"), "proxy")  # type: ignore[arg-type]
            return proxy_to_pod(self.store, self.gpus, ns, rest[1], "/".join(rest[3:]), self.clock.now())
        if not rest or len(rest) > 3:
            raise _not_found()
        rt = lookup(group, rest[0])
        if rt is None or version not in rt.versions or (ns is not None and not rt.namespaced):
            raise _not_found()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and sub not in rt.subresources:
            raise _not_found()
        if name is not None and rt.namespaced and ns is None:
            raise _not_found()
        method = req.method
        self._count(_verb(method, name, watch_path or req.param("watch") in ("true", "1")), rt, sub)
        if rt.key in CREATE_ONLY:
            if method != "POST" or name is not None:
                raise ApiError(
                    405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
                )
            return self._review(req, rt, version, ns, ident)
        try:
            if method == "GET":
                if watch_path or req.param("watch") in ("true", "1"):
                    if sub is not None:
                        raise _not_found()
                    return await self._watch(req, conn, rt, version, ns, name)
                if name is None:
                    return self._list(req, rt, version, ns)
                if sub == "log":
                    return await self._logs(req, conn, ns or "", name)
                if sub == "eviction":
                    raise ApiError(
                        405,
                        "MethodNotAllowed",
                        "the server does not allow this method on the requested resource",
                    )
                return self._get(req, rt, version, ns or "", name)
            if watch_path:
                raise ApiError(
                    405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
                )
            if method == "POST":
                if name is None:
                    if rt.namespaced and ns is None:
                        raise _not_found()
                    return self._create(req, rt, version, ns or "")
                if sub == "binding":
                    return self._bind(req, ns or "", name)
                if sub == "eviction":
                    return self._evict(req, rt, version, ns or "", name)
                if sub == "token":
                    return self._token_request(req, ns or "", name)
            elif method == "PUT" and name is not None:
                return self._update(req, rt, version, ns or "", name, sub)
            elif method == "PATCH" and name is not None:
                return self._patch(req, rt, version, ns or "", name, sub)
            elif method == "DELETE" and sub is None:
                if name is None:
                    return self._delete_collection(req, rt, version, ns)
                return self._delete(req, rt, version, ns or "", name)
            raise ApiError(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
            )
        except StoreError as e:
            raise self._store_error(e, rt, name or "") from None

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _json(
        obj: Any, content_type: str = _JSON, status: int = 200, headers: list[tuple[str, str]] | None = None
    ) -> Response:
        return Response(status, orjson.dumps(obj), content_type, headers or [])

    @staticmethod
    def _wants_table(req: Request) -> bool:
        return "as=Table" in req.headers.get("accept", "")

    @staticmethod
    def _body(req: Request) -> Any:
        if not req.body:
            raise _bad_request("the request body is empty")
        ctype = req.headers.get("content-type", _JSON)
        if ctype.split(";")[0].strip() == protobuf.MEDIA_TYPE:
            try:
                return protobuf.decode(req.body)
            except protobuf.UnsupportedKind as e:
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted media types include: "
                    f"application/json, application/yaml (kubesim decodes protobuf only for the kinds "
                    f"kubectl sends that way and it knows, not {e})",
                ) from None
            except protobuf.ProtobufError as e:
                raise _bad_request(f"the request body could not be decoded: {e}") from None
        try:
            if "yaml" in ctype:
                return yaml.safe_load(req.body)
            return orjson.loads(req.body)
        except (orjson.JSONDecodeError, yaml.YAMLError) as e:
            raise _bad_request(f"the request body could not be decoded: {e}") from None

    def _body_object(self, req: Request, rt: ResourceType, version: str) -> Obj:
        obj = self._body(req)
        if not isinstance(obj, dict):
            raise _bad_request("the request body must be a JSON object")
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if kind and kind != rt.kind:
            raise _bad_request(f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})")
        if api_version and api_version != rt.api_version(version):
            raise _bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({rt.api_version(version)})"
            )
        obj.setdefault("metadata", {})
        if not isinstance(obj["metadata"], dict):
            raise _bad_request("metadata must be an object")
        return from_version(rt, obj, version)

    def _out(
        self,
        rt: ResourceType,
        obj: Obj,
        version: str,
        status: int = 200,
        req: Request | None = None,
        headers: list[tuple[str, str]] | None = None,
    ) -> Response:
        ext = to_version(rt, obj, version)
        if req is not None and self._wants_table(req):
            return self._json(
                tables.table(
                    rt.key,
                    [ext],
                    self.clock.now(),
                    req.param("includeObject") or "Metadata",
                    {"resourceVersion": _meta(obj).get("resourceVersion", "")},
                ),
                status=status,
                headers=headers,
            )
        return self._json(ext, status=status, headers=headers)

    def _ensure_namespace(self, ns: str, rt: ResourceType | None = None, name: str = "") -> None:
        found = self.store.find("namespaces", "", ns)
        if found is None:
            raise ApiError(
                404, "NotFound", f'namespaces "{ns}" not found', {"name": ns, "kind": "namespaces"}
            )
        if _meta(found).get("deletionTimestamp"):
            what = f'{rt.key} "{name}"' if rt is not None else "object"
            raise ApiError(
                403,
                "Forbidden",
                f"{what} is forbidden: unable to create new content in namespace {ns} because it is being "
                "terminated",
                {
                    "name": name,
                    "group": rt.group if rt else "",
                    "kind": rt.plural if rt else "",
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": f"namespace {ns} is being terminated",
                            "field": "metadata.namespace",
                        }
                    ],
                },
            )

    @staticmethod
    def _dry_run(req: Request) -> bool:
        return req.param("dryRun") == "All"

    # ------------------------------------------------------------------ reads

    def _get(self, req: Request, rt: ResourceType, version: str, ns: str, name: str) -> Response:
        return self._out(rt, self.store.get(rt.key, ns, name), version, req=req)

    def _selected(self, req: Request, rt: ResourceType, ns: str | None) -> tuple[list[Obj], int, bool]:
        """Objects in `ns` (all when None) matching the request's selectors, the store's rv, and whether
        a selector filtered."""
        labels = parse_label_selector(req.param("labelSelector"))
        fields = parse_field_selector(req.param("fieldSelector"), rt.key)
        match = matcher(labels, fields)
        objs, rv = self.store.list(rt.key, ns)
        if match is not None:
            objs = [o for o in objs if match(o)]
        return objs, rv, match is not None

    def _list(self, req: Request, rt: ResourceType, version: str, ns: str | None) -> Response:
        cont = req.param("continue")
        token: Obj = {}
        if cont:
            try:
                token = orjson.loads(base64.urlsafe_b64decode(cont.encode()))
                after = (str(token["ns"]), str(token["name"]))
                pinned = int(token["rv"])
            except (binascii.Error, ValueError, KeyError, TypeError):
                raise _bad_request("continue key is not valid") from None
        if cont and pinned > 0:
            # Later pages show the list as of the first page's resourceVersion (a consistent snapshot).
            try:
                objs = self.store.list_at(rt.key, pinned, ns)
            except GoneError:
                raise ApiError(
                    410,
                    "Expired",
                    CONTINUE_EXPIRED,
                    list_meta={
                        "continue": base64.urlsafe_b64encode(orjson.dumps({**token, "rv": -1})).decode()
                    },
                ) from None
            match = matcher(
                parse_label_selector(req.param("labelSelector")),
                parse_field_selector(req.param("fieldSelector"), rt.key),
            )
            filtered = match is not None
            if match is not None:
                objs = [o for o in objs if match(o)]
            rv = pinned
        else:
            objs, rv, filtered = self._selected(req, rt, ns)
        objs.sort(key=_sort_key)
        list_meta: Obj = {"resourceVersion": str(rv)}
        if cont:
            start = 0
            lo, hi = 0, len(objs)
            while lo < hi:  # first object after the token's key
                mid = (lo + hi) // 2
                if _sort_key(objs[mid]) <= after:
                    lo = mid + 1
                else:
                    hi = mid
            start = lo
            objs = objs[start:]
        try:
            limit = int(req.param("limit") or 0)
        except ValueError:
            raise _bad_request("limit must be an integer") from None
        if limit > 0 and len(objs) > limit:
            last = objs[limit - 1]["metadata"]
            token = {
                "rv": int(list_meta["resourceVersion"]) if not cont or pinned > 0 else -1,
                "ns": last.get("namespace") or "",
                "name": last["name"],
            }
            list_meta["continue"] = base64.urlsafe_b64encode(orjson.dumps(token)).decode()
            if not filtered:
                list_meta["remainingItemCount"] = len(objs) - limit
            objs = objs[:limit]
        items = [to_version(rt, o, version) for o in objs]
        if self._wants_table(req):
            return self._json(
                tables.table(
                    rt.key, items, self.clock.now(), req.param("includeObject") or "Metadata", list_meta
                )
            )
        return self._json(
            {
                "kind": f"{rt.kind}List",
                "apiVersion": rt.api_version(version),
                "metadata": list_meta,
                "items": items,
            }
        )

    # ------------------------------------------------------------------ writes

    def _create(
        self, req: Request, rt: ResourceType, version: str, ns: str, applied: Obj | None = None
    ) -> Response:
        """POST, or an apply that creates (`applied`: the configuration, already in the stored shape)."""
        obj = copy.deepcopy(applied) if applied is not None else self._body_object(req, rt, version)
        meta = obj["metadata"]
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != ns:
                raise _bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = ns
            generate_name(meta)
            self._ensure_namespace(ns, rt, str(meta.get("name") or ""))
        else:
            meta.pop("namespace", None)
        generate_name(meta)
        for dropped in (
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "managedFields",
            "selfLink",
        ):
            meta.pop(dropped, None)
        validate_create(rt, obj)
        admission.normalize_admission_object(rt.key, obj)
        if rt.key == admission.LIMIT_RANGE_KEY:
            admission.limit_range_defaults(obj)
        try:
            if rt.key == "pods":
                admission.admit_limit_ranges(self.store, obj)
        except admission.AdmissionError as e:
            raise self._forbidden(rt, meta.get("name", ""), str(e)) from None
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = rfc3339(self.clock.now())
        apply_create_defaults(rt, obj, meta["creationTimestamp"])
        if rt.key == "pods":
            self._admit_pod_priority(obj)
        if rt.namespaced:
            try:
                admission.admit_quota(self.store, rt.key, obj)
            except admission.AdmissionError as e:
                raise self._forbidden(rt, meta.get("name", ""), str(e)) from None
        now = meta["creationTimestamp"]
        if applied is not None:
            entry = ssa.apply(None, applied, self._manager(req), rt.api_version(version), now, False)
            meta["managedFields"] = entry["metadata"]["managedFields"]
        else:
            ssa.record_update(None, obj, self._manager(req), rt.api_version(version), now)
        if self._dry_run(req):
            if self.store.find(rt.key, ns if rt.namespaced else "", meta["name"]) is not None:
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{rt.key} "{meta["name"]}" already exists',
                    {"name": meta["name"], "group": rt.group, "kind": rt.plural},
                )
            return self._out(rt, obj, version, 201)
        try:
            stored = self.store.create(rt.key, obj, owned=True)
        except StoreError as e:
            raise self._store_error(e, rt, meta["name"]) from None
        if rt.namespaced and (rt.key == admission.QUOTA_KEY or self.store.count(admission.QUOTA_KEY)):
            admission.refresh_quotas(self.store, ns)  # status.used at once, as the admission plugin does
            stored = self.store.get(rt.key, ns, meta["name"])
        return self._out(rt, stored, version, 201)

    @staticmethod
    def _forbidden(rt: ResourceType, name: str, why: str) -> ApiError:
        """An admission plugin's refusal: `pods "x" is forbidden: <why>`."""
        head = f'{rt.key} "{name}" is forbidden' if name else f"{rt.key} is forbidden"
        return ApiError(
            403, "Forbidden", f"{head}: {why}", {"name": name, "group": rt.group, "kind": rt.plural}
        )

    def _admit_pod_priority(self, pod: Obj) -> None:
        """The Priority admission plugin: resolve priorityClassName to spec.priority."""
        spec = pod["spec"]
        pc_name = spec.get("priorityClassName")
        classes, _ = self.store.list("priorityclasses.scheduling.k8s.io")
        if pc_name:
            pc = next((c for c in classes if _meta(c).get("name") == pc_name), None)
            if pc is None:
                raise ApiError(
                    403,
                    "Forbidden",
                    f'pods "{_meta(pod).get("name")}" is forbidden: no PriorityClass '
                    f"with name {pc_name} was found",
                    {"name": _meta(pod).get("name"), "kind": "pods"},
                )
        else:
            pc = next((c for c in classes if c.get("globalDefault")), None)
        spec["priority"] = int(pc.get("value", 0)) if pc else 0
        if pc:
            spec.setdefault("preemptionPolicy", pc.get("preemptionPolicy", "PreemptLowerPriority"))

    def _manager(self, req: Request) -> str:
        return ssa.manager_name(req.param("fieldManager"), req.headers.get("user-agent", ""))

    def _commit_update(
        self,
        req: Request,
        rt: ResourceType,
        version: str,
        old: Obj,
        new: Obj,
        sub: str | None,
        applied: bool = False,
    ) -> Response:
        """Shared tail of PUT, PATCH and apply: status-subresource rules, validation, field ownership
        (`applied`: the apply already set managedFields), finalizers, the write."""
        meta = new.setdefault("metadata", {})
        old_meta = old["metadata"]
        if meta.get("name", old_meta["name"]) != old_meta["name"]:
            raise _bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL "
                f"({old_meta['name']})"
            )
        if rt.namespaced and meta.get("namespace", old_meta.get("namespace")) != old_meta.get("namespace"):
            raise _bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        if meta.get("uid") and meta["uid"] != old_meta.get("uid"):
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {rt.key} "{old_meta["name"]}": '
                f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: "
                f"{old_meta.get('uid')}",
                {"name": old_meta["name"], "group": rt.group, "kind": rt.plural},
            )
        if sub == "status":
            status = new.get("status")
            sent_rv = meta.get("resourceVersion")
            new = {**old, "metadata": dict(old_meta)}
            if sent_rv:
                new["metadata"]["resourceVersion"] = sent_rv
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
        else:
            meta["name"] = old_meta["name"]
            if rt.namespaced:
                meta["namespace"] = old_meta.get("namespace", "")
            for kept in ("deletionTimestamp", "deletionGracePeriodSeconds"):
                if kept in old_meta:
                    meta[kept] = old_meta[kept]
                else:
                    meta.pop(kept, None)
            if "status" in rt.subresources:
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
            validate_update(rt, old, new)
            if not applied:
                if "managedFields" in old_meta:
                    meta["managedFields"] = old_meta["managedFields"]
                else:
                    meta.pop("managedFields", None)
                ssa.record_update(
                    old, new, self._manager(req), rt.api_version(version), rfc3339(self.clock.now())
                )
        if self._dry_run(req):
            return self._out(rt, new, version)
        # As the real registry: an update deletes an object being deleted once no finalizer is left and its
        # grace period is zero (a terminating pod within its grace period stays for its kubelet). The
        # finalizers are the stored object's ones: a status write keeps the old metadata.
        if (
            old_meta.get("deletionTimestamp")
            and not _meta(new).get("finalizers")
            and not old_meta.get("deletionGracePeriodSeconds")
            and not (rt.key == "namespaces" and (new.get("spec") or {}).get("finalizers"))
        ):
            self._check_rv(rt, old, new)
            return self._out(
                rt, self.store.delete(rt.key, old_meta.get("namespace", ""), old_meta["name"]), version
            )
        return self._out(rt, self.store.update(rt.key, new), version)

    @staticmethod
    def _check_rv(rt: ResourceType, old: Obj, new: Obj) -> None:
        sent = _meta(new).get("resourceVersion")
        if sent and sent != old["metadata"]["resourceVersion"]:
            name = old["metadata"]["name"]
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {rt.key} "{name}": the object has '
                "been modified; please apply your changes to the latest version and try again",
                {"name": name, "group": rt.group, "kind": rt.plural},
            )

    def _update(
        self, req: Request, rt: ResourceType, version: str, ns: str, name: str, sub: str | None
    ) -> Response:
        new = self._body_object(req, rt, version)
        if new["metadata"].get("name") and new["metadata"]["name"] != name:
            raise _bad_request(
                f"the name of the object ({new['metadata']['name']}) does not match the name on the "
                f"URL ({name})"
            )
        old = self.store.get(rt.key, ns, name)
        return self._commit_update(req, rt, version, old, new, sub)

    def _patch(
        self, req: Request, rt: ResourceType, version: str, ns: str, name: str, sub: str | None
    ) -> Response:
        ctype = req.headers.get("content-type", "").split(";")[0].strip()
        patch = self._body(req)
        old = self.store.find(rt.key, ns, name)
        if ctype == "application/apply-patch+yaml" and sub == "status":
            if old is None:
                raise self._store_error(NotFoundError(f'{rt.key} "{name}" not found'), rt, name)
            if not isinstance(patch, dict) or not req.param("fieldManager"):
                raise _bad_request("an apply patch must be an object, with a fieldManager")
            merged = ssa.merge_values(old.get("status"), patch.get("status"))
            return self._commit_update(req, rt, version, old, {**old, "status": merged}, sub)
        if ctype == "application/apply-patch+yaml":
            return self._apply(req, rt, version, ns, name, old, patch)
        if old is None:
            raise self._store_error(NotFoundError(f'{rt.key} "{name}" not found'), rt, name)
        doc = copy.deepcopy(to_version(rt, old, version))
        if ctype == "application/merge-patch+json":
            new = merge_patch(doc, patch)
        elif ctype == "application/strategic-merge-patch+json":
            if rt.group in CRD_GROUPS:
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown format - "
                    "accepted media types include: application/json-patch+json, "
                    "application/merge-patch+json, application/apply-patch+yaml",
                )
            new = strategic_merge(doc, patch)
        elif ctype == "application/json-patch+json":
            new = json_patch(doc, patch)
        else:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted "
                "media types include: application/json-patch+json, application/merge-patch+json, "
                "application/apply-patch+yaml, application/strategic-merge-patch+json",
            )
        if not isinstance(new, dict):
            raise _bad_request("the patch did not produce an object")
        return self._commit_update(req, rt, version, old, from_version(rt, new, version), sub)

    def _apply(
        self, req: Request, rt: ResourceType, version: str, ns: str, name: str, old: Obj | None, patch: Any
    ) -> Response:
        """Server-side apply (kubesim.apply): create when absent, else merge the configuration into the live
        object with field ownership; conflicts are 409 unless `force=true`. A no-op apply writes nothing."""
        manager = req.param("fieldManager")
        if not manager:
            raise ApiError(
                422,
                "Invalid",
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for '
                "apply patch",
                {
                    "group": "meta.k8s.io",
                    "kind": "PatchOptions",
                    "causes": [
                        {
                            "reason": "FieldValueRequired",
                            "message": "Required value: is required for apply patch",
                            "field": "fieldManager",
                        }
                    ],
                },
            )
        if not isinstance(patch, dict):
            raise _bad_request("an apply patch must be an object")
        for fld in ("apiVersion", "kind"):
            if not patch.get(fld):
                raise _bad_request(f"invalid object type: {fld} must be set in an apply configuration")
        req.body = orjson.dumps(patch)
        req.headers["content-type"] = _JSON
        config = self._body_object(req, rt, version)
        meta = config["metadata"]
        if meta.get("name") and meta["name"] != name:
            raise _bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
            )
        meta["name"] = name
        if rt.namespaced:
            meta.setdefault("namespace", ns)
        for dropped in ("resourceVersion", "managedFields", "uid", "creationTimestamp", "generation"):
            meta.pop(dropped, None)
        normalize_quantities(config)
        if old is None:
            return self._create(req, rt, version, ns, applied=config)
        try:
            new = ssa.apply(
                old,
                config,
                manager,
                rt.api_version(version),
                rfc3339(self.clock.now()),
                req.param("force") in ("true", "1"),
            )
        except ssa.ApplyConflict as e:
            raise ApiError(
                409,
                "Conflict",
                str(e),
                {
                    "causes": [
                        {"reason": "FieldManagerConflict", "message": m, "field": f} for f, m in e.causes
                    ]
                },
            ) from None
        if new == old:
            return self._out(rt, old, version)
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        return self._commit_update(req, rt, version, old, new, None, applied=True)

    def _token_request(self, req: Request, ns: str, name: str) -> Response:
        """POST serviceaccounts/{name}/token (authentication.k8s.io/v1 TokenRequest, `kubectl create token`):
        a new bearer token that authenticates as system:serviceaccount:<ns>:<name>, in the groups
        system:serviceaccounts, system:serviceaccounts:<ns> and system:authenticated; RBAC decides the
        rest. The expiry is reported (spec.expirationSeconds, default 3600) but not enforced."""
        body = self._body(req) if req.body else {}
        if not isinstance(body, dict) or body.get("kind") not in (None, "TokenRequest"):
            raise _bad_request("the request body must be an authentication.k8s.io/v1 TokenRequest")
        self.store.get("serviceaccounts", ns, name)  # 404 as a real API server answers for a missing one
        spec = dict(body.get("spec") or {})
        seconds = spec.get("expirationSeconds", 3600)
        if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < 600:
            raise _bad_request("spec.expirationSeconds: may not specify a duration less than 10 minutes")
        token = self.add_user(
            f"system:serviceaccount:{ns}:{name}",
            ("system:serviceaccounts", f"system:serviceaccounts:{ns}", rbac.AUTHENTICATED),
        )
        now = self.clock.now()
        answer = {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": rfc3339(now)},
            "spec": {
                **spec,
                "expirationSeconds": seconds,
                "audiences": spec.get("audiences") or ["https://kubernetes.default.svc"],
            },
            "status": {"token": token, "expirationTimestamp": rfc3339(now + seconds)},
        }
        return self._json(answer, status=201)

    def _evict(self, req: Request, rt: ResourceType, version: str, ns: str, name: str) -> Response:
        """POST pods/{name}/eviction (policy/v1 Eviction): delete the pod if its disruption budget allows."""
        body = self._body(req)
        if not isinstance(body, dict) or body.get("kind") not in (None, "Eviction", "DeleteOptions"):
            raise _bad_request("the request body must be a policy/v1 Eviction")
        body_name = (body.get("metadata") or {}).get("name")
        if body_name and body_name != name:
            raise _bad_request(f"name in URL does not match name in Eviction object: {name} != {body_name}")
        pod = self.store.get("pods", ns, name)
        opts = dict(body.get("deleteOptions") or {})
        try:
            pdb = disruption.check_eviction(self.store, pod, self.clock.now())
        except disruption.EvictionError as e:
            raise ApiError(e.code, e.reason, e.message, e.details) from None
        if "All" not in (opts.get("dryRun") or []) and not self._dry_run(req):
            if pdb is not None:
                disruption.charge(self.store, pdb, name, self.clock.now())
            self._delete_object(rt, pod, opts, self._propagation_policy(rt, opts))
        return self._json(
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201},
            status=201,
        )

    async def _logs(self, req: Request, conn: Connection, ns: str, name: str) -> Response | None:
        """GET pods/{name}/log: the simulated container log (kubesim.podlogs), streamed with follow=true until
        the container exits, the pod goes or the client hangs up."""
        try:
            opts = podlogs.parse_options({k: req.param(k) for k in req.query})
            pod = self.store.get("pods", ns, name)
            container = podlogs.choose_container(pod, opts.container)
            entries, done = podlogs.lines(pod, container, self.clock.now(), opts.previous)
        except podlogs.LogError as e:
            raise ApiError(e.code, e.reason, e.message) from None
        first = podlogs.select(entries, opts, self.clock.now())
        budget = opts.limit_bytes
        body = podlogs.render(first, opts.timestamps)
        if budget is not None:
            body = body[:budget]
        if not opts.follow or opts.previous or done:
            return Response(200, body, "text/plain")
        await conn.start_chunked(200, "text/plain")
        conn.write_chunk(body)
        if budget is not None:
            budget -= len(body)
        # What was sent is tracked by time, not by count: a progress line written while the kubelet had not
        # yet reported the exit may have no place in the finished log (the exit line takes its time).
        last_sent = entries[-1][0] if entries else float("-inf")
        loop = asyncio.get_running_loop()
        eof = loop.create_task(conn.reader.read(1))
        try:
            while not eof.done() and not conn.closed.is_set() and (budget is None or budget > 0):
                await conn.drain()
                await asyncio.sleep(LOG_FOLLOW_POLL)
                pod_now = self.store.find("pods", ns, name)
                if pod_now is None or pod_now["metadata"].get("uid") != pod["metadata"].get("uid"):
                    break
                try:
                    entries, done = podlogs.lines(pod_now, container, self.clock.now())
                except podlogs.LogError:
                    break
                fresh = podlogs.unsent(entries, last_sent, done)
                if fresh:
                    last_sent = max(last_sent, fresh[-1][0])
                chunk = podlogs.render(fresh, opts.timestamps)
                if budget is not None:
                    chunk = chunk[:budget]
                    budget -= len(chunk)
                conn.write_chunk(chunk)
                if done:
                    break
            if not conn.closed.is_set() and not eof.done():
                await conn.end_chunked()
        except (ConnectionError, OSError):
            conn.abort()
        finally:
            await self._release_reader(conn, eof)
        return None

    def _review(
        self, req: Request, rt: ResourceType, version: str, ns: str | None, ident: Identity
    ) -> Response:
        """SelfSubjectAccessReview (the caller), SubjectAccessReview and LocalSubjectAccessReview (the
        spec's user and groups): the review back with status.allowed and the RBAC reason."""
        review = self._body_object(req, rt, version)
        if rt.kind == "SelfSubjectReview":  # kubectl auth whoami
            user_info: Obj = {"username": ident.user, "groups": list(ident.all_groups)}
            answer = {**review, "metadata": {"creationTimestamp": None}, "status": {"userInfo": user_info}}
            return self._json(to_version(rt, answer, version), status=201)
        if rt.kind == "SelfSubjectRulesReview":  # kubectl auth can-i --list
            rules_ns = str((review.get("spec") or {}).get("namespace") or "")
            resource_rules, non_resource_rules = rbac.rules_for(self.store, ident, rules_ns)
            rules_status = {
                "resourceRules": resource_rules,
                "nonResourceRules": non_resource_rules,
                "incomplete": False,
            }
            answer = {**review, "metadata": {"creationTimestamp": None}, "status": rules_status}
            return self._json(to_version(rt, answer, version), status=201)
        spec = review.get("spec")
        if not isinstance(spec, dict) or not (
            isinstance(spec.get("resourceAttributes"), dict)
            or isinstance(spec.get("nonResourceAttributes"), dict)
        ):
            raise ApiError(
                422,
                "Invalid",
                f'{rt.kind}.authorization.k8s.io "" is invalid: spec.resourceAttributes: Invalid value: '
                '"null": exactly one of nonResourceAttributes or resourceAttributes must be specified',
            )
        if rt.kind == "SelfSubjectAccessReview":
            subject = ident
        else:
            user = str(spec.get("user") or "")
            groups = tuple(str(g) for g in spec.get("groups") or [])
            if not user and not groups:
                raise ApiError(
                    422,
                    "Invalid",
                    f'{rt.kind}.authorization.k8s.io "" is invalid: spec.user: Invalid value: "": at least one '
                    "of user or group must be specified",
                )
            subject = ADMIN if user == rbac.ADMIN_USER else Identity(user, groups)
        attrs = rbac.review_attributes(spec)
        if rt.kind == "LocalSubjectAccessReview":
            ra = spec.get("resourceAttributes") or {}
            if ra.get("namespace") != ns:
                raise ApiError(
                    400,
                    "BadRequest",
                    f'namespace mismatch: spec.resourceAttributes.namespace="{ra.get("namespace")}" must be '
                    f'"{ns}"',
                )
        decision = rbac.authorize(self.store, subject, attrs)
        status: Obj = {"allowed": decision.allowed}
        if decision.reason:
            status["reason"] = decision.reason
        review["status"] = status
        review["metadata"] = {"creationTimestamp": None, **({"namespace": ns} if ns else {})}
        return self._json(to_version(rt, review, version), status=201)

    def _bind(self, req: Request, ns: str, name: str) -> Response:
        binding = self._body(req)
        target = (binding or {}).get("target") or {}
        node = target.get("name")
        if not node:
            raise ApiError(
                422,
                "Invalid",
                f'Binding "{name}" is invalid: target.name: Required value',
                {
                    "name": name,
                    "kind": "Binding",
                    "causes": [
                        {"reason": "FieldValueRequired", "message": "Required value", "field": "target.name"}
                    ],
                },
            )
        pod = self.store.get("pods", ns, name)
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is '
                f'already assigned to node "{bound}"',
                {"name": name, "kind": "pods/binding"},
            )

        def bind(p: Obj) -> None:
            p.setdefault("spec", {})["nodeName"] = node
            conds = [
                c
                for c in (p.setdefault("status", {}).get("conditions") or [])
                if c.get("type") != "PodScheduled"
            ]
            conds.append(
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": rfc3339(self.clock.now()),
                }
            )
            p["status"]["conditions"] = conds

        self.store.mutate("pods", ns, name, bind)
        return self._json(
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201},
            status=201,
        )

    # ------------------------------------------------------------------ delete

    def _delete_options(self, req: Request) -> Obj:
        opts: Obj = {}
        if req.body:
            body = self._body(req)
            if isinstance(body, dict):
                opts.update(body)
        policy, grace, orphan = (
            req.param("propagationPolicy"),
            req.param("gracePeriodSeconds"),
            req.param("orphanDependents"),
        )
        if policy is not None:
            opts.setdefault("propagationPolicy", policy)
        if orphan is not None:
            opts.setdefault("orphanDependents", orphan in ("true", "1"))
        if grace is not None and "gracePeriodSeconds" not in opts:
            try:
                opts["gracePeriodSeconds"] = int(grace)
            except ValueError:
                raise _bad_request(f"gracePeriodSeconds must be an integer, not {grace!r}") from None
        return opts

    def _delete(self, req: Request, rt: ResourceType, version: str, ns: str, name: str) -> Response:
        opts = self._delete_options(req)
        old = self.store.get(rt.key, ns, name)
        pre = opts.get("preconditions") or {}
        details = {"name": name, "group": rt.group, "kind": rt.plural, "uid": _meta(old).get("uid")}
        if pre.get("uid") and pre["uid"] != _meta(old).get("uid"):
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {rt.key} "{name}": Precondition failed: '
                f"UID in precondition: {pre['uid']}, UID in object meta: {_meta(old).get('uid')}",
                details,
            )
        if pre.get("resourceVersion") and pre["resourceVersion"] != _meta(old).get("resourceVersion"):
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {rt.key} "{name}": Precondition failed: '
                f"ResourceVersion in precondition: {pre['resourceVersion']}, ResourceVersion in object "
                f"meta: {_meta(old).get('resourceVersion')}",
                details,
            )
        headers: list[tuple[str, str]] = []
        if (
            rt.key == "jobs.batch"
            and opts.get("propagationPolicy") is None
            and opts.get("orphanDependents") is None
        ):
            headers.append(("Warning", JOB_DELETE_WARNING))
        policy = self._propagation_policy(rt, opts)
        if self._dry_run(req):
            return self._out(rt, old, version, headers=headers)
        obj, deleted = self._delete_object(rt, old, opts, policy)
        if deleted and rt.namespaced and self.store.count(admission.QUOTA_KEY):
            admission.refresh_quotas(self.store, _meta(old).get("namespace", ""))
        if rt.key == "pods" or not deleted:
            return self._out(rt, obj, version, headers=headers)
        return self._json(
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details},
            headers=headers,
        )

    @staticmethod
    def _propagation_policy(rt: ResourceType, opts: Obj) -> str:
        """DeleteOptions' policy; without one, batch/v1 Jobs orphan their pods (as the real server does)."""
        policy = opts.get("propagationPolicy")
        if policy is None:
            orphan = opts.get("orphanDependents")
            if orphan is not None:
                return "Orphan" if orphan else "Background"
            return "Orphan" if rt.key == "jobs.batch" else "Background"
        if policy not in ("Orphan", "Background", "Foreground"):
            raise ApiError(
                422,
                "Invalid",
                f'DeleteOptions.meta.k8s.io is invalid: propagationPolicy: Unsupported value: "{policy}"',
                {
                    "causes": [
                        {
                            "reason": "FieldValueNotSupported",
                            "field": "propagationPolicy",
                            "message": "Unsupported value",
                        }
                    ]
                },
            )
        return str(policy)

    def _delete_object(self, rt: ResourceType, old: Obj, opts: Obj, policy: str) -> tuple[Obj, bool]:
        """Delete now, or mark for deletion when finalizers remain or a bound pod must terminate first
        (store.request_delete). A namespace with content goes Terminating and the namespace controller
        empties it. Returns the object and whether it is gone. Foreground is served as Background: the
        garbage collector deletes the dependents once the owner is gone."""
        meta = _meta(old)
        ns, name = meta.get("namespace", ""), meta["name"]
        grace = self._grace_period(rt, old, opts)
        if rt.key == "namespaces":
            if meta.get("deletionTimestamp"):
                return old, False
            content = self.store.namespace_has_content(name)
            if not content and not meta.get("finalizers"):
                return self.store.delete(rt.key, ns, name), True

            def terminate(o: Obj) -> None:
                o["metadata"]["deletionTimestamp"] = rfc3339(self.clock.now())
                o["metadata"]["deletionGracePeriodSeconds"] = 0
                o.setdefault("status", {})["phase"] = "Terminating"
                if not content:  # nothing for the namespace controller to do: its finalizer goes now
                    left = [f for f in (o.get("spec") or {}).get("finalizers") or () if f != "kubernetes"]
                    o.setdefault("spec", {})["finalizers"] = left
                    if not left:
                        o["spec"].pop("finalizers")

            return self.store.mutate(rt.key, ns, name, terminate), False
        if policy == "Orphan" and not meta.get("finalizers") and not grace:
            self._orphan_dependents(old)
        return self.store.request_delete(rt.key, ns, name, grace)

    @staticmethod
    def _grace_period(rt: ResourceType, obj: Obj, opts: Obj) -> int:
        """Seconds a deleted pod may take to terminate: 0 (deleted at once) unless it is bound to a node and
        still running, in which case the node's kubelet removes it (as on a real cluster)."""
        if rt.key != "pods":
            return 0
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
            return 0
        grace = opts.get("gracePeriodSeconds")
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", 30)
        try:
            return max(0, int(grace))
        except (TypeError, ValueError):
            raise _bad_request(f"gracePeriodSeconds must be an integer, not {grace!r}") from None

    def _orphan_dependents(self, owner: Obj) -> None:
        """propagationPolicy=Orphan: dependents lose their ownerReference to the owner (the GC then skips them)."""
        uid = _meta(owner).get("uid")
        owner_ns = _meta(owner).get("namespace") or None
        for rt in RESOURCES:
            objs, _ = self.store.list(rt.key, owner_ns if rt.namespaced and owner_ns else None)
            for obj in objs:
                refs = _meta(obj).get("ownerReferences") or []
                if any(r.get("uid") == uid for r in refs):
                    keep = [r for r in refs if r.get("uid") != uid]

                    def strip(o: Obj, keep: list[Obj] = keep) -> None:
                        if keep:
                            o["metadata"]["ownerReferences"] = keep
                        else:
                            o["metadata"].pop("ownerReferences", None)

                    self.store.mutate(rt.key, _meta(obj).get("namespace", ""), _meta(obj)["name"], strip)

    def _delete_collection(self, req: Request, rt: ResourceType, version: str, ns: str | None) -> Response:
        objs, _, _ = self._selected(req, rt, ns)
        opts = self._delete_options(req)
        policy = self._propagation_policy(rt, opts)
        items = []
        for obj in sorted(objs, key=_sort_key):
            items.append(obj if self._dry_run(req) else self._delete_object(rt, obj, opts, policy)[0])
        return self._json(
            {
                "kind": f"{rt.kind}List",
                "apiVersion": rt.api_version(version),
                "metadata": {"resourceVersion": str(self.store.resource_version)},
                "items": [to_version(rt, o, version) for o in items],
            }
        )

    # ------------------------------------------------------------------ watch

    def _subscribe(self, key: str, w: Watch) -> None:
        watchers = self._watches.get(key)
        if watchers is None:
            watchers = self._watches[key] = set()
            self._unsubscribe[key] = self.store.subscribe(key, self._fan_out)
        watchers.add(w)

    def _unsubscribe_watch(self, key: str, w: Watch) -> None:
        watchers = self._watches.get(key)
        if watchers is None:
            return
        watchers.discard(w)
        if not watchers:
            del self._watches[key]
            self._unsubscribe.pop(key)()

    def _fan_out(self, event: WatchEvent) -> None:
        for w in tuple(self._watches.get(event.key, ())):
            if not w.closed:
                w.offer(event.type, event.obj, event.prev)

    def _encode(self, w: Watch, etype: str, obj: Obj) -> bytes:
        ext = to_version(w.rt, obj, w.version)
        if w.table:
            ext = tables.table(
                w.rt.key,
                [ext],
                self.clock.now(),
                w.include,
                {"resourceVersion": _meta(obj).get("resourceVersion", "")},
                headers=not w.headers_sent,
            )
            w.headers_sent = True
        return orjson.dumps({"type": etype, "object": ext}) + b"\n"

    def _bookmark(self, w: Watch, annotations: Obj | None = None) -> bytes:
        meta: Obj = {"resourceVersion": str(self.store.resource_version)}
        if annotations:
            meta["annotations"] = annotations
        obj = {"kind": w.rt.kind, "apiVersion": w.rt.api_version(w.version), "metadata": meta}
        return orjson.dumps({"type": "BOOKMARK", "object": obj}) + b"\n"

    async def _watch(
        self, req: Request, conn: Connection, rt: ResourceType, version: str, ns: str | None, name: str | None
    ) -> Response | None:
        labels = parse_label_selector(req.param("labelSelector"))
        fields = parse_field_selector(req.param("fieldSelector"), rt.key)
        if name is not None:
            fields = (*fields, *parse_field_selector(f"metadata.name={name}", rt.key))
        match = matcher(labels, fields)
        rv_param = req.param("resourceVersion") or ""
        try:
            timeout = float(req.param("timeoutSeconds") or 0)
            since = int(rv_param) if rv_param not in ("", "0") else None
        except ValueError:
            raise _bad_request(f"invalid resourceVersion or timeoutSeconds: {rv_param!r}") from None
        if timeout <= 0:
            timeout = 1800 + self._rng.random() * 1800  # the real server's default: 30-60 minutes
        bookmarks = req.param("allowWatchBookmarks") in ("true", "1")
        send_initial = req.param("sendInitialEvents") in ("true", "1")
        w = Watch(rt, version, ns, match, self._wants_table(req), req.param("includeObject") or "Metadata")

        # Replay (or list) and subscribe with no await in between, so that no event falls in a gap.
        gone: str | None = None
        if since is None or send_initial:
            objs, _ = self.store.list(rt.key, ns)
            for obj in sorted(objs, key=_sort_key):
                w.offer("ADDED", obj)
            if send_initial:
                w.out.append(self._bookmark(w, {"k8s.io/initial-events-end": "true"}))
        else:
            try:
                events = self.store.events_since(rt.key, since)
            except GoneError as e:
                gone = str(e)
            else:
                for ev in events:
                    w.offer(ev.type, ev.obj, ev.prev)
        await conn.start_chunked(200, _JSON)
        if gone is not None:
            conn.write_chunk(
                orjson.dumps({"type": "ERROR", "object": status_obj(410, "Expired", gone)}) + b"\n"
            )
            await conn.end_chunked()
            return None
        w.abort = conn.abort
        self._subscribe(rt.key, w)
        loop = asyncio.get_running_loop()
        eof = loop.create_task(conn.reader.read(1))
        eof.add_done_callback(lambda _t: w.stop())
        closed_waiter = loop.create_task(conn.closed.wait())
        closed_waiter.add_done_callback(lambda _t: w.stop())
        deadline = loop.time() + timeout
        next_bookmark = loop.time() + self.bookmark_interval if bookmarks else float("inf")
        try:
            while True:
                if w.out:  # one write (one TLS record batch) for everything queued
                    items = [w.out.popleft() for _ in range(len(w.out))]
                    conn.write_chunks([i if isinstance(i, bytes) else self._encode(w, *i) for i in items])
                w.draining = True
                try:
                    await conn.drain()
                finally:
                    w.draining = False
                if w.closed:
                    break
                now = loop.time()
                if now >= deadline:
                    break
                if now >= next_bookmark:
                    w.out.append(self._bookmark(w))
                    next_bookmark = now + self.bookmark_interval
                    continue
                w.wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(w.wake.wait(), min(deadline, next_bookmark) - now)
            if not conn.closed.is_set() and not eof.done():
                await conn.end_chunked()
            if w.cut:
                conn.abort()
        except (ConnectionError, OSError):
            conn.abort()
        finally:
            self._unsubscribe_watch(rt.key, w)
            closed_waiter.cancel()
            await self._release_reader(conn, eof)
        return None

    @staticmethod
    async def _release_reader(conn: Connection, eof: asyncio.Task[bytes]) -> None:
        """Hand the connection's reader back to the HTTP loop for the next request. The end-of-stream read
        must have finished (cancelled and awaited) first, or the next read fails with "readuntil() called
        while another coroutine is already waiting". A read cancelled while waiting consumed nothing; one that
        completed with a byte took the start of a request the client sent after the stream ended, so the
        connection cannot go on (the client retries on a new one); an empty read is the client's EOF."""
        eof.cancel()
        try:
            data = await eof
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            return
        except Exception:
            conn.abort()
            return
        if data:
            conn.abort()

    # ------------------------------------------------------------------ shutdown

    def close(self) -> None:
        for key in list(self._unsubscribe):
            self._unsubscribe.pop(key)()
        for watchers in self._watches.values():
            for w in watchers:
                w.stop(cut=True)
        self._watches.clear()
        self.release_hung()
