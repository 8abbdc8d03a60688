"""`gpufed`: the command line. A client of the HTTP API, plus `serve`, `demo` and `probe`.

    gpufed serve --config clusters.yaml          run the broker (API + control loop + Ray pollers)
    gpufed demo                                  simulated clusters, the broker, jobs placed, fleet view
    gpufed submit NAME --gpus 8 --product H100-80GB   (or -f job.yaml)
    gpufed jobs | get ID | events ID | cancel ID | explain ... | fleet
    gpufed probe [--nvidia-smi-xml FILE] [-o json|yaml|table]
    gpufed fleet [--nodes]                       capacity, queued demand; --nodes: per-node detail
    gpufed rbac --cluster NAME [-c clusters.yaml]  least-privilege manifests for a member cluster

The server URL comes from --server or $GPUFED_URL (default http://127.0.0.1:8080). Commands that need
adapters (serve, demo, probe) reach them through broker.main, the composition root.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
import yaml
from rich.console import Console
from rich.table import Table

from broker.fleet_tables import demand_table, fleet_table, nodes_table

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    help="gpufed: one endpoint for a fleet of GPU clusters",
)
console = Console(width=None if sys.stdout.isatty() else 150)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 150)

ServerOpt = Annotated[
    str, typer.Option("--server", envvar="GPUFED_URL", help="broker URL", show_default=True)
]
DEFAULT_SERVER = "http://127.0.0.1:8080"


def _client(server: str) -> httpx.Client:
    return httpx.Client(base_url=server, timeout=30.0)


def _call(server: str, method: str, path: str, **kwargs: Any) -> Any:
    try:
        with _client(server) as c:
            r = c.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        err.print(f"[red]cannot reach the broker at {server}: {exc}[/red]")
        raise typer.Exit(2) from None
    body: dict[str, Any] = (
        r.json() if r.headers.get("content-type", "").startswith("application/json") else {"message": r.text}
    )
    if r.status_code >= 400:
        err.print(f"[red]{r.status_code} {body.get('error', '')}: {body.get('message', '')}[/red]")
        for f in body.get("fields", []):
            err.print(f"  [yellow]{f['field']}[/yellow]: {f['message']}")
        raise typer.Exit(1)
    return body


def _job_line(job: dict[str, Any]) -> str:
    where = f" on {job['cluster']}" if job.get("cluster") else ""
    return f"{job['id']}  {job['name']:<22} {job['state']:<10}{where}  {job['reason']}"


# --------------------------------------------------------------------------- server side


@app.command()
def serve(
    config: Annotated[Path, typer.Option("--config", "-c", help="clusters.yaml")] = Path("clusters.yaml"),
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8080,
) -> None:
    """Run the broker: the HTTP API, the scheduling loop and the Ray poller actors."""
    from broker import main as composition

    composition.serve(config, host, port)


@app.command()
def demo(
    speed: Annotated[float, typer.Option(help="simulated seconds per real second")] = 20.0,
    workdir: Annotated[Path, typer.Option(help="where kubeconfigs and the config are written")] = Path(
        ".demo"
    ),
) -> None:
    """Start three simulated clusters and the broker, submit jobs, show where they went, print the fleet."""
    from broker import demo as demo_mod

    raise typer.Exit(demo_mod.run(speed=speed, workdir=workdir))


@app.command()
def probe(
    nvidia_smi_xml: Annotated[
        Path | None, typer.Option("--nvidia-smi-xml", help="read `nvidia-smi -q -x` output instead of NVML")
    ] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="json | yaml | table")] = "table",
) -> None:
    """This host's GPUs, MIG profiles and NUMA affinity, as NodeFacts and GFD-style labels."""
    if output not in ("json", "yaml", "table"):
        err.print(f"[red]--output: must be json, yaml or table, not {output!r}[/red]")
        raise typer.Exit(2)
    from broker import main as composition

    print(composition.probe(nvidia_smi_xml, output))


# --------------------------------------------------------------------------- client side


