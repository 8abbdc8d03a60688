"""benchmarks/proc_tree.py sums a real little process tree: a parent in a session of its own (as the
benchmarks start `gpufed serve`), a child, a grandchild named like a Ray worker, a daemon that
double-forked away from the parent (same session, re-parented), and one that left the session too
(setsid) but names the Ray session directory its siblings name, as Ray's daemons do. Every one of them
counts; a process beside the tree does not."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.proc_stats import HZ, cpu_ticks
from benchmarks.proc_tree import TreeSample, counts, cpu_percent, memory, sample, tree

SESSION = "session_2026-12-07_00-00-00_000000_4242"
BURN_S = 0.3  # CPU-seconds the re-parented daemon spends before it sleeps

PARENT = r"""
import json, os, subprocess, sys, time

out, session, burn = sys.argv[1], sys.argv[2], float(sys.argv[3])
sleeper = "import time\nwhile True: time.sleep(60)"
pids = {"parent": os.getpid()}
child = subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time\\nwhile True: time.sleep(60)', 'ray:' + ':PollerShard'])\n"
    "while True: time.sleep(60)",
    "--session-name=" + session])
pids["child"] = child.pid


def double_fork(setsid, argv, key):
    r, w = os.pipe()
    first = os.fork()
    if first == 0:
        if setsid:
            os.setsid()
        second = os.fork()
        if second == 0:
            os.close(r)
            os.write(w, str(os.getpid()).encode())
            os.close(w)
            os.execv(sys.executable, argv)
        os._exit(0)
    os.close(w)
    pids[key] = int(os.read(r, 64))
    os.close(r)
    os.waitpid(first, 0)  # the middle process ends: the daemon is re-parented


burner = ("import time\nstart = time.process_time()\n"
          f"while time.process_time() - start < {burn}: pass\n"
          "open(__import__('sys').argv[1], 'w').write('burnt')\n" + sleeper)
double_fork(False, [sys.executable, "-c", burner, out + ".burnt"], "daemon")
double_fork(True, [sys.executable, "-c", sleeper, "--session-dir=/tmp/ray/" + session], "ray_daemon")
with open(out + ".tmp", "w") as f:
    json.dump(pids, f)
os.rename(out + ".tmp", out)
while True:
    time.sleep(60)
"""


def _wait_for(pred: object, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def little_tree(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, int], Path]]:
    out = tmp_path / "pids.json"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(out), SESSION, str(BURN_S)], start_new_session=True
    )
    started: dict[str, int] = {}
    try:
        _wait_for(out.exists, "the tree to start")
        started = json.loads(out.read_text())
        yield parent, started, out
    finally:
        if started:
            os.kill(started["ray_daemon"], signal.SIGKILL)  # its own session and process group
        os.killpg(parent.pid, signal.SIGKILL)  # the parent, its child, grandchild and first daemon
        parent.wait(30)


def test_the_tree_holds_every_process_the_parent_started_and_nothing_beside_it(
    little_tree: tuple[subprocess.Popen[bytes], dict[str, int], Path],
) -> None:
    parent, started, _ = little_tree
    beside = subprocess.Popen(  # the same Ray-like words but another session name: not in the tree
        [
            sys.executable,
            "-c",
            "import time\ntime.sleep(600)",
            "--session-dir=/tmp/ray/session_2026-01-01_0_1",
        ]
    )
    try:
        _wait_for(lambda: len(tree(parent.pid)) >= 5, "the grandchild to start")
        found = tree(parent.pid)
        assert set(started.values()) <= found
        assert beside.pid not in found and os.getpid() not in found
        assert len(found) == 5  # parent, child, grandchild, daemon, Ray-like daemon
        assert os.getsid(started["daemon"]) == parent.pid and os.getsid(started["ray_daemon"]) != parent.pid
        parts = counts(sample(parent.pid))
        assert parts == {"broker": 1, "Ray workers": 1, "other": 3}
    finally:
        beside.kill()
        beside.wait(30)


def test_the_cpu_and_memory_sums_count_the_re_parented_daemon(
    little_tree: tuple[subprocess.Popen[bytes], dict[str, int], Path],
) -> None:
    parent, started, out = little_tree
    burnt = Path(str(out) + ".burnt")
    _wait_for(burnt.exists, "the daemon to burn its CPU")
    daemon_ticks = cpu_ticks(started["daemon"])
    assert daemon_ticks >= BURN_S * HZ * 0.9
    nothing = TreeSample(parent.pid, {}, {})
    per_part = cpu_percent(nothing, sample(parent.pid), seconds=1.0)  # every tick since each started
    assert per_part["total"] == pytest.approx(sum(v for k, v in per_part.items() if k != "total"))
    assert per_part["total"] >= daemon_ticks / HZ * 100  # the daemon's CPU is in the total
    assert per_part["other"] >= daemon_ticks / HZ * 100
    pss, rss = memory(parent.pid)
    assert set(pss) == {"broker", "Ray workers", "other", "total"}
    assert 0 < pss["broker"] < pss["total"] <= rss["total"]  # five pythons, each counted
    assert rss["other"] > rss["broker"]  # three more interpreters, the daemons among them
