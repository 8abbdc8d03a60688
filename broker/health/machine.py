"""Cluster health as a state machine with hysteresis, fed by call outcomes (pure: no clock, no I/O).

Owns what "healthy" means for a member cluster:
    HealthThresholds   when a cluster is degraded, lost, and how long a better state must hold before it
                       is shown (settings.clusterLostSeconds is `lost_seconds`), and how often the poller
                       probes it; for_lost(lost, probe) derives the rest from settings.clusterLostSeconds
                       and settings.probeIntervalSeconds
    Outcome            one call to the cluster: ok, or failed with a classified cause ("connection
                       refused", "certificate verify failed", "timeout after 2 s", "credentials rejected
                       (401)", "HTTP 503 ServiceUnavailable"); `auth` marks a 401/403
    HealthMachine      outcomes in, (health, reason, since) out; evaluate(now) returns the Transition when
                       the shown state changes (the poller logs it with its cause)
    observed_health    what a reader of a published ClusterSummary should believe at `now`: a summary
                       whose heartbeat (the last SUCCESSFUL call) is older than lost_seconds is unreachable
                       ("stale"), whatever health it was written with, so a dead poller never leaves a
                       cluster healthy
    cause texts        CONNECTION_REFUSED, ..., timeout_cause(s), http_cause(code, reason): the vocabulary
                       adapters classify failures into

Rules, in order (raw state at `now`):
    forbidden     the latest credentials rejection (401/403) is newer than the latest success
    unreachable   no successful call for lost_seconds (since the machine started, if none ever succeeded)
    unknown       no success yet, but not lost yet (a cluster being connected to)
    degraded      at least min_samples calls in the last window_seconds, and either
                  failures / calls >= degraded_error_rate, or the median latency of the timed successful
                  calls (probes) >= degraded_latency_seconds
    healthy       otherwise
The first success after an outage (no success for lost_seconds) clears the window: the outage's failures
are not an error rate of the cluster that came back.
Hysteresis: a worse state is shown at once (lost_seconds and the window are the damping); a better one
only after the raw state has been better without a break for recover_seconds, so a cluster at 50% errors
does not flap between degraded and healthy. Severity: healthy < degraded < unreachable < forbidden.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from broker.core.model import ClusterSummary, Health

# ---------------------------------------------------------------- causes (what adapters classify into)

CONNECTION_REFUSED = "connection refused"
CONNECTION_RESET = "connection reset"
CERTIFICATE_FAILED = "certificate verify failed"
TLS_FAILED = "TLS handshake failed"
NAME_RESOLUTION = "name resolution failed"
STALE_POLLER = "no report from its poller (stale)"


def timeout_cause(seconds: float) -> str:
    return f"timeout after {seconds:g} s"


def http_cause(code: int, reason: str = "") -> str:
    """401/403 read as a person would; other codes as "HTTP 503 ServiceUnavailable"."""
    if code == 401:
        return "credentials rejected (401)"
    if code == 403:
        return "forbidden (403)"
    return f"HTTP {code} {reason}".strip()


# ---------------------------------------------------------------- the machine

_SEVERITY = {
    Health.HEALTHY: 0,
    Health.UNKNOWN: 0,
    Health.DEGRADED: 1,
    Health.UNREACHABLE: 2,
    Health.FORBIDDEN: 3,
}
_MAX_SAMPLES = 512


# A cluster lost after lost_seconds is probed every lost_seconds / PROBES_PER_LOSS by default (2 s at the
# default 10 s), at most every MAX_DEFAULT_PROBE_SECONDS: a lost verdict rests on several probes, not one.
PROBES_PER_LOSS = 5
MAX_DEFAULT_PROBE_SECONDS = 10.0
# The error-rate window: at least MIN_WINDOW_SECONDS, and at least WINDOW_PROBES probe intervals, so
# min_samples probes fit in it.
MIN_WINDOW_SECONDS = 10.0
WINDOW_PROBES = 5


@dataclass(frozen=True)
class HealthThresholds:
    lost_seconds: float = 10.0
    window_seconds: float = MIN_WINDOW_SECONDS
    degraded_error_rate: float = 0.3
    degraded_latency_seconds: float = 1.0
    min_samples: int = 4
    recover_seconds: float = 4.0
    # The poller's liveness probe (GET /version) of each cluster: every probe_interval_seconds after a
    # success (adapters.probe_scheduler; sooner after a failure).
    probe_interval_seconds: float = 2.0

    def __post_init__(self) -> None:
        for name in ("lost_seconds", "window_seconds", "degraded_latency_seconds", "probe_interval_seconds"):
            if getattr(self, name) <= 0:
                raise ValueError(f"HealthThresholds.{name} must be > 0")
        if self.probe_interval_seconds >= self.lost_seconds:
            raise ValueError(
                f"HealthThresholds.probe_interval_seconds ({self.probe_interval_seconds:g}) must be under "
                f"lost_seconds ({self.lost_seconds:g}): a cluster would be lost between two probes"
            )
        if not 0 < self.degraded_error_rate <= 1:
            raise ValueError("HealthThresholds.degraded_error_rate must be in (0, 1]")
        if self.min_samples < 1:
            raise ValueError("HealthThresholds.min_samples must be >= 1")
        if self.recover_seconds < 0:
            raise ValueError("HealthThresholds.recover_seconds must be >= 0")

    @classmethod
    def for_lost(cls, lost_seconds: float, probe_interval_seconds: float | None = None) -> HealthThresholds:
        """The thresholds for settings.clusterLostSeconds and settings.probeIntervalSeconds (None: lost /
        PROBES_PER_LOSS, at most MAX_DEFAULT_PROBE_SECONDS). The error-rate window grows with the interval
        (at least 10 s, at least WINDOW_PROBES intervals), so a slower probe still gives min_samples calls
        to judge; at the defaults (10 s, 2 s) this is HealthThresholds()."""
        probe = probe_interval_seconds
        if probe is None:
            probe = min(MAX_DEFAULT_PROBE_SECONDS, lost_seconds / PROBES_PER_LOSS)
        return cls(
            lost_seconds=lost_seconds,
            window_seconds=max(MIN_WINDOW_SECONDS, WINDOW_PROBES * probe),
            probe_interval_seconds=probe,
        )


@dataclass(frozen=True)
class Outcome:
    """One call to a member cluster. `latency` only for calls whose duration means something (probes)."""

    at: float
    ok: bool
    cause: str = ""
    latency: float | None = None
    auth: bool = False

    @classmethod
    def success(cls, at: float, latency: float | None = None) -> Outcome:
        return cls(at, True, latency=latency)

    @classmethod
    def failure(cls, at: float, cause: str, auth: bool = False) -> Outcome:
        return cls(at, False, cause or "unknown error", auth=auth)


@dataclass(frozen=True)
class HealthView:
    health: Health
    reason: str
    since: float
    last_success: float  # the heartbeat: epoch seconds of the last successful call (0: never)


@dataclass(frozen=True)
class Transition:
    cluster: str
    before: Health
    after: Health
    reason: str
    at: float

    def __str__(self) -> str:
        why = f": {self.reason}" if self.reason else ""
        return f"cluster {self.cluster}: health {self.before} -> {self.after}{why}"


class HealthMachine:
    """One cluster's health. Not thread-safe: its owner serialises observe() and evaluate()."""

    def __init__(self, cluster: str, thresholds: HealthThresholds, started_at: float) -> None:
        self.cluster = cluster
        self.thresholds = thresholds
        self._started = started_at
        self._samples: deque[Outcome] = deque(maxlen=_MAX_SAMPLES)
        self._last_ok = 0.0
        self._last_failure: Outcome | None = None
        self._auth: Outcome | None = None
        self._auth_causes: dict[str, float] = {}  # every 401/403 cause since the last success
        self._view = HealthView(Health.UNKNOWN, "connecting", started_at, 0.0)
        self._better_since: float | None = None

    @property
    def view(self) -> HealthView:
        return self._view

    @property
    def last_success(self) -> float:
        return self._last_ok

    def observe(self, outcome: Outcome) -> None:
        if outcome.ok and outcome.at - (self._last_ok or self._started) >= self.thresholds.lost_seconds:
            # The first success after an outage: the outage's failures say nothing about the error rate
            # from now on (else a cluster back from the dead would read degraded for a whole window).
            self._samples.clear()
        self._samples.append(outcome)
        if outcome.ok:
            self._last_ok = max(self._last_ok, outcome.at)
            self._auth_causes.clear()
        else:
            self._last_failure = outcome
            if outcome.auth:
                self._auth = outcome
                self._auth_causes[outcome.cause] = outcome.at

    def raw(self, now: float) -> tuple[Health, str]:
        """The state the outcomes say at `now`, before hysteresis."""
        t = self.thresholds
        if self._auth is not None and self._auth.at > self._last_ok:
            # every refusal since the last success, so the reason names what was refused
            return Health.FORBIDDEN, "; ".join(sorted(self._auth_causes)[:6])
        ref = self._last_ok or self._started
        if now - ref >= t.lost_seconds:
            cause = self._last_failure.cause if self._last_failure is not None else "no answer"
            return Health.UNREACHABLE, f"{cause}; no successful call for {t.lost_seconds:g} s"
        if not self._last_ok:
            cause = self._last_failure.cause if self._last_failure is not None else "connecting"
            return Health.UNKNOWN, cause
        while self._samples and self._samples[0].at < now - t.window_seconds:
            self._samples.popleft()
        n = len(self._samples)
        if n >= t.min_samples:
            failed = [o for o in self._samples if not o.ok]
            if len(failed) / n >= t.degraded_error_rate:
                return (
                    Health.DEGRADED,
                    f"{len(failed)} of {n} calls failed in {t.window_seconds:g} s (last: {failed[-1].cause})",
                )
            timed = sorted(o.latency for o in self._samples if o.ok and o.latency is not None)
            if len(timed) >= t.min_samples:
                median = timed[len(timed) // 2]
                if median >= t.degraded_latency_seconds:
                    return Health.DEGRADED, f"slow: median latency {median:.1f} s over {len(timed)} calls"
        return Health.HEALTHY, ""

    def evaluate(self, now: float) -> Transition | None:
        """Move the shown state (hysteresis applied); the Transition if it changed."""
        health, reason = self.raw(now)
        shown = self._view
        if health == shown.health:
            self._better_since = None
            if reason != shown.reason:
                self._view = HealthView(health, reason, shown.since, self._last_ok)
            elif self._last_ok != shown.last_success:
                self._view = HealthView(health, shown.reason, shown.since, self._last_ok)
            return None
        better = _SEVERITY[health] < _SEVERITY[shown.health] and shown.health != Health.UNKNOWN
        if better and health != Health.UNKNOWN:
            if self._better_since is None:
                self._better_since = now
            if now - self._better_since < self.thresholds.recover_seconds:
                self._view = HealthView(shown.health, shown.reason, shown.since, self._last_ok)
                return None
        elif better:  # back to "no success yet" cannot happen once a call succeeded; keep what is shown
            return None
        self._better_since = None
        self._view = HealthView(health, reason, now, self._last_ok)
        return Transition(self.cluster, shown.health, health, reason, now)


def observed_health(summary: ClusterSummary, now: float, lost_seconds: float) -> HealthView:
    """What to believe of a published summary at `now`. The poller rewrites its summaries every couple of
    seconds with heartbeat = its cluster's last successful call, so a heartbeat older than lost_seconds
    means the cluster or its poller is gone: unreachable, since heartbeat + lost_seconds."""
    ref = summary.heartbeat or summary.health_since
    age = now - ref
    if summary.health in (Health.HEALTHY, Health.DEGRADED, Health.UNKNOWN) and age >= lost_seconds:
        last = f"last successful call {age:.0f} s ago" if summary.heartbeat else "never a successful call"
        return HealthView(
            Health.UNREACHABLE, f"{STALE_POLLER}: {last}", ref + lost_seconds, summary.heartbeat
        )
    return HealthView(summary.health, summary.health_reason, summary.health_since, summary.heartbeat)
