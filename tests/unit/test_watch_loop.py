"""The watch loop (adapters/watch_loop.py) cancels the tasks of a set stop Event at once when asked
(check_stops_now, what Informer.join calls), not only at its periodic check."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest

from adapters import watch_loop
from adapters.watch_loop import WatchLoop


def test_a_stopped_task_ends_when_asked_not_at_the_next_periodic_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(watch_loop, "STOP_CHECK_SECONDS", 3600.0)  # the periodic check never comes
    loop = WatchLoop(name="test-watch-loop")
    stop = threading.Event()
    registered = threading.Event()

    async def forever() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop.cancel_on(stop, task)
        registered.set()
        await asyncio.Event().wait()  # a task that never ends by itself

    done = loop.submit(forever())
    assert registered.wait(30)
    stop.set()
    loop.check_stops_now()
    with pytest.raises(concurrent.futures.CancelledError):
        done.result(timeout=30)


def test_a_task_whose_event_is_not_set_is_left_running(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_loop, "STOP_CHECK_SECONDS", 3600.0)
    loop = WatchLoop(name="test-watch-loop")
    mine, other = threading.Event(), threading.Event()
    registered = threading.Event()

    async def forever(stop: threading.Event) -> None:
        task = asyncio.current_task()
        assert task is not None
        loop.cancel_on(stop, task)
        registered.set()
        await asyncio.Event().wait()  # a task that never ends by itself

    kept = loop.submit(forever(other))
    assert registered.wait(30)
    registered.clear()
    ended = loop.submit(forever(mine))
    assert registered.wait(30)
    mine.set()
    loop.check_stops_now()
    with pytest.raises(concurrent.futures.CancelledError):
        ended.result(timeout=30)
    assert not kept.done()
    other.set()
    loop.check_stops_now()
    with pytest.raises(concurrent.futures.CancelledError):
        kept.result(timeout=30)
