"""Benchmark: burst-back on and off on the same generated days (issue 25; docs/benchmarks.md).

Run: .venv/bin/python -m benchmarks.burst_back [--days 11-20] [--jobs-per-day 300] [--max-wait 600]
         [--checkpointing 0.6] [--grace 60] [--free-for 300]

What runs: benchmarks/burst.py's discrete-event simulation of the demo fleet (on-prem A100 and H100 nodes,
the cloud-burst H200 spot pool and the autoscaled L4 pool; the broker's wait-or-burst decision at
maxWait --max-wait), once as today (a cloud job stays on the cloud) and once with burst-back, on the same
day. Burst-back is the broker's own pure code: broker.burst.burst_back.choose over the on-prem pools'
FreeHistory (free for --free-for seconds, less the GPUs the queue asks for) and the cloud jobs, each job's
time left from broker.burst.burst_back.time_left (the median of the longer runs of its shape the
simulation has seen: jobs declare no duration), restart cost = grace + startup, the default thresholds otherwise.

What a move costs, as modelled: the on-prem GPUs are held from the decision; the cloud attempt runs on
(and is paid) for the grace period while it saves its checkpoint; the job starts on-prem at the first
scheduling pass after the grace plus --startup seconds, and runs only what it had left (its progress is
kept). --checkpointing is the share of jobs that checkpoint (chosen per job from the seed); the others
are never moved (burstBack auto). Not modelled: a spot reclaim or a budget stop of a checkpointing job
losing less than all (both cases run as before, identically in both arms), and the control loop's
cadence (the step is evaluated every 30 s pass here; in the broker, only after a change of on-prem free
capacity or a hysteresis deadline, at most every intervalSeconds).

Figures per day: cloud spend (what the broker accounts: price x GPUs x run time of every cloud attempt,
the grace periods of the moved ones included) and p95 wait (arrival to first start) with and without,
the moves and the spend saved; the goal is at least 25% less cloud spend at no worse p95 wait. "At most"
bounds what any mover could save: the cloud spend of checkpointing jobs after the first pass in which an
on-prem node had room for them and nothing was queued (without burst-back; it ignores whom those
on-prem GPUs would have served next, so a day can beat it).
"""

from __future__ import annotations

import argparse
import math
import random
from dataclasses import dataclass, replace

from benchmarks.burst import Job, Node, Sim
from benchmarks.burst_day import Arrival, generate
from broker.burst.burst_back import BurstBackSettings, Candidate, FreeHistory, OnPremPool, choose, time_left
from broker.burst.wait_prediction import RunTimeModel

GOAL_SAVING = 0.25  # at least 25% less cloud spend ...


@dataclass
class Move:
    job: Job
    node: Node  # the on-prem node whose GPUs it holds
    stop_at: float  # the cloud attempt ends (the grace period is over)
    start_at: float  # it may start on-prem


