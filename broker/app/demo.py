"""`gpufed demo`: three simulated member clusters, the broker, jobs of different shapes, the fleet view.

A composition root like broker.app.main (it may import kubesim and adapters): it starts kubesim's demo fleet
over real HTTPS, Redis (REDIS_URL, or a private redis-server when none answers), the broker with its Ray
poller and control loop and its HTTP API on a free port, then submits jobs through that API, prints where
each went and why, waits for them, prints the fleet, and stops everything it started.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import redis
import yaml
from rich.console import Console
from rich.table import Table

from adapters import redis_connect
from adapters.loopback_ports import free_port
from adapters.redis_process import RedisServerUnavailable, private_redis
from broker.app.example_config import example_config_text
from broker.app.fleet_tables import fleet_table
from broker.config.settings import load_fleet_config
from broker.core.errors import ConfigError

console = Console(width=None if sys.stdout.isatty() else 150)

DEMO_JOBS: list[dict[str, Any]] = [
    {  # a whole 8-GPU H100 node
        "name": "llm-pretrain-h100x8",
        "gpus": 8,
        "gpuProducts": ["H100-80GB"],
        "durationSeconds": 240,
        "tenant": "research",
    },
    {
        "name": "finetune-a100-1",
        "gpus": 2,
        "gpuProducts": ["A100-80GB"],
        "durationSeconds": 120,
        "tenant": "nlp",
    },
    {
        "name": "finetune-a100-2",
        "gpus": 2,
        "gpuProducts": ["A100-80GB"],
        "durationSeconds": 150,
        "tenant": "nlp",
    },
    {
        "name": "notebook-a100",
        "gpus": 1,
        "gpuProducts": ["A100-80GB"],
        "durationSeconds": 90,
        "tenant": "nlp",
    },
    {  # MIG by need: >= 10 GB and 1/7 of a GPU -> 1g.10gb on A100-80GB
        "name": "inference-mig",
        "mig": {"memoryGB": 10},
        "durationSeconds": 90,
        "tenant": "serving",
    },
    {  # 4 GPUs inside one NUMA zone -> the cluster with NodeResourceTopology and a topology-aware scheduler
        "name": "numa-aligned-h100",
        "gpus": 4,
        "gpuProducts": ["H100-80GB"],
        "numaAligned": True,
        "durationSeconds": 120,
        "tenant": "research",
    },
    {  # only the public-cloud cluster has H200s: bursts, because it may
        "name": "h200-burst",
        "gpus": 4,
        "gpuProducts": ["H200-141GB"],
        "allowBurst": True,
        "durationSeconds": 120,
        "tenant": "research",
    },
    {  # 16 GPUs on one node exists nowhere: stays QUEUED with a diagnosis
        "name": "too-big-16gpu",
        "gpus": 16,
        "durationSeconds": 60,
        "tenant": "research",
    },
]


def _redis_answers(url: str) -> bool:
    try:
        return bool(redis_connect.client_for(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


@contextlib.contextmanager
def redis_for_demo() -> Iterator[str]:
    """REDIS_URL when it answers; else a private redis-server from PATH for the demo's lifetime."""
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    if _redis_answers(url):
        yield url
        return
    try:
        with private_redis() as server:
            console.print(
                f"[dim]no Redis at REDIS_URL; started a private redis-server on port {server.port}[/dim]"
            )
            yield server.url
    except RedisServerUnavailable as exc:
        raise SystemExit(
            f"No Redis answers at {url}, and a private one could not be started: {exc}.\n"
            "Start one (apt-get install redis-server; redis-server --daemonize yes) or set REDIS_URL."
        ) from None


def redacted(url: str) -> str:
    """The URL with any password replaced, for printing (redis:// and redis+sentinel://)."""
    return redis_connect.redact(url)


# The demo's callers (tokens.yaml beside its clusters.yaml): name -> (tenant, role). Tokens are random
# per workdir and kept in that file; read_demo_tokens(workdir) gives them back.
DEMO_PRINCIPALS: dict[str, tuple[str, str]] = {
    "admin": ("default", "admin"),
    "viewer": ("default", "viewer"),
    "research": ("research", "user"),
    "nlp": ("nlp", "user"),
    "serving": ("serving", "user"),
}
TOKENS_FILE = "tokens.yaml"


