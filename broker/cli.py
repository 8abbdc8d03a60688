"""`gpufed`: the command line. A client of the HTTP API, plus `serve`, `demo`, `probe` and `rbac`.

    gpufed serve --config clusters.yaml [--tls-cert C --tls-key K]   run the broker
    gpufed demo                                  simulated clusters, the broker, jobs placed, fleet view
    gpufed submit NAME --gpus 8 --product H100-80GB --image IMG --command "python train.py" --env K=V
    gpufed submit -f job.yaml [--wait]           a native spec or a plain batch/v1 Job; `-f -` reads stdin
    gpufed jobs | get JOB | events JOB | wait JOB | watch [JOB] | logs JOB [-f] | cancel JOB
    gpufed explain ... | fleet [--nodes] | clusters
    gpufed probe [--nvidia-smi-xml FILE]         this host's GPUs as the broker sees them
    gpufed rbac --cluster NAME [-c clusters.yaml]  least-privilege manifests for a member cluster

JOB is an id or a name (a name several jobs share is refused). Every read command takes
`-o table|json|yaml|wide`. The endpoint and token come from --server/--token, $GPUFED_URL/$GPUFED_TOKEN,
or the current context of ~/.config/gpufed/config.yaml (broker.cli_client). Exit codes: 0 ok, 1 the
job failed / nothing fits / the broker refused, 2 usage, 3 broker unreachable, 4 not authenticated or not
allowed (tokens and tenants: docs/tenancy.md). Errors are one line on stderr. Commands that need adapters (serve, demo, probe) reach them
through broker.main, the composition root.
"""

from __future__ import annotations

import enum
import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
import yaml
from httpx_sse import EventSource, SSEError
from rich.console import Console
from typer.exceptions import TyperException

from broker import safe_yaml
from broker.cli_client import (
    DEFAULT_CHUNK_SIZE,
    EXIT_FAILED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    Api,
    CliError,
    ago,
    duration,
    render,
    resolve_target,
)
from broker.fleet_tables import demand_table, fleet_table, nodes_table

app = typer.Typer(
    add_completion=True,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="gpufed: one endpoint for a fleet of GPU clusters",
)
console = Console(width=None if sys.stdout.isatty() else 150, highlight=False, markup=False)


class Output(enum.StrEnum):
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"
    WIDE = "wide"


ServerOpt = Annotated[str | None, typer.Option("--server", envvar="GPUFED_URL", help="broker URL")]
TokenOpt = Annotated[
    str | None, typer.Option("--token", envvar="GPUFED_TOKEN", help="bearer token", show_default=False)
]
ContextOpt = Annotated[
    str | None, typer.Option("--context", envvar="GPUFED_CONTEXT", help="context in the config file")
]
OutputOpt = Annotated[Output, typer.Option("--output", "-o", help="table | json | yaml | wide")]
TERMINAL_OK = "SUCCEEDED"
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


# `gpufed --token T <command>`: a token given before the command, for every command that calls the broker
# (a command's own --token, then $GPUFED_TOKEN, win over it only when given).
_global_token: str | None = None


@app.callback()
def _global_options(
    token: Annotated[
        str | None,
        typer.Option(
            "--token", envvar="GPUFED_TOKEN", help="bearer token for every command", show_default=False
        ),
    ] = None,
) -> None:
    global _global_token
    _global_token = token or None


def _complete_jobs(incomplete: str) -> list[str]:
    """Shell completion of JOB: names and ids of the jobs the broker lists (from $GPUFED_URL or the
    config's context); nothing when it does not answer within 2 s."""
    try:
        target = resolve_target(os.environ.get("GPUFED_URL"), os.environ.get("GPUFED_TOKEN"), None)
        with Api(target, timeout=2.0) as api:
            items = api.list_all("/v1/jobs")
    except (CliError, KeyError, TypeError):
        return []
    names = {j["name"] for j in items} | {j["id"] for j in items}
    return sorted(n for n in names if n.startswith(incomplete))


