"""A benchmark run's machine-readable record (issue 49): what ran (command line, git commit, date), how
fast the machine was in the same run (a calibration figure), every result, and each goal judged by
code against its limit, never by hand. `--record FILE` on benchmarks/fleet_scale.py and
benchmarks/placement.py writes one; docs/benchmarks.md ("Issue 49: how figures are recorded") says how
to read them.

The calibration: a fixed CPU-bound loop of pure Python (hashing and a dict, no I/O, no allocation that
grows), run `CALIBRATION_ROUNDS` times on this process's core, its best round kept as rounds per
second: on an idle core it is the core's speed; on a shared machine the best of several short rounds
still comes close to that speed, and the spread between rounds (kept as well) shows how loaded it was.
It costs about half a second. The host's load average beside it (os.getloadavg, before and after) says
how many other runnable threads there were. A headline quotes a range over runs with this figure beside
it, so a reader can tell a fast hour from fast code."""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

SCHEMA = "gpufed.benchmark-record/1"
CALIBRATION_ROUNDS = 5
_CALIBRATION_STEPS = 20_000


@dataclass(frozen=True)
class Goal:
    """`result` (a key of the results) must be `op` `limit`."""

    name: str
    result: str
    op: Literal["<=", ">=", "=="]
    limit: float


def judge(goals: list[Goal], results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each goal with its measured value and `passed`: True or False, or None where the run did not
    measure it (a missing or non-numeric result, or NaN) - never counted as met."""
    out = []
    for g in goals:
        raw = results.get(g.result)
        value = float(raw) if isinstance(raw, int | float) and not math.isnan(raw) else None
        passed: bool | None = None
        if value is not None:
            passed = {"<=": value <= g.limit, ">=": value >= g.limit, "==": value == g.limit}[g.op]
        out.append({**asdict(g), "value": value, "passed": passed})
    return out


def calibrate(rounds: int = CALIBRATION_ROUNDS) -> dict[str, Any]:
    """The machine's speed now: rounds/s of a fixed pure-Python loop, the best of `rounds` and each."""
    per_round = []
    for _ in range(rounds):
        started = time.perf_counter()
        digest = b"gpufed"
        table: dict[int, int] = {}
        for i in range(_CALIBRATION_STEPS):
            digest = hashlib.sha256(digest).digest()
            table[i & 1023] = digest[0] + i
        per_round.append(1.0 / (time.perf_counter() - started))
    return {
        "what": f"rounds/s of {_CALIBRATION_STEPS} sha256 + dict steps (benchmarks/results_record.py), "
        f"best of {rounds}",
        "best": max(per_round),
        "rounds": per_round,
        "loadavg": list(os.getloadavg()),
    }


def git_commit(repo: Path | None = None) -> str:
    """HEAD's hash, `+dirty` when tracked files differ from it; `unknown` outside a git checkout."""
    cwd = repo or Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "diff", "--quiet", "HEAD"], cwd=cwd, capture_output=True, check=False
        ).returncode
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def build(
    benchmark: str,
    argv: list[str],
    results: dict[str, Any],
    goals: list[Goal],
    calibration: dict[str, Any],
    started: datetime,
) -> dict[str, Any]:
    judged = judge(goals, results)
    return {
        "schema": SCHEMA,
        "benchmark": benchmark,
        "command": [Path(sys.executable).name, "-m", benchmark, *argv],
        "commit": git_commit(),
        "started": started.isoformat(timespec="seconds"),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_end": list(os.getloadavg()),
        },
        "calibration": calibration,
        "results": results,
        "goals": judged,
        "all_goals_met": all(g["passed"] is True for g in judged),
    }


def write(path: Path, record: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)


def read(path: Path) -> dict[str, Any]:
    """A record written by `write`, checked: the schema, and each goal's verdict recomputed from its
    value (so an edited verdict is refused)."""
    record: dict[str, Any] = json.loads(path.read_text())
    if record.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {record.get('schema')!r}, expected {SCHEMA!r}")
    for key in ("command", "commit", "started", "calibration", "results", "goals"):
        if key not in record:
            raise ValueError(f"{path}: no {key!r}")
    goals = [Goal(g["name"], g["result"], g["op"], g["limit"]) for g in record["goals"]]
    again = judge(goals, record["results"])
    if [g["passed"] for g in again] != [g["passed"] for g in record["goals"]]:
        raise ValueError(f"{path}: a goal's verdict does not follow from its result")
    return record


def summary(record: dict[str, Any]) -> str:
    """One line a goal: `PASS|FAIL|NOT MEASURED name: value op limit`, then the calibration."""
    lines = []
    for g in record["goals"]:
        verdict = {True: "PASS", False: "FAIL", None: "NOT MEASURED"}[g["passed"]]
        value = "-" if g["value"] is None else f"{g['value']:.4g}"
        lines.append(f"{verdict:12} {g['name']}: {value} (goal {g['op']} {g['limit']:g})")
    cal = record["calibration"]
    lines.append(f"calibration {cal['best']:.1f} {cal['what']}; load average {cal['loadavg'][0]:.1f}")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m benchmarks.results_record FILE...: each record's verdicts
    for name in sys.argv[1:]:
        rec = read(Path(name))
        print(f"{name}: {' '.join(rec['command'])} at {rec['commit'][:12]}, {rec['started']}")
        print(summary(rec))