def _spec_from_flags(
    name: str,
    gpus: int,
    pods: int,
    product: list[str],
    mig_profile: str | None,
    mig_memory_gb: int | None,
    numa: bool,
    burst: bool,
    duration: float | None,
    tenant: str,
    priority_class: str | None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": name, "gpus": gpus, "pods": pods, "tenant": tenant}
    if product:
        spec["gpuProducts"] = product
    if mig_profile or mig_memory_gb:
        spec["gpus"] = 0
        spec["mig"] = {"profile": mig_profile} if mig_profile else {"memoryGB": mig_memory_gb}
    if numa:
        spec["numaAligned"] = True
    if burst:
        spec["allowBurst"] = True
    if duration:
        spec["durationSeconds"] = duration
    if priority_class:
        spec["priorityClass"] = priority_class
    return spec


@app.command()
def submit(
    name: Annotated[str | None, typer.Argument(help="job name (DNS label)")] = None,
    file: Annotated[Path | None, typer.Option("--file", "-f", help="a job spec in YAML/JSON")] = None,
    gpus: Annotated[int, typer.Option(help="whole GPUs per pod")] = 1,
    pods: Annotated[int, typer.Option(help="pods; > 1 is a gang")] = 1,
    product: Annotated[list[str], typer.Option(help="acceptable GPU product (repeat)")] = [],  # noqa: B006
    mig_profile: Annotated[str | None, typer.Option(help="MIG profile by name, e.g. 1g.10gb")] = None,
    mig_memory_gb: Annotated[int | None, typer.Option(help="MIG by need: at least this many GB")] = None,
    numa: Annotated[bool, typer.Option(help="all GPUs of a pod inside one NUMA zone")] = False,
    burst: Annotated[bool, typer.Option(help="may run on a public-cloud cluster")] = False,
    duration: Annotated[float | None, typer.Option(help="simulated run time in seconds")] = None,
    tenant: Annotated[str, typer.Option(help="tenant")] = "default",
    priority_class: Annotated[str | None, typer.Option(help="priority class")] = None,
    idempotency_key: Annotated[
        str | None, typer.Option(help="resubmitting with the same key is harmless")
    ] = None,
    server: ServerOpt = DEFAULT_SERVER,
) -> None:
    """Submit a GPU job to the fleet."""
    if file is not None:
        spec = yaml.safe_load(file.read_text())
    elif name:
        spec = _spec_from_flags(
            name,
            gpus,
            pods,
            product,
            mig_profile,
            mig_memory_gb,
            numa,
            burst,
            duration,
            tenant,
            priority_class,
        )
    else:
        err.print("[red]give a job NAME with flags, or --file[/red]")
        raise typer.Exit(2)
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    job = _call(server, "POST", "/v1/jobs", json=spec, headers=headers)
    console.print(_job_line(job))


@app.command()
def jobs(server: ServerOpt = DEFAULT_SERVER) -> None:
    """List jobs."""
    body = _call(server, "GET", "/v1/jobs")
    table = Table("ID", "NAME", "STATE", "CLUSTER", "ATTEMPT", "REASON")
    for j in body["items"]:
        table.add_row(j["id"], j["name"], j["state"], j.get("cluster") or "-", str(j["attempt"]), j["reason"])
    console.print(table)


@app.command()
def get(job_id: str, server: ServerOpt = DEFAULT_SERVER) -> None:
    """Show one job as JSON."""
    console.print_json(json.dumps(_call(server, "GET", f"/v1/jobs/{job_id}")))


@app.command()
def events(job_id: str, server: ServerOpt = DEFAULT_SERVER) -> None:
    """A job's transitions, oldest first."""
    for e in _call(server, "GET", f"/v1/jobs/{job_id}/events")["items"]:
        console.print(
            f"{e['at']:.1f}  attempt {e['attempt']}  {e['state']:<10} {e['cluster'] or '-':<12} {e['reason']}"
        )


@app.command()
def cancel(job_id: str, server: ServerOpt = DEFAULT_SERVER) -> None:
    """Cancel a job (its workload is deleted from its cluster)."""
    console.print(_job_line(_call(server, "DELETE", f"/v1/jobs/{job_id}")))


@app.command()
def fleet(
    server: ServerOpt = DEFAULT_SERVER,
    output: Annotated[str, typer.Option("--output", "-o", help="table | json")] = "table",
    nodes: Annotated[bool, typer.Option("--nodes", help="also show every GPU node")] = False,
) -> None:
    """Fleet capacity per cluster and GPU product, the queued demand beside it; --nodes per node."""
    body = _call(server, "GET", "/v1/fleet", params={"nodes": "true"} if nodes else None)
    if output == "json":
        console.print_json(json.dumps(body))
        return
    console.print(fleet_table(body["clusters"]))
    for c in body["clusters"]:
        if c.get("healthReason"):
            console.print(f"{c['cluster']} is {c['health']}: {c['healthReason']}", markup=False)
    if body.get("products"):
        console.print(demand_table(body["products"]))
    if nodes:
        for c in body["clusters"]:
            console.print(nodes_table(c["cluster"], c.get("nodeDetail")))


@app.command()
def clusters(
    server: ServerOpt = DEFAULT_SERVER,
    output: Annotated[str, typer.Option("--output", "-o", help="table | json")] = "table",
) -> None:
    """Member clusters with their health, its cause and since when, and whether they are fenced."""
    if output not in ("table", "json"):
        err.print(f"--output: expected table or json, got {output!r}", markup=False)
        raise typer.Exit(2)
    body = _call(server, "GET", "/v1/clusters")
    if output == "json":
        console.print_json(json.dumps(body))
        return
    table = Table(title="member clusters")
    for col in ("NAME", "TIER", "REGION", "HEALTH", "SINCE", "WHY", "FENCED"):
        table.add_column(col)
    now = time.time()
    for c in body["items"]:
        since = c.get("healthSince") or 0.0
        table.add_row(
            c["name"],
            c["tier"],
            c["region"] or "-",
            c["health"],
            f"{max(0.0, now - since):.0f}s ago" if since else "-",
            c.get("healthReason") or "",
            c.get("fenced") or "",
        )
    console.print(table)


@app.command()
def explain(
    name: Annotated[str, typer.Argument(help="job name")] = "dry-run",
    gpus: Annotated[int, typer.Option(help="whole GPUs per pod")] = 1,
    pods: Annotated[int, typer.Option(help="pods")] = 1,
    product: Annotated[list[str], typer.Option(help="acceptable GPU product (repeat)")] = [],  # noqa: B006
    mig_profile: Annotated[str | None, typer.Option(help="MIG profile by name")] = None,
    mig_memory_gb: Annotated[int | None, typer.Option(help="MIG by need, GB")] = None,
    numa: Annotated[bool, typer.Option(help="NUMA aligned")] = False,
    burst: Annotated[bool, typer.Option(help="may burst")] = False,
    output: Annotated[str, typer.Option("--output", "-o", help="table | json")] = "table",
    server: ServerOpt = DEFAULT_SERVER,
) -> None:
    """Dry run: where a job would go now, and why not elsewhere."""
    spec = _spec_from_flags(
        name, gpus, pods, product, mig_profile, mig_memory_gb, numa, burst, None, "default", None
    )
    body = _call(server, "POST", "/v1/explain", json=spec)
    if output == "json":
        console.print_json(json.dumps(body))
        return
    if body["placed"]:
        p = body["placement"]
        console.print(
            f"[green]would place on {p['cluster']}[/green]: {p['unitsPerPod']}x {p['resourceName']} per pod ({p['product']}), score {p['score']}"
        )
    else:
        console.print(f"[yellow]{body['message']}[/yellow]")
    table = Table("CLUSTER", "TIER", "VERDICT", "SCORE", "DETAIL")
    for v in body["clusters"]:
        if v["chosen"]:
            verdict = "[green]chosen[/green]"
        elif v["feasible"]:
            verdict = "feasible"
        else:
            verdict = f"[red]{v['rejection']['plugin']}[/red]"
        detail = (
            v["rejection"]["reason"]
            if v["rejection"]
            else (v["note"] or ", ".join(f"{k}={s}" for k, s in v["scores"].items()))
        )
        table.add_row(v["cluster"], v["tier"], verdict, str(v["score"]) if v["feasible"] else "-", detail)
    console.print(table)


@app.command()
def rbac(
    cluster: Annotated[str, typer.Option("--cluster", help="the member cluster, as named in the config")],
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="clusters.yaml (for the cluster's job namespace)")
    ] = None,
    namespace: Annotated[
        str | None, typer.Option(help="namespace the broker runs jobs in (default: from the config)")
    ] = None,
    service_account: Annotated[str, typer.Option(help="the broker's ServiceAccount")] = "gpufed-broker",
    service_account_namespace: Annotated[
        str, typer.Option(help="namespace of that ServiceAccount")
    ] = "gpufed-system",
) -> None:
    """Print least-privilege RBAC manifests for a member cluster (apply them there with kubectl)."""
    from broker.config import load_fleet_config
    from broker.rbac import member_rbac

    ns = namespace
    if config is not None:
        try:
            cfg = load_fleet_config(config, check_kubeconfigs=False)
        except Exception as exc:
            err.print(f"{config}: {exc}", markup=False)
            raise typer.Exit(2) from None
        known = {c.name: c for c in cfg.clusters}
        if cluster not in known:
            err.print(
                f"--cluster: {cluster!r} is not in {config} (known: {', '.join(sorted(known))})", markup=False
            )
            raise typer.Exit(2)
        ns = ns or known[cluster].traits().namespace
    try:
        docs = member_rbac(cluster, ns or "default", service_account, service_account_namespace)
    except ValueError as exc:
        err.print(str(exc), markup=False)
        raise typer.Exit(2) from None
    sys.stdout.write(f"# gpufed member-cluster RBAC for {cluster}: apply in that cluster\n")
    sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False))


def main() -> None:
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    from broker.errors import GpufedError

    try:
        app()
    except GpufedError as exc:  # a fault the user can act on: one line, not a traceback
        err.print(f"[red]{exc}[/red]")
        sys.exit(2)


if __name__ == "__main__":
    main()
