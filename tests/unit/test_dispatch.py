"""broker.controller.dispatch.ConcurrentDispatcher: per member cluster, at most `per_cluster` tasks at once,
in order; a hung cluster holds up only its own tasks; workers end when idle and start again with work."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

import pytest

from broker.controller.dispatch import ConcurrentDispatcher
from tests.conftest import wait_for


class Tasks:
    """Tasks that record their start and wait for `release`; counts how many ran at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started: list[str] = []
        self.running = 0
        self.most_at_once = 0
        self._lock = threading.Lock()

    def task(self, name: str) -> Callable[[], None]:
        def run() -> None:
            with self._lock:
                self.started.append(name)
                self.running += 1
                self.most_at_once = max(self.most_at_once, self.running)
            self.release.wait(timeout=10)
            with self._lock:
                self.running -= 1

        return run


def test_a_burst_on_one_cluster_runs_per_cluster_at_once_and_every_task_in_order() -> None:
    tasks = Tasks()
    dispatcher = ConcurrentDispatcher(per_cluster=3)
    for i in range(8):
        dispatcher.submit("a", tasks.task(f"t{i}"))
    wait_for(lambda: tasks.running == 3, timeout=10, interval=0.005, what="three tasks under way")
    tasks.release.set()
    assert dispatcher.wait_idle(10)
    assert tasks.most_at_once == 3
    assert sorted(tasks.started) == [f"t{i}" for i in range(8)]
    assert tasks.started[3:] == [f"t{i}" for i in range(3, 8)]  # the queued ones in submit order
    dispatcher.close()


def test_at_most_in_flight_tasks_run_at_once_across_clusters_and_the_rest_follow() -> None:
    """A burst onto many members runs `in_flight` tasks at once in all, not one per member: 2,000 creates
    onto 1,000 members at once overloaded them (docs/benchmarks.md), and their threads starved the loop."""
    tasks = Tasks()
    dispatcher = ConcurrentDispatcher(per_cluster=2, in_flight=3)
    for c in range(6):
        for i in range(2):
            dispatcher.submit(f"member-{c}", tasks.task(f"{c}.{i}"))
    wait_for(lambda: tasks.running == 3, timeout=10, interval=0.005, what="three tasks under way")
    assert len(tasks.started) == 3  # the others wait for a slot
    tasks.release.set()
    assert dispatcher.wait_idle(10)
    assert tasks.most_at_once == 3 and len(tasks.started) == 12
    dispatcher.close()


def test_a_cluster_sync_takes_no_slot_while_hung_members_hold_them_all() -> None:
    """Keyed tasks (a cluster's status sync or sweep) run beside the plain ones that fill every slot:
    members that hang on their creates hold up no other member's sync."""
    hung = Tasks()
    dispatcher = ConcurrentDispatcher(per_cluster=1, in_flight=2)
    for c in range(3):
        dispatcher.submit(f"hung-{c}", hung.task(f"create-{c}"))
    wait_for(lambda: hung.running == 2, timeout=10, interval=0.005, what="both slots taken")
    synced = threading.Event()
    assert dispatcher.submit_once("healthy", "sync", synced.set)
    assert synced.wait(timeout=10)
    assert len(hung.started) == 2
    hung.release.set()
    assert dispatcher.wait_idle(10)
    dispatcher.close()


def test_in_flight_must_be_positive() -> None:
    with pytest.raises(ValueError, match="in_flight"):
        ConcurrentDispatcher(in_flight=0)


def test_a_hung_cluster_holds_up_only_its_own_tasks() -> None:
    hung = Tasks()
    dispatcher = ConcurrentDispatcher(per_cluster=2)
    for i in range(4):
        dispatcher.submit("hung", hung.task(f"h{i}"))
    wait_for(
        lambda: hung.running == 2, timeout=10, interval=0.005, what="the hung cluster's workers to be busy"
    )
    done = threading.Event()
    dispatcher.submit("healthy", done.set)
    assert done.wait(timeout=10)
    assert len(hung.started) == 2  # its other two still wait behind its own workers
    hung.release.set()
    assert dispatcher.wait_idle(10)
    dispatcher.close()


def test_workers_end_when_idle_and_start_again_when_work_comes() -> None:
    dispatcher = ConcurrentDispatcher(per_cluster=4, idle_seconds=0.05)
    ran: list[str] = []
    for cluster in ("a", "b", "c"):
        dispatcher.submit(cluster, functools.partial(ran.append, cluster))
    assert dispatcher.wait_idle(10)
    wait_for(lambda: dispatcher.threads() == 0, timeout=10, interval=0.005, what="the idle workers to end")
    dispatcher.submit("a", lambda: ran.append("a again"))
    assert dispatcher.wait_idle(10)
    assert sorted(ran) == ["a", "a again", "b", "c"]
    dispatcher.close()
    assert dispatcher.threads() == 0


def test_close_runs_what_was_queued_and_refuses_new_tasks() -> None:
    tasks = Tasks()
    dispatcher = ConcurrentDispatcher(per_cluster=1)
    for i in range(3):
        dispatcher.submit("a", tasks.task(f"t{i}"))
    wait_for(lambda: tasks.running == 1, timeout=10, interval=0.005, what="the first task under way")
    closing = threading.Thread(target=dispatcher.close)
    closing.start()
    tasks.release.set()
    closing.join(timeout=10)
    assert not closing.is_alive()
    assert tasks.started == ["t0", "t1", "t2"]
    with pytest.raises(RuntimeError, match="closed"):
        dispatcher.submit("a", lambda: None)


def test_a_keyed_task_is_not_queued_twice_while_it_runs() -> None:
    tasks = Tasks()
    dispatcher = ConcurrentDispatcher(per_cluster=2)
    assert dispatcher.submit_once("a", "sync", tasks.task("sync"))
    wait_for(lambda: tasks.running == 1, timeout=10, interval=0.005, what="the sync under way")
    assert not dispatcher.submit_once("a", "sync", tasks.task("sync again"))
    tasks.release.set()
    assert dispatcher.wait_idle(10)
    assert dispatcher.submit_once("a", "sync", lambda: None)  # once done, it may come again
    assert dispatcher.wait_idle(10)
    assert tasks.started == ["sync"]
    dispatcher.close()
