"""Benchmark: goodput of a busy GPU fleet under GPU faults, with health-aware placement on and off.

Run: .venv/bin/python -m benchmarks.goodput [--weeks 52] [--seed 44] [--rate-multiplier 1] [--scale 8]
                                          [--checkpoint-minutes 30] [--blind-resume checkpoint|scratch]

A discrete-event simulation in simulated time (a week runs in well under a second): demo-like clusters
(onprem-a: A100 nodes, onprem-b: H100 nodes, cloud-burst: H200 nodes; 8 GPUs a node, `scale` times the
demo fleet's 3+3+2 nodes), jobs of 1-32 GPUs arriving at random to keep the fleet about 90% allocated,
every job checkpointing every K minutes, and fatal GPU faults drawn at the rate Meta published for the
Llama 3 training run (419 unexpected interruptions in 54 days on 16,384 H100s = 2,048 nodes, 58.7% of
them GPU-related):

    419 / (2,048 nodes x 54 days)      = 3.79 interruptions per 1,000 node-days (all causes)
    x 0.587 (GPU-related)              = 2.22 GPU faults per 1,000 node-days
                                       = 2.78e-4 per GPU-day (one per 3,600 GPU-days)

Arrivals, job sizes and durations, and the faults are drawn from their own seeded streams, so both modes
replay the same week. What differs:

- **health-aware** (gpufed with #44): a fault's XID is classified with the broker's rules
  (broker.health.xid.classify: application XIDs never quarantine); the cluster's health ledger
  (broker.health.quarantine.advance, with its escalation rules and circuit breaker) quarantines the GPU
  `detect` seconds later (the poll), so it leaves the free pool; the job on it (killed by the fault) is
  placed again `detect + move` seconds after the fault, from its last checkpoint, on healthy GPUs; two
  faults on one GPU within 24 h or on 3 GPUs of a node within 1 h quarantine the node. A GPU comes back
  after its repair plus the ledger's recovery time.
- **health-blind** (gpufed before #44): the broken GPU stays in the free pool until repaired; a job
  placed on it fails `fail_after` seconds after it starts; a job killed by a fault ends FAILED and its
  user resubmits it after a delay (exponential, mean `resubmit_minutes`); the resubmitted job resumes
  from its last checkpoint (`--blind-resume checkpoint`, the default and the kinder assumption: a
  training script that resumes from its latest checkpoint by itself) or starts over (`scratch`).

Both modes: a fault kills the job on the GPU at once (its work since the last checkpoint is lost), a
resumed job spends `restore` seconds loading its checkpoint (allocated, not useful); a broken GPU is
repaired after an exponential time (mean `repair_hours`), and with `recur` probability the same GPU
fails again within hours of its repair (the flaky hardware that the escalation rules exist for).
Application XIDs (13, 31, 43) are drawn too, as often as fatal ones: they change nothing in either mode.
Not modelled: the other 41.3% of interruptions (host, network, software: the same cost in both modes),
checkpoint write time, the member's device plugin dropping the GPU from allocatable (which would make
health-blind better than modelled here).

Reported per mode: useful GPU-hours / allocated GPU-hours (useful: work a job keeps; allocated: every
GPU-second a job held, including lost work, checkpoint loads and runs on broken GPUs), GPU-hours lost per
fatal fault, time from a kill to the job running again, jobs killed, completed.
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import math
import random
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from broker.health.quarantine import GpuSignal, HealthLedger, HealthPolicy, Reading, advance
from broker.health.xid import XidClass, classify, describe

WEEK = 7 * 86400.0
META_GPU_FAULTS_PER_GPU_SECOND = 419 * 0.587 / (16_384 * 54 * 86400.0)
# Fatal XIDs, weighted after Meta's GPU-related root causes (faulty GPU 30.1%, HBM3 17.2%, SRAM 4.5%,
# GPU processor 4.1%, NVLink and the rest); the weights only decide the XID shown, every one is fatal.
FATAL_XIDS = ((79, 30.1), (95, 9.2), (48, 8.0), (94, 4.5), (120, 4.1), (64, 1.4), (74, 1.4))
APP_XIDS = (13, 31, 43)
CLUSTERS = (("onprem-a", 3), ("onprem-b", 3), ("cloud-burst", 2))  # the demo fleet's whole-GPU nodes
SIZES = ((1, 0.2), (2, 0.15), (4, 0.2), (8, 0.25), (16, 0.12), (32, 0.08))
GPUS_PER_NODE = 8


@dataclass(frozen=True)
class Params:
    scale: int = 8  # nodes per cluster = scale x the demo fleet's
    hours: float = 7 * 24
    seed: int = 44
    rate_multiplier: float = 1.0
    checkpoint_minutes: float = 30.0
    load: float = 0.9  # offered GPU demand / capacity
    detect: float = 30.0  # fault -> quarantined (the poll)
    move: float = 30.0  # quarantined -> placed again
    restore: float = 300.0  # loading a checkpoint (allocated, not useful)
    fail_after: float = 60.0  # a job started on a broken GPU fails after this
    resubmit_minutes: float = 30.0  # health-blind: the user resubmits a FAILED job after this (mean)
    blind_resume: str = "checkpoint"  # checkpoint | scratch
    repair_hours: float = 8.0
    recur: float = 0.25  # a repaired GPU fails again (within recur_hours on average)
    recur_hours: float = 4.0
    policy: HealthPolicy = field(default_factory=HealthPolicy)


@dataclass
class Job:
    id: int
    gpus: int
    work: float  # seconds of compute to finish
    arrival: float
    progress: float = 0.0  # kept progress (last checkpoint, or done)
    segment: int = 0  # bumps on every start, so stale end/kill events are ignored
    started: float = 0.0
    resumed_from: float = 0.0
    restoring: bool = False
    placement: list[tuple[int, int]] = field(default_factory=list)  # (node, gpu)
    killed_at: float | None = None
    done: bool = False
    key: float = 0.0  # its place in the queue: first submission (a moved job keeps it), or resubmission


@dataclass
class Node:
    cluster: str
    name: str
    busy: list[int | None] = field(default_factory=lambda: [None] * GPUS_PER_NODE)
    broken: dict[int, int] = field(default_factory=dict)  # gpu -> fatal xid
    app: dict[int, int] = field(default_factory=dict)  # gpu -> application xid not yet read by a poll


@dataclass
class Stats:
    allocated: float = 0.0  # GPU-seconds
    useful: float = 0.0
    fatal_faults: int = 0
    app_xids: int = 0
    kills: int = 0  # jobs killed by a fault or by starting on a broken GPU
    broken_starts: int = 0
    completed: int = 0
    moves: list[float] = field(default_factory=list)  # kill -> running again (s)
    quarantined_starts: int = 0  # a job started on a GPU quarantined at that time (must stay 0)
    node_quarantines: int = 0

    @property
    def goodput(self) -> float:
        return self.useful / self.allocated if self.allocated else 1.0


class Strategy(Protocol):
    """What the broker does about GPU health (the only difference between the two runs)."""

    name: str

    def usable(self, node: int, gpu: int) -> bool: ...
    def on_fault(self, sim: Simulation, node: int, gpu: int, xid: int, now: float) -> None: ...
    def on_repair(self, sim: Simulation, node: int, gpu: int, now: float) -> None: ...
    def poll(self, sim: Simulation, cluster: str, now: float) -> None: ...
    def on_kill(self, sim: Simulation, job: Job, now: float) -> None: ...


class HealthBlind:
    name = "health-blind"

    def __init__(self, params: Params, rng: random.Random) -> None:
        self.params, self.rng = params, rng

    def usable(self, node: int, gpu: int) -> bool:
        return True

    def on_fault(self, sim: Simulation, node: int, gpu: int, xid: int, now: float) -> None:
        return None

    def on_repair(self, sim: Simulation, node: int, gpu: int, now: float) -> None:
        return None

    def poll(self, sim: Simulation, cluster: str, now: float) -> None:
        return None

    def on_kill(self, sim: Simulation, job: Job, now: float) -> None:
        if self.params.blind_resume == "scratch":
            job.progress = 0.0
        delay = self.rng.expovariate(1.0 / (self.params.resubmit_minutes * 60.0))
        job.key = now + delay  # a new submission: the back of the queue
        sim.at(now + delay, "submit", job.id)


class HealthAware:
    """gpufed with #44: the broker's own XID classification, ledger, escalation and breaker."""

    name = "health-aware"

    def __init__(self, params: Params, nodes: list[Node]) -> None:
        self.params = params
        self.nodes = nodes
        self.ledgers: dict[str, HealthLedger] = {}
        self.out: dict[str, set[tuple[str, int]]] = {}  # cluster -> quarantined (node, gpu); gpu -1: node
        self.index = {n.name: i for i, n in enumerate(nodes)}
        self.per_node = {c: {n.name: GPUS_PER_NODE for n in nodes if n.cluster == c} for c, _ in CLUSTERS}

    def usable(self, node: int, gpu: int) -> bool:
        n = self.nodes[node]
        out = self.out.get(n.cluster, set())
        return (n.name, gpu) not in out and (n.name, -1) not in out

    def on_fault(self, sim: Simulation, node: int, gpu: int, xid: int, now: float) -> None:
        sim.at(now + self.params.detect, "poll", self.nodes[node].cluster)

    def on_repair(self, sim: Simulation, node: int, gpu: int, now: float) -> None:
        cluster = self.nodes[node].cluster
        sim.at(now + self.params.detect, "poll", cluster)  # seen healthy: recovering
        later = self.params.detect + self.params.policy.recover_after_seconds + 1
        sim.at(now + later, "poll", cluster)  # back in service
        sim.at(now + later + self.params.policy.node_release_after_seconds, "poll", cluster)

    def poll(self, sim: Simulation, cluster: str, now: float) -> None:
        signals = []
        for n in self.nodes:
            if n.cluster != cluster:
                continue
            for gpu, xid in [*n.broken.items(), *n.app.items()]:
                fatal = classify(xid) is XidClass.FATAL
                signals.append(GpuSignal(n.name, gpu, describe(xid), "dcgm", xid=xid, fatal=fatal))
            n.app.clear()
        reading = Reading(tuple(signals), frozenset({"dcgm"}))
        before = len(self.ledgers.get(cluster, HealthLedger()).nodes)
        step = advance(
            self.ledgers.get(cluster, HealthLedger()),
            reading,
            self.per_node[cluster],
            now,
            self.params.policy,
        )
        self.ledgers[cluster] = step.ledger
        out = {(n, g) for (n, g), e in step.ledger.entries.items() if e.fault.quarantined}
        out |= {(n, -1) for n in step.ledger.nodes}
        self.out[cluster] = out
        sim.stats.node_quarantines += max(0, len(step.ledger.nodes) - before)
        sim.schedule(now)

    def on_kill(self, sim: Simulation, job: Job, now: float) -> None:
        sim.at(now + self.params.detect + self.params.move, "submit", job.id)


