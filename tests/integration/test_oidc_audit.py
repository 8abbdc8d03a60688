"""Single sign-on, the audit trail and credentials that change while the broker runs, on real parts:
a local OIDC issuer (discovery and JWKS over HTTP on 127.0.0.1, RS256 keys made by the test), real Redis,
the API in-process (httpx over ASGITransport) with the composition's AuthRuntime (broker.app.auth) and
its tokens-file watcher, and `gpufed audit` against the same app served by uvicorn.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
import yaml

from adapters.audit_store import RedisAuditLog
from adapters.oidc_keys import IssuerKeys
from adapters.redis_store import RedisStateStore
from broker.api.routes import create_app
from broker.app.auth import AuthRuntime, token_table
from broker.config.settings import FleetConfig, parse_fleet_config
from broker.controller.service import BrokerService
from broker.core.model import ClusterTraits, JobEvent, JobRequest, JobState
from broker.tenancy.audit import AuditQuery, AuditRecord
from tests.conftest import free_port, wait_for
from tests.oidc_issuer import AUDIENCE, LocalIssuer
from tests.service_doubles import ManualClock, RecordingGateway

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TOKENS = {
    "alice": "alice-token-0123456789",
    "root": "root-token-0123456789a",
    "watcher": "watcher-token-01234567",
}
ENTRIES = [
    {"name": "alice", "tenant": "ml", "role": "user", "token": TOKENS["alice"]},
    {"name": "root", "tenant": "ops", "role": "admin", "token": TOKENS["root"]},
    {"name": "watcher", "tenant": "ops", "role": "viewer", "token": TOKENS["watcher"]},
]


@pytest.fixture(scope="module")
def issuer() -> Iterator[LocalIssuer]:
    with LocalIssuer().serving() as served:
        yield served


class Broker:
    """The API over a BrokerService on real Redis, with the composition's credentials and audit trail."""

    def __init__(self, tmp_path: Path, redis_url: str, issuer: LocalIssuer) -> None:
        self.tokens_file = tmp_path / "tokens.yaml"
        self.tokens_file.write_text(yaml.safe_dump(ENTRIES))
        self.audit_file = tmp_path / "audit" / "audit.jsonl"
        prefix = "sso" + uuid.uuid4().hex[:8]
        self.cfg = self.config(tmp_path, redis_url, prefix, issuer)
        self.store = RedisStateStore(redis_url, prefix=prefix)
        self.service = BrokerService(
            self.store, RecordingGateway(), ManualClock(), {"c1": ClusterTraits("c1")}
        )
        self.auth = AuthRuntime(self.cfg, token_table(self.cfg, insecure_no_auth=False), self.store)
        self.app = create_app(
            self.service,
            self.service.clock,
            tokens=self.auth.credentials,
            audit=self.auth.writer,
            audit_log=self.auth.log,
        )
        self.auth.start()

    def config(self, tmp_path: Path, redis_url: str, prefix: str, issuer: LocalIssuer) -> FleetConfig:
        raw = {
            "clusters": [{"name": "c1", "kubeconfig": "c1.kubeconfig"}],
            "settings": {
                "redisUrl": redis_url,
                "redisPrefix": prefix,
                "configReloadSeconds": 0.1,
                "audit": {"logFile": str(self.audit_file)},
            },
            "auth": {
                "tokensFile": str(self.tokens_file),
                "oidc": {
                    "issuerUrl": issuer.url,
                    "audience": AUDIENCE,
                    "tenantsFromGroups": {"ml-team": "ml", "vision-team": "vision"},
                    "rolesFromGroups": {"auditors": "viewer"},
                    "keysRefetchSeconds": 0.2,
                },
            },
        }
        return parse_fleet_config(raw, "clusters.yaml", tmp_path)

    def close(self) -> None:
        self.auth.stop()
        self.store.close()

    def call(self, token: str | None, method: str, path: str, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {TOKENS.get(token, token)}"} if token else {}

        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app, client=("10.1.2.3", 40000))
            async with httpx.AsyncClient(transport=transport, base_url="http://gpufed") as client:
                return await client.request(method, path, headers=headers, **kw)

        return asyncio.run(go())

    def audit(self, **params: Any) -> dict[str, Any]:
        assert self.auth.writer.flush()
        r = self.call("root", "GET", "/v1/audit", params=params)
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body


