"""What the CLI tells the user is true (issue 45): `gpufed submit` prints the API's warnings on stderr
as `Warning: ...`, as kubectl prints an API server's (a job no cluster could ever hold is accepted, exit
0, and the user is told so, whatever the output format); `gpufed explain` behind a queued job does not
say it would place now. The CLI against the real API over HTTP, on a real Redis."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator

import pytest
import uvicorn

from adapters.redis_store import RedisStateStore
from broker import cli
from broker.api.routes import create_app
from broker.controller.service import BrokerService
from broker.core.model import ClusterSummary, ClusterTraits, Health, ProductCapacity
from tests.conftest import free_port, wait_for
from tests.service_doubles import ManualClock, RecordingGateway

pytestmark = pytest.mark.integration

Gpufed = Callable[..., tuple[int, str, str]]


@pytest.fixture
def gpufed(
    redis_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Gpufed]:
    store = RedisStateStore(redis_url, prefix="cliwarn" + uuid.uuid4().hex[:8])
    clock = ManualClock()
    svc = BrokerService(store, RecordingGateway(), clock, {"c1": ClusterTraits("c1")})
    cap = ProductCapacity("H100-80GB", 81920, 16, 16, 0, 16, (0,) * 8 + (2,), nodes=2, whole_gpus=16)
    store.put_summary(ClusterSummary("c1", health=Health.HEALTHY, heartbeat=clock.now(), products=(cap,)))
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(svc, clock), host="127.0.0.1", port=port, log_level="warning", lifespan="off"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    monkeypatch.setenv("GPUFED_CONFIG", os.devnull)
    monkeypatch.setenv("GPUFED_URL", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("GPUFED_TOKEN", raising=False)

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = cli.run(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    try:
        wait_for(lambda: server.started, timeout=30, what="the API to listen")
        yield run
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        store.close()


@pytest.mark.parametrize("output", ["table", "yaml"])
def test_submit_prints_a_never_fit_warning_on_stderr_and_exits_0(gpufed: Gpufed, output: str) -> None:
    code, out, err = gpufed("submit", "huge", "--gpus", "8", "--pods", "100", "-o", output)
    assert code == 0, err
    assert err.startswith(
        "Warning: never fits: no declared cluster could hold 100 pods x 8 GPUs even empty"
    ), err
    assert "Warning:" not in out  # stdout stays the job alone (a script parses it)


def test_a_job_that_fits_prints_no_warning(gpufed: Gpufed) -> None:
    code, _, err = gpufed("submit", "ok", "--gpus", "8")
    assert code == 0 and "Warning:" not in err, err


def test_explain_behind_a_queued_job_does_not_say_it_would_place_now(gpufed: Gpufed) -> None:
    assert gpufed("submit", "ahead", "--gpus", "8")[0] == 0
    code, out, err = gpufed("explain", "--gpus", "8")
    assert code == 0, err
    head = out.splitlines()[0]
    assert head.startswith("would place on c1 once the 1 job ahead of it is placed: 8x nvidia.com/gpu"), out
    assert "queue: position 2" in out
