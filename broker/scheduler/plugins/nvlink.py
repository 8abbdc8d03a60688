"""NVLink cliques at level 1: a gang that asks for one clique (GB200/GB300 NVL72 racks) gets one.

The filter `nvlink-clique` fits the whole gang (pods x GPUs per pod, each pod on one node) into ONE
clique of the cluster, read from the summary's CliqueCapacity tuples. Among the cliques that fit it
takes the best fit: the one with the fewest pods' room left (then the fewest free GPUs, then by name),
so whole racks stay free for whole-rack jobs. The option it keeps carries the clique, which the
Placement carries to level 2 (node affinity on the clique label, a ComputeDomain).

- required: no clique fits -> rejected, the reason naming the best clique ("no NVLink clique with 8
  nodes of 4 free GB200 (best: 6 in <clique>)"); a cluster with no clique of the product at all is
  unresolvable (only a change of the fleet helps).
- preferred: no clique fits -> the options pass unchanged (any nodes), and the score `nvlink-clique`
  ranks such a cluster below one where the gang fits in one clique.

Pure: reads the summary only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from broker.core.k8s_names import GPU
from broker.core.model import ClusterSummary, ClusterTraits
from broker.core.topology import CliqueCapacity, NvlinkClique
from broker.scheduler.framework import Code, FilterResult, PreparedJob, RunOption, Status

__all__ = ["NvlinkCliqueFit", "NvlinkCliqueScore", "best_clique"]


def best_clique(
    cliques: Sequence[CliqueCapacity], product: str, gpus_per_pod: int, pods: int
) -> tuple[CliqueCapacity | None, CliqueCapacity | None]:
    """(the best-fitting clique of `product` that takes the gang, or None; the closest one, or None).

    Best fit = least room left after the gang (pods that fit, then free GPUs, then the label value);
    the closest = most pods that fit (then the label value), for the verdict when none takes it."""
    fits: list[tuple[int, int, str, CliqueCapacity]] = []
    closest: tuple[int, str, CliqueCapacity] | None = None
    for c in cliques:
        if c.product != product:
            continue
        room = c.pods_that_fit(gpus_per_pod)
        if room >= pods:
            fits.append((room, c.free, c.clique, c))
        if closest is None or (-room, c.clique) < (-closest[0], closest[1]):
            closest = (room, c.clique, c)
    best = min(fits, key=lambda t: t[:3])[3] if fits else None
    return best, (closest[2] if closest else None)


def _whole(o: RunOption) -> bool:
    return o.resource_name == GPU and o.mig_profile is None and o.capacity is not None


@dataclass(frozen=True)
class NvlinkCliqueFit:
    name: ClassVar[str] = "nvlink-clique"

    def applies(self, job: PreparedJob) -> bool:
        j = job.job
        return j.nvlink_clique is not NvlinkClique.NONE and j.gpus_per_pod > 0 and not j.wants_mig

    def filter(
        self,
        job: PreparedJob,
        summary: ClusterSummary,
        traits: ClusterTraits | None,
        now: float,
        options: Sequence[RunOption],
    ) -> FilterResult:
        j = job.job
        if j.nvlink_clique is NvlinkClique.NONE:
            return options
        kept: list[RunOption] = []
        closest: tuple[int, CliqueCapacity] | None = None
        for o in options:
            if not _whole(o):
                continue
            best, near = best_clique(summary.cliques, o.product, j.gpus_per_pod, j.pods)
            if best is not None:
                kept.append(dataclasses.replace(o, clique=best.clique))
            elif near is not None:
                room = near.pods_that_fit(j.gpus_per_pod)
                if closest is None or room > closest[0]:
                    closest = (room, near)
        if kept:
            return kept
        if j.nvlink_clique is NvlinkClique.PREFERRED:
            return options
        whole = sorted({o.product for o in options if _whole(o)})
        what = whole[0] if len(whole) == 1 else "GPUs"
        if closest is None:
            return Status(
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                f"no NVLink clique of {what} (no node labelled nvidia.com/gpu.clique)",
                self.name,
            )
        room, near = closest
        return Status(
            Code.UNSCHEDULABLE,
            f"no NVLink clique with {j.pods} nodes of {j.gpus_per_pod} free {what}"
            f" (best: {room} in {near.clique})",
            self.name,
        )


@dataclass(frozen=True)
class NvlinkCliqueScore:
    """100 where the gang runs inside one clique (or the job asks nothing of cliques); `fallback`
    where a `preferred` gang would run on any nodes."""

    name: ClassVar[str] = "nvlink-clique"
    weight: int = 2
    fallback: int = 0

    def score(
        self, job: PreparedJob, summary: ClusterSummary, traits: ClusterTraits | None, option: RunOption
    ) -> int:
        if job.job.nvlink_clique is NvlinkClique.NONE or option.clique is not None:
            return 100
        return self.fallback
