"""One member cluster's GPU health: its sources read every interval, the ledger advanced, the result
handed to the cluster's watcher (capacity overlay, summary) and logged.

    GpuHealthWatch(cluster, cfg, metrics)
        due()                          the interval has passed (the watcher asks after each liveness
                                       probe that succeeded, and then runs refresh on a worker thread)
        refresh(rest, nodes, gpus)     read the sources (dcgm-exporter through the member's Prometheus when
                                       `metrics` is configured, else through the pod proxy; health agents'
                                       node conditions and taints from the watched node objects), advance
                                       the ledger (broker.health.quarantine); returns the nodes whose
                                       faults changed, for the watcher to recompute
        overlay(facts)                 the node's NodeFacts with its quarantined GPUs out (gpu_overlay)
        view()                         ClusterGpuHealth, published in the ClusterSummary
A source that fails this round is silent (its GPUs keep their state); failures are logged once per
change of cause, without credentials.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from adapters import gpu_health_sources as sources
from adapters.kube_rest import KubeRest
from broker.capacity.gpu_overlay import with_gpu_health
from broker.config.gpu_health import GpuHealthConfig, MetricsConfig
from broker.core.gpu_health import ClusterGpuHealth, GpuFault, NodeQuarantine
from broker.core.model import NodeFacts
from broker.health import dcgm
from broker.health.node_signals import CONDITION, TAINT, node_signals
from broker.health.quarantine import GpuSignal, HealthLedger, HealthNote, NoteKind, Reading, advance, view

__all__ = ["GpuHealthWatch"]

log = logging.getLogger(__name__)

_WARN = frozenset({NoteKind.FAULT, NoteKind.HELD_BACK, NoteKind.NODE_QUARANTINED, NoteKind.BREAKER_OPEN})


class GpuHealthWatch:
    def __init__(
        self,
        cluster: str,
        cfg: GpuHealthConfig,
        metrics: MetricsConfig | None = None,
        clock: Callable[[], float] = time.time,
        on_notes: Callable[[str, tuple[HealthNote, ...]], None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.cfg = cfg
        self.metrics = metrics
        self._clock = clock
        self._on_notes = on_notes
        self._policy = cfg.policy()
        self._ledger = HealthLedger()
        self._totals: dict[tuple[str, str, int, int], float] | None = None
        self._next = 0.0  # monotonic time of the next read
        self._busy = threading.Lock()
        self._view = ClusterGpuHealth()
        self._faults: dict[str, tuple[GpuFault, ...]] = {}
        self._nodes: dict[str, NodeQuarantine] = {}
        self._failed: str | None = None
        self._dcgm_seen = False  # an exporter answered with series once: GPU deaths are visible here
        self._holders: dict[tuple[str, int], str] = {}  # (node, gpu) -> namespace/pod at the last read
        self.reads = 0

    def due(self) -> bool:
        return self.cfg.enabled and time.monotonic() >= self._next and not self._busy.locked()

    def _dcgm(self, rest: KubeRest) -> tuple[list[dcgm.Sample], frozenset[str], str] | None:
        try:
            if self.metrics is not None:
                return sources.read_prometheus(self.metrics), frozenset(), "prometheus"
            if self.cfg.dcgm_exporter.enabled:
                samples, silent = sources.read_exporters(rest, self.cfg.dcgm_exporter)
                return samples, silent, "pod proxy"
        except Exception as e:
            cause = sources.redact(f"{type(e).__name__}: {e}")[:300]
            if cause != self._failed:
                log.warning("cluster %s: dcgm-exporter metrics not read: %s", self.cluster, cause)
            self._failed = cause
            return None
        return None

    def refresh(
        self, rest: KubeRest, nodes: Mapping[str, Mapping[str, Any]], gpus: Mapping[str, int]
    ) -> set[str]:
        """One read of every source; the nodes whose faults or quarantine changed."""
        if not self._busy.acquire(blocking=False):
            return set()
        try:
            self._next = time.monotonic() + self.cfg.interval_seconds
            signals: list[GpuSignal] = []
            answered = {CONDITION, TAINT}
            silent: frozenset[str] = frozenset()
            read = self._dcgm(rest)
            if read is not None:
                samples, silent, _path = read
                self._dcgm_seen = self._dcgm_seen or bool(samples)
                found, self._totals = dcgm.signals(samples, self._totals, self.cfg.ignored_xids)
                signals.extend(self._with_holders(found, samples))
                answered.add(dcgm.SOURCE)
                if self._failed is not None:
                    log.info("cluster %s: dcgm-exporter metrics read again", self.cluster)
                self._failed = None
            conditions = [(c.type, c.status) for c in self.cfg.node_conditions]
            for name, node in nodes.items():
                signals.extend(node_signals(name, node, conditions, self.cfg.node_taints))
            reading = Reading(tuple(signals), frozenset(answered), silent)
            step = advance(self._ledger, reading, gpus, self._clock(), self._policy)
            self._ledger = step.ledger
            self.reads += 1
            return self._publish(step.notes)
        finally:
            self._busy.release()

    def _with_holders(self, found: tuple[GpuSignal, ...], samples: list[dcgm.Sample]) -> list[GpuSignal]:
        """The signals with the pod that held each GPU at the last read where this one names none: the
        exporter maps a GPU to its pod only while the pod runs, and a pod a fault killed between two reads
        is still the one to requeue."""
        holders = {
            (s.labels["Hostname"], int(s.labels["gpu"])): f"{s.labels['namespace']}/{s.labels['pod']}"
            for s in samples
            if s.labels.get("pod") and s.labels.get("namespace") and s.labels.get("gpu", "").isdigit()
            and s.labels.get("Hostname")
        }  # fmt: skip
        before, self._holders = self._holders, holders
        return [
            g if g.pod or (g.node, g.gpu) not in before else replace(g, pod=before[(g.node, g.gpu)])
            for g in found
        ]

    def _publish(self, notes: tuple[HealthNote, ...]) -> set[str]:
        shown = replace(view(self._ledger, self._policy, self._clock()), observed=self._dcgm_seen)
        faults: dict[str, list[GpuFault]] = {}
        for f in shown.faults:
            faults.setdefault(f.node, []).append(f)
        by_node = {n: tuple(fs) for n, fs in faults.items()}
        quarantined = {q.node: q for q in shown.nodes}
        changed = {n for n in set(by_node) | set(self._faults) if by_node.get(n) != self._faults.get(n)}
        changed |= {
            n for n in set(quarantined) | set(self._nodes) if quarantined.get(n) != self._nodes.get(n)
        }
        self._view, self._faults, self._nodes = shown, by_node, quarantined
        for note in notes:
            level = logging.WARNING if note.kind in _WARN else logging.INFO
            log.log(level, "cluster %s: %s", self.cluster, note.text)
        if notes and self._on_notes is not None:
            self._on_notes(self.cluster, notes)
        return changed

    def overlay(self, facts: NodeFacts) -> NodeFacts:
        faults, q = self._faults.get(facts.name, ()), self._nodes.get(facts.name)
        return with_gpu_health(facts, faults, q) if faults or q else facts

    def view(self) -> ClusterGpuHealth:
        return self._view
