"""GPU health gauges on /metrics (docs/health.md), computed at scrape time from the clusters' summaries:

gpufed_gpus_unhealthy{cluster, quarantined}  GPUs the health sources call unhealthy or recovering
                                             (quarantined="false": held back by the circuit breaker)
gpufed_gpu_nodes_quarantined{cluster}        nodes taken out whole after repeated faults
gpufed_gpu_faults_recent{cluster}            fatal GPU faults inside the breaker window
gpufed_gpu_breaker_open{cluster}             1 while the quarantine circuit breaker holds faults back:
                                             the alert (too many GPUs failing at once is more often a
                                             monitoring or infrastructure fault than the GPUs')
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from broker.core.model import ClusterSummary

__all__ = ["GpuHealthCollector"]


class GpuHealthCollector(Collector):
    def __init__(self, summaries: Iterable[ClusterSummary]) -> None:
        self._summaries = tuple(summaries)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        unhealthy = GaugeMetricFamily(
            "gpufed_gpus_unhealthy",
            "GPUs the health sources call unhealthy or recovering, by whether they are quarantined",
            labels=["cluster", "quarantined"],
        )
        nodes = GaugeMetricFamily(
            "gpufed_gpu_nodes_quarantined",
            "Nodes quarantined whole after repeated GPU faults",
            labels=["cluster"],
        )
        recent = GaugeMetricFamily(
            "gpufed_gpu_faults_recent",
            "Fatal GPU faults inside the circuit breaker's window",
            labels=["cluster"],
        )
        breaker = GaugeMetricFamily(
            "gpufed_gpu_breaker_open",
            "1 while the GPU quarantine circuit breaker holds faults back (an alert)",
            labels=["cluster"],
        )
        for s in self._summaries:
            h = s.gpu_health
            if not h.observed and not h.faults:
                continue
            per_gpu = [f for f in h.faults if f.gpu >= 0]
            unhealthy.add_metric([s.cluster, "true"], sum(1 for f in per_gpu if f.quarantined))
            unhealthy.add_metric([s.cluster, "false"], sum(1 for f in per_gpu if not f.quarantined))
            nodes.add_metric([s.cluster], len(h.nodes))
            recent.add_metric([s.cluster], h.recent_faults)
            breaker.add_metric([s.cluster], 1.0 if h.breaker_open else 0.0)
        yield from (unhealthy, nodes, recent, breaker)