class Simulation:
    def __init__(self, params: Params, aware: bool) -> None:
        self.params = params
        self.nodes = [
            Node(cluster, f"{cluster}-{i}")
            for cluster, count in CLUSTERS
            for i in range(count * params.scale)
        ]
        self.by_cluster = {c: [i for i, n in enumerate(self.nodes) if n.cluster == c] for c, _ in CLUSTERS}
        self.events: list[tuple[float, int, str, Any]] = []
        self.seq = 0
        self.jobs: dict[int, Job] = {}
        self.queue: list[tuple[float, int]] = []  # (key, job id), in queue order
        self.stats = Stats()
        self.horizon = params.hours * 3600.0
        self.strategy: Strategy = (
            HealthAware(params, self.nodes) if aware else HealthBlind(params, random.Random(params.seed + 3))
        )
        self._draw_world()

    # ------------------------------------------------------------------ the world (same in both modes)

    def _draw_world(self) -> None:
        p = self.params
        arrivals = random.Random(p.seed)
        capacity = len(self.nodes) * GPUS_PER_NODE
        mean_gpus = sum(s * w for s, w in SIZES)
        mean_hours = 4.0 * math.exp(0.5)  # lognormal, median 4 h, sigma 1
        rate = p.load * capacity / (mean_gpus * mean_hours * 3600.0)  # jobs per second
        t, i = 0.0, 0
        while True:
            t += arrivals.expovariate(rate)
            if t >= self.horizon:
                break
            gpus = arrivals.choices([s for s, _ in SIZES], [w for _, w in SIZES])[0]
            hours = min(72.0, arrivals.lognormvariate(math.log(4.0), 1.0))
            self.jobs[i] = Job(i, gpus, hours * 3600.0, t, key=t)
            self.at(t, "submit", i)
            i += 1
        faults = random.Random(p.seed + 1)
        rate = META_GPU_FAULTS_PER_GPU_SECOND * capacity * p.rate_multiplier
        t = 0.0
        while rate > 0:
            t += faults.expovariate(rate)
            if t >= self.horizon:
                break
            node, gpu = faults.randrange(len(self.nodes)), faults.randrange(GPUS_PER_NODE)
            xid = faults.choices([x for x, _ in FATAL_XIDS], [w for _, w in FATAL_XIDS])[0]
            self.at(t, "fault", (node, gpu, xid, faults.expovariate(1.0 / (p.repair_hours * 3600.0))))
            where = (
                faults.randrange(len(self.nodes)),
                faults.randrange(GPUS_PER_NODE),
                faults.choice(APP_XIDS),
            )
            self.at(faults.uniform(0, self.horizon), "appxid", where)
        self._recur = random.Random(p.seed + 2)

    def at(self, when: float, kind: str, payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, self.seq, kind, payload))

    # ------------------------------------------------------------------ running

    def run(self) -> Stats:
        while self.events and self.events[0][0] < self.horizon:
            now, _, kind, payload = heapq.heappop(self.events)
            if kind == "submit":
                job = self.jobs[payload]
                bisect.insort(self.queue, (job.key, job.id))
                self.schedule(now)
            elif kind == "end":
                job_id, segment = payload
                job = self.jobs[job_id]
                if job.segment == segment and job.placement:
                    self._stop(job, now, finished=True)
                    self.schedule(now)
            elif kind == "brokenstart":
                job_id, segment = payload
                job = self.jobs[job_id]
                if job.segment == segment and job.placement:
                    self._kill(job, now)
            elif kind == "fault":
                self._fault(now, *payload)
            elif kind == "repair":
                node, gpu = payload
                self.nodes[node].broken.pop(gpu, None)
                self.strategy.on_repair(self, node, gpu, now)
                self.schedule(now)
            elif kind == "appxid":
                node, gpu, xid = payload
                self.stats.app_xids += 1
                self.nodes[node].app[gpu] = xid
                self.strategy.on_fault(self, node, gpu, xid, now)
            elif kind == "poll":
                self.strategy.poll(self, payload, now)
        for job in self.jobs.values():  # the week ends: running jobs keep what they have done
            if job.placement:
                self._stop(job, self.horizon, finished=False, keep_all=True)
        return self.stats

    def _fault(self, now: float, node: int, gpu: int, xid: int, repair: float) -> None:
        self.stats.fatal_faults += 1
        n = self.nodes[node]
        n.broken[gpu] = xid
        holder = n.busy[gpu]
        if holder is not None:
            self._kill(self.jobs[holder], now)
        self.strategy.on_fault(self, node, gpu, xid, now)
        self.at(now + repair, "repair", (node, gpu))
        if self._recur.random() < self.params.recur:
            again = now + repair + self._recur.expovariate(1.0 / (self.params.recur_hours * 3600.0))
            back = self._recur.expovariate(1.0 / (self.params.repair_hours * 3600.0))
            self.at(again, "fault", (node, gpu, xid, back))

    def _progress(self, job: Job, now: float) -> float:
        ran = now - job.started - (self.params.restore if job.restoring else 0.0)
        return min(job.work, job.resumed_from + max(0.0, ran))

    def _stop(self, job: Job, now: float, finished: bool, keep_all: bool = False) -> None:
        self.stats.allocated += (now - job.started) * job.gpus
        if finished:
            job.progress = job.work
            job.done = True
            self.stats.completed += 1
        else:
            done = self._progress(job, now)
            if keep_all:
                job.progress = done
            else:  # back to the last checkpoint
                every = self.params.checkpoint_minutes * 60.0
                job.progress = job.resumed_from + math.floor((done - job.resumed_from) / every) * every
        for node, gpu in job.placement:
            self.nodes[node].busy[gpu] = None
        job.placement = []
        if finished or keep_all:
            self.stats.useful += job.progress * job.gpus

    def _kill(self, job: Job, now: float) -> None:
        self.stats.kills += 1
        self._stop(job, now, finished=False)
        job.killed_at = now
        self.strategy.on_kill(self, job, now)
        self.schedule(now)

    def _free(self, node: int) -> list[int]:
        n = self.nodes[node]
        return [g for g in range(GPUS_PER_NODE) if n.busy[g] is None and self.strategy.usable(node, g)]

    def _place(self, job: Job) -> list[tuple[int, int]] | None:
        if job.gpus <= GPUS_PER_NODE:
            best = None
            for node in range(len(self.nodes)):
                free = self._free(node)
                if len(free) >= job.gpus and (best is None or len(free) < best[0]):
                    best = (len(free), node, free)
            return [(best[1], g) for g in best[2][: job.gpus]] if best else None
        want = job.gpus // GPUS_PER_NODE
        choice = None
        for cluster, members in self.by_cluster.items():
            whole = [i for i in members if len(self._free(i)) == GPUS_PER_NODE]
            if len(whole) >= want and (choice is None or len(whole) < choice[0]):
                choice = (len(whole), cluster, whole[:want])
        return [(i, g) for i in choice[2] for g in range(GPUS_PER_NODE)] if choice else None

    def schedule(self, now: float) -> None:
        waiting = []
        for entry in self.queue:
            job = self.jobs[entry[1]]
            placement = self._place(job)
            if placement is None:
                waiting.append(entry)
                continue
            self._start(job, placement, now)
        self.queue = waiting

    def _start(self, job: Job, placement: list[tuple[int, int]], now: float) -> None:
        job.segment += 1
        job.placement = placement
        job.started = now
        job.resumed_from = job.progress
        job.restoring = job.progress > 0
        if job.killed_at is not None:
            self.stats.moves.append(now - job.killed_at)
            job.killed_at = None
        broken = False
        for node, gpu in placement:
            self.nodes[node].busy[gpu] = job.id
            broken = broken or gpu in self.nodes[node].broken
            if not self.strategy.usable(node, gpu):
                self.stats.quarantined_starts += 1
        if broken:
            self.stats.broken_starts += 1
            self.at(now + self.params.fail_after, "brokenstart", (job.id, job.segment))
        restore = self.params.restore if job.restoring else 0.0
        self.at(now + restore + job.work - job.progress, "end", (job.id, job.segment))


