"""Lists and watch streams of one member cluster on an event loop (aiohttp), for adapters.kube_informer.

Owns:
    AsyncKubeRest        one cluster's paginated lists and watch streams as plain dicts, through one aiohttp
                         session (its own keep-alive connections, the cluster's TLS context with the host
                         name checked, the kubeconfig's token read again every BEARER_RECHECK_SECONDS and
                         after a 401, so that a refreshed one is used); built from the Configuration of the
                         cluster's synchronous KubeRest, and created lazily on the loop that uses it
    describe_aio_failure a failed request in broker.health.machine's words, as adapters.kube_rest's
                         describe_failure words urllib3's ("connection refused", "timeout after 15 s",
                         "connection reset", "certificate verify failed: ...")
Errors are the synchronous client's: raise_for_status for answers, ClusterUnreachable (with its cause) for
connections, so an informer treats both alike.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import aiohttp
import orjson
from kubernetes import client

from adapters.kube_rest import (
    Obj,
    describe_failure,
    page_query,
    raise_for_status,
    take_events,
    watch_query,
)
from adapters.kube_token import recheck_token_hook, token_rejected
from adapters.tls_context import tls_context
from broker.core.errors import ClusterUnreachable
from broker.health import machine

_RESET = (errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED)
READ_CHUNK = 64 * 1024


def describe_aio_failure(e: BaseException, timeout: tuple[float, float]) -> str:
    """An aiohttp (or asyncio) failure as a person reads it; `timeout` = (connect, read) seconds."""
    connect_s, read_s = timeout
    if isinstance(e, aiohttp.ClientConnectorCertificateError):
        detail = getattr(e.certificate_error, "verify_message", "") or ""
        return f"{machine.CERTIFICATE_FAILED}: {detail}" if detail else machine.CERTIFICATE_FAILED
    if isinstance(e, aiohttp.ClientConnectorDNSError):
        return machine.NAME_RESOLUTION
    if isinstance(e, aiohttp.ClientConnectorError):
        os_error = e.os_error
        if isinstance(os_error, ConnectionRefusedError) or os_error.errno == errno.ECONNREFUSED:
            return machine.CONNECTION_REFUSED
        if isinstance(os_error, TimeoutError):
            return machine.timeout_cause(connect_s)
        return describe_failure(os_error, timeout)
    if isinstance(e, aiohttp.ConnectionTimeoutError):
        return machine.timeout_cause(connect_s)
    if isinstance(e, TimeoutError):  # aiohttp's SocketTimeoutError is one: no byte within the read timeout
        return machine.timeout_cause(read_s)
    if isinstance(e, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return machine.CONNECTION_RESET
    if isinstance(e, aiohttp.ClientOSError) and e.errno in _RESET:
        return machine.CONNECTION_RESET
    if isinstance(e, aiohttp.ClientOSError) and e.errno == errno.ECONNREFUSED:
        return machine.CONNECTION_REFUSED
    return describe_failure(e, timeout)


class AsyncKubeRest:
    """One member cluster's lists and watches on an event loop (an aiohttp session of its own)."""

    def __init__(self, cluster: str, cfg: client.Configuration, connect_timeout: float) -> None:
        self.cluster = cluster
        self._cfg = cfg
        self._base = str(cfg.host).rstrip("/")
        self._connect_timeout = connect_timeout
        self._ssl = tls_context(cfg) if self._base.startswith("https://") else None
        if self._ssl is not None and cfg.verify_ssl:
            self._ssl.check_hostname = True  # urllib3 checks it itself; here the context must
        self._proxy = str(cfg.proxy) if cfg.proxy else None
        self._server_name = getattr(cfg, "tls_server_name", None) or None
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        recheck_token_hook(cfg)  # the kubeconfig's hook at most every BEARER_RECHECK_SECONDS (kube_token)

    def _headers(self) -> dict[str, str]:
        """The request headers, with the bearer token as the synchronous client sends it (its refresh
        hook run at most every BEARER_RECHECK_SECONDS, and again after a 401: adapters.kube_token)."""
        headers = {"Accept": "application/json"}
        bearer = self._cfg.auth_settings().get("BearerToken")
        if bearer and bearer.get("value"):
            headers["Authorization"] = str(bearer["value"])
        return headers

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self._ssl if self._ssl is not None else False, limit=0)
            self._session = aiohttp.ClientSession(connector=connector)
            self._loop = asyncio.get_running_loop()
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def close_soon(self) -> None:
        """Close the session from any thread (on its loop, not waited for): the watches on it end."""
        loop = self._loop
        if self._session is None or loop is None or loop.is_closed():
            return
        asyncio.run_coroutine_threadsafe(self.close(), loop)

    async def _get(
        self, path: str, query: Sequence[tuple[str, Any]], timeout: tuple[float, float]
    ) -> aiohttp.ClientResponse:
        """A GET whose answer's head has arrived; connection failures as ClusterUnreachable."""
        try:
            resp = await self._client().get(
                self._base + path,
                params=[(k, str(v)) for k, v in query] if query else None,
                headers=self._headers(),
                timeout=aiohttp.ClientTimeout(sock_connect=timeout[0], sock_read=timeout[1]),
                proxy=self._proxy,
                server_hostname=self._server_name,
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise self._unreachable(f"GET {path}", e, timeout) from e
        if resp.status == 401:
            token_rejected(self._cfg)  # the token may have been replaced: read it again next time
        return resp

    def _unreachable(self, what: str, e: BaseException, timeout: tuple[float, float]) -> ClusterUnreachable:
        cause = describe_aio_failure(e, timeout)
        return ClusterUnreachable(self.cluster, f"{what}: {cause}", cause=cause)

    async def _body(self, resp: aiohttp.ClientResponse, what: str, timeout: tuple[float, float]) -> bytes:
        try:
            return await resp.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise self._unreachable(what, e, timeout) from e
        finally:
            resp.release()

    async def probe(self, timeout: tuple[float, float]) -> None:
        """A cheap liveness call (GET /version with the broker's credentials, a short deadline): returns on
        success, raises ClusterUnreachable / ClusterForbidden with the cause otherwise."""
        resp = await self._get("/version", (), timeout)
        data = await self._body(resp, "GET /version", timeout)
        raise_for_status(self.cluster, resp.status, data)

    async def list_pages(
        self,
        path: str,
        page_size: int,
        timeout: tuple[float, float],
        selector: Sequence[tuple[str, Any]] = (),
    ) -> tuple[list[Obj], str]:
        """Every item of a collection (limit/continue pages) and the list's resourceVersion."""
        items: list[Obj] = []
        cont = ""
        while True:
            resp = await self._get(path, page_query(page_size, selector, cont), timeout)
            data = await self._body(resp, f"GET {path}", timeout)
            raise_for_status(self.cluster, resp.status, data)
            page = orjson.loads(data) if data else {}
            if not isinstance(page, dict):
                page = {}
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            cont = meta.get("continue") or ""
            if not cont:
                return items, str(meta.get("resourceVersion") or "")

    async def open_watch(
        self,
        path: str,
        resource_version: str,
        timeout_seconds: int,
        read_timeout: float,
        selector: Sequence[tuple[str, Any]] = (),
    ) -> aiohttp.ClientResponse:
        """Open a watch from resource_version (with bookmarks): returns once the answer's head says 200;
        its events are read with events()."""
        query = watch_query(resource_version, timeout_seconds, selector)
        timeout = (self._connect_timeout, read_timeout)
        resp = await self._get(path, query, timeout)
        if resp.status != 200:
            data = await self._body(resp, f"watch {path}", timeout)
            raise_for_status(self.cluster, resp.status, data)
        return resp

    async def events(
        self, resp: aiohttp.ClientResponse, path: str, read_timeout: float
    ) -> AsyncGenerator[Obj, None]:
        """The watch's events ({"type", "object"}) until the server ends it; a broken stream as
        ClusterUnreachable."""
        timeout = (self._connect_timeout, read_timeout)
        buf = b""
        try:
            async for chunk in resp.content.iter_chunked(READ_CHUNK):
                events, buf = take_events(buf + chunk)
                for event in events:
                    yield event
            if buf.strip():
                yield orjson.loads(buf)
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise self._unreachable(f"watch {path}", e, timeout) from e
        finally:
            resp.release()
