"""Where the broker is and how to authenticate to it: the same rules for the Python client and the CLI.

Target / resolve_target   endpoint and token from arguments (the CLI's flags; env GPUFED_URL,
                          GPUFED_TOKEN), else the config file (~/.config/gpufed/config.yaml, or
                          $GPUFED_CONFIG), kubeconfig-like:
                              current-context: lab
                              contexts:
                              - name: lab
                                server: https://gpufed.lab.example:8443
                                token: ...              # optional, sent as Authorization: Bearer
                                exec: {command: ..., args: [...]}   # or: a credential plugin
                                                        # prints it, as kubectl's (exec_credential)
                                certificateAuthority: /etc/gpufed/ca.pem   # optional: trust this CA
                                insecureSkipTlsVerify: false
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.client.errors import EXIT_USAGE, ClientError
from broker.core import safe_yaml

__all__ = ["DEFAULT_SERVER", "Target", "config_path", "resolve_target"]

DEFAULT_SERVER = "http://127.0.0.1:8080"


@dataclass(frozen=True)
class Target:
    server: str
    token: str | None = None
    verify: bool | ssl.SSLContext = True


def config_path() -> Path:
    explicit = os.environ.get("GPUFED_CONFIG")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpufed" / "config.yaml"


def _context(name: str | None) -> Mapping[str, Any]:
    path = config_path()
    explicit = os.environ.get("GPUFED_CONFIG")
    if explicit == os.devnull:  # GPUFED_CONFIG=/dev/null: no config file, on purpose
        if name:
            raise ClientError(f"--context {name}: no config file (GPUFED_CONFIG={explicit})", EXIT_USAGE)
        return {}
    if explicit and not path.is_file():  # named, not there: say so rather than call without a token
        raise ClientError(
            f"GPUFED_CONFIG={explicit}: no such file (unset it, or /dev/null for none)", EXIT_USAGE
        )
    if not path.is_file():
        if name:
            raise ClientError(f"--context {name}: no config file at {path}", EXIT_USAGE)
        return {}
    try:
        doc = safe_yaml.load(path.read_bytes(), str(path), max_bytes=256 * 1024)
    except (OSError, safe_yaml.YamlError) as e:
        raise ClientError(str(e), EXIT_USAGE) from None
    if not isinstance(doc, Mapping):
        raise ClientError(f"{path}: expected a mapping with contexts", EXIT_USAGE)
    wanted = name or doc.get("current-context")
    if not wanted:
        return {}
    for ctx in doc.get("contexts") or []:
        if isinstance(ctx, Mapping) and ctx.get("name") == wanted:
            return ctx
    names = [str(c.get("name")) for c in doc.get("contexts") or [] if isinstance(c, Mapping)]
    raise ClientError(f"{path}: no context {wanted!r} (has: {', '.join(names) or 'none'})", EXIT_USAGE)


def resolve_target(server: str | None, token: str | None, context: str | None) -> Target:
    """Flags (and their env vars, which typer folds into them) first, then the config context."""
    ctx = _context(context) if (context or server is None or token is None) else {}
    url = server or str(ctx.get("server") or DEFAULT_SERVER)
    if not url.startswith(("http://", "https://")):
        raise ClientError(f"--server: {url!r} is not an http:// or https:// URL", EXIT_USAGE)
    tok = token or (str(ctx["token"]) if ctx.get("token") else None)
    if tok is None and ctx.get("exec"):  # a credential plugin, as kubectl's (broker.cli.exec_credential)
        from broker.client.exec_credential import exec_token

        tok = exec_token(ctx["exec"], f"context {ctx.get('name')!r}")
    verify: bool | ssl.SSLContext = not bool(ctx.get("insecureSkipTlsVerify"))
    ca = ctx.get("certificateAuthority")
    if ca:
        try:
            verify = ssl.create_default_context(cafile=str(ca))
        except (OSError, ssl.SSLError) as e:
            raise ClientError(f"certificateAuthority {ca}: {e}", EXIT_USAGE) from None
    return Target(url.rstrip("/"), tok, verify)