def _api(server: str | None, token: str | None, context: str | None) -> Api:
    return Api(resolve_target(server, token or _global_token, context))


def _fetch(
    method: str, path: str, server: str | None, token: str | None, context: str | None, **kw: Any
) -> Any:
    """One call to the broker on a connection of its own: the answer's JSON body (CliError when refused)."""
    with _api(server, token, context) as api:
        return api.call(method, path, **kw)


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """kubectl-style columns: no boxes, no markup, two spaces apart."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [headers, *rows]]
    return "\n".join(lines)


def _emit(data: Any, output: Output, table: Callable[[bool], str]) -> None:
    if output in (Output.JSON, Output.YAML):
        _out(render(data, output.value))
    else:
        _out(table(output == Output.WIDE))


def _job_rows(items: Sequence[dict[str, Any]], wide: bool) -> str:
    headers = ["ID", "NAME", "STATE", "CLUSTER", "AGE", "REASON"]
    if wide:
        headers[4:4] = ["TENANT", "GPUS", "ATTEMPT", "WORKLOAD"]
    rows = []
    now = time.time()
    for j in items:
        req = j.get("request") or {}
        row = [j["id"], j["name"], j["state"], j.get("cluster") or "-", ago(j.get("createdAt"), now)]
        if wide:
            gpus = (
                f"{req.get('gpus', 0)}x{req.get('pods', 1)}"
                if req.get("gpus")
                else f"mig x{req.get('pods', 1)}"
            )
            row[4:4] = [j.get("tenant", "-"), gpus, str(j.get("attempt", 0)), j.get("workload") or "-"]
        reason = str(j.get("reason") or "")
        if j.get("queuePosition") is not None:
            reason = f"#{j['queuePosition']} in queue; {reason}"
        rows.append([*row, reason if wide else reason[:80]])
    return _table(headers, rows)


# --------------------------------------------------------------------------- server side


@app.command()
def serve(
    config: Annotated[Path, typer.Option("--config", "-c", help="clusters.yaml")] = Path("clusters.yaml"),
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on", min=1, max=65535)] = 8080,
    tls_cert: Annotated[
        Path | None, typer.Option("--tls-cert", help="serve HTTPS with this PEM certificate")
    ] = None,
    tls_key: Annotated[
        Path | None, typer.Option("--tls-key", help="the certificate's PEM private key")
    ] = None,
    insecure_no_auth: Annotated[
        bool,
        typer.Option(
            "--insecure-no-auth", help="serve without authentication, every caller an admin (local play only)"
        ),
    ] = False,
) -> None:
    """Run the broker: the HTTP API, the scheduling loop and the Ray poller actors. $REDIS_URL overrides
    the config's redisUrl."""
    from broker import main as composition

    try:
        composition.serve(config, host, port, tls_cert, tls_key, insecure_no_auth=insecure_no_auth)
    except composition.StartupError as e:
        raise CliError(f"cannot start: {e}") from None


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
    output: OutputOpt = Output.TABLE,
) -> None:
    """This host's GPUs, MIG profiles and NUMA affinity, as NodeFacts and GFD-style labels."""
    from broker import main as composition

    fmt = "table" if output == Output.WIDE else output.value
    if nvidia_smi_xml is not None and not nvidia_smi_xml.is_file():
        raise CliError(f"--nvidia-smi-xml: no such file: {nvidia_smi_xml}", EXIT_USAGE)
    _out(composition.probe(nvidia_smi_xml, fmt))


# --------------------------------------------------------------------------- client side


