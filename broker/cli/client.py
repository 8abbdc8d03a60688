"""The CLI's side of the wire: where the broker is, how to call it, and how its answers are shown.

Owns
    Target / resolve_target   endpoint and token from flags, env (GPUFED_URL, GPUFED_TOKEN) or the config
                              file (~/.config/gpufed/config.yaml, or $GPUFED_CONFIG), kubeconfig-like:
                                  current-context: lab
                                  contexts:
                                  - name: lab
                                    server: https://gpufed.lab.example:8443
                                    token: ...              # optional, sent as Authorization: Bearer
                                    exec: {command: ..., args: [...]}   # or: a credential plugin
                                                            # prints it, as kubectl's (broker.cli.exec_credential)
                                    certificateAuthority: /etc/gpufed/ca.pem   # optional: trust this CA
                                    insecureSkipTlsVerify: false
    Api                       one HTTP client; every failure becomes CliError with the exit code
    CliError / exit codes     0 ok, 1 job failed / nothing fits / refused, 2 usage, 3 server unreachable, 4 auth
    resolve_job               a job by id or by name (a name matching several jobs is refused)
    ago / render              human times ("3m ago"), JSON / YAML output
No rich markup anywhere: messages are printed as plain text, so brackets in them survive.
"""

from __future__ import annotations

import json
import os
import ssl
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from broker.core import safe_yaml

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

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_AUTH = 4
DEFAULT_SERVER = "http://127.0.0.1:8080"
DEFAULT_CHUNK_SIZE = 500  # jobs per page when a list is walked (kubectl's --chunk-size default)


