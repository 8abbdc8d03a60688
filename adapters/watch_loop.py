"""The event loop a process's informers run on: one thread holds every list and watch, not one thread each.

Owns:
    WatchLoop        an asyncio event loop on a daemon thread of its own: submit(coroutine) from any thread;
                     cancel_on(stop, task): the task is cancelled once a threading.Event is set (the
                     informers' owners stop them with an Event, as they stopped their threads), checked
                     every STOP_CHECK_SECONDS for all tasks that share an Event at once, or at once
                     on check_stops_now() (what Informer.join calls)
    shared_loop()    the process's one WatchLoop, started on first use (a poller shard's 1,000 watches and
                     the broker's member Jobs watches each live on one)
    TLS_READ_BUFFER_BYTES  asyncio's per-connection TLS read buffer, lowered from CPython's 256 KiB: 9,000
                     watches held 2.8 GiB at 256 KiB and 0.86 GiB at 32 KiB (docs/benchmarks.md, "Would one
                     event loop do it?"); a watch event larger than the buffer is read in several reads

Why: a thread per watch (9 per member in a poller shard) did not scale on two cores: at 300 members a
shard's ~2,700 threads starved its own publisher of the interpreter lock for 23-105 s. One loop opened
9,000 watches in 30 s of wall time and 16 s of CPU, and holds them idle at 0% of a core.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import concurrent.futures
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

TLS_READ_BUFFER_BYTES = 32 * 1024
# Idle, this check is the loop's only wake-up between watch events: once a second, not 5 times (issue 43);
# an owner that waits for its tasks to end (Informer.join) has them cancelled at once (check_stops_now)
STOP_CHECK_SECONDS = 1.0


class WatchLoop:
    """An asyncio event loop on a thread of its own, for many long-lived watches."""

    def __init__(self, name: str = "gpufed-watch-loop") -> None:
        self.name = name
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._lock = threading.Lock()
        self._started = False
        # tasks to cancel once their Event is set, grouped by the Event (touched on the loop's thread only)
        self._stops: dict[int, tuple[threading.Event, set[asyncio.Task[Any]]]] = {}

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER_BYTES
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.create_task(self._watch_stops())
        self._loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run a coroutine on the loop (from any thread); its Future says when it is done."""
        self.start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def cancel_on(self, stop: threading.Event, task: asyncio.Task[Any]) -> None:
        """Cancel `task` once `stop` is set (called on the loop's thread, e.g. by the task itself)."""
        if stop.is_set():
            task.cancel()
            return
        entry = self._stops.setdefault(id(stop), (stop, set()))
        entry[1].add(task)
        task.add_done_callback(lambda t: self._forget(stop, t))

    def _forget(self, stop: threading.Event, task: asyncio.Task[Any]) -> None:
        entry = self._stops.get(id(stop))
        if entry is not None and entry[0] is stop:
            entry[1].discard(task)
            if not entry[1]:
                del self._stops[id(stop)]

    def check_stops_now(self) -> None:
        """Cancel the tasks of every Event already set, now rather than at the next check (from any thread:
        an owner that waits for its tasks to end calls it after setting its Event)."""
        if self._started and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._cancel_stopped)

    def _cancel_stopped(self) -> None:
        for key, (stop, tasks) in list(self._stops.items()):
            if stop.is_set():
                self._stops.pop(key, None)
                for task in list(tasks):
                    task.cancel()

    async def _watch_stops(self) -> None:
        while True:
            await asyncio.sleep(STOP_CHECK_SECONDS)
            self._cancel_stopped()


_shared: WatchLoop | None = None
_shared_lock = threading.Lock()


def shared_loop() -> WatchLoop:
    """The process's WatchLoop (started on first use; it lives as long as the process)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = WatchLoop()
            _shared.start()
        return _shared
