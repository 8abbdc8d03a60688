"""Telemetry: the named metrics and traces (this module), capacity freshness (freshness) and log
throttling (log_throttle).

Owns every instrument name, so call sites read as intent:

    telemetry.placement_latency.labels(outcome="placed").observe(seconds)
    with telemetry.job_span("gpufed.job.dispatch", record.trace_parent, cluster=...): ...

Metrics live in one private CollectorRegistry (no process/platform collectors, so a test or a second
app in one process sees exactly the broker's series). Counters export as `<name>_total`, histograms as
real `_bucket`/`_sum`/`_count` series. The fleet gauges (capacity, health, queued demand) are computed at
scrape time from what the caller passes to `exposition` (the summaries in Redis), never cached here.
When the HTTP API runs in processes of its own (settings.apiProcesses, broker.app.api_workers), every
process of the broker writes its counters and histograms to PROMETHEUS_MULTIPROC_DIR and `/metrics` in any
of them adds them up: prometheus_client's multiprocess mode, set up by `gpufed serve` before this module
is imported. Collectors that compute at scrape time are added with `add_collector`.

Traces: one trace per job. submit starts the root span; its W3C traceparent is kept on the JobRecord
(`trace_parent`) and every later step (placement with one span per plugin phase and cluster, reservation,
dispatch, state changes) is a span of that trace, in whatever process or pass it runs. Exporters follow
the standard variables: OTEL_TRACES_EXPORTER (comma list of `console`, `otlp`, `none`; unset = none),
OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / _HEADERS (read by the OTLP/HTTP
exporter itself), OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (the resource), OTEL_TRACES_SAMPLER
(the SDK's sampler). `TraceIdLogFilter` puts the current trace id on every log record (`%(trace_id)s`).
"""

from __future__ import annotations

import io
import logging
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, cast

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from broker.core.model import ClusterSummary, Health, JobRecord, JobState
from broker.telemetry.gpu_health import GpuHealthCollector
from broker.telemetry.verdict import Verdict

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------- metrics

disable_created_metrics()  # type: ignore[no-untyped-call]  # no `_created` series: Prometheus reads counter resets without them
REGISTRY = CollectorRegistry(auto_describe=True)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's own variable
_SCRAPE_COLLECTORS: list[Collector] = []  # computed at scrape time (e.g. broker.telemetry.freshness)


def add_collector(collector: Collector) -> None:
    """A collector that computes its series at scrape time, in whichever process serves /metrics."""
    REGISTRY.register(collector)
    _SCRAPE_COLLECTORS.append(collector)


def _process_metrics() -> bytes:
    """The broker's counters and histograms: this process's, or, in multiprocess mode, every process's
    added up (the controller's placements and the API processes' audit records on one page)."""
    if not os.environ.get(MULTIPROC_ENV):
        return generate_latest(REGISTRY)
    merged = CollectorRegistry(auto_describe=False)
    multiprocess.MultiProcessCollector(merged)  # type: ignore[no-untyped-call]
    for collector in _SCRAPE_COLLECTORS:
        merged.register(collector)
    return generate_latest(merged)


# Latencies inside the broker are ms..s; queue waits and summary ages run to minutes or hours.
_FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Watch event to summary in Redis: the pollers batch events for the summary interval (0.2 s by default).
EVENT_LAG_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0)
_SLOW_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0)

