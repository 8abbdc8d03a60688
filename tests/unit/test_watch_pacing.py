"""The pacing of member connections (adapters/watch_pacing.py): the backoff and watch timeouts as pure
functions, and the gate's bound on connection set-ups in flight, with real asyncio tasks."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from adapters.watch_pacing import ConnectGate, reconnect_delay, watch_timeout


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
    async def scenario() -> ConnectGate:
        gate = ConnectGate(3)
        release = asyncio.Event()
        entered: list[int] = []

        async def connect(i: int) -> None:
            async with gate.slot():
                entered.append(i)
                await release.wait()

        tasks = [asyncio.create_task(connect(i)) for i in range(12)]
        await until(lambda: gate.in_flight == 3 and gate.waited == 9)
        assert len(entered) == 3  # the other nine wait for a slot
        release.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
        assert sorted(entered) == list(range(12))
        return gate

    gate = asyncio.run(scenario())
    assert gate.most_in_flight == 3 and gate.in_flight == 0 and gate.passed == 12


def test_a_cancelled_waiter_gives_up_without_a_slot() -> None:
    async def scenario() -> None:
        gate = ConnectGate(1)
        holder_release = asyncio.Event()

        async def hold() -> None:
            async with gate.slot():
                await holder_release.wait()

        async def wait() -> None:
            async with gate.slot():
                raise AssertionError("a cancelled waiter must not get the slot")

        holder = asyncio.create_task(hold())
        await until(lambda: gate.in_flight == 1)
        waiter = asyncio.create_task(wait())
        await until(lambda: gate.waited == 1)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        holder_release.set()
        await holder
        assert gate.in_flight == 0 and gate.passed == 1  # its slot was never taken, nor released twice
        async with gate.slot():
            assert gate.in_flight == 1

    asyncio.run(scenario())


async def until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    """Yield to the loop until `condition` holds (a deadline, not a sleep as synchronisation)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not condition():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0)