@pytest.fixture
def broker(tmp_path: Path, redis_url: str, issuer: LocalIssuer) -> Iterator[Broker]:
    b = Broker(tmp_path, redis_url, issuer)
    yield b
    b.close()


def test_a_token_of_group_ml_team_submits_as_tenant_ml_and_the_audit_names_its_subject(
    broker: Broker, issuer: LocalIssuer
) -> None:
    sso = issuer.token(sub="ana@example.com", groups=["ml-team"])
    r = broker.call(sso, "POST", "/v1/jobs", json={"name": "train", "gpus": 1})
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["tenant"] == "ml"
    assert [j["id"] for j in broker.call(sso, "GET", "/v1/jobs").json()["items"]] == [job["id"]]

    items = broker.audit(verb="submit")["items"]
    assert len(items) == 1
    record = items[0]
    assert {k: record[k] for k in ("subject", "tenant", "role", "verb", "object", "outcome", "code")} == {
        "subject": "ana@example.com",
        "tenant": "ml",
        "role": "user",
        "verb": "submit",
        "object": f"job/{job['id']}",
        "outcome": "success",
        "code": 201,
    }
    assert record["sourceAddress"] == "10.1.2.3" and record["traceId"] == job["traceId"]
    logged = [yaml.safe_load(line) for line in broker.audit_file.read_text().splitlines()]
    assert any(r["verb"] == "submit" and r["subject"] == "ana@example.com" for r in logged)

    cancelled = broker.call(sso, "DELETE", f"/v1/jobs/{job['id']}")
    assert cancelled.status_code == 200
    (cancel,) = broker.audit(verb="cancel")["items"]
    assert (cancel["subject"], cancel["object"], cancel["tenant"]) == (
        "ana@example.com",
        f"job/{job['id']}",
        "ml",
    )


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        pytest.param(lambda i: i.token(exp_in=-300), "the token has expired", id="expired"),
        pytest.param(lambda i: i.token(aud="grafana"), "audience is not 'gpufed'", id="wrong audience"),
        pytest.param(
            lambda i: i.token(iss="https://idp.evil.example"),
            "was not issued by http://127.0.0.1",
            id="wrong issuer",
        ),
        pytest.param(
            lambda i: LocalIssuer(url=i.url).token(), "signature does not verify", id="foreign key, same kid"
        ),
    ],
)
def test_expired_wrong_audience_wrong_issuer_and_foreign_key_tokens_are_401(
    broker: Broker, issuer: LocalIssuer, make: Any, reason: str
) -> None:
    token = make(issuer)
    r = broker.call(token, "POST", "/v1/jobs", json={"name": "x", "gpus": 1})
    assert r.status_code == 401, r.text
    body = r.json()
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "Unauthorized", 401)
    assert reason in body["message"]
    assert broker.call(token, "GET", "/v1/jobs").status_code == 401
    refused = broker.audit(outcome="unauthenticated")["items"]
    assert [(x["verb"], x["object"], x["subject"]) for x in refused] == [
        ("read", "/v1/jobs", "system:anonymous"),
        ("submit", "jobs", "system:anonymous"),
    ]
    assert reason in refused[1]["reason"]
    assert broker.service.jobs() == []


def test_a_token_whose_groups_map_to_no_tenant_is_403_with_the_reason(
    broker: Broker, issuer: LocalIssuer
) -> None:
    r = broker.call(issuer.token(sub="eve", groups=["interns"]), "GET", "/v1/jobs")
    assert r.status_code == 403
    assert r.json()["message"] == (
        "eve: none of the token's groups (interns) maps to a tenant (claim 'groups', auth.oidc.tenantsFromGroups)"
    )
    (denied,) = broker.audit(outcome="denied")["items"]
    assert denied["verb"] == "read" and "interns" in denied["reason"]