def simulate(params: Params, aware: bool) -> Stats:
    return Simulation(params, aware).run()


# --------------------------------------------------------------------------- report


@dataclass
class Summary:
    mode: str
    weeks: int
    allocated_h: float
    useful_h: float
    fatal_faults: int
    kills: int
    broken_starts: int
    node_quarantines: int
    completed: int
    moves: list[float]
    quarantined_starts: int

    @property
    def goodput(self) -> float:
        return self.useful_h / self.allocated_h if self.allocated_h else 1.0

    @property
    def lost_per_fault_h(self) -> float:
        return (self.allocated_h - self.useful_h) / self.fatal_faults if self.fatal_faults else 0.0


def summarize(mode: str, runs: Iterable[Stats]) -> Summary:
    runs = list(runs)
    return Summary(
        mode,
        len(runs),
        sum(r.allocated for r in runs) / 3600.0,
        sum(r.useful for r in runs) / 3600.0,
        sum(r.fatal_faults for r in runs),
        sum(r.kills for r in runs),
        sum(r.broken_starts for r in runs),
        sum(r.node_quarantines for r in runs),
        sum(r.completed for r in runs),
        [m for r in runs for m in r.moves],
        sum(r.quarantined_starts for r in runs),
    )


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def compare(params: Params, weeks: int) -> tuple[Summary, Summary]:
    """Both modes over `weeks` independent weeks (seeds seed, seed+10, ...), same draws per week."""
    out = []
    for aware in (True, False):
        runs = [simulate(replace(params, seed=params.seed + 10 * w), aware) for w in range(weeks)]
        out.append(summarize("health-aware" if aware else "health-blind", runs))
    return out[0], out[1]


