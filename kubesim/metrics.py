"""A simulated cluster's `/metrics`: `apiserver_request_total{verb,resource,code}` as a real API server
exposes it (Prometheus text format), one registry per cluster.

Owns counting resource requests by the Kubernetes verb (get, list, watch, create, ...), the resource
(with its subresource, "pods/status"; "jobs" for jobs.batch, as the API server's `resource` label has no
group) and the HTTP status answered. A request marks what it is while it is routed (`mark`); the cluster's
`handle` counts it with the status it got (`observe`). Requests refused before routing (authentication,
injected faults) have no resource and are not counted, as in kubesim's request_counts. A watch counts
once, 200, when it starts (see `mark`). So a test can show how many list and watch requests N broker replicas make of
each member cluster (`kubectl get --raw /metrics`).
"""

from __future__ import annotations

import contextvars

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "RequestMetrics", "resource_label"]

# (verb, resource) of the request being handled in this task, set while it is routed.
_current: contextvars.ContextVar[list[tuple[str, str]] | None] = contextvars.ContextVar(
    "kubesim_request", default=None
)


class RequestMetrics:
    """apiserver_request_total of one cluster, in its own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter(
            "apiserver_request",
            "Counter of apiserver requests broken out for each verb, resource and HTTP response code.",
            ["verb", "resource", "code"],
            registry=self.registry,
        )

    @staticmethod
    def begin() -> contextvars.Token[list[tuple[str, str]] | None]:
        """Start a request: what `mark` records in this task until `end` belongs to it."""
        return _current.set([])

    def mark(self, verb: str, resource: str) -> None:
        """The request being handled is `verb` on `resource`. A watch is counted now, 200, rather than
        when its stream ends (a real API server counts it at the end): a test reads how many watches
        are open without closing them."""
        if verb == "watch":
            self.requests.labels(verb, resource, "200").inc()
            return
        marks = _current.get()
        if marks is not None:
            marks.append((verb, resource))

    def end(self, token: contextvars.Token[list[tuple[str, str]] | None], code: int) -> None:
        """Count the request begun with `token` (if it reached a resource) with the status it got."""
        marks = _current.get()
        _current.reset(token)
        if marks:
            verb, resource = marks[0]
            self.requests.labels(verb, resource, str(code)).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def resource_label(store_key: str, sub: str | None) -> str:
    """The API server's resource label: the plural without its group, then /subresource."""
    plural = store_key.split(".", 1)[0]
    return plural if sub is None else f"{plural}/{sub}"