placements = Counter(
    "gpufed_placements", "Jobs placed on a member cluster", ["cluster", "product"], registry=REGISTRY
)
unplaceable = Counter(
    "gpufed_unplaceable",
    "Jobs that became unplaceable (fit on no cluster); counted once when a job starts to wait for "
    "capacity, not on every retry",
    registry=REGISTRY,
)
transitions = Counter(
    "gpufed_job_transitions", "Job state transitions, by the state entered", ["state"], registry=REGISTRY
)
dispatch_failures = Counter(
    "gpufed_dispatch_failures",
    "Job creates a member cluster refused or could not take",
    ["cluster"],
    registry=REGISTRY,
)
member_stuck = Counter(
    "gpufed_member_stuck",
    "Trouble inside a member with a job's pods (docs/health.md), by the member's reason (Unschedulable, "
    "FailedCreate, ErrImagePull, ImagePullBackOff, CrashLoopBackOff, OOMKilled, Evicted, ...) and, for the "
    "broker's acts, withdrawn / image-pull-failed / crashed: counted once per change, not per pass",
    ["reason"],
    registry=REGISTRY,
)
config_reloads = Counter(
    "gpufed_config_reloads",
    "clusters.yaml read again while running, by result: applied, invalid (kept the running config), failed",
    ["result"],
    registry=REGISTRY,
)
audit_records = Counter(
    "gpufed_audit_records",
    "Audit records made (docs/tenancy.md), by outcome: success, denied, unauthenticated, failure",
    ["outcome"],
    registry=REGISTRY,
)
audit_lost = Counter(
    "gpufed_audit_records_lost",
    "Audit records not kept: by where (queue: the writer's queue was full; else the sink given up on)",
    ["where"],
    registry=REGISTRY,
)
burst_decisions = Counter(
    "gpufed_burst_decisions",
    "Wait-or-burst decisions of jobs that allow bursting, counted when a job's verdict changes",
    ["verdict"],  # wait | burst
    registry=REGISTRY,
)
cloud_spend = Counter(
    "gpufed_cloud_spend_dollars",
    "What runs on priced (cloud) clusters cost: price per GPU-hour x GPUs x run time, per finished attempt",
    ["tenant", "cluster"],
    registry=REGISTRY,
)
budget_stops = Counter(
    "gpufed_budget_stops",
    "Cloud jobs stopped and requeued because their tenant's hard budget was spent",
    ["tenant"],
    registry=REGISTRY,
)
cloud_gpu_seconds = Counter(
    "gpufed_cloud_gpu_seconds",
    "GPU-seconds run on priced (cloud) clusters, per finished attempt",
    ["tenant", "cluster"],
    registry=REGISTRY,
)
preemptions = Counter(
    "gpufed_preemptions",
    "Running jobs evicted to make room for a higher-priority job (docs/tenancy.md)",
    ["cluster"],
    registry=REGISTRY,
)
preemptions_held = Counter(
    "gpufed_preemptions_held",
    "Preemptions the storm limits held back (per tenant or fleet-wide, per window)",
    registry=REGISTRY,
)
placement_latency = Histogram(
    "gpufed_placement_latency_seconds",
    "Time to decide one job's placement (level 1 over every cluster summary)",
    ["outcome"],  # placed | unplaceable
    buckets=_FAST_BUCKETS,
    registry=REGISTRY,
)
dispatch_latency = Histogram(
    "gpufed_dispatch_latency_seconds",
    "Time to create a job's workload in its member cluster (the create call, success or not)",
    ["cluster"],
    buckets=_FAST_BUCKETS,
    registry=REGISTRY,
)
queue_wait = Histogram(
    "gpufed_queue_wait_seconds",
    "Time a job waited in the global queue: from submit, or from its return to the queue, to PLACED",
    buckets=_SLOW_BUCKETS,
    registry=REGISTRY,
)
capacity_freshness = Histogram(
    "gpufed_capacity_freshness_seconds",
    "Age of a cluster's capacity summary (its last write to Redis by the pollers) when the scheduler "
    "read it: event-to-Redis plus Redis-to-decision delay",
    ["cluster"],
    buckets=_SLOW_BUCKETS,
    registry=REGISTRY,
)


@dataclass(frozen=True)
class FleetSample:
    """What the fleet gauges are computed from at scrape time."""

    summaries: tuple[ClusterSummary, ...]
    jobs: tuple[JobRecord, ...] = ()  # the non-terminal jobs (state counts, queued demand)
    now: float = 0.0
    # per cluster: the pollers' event-to-Redis histogram from Redis ([(bound, cumulative)], sum, count)
    event_lags: Mapping[str, tuple[list[tuple[float, float]], float, float]] = field(default_factory=dict)
    store_up: bool = True  # False: Redis did not answer; the fleet series are left out


