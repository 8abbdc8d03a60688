"""`gpufed`: the command line. A client of the HTTP API, plus `serve`, `demo`, `probe` and `rbac`.

    gpufed serve --config clusters.yaml [--tls-cert C --tls-key K]   run the broker
    gpufed demo                                  simulated clusters, the broker, jobs placed, fleet view
    gpufed submit NAME --gpus 8 --product H100-80GB --image IMG --command "python train.py" --env K=V
    gpufed submit -f job.yaml [--wait]           a native spec or a plain batch/v1 Job; `-f -` reads stdin
    gpufed jobs [-l team=nlp] | get JOB | describe JOB | events JOB | wait JOB | watch [JOB] | logs JOB [-f]
    gpufed cancel JOB | explain ... | fleet [--nodes] | show-gpus [PRODUCT] | clusters | spend | top
    gpufed migrate JOB [--to CLUSTER] | drain CLUSTER | undrain CLUSTER   moves (docs/migration.md)
    gpufed demo --keep                           ... and keep the fleet and broker running (dashboard URL)
    gpufed probe [--nvidia-smi-xml FILE]         this host's GPUs as the broker sees them
    gpufed rbac --cluster NAME [-c clusters.yaml]  least-privilege manifests for a member cluster

JOB is an id or a name (one live job holds a name; several finished ones sharing it: give the id). Every read command takes
`-o table|json|yaml|wide|jsonpath=TEMPLATE`; --gpus takes a count or PRODUCT:COUNT (H100:8). The endpoint and token come from --server/--token, $GPUFED_URL/$GPUFED_TOKEN,
or the current context of ~/.config/gpufed/config.yaml (broker.cli.client). Exit codes: 0 ok, 1 the
job failed / nothing fits / the broker refused, 2 usage, 3 broker unreachable, 4 not authenticated or not
allowed (tokens and tenants: docs/tenancy.md). Errors are one line on stderr. Commands that need adapters (serve, demo, probe) reach them
through broker.app.main, the composition root.

The package, one module per concern: common (the app, shared options, the way to the broker), output
(tables, JSON/YAML), server (serve, demo, probe), submit (submit, wait), jobs (jobs, get, events, watch,
logs, cancel), moves (migrate, drain, undrain), selector (-l), describe, jsonpath (-o jsonpath=), fleet (fleet, spend, clusters,
explain), gpus (show-gpus), top (clusters and tenants by GPUs in use), rbac, audit (who did what). This module runs them: `run(argv)` and
`main()` (the console script `gpufed = broker.cli:main`).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

import typer
from typer.exceptions import TyperException

from broker.cli import audit
from broker.cli.client import EXIT_FAILED, EXIT_USAGE, CliError
from broker.cli.common import app, connect

__all__ = ["app", "main", "run"]

# The command modules register their commands on `app` when imported, in the order `--help` lists them.
COMMAND_MODULES = ("server", "submit", "jobs", "moves", "describe", "fleet", "gpus", "top", "rbac")
for _module in COMMAND_MODULES:
    importlib.import_module(f"broker.cli.{_module}")
audit.register(app, connect)  # `gpufed audit` (docs/tenancy.md)


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI on argv; every failure is one line on stderr and an exit code (module docstring)."""
    from broker.core.errors import GpufedError

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
        if isinstance(e.code, str):  # sys.exit("message"): said, never an exit 1 without a word
            _fail(e.code)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_FAILED)
    return rv if isinstance(rv, int) else 0


def _fail(message: str) -> None:
    first = message.strip().splitlines()[0] if message.strip() else "failed"
    sys.stderr.write(f"gpufed: error: {first}\n")
    sys.stderr.flush()


def main() -> None:
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    sys.exit(run())
