"""How long a member with a random share of failing calls can take to read DEGRADED (a test's deadline).

Drives the real broker.health.machine.HealthMachine with a fake clock and the poller's probe cadence
(a probe `interval` after a success, `retry` after a failure; the member's other calls are long-lived
watches, which count only when they fail): starting healthy, each call fails with probability `rate`.
Prints, for each deadline, the share of runs not shown DEGRADED by then.

    .venv/bin/python tools/degraded_odds.py --rate 0.5 --lost 4 --runs 100000 --deadlines 14 30 60
"""

from __future__ import annotations

import argparse
import random

from broker.core.model import Health
from broker.health.machine import HealthMachine, HealthThresholds, Outcome


def seconds_to_degraded(
    rng: random.Random, t: HealthThresholds, rate: float, retry: float, limit: float
) -> float:
    machine = HealthMachine("member", t, started_at=-60.0)
    for at in range(-60, 1, int(t.probe_interval_seconds)):  # a healthy minute before the fault
        machine.observe(Outcome.success(float(at), latency=0.01))
        machine.evaluate(float(at))
    now = 0.0
    while now < limit:
        ok = rng.random() >= rate
        machine.observe(Outcome.success(now, 0.01) if ok else Outcome.failure(now, "HTTP 503"))
        step = t.probe_interval_seconds if ok else retry
        for tick in range(int(step / 0.1)):  # the shard evaluates (and publishes) far more often
            machine.evaluate(now + tick * 0.1)
            if machine.view.health == Health.DEGRADED:
                return now + tick * 0.1
        now += step
    return float("inf")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=0.5)
    p.add_argument("--lost", type=float, default=4.0, help="clusterLostSeconds (the test's 4)")
    p.add_argument("--interval", type=float, default=2.0, help="probe interval after a success")
    p.add_argument("--retry", type=float, default=0.25, help="probe interval after a failure")
    p.add_argument("--runs", type=int, default=100_000)
    p.add_argument("--deadlines", type=float, nargs="+", default=[14.0, 30.0, 60.0])
    args = p.parse_args()
    t = HealthThresholds(lost_seconds=args.lost, recover_seconds=2.0, probe_interval_seconds=args.interval)
    rng = random.Random(1)
    took = [seconds_to_degraded(rng, t, args.rate, args.retry, max(args.deadlines)) for _ in range(args.runs)]
    took.sort()
    print(f"median {took[len(took) // 2]:.1f} s to DEGRADED over {args.runs} runs")
    for d in args.deadlines:
        print(f"not DEGRADED within {d:g} s: {sum(1 for x in took if x > d) / args.runs:.5f}")


if __name__ == "__main__":
    main()
