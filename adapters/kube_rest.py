"""HTTP to one member cluster: its own ApiClient, raw JSON requests and watch streams, mapped errors.

Owns how the broker talks to a member cluster's API server:
    connect(kubeconfig, context)   an ApiClient bound to its own Configuration (never the process-global
                                   default, which is racy across clusters); credentials are never logged
    KubeRest                       GET/POST/DELETE, paginated lists and watch streams as plain dicts (orjson
                                   over the raw bytes; no typed-model deserialisation on the hot path); its
                                   `aio` (adapters.kube_async) lists and watches the same cluster on an
                                   event loop, as the informers do
    raise_for_status               401/403 -> ClusterForbidden; 404/409/410 -> ApiStatus (callers branch on
                                   them); 429/5xx and connection failures -> ClusterUnreachable; other 4xx
                                   -> ClusterRejected. Every ClusterError carries `cause`, the failure as
                                   broker.health.machine classifies it (describe_failure: "connection refused",
                                   "certificate verify failed: ...", "timeout after 5 s", "connection
                                   reset", "credentials rejected (401)", "HTTP 503 ServiceUnavailable")
    is_transient                   what is worth retrying at once: a reset connection, 5xx, 429 (not a
                                   timeout, a refusal or a TLS failure: those say the cluster is gone, and
                                   retrying them only multiplies the deadline)
Every request has a deadline: DEFAULT_TIMEOUT (connect, read); a hung cluster costs a few seconds a call.
"""

from __future__ import annotations

import http.client
import logging
import socket
import ssl
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from adapters.kube_token import recheck_token_hook, token_rejected
from adapters.tls_context import share_tls_context
from broker.core.errors import (
    ClusterForbidden,
    ClusterRejected,
    ClusterUnreachable,
    ConfigError,
    OutcomeUnknown,
)
from broker.health import machine

if TYPE_CHECKING:
    from adapters.kube_async import AsyncKubeRest

log = logging.getLogger(__name__)

Obj = dict[str, Any]
DEFAULT_TIMEOUT = (3.0, 5.0)  # (connect, read) seconds for plain requests: a hung cluster costs ~5 s a call


class ApiStatus(Exception):
    """An API answer callers branch on: 404 NotFound, 409 AlreadyExists/Conflict, 410 Gone (Expired)."""

    def __init__(self, cluster: str, code: int, reason: str, message: str) -> None:
        super().__init__(f"cluster {cluster}: {code} {reason}: {message}")
        self.cluster = cluster
        self.code = code
        self.reason = reason
        self.message = message


def connect(kubeconfig: Path | str, context: str | None = None, pool_size: int = 8) -> client.ApiClient:
    """An ApiClient for one cluster, from its kubeconfig and context, with its own Configuration."""
    cfg = client.Configuration()
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig), context=context, client_configuration=cfg, persist_config=False
        )
    except (config.ConfigException, OSError, TypeError, ValueError) as e:
        # The message names the file and the context, never the credentials inside.
        raise ConfigError(
            f"kubeconfig {kubeconfig}: context {context or '(current)'}: {type(e).__name__}"
        ) from e
    recheck_token_hook(cfg)  # not the whole kubeconfig applied again before every request (kube_token)
    cfg.retries = 0  # retries are ours (tenacity, jittered); urllib3's would hide a dead cluster for seconds
    cfg.connection_pool_maxsize = pool_size
    api = client.ApiClient(cfg)
    share_tls_context(api, cfg)  # one SSLContext per cluster, not one per connection
    return api


def _chain(e: BaseException) -> list[BaseException]:
    """The exception and everything it wraps (urllib3's reason, causes, contexts, exception args)."""
    seen: list[BaseException] = []
    todo: list[BaseException] = [e]
    while todo and len(seen) < 32:
        x = todo.pop(0)
        if any(x is s for s in seen):
            continue
        seen.append(x)
        for nxt in (getattr(x, "reason", None), x.__cause__, x.__context__, *x.args):
            if isinstance(nxt, BaseException):
                todo.append(nxt)
    return seen


