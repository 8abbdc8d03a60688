"""Burst-back: whether a job running on a cloud cluster is moved back on-prem now (docs/burst.md).

Pure (no I/O, no clock). Owns the decision over numbers the controller gathers
(broker.controller.bursting_back), the on-prem free-capacity history its hysteresis reads, and `Saving`,
the cloud cost a move is expected to avoid (shown by `gpufed spend`).

For one cloud job (`Candidate`), in order:

1. Policy: the tenant's `burstBack` is `never` -> it stays. Under `auto` (the default) only a job that
   checkpoints is moved (a stop is a pause: it resumes from its checkpoint); a job that does not would
   restart from scratch, which `settings.burst.burstBack.moveWithoutCheckpoint: true` allows, with all
   its elapsed time counted as lost.
2. Cooldown: a job burst-back moved less than `cooldown_seconds` ago stays (never bounced).
3. Restart cost, in time: the grace period (it still runs, and is paid, on the cloud while it saves)
   + the work lost since its last checkpoint (0 when it saves on SIGTERM as the contract asks and no
   periodic progress is known; all of it when it does not checkpoint) + `startup_seconds` on-prem.
4. Remaining time: the caller's estimate (`time_left`: its durationSeconds less its progress, else the
   median of the observed runs of its shape that lasted longer than it has run, less what it has run:
   run times are heavy-tailed, so a job that has run long is likely a long one; its tenant's runs of
   that shape on its own product first, else on any product, else broker.burst.wait_prediction's
   fallbacks). The move must leave it at least
   `min_remaining_ratio` x the restart cost to run (so the finish is at most 1/ratio later than staying).
5. Saving: the cloud time it would still run, less the grace period it still runs there, at its price:
   price x GPUs x (remaining - grace) / 3600; at least `min_saving_dollars`.
6. Capacity: an on-prem pool (cluster, product) it accepts whose GPUs have been free for
   `free_for_seconds` (the least free over that window: `FreeHistory`), less what the jobs still queued
   for that pool ask for (`queued_demand`: the queue comes first; burst-back takes only what nobody waits
   for) and less `keep_free_gpus` (kept for what arrives next), and whose nodes hold its pods now.
   Jobs are taken by saving, largest first; each takes its GPUs off the pool it is given.

Every verdict carries its numbers and a one-line reason for the job's events:
"burst-back: est. $41.20 saved (5.1 h left on cloud-burst at $1.00/GPU-h x 8); restart costs 3 min;
on-prem onprem-a (H100-80GB) free 10 min".
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from broker.burst.wait_prediction import MIN_SAMPLES, RunTimeModel, median, shape_key
from broker.core.model import JobRequest
from broker.core.records import Saving

__all__ = [
    "BurstBackPolicy",
    "BurstBackSettings",
    "BurstBackVerdict",
    "Candidate",
    "FreeHistory",
    "OnPremPool",
    "Saving",
    "choose",
    "decide",
    "queued_demand",
    "time_left",
]


class BurstBackPolicy(StrEnum):
    AUTO = "auto"
    NEVER = "never"


@dataclass(frozen=True)
class BurstBackSettings:
    """settings.burst.burstBack (broker.burst.settings)."""

    policy: BurstBackPolicy = BurstBackPolicy.AUTO  # the tenants' default
    interval_seconds: float = 30.0  # at most one evaluation this often (and only after a change)
    free_for_seconds: float = 300.0  # on-prem GPUs must have been free this long
    cooldown_seconds: float = 1800.0  # a job moved is not moved again this soon
    min_saving_dollars: float = 1.0
    min_remaining_ratio: float = 4.0  # remaining run >= this x the restart cost
    startup_seconds: float = 60.0  # scheduling, image pull and start on-prem
    move_without_checkpoint: bool = False  # also move jobs that do not checkpoint (from scratch)
    keep_free_gpus: int = 0  # GPUs of each on-prem pool burst-back leaves free for what arrives next
    tenants: Mapping[str, BurstBackPolicy] = field(default_factory=dict)

    def policy_of(self, tenant: str) -> BurstBackPolicy:
        return self.tenants.get(tenant, self.policy)


@dataclass(frozen=True)
class Candidate:
    """A job running on a priced (cloud) cluster, with what the decision needs to know of it."""

    job_id: str
    tenant: str
    cluster: str  # the cloud cluster it runs on
    gpus: int  # GPUs it holds there (all pods)
    gpus_per_pod: int
    pods: int
    price_per_gpu_hour: float
    elapsed_seconds: float  # how long this attempt has run
    remaining_seconds: float  # expected run time still to go
    remaining_basis: str  # where the estimate comes from, as a person reads it
    checkpoint_grace_seconds: float | None  # None: it does not checkpoint
    last_checkpoint_seconds: float | None = None  # its progress (into this attempt) at its last checkpoint
    products: tuple[str, ...] = ()  # the GPU products it accepts (empty: any)
    clusters: tuple[str, ...] = ()  # the clusters it is restricted to (empty: any)
    moved_at: float | None = None  # when burst-back last moved it (cooldown)

    @property
    def checkpoints(self) -> bool:
        return self.checkpoint_grace_seconds is not None

    def lost_seconds(self) -> float:
        """The work a stop now throws away."""
        if not self.checkpoints:
            return self.elapsed_seconds
        if self.last_checkpoint_seconds is None:
            return 0.0  # it saves on SIGTERM, within its grace period (the contract)
        return max(0.0, self.elapsed_seconds - self.last_checkpoint_seconds)


@dataclass(frozen=True)
class OnPremPool:
    """Free whole GPUs of one product in one on-prem cluster, as burst-back may use them now."""

    cluster: str
    product: str
    stable_free: int  # the least free over the last free_for_seconds (0: not watched that long)
    pods_that_fit: Mapping[int, int]  # GPUs per pod -> pods of that size its nodes hold now
    free_since_seconds: float = 0.0  # how long it has had at least one GPU free (for the reason)

    def holds(self, gpus_per_pod: int, pods: int, keep_free: int = 0) -> bool:
        """Its nodes hold the pods now, and its stable free GPUs less `keep_free` cover them."""
        return (
            self.stable_free - keep_free >= gpus_per_pod * pods
            and self.pods_that_fit.get(gpus_per_pod, 0) >= pods
        )


@dataclass(frozen=True)
class BurstBackVerdict:
    job_id: str
    move: bool
    reason: str
    to_cluster: str | None = None
    product: str | None = None
    saving: float = 0.0  # expected cloud cost avoided, in the price's currency
    restart_seconds: float = 0.0


def _human(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def decide(
    job: Candidate, pools: Sequence[OnPremPool], settings: BurstBackSettings, now: float
) -> BurstBackVerdict:
    """One job's verdict against the on-prem pools as they are (see the module's rules)."""

    def stay(why: str, saving: float = 0.0, restart: float = 0.0) -> BurstBackVerdict:
        return BurstBackVerdict(
            job.job_id, False, f"stays on {job.cluster}: {why}", None, None, saving, restart
        )

    if settings.policy_of(job.tenant) is BurstBackPolicy.NEVER:
        return stay(f"tenant {job.tenant}'s burstBack is never")
    if not job.checkpoints and not settings.move_without_checkpoint:
        return stay("it does not checkpoint (a move would restart it from scratch)")
    if job.moved_at is not None and now - job.moved_at < settings.cooldown_seconds:
        return stay(
            f"moved {_human(now - job.moved_at)} ago (not again within {_human(settings.cooldown_seconds)})"
        )
    grace = job.checkpoint_grace_seconds or 0.0
    restart = grace + job.lost_seconds() + settings.startup_seconds
    remaining = max(0.0, job.remaining_seconds)
    rate = job.price_per_gpu_hour * max(1, job.gpus)
    saving = rate * max(0.0, remaining - grace) / 3600
    if remaining < settings.min_remaining_ratio * restart:
        return stay(
            f"{_human(remaining)} left ({job.remaining_basis}) is under "
            f"{settings.min_remaining_ratio:g}x the restart cost of {_human(restart)}",
            saving,
            restart,
        )
    if saving < settings.min_saving_dollars:
        return stay(
            f"est. ${saving:.2f} saved is under the minimum ${settings.min_saving_dollars:.2f}",
            saving,
            restart,
        )
    fitting = [
        p
        for p in pools
        if (not job.products or p.product in job.products)
        and (not job.clusters or p.cluster in job.clusters)
        and p.holds(job.gpus_per_pod, job.pods, settings.keep_free_gpus)
    ]
    if not fitting:
        return stay(
            f"no on-prem GPUs free for {_human(settings.free_for_seconds)} that hold it "
            f"(est. ${saving:.2f} to save)",
            saving,
            restart,
        )
    # the pool with the most GPUs left over after it (keep the tight fits for the queue), then by name
    pool = min(fitting, key=lambda p: (job.gpus - p.stable_free, p.cluster, p.product))
    reason = (
        f"burst-back: est. ${saving:.2f} saved ({_human(remaining)} left on {job.cluster} at "
        f"${job.price_per_gpu_hour:.2f}/GPU-h x {job.gpus}; {job.remaining_basis}); restart costs "
        f"{_human(restart)}; on-prem {pool.cluster} ({pool.product}) free {_human(pool.free_since_seconds)}"
    )
    return BurstBackVerdict(job.job_id, True, reason, pool.cluster, pool.product, saving, restart)


def choose(
    jobs: Iterable[Candidate], pools: Sequence[OnPremPool], settings: BurstBackSettings, now: float
) -> list[BurstBackVerdict]:
    """Every job's verdict, the largest savings first; each job moved takes its GPUs off its pool (and
    the pods it places off the pool's fit), so two jobs never count on the same free GPUs."""
    left = {(p.cluster, p.product): p for p in pools}
    # by what each would save at best (its own decide against the pools as they are), largest first
    ranked = sorted(jobs, key=lambda j: (-_saving_of(j), j.job_id))
    out = []
    for job in ranked:
        verdict = decide(job, list(left.values()), settings, now)
        out.append(verdict)
        if verdict.move and verdict.to_cluster is not None and verdict.product is not None:
            key = (verdict.to_cluster, verdict.product)
            p = left[key]
            free = p.stable_free - job.gpus
            fits = {
                g: max(0, min(n - (job.pods if g == job.gpus_per_pod else 0), free // g if g > 0 else 0))
                for g, n in p.pods_that_fit.items()
            }
            left[key] = OnPremPool(p.cluster, p.product, free, fits, p.free_since_seconds)
    return out


def time_left(model: RunTimeModel, request: JobRequest, product: str, elapsed: float) -> tuple[float, str]:
    """(seconds a running job has still to run, the basis as a person reads it); see rule 4.

    Burst-back asks about jobs that have run a while on a cloud product whose runs are few; the shape's
    runs on the other products (on-prem, where most run) say more than the model's bare fallback (10%
    of the expectation once past every run of its product)."""
    if request.duration_seconds is not None and request.duration_seconds > 0:
        return max(0.0, request.duration_seconds - elapsed), "its durationSeconds"
    own = shape_key(request, product)
    shape = own.rsplit("/", 1)[1]
    prefix = f"{request.tenant}/"
    pooled = [
        s for k, v in model.samples.items() if k.startswith(prefix) and k.endswith(f"/{shape}") for s in v
    ]
    for key, seen in ((own, model.samples.get(own, ())), (f"{request.tenant}/*/{shape}", pooled)):
        longer = [s for s in seen if s > elapsed]
        if len(longer) >= MIN_SAMPLES:
            return median(longer) - elapsed, f"median of {len(longer)} longer runs of {key}"
    return model.remaining(request, product, elapsed), model.expected(request, product).basis


def queued_demand(cluster: str, product: str, queued: Iterable[JobRequest]) -> int:
    """The GPUs the queued jobs that would take this on-prem pool ask for (whole-GPU jobs whose products
    and clusters admit it): burst-back leaves them that much."""
    return sum(
        r.total_gpus
        for r in queued
        if not r.wants_mig
        and (not r.gpu_products or product in r.gpu_products)
        and (not r.clusters or cluster in r.clusters)
    )


def _saving_of(job: Candidate) -> float:
    return job.price_per_gpu_hour * max(1, job.gpus) * max(0.0, job.remaining_seconds) / 3600


class FreeHistory:
    """The free GPUs of each on-prem pool over time, to say how many stayed free for a whole window.

    `observe(now, free)` with the pools' free GPUs as the snapshot shows them (called when it changed);
    `stable(pool, now, window)`: the least free since `now - window`, 0 when the pool has not been
    watched that long. Keeps one entry per change, dropped once older than the window."""

    def __init__(self) -> None:
        self._seen: dict[str, deque[tuple[float, int]]] = {}
        self._first: dict[str, float] = {}
        self._free_from: dict[str, float] = {}  # since when each pool has had a GPU free, unbroken

    def observe(self, now: float, free: Mapping[str, int]) -> None:
        for key in list(self._seen):
            if key not in free:  # the pool is gone (cluster down, removed): watch it afresh
                del self._seen[key]
                del self._first[key]
                self._free_from.pop(key, None)
        for key, n in free.items():
            seen = self._seen.setdefault(key, deque())
            self._first.setdefault(key, now)
            if not seen or seen[-1][1] != n:
                seen.append((now, n))
            if n <= 0:
                self._free_from.pop(key, None)
            else:
                self._free_from.setdefault(key, now)

    def stable(self, key: str, now: float, window: float) -> int:
        seen = self._seen.get(key)
        if not seen or now - self._first[key] < window:
            return 0
        since = now - window
        while len(seen) > 1 and seen[1][0] <= since:
            seen.popleft()  # the value in force at `since` is the last one at or before it
        return min(n for _, n in seen)

    def free_since(self, key: str, now: float) -> float:
        """How long the pool has had at least one GPU free without a break (0: none free now)."""
        return now - self._free_from.get(key, now)

    def next_change(self, now: float, window: float) -> float | None:
        """The earliest time after `now` a pool's stable figure may grow without a new observation (an
        entry leaves the window, or the pool has been watched for a whole window); None: none can."""
        times = []
        for key, seen in self._seen.items():
            first = self._first[key]
            if now - first < window:
                times.append(first + window)
                continue
            later = (t + window for t, _ in list(seen)[1:] if t + window > now)
            nxt = next(later, None)
            if nxt is not None:
                times.append(nxt)
        return min(times, default=None)