def _read_spec(file: str) -> Any:
    """A job file (YAML or JSON, native or a batch/v1 Job); '-' is stdin. Read safely (size, aliases)."""
    if file == "-":
        data: bytes = sys.stdin.buffer.read(safe_yaml.MAX_BYTES + 1)
        what = "stdin"
    else:
        path = Path(file)
        try:
            if path.stat().st_size > safe_yaml.MAX_BYTES:
                raise CliError(f"--file {file}: larger than {safe_yaml.MAX_BYTES} bytes", EXIT_USAGE)
            data = path.read_bytes()
        except OSError as e:
            raise CliError(f"--file {file}: {e.strerror or e}", EXIT_USAGE) from None
        what = file
    try:
        spec = safe_yaml.load(data, what)
    except safe_yaml.YamlError as e:
        raise CliError(str(e), EXIT_USAGE) from None
    if not isinstance(spec, dict):
        raise CliError(f"{what}: expected a job (a mapping), got {type(spec).__name__}", EXIT_USAGE)
    return spec


def _env_pairs(env: Sequence[str]) -> list[dict[str, str]]:
    out = []
    for i, item in enumerate(env):
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CliError(f"--env[{i}]: {item!r} is not NAME=VALUE", EXIT_USAGE)
        out.append({"name": name, "value": value})
    return out


