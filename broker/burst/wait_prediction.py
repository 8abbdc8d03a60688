"""Predicted wait: how long a queued job would wait for on-prem GPUs, and why (docs/burst.md).

Pure (no I/O, no clock: `now` and every observation are arguments). Owns two things:

1. Run times. The broker keeps the last `SAMPLE_LIMIT` observed run times per *shape key*
   (tenant/product/gpus-per-pod x pods) in Redis; `RunTimeModel.expected` turns them into one expected
   run time with the median, which one runaway job cannot move (robust to outliers). Too few samples
   of the exact key fall back to the same shape of any tenant, then to the job's own durationSeconds
   (simulated time on kubesim's members: divided by the simulation's speed, so that every prediction
   is wall-clock time, as the observed runs and the ages shown beside it are), then to a default; the
   estimate says which (`Estimate.basis`).

2. Predicted start. `predict_queue` replays the queue ahead over the on-prem pools, one pool per
   (cluster, GPU product), counting whole GPUs:
     - a pool has its free GPUs now, and releases the GPUs of each running job when it is expected to
       end: now + the median of its shape's observed runs that lasted longer than it has run so far,
       less what it has run (`RunTimeModel.remaining`: run times are heavy-tailed, so a job that has
       run long is likely a long one); past every observed run, 10% of its expectation more;
     - jobs are taken in queue order; each starts in the pool where it can start first (a pool
       starts its jobs in order, no backfilling: the prediction errs late, not early), and its
       GPUs come back at start + its expected run time.
   Each job gets its predicted start per pool and its best pool. A job that no pool can ever hold
   (more GPUs than the pool has, or a pod larger than its nodes) gets no prediction on that pool. A
   start "now" also needs the pods to fit on the nodes as they are now (free GPUs spread over nodes are
   no start). Beyond now nodes are not modelled: GPUs of one pool are one heap, so a job needing 8 GPUs on one node may be predicted early when the free GPUs
   are spread over nodes. The error is measured by benchmarks/burst.py (docs/benchmarks.md).

MIG jobs are not predicted (no pool model of slices yet): the burst rule treats them as before.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from broker.core.model import ClusterSummary, JobRecord, JobRequest, JobState, ProductCapacity, Tier
from broker.workload.kinds import registry as kinds_registry

__all__ = [
    "DEFAULT_RUN_SECONDS",
    "MIN_SAMPLES",
    "SAMPLE_LIMIT",
    "Estimate",
    "Prediction",
    "RunTimeModel",
    "median",
    "predict_queue",
    "shape_key",
]

SAMPLE_LIMIT = 64  # run times kept per shape key (newest first)
MIN_SAMPLES = 3  # fewer than this and the key's median is not trusted
DEFAULT_RUN_SECONDS = 3600.0  # nothing known about a job's run time
OVERRUN_FRACTION = 0.1  # a running job past its expected end: this share of its expectation more
ANY_TENANT = "*"


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("median of no values")
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _shape(request: JobRequest) -> str:
    return f"{request.gpus_per_pod}x{request.pods}"


def shape_key(request: JobRequest, product: str, tenant: str | None = None) -> str:
    """The key run times are kept under: tenant/product/gpus-per-pod x pods ("ml/H100-80GB/8x1")."""
    return f"{request.tenant if tenant is None else tenant}/{product}/{_shape(request)}"


@dataclass(frozen=True)
class Estimate:
    """An expected run time and where it came from, as a person reads it."""

    seconds: float
    basis: str


@dataclass(frozen=True)
class RunTimeModel:
    """Observed run times by shape key (newest first, at most SAMPLE_LIMIT each)."""

    samples: Mapping[str, Sequence[float]] = field(default_factory=dict)
    default_seconds: float = DEFAULT_RUN_SECONDS
    # simulated seconds per wall-clock second where a job's durationSeconds is simulated time (kubesim):
    # observed runs are wall-clock (the broker's clock), so the hint is scaled to match them
    simulation_speed: float = 1.0

    def expected(self, request: JobRequest, product: str) -> Estimate:
        """The run time a queued job is predicted to take: the median of its shape's runs (one runaway
        job does not move it). For waits: half the runs end sooner, half later."""
        return self._estimate(request, product, median, "median")

    def expected_for_cost(self, request: JobRequest, product: str) -> Estimate:
        """The run time a job's cost is reckoned with: the mean of its shape's runs. Costs add up over
        runs, so a budget pays the mean, and with heavy-tailed run times the mean is well above the
        median (log-normal with sigma 1.1: 1.8x); reckoning with the median under-commits budgets."""
        return self._estimate(request, product, _mean, "mean")

    def _estimate(
        self, request: JobRequest, product: str, statistic: Callable[[Sequence[float]], float], name: str
    ) -> Estimate:
        for key in (shape_key(request, product), shape_key(request, product, ANY_TENANT)):
            seen = self.samples.get(key, ())
            if len(seen) >= MIN_SAMPLES:
                return Estimate(statistic(seen), f"{name} of {len(seen)} runs of {key}")
        if request.duration_seconds is not None and request.duration_seconds > 0:
            if self.simulation_speed != 1.0:
                return Estimate(
                    request.duration_seconds / self.simulation_speed,
                    f"the job's durationSeconds, simulated at x{self.simulation_speed:g}",
                )
            return Estimate(request.duration_seconds, "the job's durationSeconds")
        return Estimate(
            self.default_seconds, f"default {self.default_seconds:g} s (no runs of this shape yet)"
        )

    def remaining(
        self, request: JobRequest, product: str, elapsed: float, *, for_cost: bool = False
    ) -> float:
        """Expected time left of a job that has run `elapsed` seconds: among the observed runs of its
        shape that ran longer than that, the median (the mean with `for_cost`), less what it has run
        (run times are heavy-tailed: a job that has run long is likely a long one). Without such runs:
        its expectation less what it has run, and at least OVERRUN_FRACTION of its expectation."""
        statistic = _mean if for_cost else median
        for key in (shape_key(request, product), shape_key(request, product, ANY_TENANT)):
            seen = self.samples.get(key, ())
            if len(seen) >= MIN_SAMPLES:
                longer = [s for s in seen if s > elapsed]
                if longer:
                    return statistic(longer) - elapsed
                break
        expected = (self.expected_for_cost if for_cost else self.expected)(request, product).seconds
        return max(expected - elapsed, OVERRUN_FRACTION * expected)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


@dataclass(frozen=True)
class Prediction:
    """When a queued job is predicted to start on-prem: per pool ("cluster/product") and the best."""

    job_id: str
    cluster: str | None  # the on-prem cluster it would start on first; None: none can hold it
    product: str | None
    start_at: float | None  # epoch seconds; None: never on-prem
    wait_seconds: float | None  # start_at - now
    ahead: int  # queued jobs ahead of it that the replay placed on-prem
    run: Estimate | None  # its own expected run time on the best pool
    per_pool: Mapping[str, float] = field(default_factory=dict)  # "cluster/product" -> start_at
    withheld: str = (
        ""  # no start: the fenced on-prem cluster that could hold it, and why ("c is drained by ...")
    )

    @property
    def explain(self) -> str:
        if (self.start_at is None or self.wait_seconds is None) and self.withheld:
            return f"predicted on-prem start: none while {self.withheld}"
        if self.start_at is None or self.wait_seconds is None:
            return "predicted on-prem start: never (no on-prem cluster can hold it)"
        head = f"predicted on-prem start in {_human(self.wait_seconds)} on {self.cluster} ({self.product})"
        tail = f", after {self.ahead} job{'s' if self.ahead != 1 else ''} ahead" if self.ahead else ""
        run = f"; expected run {_human(self.run.seconds)} ({self.run.basis})" if self.run else ""
        return head + tail + run


def _human(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class _Pool:
    """Whole GPUs of one product in one on-prem cluster, replayed forward in time."""

    __slots__ = (
        "capacity",
        "cluster",
        "fit_now",
        "free",
        "key",
        "kinds",
        "largest_pod",
        "not_before",
        "now",
        "product",
        "releases",
        "slots",
        "users",
    )

    def __init__(
        self,
        cluster: str,
        product: str,
        capacity: int,
        free: int,
        now: float,
        largest_pod: int | None = None,
        fit_now: Callable[[int], int] | None = None,
        slots: Callable[[int], int | None] | None = None,
    ) -> None:
        """`fit_now(gpus_per_pod)`: how many such pods fit on the nodes now (None: count GPUs only);
        `slots(gpus_per_pod)`: how many such pods the pool runs at once when empty (None: unknown), so
        jobs ahead take slots as well as GPUs: three 8-GPU jobs queued for one 8-GPU slot get three
        different starts, though the pool's GPU count would take them together."""
        self.kinds: ClusterSummary | None = None  # its summary, for the workload kinds it serves
        self.cluster = cluster
        self.product = product
        self.key = f"{cluster}/{product}"
        self.capacity = capacity
        self.largest_pod = capacity if largest_pod is None else largest_pod  # GPUs one node can hold
        self.free = free
        self.now = now
        self.fit_now = fit_now
        self.not_before = now  # jobs start in order: none before the last start
        self.releases: list[tuple[float, int]] = []  # heap of (time, gpus)
        self.slots = slots
        self.users: list[tuple[float, int, int]] = []  # (end, GPUs per pod, pods) of jobs holding slots

    def start_of(self, units: int, per_pod: int | None = None, pods: int = 1) -> float | None:
        """When `units` GPUs would be free here, without changing the pool; None: never (more GPUs than
        the pool has, or a pod larger than any of its nodes). "Now" only if the pods fit on the nodes as
        they are now, not just by the count of free GPUs (placement would say no fit)."""
        if units > self.capacity or (per_pod is not None and per_pod > self.largest_pod):
            return None
        free, at = self.free, self.not_before
        if free >= units and not self._spread_now(at, per_pod, pods) and self._has_slots(at, per_pod, pods):
            return at
        for t, n in sorted(self.releases):
            free += n
            when = max(at, t)
            if (
                free >= units
                and not self._spread_now(when, per_pod, pods)
                and self._has_slots(when, per_pod, pods)
            ):
                return when
        return None  # the GPUs held outside the broker's view never come back

    def _has_slots(self, at: float, per_pod: int | None, pods: int) -> bool:
        """`pods` pods of `per_pod` GPUs have domains of their own at `at`, besides the pods of at least
        that size still running then (True when the pool's slots are not known)."""
        if per_pod is None or per_pod <= 0 or self.slots is None:
            return True
        total = self.slots(per_pod)
        if total is None:
            return True
        held = sum(n * (p // per_pod) for end, p, n in self.users if end > at and p >= per_pod)
        return total - held >= pods

    def hold(self, end: float, per_pod: int, pods: int) -> None:
        """A job holds `pods` domains of `per_pod` GPUs until `end`."""
        self.users.append((end, per_pod, pods))

    def _spread_now(self, at: float, per_pod: int | None, pods: int) -> bool:
        """At `now`, enough GPUs are free by count but spread so that the pods do not fit on the nodes."""
        if at > self.now or per_pod is None or self.fit_now is None:
            return False
        return self.fit_now(per_pod) < pods

    def take(self, units: int, start: float, run_seconds: float) -> None:
        while self.releases and self.releases[0][0] <= start:
            self.free += heapq.heappop(self.releases)[1]
        self.free -= units
        self.not_before = start
        heapq.heappush(self.releases, (start + run_seconds, units))


def slots_for(capacity: ProductCapacity, gpus_per_pod: int) -> int:
    """Pods of `gpus_per_pod` GPUs the product runs at once when all its GPUs are free."""
    return (
        sum(n * (k // gpus_per_pod) for k, n in enumerate(capacity.domains_by_size))
        if gpus_per_pod > 0
        else 0
    )


def _pools(summaries: Iterable[ClusterSummary], now: float) -> list[_Pool]:
    pools = []
    for s in sorted(summaries, key=lambda s: s.cluster):
        if s.tier is not Tier.ONPREM:
            continue
        for p in s.products:
            if p.allocatable > 0:
                # a pod's GPUs are on one node: the largest free now, or the mean node (summaries keep
                # free GPUs per node, not node sizes)
                largest = max(p.max_free_on_one_node, -(-p.allocatable // p.nodes)) if p.nodes else None
                pools.append(
                    _Pool(
                        s.cluster,
                        p.product,
                        p.allocatable,
                        max(0, p.free),
                        now,
                        largest,
                        p.pods_that_fit if p.nodes_by_free else None,
                        functools.partial(slots_for, p) if p.domains_by_size else None,
                    )
                )
                pools[-1].kinds = s
    return pools


def _wants(request: JobRequest, pool: _Pool) -> bool:
    if request.wants_mig or request.total_gpus <= 0:
        return False
    if request.clusters and pool.cluster not in request.clusters:
        return False
    if request.workload is not None and pool.kinds is not None and not _serves(pool.kinds, request):
        return False  # a JobSet, RayJob, ... never starts where its API is not served (scheduler/plugins/kinds.py)
    return not request.gpu_products or pool.product in request.gpu_products


def _serves(summary: ClusterSummary, request: JobRequest) -> bool:
    if not summary.workload_apis_observed:
        return True  # not read yet: as the placer will once it is
    runtime = kinds_registry.runtime_of(request)
    api_ok = kinds_registry.api_of(request) in summary.workload_apis
    return api_ok and (runtime is None or runtime in summary.training_runtimes)


def predict_queue(
    queue: Sequence[JobRecord],
    active: Iterable[JobRecord],
    summaries: Iterable[ClusterSummary],
    model: RunTimeModel,
    now: float,
    started_at: Mapping[str, float] | None = None,
    fenced: Iterable[ClusterSummary] = (),
) -> dict[str, Prediction]:
    """Predicted on-prem start of every job in `queue` (in queue order), by job id.

    `fenced`: the clusters placement does not offer now (drained, lost: their fence_reason or health
    says why); a job only they could hold gets no start, and its prediction names them (`withheld`)
    rather than "never".
    `active` are the placed jobs (PLACED/ADMITTED/RUNNING); those on on-prem pools release their GPUs
    at their expected end. `started_at` gives when a running job started (job id -> epoch seconds;
    missing: its updated_at when RUNNING, else now). `summaries` give each pool's free GPUs now."""
    pools = _pools(summaries, now)
    by_key = {p.key: p for p in pools}
    fenced = list(fenced)
    reasons = {s.cluster: s.fence_reason or str(s.health) for s in fenced}
    # as if empty: whether the cluster could hold the job at all, once it is offered again
    withheld = [p for p in _pools(fenced, now) if p.capacity > 0]
    for p in withheld:
        p.free, p.fit_now = p.capacity, None
    starts = started_at or {}
    for r in active:
        where = r.placement
        if where is None or r.cluster is None or where.mig_profile:
            continue
        pool = by_key.get(f"{r.cluster}/{where.product}")
        if pool is None:
            continue
        began = starts.get(r.id, r.updated_at if r.state is JobState.RUNNING else now)
        end = now + model.remaining(r.request, where.product, max(0.0, now - began))
        heapq.heappush(pool.releases, (end, where.total_units))
        pool.hold(end, where.units_per_pod, where.pods)
    out: dict[str, Prediction] = {}
    placed_ahead = 0
    for r in queue:
        req = r.request
        units = req.total_gpus
        per_pool: dict[str, float] = {}
        best: tuple[float, str, _Pool] | None = None
        for pool in pools:
            if not _wants(req, pool):
                continue
            at = pool.start_of(units, req.gpus_per_pod, req.pods)
            if at is None:
                continue
            per_pool[pool.key] = at
            if best is None or (at, pool.key) < (best[0], best[1]):
                best = (at, pool.key, pool)
        if best is None:
            held = next(
                (p for p in withheld if _wants(req, p) and p.start_of(units, req.gpus_per_pod) is not None),
                None,
            )
            why = "" if held is None else f"{held.cluster} is {reasons[held.cluster]}"
            out[r.id] = Prediction(r.id, None, None, None, None, placed_ahead, None, per_pool, why)
            continue
        at, _, pool = best
        run = model.expected(req, pool.product)
        out[r.id] = Prediction(r.id, pool.cluster, pool.product, at, at - now, placed_ahead, run, per_pool)
        pool.take(units, at, run.seconds)
        pool.hold(at + run.seconds, req.gpus_per_pod, req.pods)
        placed_ahead += 1
    return out
