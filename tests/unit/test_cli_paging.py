"""`gpufed jobs` walks a paged list as kubectl does (--chunk-size, default 500): it follows
metadata.continue to the last page and prints every job once; --chunk-size 0 asks once, unpaged. A tiny
real HTTP server stands in for the broker and records the queries it was sent."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from broker import cli
from tests.conftest import free_port

JOBS = [
    {
        "id": f"j{i:03d}",
        "name": f"train-{i}",
        "tenant": "default",
        "state": "RUNNING" if i % 2 else "QUEUED",
        "reason": "",
        "attempt": 0,
        "cluster": "onprem-a" if i % 2 else None,
        "workload": None,
        "placement": None,
        "createdAt": 1000.0 + i,
        "updatedAt": 1000.0 + i,
        "request": {"gpus": 1, "pods": 1, "gpuProducts": []},
        "queuePosition": None,
        "queueReason": None,
    }
    for i in range(7)
]


class _PagedJobs(BaseHTTPRequestHandler):
    queries: list[dict[str, list[str]]] = []

    def do_GET(self) -> None:
        url = urlparse(self.path)
        query = parse_qs(url.query)
        type(self).queries.append(query)
        states = set(query.get("state", []))
        matching = [j for j in JOBS if not states or j["state"] in states]
        start = int(query["continue"][0].removeprefix("at-")) if "continue" in query else 0
        limit = int(query["limit"][0]) if "limit" in query else len(matching)
        page = matching[start : start + limit]
        metadata = {"continue": f"at-{start + limit}"} if start + limit < len(matching) else {}
        body = json.dumps({"kind": "JobList", "metadata": metadata, "items": page}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def broker_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("GPUFED_CONFIG", "/dev/null")
    for var in ("GPUFED_URL", "GPUFED_TOKEN", "GPUFED_CONTEXT"):
        monkeypatch.delenv(var, raising=False)
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _PagedJobs)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _PagedJobs.queries = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def jobs_json(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    capsys.readouterr()
    assert cli.run(["jobs", "-o", "json", *argv]) == 0, capsys.readouterr().err
    return [j["id"] for j in json.loads(capsys.readouterr().out)["items"]]


def test_jobs_follows_continue_to_the_last_page(broker_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert jobs_json(capsys, "--server", broker_url, "--chunk-size", "3") == [j["id"] for j in JOBS]
    assert [q.get("limit") for q in _PagedJobs.queries] == [["3"], ["3"], ["3"]]
    assert [q.get("continue") for q in _PagedJobs.queries] == [None, ["at-3"], ["at-6"]]


def test_filters_go_with_every_page(broker_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    ids = jobs_json(capsys, "--server", broker_url, "--state", "running", "--chunk-size", "2")
    assert ids == [j["id"] for j in JOBS if j["state"] == "RUNNING"]
    assert all(q["state"] == ["RUNNING"] for q in _PagedJobs.queries) and len(_PagedJobs.queries) == 2


def test_default_chunk_is_500_and_zero_asks_once_unpaged(
    broker_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert jobs_json(capsys, "--server", broker_url) == [j["id"] for j in JOBS]
    assert _PagedJobs.queries[-1]["limit"] == ["500"]
    _PagedJobs.queries = []
    assert jobs_json(capsys, "--server", broker_url, "--chunk-size", "0") == [j["id"] for j in JOBS]
    assert len(_PagedJobs.queries) == 1 and "limit" not in _PagedJobs.queries[0]


def test_a_table_lists_every_page(broker_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert cli.run(["jobs", "--server", broker_url, "--chunk-size", "4"]) == 0
    out = capsys.readouterr().out
    assert all(str(j["name"]) in out for j in JOBS) and len(_PagedJobs.queries) == 2
