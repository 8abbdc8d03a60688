"""The audit record and its reading, pure: what a job event says the broker did (preemption, failover,
budget stop, from the very reasons the broker writes), that no credential survives into a record, that
filters and continue tokens behave, and that the auth and audit settings name the bad field."""

from __future__ import annotations

from typing import Any

import pytest

from broker.app.auth import with_tokens_file
from broker.burst.spend import Budget, BudgetStop, Period
from broker.cli.audit import parse_time
from broker.cli.client import CliError
from broker.config.settings import parse_fleet_config
from broker.core.errors import ConfigError
from broker.core.model import JobEvent, JobRecord, JobRequest, JobState
from broker.tenancy.audit import (
    AuditQuery,
    AuditRecord,
    decode_continue,
    encode_continue,
    from_job_event,
    outcome_of,
    redact,
)
from broker.workload import lifecycle
from tests.oidc_issuer import LocalIssuer

JOB = JobRecord(id="j-1", request=JobRequest(name="train", tenant="ml"), state=JobState.RUNNING, attempt=1)


def _event(reason: str, state: JobState = JobState.QUEUED) -> JobEvent:
    return JobEvent("j-1", 100.0, state, 2, reason, None, "ab" * 16)


@pytest.mark.parametrize(
    ("event", "verb"),
    [
        pytest.param(
            _event(lifecycle.failover(JOB, "cluster onprem-a lost: unreachable for 12 s").reason),
            "failover",
            id="failover, requeued",
        ),
        pytest.param(
            _event("cluster onprem-a lost: unreachable (failover: never)", JobState.FAILED),
            "failover",
            id="failover, never",
        ),
        pytest.param(
            _event(
                lifecycle.failover(
                    JOB, "preempted by j-9 (priority 100000) to free 8 H100-80GB on onprem-b"
                ).reason
            ),
            "preempt",
            id="preempted",
        ),
        pytest.param(
            _event(
                lifecycle.failover(
                    JOB, BudgetStop("ml", ("j-1",), 101.0, Budget(100.0, Period.MONTH, hard=True)).reason
                ).reason
            ),
            "budget-stop",
            id="hard budget spent",
        ),
        pytest.param(_event("waiting for placement"), None, id="an ordinary wait"),
        pytest.param(_event("cluster onprem-a lost: x", JobState.RUNNING), None, id="not a move"),
    ],
)
def test_the_brokers_own_acts_are_read_from_job_events(event: JobEvent, verb: str | None) -> None:
    asked: list[str] = []

    def tenant_of(job_id: str) -> str:
        asked.append(job_id)
        return "ml"

    record = from_job_event(event, tenant_of)
    if verb is None:
        assert record is None
        assert asked == []  # no read of the job for an event that records nothing (one per submit)
        return
    assert record is not None
    assert (record.verb, record.object, record.subject, record.tenant, record.outcome) == (
        verb,
        "job/j-1",
        "system:gpufed",
        "ml",
        "success",
    )
    assert record.reason == event.reason and record.trace_id == "ab" * 16 and record.at == 100.0


def test_no_credential_survives_into_a_record() -> None:
    jwt_token = LocalIssuer().token()
    static = "alice-token-0123456789"
    record = AuditRecord(
        at=1.0,
        subject=f"Bearer {static}",
        tenant="ml",
        role="user",
        verb="submit",
        object="jobs",
        outcome="unauthenticated",
        reason=f"refused {jwt_token} (token: {static}; Authorization: Bearer {static})",
    )
    text = record.to_json()
    assert static not in text and jwt_token not in text and jwt_token.split(".")[1] not in text
    assert "[redacted]" in record.reason
    assert redact("the token has expired") == "the token has expired"  # words are not credentials


def test_outcomes_follow_the_status() -> None:
    assert [outcome_of(c) for c in (200, 201, 401, 403, 404, 422, 503)] == [
        "success",
        "success",
        "unauthenticated",
        "denied",
        "failure",
        "failure",
        "failure",
    ]