def test_signing_keys_rotate_by_themselves(broker: Broker, issuer: LocalIssuer) -> None:
    assert broker.call(issuer.token(), "GET", "/v1/jobs").status_code == 200
    old = issuer.token()
    issuer.rotate("k-next")  # the issuer publishes a new key and drops the old one
    try:
        wait_for(
            lambda: broker.call(issuer.token(), "GET", "/v1/jobs").status_code == 200,
            timeout=10,
            what="a token signed with the new key to be accepted",
        )
        r = broker.call(old, "GET", "/v1/jobs")
        assert r.status_code == 401 and "kid 'k1'" in r.json()["message"]  # the retired key is gone
    finally:
        issuer.rotate("k1")


def test_an_unknown_kid_fetches_the_keys_once_per_interval_never_per_request(issuer: LocalIssuer) -> None:
    now = [1000.0]
    keys = IssuerKeys(issuer.url, min_refetch_seconds=10, clock=lambda: now[0])
    try:
        assert keys.signing_key("k1") is not None and keys.fetches == 1
        for _ in range(20):  # a burst of tokens naming a key nobody publishes
            assert keys.signing_key("k-unknown") is None
        assert keys.fetches == 1
        issuer.rotate("k2", keep=True)
        assert keys.signing_key("k2") is None  # inside the interval: not fetched yet
        now[0] += 11
        assert keys.signing_key("k2") is not None and keys.fetches == 2  # one fetch finds it
        assert keys.signing_key("k1") is not None and keys.fetches == 2
    finally:
        keys.close()
        issuer.rotate("k1")


def test_an_issuer_that_cannot_be_reached_or_is_another_keeps_the_keys_known() -> None:
    now = [0.0]
    with LocalIssuer().serving() as issuer:
        keys = IssuerKeys(issuer.url, min_refetch_seconds=1, max_age_seconds=60, clock=lambda: now[0])
        assert keys.signing_key("k1") is not None
        wrong = IssuerKeys(issuer.url + "/realms/other", clock=lambda: now[0])
        assert wrong.signing_key("k1") is None  # its discovery is not there: nothing trusted
        wrong.close()
    now[0] += 120  # the set is old and the issuer is gone: the known key still verifies
    assert keys.signing_key("k1") is not None
    assert keys.signing_key("k-new") is None
    keys.close()


def test_a_token_removed_from_the_tokens_file_is_refused_within_seconds_without_a_restart(
    broker: Broker,
) -> None:
    assert broker.call("alice", "GET", "/v1/jobs").status_code == 200
    broker.tokens_file.write_text(yaml.safe_dump([e for e in ENTRIES if e["name"] != "alice"]))
    wait_for(
        lambda: broker.call("alice", "GET", "/v1/jobs").status_code == 401,
        timeout=10,
        what="alice's removed token to be refused",
    )
    assert broker.call("root", "GET", "/v1/jobs").status_code == 200

    broker.tokens_file.write_text("- name: [not, a, token")  # broken: the tokens in force are kept
    wait_for(lambda: broker.auth.last_error is not None, timeout=10, what="the broken file to be seen")
    assert broker.call("root", "GET", "/v1/jobs").status_code == 200
    reloads = broker.audit(verb="reload")["items"]
    assert [(r["object"], r["outcome"]) for r in reloads] == [
        ("auth.tokensFile", "failure"),
        ("auth.tokensFile", "success"),
    ]
    assert reloads[0]["subject"] == "system:config-reload"


