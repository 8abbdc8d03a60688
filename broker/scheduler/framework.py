"""The level-1 plugin framework, in the shape of kube-scheduler's and Karmada's.

Owns the Status type (codes in model.Code), the PreparedJob a PreFilter step builds once per decision,
the RunOption (one way to run the job in a cluster), the FilterPlugin / ScorePlugin protocols and the
functions that run them (run_filters, run_scores), and the NoFit diagnosis built from rejections.

The contract, as in kube-scheduler:
- PreFilter: job-level work is done once per decision (`PreparedJob`); a filter whose `applies(job)` is
  False is skipped for that job (kube-scheduler's Skip) and reported as passed.
- Filter plugins only read. A filter gets the options still standing and returns either a Status (the
  cluster is rejected) or the options that survive: the very sequence it was given when it narrows
  nothing, so the common case allocates nothing. The framework threads the options from one filter to
  the next. Policy knobs (staleness limit, strategy, price ceiling) live on the plugin instances.
- A plugin that raises is an ERROR status naming the plugin and the exception: the cluster is not
  chosen and the NoFit diagnosis says why. A broken plugin never crashes the placer and never scores 0.

Pure: plugins see a PreparedJob, a ClusterSummary, the cluster's ClusterTraits and the time.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from broker.core.model import (
    ClusterRejection,
    ClusterSummary,
    ClusterTraits,
    Code,
    JobRequest,
    MigCapacity,
    NoFit,
    ProductCapacity,
)

__all__ = [
    "PLACEMENT_FIELDS",
    "SKIPPED",
    "SUCCESS",
    "Code",
    "FilterPlugin",
    "FilterResult",
    "PreparedJob",
    "RunOption",
    "ScorePlugin",
    "Status",
    "build_nofit",
    "memo",
    "run_filters",
    "run_scores",
]


@dataclass(frozen=True)
class Status:
    """A plugin's verdict. `reason` reads as a sentence fragment ("no node with 8 free H100-80GB");
    `best` says how close the cluster came (8 wanted, `best` = 6 free on one node)."""

    code: Code = Code.SUCCESS
    reason: str = ""
    plugin: str = ""
    best: int | None = None

    @property
    def is_success(self) -> bool:
        return self.code is Code.SUCCESS

    @staticmethod
    def success() -> Status:
        return SUCCESS

    @staticmethod
    def unschedulable(reason: str, best: int | None = None) -> Status:
        return Status(Code.UNSCHEDULABLE, reason, best=best)

    @staticmethod
    def unresolvable(reason: str) -> Status:
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reason)

    @staticmethod
    def error(reason: str) -> Status:
        return Status(Code.ERROR, reason)


SUCCESS = Status()  # the one success a plugin returns; the framework names the plugin on its own copy
SKIPPED = "skipped: does not apply to this job"


@dataclass(frozen=True)
class RunOption:
    """One way to run the job in a cluster: a product and the resource each pod asks for."""

    product: str
    memory_mib: int
    resource_name: str  # nvidia.com/gpu, nvidia.com/mig-<profile>; "" for a job without GPUs
    units_per_pod: int
    mig_profile: str | None = None
    compute_slices: int = 7  # sevenths of a GPU per unit (7 for a whole GPU)
    capacity: ProductCapacity | None = None
    mig: MigCapacity | None = None
    gfd_products: tuple[str, ...] = ()
    clique: str | None = None  # the NVLink clique the gang fits in (plugins/nvlink.py), for level 2
    dra: bool = False  # the pods ask through a DRA claim (the product's or profile's counted kind)

    @property
    def gpu_fraction_per_unit(self) -> float:
        return self.compute_slices / 7


PLACEMENT_FIELDS: tuple[str, ...] = (
    "gpus_per_pod",
    "pods",
    "gpu_products",
    "min_gpu_memory_mib",
    "mig_profile",
    "mig_need",
    "mig_slices_per_pod",
    "numa_aligned",
    "allow_burst",
    "max_price_per_gpu_hour",
    "clusters",
    "avoid_clusters",
    # the tenant namespace's quota and limits (plugins/namespace_quota.py)
    "tenant",
    "cpu_millis_per_pod",
    "memory_mib_per_pod",
    "nvlink_clique",
)
"""The JobRequest fields level 1 reads; plugins read no others (not the name, image, tenant, labels)."""


@dataclass(frozen=True)
class PreparedJob:
    """What PreFilter works out once per decision, so no cluster's filters redo it.

    `wanted_products` are the job's acceptable products normalised to catalog names (empty: any);
    `need` names what the job asks for as a noun phrase ("MIG 1g.10gb", "MIG >= 10 GB", "H100-80GB",
    "GPUs"); `options_key` says which options a cluster offers this job (the per-summary option index is
    keyed by it); `filters` are the policy's filters that apply to this job, `positions` their places in
    the policy's chain and `passed` the statuses of a cluster that passes the whole chain (skipped filters
    included, as passed).

    `shape` is the job's PLACEMENT_FIELDS, hashable: two jobs of one shape get equal verdicts from the
    same summary, traits, policy and time, so a placer may evaluate a cluster once per shape (a batch of
    like jobs re-evaluates only the clusters that changed).
    """

    job: JobRequest
    wanted_products: frozenset[str]
    need: str
    options_key: tuple[Any, ...]
    filters: tuple[FilterPlugin, ...]
    positions: tuple[int, ...]
    passed: tuple[Status, ...]
    shape: tuple[Any, ...] = ()


FilterResult = Status | Sequence[RunOption]


@runtime_checkable
class FilterPlugin(Protocol):
    """Rejects a cluster (a Status) or returns the options that survive (the input itself if all do)."""

    @property
    def name(self) -> str: ...

    def applies(self, job: PreparedJob) -> bool:
        """PreFilter: False when this filter cannot reject anything for this job (it is skipped)."""
        ...

    def filter(
        self,
        job: PreparedJob,
        summary: ClusterSummary,
        traits: ClusterTraits | None,
        now: float,
        options: Sequence[RunOption],
    ) -> FilterResult: ...


@runtime_checkable
class ScorePlugin(Protocol):
    """0..100 for the option chosen in a feasible cluster; higher is better."""

    @property
    def name(self) -> str: ...

    @property
    def weight(self) -> int: ...

    def score(
        self, job: PreparedJob, summary: ClusterSummary, traits: ClusterTraits | None, option: RunOption
    ) -> int: ...


def _failure(plugin: str, exc: Exception) -> Status:
    return Status(Code.ERROR, f"{plugin} failed: {type(exc).__name__}: {exc}", plugin)


def run_filters(
    job: PreparedJob,
    summary: ClusterSummary,
    traits: ClusterTraits | None,
    now: float,
    options: Sequence[RunOption],
) -> tuple[Sequence[RunOption], Status | None, int]:
    """Run the job's filters in order until one rejects.

    Returns (the surviving options, the rejecting status named after its plugin or None, the position
    in the policy's chain of the rejecting filter). A filter that raises, or that narrows the options
    to none without saying why, gives an ERROR status; a cluster left with no option at all after the
    chain (no filter checks products) is rejected as unresolvable by "options".
    """
    filters = job.filters
    for plugin in filters:
        try:
            result = plugin.filter(job, summary, traits, now, options)
        except Exception as exc:  # a bug in one plugin must not stop placement elsewhere
            return options, _failure(plugin.name, exc), job.positions[filters.index(plugin)]
        if result is options:
            continue
        if isinstance(result, Status):
            if result.code is Code.SUCCESS:
                continue
            if result.plugin != plugin.name:  # plugins may name themselves (a memoised rejection does)
                result = Status(result.code, result.reason, plugin.name, result.best)
            return options, result, job.positions[filters.index(plugin)]
        if not result:
            reason = f"{plugin.name} failed: narrowed the options to none without a status"
            return options, Status(Code.ERROR, reason, plugin.name), job.positions[filters.index(plugin)]
        options = result
    if not options:  # nothing to run the job with, and no filter said so (gpu-product disabled)
        return (
            options,
            Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, f"no {job.need}", "options"),
            len(job.passed),
        )
    return options, None, len(job.passed)


def run_scores(
    plugins: Sequence[ScorePlugin],
    weights: Sequence[int],
    job: PreparedJob,
    summary: ClusterSummary,
    traits: ClusterTraits | None,
    option: RunOption,
) -> tuple[dict[str, int], int, Status | None]:
    """Every score plugin's score clamped to 0..100, and their weighted mean (0..100) with `weights`
    (one per plugin, >= 0); or, as the third item, the ERROR status of the first plugin that raises
    (or returns something that is not a number): a broken score is an error for the cluster, not a 0."""
    scores: dict[str, int] = {}
    weighted = 0
    for i, plugin in enumerate(plugins):
        try:
            value = int(plugin.score(job, summary, traits, option))
        except Exception as exc:
            return scores, 0, _failure(plugin.name, exc)
        value = 0 if value < 0 else 100 if value > 100 else value
        scores[plugin.name] = value
        weighted += value * weights[i]
    total_weight = sum(weights)
    return scores, (round(weighted / total_weight) if total_weight else 0), None


T = TypeVar("T")


def memo(summary: ClusterSummary, key: Hashable, compute: Callable[..., T], *args: Any) -> T:
    """`compute(*args)`, once per summary and key (a summary never changes once built, so what is derived
    from it stays true): the per-summary index placement reads, by product and size."""
    derived = summary.derived
    value = derived.get(key, _MISSING)
    if value is _MISSING:
        value = derived[key] = compute(*args)
    return value  # type: ignore[no-any-return]


_MISSING = object()


def build_nofit(total_clusters: int, failures: Iterable[tuple[str, Status]]) -> NoFit:
    """NoFit from each rejected cluster's failing status: "0/5 clusters are available: 3 no node with 8
    free H100-80GB (best: 6 on onprem-b), 1 stale, 1 burst not allowed."."""
    rejections = tuple(
        ClusterRejection(
            cluster=cluster, plugin=status.plugin, reason=status.reason, best=status.best, code=status.code
        )
        for cluster, status in sorted(failures, key=lambda cs: cs[0])
    )
    return NoFit(total_clusters=total_clusters, rejections=rejections)
