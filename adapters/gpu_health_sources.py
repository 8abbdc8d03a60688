"""Reading dcgm-exporter's metrics from a member: through its Prometheus, or the exporter pods.

    read_exporters(rest, cfg)   the exporter pods (namespace + label selector, the kubeconfig's
                                credentials) and each one's /metrics through the API server's pod proxy
                                (`/api/v1/namespaces/NS/pods/NAME:PORT/proxy/metrics`), parsed with
                                prometheus_client's text parser -> (samples, nodes whose exporter did not
                                answer)
    read_prometheus(cfg)        one instant query to the member's Prometheus HTTP API
                                (`/api/v1/query`, {__name__=~"DCGM_..."}) with the configured bearer token
                                and TLS (CA file or skip verify) -> samples
Only the series broker.health.dcgm reads are kept. Transient failures (a reset, 5xx, 429) are retried
once with jittered backoff (tenacity); anything else raises: the caller counts the source as silent.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx
from prometheus_client.parser import text_string_to_metric_families
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from adapters.kube_rest import KubeRest, is_transient
from broker.config.gpu_health import DcgmExporterConfig, MetricsConfig
from broker.health.dcgm import DCGM_METRICS, Sample

__all__ = ["PROM_QUERY", "read_exporters", "read_prometheus"]

log = logging.getLogger(__name__)

READ_TIMEOUT = (2.0, 5.0)
PROM_QUERY = '{__name__=~"' + "|".join(DCGM_METRICS) + '"}'
_WANTED = frozenset(DCGM_METRICS)


def _retrying() -> Retrying:
    return Retrying(
        retry=retry_if_exception(is_transient),
        wait=wait_random_exponential(multiplier=0.1, max=0.5),
        stop=stop_after_attempt(2),
        reraise=True,
    )


def parse_text(text: str, node: str | None = None) -> list[Sample]:
    """The wanted series of an exporter's text answer; `node` fills a missing Hostname label."""
    out: list[Sample] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name not in _WANTED:
                continue
            labels = dict(s.labels)
            if node and not labels.get("Hostname"):
                labels["Hostname"] = node
            out.append(Sample(s.name, labels, float(s.value)))
    return out


def read_exporters(rest: KubeRest, cfg: DcgmExporterConfig) -> tuple[list[Sample], frozenset[str]]:
    """(samples of every Running exporter pod, nodes whose exporter could not be read)."""
    ns = quote(cfg.namespace, safe="")
    for attempt in _retrying():
        with attempt:
            pods = rest.request(
                "GET",
                f"/api/v1/namespaces/{ns}/pods",
                [("labelSelector", cfg.label_selector)],
                timeout=READ_TIMEOUT,
            )
    samples: list[Sample] = []
    silent: set[str] = set()
    for pod in pods.get("items") or ():
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        node = spec.get("nodeName")
        if not isinstance(node, str) or not node:
            continue
        if (pod.get("status") or {}).get("phase") != "Running":
            silent.add(node)
            continue
        path = (
            f"/api/v1/namespaces/{ns}/pods/{quote(str(meta.get('name')), safe='')}:{cfg.port}/proxy{cfg.path}"
        )
        try:
            for attempt in _retrying():
                with attempt:
                    text = rest.get_text(path, timeout=READ_TIMEOUT)
            samples.extend(parse_text(text, node))
        except Exception as e:  # one exporter down says nothing about the others
            log.debug("cluster %s: dcgm-exporter on %s not read: %s", rest.cluster, node, e)
            silent.add(node)
    return samples, frozenset(silent)


def _prom_transient(e: BaseException) -> bool:
    if isinstance(e, httpx.HTTPStatusError):
        return e.response.status_code in (429, 500, 502, 503, 504)
    return isinstance(e, httpx.TransportError) and not isinstance(e, httpx.ConnectError)


def _auth(cfg: MetricsConfig) -> dict[str, str]:
    token = cfg.bearer_token.get_secret_value() if cfg.bearer_token is not None else None
    if cfg.bearer_token_file is not None:
        token = cfg.bearer_token_file.read_text().strip()  # read each time: rotated tokens work
    return {"Authorization": f"Bearer {token}"} if token else {}


def read_prometheus(cfg: MetricsConfig, client: httpx.Client | None = None) -> list[Sample]:
    """The DCGM series the member's Prometheus holds now (one instant query)."""
    verify: Any = False if cfg.insecure_skip_tls_verify else (str(cfg.ca_file) if cfg.ca_file else True)
    own = client is None
    http = client or httpx.Client(verify=verify, timeout=cfg.timeout_seconds)
    try:
        for attempt in Retrying(
            retry=retry_if_exception(_prom_transient),
            wait=wait_random_exponential(multiplier=0.1, max=0.5),
            stop=stop_after_attempt(2),
            reraise=True,
        ):
            with attempt:
                query = PROM_QUERY if not cfg.match else PROM_QUERY[:-1] + ", " + cfg.match + "}"
                resp = http.get(
                    f"{cfg.prometheus_url}/api/v1/query", params={"query": query}, headers=_auth(cfg)
                )
                resp.raise_for_status()
        body = resp.json()
    finally:
        if own:
            http.close()
    if body.get("status") != "success" or (body.get("data") or {}).get("resultType") != "vector":
        raise ValueError(f"Prometheus answered {str(body)[:200]}")
    out: list[Sample] = []
    for r in body["data"].get("result") or ():
        metric: Mapping[str, str] = r.get("metric") or {}
        name = metric.get("__name__", "")
        if name in _WANTED:
            labels = {k: v for k, v in metric.items() if k != "__name__"}
            out.append(Sample(name, labels, float(r["value"][1])))
    return out


_SECRETS = re.compile(r"Bearer\s+\S+")


def redact(text: str) -> str:
    """An error's text with any bearer token cut out (never logged)."""
    return _SECRETS.sub("Bearer <redacted>", text)