def _row(s: Summary) -> str:
    moves = s.moves
    return (
        f"| {s.mode} | {100 * s.goodput:.3f}% | {s.useful_h:,.0f} / {s.allocated_h:,.0f} | {s.fatal_faults} | "
        f"{s.kills} ({s.broken_starts} on broken GPUs) | {s.lost_per_fault_h:.1f} | "
        f"{statistics.median(moves) / 60 if moves else float('nan'):.1f} / {_pct(moves, 0.95) / 60:.1f} | "
        f"{s.node_quarantines} | {s.completed} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weeks", type=int, default=52)
    ap.add_argument("--seed", type=int, default=44)
    ap.add_argument("--scale", type=int, default=8)
    ap.add_argument("--rate-multiplier", type=float, default=1.0)
    ap.add_argument("--checkpoint-minutes", type=float, default=30.0)
    ap.add_argument("--blind-resume", choices=("checkpoint", "scratch"), default="checkpoint")
    ap.add_argument("--repair-hours", type=float, default=8.0)
    args = ap.parse_args()
    params = Params(
        scale=args.scale,
        seed=args.seed,
        rate_multiplier=args.rate_multiplier,
        checkpoint_minutes=args.checkpoint_minutes,
        blind_resume=args.blind_resume,
        repair_hours=args.repair_hours,
    )
    t0, c0 = time.perf_counter(), time.process_time()
    aware, blind = compare(params, args.weeks)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    gpus = sum(c for _, c in CLUSTERS) * params.scale * GPUS_PER_NODE
    print(
        f"{gpus} GPUs, {args.weeks} week(s), seed {args.seed}, fault rate x{args.rate_multiplier:g} "
        f"({META_GPU_FAULTS_PER_GPU_SECOND * 86400 * 1000 * GPUS_PER_NODE * args.rate_multiplier:.2f} GPU faults "
        f"per 1,000 node-days), checkpoints every {args.checkpoint_minutes:g} min, blind resume: {args.blind_resume}"
    )
    print("| mode | useful / allocated | GPU-h useful / allocated | fatal faults | jobs killed | lost GPU-h per fault "
          "| kill -> running again, p50 / p95 (min) | node quarantines | jobs completed |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    print(_row(aware))
    print(_row(blind))
    print(
        f"margin: {100 * (aware.goodput - blind.goodput):.3f} points; jobs started on a quarantined GPU: "
        f"{aware.quarantined_starts}; {wall:.1f} s wall, {cpu:.1f} s CPU"
    )


if __name__ == "__main__":
    main()
