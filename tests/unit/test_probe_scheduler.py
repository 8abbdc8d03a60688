"""A poller shard at 1,000 clusters: its liveness probes and lag meter on the watch loop (adapters.probe_scheduler),
its pipelined heartbeat writes (adapters.summary_batch, real Redis) and shard sizing (broker.config.sizing)."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from adapters.cluster_watcher import ClusterWatcher
from adapters.kube_rest import KubeRest
from adapters.probe_scheduler import STARVED_LAG_SECONDS, LagMeter, ProbeScheduler, probe_wait
from adapters.redis_store import RedisStateStore
from adapters.summary_batch import put_summaries
from broker.config.sizing import poller_shards_for
from broker.core.errors import ClusterUnreachable
from broker.core.model import ClusterSummary, Health, Tier
from broker.health.machine import HealthThresholds, Outcome, timeout_cause


class FakeMember:
    """Answers probes ok or not (`cause` says how it failed); `hang` holds a probe until released (a member
    that does not answer)."""

    def __init__(self, cluster: str, ok: bool = True, cause: str = "connection refused") -> None:
        self.cluster = cluster
        self.ok = ok
        self.cause = cause
        self.hang: threading.Event | None = None
        self.calls: list[float] = []
        self.lags: list[float] = []
        self.last_success = 0.0  # of any call (the watcher's lists and watches included)

    async def probe(self, lag: Callable[[], float] | None = None) -> Outcome:
        while self.hang is not None and not self.hang.is_set():
            await asyncio.sleep(0.01)
        self.calls.append(time.monotonic())
        self.lags.append(lag() if lag else -1.0)
        return Outcome.success(time.time()) if self.ok else Outcome.failure(time.time(), self.cause)


def wait_until(pred: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


@pytest.fixture
def scheduler() -> Iterator[ProbeScheduler]:
    s = ProbeScheduler(lag=lambda: 0.25)
    yield s
    s.stop()


def test_every_member_is_probed_again_and_again_with_the_lag(scheduler: ProbeScheduler) -> None:
    members = [FakeMember(f"c{i}") for i in range(50)]
    for m in members:
        scheduler.add(m, interval=0.1, retry=0.02)
    wait_until(lambda: all(len(m.calls) >= 3 for m in members))
    assert all(lag == 0.25 for m in members for lag in m.lags)


def test_a_failing_member_is_probed_at_the_retry_interval(scheduler: ProbeScheduler) -> None:
    good, bad = FakeMember("good"), FakeMember("bad", ok=False)
    scheduler.add(good, interval=1.0, retry=0.05)
    scheduler.add(bad, interval=1.0, retry=0.05)
    wait_until(lambda: len(bad.calls) >= 6)
    assert len(good.calls) <= 2  # one probe per second: at most the first and one more


def test_a_member_that_timed_out_is_probed_again_at_the_interval_not_the_retry(
    scheduler: ProbeScheduler,
) -> None:
    refused, hung = FakeMember("refused", ok=False), FakeMember("hung", ok=False, cause=timeout_cause(2))
    scheduler.add(refused, interval=1.0, retry=0.05)
    scheduler.add(hung, interval=1.0, retry=0.05)
    wait_until(lambda: len(refused.calls) >= 6)
    assert len(hung.calls) <= 2  # a timeout has waited its deadline already: no new connection at once


def test_a_hung_member_does_not_hold_up_the_others(scheduler: ProbeScheduler) -> None:
    hung = FakeMember("hung")
    hung.hang = threading.Event()
    others = [FakeMember(f"c{i}") for i in range(10)]
    scheduler.add(hung, interval=0.05, retry=0.05)
    for m in others:
        scheduler.add(m, interval=0.05, retry=0.05)
    try:
        wait_until(lambda: all(len(m.calls) >= 5 for m in others))
        assert hung.calls == []
    finally:
        hung.hang.set()


def test_a_removed_member_is_not_probed_any_more(scheduler: ProbeScheduler) -> None:
    gone, kept = FakeMember("gone"), FakeMember("kept")
    scheduler.add(gone, interval=0.02, retry=0.02)
    scheduler.add(kept, interval=0.02, retry=0.02)
    wait_until(lambda: len(gone.calls) >= 2)
    scheduler.remove(gone)
    assert scheduler.scheduled() == ["kept"]
    seen = len(gone.calls)
    wait_until(lambda: len(kept.calls) >= 10)
    assert len(gone.calls) <= seen + 1  # one already running when it was removed may finish


@pytest.mark.parametrize(
    ("ok", "timeouts", "wait"),
    [(True, 0, 2.0), (False, 0, 0.25), (False, 1, 2.0), (False, 2, 4.0), (False, 3, 8.0), (False, 9, 8.0)],
)
def test_probes_back_off_after_timeouts_in_a_row_and_retry_soon_after_a_refusal(
    ok: bool, timeouts: int, wait: float
) -> None:
    assert probe_wait(2.0, 0.25, ok, timeouts) == wait


def test_a_member_back_from_a_hang_is_probed_at_once_not_after_the_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Probes that time out back off; when the member answers another call meanwhile (its watches and
    lists work again), the probe's cadence comes back at once: a member back from a hang must not stay
    unprobed, blind to its next fault, for the rest of a long backoff."""
    monkeypatch.setattr("adapters.probe_scheduler.TIMEOUT_BACKOFF_MAX", 1000.0)
    scheduler = ProbeScheduler(lag=lambda: 0.0)
    member = FakeMember("m", ok=False, cause=timeout_cause(2))
    try:
        scheduler.add(member, interval=0.2, retry=0.02)
        wait_until(lambda: len(member.calls) >= 6, timeout=30.0)  # the 6th timeout: the next 12.8 s later
        member.ok = True
        member.last_success = time.time()  # a list answered
        wait_until(lambda: len(member.calls) >= 7, timeout=6.0)
    finally:
        scheduler.stop()