class CliError(Exception):
    """A failure to report as one line, with the process exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


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
            raise CliError(f"--context {name}: no config file (GPUFED_CONFIG={explicit})", EXIT_USAGE)
        return {}
    if explicit and not path.is_file():  # named, not there: say so rather than call without a token
        raise CliError(
            f"GPUFED_CONFIG={explicit}: no such file (unset it, or /dev/null for none)", EXIT_USAGE
        )
    if not path.is_file():
        if name:
            raise CliError(f"--context {name}: no config file at {path}", EXIT_USAGE)
        return {}
    try:
        doc = safe_yaml.load(path.read_bytes(), str(path), max_bytes=256 * 1024)
    except (OSError, safe_yaml.YamlError) as e:
        raise CliError(str(e), EXIT_USAGE) from None
    if not isinstance(doc, Mapping):
        raise CliError(f"{path}: expected a mapping with contexts", EXIT_USAGE)
    wanted = name or doc.get("current-context")
    if not wanted:
        return {}
    for ctx in doc.get("contexts") or []:
        if isinstance(ctx, Mapping) and ctx.get("name") == wanted:
            return ctx
    names = [str(c.get("name")) for c in doc.get("contexts") or [] if isinstance(c, Mapping)]
    raise CliError(f"{path}: no context {wanted!r} (has: {', '.join(names) or 'none'})", EXIT_USAGE)


def resolve_target(server: str | None, token: str | None, context: str | None) -> Target:
    """Flags (and their env vars, which typer folds into them) first, then the config context."""
    ctx = _context(context) if (context or server is None or token is None) else {}
    url = server or str(ctx.get("server") or DEFAULT_SERVER)
    if not url.startswith(("http://", "https://")):
        raise CliError(f"--server: {url!r} is not an http:// or https:// URL", EXIT_USAGE)
    tok = token or (str(ctx["token"]) if ctx.get("token") else None)
    if tok is None and ctx.get("exec"):  # a credential plugin, as kubectl's (broker.cli.exec_credential)
        from broker.cli.exec_credential import exec_token

        tok = exec_token(ctx["exec"], f"context {ctx.get('name')!r}")
    verify: bool | ssl.SSLContext = not bool(ctx.get("insecureSkipTlsVerify"))
    ca = ctx.get("certificateAuthority")
    if ca:
        try:
            verify = ssl.create_default_context(cafile=str(ca))
        except (OSError, ssl.SSLError) as e:
            raise CliError(f"certificateAuthority {ca}: {e}", EXIT_USAGE) from None
    return Target(url.rstrip("/"), tok, verify)


def _message(r: httpx.Response) -> str:
    try:
        body = r.json()
    except ValueError:
        return r.text.strip().splitlines()[0] if r.text.strip() else r.reason_phrase
    if not isinstance(body, Mapping):
        return r.reason_phrase
    message = str(body.get("message") or body.get("detail") or r.reason_phrase)
    fields = body.get("fields") or []
    if fields and len(fields) == 1 and fields[0].get("field") and fields[0]["field"] not in message:
        message = f"{fields[0]['field']}: {message}"
    return message


class Api:
    """The broker's HTTP API for one command; closes with the command (`with` closes it)."""

    def __init__(self, target: Target, timeout: float = 30.0) -> None:
        self.target = target
        headers = {"Authorization": f"Bearer {target.token}"} if target.token else {}
        self.http = httpx.Client(
            base_url=target.server, headers=headers, timeout=timeout, verify=target.verify
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check(self, r: httpx.Response) -> None:
        if r.status_code < 400:
            return
        text = _message(r)
        if r.status_code in (401, 403):
            raise CliError(f"{r.status_code} {text}", EXIT_AUTH)
        raise CliError(f"{r.status_code} {text}", EXIT_FAILED)

    def _unreachable(self, e: httpx.HTTPError) -> CliError:
        cause = str(e) or type(e).__name__
        return CliError(f"cannot reach the broker at {self.target.server}: {cause}", EXIT_UNREACHABLE)

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            r = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as e:
            raise self._unreachable(e) from None
        self._check(r)
        try:
            return r.json()
        except ValueError:
            raise CliError(f"{method} {path}: the broker answered {r.status_code} without JSON") from None

    def list_all(
        self, path: str, params: Sequence[tuple[str, str]] = (), chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> list[dict[str, Any]]:
        """Every item of a paged list, fetched `chunk_size` at a time by following metadata.continue
        (kubectl's --chunk-size; 0: one unpaged request)."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page_params = list(params)
            if chunk_size > 0:
                page_params.append(("limit", str(chunk_size)))
            if token:
                page_params.append(("continue", token))
            body = self.call("GET", path, params=page_params)
            items.extend(body.get("items", []))
            token = (body.get("metadata") or {}).get("continue")
            if not token or chunk_size <= 0:
                return items

    @contextmanager
    def stream(
        self, path: str, params: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> Iterator[httpx.Response]:
        """A streamed GET (logs, events); errors before the first byte as CliError."""
        try:
            with self.http.stream(
                "GET", path, params=params, timeout=httpx.Timeout(30.0, read=None), **kwargs
            ) as r:
                if r.status_code >= 400:
                    r.read()
                    self._check(r)
                yield r
        except httpx.HTTPError as e:
            raise self._unreachable(e) from None

    def resolve_job(self, ref: str) -> dict[str, Any]:
        """The job with this id, or else the one job with this name; ambiguous names are refused."""
        try:
            r = self.http.get(f"/v1/jobs/{ref}")
        except httpx.HTTPError as e:
            raise self._unreachable(e) from None
        if r.status_code != 404:
            self._check(r)
            job: dict[str, Any] = r.json()
            return job
        matches = self.list_all("/v1/jobs", [("name", ref)])
        if not matches:
            raise CliError(f"no job with id or name {ref!r}")
        live = [j for j in matches if j.get("state") not in ("SUCCEEDED", "FAILED", "CANCELLED", "LOST")]
        if len(matches) > 1 and len(live) == 1:  # names are unique among live jobs: the name means it
            return dict(live[0])
        if len(matches) > 1:
            ids = ", ".join(j["id"] for j in matches[:5]) + (", ..." if len(matches) > 5 else "")
            raise CliError(f"{len(matches)} jobs are named {ref!r} ({ids}): give an id", EXIT_USAGE)
        return dict(matches[0])


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
