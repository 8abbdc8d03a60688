"""broker.telemetry.event_lag: a poller's event-to-Redis latencies counted in memory between writes."""

from __future__ import annotations

import pytest

from broker.telemetry.event_lag import EventLagTally, LagCounts

BOUNDS = (0.1, 0.5, 1.0)


@pytest.mark.parametrize(
    ("observed", "le", "count"),
    [
        ([], None, 0),
        ([0.1], (1, 1, 1), 1),  # on a bound: counted in it, as Prometheus's le
        ([0.05, 0.3, 0.7], (1, 2, 3), 3),
        ([2.0], (0, 0, 0), 1),  # above every bound: only in +Inf (the count)
        ([0.0, 0.5, 0.5, 9.0], (1, 3, 3), 4),
    ],
)
def test_drain_gives_cumulative_buckets_per_cluster(
    observed: list[float], le: tuple[int, ...] | None, count: int
) -> None:
    tally = EventLagTally(BOUNDS)
    for seconds in observed:
        tally.observe("a", seconds)
    counts = tally.drain()
    if le is None:
        assert counts == {}
        return
    assert (counts["a"].le, counts["a"].count) == (le, count)
    assert counts["a"].seconds == pytest.approx(sum(observed))


def test_a_drain_empties_the_tally_and_restore_puts_unwritten_counts_back() -> None:
    tally = EventLagTally(BOUNDS)
    tally.observe("a", 0.3)
    tally.observe("b", 5.0)
    unwritten = tally.drain()
    assert tally.drain() == {}
    tally.observe("a", 0.05)
    tally.restore(unwritten)  # the write failed: the next drain carries both passes
    again = tally.drain()
    assert (again["a"].le, again["a"].count) == ((1, 2, 2), 2)
    assert again["a"].seconds == pytest.approx(0.35)
    assert again["b"] == LagCounts((0, 0, 0), 1, 5.0)


def test_bounds_that_do_not_increase_are_refused() -> None:
    with pytest.raises(ValueError, match="increase"):
        EventLagTally((0.5, 0.1))