def test_a_stopped_scheduler_probes_nothing_more() -> None:
    scheduler = ProbeScheduler()
    member = FakeMember("m")
    scheduler.add(member, interval=0.02, retry=0.02)
    wait_until(lambda: len(member.calls) >= 2)
    scheduler.stop()
    seen = len(member.calls)
    scheduler.add(FakeMember("late"), interval=0.02, retry=0.02)
    assert scheduler.scheduled() == []
    time_to_run_again = time.monotonic() + 0.2
    wait_until(lambda: time.monotonic() > time_to_run_again)
    assert len(member.calls) <= seen + 1


def test_the_lag_meter_keeps_the_worst_lateness_of_its_window() -> None:
    now = [100.0]
    meter = LagMeter(window=5.0, clock=lambda: now[0])
    assert meter.lag() == 0.0
    meter.note(100.0, 0.8)
    meter.note(101.0, 0.1)
    meter.note(102.0, -0.01)  # early wake-ups count as on time
    assert meter.lag() == 0.8
    now[0] = 105.5  # the 0.8 s sample is out of the window
    assert meter.lag() == 0.1
    now[0] = 200.0
    assert meter.lag() == 0.0


def test_the_lag_meter_measures_how_late_the_loops_ticks_wake() -> None:
    """On the watch loop, each tick's lateness is the time between its start and its wake-up less the
    tick. A clock that moves 0.25 s a reading makes every wake-up 0.24 s late (0.49 s when the test's
    own lag() read falls in between): the meter must say so."""
    readings = itertools.count(step=0.25)
    meter = LagMeter(tick=0.01, clock=lambda: float(next(readings)))
    meter.start()
    try:
        wait_until(lambda: len(meter._samples) >= 3)
        late = [round(lateness, 6) for _, lateness in list(meter._samples)]
        assert set(late) <= {0.24, 0.49}, late
        assert round(meter.lag(), 6) in (0.24, 0.49)
    finally:
        meter.stop()


@pytest.mark.parametrize(
    ("clusters", "configured", "shards"),
    [
        (0, None, 1),
        (10, None, 1),
        (100, None, 1),
        (125, None, 1),
        (126, None, 2),
        (1000, None, 8),
        (100_000, None, 64),
        (1000, 3, 3),
        (5, 4, 4),
    ],
)
def test_poller_shards_are_sized_from_the_fleet_unless_set(
    clusters: int, configured: int | None, shards: int
) -> None:
    assert poller_shards_for(clusters, configured) == shards