def test_the_audit_is_for_admins_and_viewers_filtered_and_paged(broker: Broker, issuer: LocalIssuer) -> None:
    ids = [
        broker.call("alice", "POST", "/v1/jobs", json={"name": f"a{i}", "gpus": 1}).json()["id"]
        for i in range(5)
    ]
    vision = issuer.token(sub="vic", groups=["vision-team"])
    assert broker.call(vision, "POST", "/v1/jobs", json={"name": "v", "gpus": 1}).status_code == 201
    assert broker.call("watcher", "POST", "/v1/jobs", json={"name": "w", "gpus": 1}).status_code == 403
    assert broker.call("alice", "GET", "/v1/audit").status_code == 403
    assert broker.auth.writer.flush()

    seen: list[str] = []
    page = broker.audit(verb="submit", subject="alice", limit=2)
    while True:
        seen += [r["object"] for r in page["items"]]
        more = page["metadata"].get("continue")
        if not more:
            break
        page = broker.audit(verb="submit", subject="alice", limit=2, **{"continue": more})
    assert seen == [f"job/{i}" for i in reversed(ids)]  # newest first, each once

    assert [r["subject"] for r in broker.audit(tenant="vision")["items"]] == ["vic"]
    denied = broker.audit(outcome="denied")["items"]
    assert [(r["subject"], r["role"], r["verb"]) for r in denied] == [
        ("alice", "user", "read"),
        ("watcher", "viewer", "submit"),
    ]
    watcher_view = broker.call("watcher", "GET", "/v1/audit", params={"subject": "vic"})
    assert watcher_view.status_code == 200 and len(watcher_view.json()["items"]) == 1
    assert broker.audit(since=0, until=1)["items"] == []

    token = broker.audit(verb="submit", limit=1)["metadata"]["continue"]
    r = broker.call("root", "GET", "/v1/audit", params={"verb": "cancel", "continue": token})
    assert r.status_code == 422 and r.json()["fields"][0]["field"] == "continue"


def test_no_token_or_secret_is_ever_in_a_record(broker: Broker, issuer: LocalIssuer) -> None:
    sso = issuer.token(groups=["ml-team"])
    expired = issuer.token(exp_in=-600)
    broker.call(sso, "POST", "/v1/jobs", json={"name": "t", "gpus": 1})
    broker.call(expired, "POST", "/v1/jobs", json={"name": "t", "gpus": 1})
    broker.call("alice", "POST", "/v1/jobs", json={"name": "t", "gpus": 1, "tenant": "vision"})  # 403
    broker.call("not-a-known-token-0123456789", "DELETE", "/v1/jobs/j-1")
    broker.call(None, "POST", "/v1/jobs", json={"name": "t", "gpus": 1})
    assert broker.auth.writer.flush()
    rows: Any = broker.store.client.xrange(broker.auth.log.key)
    stored = " ".join(str(fields) for _, fields in rows)
    logged = broker.audit_file.read_text()
    assert len(broker.audit()["items"]) == 5
    for secret in [*TOKENS.values(), "not-a-known-token-0123456789", sso, expired, sso.split(".")[2]]:
        assert secret not in stored and secret not in logged


@pytest.mark.race
def test_preemption_failover_and_budget_stop_are_recorded_once_from_the_job_events(
    broker: Broker, tmp_path: Path, redis_url: str, issuer: LocalIssuer
) -> None:
    other = AuthRuntime(broker.cfg, token_table(broker.cfg, insecure_no_auth=False), broker.store)
    other.start()  # a second replica following the same events
    try:
        record, _ = broker.service.submit(JobRequest(name="train", tenant="vision"))
        now = broker.service.clock.now()
        for reason in (
            "cluster c1 lost: unreachable for 12 s; requeued (attempt 0 abandoned)",
            "preempted by j-x (priority 100) to free 8 H100-80GB on c1; requeued (attempt 1 abandoned)",
            "hard budget: tenant vision has spent $101.00 of $100.00 this month; its cloud run stopped; requeued",
        ):
            broker.store.append_event(JobEvent(record.id, now, JobState.QUEUED, 1, reason))

        def acts() -> list[str]:
            items = broker.audit(subject="system:gpufed")["items"]
            return [r["verb"] for r in items]

        wait_for(lambda: len(acts()) >= 3, timeout=15, what="the broker's acts in the audit trail")
        assert acts() == ["budget-stop", "preempt", "failover"]
        assert {r["tenant"] for r in broker.audit(subject="system:gpufed")["items"]} == {"vision"}
    finally:
        other.stop()