def test_queries_and_continue_tokens() -> None:
    r = AuditRecord(
        at=50.0, subject="ana", tenant="ml", role="user", verb="submit", object="job/j-1", outcome="success"
    )
    assert AuditQuery(
        subject="ana", verb="submit", tenant="ml", outcome="success", since=50, until=51
    ).matches(r)
    assert not AuditQuery(since=50.5).matches(r) and not AuditQuery(until=50).matches(r)
    assert not AuditQuery(tenant="vision").matches(r)
    assert AuditRecord.from_dict(r.to_dict()) == r

    q = AuditQuery(verb="cancel")
    token = encode_continue("1700000000000-3", q)
    assert decode_continue(token, q) == "1700000000000-3"
    with pytest.raises(ValueError, match="other filters"):
        decode_continue(token, AuditQuery(verb="submit"))
    for bad in ("garbage!", "e30", encode_continue("0-0", q)[:-3]):
        with pytest.raises(ValueError):
            decode_continue(bad, q)


BASE: dict[str, Any] = {"clusters": [{"name": "c1", "kubeconfig": "c1.kubeconfig"}]}
OIDC: dict[str, Any] = {
    "issuerUrl": "https://kc.example/realms/gpu",
    "audience": "gpufed",
    "tenantsFromGroups": {"ml-team": "ml"},
}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"auth": {}}, "auth: tokensFile or oidc: at least one is required"),
        (
            {"auth": {"oidc": {**OIDC, "issuerUrl": "http://kc.example/realms/gpu"}}},
            "auth.oidc.issuerUrl: 'http://kc.example/realms/gpu': the issuer's https:// URL",
        ),
        ({"auth": {"oidc": {**OIDC, "tenantsFromGroups": {}}}}, "auth.oidc.tenantsFromGroups"),
        (
            {"auth": {"oidc": {**OIDC, "tenantsFromGroups": {"ml-team": "ML"}}}},
            "auth.oidc.tenantsFromGroups: ml-team: 'ML' is not a tenant name",
        ),
        ({"auth": {"oidc": {**OIDC, "rolesFromGroups": {"ops": "root"}}}}, "auth.oidc.rolesFromGroups.ops"),
        (
            {"auth": {"oidc": {k: v for k, v in OIDC.items() if k != "audience"}}},
            "auth.oidc.audience: Field required",
        ),
        ({"settings": {"audit": {"retentionDays": 0}}}, "settings.audit.retentionDays"),
        ({"settings": {"audit": {"logfile": "/x"}}}, "settings.audit.logfile: Extra inputs"),
    ],
)
def test_bad_auth_and_audit_settings_name_the_field(tmp_path: Any, doc: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_fleet_config({**BASE, **doc}, "clusters.yaml", tmp_path)
    assert message in str(info.value)


def test_oidc_alone_is_enough_and_loopback_issuers_may_be_http(tmp_path: Any) -> None:
    cfg = parse_fleet_config(
        {**BASE, "auth": {"oidc": {**OIDC, "issuerUrl": "http://127.0.0.1:5556/dex"}}},
        "clusters.yaml",
        tmp_path,
    )
    assert cfg.auth is not None and cfg.auth.tokens_file is None and cfg.auth.oidc is not None
    assert cfg.auth.oidc.policy().tenants_from_groups == {"ml-team": "ml"}


def test_the_helm_charts_tokens_file_keeps_the_configs_oidc(tmp_path: Any) -> None:
    cfg = parse_fleet_config({**BASE, "auth": {"oidc": OIDC}}, "clusters.yaml", tmp_path)
    mounted = with_tokens_file(cfg, "/etc/gpufed/auth/tokens.yaml")
    assert cfg.auth is not None and mounted.auth is not None
    assert mounted.auth.oidc == cfg.auth.oidc
    assert str(mounted.auth.tokens_file) == "/etc/gpufed/auth/tokens.yaml"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", 1000.0 - 90),
        ("15m", 100.0),
        ("2h", 1000.0 - 7200),
        ("1700000000", 1.7e9),
        ("2026-12-01T00:00:00Z", 1796083200.0),
    ],
)
def test_audit_times_on_the_command_line(text: str, expected: float) -> None:
    assert parse_time(text, "--since", now=1000.0) == expected


def test_a_bad_time_on_the_command_line_names_the_flag() -> None:
    with pytest.raises(CliError, match=r"--until: 'yesterday' is not 2h"):
        parse_time("yesterday", "--until", now=0.0)
