"""Never-fit at submit: a job no declared cluster could hold even with every GPU free.

Owns the check and its warning. Such a job is still accepted (clusters may join or grow); the answer and
the job carry the warning, which names the largest cluster's fit. A whole-GPU pod must also fit one node's
CPU and memory (ProductCapacity.max_node_cpu_millis / max_node_memory_mib, when known; issue 48 finding 9):
a pod asking more than any node of a product that has the GPUs is warned about, naming the most there is. The check reads only the summaries
(no per-node data): a node's allocatable GPUs are bounded above by what the histograms allow (the most
free on one node plus every allocated GPU, or the GPUs of nodes that take no pods now), the cluster's by
its whole GPUs plus its autoscaling headroom, so a warning is never given to a job that could fit.
Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from broker.core import catalog
from broker.core.k8s_names import same_profile
from broker.core.model import ClusterSummary, JobRequest, MigCapacity, ProductCapacity

__all__ = ["never_fit_warning"]


def _gpus_bound(p: ClusterSummary, cap: ProductCapacity) -> tuple[int, int]:
    """(most GPUs one node could offer, most GPUs the cluster could offer) of a product, all free."""
    idle = max(0, cap.whole_gpus - cap.allocatable)  # on nodes that take no pods now (cordoned, tainted)
    one_node = max(cap.max_free_on_one_node + cap.allocated, idle)
    total = max(cap.whole_gpus, cap.allocatable) + p.autoscale_headroom.get(cap.product, 0)
    return (total if p.autoscale_headroom.get(cap.product, 0) else one_node), total


def _products(job: JobRequest, summary: ClusterSummary) -> list[ProductCapacity]:
    return [
        c
        for c in summary.products
        if (not job.gpu_products or c.product in job.gpu_products) and c.memory_mib >= job.min_gpu_memory_mib
    ]


def _profiles(job: JobRequest, summary: ClusterSummary) -> list[MigCapacity]:
    out = []
    for m in summary.mig:
        if job.gpu_products and m.product not in job.gpu_products:
            continue
        if job.mig_profile is not None:
            if same_profile(m.profile, job.mig_profile):
                out.append(m)
        elif job.mig_need is not None:
            profile = catalog.mig_profile(m.product, m.profile)
            if profile is not None and catalog.profile_satisfies(profile, job.mig_need):
                out.append(m)
    return out


def _node_short(job: JobRequest, cap: ProductCapacity) -> str | None:
    """What one pod asks beyond the most CPU or memory one node of the product has (None: it fits, or
    the node sizes are not known)."""
    cpu, mem = cap.max_node_cpu_millis, cap.max_node_memory_mib
    short = []
    if cpu and job.cpu_millis_per_pod > cpu:
        short.append(f"{job.cpu_millis_per_pod / 1000:g} CPUs (the most on one node: {cpu / 1000:g})")
    if mem and job.memory_mib_per_pod > mem:
        short.append(
            f"{job.memory_mib_per_pod / 1024:g} GiB memory (the most on one node: {mem / 1024:g} GiB)"
        )
    return " and ".join(short) or None


def _whole(job: JobRequest, summaries: Sequence[ClusterSummary]) -> str | None:
    g, pods = job.gpus_per_pod, job.pods
    best: tuple[int, int, str, str] | None = None  # (total, most free on one node now, cluster, product)
    too_small: str | None = None  # the GPUs would fit; one node's CPU or memory would not
    for s in summaries:
        for cap in _products(job, s):
            one_node, total = _gpus_bound(s, cap)
            if g <= one_node and g * pods <= total:
                short = _node_short(job, cap)
                if short is None:
                    return None
                too_small = too_small or f"a pod asks {short} on {s.cluster} ({cap.product})"
                continue
            if best is None or (total, cap.max_free_on_one_node) > best[:2]:
                best = (total, cap.max_free_on_one_node, s.cluster, cap.product)
    what = f"{pods} pod{'s' if pods > 1 else ''} x {g} GPUs"
    if too_small is not None:
        return f"no node of a declared cluster could hold one pod even empty: {too_small}"
    if best is None:
        wanted = ", ".join(job.gpu_products) or "GPUs"
        return f"no declared cluster offers {wanted} for {what}"
    total, most, cluster, product = best
    return (
        f"no declared cluster could hold {what} even empty; the largest: {cluster} with "
        f"{total} {product} ({most} free on one node now)"
    )


def _mig(job: JobRequest, summaries: Sequence[ClusterSummary]) -> str | None:
    n, pods = job.mig_slices_per_pod, job.pods
    best: tuple[int, str, str] | None = None
    for s in summaries:
        for m in _profiles(job, s):
            if n * pods <= m.allocatable:
                return None
            if best is None or m.allocatable > best[0]:
                best = (m.allocatable, s.cluster, f"{m.product} {m.profile}")
    wanted = job.mig_profile or "a MIG profile meeting the need"
    if best is None:
        return f"no declared cluster offers {wanted}"
    total, cluster, what = best
    return (
        f"no declared cluster could hold {pods} pod{'s' if pods > 1 else ''} x {n} {wanted} even empty; "
        f"the largest: {cluster} with {total} {what}"
    )


def never_fit_warning(job: JobRequest, summaries: Sequence[ClusterSummary]) -> str | None:
    """A warning when no cluster among `summaries` (those the job may use) could ever hold the job;
    None when one could, when the job asks no GPUs, or when no cluster is known yet."""
    if job.clusters:
        summaries = [s for s in summaries if s.cluster in job.clusters]
    if not summaries:
        return None
    if job.wants_mig:
        why = _mig(job, summaries)
    elif job.gpus_per_pod > 0:
        why = _whole(job, summaries)
    else:
        return None
    return None if why is None else f"never fits: {why}; accepted, it waits for a cluster that can"
