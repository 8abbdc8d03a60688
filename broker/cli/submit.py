"""`gpufed submit` and `wait`: a job from flags or a file, and following one to its end."""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from broker.cli.batch import batch_flags, dry_run_text
from broker.cli.client import EXIT_FAILED, EXIT_USAGE, Api, CliError, duration
from broker.cli.common import (
    TERMINAL,
    TERMINAL_OK,
    ContextOpt,
    OutputOpt,
    ServerOpt,
    TokenOpt,
    app,
    complete_jobs,
    connect,
)
from broker.cli.output import Output, api_warnings, emit, job_rows
from broker.core import safe_yaml


def read_spec(file: str) -> Any:
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


def gpu_shorthand(value: str) -> tuple[int, list[str]]:
    """--gpus as a count (8) or SkyPilot's PRODUCT:COUNT (H100:8; H100 alone is one GPU): the count and
    the product it names, if any (the broker resolves short names: h100 -> H100-80GB)."""
    product, sep, count = value.rpartition(":")
    if value.strip().startswith("-"):
        raise CliError(f"--gpus: {value!r} is not a count or PRODUCT:COUNT (e.g. 8 or H100:8)", EXIT_USAGE)
    if not sep and not value.strip().isdigit():
        product, count = value, "1"
    if not count.strip().isdigit() or (sep and not product.strip()):
        raise CliError(f"--gpus: {value!r} is not a count or PRODUCT:COUNT (e.g. 8 or H100:8)", EXIT_USAGE)
    return int(count), ([product.strip()] if product.strip() else [])


def spec_from_flags(
    name: str,
    gpus: str,
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
    count, shorthand = gpu_shorthand(gpus)
    spec: dict[str, Any] = {"name": name, "gpus": count, "pods": pods}
    if shorthand:
        product = [*shorthand, *product]
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


def follow_to_end(
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
    emit(final, output, lambda wide: job_rows([final], wide))
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
    gpus: Annotated[str, typer.Option(help="whole GPUs per pod: 8, or PRODUCT:COUNT as in H100:8")] = "1",
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
    checkpoint_grace: Annotated[
        int | None,
        typer.Option(
            "--checkpoint-grace",
            help="the job checkpoints: seconds it gets to save when stopped (docs/migration.md)",
        ),
    ] = None,
    idempotency_key: Annotated[
        str | None, typer.Option(help="resubmitting with the same key is harmless")
    ] = None,
    group: Annotated[str | None, typer.Option(help="the job's group (docs/batch.md)")] = None,
    array: Annotated[
        str | None, typer.Option(help="an array: 0-49 (50 members), 0-49%8 (at most 8 at once)")
    ] = None,
    depends_on: Annotated[
        list[str],
        typer.Option(
            "--depends-on", help="WHEN:JOB or WHEN:group/NAME, WHEN succeeded|finished|failed (repeat)"
        ),
    ] = [],  # noqa: B006
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="validate, price and explain; create nothing")
    ] = False,
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
        spec = read_spec(file)
    elif name:
        spec = spec_from_flags(
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
    if checkpoint_grace is not None:
        extra["checkpoint"] = {"gracePeriodSeconds": checkpoint_grace}
    if extra:
        if spec.get("kind") is not None:
            raise CliError(
                "--image/--command/--arg/--env/--checkpoint-grace apply to a native spec; edit the Job",
                EXIT_USAGE,
            )
        spec.update({k: (spec.get(k) or []) + v if k == "env" else v for k, v in extra.items()})
    spec = batch_flags(spec, group, array, depends_on)
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    with connect(server, token, context) as api:
        job = api.call(
            "POST", "/v1/jobs", json=spec, headers=headers, params={"dryRun": "All"} if dry_run else None
        )
        api_warnings(job)
        for member in job.get("items") or ():  # an array's members, each with its own warnings
            api_warnings(member)
        if dry_run or "items" in job:  # what submit would do, or an array's members
            emit(job, output, lambda wide: dry_run_text(job, wide))
            return
        if wait:  # the job is printed once, when it has ended
            follow_to_end(api, job, timeout, output)
        else:
            emit(job, output, lambda wide: job_rows([job], wide))


@app.command()
def wait(
    job: Annotated[str, typer.Argument(help="job id or name", autocompletion=complete_jobs)],
    timeout: Annotated[float | None, typer.Option(help="give up after this many seconds (exit 1)")] = None,
    output: OutputOpt = Output.TABLE,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Follow a job to its end with a live progress line; exit 0 if it succeeded, 1 if not."""
    with connect(server, token, context) as api:
        follow_to_end(api, api.resolve_job(job), timeout, output)
