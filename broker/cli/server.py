"""`gpufed serve`, `demo` and `probe`: the commands that run things here rather than call a broker.
They reach adapters only through broker.app.main (the composition root) or broker.app.demo."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from broker.cli.client import EXIT_USAGE, CliError
from broker.cli.common import OutputOpt, app
from broker.cli.output import Output, out


def quiet_ray() -> None:
    """No colour codes in Ray's worker-log prefixes (they land in files and pipes), and no notice that
    token authentication is on for the local Ray it starts: said explicitly, as Ray's own default is.
    A Ray cluster reached through RAY_ADDRESS keeps whatever mode it was given."""
    os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    if not os.environ.get("RAY_ADDRESS"):
        os.environ.setdefault("RAY_AUTH_MODE", "token")


def metrics_across_processes(config: Path) -> Path | None:
    """With settings.apiProcesses (or GPUFED_API_PROCESSES) >= 1, every process of the broker counts into
    one directory that /metrics adds up (prometheus_client's multiprocess mode, broker.telemetry). It must
    be set before any metric exists, so here, before the broker's modules are imported. Returns the
    directory made (removed after the broker stops), or None."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return None
    raw = os.environ.get("GPUFED_API_PROCESSES")
    try:
        if raw:
            count = int(raw)
        else:
            from broker.config.settings import load_fleet_config

            count = load_fleet_config(config).settings.api_processes
    except Exception:  # the broker's own load reports a bad file or variable, naming the field
        return None
    if count < 1:
        return None
    directory = Path(tempfile.mkdtemp(prefix="gpufed-metrics-"))
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    return directory


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
    metrics_dir = metrics_across_processes(config)
    from broker.app import main as composition
    from broker.core.errors import ConfigError

    quiet_ray()
    try:
        with contextlib.ExitStack() as cleanup:
            if metrics_dir is not None:
                cleanup.callback(shutil.rmtree, metrics_dir, True)
            composition.serve(config, host, port, tls_cert, tls_key, insecure_no_auth=insecure_no_auth)
    except composition.StartupError as e:
        raise CliError(f"cannot start: {e}") from None
    except ConfigError as e:  # a startup problem like the others: exit 1 (README), with where to begin
        hint = ""
        if not config.exists() and Path("clusters.example.yaml").is_file():
            hint = f" (start from the example: --config clusters.example.yaml, or cp clusters.example.yaml {config})"
        elif not config.exists():  # an installed package, another directory: the example it ships
            from broker.app.example_config import example_config_location

            hint = f" (start from the example: cp {example_config_location()} {config})"
        raise CliError(f"{e}{hint}") from None


@app.command()
def demo(
    speed: Annotated[float, typer.Option(help="simulated seconds per real second")] = 20.0,
    workdir: Annotated[
        Path,
        typer.Option(
            help="where kubeconfigs and the config are written (not the README's .demo/kubeconfigs)"
        ),
    ] = Path(".demo/demo"),
    keep: Annotated[
        bool,
        typer.Option(
            "--keep", help="keep the fleet and the broker running afterwards; print the dashboard URL"
        ),
    ] = False,
) -> None:
    """Start three simulated clusters and the broker, submit jobs, show where they went, print the fleet."""
    from broker.app import demo as demo_mod

    quiet_ray()
    raise typer.Exit(demo_mod.run(speed=speed, workdir=workdir, keep=keep))


@app.command()
def probe(
    nvidia_smi_xml: Annotated[
        Path | None, typer.Option("--nvidia-smi-xml", help="read `nvidia-smi -q -x` output instead of NVML")
    ] = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """This host's GPUs, MIG profiles and NUMA affinity, as NodeFacts and GFD-style labels."""
    from broker.app import main as composition

    if output == Output.JSONPATH:
        raise CliError("-o jsonpath: probe prints table, json or yaml", EXIT_USAGE)
    fmt = "table" if output == Output.WIDE else output.value
    if nvidia_smi_xml is not None and not nvidia_smi_xml.is_file():
        raise CliError(f"--nvidia-smi-xml: no such file: {nvidia_smi_xml}", EXIT_USAGE)
    out(composition.probe(nvidia_smi_xml, fmt))