class _FleetCollector(Collector):
    def __init__(self, sample: FleetSample) -> None:
        self._s = sample

    def collect(self) -> Iterator[GaugeMetricFamily | HistogramMetricFamily]:
        s = self._s
        up = GaugeMetricFamily("gpufed_store_up", "1 when the state store (Redis) answered this scrape")
        up.add_metric([], 1.0 if s.store_up else 0.0)
        yield up
        if not s.store_up:
            return
        cp = ["cluster", "product"]
        free = GaugeMetricFamily("gpufed_gpus_free", "Free whole (exclusive) GPUs", labels=cp)
        alloc = GaugeMetricFamily("gpufed_gpus_allocatable", "Allocatable whole (exclusive) GPUs", labels=cp)
        used = GaugeMetricFamily("gpufed_gpus_allocated", "Whole GPUs requested by running pods", labels=cp)
        total = GaugeMetricFamily("gpufed_gpus_physical", "Physical GPUs on the nodes", labels=cp)
        shared = GaugeMetricFamily(
            "gpufed_gpus_shared_free", "Free time-sliced (shared) GPU replicas", labels=cp
        )
        shared_alloc = GaugeMetricFamily(
            "gpufed_gpus_shared_allocatable", "Allocatable time-sliced (shared) GPU replicas", labels=cp
        )
        max_node = GaugeMetricFamily(
            "gpufed_gpus_max_free_on_one_node", "Most free whole GPUs on one node", labels=cp
        )
        mig_labels = ["cluster", "product", "profile"]
        mig_free = GaugeMetricFamily("gpufed_mig_slices_free", "Free MIG slices", labels=mig_labels)
        mig_alloc = GaugeMetricFamily(
            "gpufed_mig_slices_allocatable", "Allocatable MIG slices", labels=mig_labels
        )
        healthy = GaugeMetricFamily(
            "gpufed_cluster_healthy", "1 when the cluster is healthy", labels=["cluster"]
        )
        health = GaugeMetricFamily(
            "gpufed_cluster_health", "1 for the cluster's current health state", labels=["cluster", "state"]
        )
        age = GaugeMetricFamily(
            "gpufed_summary_age_seconds",
            "Seconds since the last successful observation of the cluster",
            labels=["cluster"],
        )
        bad = GaugeMetricFamily("gpufed_bad_nodes", "Node objects that could not be read", labels=["cluster"])
        nodes = GaugeMetricFamily("gpufed_nodes", "Nodes, by readiness", labels=["cluster", "ready"])
        for c in s.summaries:
            for p in c.products:
                key = [c.cluster, p.product]
                free.add_metric(key, p.free)
                alloc.add_metric(key, p.allocatable)
                used.add_metric(key, p.allocated)
                total.add_metric(key, p.total)
                shared.add_metric(key, p.shared_free)
                shared_alloc.add_metric(key, p.shared_allocatable)
                max_node.add_metric(key, p.max_free_on_one_node)
            for m in c.mig:
                mig_free.add_metric([c.cluster, m.product, m.profile], m.free)
                mig_alloc.add_metric([c.cluster, m.product, m.profile], m.allocatable)
            healthy.add_metric([c.cluster], 1.0 if c.health == Health.HEALTHY else 0.0)
            for state in Health:
                health.add_metric([c.cluster, str(state)], 1.0 if c.health == state else 0.0)
            age.add_metric([c.cluster], max(0.0, s.now - c.heartbeat) if c.heartbeat else 0.0)
            bad.add_metric([c.cluster], c.bad_nodes)
            nodes.add_metric([c.cluster, "true"], c.nodes_ready)
            nodes.add_metric([c.cluster, "false"], max(0, c.nodes_total - c.nodes_ready))
        yield from (free, alloc, used, total, shared, shared_alloc, max_node, mig_free, mig_alloc)
        yield from (healthy, health, age, bad, nodes)

        jobs = GaugeMetricFamily("gpufed_jobs", "Jobs by state (non-terminal states)", labels=["state"])
        counts = {st: 0 for st in JobState if not st.terminal}
        for j in s.jobs:
            if j.state in counts:
                counts[j.state] += 1
        for st, n in counts.items():
            jobs.add_metric([str(st)], n)
        yield jobs
        demand = GaugeMetricFamily(
            "gpufed_queued_gpus",
            "Whole GPUs (or MIG slices) asked for by queued jobs, by the products they accept "
            "('any' when a job accepts every product)",
            labels=["product"],
        )
        for product, units in sorted(queued_demand(s.jobs).items()):
            demand.add_metric([product], units)
        yield demand
        lag = HistogramMetricFamily(
            "gpufed_event_to_redis_seconds",
            "Time from a watch event reaching a poller to the cluster summary carrying it being written to "
            "Redis (the pollers' batching plus the write), counted in Redis by every poller",
            labels=["cluster"],
        )
        for cluster, (buckets, seconds, _count) in sorted(s.event_lags.items()):
            lag.add_metric(
                [cluster], [("+Inf" if b == float("inf") else repr(b), n) for b, n in buckets], seconds
            )
        yield lag


def queued_demand(jobs: Iterable[JobRecord]) -> dict[str, int]:
    """Units asked for by QUEUED jobs, per accepted product ('any' = no product named; a job naming
    several products counts under each). MIG jobs count slices under 'mig:<profile or need>'."""
    out: dict[str, int] = {}
    for j in jobs:
        if j.state is not JobState.QUEUED:
            continue
        req = j.request
        if req.wants_mig:
            key = f"mig:{req.mig_profile or f'>={req.mig_need.memory_gb if req.mig_need else 0}gb'}"
            out[key] = out.get(key, 0) + req.mig_slices_per_pod * req.pods
            continue
        for product in req.gpu_products or ("any",):
            out[product] = out.get(product, 0) + req.total_gpus
    return out


