"""The fleet view as rich tables: per cluster and product, free capacity beside queued demand, per node.

Owns only the rendering of /v1/fleet bodies (plain dicts, as the API returns them) for terminals; the
CLI (`gpufed fleet`) and the demo both print them. No I/O.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.table import Table

__all__ = ["demand_table", "fleet_table", "gpu_health_text", "nodes_table", "numa_notes"]


def numa_notes(clusters: list[dict[str, Any]]) -> list[str]:
    """One line per cluster and product whose nodes have more free GPUs than one pod can get, because
    their topology policy is single-numa-node: what "8-GPU SLOTS 0" beside 8 free on a node means."""
    notes = []
    for c in clusters:
        for p in c["products"]:
            whole = p.get("singleNumaNodeFree", 0)
            if whole > p["maxFreeOnOneNode"]:
                notes.append(
                    f"{c['cluster']} {p['product']}: topology policy single-numa-node: a pod's GPUs must share "
                    f"one NUMA zone ({whole} free on one node, at most {p['maxFreeOnOneNode']} in one zone)"
                )
    return notes


def offered_mark(p: dict[str, Any]) -> str:
    """How the cluster serves a product, compactly: nothing for the device plugin, ` [dra]`, or for
    both ways ` [both: plugin 8/8, dra 4/4]` (each kind's free/allocatable; jobs ask the kind they fit),
    ` [both: dra]` / ` [both: plugin]` when an override or an older broker names one kind."""
    offered = p.get("offered", "device-plugin")
    if offered == "dra":
        return " [dra]"
    if offered == "both":
        kinds = p.get("kinds") or []
        if p.get("askedThrough") == "per-job" and len(kinds) > 1:
            parts = ", ".join(
                f"{'dra' if k.get('kind') == 'dra' else 'plugin'} {k.get('free', 0)}/{k.get('allocatable', 0)}"
                for k in kinds
            )
            return f" [both: {parts}]"
        return " [both: dra]" if p.get("askedThrough") == "dra" else " [both: plugin]"
    return ""


def demand_table(products: list[dict[str, Any]]) -> Table:
    """Free capacity per product over the fleet beside what queued jobs ask for."""
    table = Table(title="free capacity and queued demand per product")
    for col in ("PRODUCT", "FREE/ALLOC", "SHARED FREE", "MIG SLICES FREE", "QUEUED"):
        table.add_column(col, justify="left" if col == "PRODUCT" else "right")
    for p in products:
        table.add_row(
            p["product"],
            f"{p['free']}/{p['allocatable']}",
            str(p["sharedFree"]),
            str(p["migFree"]),
            str(p["queued"]),
        )
    return table


def _since(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def gpu_health_text(node: dict[str, Any]) -> str:
    """'GPU 3 unhealthy: XID 79 (GPU has fallen off the bus) since 2026-12-08 00:01:02Z', one line per GPU."""
    lines = []
    for f in node.get("gpuFaults") or ():
        where = "node" if f["gpu"] is None else f"GPU {f['gpu']}"
        held = "" if f["quarantined"] else " (not quarantined: circuit breaker)"
        lines.append(f"{where} {f['state']}: {f['reason']} since {_since(f['since'])}{held}")
    if node.get("quarantined"):
        lines.append(f"node quarantined: {node['quarantined']}")
    return "\n".join(lines) or "healthy"


def nodes_table(cluster: str, detail: dict[str, Any] | None) -> Table:
    """One cluster's GPU nodes: what each offers (whole / MIG / shared), NUMA zones, taints, and why a
    node offers nothing."""
    age = "" if detail is None else f" (written {detail['ageSeconds']:.0f}s ago)"
    table = Table(title=f"{cluster}: GPU nodes{age}")
    for col in (
        "NODE",
        "PRODUCT",
        "WHOLE FREE",
        "MIG FREE",
        "SHARED FREE",
        "NUMA (free/alloc) POLICY",
        "TAINTS",
        "OFFERS",
        "GPU HEALTH",
    ):
        table.add_column(col)
    if detail is None:
        table.add_row("-", "no node table in Redis yet (the pollers write one every 5 s)", *[""] * 7)
        return table
    for n in detail["items"]:
        mig = ", ".join(f"{m['profile']} {m['free']}/{m['allocatable']}" for m in n["mig"]) or "-"
        numa = " ".join(f"{z['gpusAvailable']}/{z['gpusAllocatable']}" for z in n["numa"]) or "-"
        if n.get("topologyPolicy") not in (None, "none"):
            numa += f" {n['topologyPolicy']}"
        shared = f"{n['sharedFree']}/{n['sharedAllocatable']}" if n["sharedAllocatable"] else "-"
        table.add_row(
            n["name"],
            n["product"] or "-",
            f"{n['wholeFree']}/{n['wholeAllocatable']}",
            mig,
            shared,
            numa,
            ", ".join(n["taints"]) or "-",
            n["offersNothing"] or "yes",
            gpu_health_text(n),
        )
    return table


def fleet_table(clusters: list[dict[str, Any]]) -> Table:
    """The fleet view: per cluster, one row per GPU product, MIG profile and Kueue GPU quota.

    FREE/ALLOC counts whole GPUs (or MIG slices, or quota); 8-GPU SLOTS is how many 8-GPU pods fit, each
    on one node; MAX/NODE the most free on one placement domain; NUMA BEST the most free GPUs inside
    one NUMA zone of one node.
    """
    table = Table(title="gpufed fleet capacity")
    left = ("CLUSTER", "TIER", "HEALTH", "CAPACITY")
    for col in (
        "CLUSTER",
        "TIER",
        "HEALTH",
        "NODES",
        "AGE",
        "CAPACITY",
        "FREE/ALLOC",
        "8-GPU SLOTS",
        "MAX/NODE",
        "NUMA BEST",
        "$/GPU-H",
    ):
        table.add_column(col, justify="left" if col in left else "right")
    for c in clusters:
        age = f"{c['ageSeconds']:.0f}s" if c.get("ageSeconds") is not None else "-"
        nodes = c["nodes"]
        node_text = f"{nodes['ready']}/{nodes['total']}" + (
            f" ({nodes['bad']} bad)" if nodes.get("bad") else ""
        )
        health = c["health"] + (", drained" if c.get("drained") else "")
        head = [c["cluster"], c["tier"], health, node_text, age]
        blank = ["", "", "", "", ""]
        rows: list[list[str]] = []
        for p in c["products"]:
            price = p.get("pricePerGpuHour")
            numa = max((k for k, n in enumerate(p["numaBlocks"]) if n), default=0)
            rows.append(
                [
                    p["product"] + offered_mark(p),
                    f"{p['free']}/{p['allocatable']}",
                    str(sum(n * (k // 8) for k, n in enumerate(p["nodesByFree"]))),
                    str(p["maxFreeOnOneNode"]),
                    str(numa),
                    "-" if price is None else f"{price:.2f}",
                ]
            )
            if p.get("sharedAllocatable"):
                rows.append(
                    [
                        f"{p['product']} time-sliced",
                        f"{p['sharedFree']}/{p['sharedAllocatable']}",
                        "-",
                        "-",
                        "-",
                        "-",
                    ]
                )
        for m in c.get("mig", []):
            rows.append(
                [
                    f"{m['product']} MIG {m['profile']}" + ("" if m["settled"] else " (reconfiguring)"),
                    f"{m['free']}/{m['allocatable']}",
                    "-",
                    str(m["largestFreeOnNode"]),
                    "-",
                    "-",
                ]
            )
        for q in c.get("queues", []):
            if q["resource"].startswith("nvidia.com/"):
                rows.append(
                    [
                        f"Kueue {q['clusterQueue']}/{q['flavor']}",
                        f"{q['headroom']}/{q['nominal']}",
                        "-",
                        "-",
                        "-",
                        "-",
                    ]
                )
        for i, row in enumerate(rows or [["-", "-", "-", "-", "-", "-"]]):
            table.add_row(*(head if i == 0 else blank), *row)
    return table
