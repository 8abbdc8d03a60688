"""The views the HTTP API returns: pydantic models and dict views of jobs, events, placements, clusters and
nodes (the submission's own model is broker.intake.job_spec)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from broker.api.gpu_health_view import cluster_gpu_health_view, fault_view
from broker.capacity.node_detail import NodeDetail
from broker.core.model import (
    ClusterSummary,
    JobEvent,
    JobRecord,
    NoFit,
    Placement,
    ProductCapacity,
)
from broker.intake.strict_wire import Wire
from broker.scheduler.placement import ClusterVerdict


class PlacementView(Wire):
    cluster: str
    product: str
    resource_name: str = Field(alias="resourceName")
    units_per_pod: int = Field(alias="unitsPerPod")
    pods: int
    score: int
    scores: dict[str, int]
    mig_profile: str | None = Field(alias="migProfile")
    burst: bool
    clique: str | None = None  # the NVLink clique the gang is pinned to (docs/topology.md)
    dra: bool = False  # the pods ask through a ResourceClaimTemplate (the claim kind chosen for this job)

    @classmethod
    def of(cls, p: Placement) -> PlacementView:
        return cls(
            cluster=p.cluster,
            product=p.product,
            resource_name=p.resource_name,
            units_per_pod=p.units_per_pod,
            pods=p.pods,
            score=p.score,
            scores=dict(p.scores),
            mig_profile=p.mig_profile,
            burst=p.burst,
            clique=p.clique,
            dra=p.dra,
        )


class JobView(Wire):
    id: str
    name: str
    tenant: str
    state: str
    reason: str
    attempt: int
    cluster: str | None
    workload: str | None
    placement: PlacementView | None
    created_at: float = Field(alias="createdAt")
    updated_at: float = Field(alias="updatedAt")
    request: dict[str, Any]
    trace_id: str | None = Field(default=None, alias="traceId")
    warnings: list[str] = Field(default_factory=list)  # e.g. never fits any declared cluster, even empty
    source: str | None = None  # a hub object's "hub:jobs.batch/<ns>/<name>" (docs/hub.md)
    # the checkpoint the next attempt resumes from (GPUFED_RESUME_FROM, docs/migration.md)
    resume_from: str | None = Field(default=None, alias="resumeFrom")
    group: str | None = None  # docs/batch.md
    depends_on: list[dict[str, str]] = Field(default_factory=list, alias="dependsOn")
    held_by: str | None = Field(default=None, alias="heldBy")

    @classmethod
    def of(cls, r: JobRecord) -> JobView:
        req = r.request
        return cls(
            id=r.id,
            name=req.name,
            tenant=req.tenant,
            group=req.batch.group or None,
            depends_on=[{d.kind: d.ref, "when": str(d.when)} for d in req.batch.depends_on],
            held_by=r.held_by,
            state=str(r.state),
            reason=r.reason,
            warnings=list(r.warnings),
            source=req.source or None,
            resume_from=r.resume_from,
            attempt=r.attempt,
            cluster=r.cluster,
            workload=r.workload_name,
            placement=PlacementView.of(r.placement) if r.placement else None,
            created_at=r.created_at,
            updated_at=r.updated_at,
            trace_id=r.trace_parent.split("-")[1]
            if r.trace_parent and r.trace_parent.count("-") == 3
            else None,
            request={
                "gpus": req.gpus_per_pod,
                "pods": req.pods,
                "gpuProducts": list(req.gpu_products),
                "migProfile": req.mig_profile,
                "migNeedGB": req.mig_need.memory_gb if req.mig_need else None,
                "numaAligned": req.numa_aligned,
                "nvlinkClique": str(req.nvlink_clique),
                "allowBurst": req.allow_burst,
                "maxWaitSeconds": req.max_wait_seconds,
                "failover": str(req.failover),
                "onImagePullFailure": str(req.on_image_pull_failure),
                "image": req.image,
                "command": list(req.command),
                "args": list(req.args),
                "env": [dict(e) for e in req.env],
                "labels": dict(req.labels),
                "priorityClass": req.priority_class,
                "checkpointGraceSeconds": req.checkpoint_grace_seconds,
            },
        )


class EventView(Wire):
    at: float
    state: str
    attempt: int
    reason: str
    cluster: str | None

    trace_id: str | None = Field(default=None, alias="traceId")

    @classmethod
    def of(cls, e: JobEvent) -> EventView:
        return cls(
            at=e.at,
            state=str(e.state),
            attempt=e.attempt,
            reason=e.reason,
            cluster=e.cluster,
            trace_id=e.trace_id,
        )


def kind_view(k: ProductCapacity) -> dict[str, Any]:
    """One claim kind's capacity of a product (a job fits the cluster when it fits one kind)."""
    return {
        "kind": "dra" if k.dra else "device-plugin",
        "allocatable": k.allocatable,
        "allocated": k.allocated,
        "free": k.free,
        "maxFreeOnOneNode": k.max_free_on_one_node,
        "nodesByFree": list(k.nodes_by_free),
    }


