"""`gpufed audit`: the audit trail (GET /v1/audit, docs/tenancy.md), newest first, for admins and viewers.

    gpufed audit [--subject ana] [--verb submit] [--tenant ml] [--outcome denied]
                 [--since 2h | 2026-12-01T00:00:00Z | <epoch>] [--until ...] [--limit 100] [--all]
                 [-o table|wide|json|yaml]

One page by default (`--limit` records, and a line saying how to see more); `--all` walks every page
with the continue token. Registered on the CLI by `register(app, api)`, where `api(server, token,
context)` opens the broker's API as every other command does (its --token, $GPUFED_TOKEN, the context).
"""

from __future__ import annotations

import datetime as dt
import re
import sys
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer

from broker.cli.client import EXIT_USAGE, Api, CliError, render

__all__ = ["parse_time", "register"]

_AGO = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_time(value: str, flag: str, now: float) -> float:
    """'90s' / '15m' / '2h' / '7d' ago, an ISO 8601 time (UTC unless it says), or seconds since the epoch."""
    m = _AGO.match(value.strip())
    if m:
        return now - float(m.group(1)) * _UNIT[m.group(2)]
    try:
        return float(value)
    except ValueError:
        pass
    try:
        t = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise CliError(
            f"{flag}: {value!r} is not 2h, 30m, 7d, an ISO 8601 time or epoch seconds", EXIT_USAGE
        ) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return t.timestamp()


def _when(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _table(items: Sequence[dict[str, Any]], wide: bool) -> str:
    headers = ["TIME", "SUBJECT", "TENANT", "ROLE", "VERB", "OBJECT", "OUTCOME"]
    if wide:
        headers += ["CODE", "SOURCE", "TRACE", "REASON"]
    rows = []
    for r in items:
        row = [
            _when(float(r["time"])),
            r["subject"],
            r["tenant"] or "-",
            r["role"] or "-",
            r["verb"],
            r["object"],
            r["outcome"],
        ]
        if wide:
            row += [
                str(r.get("code") or "-"),
                r.get("sourceAddress") or "-",
                r.get("traceId") or "-",
                r.get("reason") or "",
            ]
        rows.append([str(c) for c in row])
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [headers, *rows]
    )


def register(app: typer.Typer, api: Callable[[str | None, str | None, str | None], Api]) -> None:
    @app.command()
    def audit(
        subject: Annotated[
            str | None, typer.Option(help="only this caller (token name or OIDC subject)")
        ] = None,
        verb: Annotated[
            str | None, typer.Option(help="submit, cancel, reload, preempt, failover, ...")
        ] = None,
        tenant: Annotated[str | None, typer.Option(help="only acts concerning this tenant")] = None,
        outcome: Annotated[
            str | None, typer.Option(help="success | denied | unauthenticated | failure")
        ] = None,
        since: Annotated[
            str | None, typer.Option(help="2h, 30m, 7d ago, an ISO time or epoch seconds")
        ] = None,
        until: Annotated[str | None, typer.Option(help="as --since")] = None,
        limit: Annotated[int, typer.Option(min=1, max=1000, help="records per page")] = 100,
        all_pages: Annotated[bool, typer.Option("--all", help="every page, not only the first")] = False,
        output: Annotated[str, typer.Option("--output", "-o", help="table | wide | json | yaml")] = "table",
        server: Annotated[
            str | None, typer.Option("--server", envvar="GPUFED_URL", help="broker URL")
        ] = None,
        token: Annotated[
            str | None,
            typer.Option("--token", envvar="GPUFED_TOKEN", help="bearer token", show_default=False),
        ] = None,
        context: Annotated[
            str | None, typer.Option("--context", envvar="GPUFED_CONTEXT", help="context in the config file")
        ] = None,
    ) -> None:
        """Who did what: every write and every refused call, newest first (admins and viewers)."""
        if output not in ("table", "wide", "json", "yaml"):
            raise CliError(f"--output: {output!r} is not one of table, wide, json, yaml", EXIT_USAGE)
        now = dt.datetime.now(dt.UTC).timestamp()
        params: dict[str, Any] = {"limit": limit}
        for key, value in (("subject", subject), ("verb", verb), ("tenant", tenant), ("outcome", outcome)):
            if value:
                params[key] = value
        if since:
            params["since"] = parse_time(since, "--since", now)
        if until:
            params["until"] = parse_time(until, "--until", now)
        items: list[dict[str, Any]] = []
        more: str | None = None
        with api(server, token, context) as client:
            while True:
                body = client.call(
                    "GET", "/v1/audit", params=params if more is None else {**params, "continue": more}
                )
                items += body["items"]
                more = (body.get("metadata") or {}).get("continue")
                if not more or not all_pages:
                    break
        if output in ("json", "yaml"):
            meta = {"continue": more} if more else {}
            doc = {"kind": "AuditRecordList", "apiVersion": "gpufed.io/v1", "metadata": meta, "items": items}
            sys.stdout.write(render(doc, output) + "\n")
            return
        sys.stdout.write((_table(items, output == "wide") if items else "No audit records.") + "\n")
        if more:
            sys.stdout.write("(more records: --all, or narrow with --since/--until)\n")