@pytest.fixture
def served(broker: Broker) -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(broker.app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, timeout=30, what="the API to listen")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _gpufed(*args: str, token: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GPUFED_TOKEN", "GPUFED_URL")}
    env["GPUFED_TOKEN"] = token
    return subprocess.run(
        [str(REPO / ".venv" / "bin" / "gpufed"), *args],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_cli_submits_with_an_sso_token_and_shows_the_audit(
    broker: Broker, issuer: LocalIssuer, served: str
) -> None:
    sso = issuer.token(sub="ana", groups=["ml-team"])
    submitted = _gpufed("submit", "from-sso", "--gpus", "1", "--server", served, token=sso)
    assert submitted.returncode == 0, submitted.stderr
    assert broker.auth.writer.flush()
    shown = _gpufed(
        "audit",
        "--verb",
        "submit",
        "--since",
        "10m",
        "-o",
        "wide",
        "--server",
        served,
        token=TOKENS["watcher"],
    )
    assert shown.returncode == 0, shown.stderr
    header, row = shown.stdout.splitlines()[:2]
    assert header.split()[:7] == ["TIME", "SUBJECT", "TENANT", "ROLE", "VERB", "OBJECT", "OUTCOME"]
    assert row.split()[1:5] == ["ana", "ml", "user", "submit"] and "success" in row
    refused = _gpufed("audit", "--server", served, token=sso)
    assert refused.returncode == 4 and "admins and viewers" in refused.stderr


def test_the_cli_gets_an_sso_token_from_an_exec_credential_plugin(
    broker: Broker, issuer: LocalIssuer, served: str, tmp_path: Path
) -> None:
    """kubectl's model: the context names a plugin that prints an ExecCredential (kubelogin would sign
    the user in); the CLI sends its token."""
    token_file = tmp_path / "id_token"
    token_file.write_text(issuer.token(sub="ana", groups=["ml-team"]))
    plugin = tmp_path / "login.py"
    plugin.write_text(
        "import json, pathlib, sys\n"
        "token = pathlib.Path(sys.argv[1]).read_text()\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',"
        " 'status': {'token': token}}))\n"
    )
    config = tmp_path / "gpufed-config.yaml"
    exec_block = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": sys.executable,
        "args": [str(plugin), str(token_file)],
    }
    config.write_text(
        yaml.safe_dump(
            {"current-context": "sso", "contexts": [{"name": "sso", "server": served, "exec": exec_block}]}
        )
    )
    env = {k: v for k, v in os.environ.items() if k not in ("GPUFED_TOKEN", "GPUFED_URL", "GPUFED_CONTEXT")}
    env["GPUFED_CONFIG"] = str(config)
    done = subprocess.run(
        [str(REPO / ".venv" / "bin" / "gpufed"), "submit", "via-plugin", "--gpus", "1"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    (job,) = [j for j in broker.service.jobs() if j.request.name == "via-plugin"]
    assert job.request.tenant == "ml"
    assert [r["subject"] for r in broker.audit(verb="submit")["items"]] == ["ana"]


def test_the_trail_in_redis_is_bounded_by_count_and_by_age(redis_url: str) -> None:
    store = RedisStateStore(redis_url, prefix="bounded" + uuid.uuid4().hex[:8])
    try:
        records = [
            AuditRecord(
                at=float(i),
                subject="ana",
                tenant="ml",
                role="user",
                verb="submit",
                object=f"job/{i}",
                outcome="success",
            )
            for i in range(2000)
        ]
        capped = RedisAuditLog(store.client, store.prefix, max_records=300)
        for i in range(0, 2000, 100):
            capped.append(records[i : i + 100])
        length: Any = store.client.xlen(capped.key)
        assert 300 <= length < 600  # trimmed by whole stream nodes (MAXLEN ~), never below the cap
        newest, _ = capped.page(AuditQuery(), 1, None)
        assert newest[0][1].object == "job/1999"

        aged = RedisAuditLog(store.client, store.prefix, retention_seconds=0.001)

        def trimmed() -> bool:
            aged.append(records[:1])  # each append trims what is past the retention
            return int(store.client.xlen(aged.key)) < 300

        wait_for(trimmed, timeout=10, what="records past the retention to be trimmed (MINID ~)")
    finally:
        store.client.delete(f"{store.prefix}:audit")
        store.close()
