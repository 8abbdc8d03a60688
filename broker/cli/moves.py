"""`gpufed migrate`, `drain`, `undrain`: moving running work on purpose (docs/migration.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from broker.cli.common import ContextOpt, ServerOpt, TokenOpt, app, complete_jobs, connect
from broker.cli.output import job_rows, out


@app.command()
def migrate(
    job: Annotated[str, typer.Argument(help="job id or name", autocompletion=complete_jobs)],
    to: Annotated[
        str | None, typer.Option("--to", help="the cluster to move it to (else: any other)")
    ] = None,
    reason: Annotated[str, typer.Option("--reason", help="why, for its events and the audit")] = "",
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Move a running job: it is stopped through its checkpoint path and resumes on another cluster."""
    body: dict[str, str] = {"reason": reason} if reason else {}
    if to:
        body["to"] = to
    with connect(server, token, context) as api:
        moved = api.call("POST", f"/v1/jobs/{api.resolve_job(job)['id']}/migrate", json=body)
    out(job_rows([moved], False).splitlines()[1])
    out(moved.get("reason") or "")


@app.command()
def drain(
    cluster: Annotated[str, typer.Argument(help="the member cluster")],
    reason: Annotated[str, typer.Option("--reason", help="why (maintenance window, ticket)")] = "",
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Drain a cluster (admins): no new work there, its running jobs moved with their checkpoints."""
    with connect(server, token, context) as api:
        body = api.call("POST", f"/v1/clusters/{cluster}/drain", json={"reason": reason})
    moved = body.get("moved") or []
    out(f"cluster {cluster} drained; {len(moved)} job(s) moved" + (": " + ", ".join(moved) if moved else ""))


@app.command()
def undrain(
    cluster: Annotated[str, typer.Argument(help="the member cluster")],
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Offer a drained cluster again (admins)."""
    with connect(server, token, context) as api:
        body = api.call("POST", f"/v1/clusters/{cluster}/undrain")
    out(f"cluster {cluster} " + ("undrained" if body.get("wasDrained") else "was not drained"))
