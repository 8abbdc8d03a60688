"""The control loop's pass: a failing step does not stop the others; a stale lease ends the pass quietly."""

from __future__ import annotations

import logging
from typing import cast

import pytest

from broker.controller.control_loop import ControlLoop
from broker.controller.service import BrokerService
from broker.controller.work_queue import WorkQueue
from broker.core.errors import Fenced, StoreError


class _Steps:
    """Stands in for the service: records which steps ran, and raises where told."""

    def __init__(self, raises: dict[str, Exception]) -> None:
        self.raises = raises
        self.ran: list[str] = []
        self.work = WorkQueue()

    def _do(self, name: str) -> None:
        self.ran.append(name)
        if name in self.raises:
            raise self.raises[name]

    def observe_clusters(self) -> None:
        self._do("observe_clusters")

    def sync_status(self) -> None:
        self._do("sync_status")

    def enforce_budgets(self) -> None:
        self._do("enforce_budgets")

    def release_dependents(self) -> None:
        self._do("release_dependents")

    def move_off_faulty_gpus(self) -> None:
        self._do("move_off_faulty_gpus")

    def schedule_once(self) -> None:
        self._do("schedule_once")

    def note_reported_checkpoints(self) -> None:
        self._do("note_reported_checkpoints")

    def burst_back(self) -> None:
        self._do("burst_back")

    def sweep_orphans(self) -> None:
        self._do("sweep_orphans")


def test_a_broken_step_is_logged_and_the_rest_of_the_pass_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    steps = _Steps({"sync_status": RuntimeError("member API exploded")})
    loop = ControlLoop(cast(BrokerService, steps))
    loop.run_once()
    assert steps.ran == [
        "observe_clusters",
        "sync_status",
        "enforce_budgets",
        "release_dependents",
        "move_off_faulty_gpus",
        "schedule_once",
        "note_reported_checkpoints",
        "burst_back",
        "sweep_orphans",
    ]
    assert loop.step_failures == {"sync_status": 1}
    assert any(r.exc_info for r in caplog.records)  # a fault: its traceback is in the log


def test_a_stale_lease_ends_the_pass_with_one_line_and_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    steps = _Steps({"sync_status": Fenced("reserve j1: this broker's leader lease is no longer current")})
    loop = ControlLoop(cast(BrokerService, steps))
    with caplog.at_level(logging.WARNING):
        loop.run_once()
    assert steps.ran == ["observe_clusters", "sync_status"]  # nothing it would write could land
    assert loop.failures == 0  # not a fault of the step
    [line] = [r for r in caplog.records if r.name == "broker.controller.control_loop"]
    assert "no longer the leader" in line.getMessage()
    assert not line.exc_info


def test_a_store_that_does_not_answer_is_one_warning_a_minute_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    steps = _Steps({"observe_clusters": StoreError("redis: Connection refused")})
    loop = ControlLoop(cast(BrokerService, steps))
    with caplog.at_level(logging.INFO):
        for _ in range(50):  # 25 s of passes with Redis down
            loop.run_once()
        steps.raises.clear()
        loop.run_once()
    lines = [r for r in caplog.records if r.name == "broker.controller.control_loop"]
    assert [r.levelno for r in lines] == [logging.WARNING, logging.INFO]
    assert "Connection refused" in lines[0].getMessage()
    assert "answers again" in lines[1].getMessage()
    assert not any(r.exc_info for r in lines)
    assert loop.step_failures == {"observe_clusters": 50}
    assert "schedule_once" in steps.ran  # the other steps still ran every pass
