"""What an operator scrapes and traces: /metrics as Prometheus parses it, one trace per job, /readyz.

Real Redis, a kubesim cluster over HTTPS (paused clock: jobs are created and stay there), the real
gateway and BrokerService, the FastAPI app through its ASGI test client. Spans are exported the way
OTEL_TRACES_EXPORTER=console asks (read back from stdout) and, with the same configuration call, to an
in-memory exporter for the structure.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from adapters.kube import KubeGateway
from adapters.kube_rest import KubeRest
from adapters.redis_lease import RedisLease
from adapters.redis_store import RedisStateStore
from adapters.system_clock import SystemClock
from broker import telemetry
from broker.api.routes import create_app
from broker.app.api_wiring import records_ready
from broker.controller.service import BrokerService
from broker.core.errors import ClusterUnreachable
from broker.core.model import (
    ClusterTraits,
    JobRequest,
    JobState,
)
from broker.ha import drain as ha
from broker.ha.leadership import Leadership
from kubesim.fleet import synthetic_fleet
from kubesim.sim import Simulation
from tests.conftest import free_port
from tests.service_doubles import idle_h100_node

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


class FlakyGateway(KubeGateway):
    """The real gateway, refusing the next `fail` creates as an unreachable cluster would."""

    fail = 0

    def create_workload(
        self, cluster: str, job: Mapping[str, Any], companions: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        if self.fail:
            self.fail -= 1
            raise ClusterUnreachable(cluster, "connection refused (test)")
        super().create_workload(cluster, job, companions)


@pytest.fixture
def world(tmp_path: Path, redis_url: str) -> Iterator[tuple[BrokerService, FlakyGateway]]:
    fleet = synthetic_fleet(1, 1, gpus_per_node=8)
    with Simulation(fleet, tmp_path, speed=0) as sim:
        name = fleet.clusters[0].name
        store = RedisStateStore(redis_url, prefix="obs" + uuid.uuid4().hex[:8])
        gateway = FlakyGateway({name: KubeRest.from_kubeconfig(name, sim.kubeconfig_path(name))})
        clock = SystemClock()
        store.put_summary(idle_h100_node(name, clock.now(), shared_allocatable=4, shared_free=3))
        service = BrokerService(store, gateway, clock, {name: ClusterTraits(name=name)})
        try:
            yield service, gateway
        finally:
            gateway.close()
            store.close()


def _families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_metrics_parse_as_prometheus_with_real_histograms_and_labels(
    world: tuple[BrokerService, FlakyGateway],
) -> None:
    service, _ = world
    cluster = next(iter(service.traits))
    service.submit(JobRequest(name="fits", gpus_per_pod=2))
    service.submit(JobRequest(name="waits", gpus_per_pod=2, gpu_products=("A100-80GB",)))
    service.schedule_once()

    client = TestClient(create_app(service, service.clock))
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=")
    fams = _families(r.text)

    declared = {
        "gpufed_placement_latency_seconds": ("histogram", {"outcome"}),
        "gpufed_dispatch_latency_seconds": ("histogram", {"cluster"}),
        "gpufed_queue_wait_seconds": ("histogram", set()),
        "gpufed_capacity_freshness_seconds": ("histogram", {"cluster"}),
        "gpufed_placements": ("counter", {"cluster", "product"}),
        "gpufed_unplaceable": ("counter", set()),
        "gpufed_job_transitions": ("counter", {"state"}),
        "gpufed_gpus_free": ("gauge", {"cluster", "product"}),
        "gpufed_gpus_shared_free": ("gauge", {"cluster", "product"}),
        "gpufed_cluster_health": ("gauge", {"cluster", "state"}),
        "gpufed_queued_gpus": ("gauge", {"product"}),
        "gpufed_jobs": ("gauge", {"state"}),
    }
    for name, (kind, labels) in declared.items():
        assert name in fams, f"{name} missing from /metrics"
        fam = fams[name]
        assert fam.type == kind, (name, fam.type)
        assert fam.documentation, f"{name} has no HELP text"
        for sample in fam.samples:
            if sample.name.endswith("_bucket"):
                assert set(sample.labels) == labels | {"le"}, (name, sample.labels)
            else:
                assert set(sample.labels) == labels, (name, sample.labels)

    placed = [
        s for s in fams["gpufed_placement_latency_seconds"].samples if s.labels.get("outcome") == "placed"
    ]
    buckets = [s for s in placed if s.name.endswith("_bucket")]
    assert len(buckets) > 5 and buckets[-1].labels["le"] == "+Inf"
    assert any(
        s.name == "gpufed_placements_total" and s.labels == {"cluster": cluster, "product": "H100-80GB"}
        for s in fams["gpufed_placements"].samples
    )
    gauges = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in fams.values() for s in f.samples}
    assert gauges[("gpufed_gpus_shared_free", (("cluster", cluster), ("product", "H100-80GB")))] == 3
    assert gauges[("gpufed_queued_gpus", (("product", "A100-80GB"),))] == 2
    assert gauges[("gpufed_cluster_health", (("cluster", cluster), ("state", "healthy")))] == 1


def test_unplaceable_counts_jobs_that_become_unplaceable_not_retries(
    world: tuple[BrokerService, FlakyGateway],
) -> None:
    service, _ = world

    def count() -> float:
        return telemetry.REGISTRY.get_sample_value("gpufed_unplaceable_total") or 0.0

    before = count()
    service.submit(JobRequest(name="too-big", gpus_per_pod=16))
    for _ in range(4):
        service.schedule_once()
    assert count() == before + 1
    job = next(j for j in service.jobs([JobState.QUEUED]) if j.request.name == "too-big")
    assert job.reason.startswith("0/1 clusters are available")


def test_one_trace_per_job_with_a_span_per_step_exported_as_otel_env_asks(
    world: tuple[BrokerService, FlakyGateway],
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service, gateway = world
    memory = InMemorySpanExporter()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    attached = telemetry.configure_tracing(extra=[memory])  # reads the environment, as the broker does
    assert attached in (["console"], [])  # once per process

    record, _ = service.submit(JobRequest(name="traced", gpus_per_pod=1))
    gateway.fail = 1  # the first create fails (its log line must carry the trace id), the retry works
    lines: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, rec: logging.LogRecord) -> None:
            lines.append(rec)

    handler = Keep(level=logging.WARNING)
    telemetry.install_log_filter(handler)
    logging.getLogger("broker.controller").addHandler(handler)
    try:
        service.schedule_once()
    finally:
        logging.getLogger("broker.controller").removeHandler(handler)
    retried = service.get(record.id)
    assert retried.state is JobState.QUEUED and "dispatch-failed" in retried.reason
    service.store.save_job(replace(retried, not_before=0.0), JobState.QUEUED)  # skip the backoff
    service.schedule_once()
    assert service.get(record.id).state is JobState.PLACED

    trace_id = telemetry.trace_id_of(service.get(record.id).trace_parent)
    assert trace_id is not None
    spans: list[ReadableSpan] = [
        s
        for s in memory.get_finished_spans()
        if s.context is not None and f"{s.context.trace_id:032x}" == trace_id
    ]
    names = [s.name for s in spans]
    for expected in (
        "gpufed.job.submit",
        "gpufed.job.placement",
        "gpufed.placement.filter",
        "gpufed.placement.score",
        "gpufed.job.reserve",
        "gpufed.job.dispatch",
        "gpufed.job.state",
    ):
        assert expected in names, f"{expected} not in the job's trace: {names}"
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    submit = next(s for s in spans if s.name == "gpufed.job.submit")
    assert submit.parent is None  # the root of the job's trace
    for s in spans:
        if s.name.startswith("gpufed.placement."):
            assert s.parent is not None and by_id[s.parent.span_id].name == "gpufed.job.placement"
            assert s.attributes is not None and s.attributes["gpufed.cluster"] == next(iter(service.traits))
        elif s is not submit:
            assert s.parent is not None and s.parent.span_id == submit.context.span_id
    states = [s.attributes["gpufed.state"] for s in spans if s.name == "gpufed.job.state" and s.attributes]
    assert states == ["PLACED", "QUEUED", "PLACED"]
    assert any(s.name == "gpufed.job.dispatch" and not s.status.is_ok for s in spans)  # the failed create

    # the trace id is in the job's events and in the log line of the failed dispatch
    assert {e.trace_id for e in service.events(record.id)} == {trace_id}
    warned = [rec for rec in lines if "dispatch of" in rec.getMessage()]
    assert warned and all(getattr(rec, "trace_id", None) == trace_id for rec in warned)

    # OTEL_TRACES_EXPORTER=console printed the same spans as JSON on stdout
    out = capfd.readouterr().out
    assert '"name": "gpufed.job.placement"' in out and trace_id in out


def test_readyz_says_why_when_redis_does_not_answer(world: tuple[BrokerService, FlakyGateway]) -> None:
    service, gateway = world
    ok = TestClient(create_app(service, service.clock)).get("/readyz")
    assert ok.status_code == 200 and ok.json()["status"] == "ready"

    dead = RedisStateStore(f"redis://127.0.0.1:{free_port()}/0", prefix="gone")
    down = BrokerService(dead, gateway, service.clock, service.traits)
    client = TestClient(create_app(down, service.clock))
    r = client.get("/readyz")
    assert r.status_code == 503
    assert r.json()["status"] == "not-ready" and "redis" in r.json()["reasons"]
    assert "redis" in r.json()["message"]
    assert client.get("/healthz").status_code == 200  # liveness only: the process is fine
    scrape = client.get("/metrics")  # the process's own series still come, with the store marked down
    assert scrape.status_code == 200
    fams = _families(scrape.text)
    assert fams["gpufed_store_up"].samples[0].value == 0
    assert fams["gpufed_placement_latency_seconds"].type == "histogram"
    dead.close()


_SUBMIT_SCRIPT = """
import sys
from adapters.kube import KubeGateway
from adapters.redis_store import RedisStateStore
from adapters.system_clock import SystemClock
from broker import telemetry
from broker.ha import drain as ha  # noqa: F401 (the API process imports it too)
from broker.core.model import ClusterTraits, JobRequest
from broker.controller.service import BrokerService

