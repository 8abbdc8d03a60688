"""`gpufed describe JOB`: one job the way `kubectl describe` shows an object. Its spec, where it runs and
why, every cluster's verdict while it waits, and its events, in labelled blocks for a person to read."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from broker.cli.client import CliError, ago
from broker.cli.common import ContextOpt, ServerOpt, TokenOpt, app, complete_jobs, connect
from broker.cli.output import columns, out, rfc3339


def _block(title: str, pairs: list[tuple[str, Any]]) -> list[str]:
    width = max((len(k) for k, _ in pairs), default=0) + 2
    lines = [f"{title}:"] if title else []
    indent = "  " if title else ""
    for key, value in pairs:
        lines.append(f"{indent}{(key + ':').ljust(width)}{'-' if value in (None, '', []) else value}")
    return lines


def describe_text(job: dict[str, Any], events: list[dict[str, Any]], verdicts: dict[str, Any] | None) -> str:
    req = job.get("request") or {}
    now = time.time()
    stamp = rfc3339({"at": job.get("createdAt")})["at"]
    gpus = (
        f"{req.get('gpus')} x {req.get('pods', 1)} pod(s)"
        if req.get("gpus")
        else f"MIG {req.get('migProfile') or str(req.get('migNeedGB')) + ' GB'} x {req.get('pods', 1)} pod(s)"
    )
    lines = _block(
        "",
        [
            ("Name", job["name"]),
            ("ID", job["id"]),
            ("Tenant", job.get("tenant")),
            ("Labels", ", ".join(f"{k}={v}" for k, v in sorted((req.get("labels") or {}).items()))),
            ("Created", f"{stamp} ({ago(job.get('createdAt'), now)})"),
            ("State", f"{job['state']} (attempt {job.get('attempt', 0)})"),
            ("Reason", job.get("reason")),
            *([("Warnings", "; ".join(job["warnings"]))] if job.get("warnings") else []),
            (
                "Queue",
                f"#{job['queuePosition']}: {job.get('queueReason')}" if job.get("queuePosition") else None,
            ),
            ("Trace ID", job.get("traceId")),
        ],
    )
    lines += _block(
        "Spec",
        [
            ("GPUs", gpus),
            ("Products", ", ".join(req.get("gpuProducts") or []) or "any"),
            ("NUMA aligned", req.get("numaAligned")),
            (
                "Burst",
                f"{req.get('allowBurst')}"
                + (f", after {req['maxWaitSeconds']:g}s" if req.get("maxWaitSeconds") else ""),
            ),
            ("Priority class", req.get("priorityClass")),
            ("Failover", req.get("failover")),
            ("On image pull failure", req.get("onImagePullFailure")),
            ("Image", req.get("image")),
            ("Command", " ".join([*(req.get("command") or []), *(req.get("args") or [])])),
            ("Env", ", ".join(e.get("name", "?") for e in req.get("env") or [])),
        ],
    )
    p = job.get("placement")
    if p:
        lines += _block(
            "Placement",
            [
                ("Cluster", p["cluster"] + (" (burst)" if p.get("burst") else "")),
                ("Per pod", f"{p['unitsPerPod']} x {p['resourceName']} ({p['product']})"),
                (
                    "Score",
                    f"{p['score']} (" + ", ".join(f"{k}={v}" for k, v in sorted(p["scores"].items())) + ")",
                ),
                (
                    "Workload",
                    f"{job.get('workload')} in {job.get('cluster')}" if job.get("workload") else None,
                ),
            ],
        )
    if verdicts is not None:
        lines.append("Verdicts (if placed now):")
        rows = []
        for v in verdicts.get("clusters", []):
            why = v["rejection"]["reason"] if v.get("rejection") else (v.get("note") or "fits")
            verdict = (
                "chosen"
                if v.get("chosen")
                else ("feasible" if v.get("feasible") else v["rejection"]["plugin"])
            )
            rows.append([v["cluster"], verdict, why])
        lines += ["  " + line for line in columns(["CLUSTER", "VERDICT", "WHY"], rows).splitlines()]
    lines.append("Events:")
    rows = [
        [
            ago(e.get("at"), now),
            str(e.get("attempt", 0)),
            e["state"],
            e.get("cluster") or "-",
            e.get("reason") or "",
        ]
        for e in events
    ]
    lines += [
        "  " + line for line in columns(["AGE", "ATTEMPT", "STATE", "CLUSTER", "REASON"], rows).splitlines()
    ]
    return "\n".join(lines)


def _explain_spec(job: dict[str, Any]) -> dict[str, Any]:
    req = job.get("request") or {}
    spec: dict[str, Any] = {"name": job["name"], "gpus": req.get("gpus", 0), "pods": req.get("pods", 1)}
    if req.get("gpuProducts"):
        spec["gpuProducts"] = req["gpuProducts"]
    if req.get("migProfile"):
        spec["mig"] = {"profile": req["migProfile"]}
    elif req.get("migNeedGB"):
        spec["mig"] = {"memoryGB": req["migNeedGB"]}
    for key in ("numaAligned", "allowBurst", "priorityClass"):
        if req.get(key):
            spec[key] = req[key]
    return spec


@app.command()
def describe(
    job: Annotated[str, typer.Argument(help="job id or name", autocompletion=complete_jobs)],
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """One job in detail, as kubectl describe: spec, placement, each cluster's verdict, events."""
    with connect(server, token, context) as api:
        body = api.resolve_job(job)
        events = api.call("GET", f"/v1/jobs/{body['id']}/events")["items"]
        verdicts = None
        if body["state"] == "QUEUED":  # why each cluster says no, now (a dry run of its own spec)
            try:
                verdicts = api.call("POST", "/v1/explain", json=_explain_spec(body))
            except CliError:
                verdicts = None
    out(describe_text(body, events, verdicts))
