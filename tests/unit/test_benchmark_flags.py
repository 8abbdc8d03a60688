"""A benchmark's label matches what runs (issue 49): an option that a sub-command of
benchmarks/placement.py (or a mode of benchmarks/burst.py or benchmarks/redis_failover.py) would ignore
is refused (exit 2, naming the option), and `submit --audited` runs the submit benchmark with a token
and the audit trail, as submit-audited does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import placement

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["core", "--audited"], "--audited"),
        (["submit-httpx", "--audited"], "--audited"),
        (["all", "--audited"], "--audited"),
        (["burst", "--clusters", "3"], "--clusters"),
        (["status", "--port", "8000"], "--port"),
        (["submit", "--prefix", "x"], "--prefix"),
        (["core", "--record", "r.json"], "--record"),
    ],
)
def test_an_option_the_sub_command_ignores_is_refused(argv: list[str], named: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.placement", *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"{argv[0]} ignores {named}" in done.stderr
    assert done.stdout == ""  # nothing ran


@pytest.mark.parametrize(
    ("module", "argv", "said"),
    [
        ("benchmarks.burst", ["--days", "11-12", "--seed", "3"], "--seed is ignored with --days"),
        ("benchmarks.burst", ["--hard"], "--hard needs --budget"),
        (
            "benchmarks.redis_failover",
            ["--cost", "--rate", "50", "--kill-after", "1"],
            "--cost ignores --rate, --kill-after",
        ),
    ],
)
def test_an_option_a_mode_ignores_is_refused(module: str, argv: list[str], said: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", module, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and done.stdout == ""


@pytest.mark.parametrize(("what", "audited"), [("submit", True), ("submit-audited", True), ("submit", False)])
def test_submit_audited_runs_with_the_token_and_the_audit_trail(
    what: str, audited: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[dict[str, Any]] = []

    def record(clusters: int, **kwargs: Any) -> None:
        calls.append({"clusters": clusters, **kwargs})

    monkeypatch.setattr(placement, "bench_submit", record)
    monkeypatch.setitem(placement.BENCHES, "submit", record)
    monkeypatch.setitem(placement.BENCHES, "submit-audited", lambda c: record(c, audited=True))
    argv = [what, "--clusters", "7", *(["--audited"] if audited and what == "submit" else [])]
    monkeypatch.setattr(sys, "argv", ["placement", *argv])
    placement.main()
    assert [c["clusters"] for c in calls] == [7]
    assert calls[0].get("audited", False) is audited


def test_every_sub_command_says_which_options_it_takes() -> None:
    assert set(placement.TAKES) == {*placement.BENCHES, "all", "serve-api"}
    assert placement.refused("submit", {"audited", "clusters", "record"}) == ""
    assert placement.refused("serve-api", {"audited", "clusters", "prefix", "port"}) == ""
