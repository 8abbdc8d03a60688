"""`gpufed jobs`, `get`, `events`, `watch`, `logs`, `cancel`: reading and stopping jobs."""

from __future__ import annotations

import json
import sys
import time
from typing import Annotated, Any

import httpx
import typer
from httpx_sse import EventSource, SSEError

from broker.cli.batch import AllOpt, GroupOpt, Selector, YesOpt, confirm, live, select_jobs, watch_group
from broker.cli.client import DEFAULT_CHUNK_SIZE, EXIT_FAILED, EXIT_UNREACHABLE, CliError, ago, render
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
    job_states,
)
from broker.cli.output import Output, columns, emit, job_rows, out, rfc3339
from broker.cli.selector import matches, parse_selector


@app.command()
def jobs(
    state: Annotated[list[str], typer.Option("--state", help="only jobs in this state (repeat)")] = [],  # noqa: B006
    selector: Annotated[
        str | None, typer.Option("--selector", "-l", help="only jobs with these labels: team=nlp,tier!=batch")
    ] = None,
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
    terms = parse_selector(selector)
    with connect(server, token, context) as api:
        body: dict[str, Any] = {"items": api.list_all("/v1/jobs", job_states(state), chunk_size)}
    if terms:
        body["items"] = [j for j in body["items"] if matches(j, terms)]
    if not body["items"] and output in (Output.TABLE, Output.WIDE):
        out("No jobs.")
        return
    emit(body, output, lambda wide: job_rows(body["items"], wide, cut=True))


@app.command()
def get(
    job: Annotated[
        list[str] | None, typer.Argument(help="job ids or names", autocompletion=complete_jobs)
    ] = None,
    selector: Selector = None,
    group: GroupOpt = None,
    every: AllOpt = False,
    output: OutputOpt = Output.TABLE,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Jobs by ids or names, -l, --group or --all: state, cluster, placement and why (docs/batch.md)."""
    with connect(server, token, context) as api:
        found = select_jobs(api, job or [], selector, group, every)
    if job and len(job) == 1:
        body = found[0]

        def table(wide: bool) -> str:
            rows = job_rows([body], wide)
            if body.get("predictedWait"):  # a queued job's predicted on-prem start (docs/burst.md)
                rows += f"\n{body['predictedWait']}"
            return rows

        emit(body, output, table)
        return
    listed: dict[str, Any] = {"items": found}
    if not found and output in (Output.TABLE, Output.WIDE):
        out("No jobs.")
        return
    emit(listed, output, lambda wide: job_rows(found, wide, cut=True))


def _event_line(e: dict[str, Any], with_job: bool, wide: bool = False) -> list[str]:
    at = e.get("at") or 0.0
    when = time.strftime("%H:%M:%S", time.localtime(at)) if wide else ago(at)
    row = [when, str(e.get("attempt", 0)), e["state"], e.get("cluster") or "-", e.get("reason") or ""]
    return [e.get("jobId", "-"), *row] if with_job else row


@app.command()
def events(
    job: Annotated[str, typer.Argument(help="job id or name", autocompletion=complete_jobs)],
    output: OutputOpt = Output.TABLE,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """A job's transitions, oldest first."""
    with connect(server, token, context) as api:
        ident = api.resolve_job(job)["id"]
        body = api.call("GET", f"/v1/jobs/{ident}/events")
    emit(
        body,
        output,
        lambda wide: columns(
            ["WHEN", "ATTEMPT", "STATE", "CLUSTER", "REASON"],
            [_event_line(e, False, wide) for e in body["items"]],
        ),
    )


RESUME_ATTEMPTS = 5


def _print_event(e: dict[str, Any], output: Output) -> None:
    if output == Output.JSONPATH:
        emit(e, output, lambda _: "")
    elif output in (Output.JSON, Output.YAML):
        out(json.dumps(rfc3339(e)) if output == Output.JSON else render([rfc3339(e)], "yaml"))
    else:
        out("  ".join(_event_line(e, True, True)))


@app.command()
def watch(
    job: Annotated[
        str | None, typer.Argument(help="job id or name; none: every job", autocompletion=complete_jobs)
    ] = None,
    group: GroupOpt = None,
    output: OutputOpt = Output.TABLE,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Stream job transitions as they happen (server-sent events). With JOB: its history first, and the
    stream ends with the job (exit 1 if it did not succeed). A broken stream (a broker restarting, a
    failover) is resumed from the last event seen (Last-Event-ID), up to RESUME_ATTEMPTS times in a row.
    With --group: each member's changes of state, until every member has ended (exit 1 if one failed)."""
    if group is not None:
        with connect(server, token, context) as api:
            watch_group(api, group, lambda j: out("  ".join(job_rows([j], True).splitlines()[1].split())))
        return
    api = connect(server, token, context)
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
    job: Annotated[str, typer.Argument(help="job id or name", autocompletion=complete_jobs)],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="stream until the container exits")] = False,
    tail: Annotated[int | None, typer.Option("--tail", help="only the last N lines", min=0)] = None,
    timestamps: Annotated[bool, typer.Option(help="prefix each line with its RFC 3339 time")] = False,
    pod: Annotated[
        str | None, typer.Option(help="one pod of a gang (default: all; with -f the first)")
    ] = None,
    attempt: Annotated[
        int | None,
        typer.Option(help="an ended attempt (after a move or a retry): the last lines kept of it", min=0),
    ] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """The container log of a job's pods, from its member cluster; of an ended attempt whose pods are
    gone, the last lines the broker kept of it."""
    api = connect(server, token, context)
    params: dict[str, Any] = {}
    if follow:
        params["follow"] = "1"
    if tail is not None:
        params["tailLines"] = tail
    if timestamps:
        params["timestamps"] = "1"
    if pod:
        params["pod"] = pod
    if attempt is not None:
        params["attempt"] = attempt
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
    job: Annotated[
        list[str] | None, typer.Argument(help="job ids or names", autocompletion=complete_jobs)
    ] = None,
    selector: Selector = None,
    group: GroupOpt = None,
    every: AllOpt = False,
    yes: YesOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Cancel jobs by ids or names, -l, --group or --all (their workloads are deleted from their clusters)."""
    with connect(server, token, context) as api:
        if group and not (job or selector or every):  # one call: the broker cancels every live member
            body = api.call("POST", f"/v1/groups/{group}/cancel")
            counts = " ".join(f"{s}={n}" for s, n in body["counts"].items())
            out(f"group {group}: {len(body['cancelled'])} job(s) cancelled ({counts})")
            return
        targets = select_jobs(api, job or [], selector, group, every)
        if not job:
            targets = live(targets)
        if every:
            confirm("cancel", len(targets), yes)
        rows = [api.call("DELETE", f"/v1/jobs/{j['id']}") for j in targets]
    if not rows:
        out("No jobs to cancel.")
    elif len(rows) == 1 and job:
        out(job_rows(rows, False).splitlines()[1])
    else:
        out(job_rows(rows, False))