def _spec_from_flags(
    name: str,
    gpus: int,
    pods: int,
    product: list[str],
    mig_profile: str | None,
    mig_memory_gb: int | None,
    numa: bool,
    burst: bool,
    duration_s: float | None,
    tenant: str | None,
    priority_class: str | None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": name, "gpus": gpus, "pods": pods}
    if tenant:  # else the token's tenant (only an admin may name another)
        spec["tenant"] = tenant
    if product:
        spec["gpuProducts"] = product
    if mig_profile or mig_memory_gb:
        spec["gpus"] = 0
        spec["mig"] = {"profile": mig_profile} if mig_profile else {"memoryGB": mig_memory_gb}
    if numa:
        spec["numaAligned"] = True
    if burst:
        spec["allowBurst"] = True
    if duration_s:
        spec["durationSeconds"] = duration_s
    if priority_class:
        spec["priorityClass"] = priority_class
    return spec


def _progress_line(job: dict[str, Any], started: float) -> str:
    parts = [job["id"], job["name"], job["state"]]
    if job.get("cluster"):
        parts.append(f"on {job['cluster']}")
    if job.get("queuePosition") is not None:
        parts.append(f"#{job['queuePosition']} in queue")
    parts.append(duration(time.monotonic() - started))
    if job.get("reason"):
        parts.append(f"- {job['reason']}")
    return "  ".join(parts)


def _wait(
    api: Api, job: dict[str, Any], timeout: float | None, output: Output = Output.TABLE, interval: float = 1.0
) -> None:
    """Follow a job to its end with one live progress line on stderr, then print the job as `output`
    says; exit 0 if it succeeded, 1 otherwise."""
    started = time.monotonic()
    tty = sys.stderr.isatty()
    last = ""
    while True:
        line = _progress_line(job, started)
        key = f"{job['state']} {job.get('cluster')} {job.get('queuePosition')} {job.get('reason')}"
        if tty:
            sys.stderr.write("\r\033[K" + line[: os.get_terminal_size(2).columns - 1])
            sys.stderr.flush()
        elif key != last:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        last = key
        if job["state"] in TERMINAL:
            break
        if timeout is not None and time.monotonic() - started > timeout:
            if tty:
                sys.stderr.write("\n")
            raise CliError(f"job {job['id']} still {job['state']} after {timeout:g}s (--timeout)")
        time.sleep(interval)
        job = api.call("GET", f"/v1/jobs/{job['id']}")
    if tty:
        sys.stderr.write("\n")
    final = job
    _emit(final, output, lambda wide: _job_rows([final], wide))
    if job["state"] != TERMINAL_OK:
        raise typer.Exit(EXIT_FAILED)


@app.command()
def submit(
    name: Annotated[str | None, typer.Argument(help="job name (DNS label)")] = None,
    file: Annotated[
        str | None,
        typer.Option("--file", "-f", help="a job in YAML/JSON: native or a batch/v1 Job; - is stdin"),
    ] = None,
    image: Annotated[str | None, typer.Option(help="container image")] = None,
    command: Annotated[
        str | None, typer.Option(help='the command, split like a shell: "python train.py"')
    ] = None,
    arg: Annotated[list[str], typer.Option("--arg", help="an argument (repeat)")] = [],  # noqa: B006
    env: Annotated[list[str], typer.Option("--env", "-e", help="NAME=VALUE (repeat)")] = [],  # noqa: B006
    gpus: Annotated[int, typer.Option(help="whole GPUs per pod")] = 1,
    pods: Annotated[int, typer.Option(help="pods; > 1 is a gang")] = 1,
    product: Annotated[list[str], typer.Option(help="acceptable GPU product (repeat)")] = [],  # noqa: B006
    mig_profile: Annotated[str | None, typer.Option(help="MIG profile by name, e.g. 1g.10gb")] = None,
    mig_memory_gb: Annotated[int | None, typer.Option(help="MIG by need: at least this many GB")] = None,
    numa: Annotated[bool, typer.Option(help="all GPUs of a pod inside one NUMA zone")] = False,
    burst: Annotated[bool, typer.Option(help="may run on a public-cloud cluster")] = False,
    duration_s: Annotated[
        float | None, typer.Option("--duration", help="simulated run time in seconds")
    ] = None,
    tenant: Annotated[
        str | None, typer.Option(help="tenant (default: the token's; only an admin may name another)")
    ] = None,
    priority_class: Annotated[str | None, typer.Option(help="priority class")] = None,
    idempotency_key: Annotated[
        str | None, typer.Option(help="resubmitting with the same key is harmless")
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="follow the job to its end; exit with its result")
    ] = False,
    timeout: Annotated[
        float | None, typer.Option(help="with --wait: give up after this many seconds")
    ] = None,
    output: OutputOpt = Output.TABLE,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Submit a GPU job to the fleet: by flags, or a file (-f) with a native spec or a batch/v1 Job."""
    if file is not None:
        if name is not None:
            raise CliError("give a NAME with flags, or --file, not both", EXIT_USAGE)
        spec = _read_spec(file)
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
            duration_s,
            tenant,
            priority_class,
        )
    else:
        raise CliError("give a job NAME with flags, or --file", EXIT_USAGE)
    extra: dict[str, Any] = {}
    if image:
        extra["image"] = image
    if command:
        try:
            extra["command"] = shlex.split(command)
        except ValueError as e:
            raise CliError(f"--command: {e}", EXIT_USAGE) from None
    if arg:
        extra["args"] = list(arg)
    if env:
        extra["env"] = _env_pairs(env)
    if extra:
        if spec.get("kind") is not None:
            raise CliError(
                "--image/--command/--arg/--env apply to a native spec; edit the Job's container", EXIT_USAGE
            )
        spec.update({k: (spec.get(k) or []) + v if k == "env" else v for k, v in extra.items()})
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    with _api(server, token, context) as api:
        job = api.call("POST", "/v1/jobs", json=spec, headers=headers)
        if wait:  # the job is printed once, when it has ended
            _wait(api, job, timeout, output)
        else:
            _emit(job, output, lambda wide: _job_rows([job], wide))


@app.command()
def wait(
    job: Annotated[str, typer.Argument(help="job id or name", autocompletion=_complete_jobs)],
    timeout: Annotated[float | None, typer.Option(help="give up after this many seconds (exit 1)")] = None,
    output: OutputOpt = Output.TABLE,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Follow a job to its end with a live progress line; exit 0 if it succeeded, 1 if not."""
    with _api(server, token, context) as api:
        _wait(api, api.resolve_job(job), timeout, output)


@app.command()
def jobs(
    state: Annotated[list[str], typer.Option("--state", help="only jobs in this state (repeat)")] = [],  # noqa: B006
    output: OutputOpt = Output.TABLE,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
    chunk_size: Annotated[
        int,
        typer.Option("--chunk-size", min=0, help="jobs per request while listing (0: all in one request)"),
    ] = DEFAULT_CHUNK_SIZE,
) -> None:
    """List jobs, oldest first (fetched in pages of --chunk-size, as kubectl does)."""
    params = [("state", s.upper()) for s in state]
    with _api(server, token, context) as api:
        body = {"items": api.list_all("/v1/jobs", params, chunk_size)}
    if not body["items"] and output in (Output.TABLE, Output.WIDE):
        _out("No jobs.")
        return
    _emit(body, output, lambda wide: _job_rows(body["items"], wide))


@app.command()
def get(
    job: Annotated[str, typer.Argument(help="job id or name", autocompletion=_complete_jobs)],
    output: OutputOpt = Output.TABLE,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """One job: state, cluster, placement and the reason for its state."""
    with _api(server, token, context) as api:
        body = api.resolve_job(job)

    def table(wide: bool) -> str:
        rows = _job_rows([body], wide)
        if body.get("predictedWait"):  # a queued job's predicted on-prem start (docs/burst.md)
            rows += f"\n{body['predictedWait']}"
        return rows

    _emit(body, output, table)


def _event_line(e: dict[str, Any], with_job: bool, wide: bool = False) -> list[str]:
    at = e.get("at") or 0.0
    when = time.strftime("%H:%M:%S", time.localtime(at)) if wide else ago(at)
    row = [when, str(e.get("attempt", 0)), e["state"], e.get("cluster") or "-", e.get("reason") or ""]
    return [e.get("jobId", "-"), *row] if with_job else row


@app.command()
def events(
    job: Annotated[str, typer.Argument(help="job id or name", autocompletion=_complete_jobs)],
    output: OutputOpt = Output.TABLE,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """A job's transitions, oldest first."""
    with _api(server, token, context) as api:
        ident = api.resolve_job(job)["id"]
        body = api.call("GET", f"/v1/jobs/{ident}/events")
    _emit(
        body,
        output,
        lambda wide: _table(
            ["WHEN", "ATTEMPT", "STATE", "CLUSTER", "REASON"],
            [_event_line(e, False, wide) for e in body["items"]],
        ),
    )


RESUME_ATTEMPTS = 5


def _print_event(e: dict[str, Any], output: Output) -> None:
    if output in (Output.JSON, Output.YAML):
        _out(json.dumps(e) if output == Output.JSON else render([e], "yaml"))
    else:
        _out("  ".join(_event_line(e, True, True)))


@app.command()
def watch(
    job: Annotated[
        str | None, typer.Argument(help="job id or name; none: every job", autocompletion=_complete_jobs)
    ] = None,
    output: OutputOpt = Output.TABLE,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Stream job transitions as they happen (server-sent events). With JOB: its history first, and the
    stream ends with the job (exit 1 if it did not succeed). A broken stream (a broker restarting, a
    failover) is resumed from the last event seen (Last-Event-ID), up to RESUME_ATTEMPTS times in a row."""
    api = _api(server, token, context)
    last_state: str | None = None
    last_id: str | None = None
    failures = 0
    try:
        path = "/v1/events"
        if job is not None:
            path = f"/v1/jobs/{api.resolve_job(job)['id']}/events"
        while job is None or last_state not in TERMINAL:
            headers = {"Last-Event-ID": last_id} if last_id else {}
            try:
                with api.stream(path, params={"watch": "1"}, headers=headers) as resp:
                    for sse in EventSource(resp).iter_sse():
                        failures = 0
                        if sse.event != "transition":
                            continue
                        last_id = sse.id or last_id
                        e = json.loads(sse.data)
                        last_state = e["state"]
                        _print_event(e, output)
            except (SSEError, httpx.HTTPError, CliError) as e:
                if isinstance(e, CliError) and e.code != EXIT_UNREACHABLE:
                    raise
                failures += 1
                if failures > RESUME_ATTEMPTS:
                    raise CliError(f"the event stream broke: {e}", EXIT_UNREACHABLE) from None
                time.sleep(min(8.0, 0.5 * 2**failures))
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
    finally:
        api.close()
    if job is not None and last_state != TERMINAL_OK:
        raise typer.Exit(EXIT_FAILED)


@app.command()
def logs(
    job: Annotated[str, typer.Argument(help="job id or name", autocompletion=_complete_jobs)],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="stream until the container exits")] = False,
    tail: Annotated[int | None, typer.Option("--tail", help="only the last N lines", min=0)] = None,
    timestamps: Annotated[bool, typer.Option(help="prefix each line with its RFC 3339 time")] = False,
    pod: Annotated[
        str | None, typer.Option(help="one pod of a gang (default: all; with -f the first)")
    ] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """The container log of a job's pods, from its member cluster."""
    api = _api(server, token, context)
    params: dict[str, Any] = {}
    if follow:
        params["follow"] = "1"
    if tail is not None:
        params["tailLines"] = tail
    if timestamps:
        params["timestamps"] = "1"
    if pod:
        params["pod"] = pod
    try:
        ident = api.resolve_job(job)["id"]
        with api.stream(f"/v1/jobs/{ident}/logs", params=params) as resp:
            try:
                for chunk in resp.iter_bytes():
                    sys.stdout.buffer.write(chunk)
                    sys.stdout.flush()
            except httpx.HTTPError as e:
                raise CliError(f"the log stream broke: {e}", 3) from None
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
    finally:
        api.close()


@app.command()
def cancel(
    job: Annotated[str, typer.Argument(help="job id or name", autocompletion=_complete_jobs)],
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Cancel a job (its workload is deleted from its cluster)."""
    with _api(server, token, context) as api:
        body = api.call("DELETE", f"/v1/jobs/{api.resolve_job(job)['id']}")
    _out(_job_rows([body], False).splitlines()[1])


def _print_rich(renderable: Any) -> str:
    with console.capture() as cap:
        console.print(renderable)
    return cap.get().rstrip("\n")


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
    body = _fetch("GET", "/v1/fleet", server, token, context, params=params)

    def table(wide: bool) -> str:
        parts = [_print_rich(fleet_table(body["clusters"]))]
        parts += [
            f"{c['cluster']} is {c['health']}: {c['healthReason']}"
            for c in body["clusters"]
            if c.get("healthReason")
        ]
        if body.get("products"):
            parts.append(_print_rich(demand_table(body["products"])))
        if nodes or wide:
            parts += [_print_rich(nodes_table(c["cluster"], c.get("nodeDetail"))) for c in body["clusters"]]
        return "\n".join(parts)

    _emit(body, output, table)


@app.command()
def spend(
    output: OutputOpt = Output.TABLE,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Cloud spend per tenant this period: finished runs, running jobs' expected cost, budget left."""
    body = _fetch("GET", "/v1/spend", server, token, context)

    def money(v: float | None) -> str:
        return "-" if v is None else f"${v:,.2f}"

    def table(wide: bool) -> str:
        headers = ["TENANT", "PERIOD", "SPENT", "RUNNING", "BUDGET", "LEFT"]
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
            if wide:
                row[3:3] = [f"{t['gpuHours']:.2f}", str(t["runs"])]
            rows.append(row)
        return _table(headers, rows)

    if not body["items"] and output in (Output.TABLE, Output.WIDE):
        _out("No spend.")
        return
    _emit(body, output, table)


@app.command()
def clusters(
    output: OutputOpt = Output.TABLE,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Member clusters with their health, its cause and since when, and whether they are fenced."""
    body = _fetch("GET", "/v1/clusters", server, token, context)

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
            return _table(headers, rows)  # none, or the store's first start: nothing was rebuilt
        return _table(headers, rows) + "\n" + _recovery_line(recovery)

    _emit(body, output, table)


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
    gpus: Annotated[int, typer.Option(help="whole GPUs per pod")] = 1,
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
        _read_spec(file)
        if file is not None
        else _spec_from_flags(
            name, gpus, pods, product, mig_profile, mig_memory_gb, numa, burst, None, None, None
        )
    )
    body = _fetch("POST", "/v1/explain", server, token, context, json=spec)

    def table(wide: bool) -> str:
        if body["placed"]:
            p = body["placement"]
            head = (
                f"would place on {p['cluster']}: {p['unitsPerPod']}x {p['resourceName']} per pod "
                f"({p['product']}), score {p['score']}"
            )
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
        return head + "\n" + _table(["CLUSTER", "TIER", "VERDICT", "SCORE", "DETAIL"], rows)

    _emit(body, output, table)
    if not body["placed"]:
        raise typer.Exit(EXIT_FAILED)


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
    tenant: Annotated[
        list[str] | None,
        typer.Option(
            help="a tenant whose namespace (the config's tenantNamespace) gets the job Role; repeat"
        ),
    ] = None,
) -> None:
    """Print least-privilege RBAC manifests for a member cluster (apply them there with kubectl)."""
    from broker.config import load_fleet_config
    from broker.rbac import member_rbac

    ns = namespace
    tenant_namespaces: list[str] = []
    create = follow_all = False
    if config is not None:
        try:
            cfg = load_fleet_config(config, check_kubeconfigs=False)
        except Exception as exc:
            raise CliError(f"{config}: {exc}", EXIT_USAGE) from None
        known = {c.name: c for c in cfg.clusters}
        if cluster not in known:
            raise CliError(
                f"--cluster: {cluster!r} is not in {config} (known: {', '.join(sorted(known))})", EXIT_USAGE
            )
        traits = known[cluster].traits()
        ns = ns or traits.namespace
        tenant_namespaces = [traits.namespace_for(t) for t in (tenant or cfg.settings.tenants)]
        create = traits.create_namespaces
        follow_all = traits.tenant_namespace is not None
    elif tenant:
        raise CliError("--tenant: needs --config (the tenant namespace pattern is there)", EXIT_USAGE)
    try:
        docs = member_rbac(
            cluster,
            ns or "default",
            service_account,
            service_account_namespace,
            tenant_namespaces=tenant_namespaces,
            create_namespaces=create,
            follow_all_namespaces=follow_all,
        )
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    sys.stdout.write(f"# gpufed member-cluster RBAC for {cluster}: apply in that cluster\n")
    sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False))


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI on argv; every failure is one line on stderr and an exit code (module docstring)."""
    from broker.errors import GpufedError

    command = typer.main.get_command(app)
    try:
        rv = command.main(
            args=list(argv) if argv is not None else None, prog_name="gpufed", standalone_mode=False
        )
    except CliError as e:
        _fail(str(e))
        return e.code
    except typer.Exit as e:
        return int(e.exit_code)
    except typer.Abort:
        _fail("aborted")
        return 130
    except TyperException as e:  # usage errors (typer's own click): one line, exit 2
        ctx = getattr(e, "ctx", None)
        if type(e).__name__ == "NoArgsIsHelpError" and ctx is not None:
            sys.stdout.write(ctx.get_help() + "\n")
            return EXIT_USAGE
        message = e.format_message() if hasattr(e, "format_message") else str(e)
        hint = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
        _fail(message.replace("Value error, ", "") + hint)
        return int(getattr(e, "exit_code", EXIT_USAGE))
    except GpufedError as e:  # a fault the user can act on (bad config): one line, not a traceback
        _fail(str(e))
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except SystemExit as e:  # typer's completion options exit by themselves
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_FAILED)
    return rv if isinstance(rv, int) else 0


def _fail(message: str) -> None:
    first = message.strip().splitlines()[0] if message.strip() else "failed"
    sys.stderr.write(f"gpufed: error: {first}\n")
    sys.stderr.flush()


def main() -> None:
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    sys.exit(run())


if __name__ == "__main__":
    main()
