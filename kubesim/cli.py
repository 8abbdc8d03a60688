"""`kubesim`: serve a fleet of simulated clusters, and steer a running one through its admin endpoint.

kubesim serve --fleet kubesim/fleets/demo.yaml --out run/ [--speed 10] [--admin-port 8470]
                                         (--fleet demo: the fleet shipped with kubesim, from any directory)
kubesim fault onprem-a --down            (--up, --hang/--no-hang, --latency 0.5, --error-rate 0.2,
                                          --expired-token/--valid-token, --forbidden/--allowed,
                                          --cut-watches, --reset-connections, --clear, --spot-interrupt NODE|POOL)
kubesim fault onprem-a --xid NODE:GPU_INDEX:CODE [--xid ...] [--clear]   (XID on a GPU; --clear resets it)
kubesim gpus onprem-a                    (GPUs with a fault history)
kubesim clock --speed 60 | --advance 3600
kubesim status
"""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    help="Simulated Kubernetes member clusters for gpufed.", no_args_is_help=True, add_completion=False
)
console = Console()

OutOption = Annotated[
    Path, typer.Option("--out", help="The serve command's output directory (holds kubesim.json).")
]
AdminOption = Annotated[
    str | None,
    typer.Option("--admin", envvar="KUBESIM_ADMIN", help="Admin URL; default: read from <out>/kubesim.json."),
]


