"""What an idle kubesim costs: `kubesim serve` with C clusters x N nodes (controllers running), no client,
nothing changing; its CPU over S seconds, % of one core.

kubesim stands for the member clusters' API servers, which run on machines of their own in a deployment;
on the 2-core test machine it shares the cores with the broker, so what it burns doing nothing is taken
from the product in every fleet benchmark (benchmarks/thousand_clusters.py serves 1,000 members from two).

    .venv/bin/python -m benchmarks.kubesim_idle [--clusters 500] [--nodes 10] [--seconds 20]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.fleet_scale import fleet_yaml
from benchmarks.proc_stats import cpu_ticks
from benchmarks.thousand_clusters import wait_for

HZ = os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=500)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--settle", type=float, default=10.0, help="seconds after start-up before measuring")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "fleet.yaml").write_text(yaml.safe_dump(fleet_yaml(args.clusters, args.nodes)))
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "kubesim.cli", "serve", "--fleet", str(tmp / "fleet.yaml")),
                *("--out", str(tmp / "out"), "--bookmark-seconds", "60"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for((tmp / "out" / "kubesim.json").exists, 600, "kubesim to start", 0.5)
            time.sleep(args.settle)
            before, t0 = cpu_ticks(proc.pid), time.monotonic()
            time.sleep(args.seconds)
            used = (cpu_ticks(proc.pid) - before) / HZ / (time.monotonic() - t0) * 100
            print(
                f"idle kubesim, {args.clusters} clusters x {args.nodes} nodes, controllers running, no client: "
                f"{used:.1f}% of a core over {args.seconds:.0f} s"
            )
        finally:
            proc.terminate()
            proc.wait(timeout=60)


if __name__ == "__main__":
    main()
