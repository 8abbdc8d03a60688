"""The pacing of member connections (adapters/watch_pacing.py): the backoff and watch timeouts as pure
functions, and the gate's bound on connection set-ups in flight, with real threads."""

from __future__ import annotations

import threading

import pytest

from adapters.watch_pacing import ConnectGate, reconnect_delay, watch_timeout
from tests.conftest import poll_for


def test_the_backoff_doubles_per_failure_up_to_its_cap_and_is_spread_over_half_of_it() -> None:
    assert [reconnect_delay(n, 0.25, 10.0, 1.0) for n in (1, 2, 3, 4, 5, 6)] == [
        0.5,
        1.0,
        2.0,
        4.0,
        8.0,
        10.0,
    ]
    assert reconnect_delay(50, 0.25, 10.0, 1.0) == 10.0
    assert reconnect_delay(3, 0.25, 10.0, 0.0) == 1.0  # the lowest draw waits half
    spread = {round(reconnect_delay(4, 0.25, 10.0, d / 10), 3) for d in range(10)}
    assert len(spread) == 10 and min(spread) == 2.0 and max(spread) < 4.0
    assert reconnect_delay(0, 0.25, 10.0, 1.0) == 0.5  # never less than after one failure


def test_watch_timeouts_spread_over_the_jitter_and_none_without_it() -> None:
    assert {watch_timeout(60, 0.0, d / 10) for d in range(10)} == {60}
    spread = [watch_timeout(60, 0.5, d / 10) for d in range(10)]
    assert spread[0] == 60 and max(spread) <= 90 and len(set(spread)) == 10
    assert watch_timeout(0, 0.5, 0.9) == 1  # the server needs a positive timeoutSeconds


def test_a_gate_needs_a_slot() -> None:
    with pytest.raises(ValueError):
        ConnectGate(0)


def test_no_more_set_ups_in_flight_than_the_gate_has_slots() -> None:
    gate = ConnectGate(3)
    release = threading.Event()
    entered: list[int] = []
    lock = threading.Lock()

    def connect(i: int) -> None:
        with gate.slot() as held:
            assert held
            with lock:
                entered.append(i)
            release.wait(30)

    threads = [threading.Thread(target=connect, args=(i,), daemon=True) for i in range(12)]
    for t in threads:
        t.start()
    poll_for("three set-ups in flight", lambda: gate.in_flight == 3 or None, 10, 0.01)
    poll_for("the others waiting", lambda: gate.waited == 9 or None, 10, 0.01)
    assert len(entered) == 3  # the other nine wait for a slot
    release.set()
    for t in threads:
        t.join(10)
    assert sorted(entered) == list(range(12))
    assert gate.most_in_flight == 3 and gate.in_flight == 0 and gate.passed == 12


def test_a_stopped_waiter_gives_up_without_a_slot() -> None:
    gate = ConnectGate(1)
    stop = threading.Event()
    assert gate.acquire()
    outcome: list[bool] = []

    def wait() -> None:
        with gate.slot(stop) as held:
            outcome.append(held)

    t = threading.Thread(target=wait, daemon=True)
    t.start()
    poll_for("the waiter to wait", lambda: gate.waited == 1 or None, 10, 0.01)
    stop.set()
    t.join(10)
    assert outcome == [False]
    gate.release()
    assert gate.in_flight == 0 and gate.acquire()  # its slot was never taken, nor released twice
