"""`gpufed fleet`, `spend`, `clusters` and `explain`: what the fleet holds and where a job would go."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from broker.app.fleet_tables import demand_table, fleet_table, nodes_table, numa_notes
from broker.cli.client import EXIT_FAILED, ago
from broker.cli.common import ContextOpt, OutputOpt, ServerOpt, TokenOpt, app, fetch
from broker.cli.output import Output, columns, emit, out, rich_text
from broker.cli.submit import read_spec, spec_from_flags


@app.command()
def fleet(
    output: OutputOpt = Output.TABLE,
    nodes: Annotated[bool, typer.Option("--nodes", help="also show every GPU node")] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Fleet capacity per cluster and GPU product, the queued demand beside it; --nodes per node."""
    params = {"nodes": "true"} if nodes or output == Output.WIDE else None
    body = fetch("GET", "/v1/fleet", server, token, context, params=params)

    def table(wide: bool) -> str:
        parts = [rich_text(fleet_table(body["clusters"]))]
        parts += [
            f"{c['cluster']} is {c['health']}: {c['healthReason']}"
            for c in body["clusters"]
            if c.get("healthReason")
        ]
        parts += [f"{c['cluster']} is {c['drainedReason']}" for c in body["clusters"] if c.get("drained")]
        parts += [  # the GPU quarantine's circuit breaker: the alert (docs/health.md)
            f"{c['cluster']}: GPU {c['gpuHealth']['breakerReason']}"
            for c in body["clusters"]
            if (c.get("gpuHealth") or {}).get("breakerOpen")
        ]
        parts += numa_notes(body["clusters"])
        if body.get("products"):
            parts.append(rich_text(demand_table(body["products"])))
        if nodes or wide:
            parts += [rich_text(nodes_table(c["cluster"], c.get("nodeDetail"))) for c in body["clusters"]]
        return "\n".join(parts)

    emit(body, output, table)


