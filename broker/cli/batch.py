"""Batch work from the CLI (docs/batch.md): the submit flags for groups, arrays and dependencies, the
job sets that `get` and `cancel` act on (ids, -l, --group, --all), `hold`, `release`, `groups`.

Owns
    batch_flags      --group, --array 0-49%8, --depends-on WHEN:REF folded into a submission
    dry_run_text     the table of `submit --dry-run` (and of an array's members)
    select_jobs      the jobs named by ids, a label selector, a group or --all (confirmed unless --yes)
    hold / release / groups   the commands
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer

from broker.cli.client import EXIT_USAGE, Api, CliError
from broker.cli.common import TERMINAL, ContextOpt, OutputOpt, ServerOpt, TokenOpt, app, connect
from broker.cli.output import Output, columns, emit, job_rows, out
from broker.cli.selector import matches, parse_selector
from broker.intake.batch_schemas import GROUP_LABEL, parse_array

__all__ = ["batch_flags", "dry_run_text", "select_jobs"]

_WHEN = {
    "succeeded": "succeeded",
    "afterok": "succeeded",
    "finished": "finished",
    "afterany": "finished",
    "failed": "failed",
    "afternotok": "failed",
}


def _dependency(text: str) -> dict[str, str]:
    when, sep, ref = text.partition(":")
    if not sep:
        when, ref = "succeeded", text
    if when not in _WHEN or not ref:
        raise CliError(
            f"--depends-on {text!r}: expected WHEN:JOB or WHEN:group/NAME, WHEN succeeded|finished|failed",
            EXIT_USAGE,
        )
    if ref.startswith("group/"):
        return {"group": ref.removeprefix("group/"), "when": _WHEN[when]}
    return {"job": ref, "when": _WHEN[when]}


def batch_flags(spec: Any, group: str | None, array: str | None, depends_on: list[str]) -> Any:
    """The submission with --group, --array and --depends-on; a Kubernetes object takes a group only
    (as its label gpufed.io/group)."""
    if not (group or array or depends_on):
        return spec
    if not isinstance(spec, dict):
        raise CliError("the file does not hold one job", EXIT_USAGE)
    if spec.get("kind") is not None:
        if array or depends_on:
            raise CliError("--array and --depends-on apply to a native spec", EXIT_USAGE)
        meta = spec.setdefault("metadata", {})
        meta.setdefault("labels", {})[GROUP_LABEL] = group
        return spec
    if group:
        spec["group"] = group
    if array:
        try:
            spec["array"] = parse_array(array)
        except ValueError as e:
            raise CliError(str(e), EXIT_USAGE) from None
    if depends_on:
        spec["dependsOn"] = [*spec.get("dependsOn", []), *(_dependency(d) for d in depends_on)]
    return spec


def dry_run_text(body: dict[str, Any], wide: bool) -> str:
    """The would-be job(s) and, for a dry run, where it would go and at what price."""
    items = body.get("items", [body])
    explained = body.get("explain")
    if explained is None:
        return job_rows(items, wide)
    # a dry run created nothing: no id and no state (the job is not QUEUED anywhere), only what it asks
    text = columns(["NAME", "TENANT", "ASKS"], [[j["name"], j.get("tenant", "-"), _asks(j)] for j in items])
    if explained.get("placed"):
        where = explained["placement"]
        price = explained.get("pricePerHour")
        cost = f", {price:.2f}/h" if isinstance(price, int | float) else ""
        text += f"\ndry run: would be placed on {where['cluster']} ({where['product']}){cost}; nothing was created"
    else:
        text += f"\ndry run: {explained.get('message') or 'fits nowhere now'}; nothing was created"
    return text


def _asks(job: dict[str, Any]) -> str:
    req = job.get("request") or {}
    pods = req.get("pods", 1)
    if req.get("gpus"):
        return f"{req['gpus']}x{pods}"
    mig = req.get("migProfile") or f"{req.get('migNeedGB')}GB"
    return f"mig {mig} x{pods}"


def select_jobs(
    api: Api, refs: list[str], selector: str | None, group: str | None, every: bool
) -> list[dict[str, Any]]:
    """The jobs named by ids or names, or by -l, --group or --all (exactly one way)."""
    ways = sum(bool(x) for x in (refs, selector, group, every))
    if ways != 1:
        raise CliError(
            "Missing argument: JOB ids or names, or -l SELECTOR, --group NAME or --all (one of them)",
            EXIT_USAGE,
        )
    if refs:
        return [api.resolve_job(r) for r in refs]
    if group:
        items: list[dict[str, Any]] = api.call("GET", f"/v1/groups/{group}")["items"]
        return items
    jobs = api.list_all("/v1/jobs")
    if selector:
        terms = parse_selector(selector)
        return [j for j in jobs if matches(j, terms)]
    return jobs


def confirm(what: str, count: int, yes: bool) -> None:
    """--all asks first (unless --yes); without a terminal to ask on, --yes is needed."""
    if yes or count == 0:
        return
    if not sys.stdin.isatty():
        raise CliError(f"{what} {count} job(s): add --yes to confirm", EXIT_USAGE)
    if not typer.confirm(f"{what} {count} job(s)?", default=False):
        raise typer.Exit(1)


Refs = Annotated[list[str] | None, typer.Argument(help="job ids or names")]
Selector = Annotated[str | None, typer.Option("--selector", "-l", help="jobs with these labels: team=nlp")]
GroupOpt = Annotated[str | None, typer.Option("--group", help="every job of this group")]
AllOpt = Annotated[bool, typer.Option("--all", help="every job you can see (asks first unless --yes)")]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="do not ask")]


def _holds(
    verb: str, refs: list[str] | None, group: str | None, server: Any, token: Any, context: Any
) -> None:
    if bool(refs) == bool(group):
        raise CliError(f"{verb} JOB... or --group NAME", EXIT_USAGE)
    with connect(server, token, context) as api:
        if group:
            body = api.call("POST", f"/v1/groups/{group}/{verb}")
            done = body.get("held" if verb == "hold" else "released", [])
            out(f"group {group}: {len(done)} job(s) {'held' if verb == 'hold' else 'released'}")
            return
        rows = [api.call("POST", f"/v1/jobs/{api.resolve_job(r)['id']}/{verb}") for r in refs or []]
    out(job_rows(rows, False))


@app.command()
def hold(
    jobs: Refs = None,
    group: GroupOpt = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Hold jobs not placed yet: they stay PENDING "held by you" until released (owner or admin)."""
    _holds("hold", jobs, group, server, token, context)


