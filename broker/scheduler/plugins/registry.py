"""The plugin registry: every filter and score plugin by name, its place in the chain, its defaults.

Owns which plugins exist, the order filters run in (cheap, cluster-level checks first; product and
capacity checks after), which are on by default, each score's default weight, and the knobs ("args")
each plugin takes. A plugin is a frozen dataclass; its args are its dataclass fields (other than
`weight`), set by keyword. `build_filters` / `build_scores` turn per-plugin overrides (from the cluster
config, validated there) into the chains a PlacementPolicy runs. Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from broker.scheduler.framework import FilterPlugin, ScorePlugin
from broker.scheduler.plugins.allowlist import ClusterAllowList
from broker.scheduler.plugins.binpack import BinPackScore
from broker.scheduler.plugins.burst import BurstEligibility
from broker.scheduler.plugins.gpu_fit import WholeGpuFit
from broker.scheduler.plugins.gpu_product import GpuProductMemory
from broker.scheduler.plugins.gpu_reliability import GpuReliabilityScore
from broker.scheduler.plugins.health import HealthFreshness
from broker.scheduler.plugins.kinds import WorkloadKindServed
from broker.scheduler.plugins.kueue import KueueHeadroom, QueueHeadroomScore
from broker.scheduler.plugins.mig_fit import MigFit
from broker.scheduler.plugins.namespace_quota import NamespaceQuota
from broker.scheduler.plugins.numa import NumaFit
from broker.scheduler.plugins.nvlink import NvlinkCliqueFit, NvlinkCliqueScore
from broker.scheduler.plugins.price import PriceCap, PriceScore

__all__ = [
    "FILTERS",
    "SCORES",
    "PluginSettings",
    "PluginSpec",
    "build_filters",
    "build_scores",
    "spec",
]

Kind = Literal["filter", "score"]


@dataclass(frozen=True)
class PluginSpec:
    """One registered plugin: its name, kind, the class that makes it, whether it runs by default."""

    name: str
    kind: Kind
    factory: type[Any]  # a frozen dataclass; keyword args = its knobs (and `weight` for a score)
    about: str
    enabled: bool = True

    @property
    def args(self) -> tuple[str, ...]:
        """The knobs an operator may set (dataclass fields, `weight` excepted: it is set on its own)."""
        return tuple(f.name for f in dataclasses.fields(self.factory) if f.name != "weight")

    @property
    def default_weight(self) -> int:
        """A score's weight when the config sets none (0 for filters)."""
        for f in dataclasses.fields(self.factory):
            if f.name == "weight" and isinstance(f.default, int):
                return f.default
        return 0


FILTERS: tuple[PluginSpec, ...] = (
    PluginSpec("health", "filter", HealthFreshness, "reachable, heartbeat within the staleness limit"),
    PluginSpec("allowlist", "filter", ClusterAllowList, "only the clusters a job names"),
    PluginSpec("burst", "filter", BurstEligibility, "cloud clusters only for jobs that allow burst"),
    PluginSpec(
        "workload-kind",
        "filter",
        WorkloadKindServed,
        "serves the job's kind (JobSet, RayJob, ...) and runtime",
    ),
    PluginSpec("gpu-product", "filter", GpuProductMemory, "an acceptable product with enough memory"),
    PluginSpec("gpu-fit", "filter", WholeGpuFit, "whole GPUs fit, each pod on one node, the gang at once"),
    PluginSpec("mig-fit", "filter", MigFit, "MIG slices fit, on settled nodes"),
    PluginSpec("numa-fit", "filter", NumaFit, "each pod's GPUs inside one NUMA zone (numa_aligned jobs)"),
    PluginSpec(
        "nvlink-clique",
        "filter",
        NvlinkCliqueFit,
        "a gang that asks for one NVLink clique fits in one (best fit)",
    ),
    PluginSpec("price-cap", "filter", PriceCap, "no product over the job's price cap"),
    PluginSpec("kueue", "filter", KueueHeadroom, "the ClusterQueue quota has room (Kueue clusters)"),
    PluginSpec(
        "namespace-quota",
        "filter",
        NamespaceQuota,
        "the tenant's namespace exists, its ResourceQuota takes the job and its LimitRange admits the pod",
    ),
)
SCORES: tuple[PluginSpec, ...] = (
    PluginSpec("binpack", "score", BinPackScore, "fill nodes snugly (or spread: most room left)"),
    PluginSpec("price", "score", PriceScore, "cheaper GPU-hours score higher"),
    PluginSpec("queue", "score", QueueHeadroomScore, "more quota / free GPUs left after the job"),
    PluginSpec("nvlink-clique", "score", NvlinkCliqueScore, "a preferred gang inside one NVLink clique"),
    PluginSpec("gpu-reliability", "score", GpuReliabilityScore, "long jobs where GPUs fail less (health.md)"),
)


def spec(kind: Kind, name: str) -> PluginSpec | None:
    """The registered plugin of that kind and name, or None."""
    return next((s for s in (FILTERS if kind == "filter" else SCORES) if s.name == name), None)


@dataclass(frozen=True)
class PluginSettings:
    """An operator's override for one plugin; None keeps the registry's default."""

    enabled: bool | None = None
    weight: int | None = None  # scores only
    args: Mapping[str, Any] = field(default_factory=dict)  # field name -> value, already validated


def _build(
    specs: tuple[PluginSpec, ...], kind: Kind, overrides: Mapping[str, PluginSettings]
) -> tuple[Any, ...]:
    unknown = sorted(set(overrides) - {s.name for s in specs})
    if unknown:
        known = ", ".join(s.name for s in specs)
        raise ValueError(f"unknown {kind} plugin {unknown[0]!r} (known: {known})")
    out = []
    for s in specs:
        o = overrides.get(s.name, PluginSettings())
        if not (s.enabled if o.enabled is None else o.enabled):
            continue
        bad = sorted(set(o.args) - set(s.args))
        if bad:
            raise ValueError(f"{kind} plugin {s.name!r} has no arg {bad[0]!r} (args: {', '.join(s.args)})")
        kwargs = dict(o.args)
        if o.weight is not None:
            if kind != "score":
                raise ValueError(f"filter plugin {s.name!r} takes no weight")
            kwargs["weight"] = o.weight
        out.append(s.factory(**kwargs))
    return tuple(out)


def build_filters(overrides: Mapping[str, PluginSettings] | None = None) -> tuple[FilterPlugin, ...]:
    """The filter chain, in registry order, with the overrides applied. Unknown names raise ValueError."""
    return _build(FILTERS, "filter", overrides or {})


def build_scores(overrides: Mapping[str, PluginSettings] | None = None) -> tuple[ScorePlugin, ...]:
    """The score plugins, in registry order, with the overrides applied. Unknown names raise ValueError."""
    return _build(SCORES, "score", overrides or {})
