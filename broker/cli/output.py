"""How the CLI prints: kubectl-style columns, JSON/YAML, the jobs table, rich tables captured as text.

Owns Output (the -o choices), out / columns / emit, job_rows (the jobs table) and rich_text (a rich
renderable as plain text, for the fleet tables). No markup anywhere: brackets in messages survive.
"""

from __future__ import annotations

import enum
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import typer
from rich.console import Console

from broker.cli.client import EXIT_USAGE, CliError, ago, render
from broker.cli.jsonpath import JsonPathError, render_jsonpath

console = Console(width=None if sys.stdout.isatty() else 150, highlight=False, markup=False)


class Output(enum.StrEnum):
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"
    WIDE = "wide"
    JSONPATH = "jsonpath"  # -o jsonpath=TEMPLATE (the template: OutputType.template)


class OutputType:
    """-o: table, json, yaml, wide, or kubectl's jsonpath=TEMPLATE. One command runs per process, so the
    template of the command being run is kept here, where emit reads it."""

    template = ""

    @staticmethod
    def parse(value: Any) -> Output:
        if isinstance(value, Output):
            return value
        text = str(value)
        if text.startswith("jsonpath="):
            OutputType.template = text.removeprefix("jsonpath=")
            return Output.JSONPATH
        if text in ("table", "json", "yaml", "wide"):
            return Output(text)
        raise typer.BadParameter(
            f"{text!r} is not one of 'table', 'json', 'yaml', 'wide', 'jsonpath=TEMPLATE'."
        )


def api_warnings(body: Mapping[str, Any]) -> None:
    """The API's warnings on an answer, each on stderr as `Warning: ...` whatever the output format
    (kubectl prints an API server's warnings so): a job accepted that can never fit says so."""
    for w in body.get("warnings") or ():
        sys.stderr.write(f"Warning: {w}\n")
    sys.stderr.flush()


def out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def columns(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """kubectl-style columns: no boxes, no markup, two spaces apart."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [headers, *rows]]
    return "\n".join(lines)


_TIME_KEYS = ("at", "heartbeat")


def rfc3339(data: Any) -> Any:
    """The broker's epoch-second times (createdAt, updatedAt, at, healthSince, heartbeat ...) as RFC 3339
    UTC strings, as kubectl prints them in JSON and YAML: 2026-12-02T07:01:05.123Z."""
    if isinstance(data, dict):
        return {
            k: _stamp(v) if (k in _TIME_KEYS or k.endswith(("At", "Since"))) else rfc3339(v)
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [rfc3339(v) for v in data]
    return data


def _stamp(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return value
    return datetime.fromtimestamp(value, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def emit(data: Any, output: Output, table: Callable[[bool], str]) -> None:
    if output == Output.JSONPATH:
        try:
            out(render_jsonpath(OutputType.template, rfc3339(data)))
        except JsonPathError as e:
            raise CliError(str(e), EXIT_USAGE) from None
    elif output in (Output.JSON, Output.YAML):
        out(render(rfc3339(data), output.value))
    else:
        out(table(output == Output.WIDE))


REASON_CUT = 100  # the jobs list cuts a reason here (marked "..."); -o wide, get and describe never do


def job_rows(items: Sequence[dict[str, Any]], wide: bool, cut: bool = False) -> str:
    """The jobs table; `cut`: the list's long reasons end in "..." (one job is always shown whole)."""
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
        if cut and not wide and len(reason) > REASON_CUT:
            reason = reason[: REASON_CUT - 3] + "..."
        rows.append([*row, reason])
    return columns(headers, rows)


def rich_text(renderable: Any) -> str:
    with console.capture() as cap:
        console.print(renderable)
    return cap.get().rstrip("\n")