def exposition(sample: FleetSample) -> bytes:
    """The Prometheus text page: the broker's counters and histograms, then the fleet gauges."""
    fleet = CollectorRegistry(auto_describe=False)
    fleet.register(_FleetCollector(sample))
    fleet.register(GpuHealthCollector(sample.summaries if sample.store_up else ()))
    return _process_metrics() + generate_latest(fleet)


# ----------------------------------------------------------------------------------------------- traces

_TRACER_NAME = "gpufed.broker"
_propagator = TraceContextTextMapPropagator()
_provider = TracerProvider(
    resource=Resource.create({} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "gpufed-broker"})
)
tracer = _provider.get_tracer(_TRACER_NAME)
_configured: set[str] = set()
_extra_exporters = 0
_config_lock = threading.Lock()


def exporters_from_env(env: Mapping[str, str] | None = None) -> list[str]:
    """The exporter names OTEL_TRACES_EXPORTER asks for ('none' and unset: none). Unknown names fail."""
    raw = (env if env is not None else os.environ).get("OTEL_TRACES_EXPORTER", "none")
    names = [n.strip().lower() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in ("console", "otlp", "none")]
    if unknown:
        raise ValueError(
            f"OTEL_TRACES_EXPORTER: unknown exporter(s) {', '.join(unknown)}; use console, otlp or none"
        )
    return [n for n in names if n != "none"]


class _CurrentStdout(io.TextIOBase):
    """A text stream that writes to the sys.stdout of the moment."""

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()


def configure_tracing(env: Mapping[str, str] | None = None, extra: Iterable[SpanExporter] = ()) -> list[str]:
    """Attach the exporters OTEL_TRACES_EXPORTER names (each once per process) and any `extra` ones
    (tests: an in-memory exporter). Returns the names attached by this call."""
    attached: list[str] = []
    with _config_lock:
        for name in exporters_from_env(env):
            if name in _configured:
                continue
            processor: SpanProcessor
            if name == "console":
                # whatever sys.stdout is when a span ends (the SDK's default binds the stream once, and a
                # stream replaced or closed since, as under pytest's capture, would fail every export)
                processor = SimpleSpanProcessor(ConsoleSpanExporter(out=cast(IO[str], _CurrentStdout())))
            else:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

                processor = BatchSpanProcessor(OTLPSpanExporter())
            _provider.add_span_processor(processor)
            _configured.add(name)
            attached.append(name)
        global _extra_exporters
        for exporter in extra:
            _provider.add_span_processor(SimpleSpanProcessor(exporter))
            _extra_exporters += 1
    return attached


def exporting() -> bool:
    """Whether any span exporter is attached: spans that only an exporter reads (the per-cluster
    placement phases, up to two per cluster per decision) are skipped when none is."""
    return bool(_configured) or _extra_exporters > 0


def shutdown_tracing() -> None:
    """Flush what the batch processors hold (called when the broker stops)."""
    _provider.force_flush(timeout_millis=5000)


def _context_of(traceparent: str | None) -> otel_context.Context:
    if not traceparent:
        return otel_context.Context()  # a new trace, whatever span is current
    return _propagator.extract({"traceparent": traceparent})


def traceparent_of(span: trace.Span) -> str | None:
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def trace_id_of(traceparent: str | None) -> str | None:
    """The 32-hex trace id in a W3C traceparent ("00-<trace id>-<span id>-<flags>")."""
    if not traceparent:
        return None
    parts = traceparent.split("-")
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None


Attr = str | int | float | bool


@contextmanager
def span(name: str, **attributes: Attr) -> Iterator[trace.Span]:
    """A span under the current one (or a new trace)."""
    with tracer.start_as_current_span(name, attributes=attributes) as s:
        yield s


@contextmanager
def job_span(name: str, traceparent: str | None, **attributes: Attr) -> Iterator[trace.Span]:
    """A span of a job's trace: a child of the span `traceparent` names (the job's submit span), or the
    root of a new trace when it is None. Current while the block runs, so log lines carry its trace id.
    With no exporter attached no span is built: the job's trace is made current (job_context) and the
    block gets a span that records nothing (the controller makes several of these per job)."""
    if not exporting():
        with job_context(traceparent):
            yield trace.get_current_span()  # the job's submit span as a parent (records nothing)
        return
    with tracer.start_as_current_span(name, context=_context_of(traceparent), attributes=attributes) as s:
        yield s