def describe_failure(e: BaseException, timeout: float | tuple[float, float] | None = None) -> str:
    """A connection-level failure as a person reads it (broker.health.machine's vocabulary), never a bare
    "MaxRetryError"."""
    chain = _chain(e)
    connect_s, read_s = timeout if isinstance(timeout, tuple) else (timeout, timeout)
    for x in chain:  # the OS's own word first (urllib3's NewConnectionError is a ConnectTimeoutError)
        if isinstance(x, ConnectionRefusedError):
            return machine.CONNECTION_REFUSED
        if isinstance(x, socket.gaierror | urllib3.exceptions.NameResolutionError):
            return machine.NAME_RESOLUTION
        if isinstance(x, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(x):
            detail = getattr(x, "verify_message", "") or ""
            return f"{machine.CERTIFICATE_FAILED}: {detail}" if detail else machine.CERTIFICATE_FAILED
    for x in chain:
        if isinstance(x, urllib3.exceptions.ReadTimeoutError):
            return machine.timeout_cause(read_s) if read_s else "read timeout"
        if isinstance(x, TimeoutError | socket.timeout | urllib3.exceptions.ConnectTimeoutError) and not (
            isinstance(x, urllib3.exceptions.NewConnectionError)
        ):
            return machine.timeout_cause(connect_s) if connect_s else "connect timeout"
    for x in chain:
        if isinstance(x, ssl.SSLError):
            return f"{machine.TLS_FAILED}: {getattr(x, 'reason', None) or x}"
        if isinstance(
            x,
            ConnectionResetError
            | ConnectionAbortedError
            | BrokenPipeError
            | http.client.RemoteDisconnected
            | http.client.IncompleteRead
            | urllib3.exceptions.ProtocolError,
        ):
            return machine.CONNECTION_RESET
    return type(chain[-1]).__name__ if chain else "unknown error"


def page_query(page_size: int, selector: Sequence[tuple[str, Any]], cont: str) -> list[tuple[str, Any]]:
    """The query of one page of a paginated list: limit, the selector, the continue token if any."""
    return [("limit", page_size), *selector, *([("continue", cont)] if cont else [])]


def watch_query(
    resource_version: str, timeout_seconds: int, selector: Sequence[tuple[str, Any]]
) -> list[tuple[str, Any]]:
    """The query of a watch from resource_version, with bookmarks, ended by the server after
    timeout_seconds."""
    return [
        ("watch", "true"),
        ("resourceVersion", resource_version),
        ("allowWatchBookmarks", "true"),
        ("timeoutSeconds", timeout_seconds),
        *selector,
    ]


def take_events(buf: bytes) -> tuple[list[Obj], bytes]:
    """The complete watch events (one JSON object a line) at the head of `buf`, and the incomplete rest."""
    if b"\n" not in buf:
        return [], buf
    *lines, rest = buf.split(b"\n")
    return [orjson.loads(line) for line in lines if line.strip()], rest


def is_transient(e: BaseException) -> bool:
    """Worth retrying at once: a reset connection, 5xx, 429 (a refusal, a timeout, TLS are not)."""
    if not isinstance(e, ClusterUnreachable):
        return False
    cause = e.cause
    return cause == machine.CONNECTION_RESET or cause.startswith(("HTTP 5", "HTTP 429"))


def unreachable(
    cluster: str, what: str, e: BaseException, timeout: Any = None, *, write: bool = False
) -> ClusterUnreachable:
    """The failure as ClusterUnreachable; OutcomeUnknown when `write` (the request changes something) was
    sent and its answer timed out: the member may have done it."""
    cause = describe_failure(e, timeout)
    if write and any(isinstance(x, urllib3.exceptions.ReadTimeoutError) for x in _chain(e)):
        return OutcomeUnknown(cluster, f"{what}: {cause} (sent, not answered: it may be done)", cause=cause)
    return ClusterUnreachable(cluster, f"{what}: {cause}", cause=cause)


def _status_body(cluster: str, code: int, data: bytes | None) -> tuple[str, str]:
    try:
        body = orjson.loads(data or b"{}")
    except orjson.JSONDecodeError:
        return "", (data or b"")[:200].decode("utf-8", "replace")
    if not isinstance(body, dict):
        return "", ""
    return str(body.get("reason", "")), str(body.get("message", ""))


def raise_for_status(cluster: str, code: int, data: bytes | None) -> None:
    """Map a non-2xx answer: auth -> ClusterForbidden; 404/409/410 -> ApiStatus; 5xx/429 -> ClusterUnreachable;
    other 4xx -> ClusterRejected."""
    if 200 <= code <= 299:
        return
    reason, message = _status_body(cluster, code, data)
    if code in (401, 403):
        raise ClusterForbidden(
            cluster, f"{code} {reason or 'Forbidden'}: {message}", cause=machine.http_cause(code)
        )
    if code in (404, 409, 410):
        raise ApiStatus(cluster, code, reason, message)
    if code == 429 or code >= 500:
        raise ClusterUnreachable(
            cluster, f"{code} {reason}: {message}", cause=machine.http_cause(code, reason)
        )
    raise ClusterRejected(cluster, f"{code} {reason}: {message}", cause=machine.http_cause(code, reason))


class KubeRest:
    """Raw JSON requests against one member cluster through its ApiClient (auth, TLS, pool)."""

    def __init__(
        self, cluster: str, api: client.ApiClient, timeout: tuple[float, float] = DEFAULT_TIMEOUT
    ) -> None:
        self.cluster = cluster
        self.api = api
        self.timeout = timeout
        self._lock = threading.Lock()
        self._aio: AsyncKubeRest | None = None

    @classmethod
    def from_kubeconfig(cls, cluster: str, kubeconfig: Path | str, context: str | None = None) -> KubeRest:
        return cls(cluster, connect(kubeconfig, context))

    def close(self) -> None:
        self.api.close()  # type: ignore[no-untyped-call]
        with self._lock:
            aio, self._aio = self._aio, None
        if aio is not None:
            aio.close_soon()

    @property
    def aio(self) -> AsyncKubeRest:
        """The same cluster's lists and watches on an event loop (adapters.kube_informer's informers)."""
        from adapters.kube_async import AsyncKubeRest  # here: kube_async builds on this module

        with self._lock:
            if self._aio is None:
                self._aio = AsyncKubeRest(self.cluster, self.api.configuration, self.timeout[0])
            return self._aio

    def _open(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, Any]] = (),
        body: Any = None,
        timeout: float | tuple[float, float] | None = None,
        content_type: str = "application/json",
    ) -> urllib3.BaseHTTPResponse:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        req = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query) or None,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        deadline = timeout or self.timeout
        try:
            resp = self.api.call_api(*req, _request_timeout=deadline)
        except ApiException as e:
            if e.status == 401:
                token_rejected(self.api.configuration)  # the next request reads the token again
            raise_for_status(
                self.cluster, int(e.status or 0), e.body.encode() if isinstance(e.body, str) else None
            )
            raise
        except (urllib3.exceptions.HTTPError, OSError, http.client.HTTPException) as e:
            raise unreachable(self.cluster, f"{method} {path}", e, deadline, write=method != "GET") from e
        raw: urllib3.BaseHTTPResponse = resp.response
        if raw.status == 401:
            token_rejected(self.api.configuration)  # the next request reads the token again
        return raw

    def request(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, Any]] = (),
        body: Any = None,
        timeout: float | tuple[float, float] | None = None,
        content_type: str = "application/json",
    ) -> Obj:
        """One request; the JSON answer as a dict. Errors as raise_for_status says. `content_type`: the
        body's (application/merge-patch+json for a PATCH)."""
        resp = self._open(method, path, query, body, timeout, content_type)
        try:
            data = resp.data
        except (urllib3.exceptions.HTTPError, OSError, http.client.HTTPException) as e:
            raise unreachable(
                self.cluster, f"{method} {path}", e, timeout or self.timeout, write=method != "GET"
            ) from e
        finally:
            resp.release_conn()
        raise_for_status(self.cluster, resp.status, data)
        out = orjson.loads(data) if data else {}
        return out if isinstance(out, dict) else {}

    def get_text(self, path: str, timeout: float | tuple[float, float] | None = None) -> str:
        """A GET whose answer is text, not JSON (an exporter's /metrics through the pod proxy)."""
        resp = self._open("GET", path, (), timeout=timeout)
        try:
            data = resp.data
        except (urllib3.exceptions.HTTPError, OSError, http.client.HTTPException) as e:
            raise unreachable(self.cluster, f"GET {path}", e, timeout or self.timeout) from e
        finally:
            resp.release_conn()
        raise_for_status(self.cluster, resp.status, data)
        return data.decode("utf-8", "replace")

    def open_stream(
        self, path: str, query: Sequence[tuple[str, Any]] = (), read_timeout: float = 3600.0
    ) -> urllib3.BaseHTTPResponse:
        """A GET whose body the caller reads as a stream (pod logs); errors raised before any byte."""
        resp = self._open("GET", path, query, timeout=(self.timeout[0], read_timeout))
        if resp.status >= 400:
            try:
                raise_for_status(self.cluster, resp.status, resp.data)
            finally:
                resp.release_conn()
        return resp

    def probe(self, timeout: tuple[float, float] = (1.5, 2.0)) -> None:
        """A cheap liveness call (GET /version with the broker's credentials, a short deadline): returns on
        success, raises ClusterUnreachable / ClusterForbidden with the cause otherwise."""
        self.request("GET", "/version", timeout=timeout)

    def list_pages(
        self,
        path: str,
        page_size: int = 500,
        timeout: float | tuple[float, float] | None = None,
        selector: Sequence[tuple[str, Any]] = (),
    ) -> tuple[list[Obj], str]:
        """Every item of a collection (paginated with limit/continue) and the list's resourceVersion.
        `selector` adds query parameters such as ("labelSelector", "gpufed.io/job-id")."""
        items: list[Obj] = []
        cont = ""
        while True:
            page = self.request("GET", path, page_query(page_size, selector, cont), timeout=timeout)
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            cont = meta.get("continue") or ""
            if not cont:
                return items, str(meta.get("resourceVersion") or "")

    def watch(
        self,
        path: str,
        resource_version: str,
        timeout_seconds: int,
        read_timeout: float,
        selector: Sequence[tuple[str, Any]] = (),
    ) -> Iterator[Obj]:
        """Watch events ({"type", "object"}) from resource_version, with bookmarks, until the server ends
        the stream (timeoutSeconds) or the connection fails (ClusterUnreachable). `selector` as for
        list_pages (the same selector the list used). The request is made here, before the first event
        is read (a failure to connect is raised by this call): what a caller paces with
        adapters.watch_pacing.ConnectGate is the set-up only, not the stream."""
        query = watch_query(resource_version, timeout_seconds, selector)
        resp = self._open("GET", path, query, timeout=(self.timeout[0], read_timeout))
        return self._events(resp, path, read_timeout)

    def _events(self, resp: urllib3.BaseHTTPResponse, path: str, read_timeout: float) -> Iterator[Obj]:
        try:
            if resp.status != 200:
                raise_for_status(self.cluster, resp.status, resp.data)
            buf = b""
            for chunk in resp.stream(64 * 1024, decode_content=True):
                events, buf = take_events(buf + chunk)
                yield from events
            if buf.strip():
                yield orjson.loads(buf)
        except (urllib3.exceptions.HTTPError, OSError, http.client.HTTPException) as e:
            raise unreachable(self.cluster, f"watch {path}", e, (self.timeout[0], read_timeout)) from e
        finally:
            resp.release_conn()
