"""Benchmark: what the broker's embedded Ray costs in CPU when nothing happens (issue 43).

Run: .venv/bin/python -m benchmarks.ray_idle [--shards 2] [--runs 3] [--settle 20] [--seconds 30]
         [--variant product] [--variant baseline] [--try 'NAME={"env": {...}, "system_config": {...}}']

Each run is a fresh child process (its own session) that starts Ray and the poller fleet exactly as the
broker does: `PollerFleet.start()` (adapters.ray_actors), whose ray.init takes its arguments from
adapters.ray_embedded, the one place they are chosen; `--shards` idle PollerShard actors (no cluster to
watch) and the supervisor pinging them (in the child's process, as in the broker's), against a private
redis-server. Once the fleet answers, the run waits `--settle` seconds, then reads utime + stime
(/proc/PID/stat) of every process of the child's tree twice, `--seconds` apart (benchmarks.proc_tree:
descendants, the child's session and the processes that name its Ray session directory, so daemonised
ones count too), and prints each process's share of one core by name (`driver` is the child itself: the
broker's own Ray threads and the supervisor), their total, and the load average beside it. Variants run alternately (A B A B ...), so a change of load on a shared
machine falls on both:
    product    the embedded Ray as the broker starts it now
    baseline   the ray.init arguments before issue 43 (include_dashboard=False, log_to_driver=True,
               configure_logging=False; nothing else), for comparison
    --try      the product's options with more on top, to measure one change before adopting it:
               {"init": {ray.init kwargs}, "env": {VAR: value}, "system_config": {key: value}}
The redis-server is the benchmark's, outside the measured tree.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import proc_tree
from benchmarks.proc_stats import HZ

BASELINE: dict[str, Any] = {
    "init": {"include_dashboard": False, "log_to_driver": True, "configure_logging": False},
    "env": {},
    "replace": True,
}

# (label, a substring of the command line), first match wins; the child itself is `driver`.
_NAMES: tuple[tuple[str, str], ...] = (
    ("gcs_server", "gcs/gcs_server"),
    ("raylet", "raylet/raylet"),
    ("dashboard (API server)", "dashboard/dashboard.py"),
    ("dashboard agent", "dashboard/agent.py"),
    ("dashboard agent", "ray::DashboardAgent"),
    ("runtime-env agent", "runtime_env/agent"),
    ("runtime-env agent", "ray::RuntimeEnvAgent"),
    ("log_monitor", "log_monitor.py"),
    ("autoscaler monitor", "autoscaler/_private/monitor.py"),
    ("process reaper", "ray_process_reaper"),
    ("PollerShard", "ray::PollerShard"),
    ("PollerSupervisor", "ray::PollerSupervisor"),
    ("idle worker", "ray::IDLE"),
    ("worker", "default_worker.py"),
)


def name_of(pid: int, root: int, cmd: str) -> str:
    if pid == root:
        return "driver"
    for label, needle in _NAMES:
        if needle in cmd:
            return label
    return "other: " + (cmd.split(" ", 1)[0].rsplit("/", 1)[-1] or "?")[:40]


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


# ----- the child: Ray and the fleet, as the broker starts them -----


def child(redis_url: str, shards: int, variant: dict[str, Any]) -> None:
    import ray

    from adapters import ray_embedded
    from adapters.ray_actors import PollerFleet

    if variant:
        init = {} if variant.get("replace") else ray_embedded.embedded_ray_options()
        env = {} if variant.get("replace") else ray_embedded.embedded_ray_env()
        init.update(variant.get("init", {}))
        env.update(variant.get("env", {}))
        if variant.get("system_config"):
            init["_system_config"] = {**init.get("_system_config", {}), **variant["system_config"]}
        os.environ.update(env)
        ray.init(**init)
    fleet = PollerFleet([], redis_url, f"rayidle{os.getpid()}", shards=shards)
    fleet.start()  # ray.init as the broker does it, unless the variant started Ray above
    print("ready", json.dumps(fleet.shard_pids()), flush=True)
    sys.stdin.read()  # until the parent closes it
    fleet.stop()
    if ray.is_initialized():
        ray.shutdown()


# ----- the parent: alternating runs, each measured from outside -----


def _wait_ready(proc: subprocess.Popen[str], timeout: float) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if ready:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the child exited ({proc.wait()}) before its fleet answered")
            if line.startswith("ready"):
                return
        elif proc.poll() is not None:
            raise RuntimeError(f"the child exited ({proc.returncode}) before its fleet answered")
    raise RuntimeError(f"no fleet within {timeout:.0f} s")


def _end(proc: subprocess.Popen[str], root: int) -> None:
    """Let the child stop its fleet and Ray; whatever of its tree is left after 60 s is killed."""
    assert proc.stdin is not None
    left = proc_tree.tree(root)
    proc.stdin.close()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 15
    alive = sorted(left - {root})
    while alive and time.monotonic() < deadline:
        time.sleep(0.5)
        alive = [p for p in alive if Path(f"/proc/{p}").exists()]
    for pid in alive:  # the processes this run started, by their ids
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def run_once(
    redis_url: str, shards: int, variant: dict[str, Any], settle: float, seconds: float
) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.ray_idle", "--child", redis_url, "--shards", str(shards)]
    cmd += ["--variant-json", json.dumps(variant)]
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    try:
        _wait_ready(proc, 240)
        time.sleep(settle)  # the wait itself is what is measured next: no synchronisation here
        load0 = loadavg()
        before = proc_tree.sample(proc.pid)
        t0 = time.monotonic()
        time.sleep(seconds)
        after = proc_tree.sample(proc.pid)
        elapsed = time.monotonic() - t0
        load1 = loadavg()
    finally:
        _end(proc, proc.pid)
    by_name: dict[str, float] = {}
    count: dict[str, int] = {}
    for pid, cmdline in after.cmds.items():
        label = name_of(pid, proc.pid, cmdline)
        ticks = after.ticks[pid] - before.ticks.get(pid, 0)
        by_name[label] = by_name.get(label, 0.0) + ticks / HZ / elapsed * 100
        count[label] = count.get(label, 0) + 1
    return {
        "cpu": dict(sorted(by_name.items())),
        "count": count,
        "total": sum(by_name.values()),
        "load": (load0, load1),
        "seconds": elapsed,
    }


def _variants(args: argparse.Namespace) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for name in args.variant or []:
        if name == "product":
            out.append((name, {}))
        elif name == "baseline":
            out.append((name, BASELINE))
        else:
            raise SystemExit(f"--variant {name!r}: product or baseline (or --try NAME=JSON)")
    for item in args.tries or []:
        name, _, body = item.partition("=")
        out.append((name, json.loads(body)))
    return out or [("product", {})]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3, help="runs of each variant, alternating")
    ap.add_argument("--settle", type=float, default=20.0)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--variant", action="append", help="product | baseline (repeatable)")
    ap.add_argument("--try", dest="tries", action="append", help='NAME={"env":..., "system_config":...}')
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--variant-json", default="{}", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.shards, json.loads(args.variant_json))
        return

    from adapters.redis_process import private_redis

    variants = _variants(args)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in variants}
    print(
        f"shards {args.shards}, settle {args.settle:.0f} s, sampled {args.seconds:.0f} s, cores {os.cpu_count()}"
    )
    with private_redis() as redis:
        for i in range(args.runs):
            for name, variant in variants:
                r = run_once(redis.url, args.shards, variant, args.settle, args.seconds)
                results[name].append(r)
                parts = ", ".join(f"{k} {v:.2f}" for k, v in sorted(r["cpu"].items(), key=lambda kv: -kv[1]))
                print(
                    f"run {i + 1} {name}: total {r['total']:.2f}% of a core, "
                    f"load {r['load'][0]:.1f}->{r['load'][1]:.1f}  [{parts}]",
                    flush=True,
                )
    print("\nmedian % of one core per process name (runs alternated):")
    names = sorted({k for rs in results.values() for r in rs for k in r["cpu"]})
    header = ["process"] + [name for name, _ in variants]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for label in names:
        cells = []
        for name, _ in variants:
            values = [r["cpu"].get(label, 0.0) for r in results[name]]
            procs = max((r["count"].get(label, 0) for r in results[name]), default=0)
            cells.append(f"{statistics.median(values):.2f} ({procs})" if procs else "-")
        print(f"| {label} | " + " | ".join(cells) + " |")
    cells = []
    for name, _ in variants:
        totals = [r["total"] for r in results[name]]
        cells.append(f"**{statistics.median(totals):.2f}** ({min(totals):.2f}-{max(totals):.2f})")
    print("| total | " + " | ".join(cells) + " |")
    loads = [f"{r['load'][0]:.1f}" for rs in results.values() for r in rs]
    print(f"load average (1 min) at each run's start: {', '.join(loads)}")


if __name__ == "__main__":
    main()
