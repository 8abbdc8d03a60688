"""`gpufed top`: clusters and tenants by GPUs in use, busiest first (kubectl top's place for a fleet).

Built over the existing HTTP API, nothing new on the broker: the clusters from `GET /v1/fleet` (whole
GPUs requested by running pods, whatever started them, against what the cluster can allocate) and, for
both tables, the jobs that hold GPUs from `GET /v1/jobs?state=PLACED&state=ADMITTED&state=RUNNING`
(a placed job's GPUs are reserved for it). A user sees its own tenant's jobs only, as everywhere.
`top_view` is the pure part (the two API bodies in, the view out), tested on its own.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from broker.cli.common import ContextOpt, OutputOpt, ServerOpt, TokenOpt, app, connect
from broker.cli.output import Output, emit, rich_text

__all__ = ["HOLDING", "top", "top_view"]

HOLDING = ("PLACED", "ADMITTED", "RUNNING")  # the states whose GPUs are reserved or in use


def _units(job: dict[str, Any]) -> tuple[int, int]:
    """(whole GPUs, MIG slices) a job holds: its placement's units per pod x pods."""
    p = job.get("placement") or {}
    units = int(p.get("unitsPerPod") or 0) * int(p.get("pods") or 0)
    return (0, units) if p.get("migProfile") else (units, 0)


def top_view(fleet: dict[str, Any], jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """{"clusters": [...], "tenants": [...]}, each sorted by GPUs in use, most first."""
    per_cluster: dict[str, list[int]] = {}  # cluster -> [jobs, gpus, mig slices] of gpufed's jobs
    per_tenant: dict[str, dict[str, Any]] = {}
    for j in jobs:
        if j.get("state") not in HOLDING:
            continue
        gpus, slices = _units(j)
        cluster = j.get("cluster") or (j.get("placement") or {}).get("cluster") or "-"
        c = per_cluster.setdefault(cluster, [0, 0, 0])
        c[0], c[1], c[2] = c[0] + 1, c[1] + gpus, c[2] + slices
        t = per_tenant.setdefault(j["tenant"], {"jobs": 0, "gpus": 0, "migSlices": 0, "clusters": set()})
        t["jobs"] += 1
        t["gpus"] += gpus
        t["migSlices"] += slices
        t["clusters"].add(cluster)
    clusters = []
    for c in fleet.get("clusters", []):
        products = c.get("products") or []
        in_use = sum(int(p.get("allocated") or 0) for p in products)
        allocatable = sum(int(p.get("allocatable") or 0) for p in products)
        ours = per_cluster.get(c["cluster"], [0, 0, 0])
        clusters.append(
            {
                "cluster": c["cluster"],
                "tier": c.get("tier"),
                "health": c.get("health"),
                "gpusInUse": in_use,
                "gpusAllocatable": allocatable,
                "percentInUse": round(100 * in_use / allocatable) if allocatable else 0,
                "jobs": ours[0],
                "jobGpus": ours[1],
                "jobMigSlices": ours[2],
            }
        )
    clusters.sort(key=lambda c: (-c["gpusInUse"], -c["jobGpus"], c["cluster"]))
    tenants = [{"tenant": name, **{**t, "clusters": sorted(t["clusters"])}} for name, t in per_tenant.items()]
    tenants.sort(key=lambda t: (-t["gpus"], -t["migSlices"], t["tenant"]))
    return {"clusters": clusters, "tenants": tenants}


def _tables(view: dict[str, Any], wide: bool) -> str:
    clusters = Table(title="clusters by GPUs in use")
    for col in (
        "CLUSTER",
        "TIER",
        "HEALTH",
        "GPUS IN USE",
        "USE%",
        "GPUFED JOBS",
        "GPUFED GPUS",
        "MIG SLICES",
    ):
        clusters.add_column(col, justify="left" if col in ("CLUSTER", "TIER", "HEALTH") else "right")
    for c in view["clusters"]:
        clusters.add_row(
            c["cluster"],
            c["tier"] or "-",
            c["health"] or "-",
            f"{c['gpusInUse']}/{c['gpusAllocatable']}",
            f"{c['percentInUse']}%",
            str(c["jobs"]),
            str(c["jobGpus"]),
            str(c["jobMigSlices"]),
        )
    tenants = Table(title="tenants by GPUs in use (placed, admitted and running jobs)")
    for col in ("TENANT", "JOBS", "GPUS", "MIG SLICES", *(["CLUSTERS"] if wide else [])):
        tenants.add_column(col, justify="left" if col in ("TENANT", "CLUSTERS") else "right")
    for t in view["tenants"]:
        row = [t["tenant"], str(t["jobs"]), str(t["gpus"]), str(t["migSlices"])]
        tenants.add_row(*row, *([", ".join(t["clusters"])] if wide else []))
    parts = [rich_text(clusters)]
    parts.append(rich_text(tenants) if view["tenants"] else "No tenant holds GPUs through gpufed.")
    return "\n".join(parts)


@app.command()
def top(
    output: OutputOpt = Output.TABLE,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Clusters and tenants by GPUs in use, busiest first (-o wide: each tenant's clusters)."""
    with connect(server, token, context) as api:
        fleet = api.call("GET", "/v1/fleet")
        jobs = api.list_all("/v1/jobs", [("state", s) for s in HOLDING])
    view = top_view(fleet, jobs)
    emit(view, output, lambda wide: _tables(view, wide))
