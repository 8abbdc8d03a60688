"""adapters.flush_scheduler: a shard's watchers flush on a timer and a few workers, one flush per burst,
never two of one watcher at once, one more when something arrives during a flush."""

from __future__ import annotations

import threading

from adapters.flush_scheduler import FlushScheduler, FlushSignal
from tests.conftest import wait_for


class Watcher:
    """Counts its flushes and how many ran at once; a flush can be held until released."""

    def __init__(self, interval: float = 0.05) -> None:
        self.flush_interval = interval
        self.flushes = 0
        self.running = 0
        self.most_at_once = 0
        self.hold: threading.Event | None = None
        self._lock = threading.Lock()

    def flush_due(self) -> None:
        with self._lock:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        if self.hold is not None:
            self.hold.wait(timeout=10)
        with self._lock:
            self.running -= 1
            self.flushes += 1


def test_a_burst_of_pokes_is_one_flush_after_the_interval() -> None:
    scheduler = FlushScheduler(workers=2)
    w = Watcher(interval=0.2)
    for _ in range(50):
        scheduler.poke(w)
    wait_for(lambda: w.flushes == 1, timeout=10, interval=0.005, what="the burst's flush")
    scheduler.poke(w)
    wait_for(lambda: w.flushes == 2, timeout=10, interval=0.005, what="the next poke's flush")
    scheduler.stop()
    assert w.flushes == 2


def test_a_poke_during_a_flush_brings_one_more_and_flushes_of_a_watcher_never_overlap() -> None:
    scheduler = FlushScheduler(workers=4)
    w = Watcher(interval=0.01)
    w.hold = threading.Event()
    scheduler.poke(w)
    wait_for(lambda: w.running == 1, timeout=10, interval=0.005, what="the first flush under way")
    for _ in range(10):
        scheduler.poke(w)  # arrivals while it flushes
    w.hold.set()
    wait_for(lambda: w.flushes == 2, timeout=10, interval=0.005, what="the one flush after it")
    scheduler.stop()
    assert w.flushes == 2
    assert w.most_at_once == 1


def test_many_watchers_flush_on_a_few_threads_and_a_signal_pokes_its_scheduler() -> None:
    before = threading.active_count()
    scheduler = FlushScheduler(workers=3)
    watchers = [Watcher() for _ in range(60)]
    signals = [FlushSignal(w, scheduler) for w in watchers]
    for s in signals:
        s.set()
    wait_for(
        lambda: all(w.flushes == 1 for w in watchers),
        timeout=10,
        interval=0.005,
        what="every watcher's flush",
    )
    assert threading.active_count() - before <= 4  # the timer and at most 3 workers
    scheduler.stop()