class BackSim(Sim):
    """Sim (gpufed's wait-or-burst) with the burst-back step after every scheduling pass."""

    def __init__(
        self,
        day: list[Arrival],
        max_wait: float,
        seed: int,
        *,
        burst_back: bool,
        checkpointing: float,
        grace: float,
        settings: BurstBackSettings,
        declared_error: float | None = None,
    ) -> None:
        super().__init__("gpufed", day, max_wait, 0.0, seed)
        self.hard = True  # a pass every 30 s even with an empty queue (burst-back runs in it)
        self.burst_back = burst_back
        self.grace = grace
        self.settings = settings
        pick = random.Random(seed * 7919 + 25)
        self.checkpoints = {j.arrival.id: pick.random() < checkpointing for j in self.jobs}
        if declared_error is not None:  # the checkpointing jobs declare durationSeconds, this far off
            for j in self.jobs:
                if self.checkpoints[j.arrival.id]:
                    off = pick.lognormvariate(0.0, declared_error) if declared_error > 0 else 1.0
                    j.request = replace(j.request, duration_seconds=j.arrival.run_seconds * off)
        self.progress: dict[str, float] = {}  # work done by earlier attempts (kept by a checkpoint)
        self.history = FreeHistory()
        self.moves: list[Move] = []
        self.moved = 0
        self.saved_estimate = 0.0
        # the most any mover could save (the arm without burst-back): what checkpointing cloud jobs cost
        # after the first pass in which an on-prem node had room for them and nothing was queued
        self.first_chance: dict[tuple[str, int], float] = {}  # (job, attempt) -> first chance to move

    def _enforce_budgets(self, now: float) -> None:
        return None  # no budgets in this benchmark (self.hard only keeps the passes coming)

    def _start(self, job: Job, node: Node, now: float) -> None:
        node.free -= job.arrival.gpus
        node.idle_since = None
        job.node, job.started_at = node, now
        job.ends_at = now + max(1.0, job.arrival.run_seconds - self.progress.get(job.arrival.id, 0.0))
        job.onprem = node.price == 0
        if job.first_start is None:
            job.first_start = now
        self._push(job.ends_at, "end", (job, job.attempt))

    def _pass(self, now: float) -> None:
        if self.queue:
            super()._pass(now)
        if not self.queue:
            for j in self.jobs:
                node = j.node
                if node is None or node.price <= 0 or not self.checkpoints[j.arrival.id]:
                    continue
                if any(n.free >= j.arrival.gpus for n in self.onprem):
                    self.first_chance.setdefault((j.arrival.id, j.attempt), now)
        if self.burst_back:
            self._settle_moves(now)
            self._burst_back(now)

    def _settle_moves(self, now: float) -> None:
        for m in list(self.moves):
            job = m.job
            if m.stop_at <= now and job.node is not None and job.node.price > 0:
                assert job.started_at is not None
                self.progress[job.arrival.id] = (
                    self.progress.get(job.arrival.id, 0.0) + m.stop_at - job.started_at
                )
                self._stop(job, m.stop_at, finished=False)  # paid up to the end of its grace period
                job.attempt += 1
            if m.start_at <= now and job.node is None:
                m.node.free += job.arrival.gpus  # the held GPUs become the job's
                self._start(job, m.node, now)
                self.moves.remove(m)

    def _burst_back(self, now: float) -> None:
        free: dict[str, int] = {}
        for n in self.onprem:
            key = f"{n.cluster}/{n.product}"
            free[key] = free.get(key, 0) + max(0, n.free)
        self.history.observe(now, free)
        demand = sum(j.arrival.gpus for j in self.queue)  # every queued job may take any on-prem pool
        pools = []
        for key, n_free in free.items():
            cluster, product = key.split("/")
            stable = min(n_free, self.history.stable(key, now, self.settings.free_for_seconds)) - demand
            if stable <= 0:
                continue
            nodes = [n for n in self.onprem if n.cluster == cluster]
            fits = {g: sum(max(0, n.free) // g for n in nodes) for g in (1, 2, 4, 8)}
            pools.append(OnPremPool(cluster, product, stable, fits, self.history.free_since(key, now)))
        if not pools:
            return
        model = RunTimeModel(self.samples)
        moving = {m.job.arrival.id for m in self.moves}
        candidates = []
        for j in self.jobs:
            node = j.node
            if node is None or node.price <= 0 or j.started_at is None or j.arrival.id in moving:
                continue
            if not self.checkpoints[j.arrival.id]:
                continue
            elapsed = now - j.started_at
            left, basis = time_left(model, j.request, node.product, elapsed)
            candidates.append(
                Candidate(
                    job_id=j.arrival.id,
                    tenant=j.arrival.tenant,
                    cluster=node.cluster,
                    gpus=j.arrival.gpus,
                    gpus_per_pod=j.arrival.gpus,
                    pods=1,
                    price_per_gpu_hour=node.price,
                    elapsed_seconds=elapsed,
                    remaining_seconds=left,
                    remaining_basis=basis,
                    checkpoint_grace_seconds=self.grace,
                )
            )
        by_id = {j.arrival.id: j for j in self.jobs}
        for v in choose(candidates, pools, self.settings, now):
            if not v.move:
                continue
            job = by_id[v.job_id]
            fits = [n for n in self.onprem if n.cluster == v.to_cluster and n.free >= job.arrival.gpus]
            node = min(fits, key=lambda n: (n.free, n.name))
            node.free -= job.arrival.gpus  # held for it from now
            node.idle_since = None
            stop_at = now + self.grace
            self.moves.append(Move(job, node, stop_at, stop_at + self.settings.startup_seconds))
            self._push(stop_at + self.settings.startup_seconds, "wake", None)  # keep the day running
            self.moved += 1
            self.saved_estimate += v.saving


def reachable(sim: BackSim) -> float:
    """The cloud spend after each run's first chance to move (an upper bound: it ignores whom the
    on-prem GPUs it would take would have served next)."""
    out = 0.0
    for r in sim.runs:
        chance = sim.first_chance.get((r.job_id, r.attempt))
        if chance is not None:
            out += r.cost_since(max(chance, r.started_at))
    return out


def _q95(sim: Sim) -> float:
    waits = sorted(j.first_start - j.arrival.at for j in sim.jobs if j.first_start is not None)
    return waits[min(len(waits) - 1, int(0.95 * len(waits)))] / 60 if waits else math.nan


def compare_days(
    seeds: range,
    jobs_per_day: float,
    max_wait: float,
    checkpointing: float,
    grace: float,
    free_for: float,
    keep_free: int = 0,
) -> None:
    settings = BurstBackSettings(free_for_seconds=free_for, keep_free_gpus=keep_free)
    print(
        f"{len(seeds)} days (seeds {seeds.start}-{seeds.stop - 1}), {jobs_per_day:g} jobs/day, gpufed maxWait "
        f"{max_wait:g} s; {checkpointing:.0%} of jobs checkpoint (grace {grace:g} s, startup "
        f"{settings.startup_seconds:g} s); burst-back: free for {free_for:g} s, keep {keep_free} free, remaining >= "
        f"{settings.min_remaining_ratio:g}x restart, saving >= ${settings.min_saving_dollars:g}"
    )
    print(
        "| seed | off: p95 wait / cloud spend | on: p95 wait / cloud spend | moved | spend saved | "
        "at most | goal |"
    )
    print("|---|---|---|---|---|---|---|")
    total_off = total_on = bound = 0.0
    met = 0
    for seed in seeds:
        day = generate(seed, jobs_per_day)
        arms = []
        for on in (False, True):
            sim = BackSim(
                day,
                max_wait,
                seed,
                burst_back=on,
                checkpointing=checkpointing,
                grace=grace,
                settings=settings,
            )
            sim.run()
            arms.append(sim)
        off, on_ = arms
        s_off, s_on = sum(r.cost for r in off.runs), sum(r.cost for r in on_.runs)
        p_off, p_on = _q95(off), _q95(on_)
        cut = 1 - s_on / s_off if s_off > 0 else 0.0
        ok = cut >= GOAL_SAVING and p_on <= p_off
        met += ok
        total_off += s_off
        total_on += s_on
        bound += reachable(off)
        print(
            f"| {seed} | {p_off:.1f} min / ${s_off:.0f} | {p_on:.1f} min / ${s_on:.0f} | {on_.moved} | "
            f"{cut:.0%} | {reachable(off) / s_off if s_off > 0 else 0.0:.0%} | {'met' if ok else 'not met'} |",
            flush=True,
        )
    cut_all = 1 - total_on / total_off if total_off > 0 else 0.0
    print(
        f"all days: cloud spend ${total_off:.0f} -> ${total_on:.0f} ({cut_all:.0%} less); goal met on {met}/{len(seeds)}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", default="11-20", help="a seed range A-B")
    ap.add_argument("--jobs-per-day", type=float, default=300.0)
    ap.add_argument("--max-wait", type=float, default=600.0)
    ap.add_argument("--checkpointing", type=float, default=0.6, help="share of jobs that checkpoint")
    ap.add_argument("--grace", type=float, default=60.0, help="their checkpoint grace period, seconds")
    ap.add_argument("--free-for", type=float, default=300.0, help="burstBack.freeForSeconds")
    ap.add_argument("--keep-free", type=int, default=0, help="burstBack.keepFreeGpus")
    args = ap.parse_args()
    first, _, last = args.days.partition("-")
    compare_days(
        range(int(first), int(last or first) + 1),
        args.jobs_per_day,
        args.max_wait,
        args.checkpointing,
        args.grace,
        args.free_for,
        args.keep_free,
    )


if __name__ == "__main__":
    main()
