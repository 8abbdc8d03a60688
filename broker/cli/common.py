"""The CLI's one typer app, the options every client command shares, and its way to the broker.

Owns app (commands register on it from the modules beside this one), the --server/--token/--context/-o
options, the global `gpufed --token T <command>`, JOB shell completion, connect/fetch (one Api per
command) and the terminal job states.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any

import typer

from broker.cli.client import EXIT_USAGE, Api, CliError, resolve_target
from broker.cli.output import Output, OutputType

app = typer.Typer(
    add_completion=True,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="gpufed: one endpoint for a fleet of GPU clusters",
)

ServerOpt = Annotated[str | None, typer.Option("--server", envvar="GPUFED_URL", help="broker URL")]
TokenOpt = Annotated[
    str | None, typer.Option("--token", envvar="GPUFED_TOKEN", help="bearer token", show_default=False)
]
ContextOpt = Annotated[
    str | None, typer.Option("--context", envvar="GPUFED_CONTEXT", help="context in the config file")
]
OutputOpt = Annotated[
    Output,
    typer.Option(
        "--output", "-o", help="table | json | yaml | wide | jsonpath=TEMPLATE", parser=OutputType.parse
    ),
]
TERMINAL_OK = "SUCCEEDED"
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED", "LOST")
STATES = ("PENDING", "QUEUED", "PLACED", "ADMITTED", "RUNNING", *TERMINAL)


def job_states(given: list[str]) -> list[tuple[str, str]]:
    """--state values as query parameters; a state that does not exist is a usage error (exit 2)."""
    bad = [s for s in given if s.upper() not in STATES]
    if bad:
        raise CliError(f"--state: {bad[0]!r} is not a job state (one of {', '.join(STATES)})", EXIT_USAGE)
    return [("state", s.upper()) for s in given]


# `gpufed --token T <command>`: a token given before the command, for every command that calls the broker
# (a command's own --token, then $GPUFED_TOKEN, win over it only when given).
_global_token: str | None = None


def _version(shown: bool) -> None:
    if shown:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("gpufed")
        except PackageNotFoundError:
            number = "unknown (not installed)"
        sys.stdout.write(f"gpufed {number}\n")
        raise typer.Exit(0)


@app.callback()
def _global_options(
    version: Annotated[
        bool,
        typer.Option("--version", help="print gpufed's version and exit", is_eager=True, callback=_version),
    ] = False,
    token: Annotated[
        str | None,
        typer.Option(
            "--token", envvar="GPUFED_TOKEN", help="bearer token for every command", show_default=False
        ),
    ] = None,
) -> None:
    global _global_token
    _global_token = token or None


def complete_jobs(incomplete: str) -> list[str]:
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


def connect(server: str | None, token: str | None, context: str | None) -> Api:
    return Api(resolve_target(server, token or _global_token, context))


def fetch(
    method: str, path: str, server: str | None, token: str | None, context: str | None, **kw: Any
) -> Any:
    """One call to the broker on a connection of its own: the answer's JSON body (CliError when refused)."""
    with connect(server, token, context) as api:
        return api.call(method, path, **kw)
