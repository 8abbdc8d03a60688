"""A benchmark's results record (benchmarks/results_record.py, issue 49): each goal judged by code from
the measured figure, a record written and read back with what ran and the machine's calibration, and a
record whose verdict was edited by hand refused. fleet_scale's goals judge the whole process tree's idle
CPU (Ray's processes in it)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from benchmarks import results_record
from benchmarks.fleet_scale import FLEET_SCALE_GOALS
from benchmarks.results_record import Goal

AT_MOST_50 = Goal("p99", "p99_ms", "<=", 50)
AT_LEAST_1000 = Goal("rate", "per_s", ">=", 1000)
NONE_TWICE = Goal("twice", "twice", "==", 0)


@pytest.mark.parametrize(
    ("goal", "results", "passed"),
    [
        (AT_MOST_50, {"p99_ms": 49.9}, True),
        (AT_MOST_50, {"p99_ms": 50.0}, True),
        (AT_MOST_50, {"p99_ms": 50.1}, False),
        (AT_LEAST_1000, {"per_s": 999.0}, False),
        (AT_LEAST_1000, {"per_s": 1000}, True),
        (NONE_TWICE, {"twice": 0}, True),
        (NONE_TWICE, {"twice": 1}, False),
        (Goal("resent", "same", "==", 1), {"same": True}, True),
        (Goal("resent", "same", "==", 1), {"same": False}, False),
        (AT_MOST_50, {}, None),  # not measured: never counted as met
        (AT_MOST_50, {"p99_ms": math.nan}, None),
        (AT_MOST_50, {"p99_ms": "fast"}, None),
    ],
)
def test_each_goal_is_judged_from_its_figure(
    goal: Goal, results: dict[str, Any], passed: bool | None
) -> None:
    (judged,) = results_record.judge([goal], results)
    assert judged["passed"] is passed
    assert judged["name"] == goal.name and judged["limit"] == goal.limit


def _figures(**over: Any) -> dict[str, Any]:
    good = {
        "submit_per_s": 1500.0,
        "submit_p99_ms": 40.0,
        "running_after_s": 25.0,
        "idle_tree_cpu_pct": 2.0,
        "idle_cpu_pct_by_part": {"broker": 1.5, "Ray raylet": 0.5, "total": 2.0},
        "idle_redis_commands_per_s": 140.0,
        "idle_redis_kib_per_s": 9.0,
        "list_p99_ms": 20.0,
        "submit_errors": 0,
        "missing": 0,
        "created_twice": 0,
        "walk_seen_twice": 0,
        "resent_key_returns_its_job": True,
    }
    return {**good, **over}


def _record(results: dict[str, Any]) -> dict[str, Any]:
    calibration = {
        "what": "a fixed loop",
        "best": 140.0,
        "rounds": [120.0, 140.0],
        "loadavg": [4.5, 4.0, 3.0],
    }
    return results_record.build(
        "benchmarks.fleet_scale",
        ["--jobs", "200", "--record", "r.json"],
        results,
        FLEET_SCALE_GOALS,
        calibration,
        datetime(2026, 12, 7, 23, 30, tzinfo=UTC),
    )


def test_a_record_is_written_and_read_back_with_what_ran_and_every_verdict(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    results_record.write(path, _record(_figures()))
    back = results_record.read(path)
    assert back["command"][1:] == ["-m", "benchmarks.fleet_scale", "--jobs", "200", "--record", "r.json"]
    assert back["started"] == "2026-12-07T23:30:00+00:00"
    assert len(back["commit"]) >= 40 or back["commit"] == "unknown"
    assert back["calibration"]["best"] == 140.0
    assert back["results"]["idle_cpu_pct_by_part"]["Ray raylet"] == 0.5
    assert [g["passed"] for g in back["goals"]] == [True] * len(FLEET_SCALE_GOALS)
    assert back["all_goals_met"] is True


def test_the_idle_goal_is_judged_on_the_whole_tree_ray_included(tmp_path: Path) -> None:
    record = _record(_figures(idle_tree_cpu_pct=7.6, submit_per_s=936.0))
    failed = {g["result"] for g in record["goals"] if g["passed"] is False}
    assert failed == {"idle_tree_cpu_pct", "submit_per_s"}
    assert record["all_goals_met"] is False
    assert "FAIL         idle CPU of the whole tree (% of a core): 7.6 (goal <= 3)" in results_record.summary(
        record
    )


def test_a_figure_the_run_did_not_measure_does_not_meet_its_goal() -> None:
    figures = _figures()
    del figures["list_p99_ms"]
    record = _record(figures)
    assert [g["passed"] for g in record["goals"] if g["result"] == "list_p99_ms"] == [None]
    assert record["all_goals_met"] is False


def test_a_record_whose_verdict_was_edited_by_hand_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    record = _record(_figures(submit_p99_ms=55.0))
    for g in record["goals"]:
        g["passed"] = True
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="does not follow from its result"):
        results_record.read(path)
    path.write_text(json.dumps({**record, "schema": "other"}))
    with pytest.raises(ValueError, match="schema"):
        results_record.read(path)


def test_the_calibration_is_measured_in_the_run() -> None:
    calibration = results_record.calibrate(rounds=2)
    assert len(calibration["rounds"]) == 2
    assert calibration["best"] == max(calibration["rounds"]) > 0
    assert len(calibration["loadavg"]) == 3
