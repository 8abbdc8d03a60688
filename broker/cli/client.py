"""The CLI's side of the wire: the Python client (broker.client) under the CLI's names, and how answers
are shown.

Owns
    Api / CliError / exit codes   broker.client's Client and ClientError (0 ok, 1 job failed / nothing
                              fits / refused, 2 usage, 3 server unreachable, 4 auth); where the broker is
                              and how to authenticate: broker.client.config
    ago / render              human times ("3m ago"), JSON / YAML output
No rich markup anywhere: messages are printed as plain text, so brackets in them survive.
"""

from __future__ import annotations

import json
import time
from typing import Any

import yaml

from broker.client import (
    DEFAULT_CHUNK_SIZE,
    EXIT_AUTH,
    EXIT_FAILED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    Target,
    config_path,
    resolve_target,
)
from broker.client import Client as Api
from broker.client import ClientError as CliError

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "EXIT_AUTH",
    "EXIT_FAILED",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "Api",
    "CliError",
    "Target",
    "ago",
    "config_path",
    "render",
    "resolve_target",
]


def ago(at: float | None, now: float | None = None) -> str:
    """'12s ago', '3m ago', '5h ago', '2d ago'; '-' for none."""
    if not at:
        return "-"
    delta = max(0.0, (now if now is not None else time.time()) - at)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if delta >= size:
            return f"{int(delta // size)}{unit} ago"
    return f"{int(delta)}s ago"


def duration(seconds: float) -> str:
    """'42s', '3m07s', '1h02m'."""
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def render(data: Any, output: str) -> str:
    """JSON or YAML text of an API answer."""
    if output == "json":
        return json.dumps(data, indent=2)
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False).rstrip("\n")
