"""The work queue's routing: a pass runs only the steps that care about what woke it (a job, a cluster,
capacity, a timer), plus those whose own deadline is due; a step that finds a change notes it for the
later steps of the same pass. Over an in-memory stand-in of the service and a hand-moved clock."""

from __future__ import annotations

import threading
import time
from typing import cast

import pytest

from broker.controller.control_loop import STEPS, ControlLoop
from broker.controller.service import BrokerService
from broker.controller.work_queue import Wake, WorkQueue
from tests.service_doubles import ManualClock

HEALTH_AND_TIMERS = [
    "observe_clusters",
    "enforce_budgets",
    "move_off_faulty_gpus",
    "note_reported_checkpoints",
    "burst_back",
]


class _Service:
    """The steps of a service: each records that it ran; `due` says which steps' own timers came (by a
    deadline on the hand-moved clock); a step in `notes` notes that wake when it runs."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.work = WorkQueue()
        self.ran: list[str] = []
        self.deadlines: dict[str, float] = {}
        self.notes: dict[str, Wake] = {}
        self.raises: set[str] = set()

    def _do(self, name: str) -> None:
        self.ran.append(name)
        if name in self.raises:
            raise RuntimeError(f"{name} broke")
        if name in self.notes:
            self.work.note(self.notes[name])

    def _due(self, name: str) -> bool:
        at = self.deadlines.get(name)
        return at is not None and self.clock.now() >= at

    def status_due(self) -> bool:
        return self._due("sync_status")

    def queue_due(self) -> bool:
        return self._due("schedule_once")

    def dependents_due(self) -> bool:
        return self._due("release_dependents")

    def seconds_until_a_loss(self) -> float | None:
        return None

    def __getattr__(self, name: str) -> object:
        if any(s.name == name for s in STEPS) or name == "sweep_orphans":
            return lambda: self._do(name)
        raise AttributeError(name)


@pytest.fixture
def service() -> _Service:
    return _Service(ManualClock())


def loop_of(service: _Service) -> ControlLoop:
    loop = ControlLoop(cast(BrokerService, service), sweep_interval_seconds=1e9)
    loop.run_once()  # the first pass: everything, and the sweep
    service.ran.clear()
    return loop


def test_a_pass_that_nothing_woke_runs_health_and_timers_only(service: _Service) -> None:
    loop = loop_of(service)
    loop.run_once(service.work.next_wakes(0))
    assert service.ran == HEALTH_AND_TIMERS  # nothing that reads the jobs


def test_a_job_change_runs_status_sync_and_scheduling(service: _Service) -> None:
    loop = loop_of(service)
    service.work.add_job("j1")
    wakes = service.work.next_wakes(60)
    assert wakes == {Wake.JOB}
    loop.run_once(wakes)
    assert service.ran == [
        "observe_clusters",
        "sync_status",
        "enforce_budgets",
        "release_dependents",
        "move_off_faulty_gpus",
        "schedule_once",
        "note_reported_checkpoints",
    ]


@pytest.mark.parametrize("what", [Wake.CAPACITY, Wake.CLUSTER])
def test_capacity_or_a_cluster_runs_scheduling_not_the_dependents(service: _Service, what: Wake) -> None:
    loop = loop_of(service)
    service.work.wake(what)
    loop.run_once(service.work.next_wakes(0))
    assert "schedule_once" in service.ran and "sync_status" in service.ran
    assert "release_dependents" not in service.ran


def test_a_change_noted_by_health_reaches_the_later_steps_of_the_same_pass(service: _Service) -> None:
    loop = loop_of(service)
    service.notes["observe_clusters"] = Wake.CAPACITY  # a summary moved: GPUs may be free
    loop.run_once(service.work.next_wakes(0))
    assert service.ran == [
        "observe_clusters",
        "sync_status",
        "enforce_budgets",
        "move_off_faulty_gpus",
        "schedule_once",
        "note_reported_checkpoints",
        "burst_back",
    ]
    service.notes.clear()
    service.ran.clear()
    loop.run_once(service.work.next_wakes(0))  # the note was for that pass only
    assert service.ran == HEALTH_AND_TIMERS


def test_a_step_whose_own_deadline_comes_runs_in_a_timer_pass(service: _Service) -> None:
    loop = loop_of(service)
    service.deadlines["sync_status"] = service.clock.t + 60  # e.g. the slow resync
    loop.run_once(service.work.next_wakes(0))
    assert "sync_status" not in service.ran
    service.clock.t += 60
    service.ran.clear()
    loop.run_once(service.work.next_wakes(0))
    assert service.ran == ["observe_clusters", "sync_status", *HEALTH_AND_TIMERS[1:]]


def test_a_step_that_failed_runs_again_in_the_next_pass_though_nothing_woke_it(service: _Service) -> None:
    loop = loop_of(service)
    service.raises.add("schedule_once")
    service.work.add_job("j1")
    loop.run_once(service.work.next_wakes(0))
    service.raises.clear()
    service.ran.clear()
    loop.run_once(service.work.next_wakes(0))  # a timer pass
    assert "schedule_once" in service.ran
    service.ran.clear()
    loop.run_once(service.work.next_wakes(0))  # it went through: back to health and timers
    assert service.ran == HEALTH_AND_TIMERS


def test_the_running_loop_is_woken_by_a_job_and_runs_its_steps(service: _Service) -> None:
    loop = ControlLoop(cast(BrokerService, service), interval_seconds=3600, sweep_interval_seconds=1e9)
    loop.start()
    try:
        deadline = time.monotonic() + 30
        while loop.passes < 1 and time.monotonic() < deadline:  # the first pass (everything)
            threading.Event().wait(0.01)
        service.ran.clear()
        service.work.add_job("j1")  # the informer's callback: the loop does not wait for its hour
        while "schedule_once" not in service.ran and time.monotonic() < deadline:
            threading.Event().wait(0.01)
        assert "sync_status" in service.ran and "schedule_once" in service.ran
    finally:
        loop.stop()
