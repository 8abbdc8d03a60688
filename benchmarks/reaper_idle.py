"""Benchmark: the reaper's (adapters/reaper.py) idle CPU, watching a stand-in broker that holds a few
children and changes nothing, for issue 43's goal on the broker's whole process tree.

Run: .venv/bin/python -m benchmarks.reaper_idle [--seconds 40] [--rounds 2] [--compare OLD_REAPER.py]
     (--compare: a reaper script of another version, e.g. `git show a4fd31b:adapters/reaper.py >
     /tmp/old_reaper.py`, run in turns with this one, each round starting with the other's: the machine
     may be shared, so each figure is printed with the load average and the processes on the machine)

Each run starts the stand-in (`sleep` x 5 under a python process), the reaper on a pipe to it, waits 5 s
(start-up), then counts the reaper's CPU (utime + stime) over `seconds`. The old reaper's cost grows with
the processes on the machine (it read /proc/PID/stat of each, twice a second)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.proc_stats import HZ, cpu_ticks

REPO = Path(__file__).resolve().parents[1]
STAND_IN = "import subprocess, time\n[subprocess.Popen(['sleep', '900']) for _ in range(5)]\ntime.sleep(900)"


def one_run(script: Path, new_style: bool, seconds: float) -> float:
    """% of one core the reaper `script` used over `seconds`, idle."""
    broker = subprocess.Popen([sys.executable, "-c", STAND_IN])
    read_end, write_end = os.pipe()
    mark = ["0" * 32] if new_style else []  # a mark nobody carries: only the stand-in's tree is reaped
    reaper = subprocess.Popen(
        [sys.executable, str(script), str(broker.pid), str(read_end), *mark], pass_fds=(read_end,), cwd=REPO
    )
    os.close(read_end)
    try:
        time.sleep(5.0)
        t0, c0 = time.monotonic(), cpu_ticks(reaper.pid)
        time.sleep(seconds)
        t1, c1 = time.monotonic(), cpu_ticks(reaper.pid)
    finally:
        os.close(write_end)  # the reaper reaps the stand-in's children and exits
        reaper.wait(timeout=30)
        broker.kill()
        broker.wait(timeout=30)
    return 100.0 * (c1 - c0) / HZ / (t1 - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--compare", type=Path, default=None, help="another version's reaper script")
    args = parser.parse_args()
    variants = [("this", REPO / "adapters" / "reaper.py", True)]
    if args.compare is not None:
        variants.append(("compared", args.compare, False))
    for n in range(args.rounds):
        for name, script, new_style in variants if n % 2 == 0 else variants[::-1]:
            load = os.getloadavg()[0]
            processes = sum(1 for e in os.listdir("/proc") if e.isdigit())
            pct = one_run(script, new_style, args.seconds)
            print(
                f"round {n + 1} {name}: {pct:.2f}% of a core over {args.seconds:.0f} s "
                f"(load {load:.2f}, {processes} processes)",
                flush=True,
            )


if __name__ == "__main__":
    main()
