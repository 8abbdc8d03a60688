"""Cluster health (broker.health.machine): outcomes in, (health, reason, since) out, with hysteresis.

Each case is a script of call outcomes at given times and the health a reader must see at given times.
Default thresholds: lost 10 s, window 10 s, degraded at 30% errors (at least 4 calls) or a median probe
latency of 1 s, a better state shown only after 4 s without a break.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from broker.core.model import ClusterSummary, Health
from broker.health.machine import (
    STALE_POLLER,
    HealthMachine,
    HealthThresholds,
    Outcome,
    http_cause,
    observed_health,
    timeout_cause,
)

OK, REFUSED, RESET = "ok", "connection refused", "connection reset"
T0 = 1_000.0


def ok(at: float, latency: float | None = 0.01) -> Outcome:
    return Outcome.success(T0 + at, latency)


def fail(at: float, cause: str = REFUSED, auth: bool = False) -> Outcome:
    return Outcome.failure(T0 + at, cause, auth=auth)


def every(start: float, stop: float, step: float, make: type | object) -> list[Outcome]:
    out = []
    t = start
    while t < stop:
        out.append(make(t))  # type: ignore[operator]
        t += step
    return out


@dataclass
class Case:
    name: str
    outcomes: list[Outcome]
    checks: list[tuple[float, Health, str]]  # (time, health shown, a fragment of the reason)


CASES = [
    Case(
        "no call yet: unknown, then lost",
        [],
        [(1, Health.UNKNOWN, "connecting"), (10, Health.UNREACHABLE, "no answer")],
    ),
    Case(
        "a probe every 2 s: healthy, heartbeat fresh",
        every(0, 30, 2, ok),
        [(1, Health.HEALTHY, ""), (29, Health.HEALTHY, "")],
    ),
    Case(
        "one reset among probes is not a fault",
        [*every(0, 30, 2, ok), fail(11, RESET)],
        [(11.5, Health.HEALTHY, ""), (20, Health.HEALTHY, "")],
    ),
    Case(
        "down: unreachable within lost_seconds of the last success, with the cause",
        [*every(0, 10, 2, ok), *every(10, 40, 2, fail)],
        [
            (15, Health.DEGRADED, REFUSED),
            (18.1, Health.UNREACHABLE, "connection refused; no successful call"),
        ],
    ),
    Case(
        "back up: healthy again only after the quiet period",
        [*every(0, 10, 2, ok), *every(10, 30, 2, fail), *every(30, 60, 2, ok)],
        [(29, Health.UNREACHABLE, REFUSED), (31, Health.UNREACHABLE, REFUSED), (34.5, Health.HEALTHY, "")],
    ),
    Case(
        "expired token: forbidden at once, with the cause",
        [*every(0, 10, 2, ok), fail(10, http_cause(401), auth=True)],
        [(10, Health.FORBIDDEN, "credentials rejected (401)"), (30, Health.FORBIDDEN, "(401)")],
    ),
    Case(
        "token renewed: forbidden until the quiet period passes",
        [*every(0, 10, 2, ok), fail(10, http_cause(403), auth=True), *every(12, 40, 2, ok)],
        [(13, Health.FORBIDDEN, "forbidden (403)"), (16.5, Health.HEALTHY, "")],
    ),
    Case(
        "half the calls fail: degraded, and it does not flap",
        [
            o
            for i, t in enumerate(range(0, 60))
            for o in [ok(t) if i % 2 else fail(t, http_cause(503, "ServiceUnavailable"))]
        ],
        [(t, Health.DEGRADED, "HTTP 503") for t in (6, 13, 21, 33, 47, 59)],
    ),
    Case(
        "slow probes: degraded with the median latency",
        every(0, 30, 1, lambda t: ok(t, latency=1.5)),
        [(10, Health.DEGRADED, "median latency 1.5 s")],
    ),
    Case(
        "a hang: each probe times out; unreachable",
        [*every(0, 10, 2, ok), *every(12, 40, 3, lambda t: fail(t, timeout_cause(2)))],
        [(18.1, Health.UNREACHABLE, "timeout after 2 s")],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_health_follows_the_outcomes(case: Case) -> None:
    m = HealthMachine("c1", HealthThresholds(), T0)
    pending = sorted(case.outcomes, key=lambda o: o.at)
    clock = T0
    for at, want, fragment in case.checks:
        # Feed every outcome up to `at`, evaluating as the poller does after each one (and every 0.5 s).
        while clock < T0 + at:
            while pending and pending[0].at <= clock:
                m.observe(pending.pop(0))
                m.evaluate(clock)
            clock = round(clock + 0.5, 3)
            m.evaluate(clock)
        while pending and pending[0].at <= T0 + at:
            m.observe(pending.pop(0))
        m.evaluate(T0 + at)
        view = m.view
        assert (view.health, fragment in view.reason) == (want, True), (at, view)


def test_a_transition_names_its_cause_and_since_is_when_it_happened() -> None:
    m = HealthMachine("c1", HealthThresholds(lost_seconds=10), T0)
    m.observe(ok(0))
    assert m.evaluate(T0 + 1) is not None  # unknown -> healthy
    m.observe(fail(3))
    assert m.evaluate(T0 + 9) is None
    t = m.evaluate(T0 + 10)
    assert t is not None and (t.before, t.after) == (Health.HEALTHY, Health.UNREACHABLE)
    assert (
        str(t) == "cluster c1: health healthy -> unreachable: connection refused; no successful call for 10 s"
    )
    assert m.view.since == T0 + 10 and m.view.last_success == T0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("lost_seconds", 0),
        ("degraded_error_rate", 1.5),
        ("min_samples", 0),
        ("recover_seconds", -1),
        ("probe_interval_seconds", 0),
        ("probe_interval_seconds", 10),  # a member would be lost between two probes
    ],
)
def test_bad_thresholds_name_the_field(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        HealthThresholds(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("health", "heartbeat_age", "want", "reason"),
    [
        (Health.HEALTHY, 3, Health.HEALTHY, ""),
        (Health.HEALTHY, 11, Health.UNREACHABLE, STALE_POLLER),
        (Health.DEGRADED, 30, Health.UNREACHABLE, "last successful call 30 s ago"),
        (Health.FORBIDDEN, 30, Health.FORBIDDEN, "credentials"),
    ],
)
def test_a_summary_nobody_refreshes_reads_unreachable(
    health: Health, heartbeat_age: float, want: Health, reason: str
) -> None:
    s = ClusterSummary(
        cluster="c1",
        health=health,
        heartbeat=T0,
        health_reason="credentials rejected (401)" if health == Health.FORBIDDEN else "",
        health_since=T0 - 100,
    )
    view = observed_health(s, T0 + heartbeat_age, lost_seconds=10)
    assert view.health == want and reason in view.reason
    if want == Health.UNREACHABLE and health != want:
        assert view.since == T0 + 10


def test_causes_read_as_a_person_reads_them() -> None:
    assert http_cause(401) == "credentials rejected (401)"
    assert http_cause(503, "ServiceUnavailable") == "HTTP 503 ServiceUnavailable"
    assert timeout_cause(2.0) == "timeout after 2 s"