def root_traceparent(name: str, **attributes: Attr) -> str:
    """The W3C traceparent of a new trace whose root span is `name` (a job's submit span), ended at once.
    With no exporter attached no span is built: the ids are drawn by the SDK's id generator, as a span
    would draw them, and the trace is marked sampled (the steps after it, in whatever process, join it).
    Why: building and ending a span that nothing reads was 0.05 of the 0.41 ms of API CPU a submit took."""
    if exporting():
        with job_span(name, None, **attributes) as s:
            parent = traceparent_of(s)
        if parent is not None:
            return parent
    ids = _provider.id_generator
    return f"00-{ids.generate_trace_id():032x}-{ids.generate_span_id():016x}-01"


def job_span_done(name: str, traceparent: str | None, started_ns: int, **attributes: Attr) -> None:
    """A span of a job's trace written once its work is done (a batched write: each job's span covers
    the batch, from `started_ns` until now). Nothing is built when no exporter is configured."""
    if not exporting():
        return
    done = tracer.start_span(
        name, context=_context_of(traceparent), start_time=started_ns, attributes=attributes
    )
    done.end(end_time=time.time_ns())


@contextmanager
def job_context(traceparent: str | None) -> Iterator[None]:
    """Make the job's trace current without a span of its own: log lines written inside carry its
    trace id, and spans started with `span()` join it."""
    if not traceparent:
        yield
        return
    token = otel_context.attach(_context_of(traceparent))
    try:
        yield
    finally:
        otel_context.detach(token)


@dataclass
class PhaseRecorder:
    """The placement tracer hook (placement.PhaseObserver): records each plugin phase (filter, score)
    per cluster with its wall-clock times, so the spans can be written after the decision and only for
    the placement attempts that changed the job (a job waiting an hour is retried every pass)."""

    started_ns: int = field(default_factory=time.time_ns)
    phases: list[tuple[str, str, int, int, str]] = field(default_factory=list)

    @contextmanager
    def phase(self, phase: str, cluster: str) -> Iterator[dict[str, str]]:
        start = time.time_ns()
        result: dict[str, str] = {}
        try:
            yield result
        finally:
            self.phases.append((phase, cluster, start, time.time_ns(), result.get("result", "")))

    def record_verdicts(self, verdicts: Sequence[Verdict]) -> None:
        """The phases of a decision taken over cached verdicts (the batched placer evaluates a cluster
        once per job shape, not once per job): one filter phase per cluster and a score phase for each
        feasible one, timed over the decision itself."""
        if not exporting():
            return
        end = time.time_ns()
        for v in verdicts:
            rejection = v.rejection
            result = "pass" if rejection is None else f"{rejection.plugin}: {rejection.reason}"
            self.phases.append(("filter", v.cluster, self.started_ns, end, result))
            if rejection is None:
                self.phases.append(("score", v.cluster, self.started_ns, end, str(v.score)))

    def emit(self, traceparent: str | None, outcome: str, **attributes: Attr) -> None:
        """Write the placement span of the job's trace with one child per recorded phase."""
        ended = time.time_ns()
        parent = tracer.start_span(
            "gpufed.job.placement",
            context=_context_of(traceparent),
            start_time=self.started_ns,
            attributes={"gpufed.outcome": outcome, **attributes},
        )
        ctx = trace.set_span_in_context(parent)
        for phase, cluster, start, end, result in self.phases:
            child = tracer.start_span(
                f"gpufed.placement.{phase}",
                context=ctx,
                start_time=start,
                attributes={"gpufed.cluster": cluster, "gpufed.phase": phase, "gpufed.result": result},
            )
            child.end(end_time=end)
        parent.end(end_time=ended)


class TraceIdLogFilter(logging.Filter):
    """Sets `record.trace_id` to the current span's trace id ('-' outside a span)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = trace.get_current_span().get_span_context()
        record.trace_id = f"{ctx.trace_id:032x}" if ctx.is_valid else "-"
        return True


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [trace_id=%(trace_id)s]: %(message)s"


def install_log_filter(handler: logging.Handler) -> None:
    handler.addFilter(TraceIdLogFilter())


__all__ = [
    "EVENT_LAG_BUCKETS",
    "LOG_FORMAT",
    "REGISTRY",
    "FleetSample",
    "PhaseRecorder",
    "TraceIdLogFilter",
    "capacity_freshness",
    "configure_tracing",
    "dispatch_failures",
    "dispatch_latency",
    "exposition",
    "job_context",
    "job_span",
    "job_span_done",
    "member_stuck",
    "placement_latency",
    "placements",
    "preemptions",
    "preemptions_held",
    "queue_wait",
    "root_traceparent",
    "span",
    "trace_id_of",
    "traceparent_of",
    "transitions",
    "unplaceable",
]
