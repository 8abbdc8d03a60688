"""The HTTP API as a process serves it: the app with its readiness checks and /v1/status, and its server.

api_app(...)     the FastAPI app over a service, the store's job lists, the auth runtime and the drain,
                 with /v1/status for `role` (this replica's lease: the elector in the broker process, a
                 view of the lease in Redis in an API process, broker.app.api_process)
api_server(...)  the uvicorn server for it: slow headers and bodies cut off, HTTPS with a certificate

Used by the broker process when it serves the API itself (settings.apiProcesses 0) and by each API
process otherwise, so both answer the same routes with the same checks.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from adapters import poller_liveness
from adapters.job_informer import WatchingGateway
from adapters.redis_store import RedisStateStore
from broker.api import timeouts
from broker.api.routes import create_app
from broker.app.auth import AuthRuntime
from broker.config.settings import FleetConfig
from broker.controller.service import BrokerService
from broker.ha import drain as ha


def api_app(
    cfg: FleetConfig,
    service: BrokerService,
    store: RedisStateStore,
    gateway: WatchingGateway,
    auth: AuthRuntime,
    drain: ha.Drain,
    role: ha.ReplicaRole,
    holder_now: Callable[[], str | None],
) -> FastAPI:
    """The API with readiness (Redis, the lease, the records, draining, capacity) and /v1/status."""
    app = create_app(
        service,
        service.clock,
        max_body_bytes=cfg.settings.max_request_bytes,
        logs=gateway,
        tokens=auth.credentials,
        audit=auth.writer,
        audit_log=auth.log,
        jobs=store,
        readiness={
            "redis": store.ping,
            "lease": role.readiness,
            "records": lambda: records_ready(store),
            "draining": drain.readiness,
            "capacity": poller_liveness.capacity_check(store, cfg.settings.cluster_lost_seconds),
        },
    )
    ha.install(app, drain, role, holder_now, store)
    return app


def api_server(
    app: FastAPI,
    cfg: FleetConfig,
    host: str = "127.0.0.1",
    port: int = 8080,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    server_class: type[uvicorn.Server] = uvicorn.Server,
) -> uvicorn.Server:
    """Not started. `host` and `port` are ignored when the caller runs it on sockets it opened."""
    settings = cfg.settings
    return server_class(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            lifespan="off",
            # slow headers or bodies are cut off (settings.requestHeadersSeconds, requestBodySeconds)
            http=timeouts.timed_protocol(settings.request_headers_seconds, settings.request_body_seconds),
            ssl_certfile=str(tls_cert) if tls_cert else None,
            ssl_keyfile=str(tls_key) if tls_key else None,
        )
    )


def records_ready(store: RedisStateStore) -> bool:
    """Readiness: the store holds the federation's records (not being rebuilt after a Redis loss)."""
    if store.run_marker() is None:
        raise RuntimeError("the state store is empty: the leader is rebuilding the job records")
    return True
