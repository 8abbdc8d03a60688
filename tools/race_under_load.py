"""Run one test N times in a row beside K busy loops (a loaded machine), and count its failures.

Race tests that pass on a quiet machine can lose under load; this is how the four-placer over-commit was
found and its fix checked (docs/reliability.md):

    .venv/bin/python tools/race_under_load.py \
        "tests/integration/test_scheduling_pass.py::test_four_concurrent_placers_never_over_commit" --runs 30
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import subprocess
import sys
from pathlib import Path


def _spin() -> None:
    while True:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("test", help="a pytest node id")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--busy", type=int, default=3, help="busy-loop processes beside the test")
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="keep each failed run's pytest temp folder (broker and kubesim logs) under this folder",
    )
    args = parser.parse_args()
    spinners = [mp.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for p in spinners:
        p.start()
    failed = 0
    try:
        for i in range(args.runs):
            command = [sys.executable, "-m", "pytest", "-q", "-p", "no:rerunfailures", args.test]
            basetemp = args.keep / f"run-{i + 1}" if args.keep else None
            if basetemp is not None:
                basetemp.parent.mkdir(parents=True, exist_ok=True)
                command.append(f"--basetemp={basetemp}")
            run = subprocess.run(
                command,
                check=False,
                capture_output=True,
                text=True,
            )
            if run.returncode != 0:
                failed += 1
                print(f"run {i + 1}: failed\n{run.stdout[-3000:]}", flush=True)
            elif basetemp is not None:
                shutil.rmtree(basetemp, ignore_errors=True)
    finally:
        for p in spinners:
            p.terminate()
    print(f"{failed} of {args.runs} runs failed beside {args.busy} busy loops")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