def test_a_bad_shard_count_names_the_setting() -> None:
    with pytest.raises(ValueError, match="pollerShards"):
        poller_shards_for(10, 0)


def test_heartbeat_summaries_are_written_in_one_pipeline_with_their_versions(redis_url: str) -> None:
    store = RedisStateStore(redis_url, prefix="hb" + uuid.uuid4().hex[:6])
    try:
        summaries = [ClusterSummary(cluster=f"c{i}", tier=Tier.ONPREM) for i in range(3)]
        first = put_summaries(store, summaries)
        again = put_summaries(store, summaries[:1])
        assert [s.version for s in first] == [1, 1, 1]
        assert again[0].version == 2
        assert {s.cluster for s in store.observed_summaries()} == {"c0", "c1", "c2"}
        assert put_summaries(store, []) == []
    finally:
        store.close()


class ScriptedWatches:
    """A member's GET /version on the loop: times out (`timeout`) or answers at once; no connection."""

    def __init__(self, timeout: bool) -> None:
        self.timeout_probe = timeout

    async def probe(self, timeout: tuple[float, float] = (1.5, 2.0)) -> None:
        if self.timeout_probe:
            raise ClusterUnreachable("member", "GET /version: timed out", cause=timeout_cause(2))


class ScriptedRest(KubeRest):
    """A member whose probes are scripted (ScriptedWatches); no connection is made."""

    def __init__(self, timeout: bool) -> None:
        self.cluster = "member"
        self.watches = ScriptedWatches(timeout)

    @property
    def aio(self) -> Any:
        return self.watches

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("lag", "counted"), [(0.0, True), (STARVED_LAG_SECONDS + 0.5, False)])
def test_a_probe_timeout_is_not_held_against_a_member_while_the_shard_is_starved(
    lag: float, counted: bool
) -> None:
    clock = [1000.0]
    watcher = ClusterWatcher("member", ScriptedRest(timeout=True), clock=lambda: clock[0])
    for _ in range(5):
        clock[0] += 0.5
        asyncio.run(watcher.probe(lambda: lag))
    clock[0] += 11.0  # past clusterLostSeconds without a success: lost either way
    view = watcher.health_view()
    assert view.health == Health.UNREACHABLE
    assert ("timeout after 2 s" in view.reason) is counted, view.reason


def test_a_starved_shard_does_not_make_a_quick_member_slow() -> None:
    clock = [1000.0]
    watcher = ClusterWatcher("member", ScriptedRest(timeout=False), clock=lambda: clock[0])
    outcome = asyncio.run(watcher.probe(lambda: 5.0))  # the probe's own latency is far below the shard's lag
    assert outcome.ok
    assert outcome.latency == 0.0


class RecordingProber(ProbeScheduler):
    """Keeps what each member was registered with instead of probing it."""

    def __init__(self) -> None:
        super().__init__()
        self.added: dict[str, tuple[float, float]] = {}

    def add(self, target: Any, interval: float, retry: float) -> None:
        self.added[target.cluster] = (interval, retry)

    def remove(self, target: Any) -> None:
        self.added.pop(target.cluster, None)


@pytest.mark.parametrize(("lost", "probe_every"), [(10.0, 2.0), (30.0, 6.0)])
def test_a_member_is_probed_at_the_interval_its_health_thresholds_set(
    lost: float, probe_every: float
) -> None:
    """settings.clusterLostSeconds 30 (a large fleet) probes each member every 6 s, not every 2 s."""
    prober = RecordingProber()
    watcher = ClusterWatcher(
        "member",
        ScriptedRest(timeout=False),
        resources=(),
        health=HealthThresholds.for_lost(lost),
        prober=prober,
    )
    watcher.start()
    try:
        assert prober.added["member"][0] == pytest.approx(probe_every)
    finally:
        watcher.stop()
        prober.stop()
    assert "member" not in prober.added
