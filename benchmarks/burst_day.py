"""A generated day of GPU job arrivals for the burst benchmark (benchmarks/burst.py).

Run: .venv/bin/python -m benchmarks.burst_day [--seed 11] [--jobs-per-day 520]   (prints a summary)

Deterministic from the seed. Arrivals are a Poisson process whose rate follows the working day: a base
rate, a daily peak (a Gaussian bump centred at 14:00 UTC, 3 h wide, at 3x the base) and a quiet night.
Each job:
  tenant     ml-research (40%), vision (35%), nlp (25%); each tenant has its own typical run time
  shape      1 GPU (45%), 2 (20%), 4 (15%), 8 on one node (20%)
  run time   log-normal, heavy-tailed: median per tenant (15 / 25 / 40 min) x shape factor, sigma 1.1,
             cut at 10 h; the user does not declare it (the broker must learn it)
  burst      70% of the jobs allow bursting to the cloud
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
from dataclasses import dataclass

DAY = 86400.0
TENANTS = (("ml-research", 0.40, 15 * 60.0), ("vision", 0.35, 25 * 60.0), ("nlp", 0.25, 40 * 60.0))
SHAPES = ((1, 0.45), (2, 0.20), (4, 0.15), (8, 0.20))
SHAPE_FACTOR = {1: 0.7, 2: 1.0, 4: 1.3, 8: 1.6}
SIGMA = 1.1
MAX_RUN = 10 * 3600.0
BURST_SHARE = 0.7


@dataclass(frozen=True)
class Arrival:
    id: str
    at: float  # seconds into the day
    tenant: str
    gpus: int
    run_seconds: float  # what it really runs (unknown to the broker)
    allow_burst: bool


def _rate(t: float, base: float) -> float:
    """Jobs per second at time t of the day: night dip, daily peak at 14:00."""
    hour = t / 3600
    peak = 2.0 * math.exp(-(((hour - 14.0) / 1.5) ** 2) / 2)
    night = 0.5 if hour < 6 or hour >= 22 else 1.0
    return base * (night + peak)


def generate(seed: int = 11, jobs_per_day: float = 520.0) -> list[Arrival]:
    rng = random.Random(seed)
    # the base rate that gives `jobs_per_day` on average (the integral of the shape over the day)
    shape_integral = sum(_rate(m * 60.0, 1.0) for m in range(1440)) * 60.0
    base = jobs_per_day / shape_integral
    ceiling = base * 3.0
    out: list[Arrival] = []
    t = 0.0
    while True:
        t += rng.expovariate(ceiling)  # thinning: candidate arrivals at the ceiling rate
        if t >= DAY:
            break
        if rng.random() > _rate(t, base) / ceiling:
            continue
        tenant, _, median = rng.choices(TENANTS, weights=[w for _, w, _ in TENANTS])[0]
        gpus = rng.choices([g for g, _ in SHAPES], weights=[w for _, w in SHAPES])[0]
        run = min(MAX_RUN, max(60.0, rng.lognormvariate(math.log(median * SHAPE_FACTOR[gpus]), SIGMA)))
        out.append(Arrival(f"j{len(out):04d}", t, tenant, gpus, run, rng.random() < BURST_SHARE))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--jobs-per-day", type=float, default=520.0)
    args = ap.parse_args()
    day = generate(args.seed, args.jobs_per_day)
    runs = [a.run_seconds for a in day]
    gpu_hours = sum(a.gpus * a.run_seconds for a in day) / 3600
    print(f"{len(day)} jobs, {gpu_hours:.0f} GPU-hours asked for")
    print(f"run time p50 {statistics.median(runs) / 60:.0f} min, max {max(runs) / 3600:.1f} h")
    for h in range(0, 24, 2):
        n = sum(1 for a in day if h * 3600 <= a.at < (h + 2) * 3600)
        print(f"{h:02d}:00-{h + 2:02d}:00 {'#' * (n // 4)} {n}")


if __name__ == "__main__":
    main()