telemetry.configure_tracing()  # from the environment, as `gpufed serve` does
store = RedisStateStore(sys.argv[1], prefix=sys.argv[2])
service = BrokerService(store, KubeGateway({}), SystemClock(), {"c1": ClusterTraits(name="c1")})
record, _ = service.submit(JobRequest(name="otlp-job"))
telemetry.shutdown_tracing()
print(telemetry.trace_id_of(record.trace_parent))
"""


def test_with_otel_traces_exporter_otlp_a_submit_reaches_an_otlp_http_receiver(
    redis_url: str, tmp_path: Path
) -> None:
    """The OTLP/HTTP exporter configured only by OTEL_* variables, in a broker process of its own, sends
    the job's spans to a real HTTP endpoint (a minimal receiver here) as OTLP protobuf."""
    received: list[bytes] = []
    paths: list[str] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            paths.append(self.path)
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env = {
            **os.environ,
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{server.server_address[1]}",
            "OTEL_SERVICE_NAME": "gpufed-test",
        }
        out = subprocess.run(
            [sys.executable, "-c", _SUBMIT_SCRIPT, redis_url, "otlp" + uuid.uuid4().hex[:8]],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=REPO,
            check=False,
        )
    finally:
        server.shutdown()
        thread.join(timeout=10)
    assert out.returncode == 0, out.stderr
    trace_id = out.stdout.strip().splitlines()[-1]
    assert paths and all(p == "/v1/traces" for p in paths)
    spans = []
    for body in received:
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        for rs in req.resource_spans:
            service_name = next(
                a.value.string_value for a in rs.resource.attributes if a.key == "service.name"
            )
            assert service_name == "gpufed-test"
            spans += [s for ss in rs.scope_spans for s in ss.spans]
    submit = [s for s in spans if s.name == "gpufed.job.submit"]
    assert len(submit) == 1 and submit[0].trace_id.hex() == trace_id