def write_demo_tokens(workdir: Path) -> Path:
    """tokens.yaml for the demo (kept when it exists, so a restarted demo keeps its tokens)."""
    path = workdir / TOKENS_FILE
    if not path.exists():
        entries = [
            {"name": name, "tenant": tenant, "role": role, "token": secrets.token_urlsafe(24)}
            for name, (tenant, role) in DEMO_PRINCIPALS.items()
        ]
        path.touch(mode=0o600)
        path.write_text(yaml.safe_dump(entries, sort_keys=False))
    return path


def read_demo_tokens(workdir: Path) -> dict[str, str]:
    """The demo's plain tokens by caller name (admin, viewer, research, nlp, serving)."""
    entries = yaml.safe_load((workdir / TOKENS_FILE).read_text())
    return {str(e["name"]): str(e["token"]) for e in entries}


def write_demo_config(
    workdir: Path,
    kubeconfigs: dict[str, Path],
    redis_url: str,
    prefix: str,
    settings: Mapping[str, Any] | None = None,
    *,
    auth: bool = True,
) -> Path:
    """clusters.yaml for the demo: the example's clusters pointed at the simulation's kubeconfigs, with
    `settings` merged over the example's, and auth on (tokens.yaml in the same directory, see
    write_demo_tokens) unless `auth` is False (a broker run with insecure_no_auth)."""
    doc = yaml.safe_load(example_config_text())
    for c in doc["clusters"]:
        c["kubeconfig"] = str(kubeconfigs[c["name"]].resolve())
    doc["settings"] = {
        **doc.get("settings", {}),
        "redisUrl": redis_url,
        "redisPrefix": prefix,
        **(settings or {}),
    }
    doc.pop("auth", None)
    if auth:
        doc["auth"] = {"tokensFile": str(write_demo_tokens(workdir).resolve())}
    path = workdir / "clusters.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def demo_settings(speed: float) -> dict[str, Any]:
    """The settings the demo adds for a simulation at `speed`: a job's durationSeconds runs in simulated
    time, so predictions divide it by the speed and stay wall-clock, as the ages beside them (issue 45)."""
    return {"burst": {"simulationSpeed": speed if speed > 0 else 1.0}}


