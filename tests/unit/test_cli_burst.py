"""`gpufed spend` and the predicted start in `gpufed get`, against a tiny real HTTP server with canned
answers in the API's shapes (the shapes themselves are asserted in tests/integration/test_burst.py)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from broker import cli

SPEND = {
    "items": [
        {
            "tenant": "ml",
            "periodStart": 0,
            "period": "month",
            "spent": 1234.5,
            "gpuHours": 290.47,
            "runs": 12,
            "committed": 13.6,
            "budget": 1200.0,
            "left": -48.1,
            "overBudget": True,
        },
        {
            "tenant": "cv",
            "periodStart": 0,
            "period": "month",
            "spent": 3.4,
            "gpuHours": 0.8,
            "runs": 1,
            "committed": 0.0,
            "budget": None,
            "left": None,
            "overBudget": False,
        },
    ]
}
JOB = {
    "id": "j1",
    "name": "train",
    "state": "QUEUED",
    "cluster": None,
    "createdAt": 0,
    "reason": "wait: ...",
    "queuePosition": 2,
    "predictedWait": "predicted on-prem start in 42 min on onprem-b (H100-80GB)",
}


EXPLAIN = {
    "placed": False,
    "message": "0/3 clusters are available: 3 no node with 8 free H100-80GB.",
    "clusters": [],
    "queue": {
        "tenant": "ml",
        "position": 4,
        "reason": "behind 3 jobs",
        "heldByQuota": False,
        "borrowing": [],
    },
    "predictedWait": "predicted on-prem start in 42 min on onprem-b (H100-80GB), after 3 jobs ahead",
}


class _Canned(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.path = "POST " + self.path
        self.do_GET()

    def do_GET(self) -> None:
        body = {"/v1/spend": SPEND, "/v1/jobs/j1": JOB, "POST /v1/explain": EXPLAIN}.get(self.path)
        data = json.dumps(body).encode()
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("GPUFED_CONFIG", os.devnull)  # no config file (a named missing one is an error)
    for var in ("GPUFED_URL", "GPUFED_TOKEN", "GPUFED_CONTEXT"):
        monkeypatch.delenv(var, raising=False)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Canned)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_spend_table_names_the_tenant_over_budget(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["spend", "--server", url, "--token", "t" * 20]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["TENANT", "PERIOD", "SPENT", "RUNNING", "BUDGET", "LEFT"]
    assert out[1].split() == [
        "ml",
        "month",
        "$1,234.50",
        "$13.60",
        "$1,200.00",
        "$-48.10",
        "(over",
        "budget:",
        "no",
        "new",
        "burst)",
    ]
    assert out[2].split() == ["cv", "month", "$3.40", "$0.00", "-", "-"]


def test_get_shows_the_predicted_on_prem_start(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["get", "j1", "--server", url, "--token", "t" * 20]) == 0
    out = capsys.readouterr().out
    assert "#2 in queue; wait: ..." in out
    assert out.rstrip().endswith("predicted on-prem start in 42 min on onprem-b (H100-80GB)")


def test_explain_shows_where_and_when_it_would_start_on_prem(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.run(["explain", "--gpus", "8", "--server", url, "--token", "t" * 20]) == 1  # nothing fits now
    out = capsys.readouterr().out
    assert (
        "queue: position 4 for tenant ml: behind 3 jobs\npredicted on-prem start in 42 min on onprem-b" in out
    )


def test_spend_shows_what_burst_back_saved_once_a_tenant_has_a_saving(
    url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    saved = [dict(SPEND["items"][1], avoided=41.2, movedBack=3), dict(SPEND["items"][1], tenant="nlp")]
    monkeypatch.setitem(SPEND, "items", saved)
    assert cli.run(["spend", "--server", url, "--token", "t" * 20]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["TENANT", "PERIOD", "SPENT", "SAVED", "RUNNING", "BUDGET", "LEFT"]
    assert out[1].split() == ["cv", "month", "$3.40", "$41.20", "(3", "moved", "back)", "$0.00", "-", "-"]
    assert out[2].split() == ["nlp", "month", "$3.40", "$0.00", "$0.00", "-", "-"]  # an older API: none