def test_readyz_names_each_check_that_fails_and_why(
    world: tuple[BrokerService, FlakyGateway], redis_url: str
) -> None:
    """The checks `gpufed serve` wires (lease, records, draining beside redis), each on its real part."""
    service, _ = world
    empty = RedisStateStore(redis_url, prefix="empty" + uuid.uuid4().hex[:8])  # never initialised
    dead = RedisLease(f"redis://127.0.0.1:{free_port()}/0", "gone", "replica-a", lease_seconds=1.0)
    leadership = Leadership(dead, on_elected=lambda: None, on_deposed=lambda: None)
    leadership.tick()  # no answer from the lease's Redis
    drain = ha.Drain()
    checks = {
        "lease": leadership.readiness,
        "records": lambda: records_ready(empty),
        "draining": drain.readiness,
    }
    client = TestClient(create_app(service, service.clock, readiness=checks))
    r = client.get("/readyz")
    assert r.status_code == 503
    reasons = r.json()["reasons"]
    assert sorted(reasons) == ["lease", "records"]  # not draining yet
    assert "leader lease unavailable" in reasons["lease"]
    assert "rebuilding the job records" in reasons["records"]

    drain.begin()
    reasons = client.get("/readyz").json()["reasons"]
    assert "draining" in reasons and "another replica" in reasons["draining"]
    empty.close()
