"""The API server's proxy to pods: `/api/v1/namespaces/{ns}/pods/{name}[:{port}]/proxy/{path}`.

Owns `proxy_to_pod(store, gpus, ns, target, path)`: what the pod answers on that port and path, as the
real proxy relays it. Only the simulated dcgm-exporter pods serve anything (port 9400, named `metrics`:
`/metrics`, `/health`); every other pod, a pod not Running and a port no container declares answer the
real proxy's 503 (`error trying to reach service: dial tcp <podIP>:<port>: connect: connection refused`).
An unknown pod is 404 NotFound. Authentication and RBAC (`pods/proxy`) are the API's, before this.
"""

from __future__ import annotations

from typing import Any

import orjson

from kubesim.dcgm import CONTENT_TYPE, EXPORTER_APP, EXPORTER_NAMESPACE, exposition, node_series
from kubesim.gpuhealth import ClusterGpus
from kubesim.http import Response
from kubesim.store import Obj, ObjectStore

_TEXT = "text/plain; charset=utf-8"


def _status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> Response:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return Response(code, orjson.dumps(body), "application/json")


def _port_of(pod: Obj, port: str) -> int | None:
    """The container port a proxy target names (number or port name), None when no container has it."""
    for c in (pod.get("spec") or {}).get("containers") or ():
        for p in c.get("ports") or ():
            if port in (str(p.get("containerPort")), p.get("name")):
                return int(p.get("containerPort") or 0)
    return None


def proxy_to_pod(
    store: ObjectStore, gpus: ClusterGpus | None, ns: str, target: str, path: str, now: float
) -> Response:
    parts = target.split(":")
    if len(parts) == 3:  # scheme:name:port
        parts = parts[1:]
    name, port = parts[0], (parts[1] if len(parts) > 1 else "")
    pod = store.find("pods", ns, name)
    if pod is None:
        return _status(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
    status = pod.get("status") or {}
    ip = status.get("podIP") or ""
    number = _port_of(pod, port) if port else None
    dial = f"{ip}:{number if number is not None else port or 80}"
    refused = _status(
        503,
        "ServiceUnavailable",
        f"error trying to reach service: dial tcp {dial}: connect: connection refused",
    )
    if status.get("phase") != "Running" or not ip or number is None:
        return refused
    labels = pod["metadata"].get("labels") or {}
    if ns != EXPORTER_NAMESPACE or labels.get("app") != EXPORTER_APP or gpus is None:
        return refused
    node = store.find("nodes", "", (pod.get("spec") or {}).get("nodeName") or "")
    route = path.strip("/")
    if route == "metrics" and node is not None:
        return Response(200, exposition(node_series(gpus, node, now)), CONTENT_TYPE)
    if route == "health":
        return Response(200, b"OK", _TEXT)
    return Response(404, b"404 page not found\n", _TEXT)
