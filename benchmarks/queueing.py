"""Benchmark: one pass of the global queue (broker.queue.queueing.plan) over 10,000 queued jobs of 20 tenants.

Run: .venv/bin/python -m benchmarks.queueing [--jobs 10000] [--tenants 20] [--running 2000] [--passes 30] [--no-gc]

Pure: no Redis, no clusters. The queue holds whole-GPU jobs on 3 products (some naming two, some none),
MIG jobs on 2 profiles, 3 priority classes; `running` jobs hold GPUs; half the tenants have quotas on
every product and profile, sized so that many jobs wait for a quota or borrow. A pass is the order
(priority, dominant-resource fair share, age) plus the quota pass, as schedule_once runs it.
Target: <= 50 ms per pass. Prints wall and CPU time per pass (min, p50, max) and the load average: on
a shared machine the CPU time is the figure that does not depend on the other processes. --no-gc turns
the cyclic garbage collector off during the passes, to show what collection adds to a pass.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import time

from broker.core.model import JobRecord, JobRequest, JobState, Placement
from broker.queue import queueing

PRODUCTS = ("H100-80GB", "A100-80GB", "L40S")
PROFILES = ("1g.10gb", "3g.40gb")
CLASSES = (None, "high", "low")


def build(jobs: int, tenants: int, active: int, seed: int = 7) -> tuple[list[JobRecord], list[JobRecord]]:
    rng = random.Random(seed)
    names = [f"tenant-{i:02d}" for i in range(tenants)]
    queued: list[JobRecord] = []
    for i in range(jobs):
        tenant = rng.choice(names)
        if rng.random() < 0.15:
            request = JobRequest(
                name=f"q{i}",
                tenant=tenant,
                mig_profile=rng.choice(PROFILES),
                mig_slices_per_pod=rng.choice((1, 2)),
                priority_class=rng.choice(CLASSES),
            )
        else:
            shape = rng.random()
            products = (
                ()
                if shape < 0.1
                else tuple(rng.sample(PRODUCTS, 2))
                if shape < 0.3
                else (rng.choice(PRODUCTS),)
            )
            request = JobRequest(
                name=f"q{i}",
                tenant=tenant,
                gpus_per_pod=rng.choice((1, 1, 2, 4, 8)),
                pods=rng.choice((1, 1, 1, 2)),
                gpu_products=products,
                priority_class=rng.choice(CLASSES),
            )
        queued.append(JobRecord(id=f"q{i:05d}", request=request, created_at=float(i), updated_at=float(i)))
    placed: list[JobRecord] = []
    for i in range(active):
        tenant = rng.choice(names)
        if rng.random() < 0.15:
            profile = rng.choice(PROFILES)
            where = Placement("c", "A100-80GB", f"nvidia.com/mig-{profile}", 1, 1, 50, mig_profile=profile)
        else:
            where = Placement("c", rng.choice(PRODUCTS), "nvidia.com/gpu", rng.choice((1, 2, 4, 8)), 1, 50)
        placed.append(
            JobRecord(
                id=f"r{i:05d}",
                request=JobRequest(name=f"r{i}", tenant=tenant, gpus_per_pod=where.units_per_pod),
                state=JobState.RUNNING,
                placement=where,
            )
        )
    return queued, placed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--tenants", type=int, default=20)
    ap.add_argument("--running", type=int, default=2_000)
    ap.add_argument("--passes", type=int, default=30)
    ap.add_argument("--no-gc", action="store_true", help="the cyclic garbage collector off during the passes")
    args = ap.parse_args()

    queued, placed = build(args.jobs, args.tenants, args.running)
    capacity = {p: 2_000 for p in PRODUCTS} | {f"mig-{p}": 1_400 for p in PROFILES} | {"*": 6_000}
    free = {k: v // 10 for k, v in capacity.items()}
    quota = {p: 120 for p in PRODUCTS} | {f"mig-{p}": 60 for p in PROFILES}
    policy = queueing.QueuePolicy(
        priorities={"high": 1000, "low": -10},
        tenants={
            f"tenant-{i:02d}": queueing.TenantPolicy(weight=1.0 + i % 3, quotas=quota if i % 2 == 0 else {})
            for i in range(args.tenants)
        },
    )
    wall: list[float] = []
    cpu: list[float] = []
    slots: list[queueing.Slot] = []
    if args.no_gc:
        gc.disable()
    for _ in range(args.passes):
        started, started_cpu = time.perf_counter(), time.process_time()
        slots = queueing.plan(queued, placed, policy, capacity, free)
        wall.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
    blocked = sum(1 for s in slots if s.blocked)
    borrowing = sum(1 for s in slots if s.borrowing)
    print(
        f"{args.jobs} queued jobs, {args.tenants} tenants, {args.running} running, {args.passes} passes"
        f"{', garbage collector off' if args.no_gc else ''} "
        f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)\n"
        f"  wall ms per pass: min {min(wall):.1f}  p50 {statistics.median(wall):.1f}  max {max(wall):.1f}\n"
        f"  CPU  ms per pass: min {min(cpu):.1f}  p50 {statistics.median(cpu):.1f}  max {max(cpu):.1f}\n"
        f"  {blocked} held by a quota, {borrowing} borrowing"
    )


if __name__ == "__main__":
    main()
