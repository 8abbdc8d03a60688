"""OpenTelemetry traces and metrics for the broker, behind named helpers.

Owns the instrument names so call sites read as intent: `telemetry.placements.add(1, {...})`,
`with telemetry.span("schedule_once"): ...`. Without an exporter configured, the SDK providers keep
everything in-process at negligible cost; /metrics can read the in-memory reader.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

_reader = InMemoryMetricReader()
_meter_provider = MeterProvider(metric_readers=[_reader])
_tracer_provider = TracerProvider()

meter = _meter_provider.get_meter("gpufed.broker")
tracer = _tracer_provider.get_tracer("gpufed.broker")

placements = meter.create_counter("gpufed_placements_total", description="jobs placed, by cluster")
unplaceable = meter.create_counter(
    "gpufed_unplaceable_total", description="placement attempts that fit nowhere"
)
transitions = meter.create_counter(
    "gpufed_job_transitions_total", description="job state transitions, by state"
)
placement_latency = meter.create_histogram(
    "gpufed_placement_latency_seconds", unit="s", description="time to place one job (level 1 + level 2)"
)
summary_writes = meter.create_counter("gpufed_summary_writes_total", description="cluster summaries written")
bad_nodes = meter.create_counter("gpufed_bad_nodes_total", description="node objects that could not be read")


@contextmanager
def span(name: str, **attributes: str | int | float | bool) -> Iterator[trace.Span]:
    with tracer.start_as_current_span(name, attributes=attributes) as s:
        yield s


def metrics_snapshot() -> dict[str, float]:
    """Current value of every counter (sum over attributes), for /metrics and tests."""
    out: dict[str, float] = {}
    data = _reader.get_metrics_data()
    if data is None:
        return out
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                total = 0.0
                for point in m.data.data_points:
                    total += float(getattr(point, "value", getattr(point, "sum", 0.0)))
                out[m.name] = total
    return out


__all__ = ["metrics", "span"]
