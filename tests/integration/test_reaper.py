"""The reaper (adapters/reaper.py) on real processes, without Ray: a stand-in broker builds a Reaper,
starts a daemon that leaves its process tree (a shell backgrounds `setsid sleep` and exits, so the sleep
is re-parented and in a session of its own, as Ray's daemonised agents can be) and a plain child; killed
with SIGKILL, it leaves neither behind, while a process the broker did not start lives on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.race]

REPO = Path(__file__).resolve().parents[2]

STAND_IN_BROKER = """
import subprocess, sys, time
from adapters.reaper import Reaper
reaper = Reaper()
child = subprocess.Popen(["sleep", "600"])
shell = subprocess.run(["sh", "-c", "setsid sleep 600 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True)
print(reaper.pid, child.pid, shell.stdout.strip(), flush=True)
time.sleep(600)
"""


def _identity(pid: int) -> tuple[int, int, int] | None:
    """(parent pid, session id, start time) of a live, non-zombie process, else None."""
    try:
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if rest[0] == "Z" else (int(rest[1]), int(rest[3]), int(rest[19]))


def _same(pid: int, start: int) -> bool:
    ident = _identity(pid)
    return ident is not None and ident[2] == start


def test_sigkill_of_the_broker_leaves_no_process_it_started_not_even_a_daemon_outside_its_tree() -> None:
    bystander = subprocess.Popen(["sleep", "600"])  # not started by the broker: must survive
    broker = subprocess.Popen(
        [sys.executable, "-c", STAND_IN_BROKER], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert broker.stdout is not None
        reaper_pid, child_pid, daemon_pid = (int(x) for x in broker.stdout.readline().split())
        started: dict[int, int] = {}
        for pid in (reaper_pid, child_pid, daemon_pid):
            ident = _identity(pid)
            assert ident is not None, f"process {pid} not running"
            started[pid] = ident[2]
        # outside the broker's tree and session: `setsid` runs its setsid() after the shell printed its pid,
        # so the daemon is polled until it has left (never asserted at once: that raced on a loaded host)
        broker_sid = os.getsid(broker.pid)
        daemon = wait_for(
            lambda: (
                (d := _identity(daemon_pid)) is not None and d[0] != broker.pid and d[1] != broker_sid and d
            ),
            timeout=60,
            what="the daemon to leave the broker's tree and session",
        )
        assert daemon

        broker.kill()
        broker.wait(timeout=30)

        wait_for(
            lambda: not any(_same(pid, start) for pid, start in started.items()),
            timeout=60,
            what="the broker's child, its daemon and the reaper to exit",
        )
        assert bystander.poll() is None, "the reaper killed a process the broker did not start"
    finally:
        for p in (broker, bystander):
            p.kill()
            p.wait(timeout=30)