def _wait(pred: Any, timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return False


def _jobs_table(jobs: list[dict[str, Any]]) -> Table:
    table = Table(title="jobs")
    for col in ("NAME", "STATE", "CLUSTER", "RESOURCE", "WHY"):
        table.add_column(col)
    for j in jobs:
        p = j.get("placement") or {}
        res = f"{p.get('unitsPerPod')}x {p.get('resourceName')} ({p.get('product')})" if p else "-"
        table.add_row(j["name"], j["state"], j.get("cluster") or "-", res, j["reason"])
    return table


# The demo's own directory: the README's by-hand run writes .demo/kubeconfigs, and the two must not
# overwrite each other's kubeconfigs (each simulation has its own CA, ports and tokens).
DEFAULT_WORKDIR = Path(".demo") / "demo"


def cli_export_line(base: str, token: str) -> str:
    """The line a user runs in another terminal to use the CLI on this demo: the broker's URL and token,
    and the directory of this gpufed on PATH (`make demo` runs .venv/bin/gpufed, which no shell has on
    its PATH until the venv is activated), absolute so it works from any directory."""
    bin_dir = Path(sys.executable).parent
    path = f"PATH={bin_dir.absolute()}:$PATH " if (bin_dir / "gpufed").exists() else ""
    return f"export {path}GPUFED_URL={base} GPUFED_TOKEN={token}"


def _keep_running(base: str, tokens: Mapping[str, str], workdir: Path) -> None:
    """--keep: say how to reach the running demo, then wait for Ctrl-C or SIGTERM."""
    import signal
    import threading

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    console.rule("the demo keeps running (Ctrl-C stops it)")
    console.print(f"dashboard  {base}/#token={tokens['admin']}", markup=False, soft_wrap=True)
    console.print(f"CLI        {cli_export_line(base, tokens['admin'])}", markup=False, soft_wrap=True)
    console.print(
        f"           gpufed fleet --nodes; gpufed submit try --gpus 8 --product h100 --duration 60 --wait"
        f"\ntokens of each tenant's user: {workdir / TOKENS_FILE}",
        markup=False,
        soft_wrap=True,
    )
    with contextlib.suppress(KeyboardInterrupt):
        while not stop.wait(0.5):
            pass


def run(
    speed: float = 20.0, workdir: Path = DEFAULT_WORKDIR, timeout: float = 240.0, keep: bool = False
) -> int:
    """Run the demo; returns the process exit code (0 when every job ended where it should). With
    `keep`, the fleet and the broker stay up after it, until Ctrl-C or SIGTERM."""
    from broker.app import main as composition
    from kubesim.fleet import builtin_fleet, load_fleet
    from kubesim.sim import Simulation

    workdir.mkdir(parents=True, exist_ok=True)
    fleet_file = builtin_fleet("demo")
    if not fleet_file.is_file():
        raise ConfigError(f"the demo fleet {fleet_file} is missing from the installed package")
    fleet = load_fleet(fleet_file)
    prefix = f"gpufed-demo-{os.getpid()}"
    with redis_for_demo() as redis_url:
        console.rule("[bold]gpufed demo")
        console.print(
            f"simulated clusters from {fleet_file.name}, clock x{speed:g}; Redis {redacted(redis_url)}"
        )
        with Simulation(fleet, workdir / "kubeconfigs", speed=speed) as sim:
            kubeconfigs = {name: sim.kubeconfig_path(name) for name in sim.cluster_names()}
            for name, path in kubeconfigs.items():
                console.print(
                    f"  {name:<12} {sim.server_url(name)}  kubeconfig {path}", markup=False, soft_wrap=True
                )
            config_path = write_demo_config(workdir, kubeconfigs, redis_url, prefix, demo_settings(speed))
            cfg = load_fleet_config(config_path)
            port = free_port()
            tokens = read_demo_tokens(workdir)
            with composition.running_broker(cfg, host="127.0.0.1", port=port) as broker:
                base = f"http://127.0.0.1:{port}"
                console.print(f"broker API on {base}, tokens in {workdir / TOKENS_FILE}", markup=False)
                admin = {"Authorization": f"Bearer {tokens['admin']}"}
                with httpx.Client(base_url=base, timeout=30, headers=admin) as http:

                    def observed() -> bool:  # every cluster listed by its poller, not only announced
                        clusters = http.get("/v1/fleet").json()["clusters"]
                        return len(clusters) == len(cfg.clusters) and all(
                            c["health"] != "unknown" for c in clusters
                        )

                    # Jobs submitted before would wait QUEUED as "not yet observed", and the run would
                    # count that as their end (a loaded machine's pollers took that long in a test run).
                    if not _wait(observed, timeout=60):
                        console.print("[red]the pollers did not report every cluster within 60 s[/red]")
                        return 1
                    console.print(fleet_table(http.get("/v1/fleet").json()["clusters"]))
                    console.rule("submitting jobs")
                    ids: list[str] = []
                    for spec in DEMO_JOBS:
                        r = http.post(  # as the tenant's own user: the token says the tenant
                            "/v1/jobs",
                            json=spec,
                            headers={
                                "Idempotency-Key": f"{prefix}-{spec['name']}",
                                "Authorization": f"Bearer {tokens[spec['tenant']]}",
                            },
                        )
                        r.raise_for_status()
                        ids.append(r.json()["id"])
                        console.print(f"  submitted {spec['name']:<22} -> {r.json()['id']}")

                    def placed_or_diagnosed() -> bool:
                        jobs = [http.get(f"/v1/jobs/{i}").json() for i in ids]
                        return all(
                            j["state"] != "QUEUED" or "clusters are available" in j["reason"] for j in jobs
                        )

                    _wait(placed_or_diagnosed, timeout=60)
                    console.rule("where each job went, and why")
                    console.print(_jobs_table([http.get(f"/v1/jobs/{i}").json() for i in ids]))

                    def settled() -> bool:
                        jobs = [http.get(f"/v1/jobs/{i}").json() for i in ids]
                        return all(
                            j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") or j["state"] == "QUEUED"
                            for j in jobs
                        )

                    console.rule("waiting for the jobs to finish")
                    done = _wait(settled, timeout=timeout, interval=0.5)
                    final = [http.get(f"/v1/jobs/{i}").json() for i in ids]
                    console.print(_jobs_table(final))
                    console.rule("fleet capacity")
                    console.print(fleet_table(http.get("/v1/fleet").json()["clusters"]))
                    if keep:
                        _keep_running(base, tokens, workdir)
                    broker.store_cleanup()
            ok = done and all(
                (j["state"] == "SUCCEEDED") if j["name"] != "too-big-16gpu" else (j["state"] == "QUEUED")
                for j in final
            )
            console.print(
                "[green]demo finished: every job ended where expected[/green]"
                if ok
                else "[red]demo: some jobs did not end as expected[/red]"
            )
            return 0 if ok else 1
