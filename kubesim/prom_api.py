"""A per-cluster Prometheus-compatible HTTP API over the cluster's dcgm-exporter series, served under
`/prometheus` on the cluster's own HTTPS listener (so with its CA, bearer token and RBAC).

Owns
- `GET|POST /prometheus/api/v1/query` (instant query, kubesim.promql's subset) answering Prometheus's
  JSON: `{"status": "success", "data": {"resultType": "vector", "result": [{"metric", "value"}]}}`, and
  its errors (400 `{"status": "error", "errorType": "bad_data", "error": "invalid parameter \"query\":
  ..."}`);
- `GET /prometheus/federate?match[]=...`: the matching series in the text format, as Prometheus's
  federation endpoint serves them, so a real Prometheus can scrape a cluster;
- `GET /prometheus/api/v1/status/buildinfo`.

Series: every Running exporter pod's node series (kubesim.dcgm) with `instance` (<pod IP>:9400) and `job`
(nvidia-dcgm-exporter) added, the exporter's labels kept (honor_labels). No history: values are the
current ones; the sample time is the simulated clock (or the query's `time`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs

import orjson

from kubesim.clock import SimClock
from kubesim.dcgm import (
    CONTENT_TYPE,
    EXPORTER_APP,
    EXPORTER_NAMESPACE,
    EXPORTER_PORT,
    METRICS,
    exposition,
    node_series,
)
from kubesim.gpuhealth import ClusterGpus
from kubesim.http import Request, Response
from kubesim.promql import PromQLError, parse
from kubesim.store import Obj, ObjectStore

PREFIX = "prometheus"
BUILD_INFO = {
    "version": "2.42.0",
    "revision": "kubesim",
    "branch": "HEAD",
    "buildUser": "kubesim",
    "buildDate": "20260101-00:00:00",
    "goVersion": "go1.25",
}


def _json(obj: Any, status: int = 200) -> Response:
    return Response(status, orjson.dumps(obj), "application/json")


def _bad_data(message: str) -> Response:
    return _json({"status": "error", "errorType": "bad_data", "error": message}, 400)


def _timestamp(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ValueError(f'invalid parameter "time": cannot parse "{text}" to a valid timestamp') from None


def exporter_pods(store: ObjectStore) -> Iterator[Obj]:
    """The cluster's Running dcgm-exporter pods."""
    for pod in store.list("pods", EXPORTER_NAMESPACE)[0]:
        if (pod["metadata"].get("labels") or {}).get("app") != EXPORTER_APP:
            continue
        if (pod.get("status") or {}).get("phase") == "Running" and (pod.get("spec") or {}).get("nodeName"):
            yield pod


class PrometheusApi:
    """The `/prometheus` paths of one cluster."""

    def __init__(self, store: ObjectStore, clock: SimClock, gpus: ClusterGpus) -> None:
        self.store, self.clock, self.gpus = store, clock, gpus

    def series(self, accepts: Callable[[str], bool]) -> Iterator[tuple[dict[str, str], str]]:
        """Every exporter's series whose metric `accepts` takes: (labels with __name__, value)."""
        names = [m[0] for m in METRICS if accepts(m[0])]
        if not names:
            return
        now = self.clock.now()
        for pod in exporter_pods(self.store):
            node = self.store.find("nodes", "", pod["spec"]["nodeName"])
            if node is None:
                continue
            target = [
                ("instance", f"{(pod.get('status') or {}).get('podIP', '')}:{EXPORTER_PORT}"),
                ("job", EXPORTER_APP),
            ]
            for name, labels, value in node_series(self.gpus, node, now, names):
                out = dict(labels + target)
                out["__name__"] = name
                yield out, value

    def handle(self, req: Request, segs: list[str]) -> Response:
        params: dict[str, list[str]] = {k: list(v) for k, v in req.query.items()}
        if req.method == "POST" and req.body:
            for k, v in parse_qs(req.body.decode("utf-8", "replace"), keep_blank_values=True).items():
                params.setdefault(k, []).extend(v)
        path = "/".join(segs)
        if path == "api/v1/query" and req.method in ("GET", "POST"):
            return self._query(params)
        if path == "federate" and req.method == "GET":
            return self._federate(params.get("match[]", []))
        if path == "api/v1/status/buildinfo" and req.method == "GET":
            return _json({"status": "success", "data": BUILD_INFO})
        return Response(404, b"404 page not found\n", "text/plain; charset=utf-8")

    def _query(self, params: dict[str, list[str]]) -> Response:
        text = (params.get("query") or [""])[-1]
        try:
            query = parse(text)
        except PromQLError as e:
            return _bad_data(f'invalid parameter "query": {e}')
        try:
            ts = _timestamp(params["time"][-1]) if params.get("time") else self.clock.now()
        except ValueError as e:
            return _bad_data(str(e))
        result = []
        for lbls, value in query.evaluate(self.series):
            result.append({"metric": dict(sorted(lbls.items())), "value": [round(ts, 3), value]})
        return _json({"status": "success", "data": {"resultType": "vector", "result": result}})

    def _federate(self, matches: Iterable[str]) -> Response:
        queries = []
        for m in matches:
            try:
                queries.append(parse(m))
            except PromQLError as e:
                return _bad_data(f"parse error: {e}")
        picked: dict[str, list[tuple[list[tuple[str, str]], str]]] = {}
        seen: set[tuple[tuple[str, str], ...]] = set()
        for q in queries:
            for lbls, value in q.evaluate(self.series):
                name = lbls.pop("__name__")
                key = (("__name__", name), *sorted(lbls.items()))
                if key in seen:
                    continue
                seen.add(key)
                picked.setdefault(name, []).append((sorted(lbls.items()), value))
        ordered = [(name, labels, value) for name, _, _ in METRICS for labels, value in picked.get(name, [])]
        return Response(200, exposition(ordered), CONTENT_TYPE)