@app.command()
def serve(
    fleet: Annotated[
        Path,
        typer.Option(
            "--fleet",
            help="Fleet file (YAML), or the name of a fleet shipped with kubesim (demo, small, dra, nvl72).",
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", help="Directory for kubeconfigs, certificates and kubesim.json.")
    ],
    speed: Annotated[float, typer.Option("--speed", min=0, help="Simulated seconds per real second.")] = 1.0,
    admin_port: Annotated[
        int, typer.Option("--admin-port", help="Admin endpoint port (0: any free port).")
    ] = 0,
    host: Annotated[str, typer.Option("--host", help="Address the API listeners bind.")] = "127.0.0.1",
    controllers: Annotated[
        bool, typer.Option("--controllers/--no-controllers", help="Run the clusters' controllers.")
    ] = True,
    bookmark_seconds: Annotated[
        float,
        typer.Option(
            "--bookmark-seconds",
            min=0.05,
            help="Seconds between watch BOOKMARKs (a real kube-apiserver: about 60; fleets of hundreds of clusters).",
        ),
    ] = 5.0,
    churn_rate: Annotated[
        float,
        typer.Option(
            "--churn-rate",
            min=0,
            help="Pod events/s of background churn across this process's clusters (0: none): pods bound to "
            "GPU nodes replaced one by one (kubesim.churn), as a busy fleet's pods come and go.",
        ),
    ] = 0.0,
    churn_pods_per_node: Annotated[
        int, typer.Option("--churn-pods-per-node", min=1, help="One-GPU churn pods bound to each GPU node.")
    ] = 2,
) -> None:
    """Serve every cluster of FLEET until SIGINT/SIGTERM."""
    from kubesim.fleet import FleetError, builtin_fleet, load_fleet
    from kubesim.sim import Simulation

    if not fleet.exists() and fleet.parent == Path() and builtin_fleet(fleet.stem).is_file():
        fleet = builtin_fleet(fleet.stem)  # `--fleet demo` from any directory of an installed package
    try:
        spec = load_fleet(fleet)
    except FleetError as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(2) from None
    started = time.monotonic()
    sim = Simulation(
        spec,
        out,
        speed=speed,
        host=host,
        admin_port=admin_port,
        controllers=controllers,
        bookmark_interval=bookmark_seconds,
    )
    try:
        sim.start()
    except OSError as e:
        console.print(f"[red]cannot start: {e}[/red]")
        raise typer.Exit(1) from None
    if churn_rate > 0:
        import asyncio

        from kubesim.churn import PodChurn

        churn = PodChurn({c: sim.store(c) for c in sim.cluster_names()})
        sim.call(lambda: churn.populate(churn_pods_per_node))
        asyncio.run_coroutine_threadsafe(churn.run(churn_rate, 10.0**9), sim.loop)
        console.print(f"churn: {churn_rate:g} pod events/s, {churn_pods_per_node} churn pods per GPU node")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    from kubesim.heap import freeze_periodically

    freeze_periodically(stop)  # the fleet's objects out of full collections (kubesim.heap)
    rows = [(name, sim.server_url(name), str(sim.kubeconfig_path(name))) for name in sim.cluster_names()]
    title = f"kubesim: {len(rows)} clusters in {time.monotonic() - started:.1f}s"
    print_started(console, title, rows, sim.admin_url, out)
    try:
        stop.wait()
    finally:
        sim.stop()
        console.print("kubesim stopped")


def print_started(
    out_console: Console, title: str, rows: list[tuple[str, str, str]], admin: str, out: Path
) -> None:
    """What `serve` says once up: each cluster's server and kubeconfig, the admin URL, a command to try.
    Paths and commands are never cut or broken (a log is 80 columns wide): they are copied from here."""
    table = Table(title=title)
    table.add_column("cluster", no_wrap=True)
    table.add_column("server", no_wrap=True)
    table.add_column("kubeconfig", overflow="fold")
    for row in rows:
        table.add_row(*row)
    out_console.print(table)
    out_console.print(f"admin: {admin}   (e.g. kubesim fault <cluster> --down --out {out})", soft_wrap=True)
    out_console.print(f"try:   KUBECONFIG={rows[0][2]} kubectl get nodes", soft_wrap=True)


def _admin_url(admin: str | None, out: Path) -> str:
    if admin:
        return admin.rstrip("/")
    info = out / "kubesim.json"
    try:
        return str(json.loads(info.read_text())["admin"]).rstrip("/")
    except (OSError, ValueError, KeyError):
        console.print(
            f"[red]no admin URL: pass --admin URL, set KUBESIM_ADMIN, or --out DIR of a running "
            f"`kubesim serve` ({info} not readable)[/red]"
        )
        raise typer.Exit(2) from None


def _call(url: str, method: str = "GET", body: Any = None) -> Any:
    req = urllib.request.Request(
        url,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as e:
        console.print(f"[red]{e.code}: {e.read().decode().strip()}[/red]")
        raise typer.Exit(1) from None
    except urllib.error.URLError as e:
        console.print(f"[red]cannot reach the admin endpoint {url}: {e.reason}[/red]")
        raise typer.Exit(1) from None


@app.command()
def fault(
    cluster: Annotated[str, typer.Argument(help="Cluster name.")],
    down: Annotated[bool | None, typer.Option("--down/--up", help="Close/reopen the listener.")] = None,
    hang: Annotated[bool | None, typer.Option("--hang/--no-hang", help="Accept but never answer.")] = None,
    latency: Annotated[
        float | None, typer.Option("--latency", min=0, help="Seconds added per request.")
    ] = None,
    error_rate: Annotated[
        float | None,
        typer.Option("--error-rate", min=0, max=1, help="Fraction of requests answered with an error."),
    ] = None,
    error_codes: Annotated[str | None, typer.Option("--error-codes", help="e.g. 500,503,429")] = None,
    expired_token: Annotated[bool | None, typer.Option("--expired-token/--valid-token")] = None,
    forbidden: Annotated[bool | None, typer.Option("--forbidden/--allowed")] = None,
    cut_watches: Annotated[bool, typer.Option("--cut-watches", help="Close every open watch now.")] = False,
    reset_connections: Annotated[
        bool, typer.Option("--reset-connections", help="TCP-reset every open connection now.")
    ] = False,
    clear: Annotated[bool, typer.Option("--clear", help="Clear every fault first.")] = False,
    spot_interrupt: Annotated[
        str | None,
        typer.Option(
            "--spot-interrupt", help="Interrupt a spot node now (a node name, or a spot pool's name)."
        ),
    ] = None,
    xid: Annotated[
        list[str] | None,
        typer.Option(
            "--xid",
            help="NODE:GPU_INDEX:CODE: the GPU reports that XID now (repeatable); with --clear, "
            "NODE:GPU_INDEX[:CODE] resets that GPU instead (and nothing else is cleared).",
        ),
    ] = None,
    out: OutOption = Path("run"),
    admin: AdminOption = None,
) -> None:
    """Set or clear faults of a cluster of a running `kubesim serve`; prints the resulting fault state."""
    if xid:
        _gpu_fault(cluster, xid, clear, _admin_url(admin, out))
        return
    changes: dict[str, Any] = {}
    for key, value in (
        ("down", down),
        ("hang", hang),
        ("latency", latency),
        ("error_rate", error_rate),
        ("expired_token", expired_token),
        ("forbidden", forbidden),
    ):
        if value is not None:
            changes[key] = value
    if error_codes:
        try:
            changes["error_codes"] = [int(c) for c in error_codes.split(",") if c.strip()]
        except ValueError:
            console.print("[red]--error-codes is a comma-separated list of HTTP codes[/red]")
            raise typer.Exit(2) from None
    if cut_watches:
        changes["cut_watches"] = True
    if reset_connections:
        changes["reset_connections"] = True
    if clear:
        changes["clear"] = True
    if spot_interrupt:
        spot = _call(f"{_admin_url(admin, out)}/clusters/{cluster}/spot", "POST", {"node": spot_interrupt})
        console.print_json(data=spot)
        if not changes:
            return
    method = "POST" if changes else "GET"
    state = _call(f"{_admin_url(admin, out)}/clusters/{cluster}/faults", method, changes if changes else None)
    console.print_json(data=state)


def _gpu_fault(cluster: str, specs: list[str], clear: bool, url: str) -> None:
    from kubesim.gpuhealth import GpuFaultError, parse_xid_spec

    items = []
    try:
        for spec in specs:
            node, gpu, code = parse_xid_spec(spec, need_code=not clear)
            items.append({"node": node, "gpu": gpu} if clear else {"node": node, "gpu": gpu, "code": code})
    except GpuFaultError as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(2) from None
    body = {"clear": items} if clear else {"xid": items}
    console.print_json(data=_call(f"{url}/clusters/{cluster}/gpus", "POST", body))


@app.command()
def gpus(
    cluster: Annotated[str, typer.Argument(help="Cluster name.")],
    out: OutOption = Path("run"),
    admin: AdminOption = None,
) -> None:
    """GPUs of a cluster with a fault history: last XID, XID counts, unhealthy since."""
    console.print_json(data=_call(f"{_admin_url(admin, out)}/clusters/{cluster}/gpus"))


@app.command()
def clock(
    speed: Annotated[float | None, typer.Option("--speed", min=0)] = None,
    advance: Annotated[float | None, typer.Option("--advance", min=0, help="Seconds to jump ahead.")] = None,
    out: OutOption = Path("run"),
    admin: AdminOption = None,
) -> None:
    """Show, speed up or advance the simulated clock."""
    body = {k: v for k, v in (("speed", speed), ("advance", advance)) if v is not None}
    console.print_json(data=_call(f"{_admin_url(admin, out)}/clock", "POST" if body else "GET", body or None))


@app.command()
def status(out: OutOption = Path("run"), admin: AdminOption = None) -> None:
    """Clusters of a running `kubesim serve`, their servers and faults."""
    data = _call(f"{_admin_url(admin, out)}/clusters")
    table = Table(title=f"kubesim at {data['admin']} (speed {data['clock']['speed']})")
    for col in ("cluster", "server", "faults", "watches"):
        table.add_column(col)
    for c in data["clusters"]:
        active = {k: v for k, v in c["faults"].items() if v and k not in ("error_codes", "retry_after")}
        table.add_row(
            c["name"], c["server"], ", ".join(f"{k}={v}" for k, v in active.items()) or "-", str(c["watches"])
        )
    console.print(table)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