@app.command()
def spend(
    output: OutputOpt = Output.TABLE,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Cloud spend per tenant this period: finished runs, running jobs' expected cost, budget left, and
    the cloud cost burst-back saved (SAVED: shown once any tenant has one, always with -o wide)."""
    body = fetch("GET", "/v1/spend", server, token, context)

    def money(v: float | None) -> str:
        return "-" if v is None else f"${v:,.2f}"

    def table(wide: bool) -> str:
        headers = ["TENANT", "PERIOD", "SPENT", "RUNNING", "BUDGET", "LEFT"]
        saved = wide or any(t.get("avoided") for t in body["items"])
        if saved:
            headers.insert(3, "SAVED")
        if wide:
            headers[3:3] = ["GPU-HOURS", "RUNS"]
        rows = []
        for t in body["items"]:
            left = money(t["left"]) + (" (over budget: no new burst)" if t["overBudget"] else "")
            row = [
                t["tenant"],
                t["period"],
                money(t["spent"]),
                money(t["committed"]),
                money(t["budget"]),
                left,
            ]
            if saved:
                n = t.get("movedBack", 0)
                row.insert(3, money(t.get("avoided", 0.0)) + (f" ({n} moved back)" if n else ""))
            if wide:
                row[3:3] = [f"{t['gpuHours']:.2f}", str(t["runs"])]
            rows.append(row)
        return columns(headers, rows)

    if not body["items"] and output in (Output.TABLE, Output.WIDE):
        out("No spend.")
        return
    emit(body, output, table)


@app.command()
def clusters(
    output: OutputOpt = Output.TABLE,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Member clusters with their health, its cause and since when, and whether they are fenced."""
    body = fetch("GET", "/v1/clusters", server, token, context)

    def table(wide: bool) -> str:
        headers = ["NAME", "TIER", "REGION", "HEALTH", "SINCE", "WHY", "FENCED"]
        if wide:
            headers.append("KUEUE")
        rows = []
        for c in body["items"]:
            row = [
                c["name"],
                c["tier"],
                c["region"] or "-",
                c["health"],
                ago(c.get("healthSince")),
                c.get("healthReason") or "-",
                c.get("fenced") or "-",
            ]
            rows.append([*row, c.get("kueue") or "-"] if wide else row)
        recovery = body.get("recovery")
        if not recovery or (recovery.get("previous_run") is None and not recovery.get("recovered")):
            return columns(headers, rows)  # none, or the store's first start: nothing was rebuilt
        return columns(headers, rows) + "\n" + _recovery_line(recovery)

    emit(body, output, table)


def _recovery_line(report: dict[str, Any]) -> str:
    """The last rebuild after Redis came back empty, in one line under the clusters."""
    lost = report.get("lost_queued")
    pending = report.get("clusters_pending") or []
    return (
        f"Job records rebuilt from the clusters {ago(report.get('at'))}: {report.get('recovered', 0)} recovered, "
        f"{'an unknown number of' if lost is None else lost} queued job(s) lost"
        + (f"; not answering yet: {', '.join(pending)}" if pending else "")
    )


@app.command()
def explain(
    name: Annotated[str, typer.Argument(help="job name")] = "dry-run",
    file: Annotated[
        str | None, typer.Option("--file", "-f", help="a job file (native or batch/v1 Job)")
    ] = None,
    gpus: Annotated[str, typer.Option(help="whole GPUs per pod: 8, or PRODUCT:COUNT as in H100:8")] = "1",
    pods: Annotated[int, typer.Option(help="pods")] = 1,
    product: Annotated[list[str], typer.Option(help="acceptable GPU product (repeat)")] = [],  # noqa: B006
    mig_profile: Annotated[str | None, typer.Option(help="MIG profile by name")] = None,
    mig_memory_gb: Annotated[int | None, typer.Option(help="MIG by need, GB")] = None,
    numa: Annotated[bool, typer.Option(help="NUMA aligned")] = False,
    burst: Annotated[bool, typer.Option(help="may burst")] = False,
    output: OutputOpt = Output.TABLE,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Dry run: where a job would go now, and why not elsewhere. Exit 1 when nothing fits."""
    spec = (
        read_spec(file)
        if file is not None
        else spec_from_flags(
            name, gpus, pods, product, mig_profile, mig_memory_gb, numa, burst, None, None, None
        )
    )
    body = fetch("POST", "/v1/explain", server, token, context, json=spec)

    def table(wide: bool) -> str:
        if body["placed"]:
            p = body["placement"]
            where = body.get("summary") or f"would place on {p['cluster']}"  # agrees with its queue place
            head = f"{where}: {p['unitsPerPod']}x {p['resourceName']} per pod ({p['product']}), score {p['score']}"
            if p.get("clique"):  # the NVLink clique the gang is pinned to (docs/topology.md)
                head += f", in NVLink clique {p['clique']}"
        else:
            head = str(body["message"])
        queue = body.get("queue")
        if queue:  # where it would stand in the global queue, as the token's tenant (docs/tenancy.md)
            head += f"\nqueue: position {queue['position']} for tenant {queue['tenant']}: {queue['reason']}"
        if body.get("predictedWait"):  # when it would start on-prem (docs/burst.md)
            head += f"\n{body['predictedWait']}"
        rows = []
        for v in body["clusters"]:
            verdict = "chosen" if v["chosen"] else ("feasible" if v["feasible"] else v["rejection"]["plugin"])
            detail = (
                v["rejection"]["reason"]
                if v["rejection"]
                else (v["note"] or ", ".join(f"{k}={s}" for k, s in v["scores"].items()))
            )
            rows.append([v["cluster"], v["tier"], verdict, str(v["score"]) if v["feasible"] else "-", detail])
        return head + "\n" + columns(["CLUSTER", "TIER", "VERDICT", "SCORE", "DETAIL"], rows)

    emit(body, output, table)
    if not body["placed"]:
        raise typer.Exit(EXIT_FAILED)
