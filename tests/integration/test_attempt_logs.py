"""An earlier attempt's log after a migrate (issue 45): the stop keeps the attempt's log before its pods
are deleted, and `GET /v1/jobs/{id}/logs?attempt=N` (`gpufed logs --attempt N`) reads it back while the
next attempt runs elsewhere. The service over real Redis with a fake clock, a gateway that answers pod
logs, the API in-process; kubesim's real logs: tests/integration/test_following.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from adapters.redis_store import RedisStateStore
from broker.api.routes import create_app
from broker.controller.service import BrokerService
from broker.core.model import JobState
from broker.tenancy.auth import TokenTable, digest
from broker.workload import attempt_log
from tests.integration.test_migrate_service import (
    PRINCIPALS,
    TOKENS,
    TRAITS,
    CheckpointingGateway,
    _call,
    _job,
    _running,
    h100,
    store,  # noqa: F401  (the fixture)
)
from tests.service_doubles import ManualClock

pytestmark = pytest.mark.integration


class LoggingGateway(CheckpointingGateway):
    """Its pods say which cluster and attempt they are (PodLogs), while their Job is there."""

    def job_pods(self, cluster: str, namespace: str, job_id: str, attempt: int) -> list[str]:
        return [f"{cluster}-a{attempt}"]

    def pod_logs(
        self,
        cluster: str,
        namespace: str,
        pod: str,
        follow: bool = False,
        tail_lines: int | None = None,
        timestamps: bool = False,
    ) -> Iterator[bytes]:
        yield f"epoch 1 on {pod}\n".encode()
        yield f"epoch 2 on {pod}\n".encode()


def test_after_a_migrate_the_earlier_attempts_log_is_read_with_attempt_n(
    store: RedisStateStore,  # noqa: F811
) -> None:
    clock, gw = ManualClock(), LoggingGateway()
    svc = BrokerService(store, gw, clock, TRAITS)
    for c in ("c1", "c2"):
        store.put_summary(h100(c, 8))
    app = create_app(
        svc, clock, tokens=TokenTable({digest(TOKENS[w]): p for w, p in PRINCIPALS.items()}), logs=gw
    )
    job_id = _running(svc, store, _job("moved", clusters=("c1", "c2")))
    first = svc.get(job_id)
    other = "c2" if first.cluster == "c1" else "c1"
    r = _call(app, "alice", "POST", f"/v1/jobs/{job_id}/migrate", json={"to": other})
    assert r.status_code == 200, r.text
    svc.schedule_once()
    svc.sync_status()
    now = svc.get(job_id)
    assert now.state is JobState.RUNNING and now.cluster == other and now.attempt == first.attempt + 1
    earlier = _call(app, "alice", "GET", f"/v1/jobs/{job_id}/logs", params={"attempt": first.attempt})
    assert earlier.status_code == 200, earlier.text
    assert (
        earlier.text
        == f"epoch 1 on {first.cluster}-a{first.attempt}\nepoch 2 on {first.cluster}-a{first.attempt}\n"
    )
    tail = _call(
        app, "alice", "GET", f"/v1/jobs/{job_id}/logs", params={"attempt": first.attempt, "tailLines": 1}
    )
    assert tail.text == f"epoch 2 on {first.cluster}-a{first.attempt}\n"
    current = _call(app, "alice", "GET", f"/v1/jobs/{job_id}/logs")  # the running attempt: from the member
    assert current.text.startswith(f"epoch 1 on {other}-a{now.attempt}")
    never = _call(app, "alice", "GET", f"/v1/jobs/{job_id}/logs", params={"attempt": 9})
    assert never.status_code == 409 and f"logs kept: {first.attempt}" in never.text
    assert _call(app, "bob", "GET", f"/v1/jobs/{job_id}/logs", params={"attempt": 1}).status_code == 404


def test_a_kept_log_is_bounded_per_attempt_and_in_attempts(store: RedisStateStore) -> None:  # noqa: F811
    big = b"".join(f"line {i:06d} {'x' * 100}\n".encode() for i in range(2000))  # ~220 KiB
    kept = attempt_log.collect(["p"], lambda _: [big])
    assert len(kept) <= attempt_log.MAX_BYTES and kept.endswith(b"line 001999 " + b"x" * 100 + b"\n")
    assert kept.startswith(b"line ")  # cut at a line boundary
    for attempt in range(1, attempt_log.KEEP_ATTEMPTS + 3):
        store.put_attempt_log("j1", attempt, kept)
    assert store.attempt_log_numbers("j1") == list(range(3, attempt_log.KEEP_ATTEMPTS + 3))
    assert store.attempt_log("j1", 1) is None and store.attempt_log("j1", 3) == kept
    assert 0 < store.client.ttl(store._k("attempt-logs", "j1")) <= 7 * 86400


def test_with_nothing_kept_the_answer_says_the_job_was_removed_after_its_ttl() -> None:
    said = attempt_log.gone("j1", "SUCCEEDED", 1, "c1", 3600)
    assert said == (
        "job j1 ended (SUCCEEDED); its Job in c1 is removed 3600 s (finishedJobTtlSeconds) after it "
        "finished, with its pods and their logs, and no log of attempt 1 was kept"
    )
    assert (
        attempt_log.gone("j1", "RUNNING", 2, "c1", 3600)
        == "attempt 2 of job j1 has no pods in c1 and no log of it was kept"
    )