def summary_view(s: ClusterSummary, now: float) -> dict[str, Any]:
    """A cluster's capacity as the fleet view shows it (JSON-ready)."""
    return {
        "cluster": s.cluster,
        "tier": str(s.tier),
        "region": s.region,
        "health": str(s.health),
        "healthReason": s.health_reason,
        "ageSeconds": round(max(0.0, now - s.heartbeat), 1) if s.heartbeat else None,
        "version": s.version,
        "nodes": {"total": s.nodes_total, "ready": s.nodes_ready, "bad": s.bad_nodes},
        "gpuHealth": cluster_gpu_health_view(s.gpu_health),
        "products": [
            {
                "product": p.product,
                "memoryMiB": p.memory_mib,
                "total": p.total,
                "allocatable": p.allocatable,
                "allocated": p.allocated,
                "free": p.free,
                "maxFreeOnOneNode": p.max_free_on_one_node,
                "nodesByFree": list(p.nodes_by_free),
                "numaBlocks": list(p.numa_blocks),
                "singleNumaNodeFree": p.single_numa_node_free,
                "nodesByNodeFree": list(p.whole_nodes_by_free),
                "sharedAllocatable": p.shared_allocatable,
                "sharedFree": p.shared_free,
                "offered": p.offered,  # device-plugin | dra | both
                # the kind jobs ask through: one (free counts it), or per-job when both are counted
                "askedThrough": "per-job" if p.kinds else ("dra" if p.dra else "device-plugin"),
                "kinds": [kind_view(k) for k in (p.kinds or (p,))],  # what each kind offers on its own
                "pricePerGpuHour": s.price_per_gpu_hour.get(p.product),
            }
            for p in s.products
        ],
        "mig": [
            {
                "product": m.product,
                "profile": m.profile,
                "resource": m.resource_name,
                "allocatable": m.allocatable,
                "free": m.free,
                "largestFreeOnNode": m.largest_free_on_node,
                "settled": m.settled,
            }
            for m in s.mig
        ],
        # NVLink cliques (docs/topology.md): one small row per (product, clique)
        "cliques": [
            {
                "clique": c.clique,
                "product": c.product,
                "nodes": c.nodes,
                "freeNodes": c.free_nodes,
                "free": c.free,
                "nodesByFree": list(c.nodes_by_free),
            }
            for c in s.cliques
        ],
        "queues": [
            {
                "clusterQueue": q.cluster_queue,
                "flavor": q.flavor,
                "resource": q.resource,
                "nominal": q.nominal,
                "used": q.used,
                "headroom": q.headroom,
            }
            for q in s.queues
        ],
        # tenant namespaces (docs/tenancy.md): quotas and limits, cpu in millicores, memory in bytes
        "namespaces": [
            {
                "name": n.name,
                "quotas": [{"name": q.name, "hard": dict(q.hard), "used": dict(q.used)} for q in n.quotas],
                "limits": [
                    {
                        "type": i.type,
                        "default": dict(i.default),
                        "defaultRequest": dict(i.default_request),
                        "min": dict(i.min),
                        "max": dict(i.max),
                        "maxLimitRequestRatio": dict(i.max_limit_request_ratio),
                    }
                    for i in n.limits
                ],
            }
            for n in s.namespaces
        ],
    }


def verdict_view(v: ClusterVerdict) -> dict[str, Any]:
    """One cluster's level-1 verdict for explain: why not, or how it scored."""
    rejection = v.rejection
    return {
        "cluster": v.cluster,
        "tier": str(v.tier),
        "feasible": v.feasible,
        "chosen": v.chosen,
        "score": v.score,
        "scores": dict(v.scores),
        "rejection": None
        if rejection is None
        else {
            "plugin": rejection.plugin,
            "reason": rejection.reason,
            "code": rejection.code.name,
            "best": rejection.best,
        },
        "option": None
        if v.option is None
        else {
            "product": v.option.product,
            "resourceName": v.option.resource_name,
            "unitsPerPod": v.option.units_per_pod,
            "migProfile": v.option.mig_profile,
            "clique": v.option.clique,
        },
        "filtersPassed": [st.plugin for st in v.statuses if st.is_success],
        "note": v.note,
    }


def decision_view(decision: Placement | NoFit) -> dict[str, Any]:
    if isinstance(decision, NoFit):
        return {"placed": False, "message": decision.message}
    return {"placed": True, "placement": PlacementView.of(decision).model_dump(by_alias=True)}


def node_view(d: NodeDetail) -> dict[str, Any]:
    """One node of the fleet view's node detail (JSON-ready)."""
    return {
        "name": d.name,
        "product": d.product,
        "ready": d.ready,
        "cordoned": d.cordoned,
        "gpus": d.gpus,
        "wholeAllocatable": d.whole_allocatable,
        "wholeFree": d.whole_free,
        "sharedAllocatable": d.shared_allocatable,
        "sharedFree": d.shared_free,
        "sharedReplicas": d.shared_replicas,
        "migStrategy": d.mig_strategy,
        "mig": [{"profile": m.profile, "allocatable": m.allocatable, "free": m.free} for m in d.mig],
        "numa": [
            {"zone": z.zone, "gpusAllocatable": z.gpus_allocatable, "gpusAvailable": z.gpus_available}
            for z in d.numa
        ],
        "topologyPolicy": d.topology_policy,
        "taints": list(d.taints),
        "offersNothing": d.offers_nothing,
        "gpuFaults": [fault_view(f) for f in d.gpu_faults],  # which GPU is unhealthy, why, since when
        "quarantined": d.quarantined,
    }