@app.command()
def release(
    jobs: Refs = None,
    group: GroupOpt = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Release held jobs: queued again once their dependencies are met."""
    _holds("release", jobs, group, server, token, context)


@app.command()
def groups(
    output: OutputOpt = Output.TABLE,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Job groups (and arrays) with their jobs counted by state."""
    with connect(server, token, context) as api:
        body = api.call("GET", "/v1/groups")

    def table(wide: bool) -> str:
        rows = [
            [g["name"], g["tenant"], str(g["total"]), " ".join(f"{s}={n}" for s, n in g["counts"].items())]
            for g in body["items"]
        ]
        return columns(["GROUP", "TENANT", "JOBS", "STATES"], rows) if rows else "No groups."

    emit(body, output, table)


def watch_group(api: Api, group: str, show: Callable[[dict[str, Any]], None], interval: float = 2.0) -> None:
    """Each member of the group when its state changes (polled), until all have ended; exit 1 if one
    did not succeed."""
    seen: dict[str, str] = {}
    while True:
        items = api.call("GET", f"/v1/groups/{group}")["items"]
        for j in items:
            if seen.get(j["id"]) != j["state"]:
                seen[j["id"]] = j["state"]
                show(j)
        if all(j["state"] in TERMINAL for j in items):
            if any(j["state"] != "SUCCEEDED" for j in items):
                raise typer.Exit(1)
            return
        time.sleep(interval)


def live(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [j for j in jobs if j.get("state") not in TERMINAL]


def _keys(d: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in d.items() if k != "*") or "-"


@app.command()
def tenants(
    output: OutputOpt = Output.TABLE,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Tenants in fair-share order: quota, used, borrowed, lent, and their jobs (a user: its own tenant)."""
    with connect(server, token, context) as api:
        body = api.call("GET", "/v1/tenants")

    def table(wide: bool) -> str:
        rows = []
        for t in body["items"]:
            used = {k: f"{v}/{t['quota'][k]}" if k in t["quota"] else str(v) for k, v in t["used"].items()}
            row = [t["tenant"], str(t["position"]), f"{t['share']:.2f}", _keys(used), _keys(t["borrowed"])]
            row += [_keys(t["lent"]), _keys(t["running"]), _keys(t["queued"]), str(t["pending"])]
            if wide:
                row += [_keys(t["quota"]), f"{t['weight']:g}"]
            rows.append(row)
        headers = ["TENANT", "#", "SHARE", "USED/QUOTA", "BORROWED", "LENT", "RUNNING", "QUEUED", "PENDING"]
        return columns([*headers, *(["QUOTA", "WEIGHT"] if wide else [])], rows) if rows else "No tenants."

    emit(body, output, table)
