"""A context's credential plugin, as kubectl runs one: the CLI's token from a command (kubelogin,
`gcloud`, a company SSO helper) instead of a token written in the config file.

    contexts:
    - name: lab
      server: https://gpufed.lab.example:8443
      exec:
        apiVersion: client.authentication.k8s.io/v1    # or v1beta1
        command: kubectl-oidc_login                     # looked up on PATH
        args: [get-token, --oidc-issuer-url=https://keycloak.example.com/realms/gpu, --oidc-client-id=gpufed]
        env: [{name: FOO, value: bar}]                  # optional, added to the CLI's environment

Owns `exec_token(spec, where)`: runs the command with KUBERNETES_EXEC_INFO (an ExecCredential naming
the apiVersion, `interactive` true when stdin is a terminal) and returns `status.token` from the
ExecCredential it prints. The plugin's stderr is the user's terminal (its prompts, its errors). A plugin that
fails, times out (60 s) or prints no token is a ClientError with exit code 4; the token is never printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from broker.client.errors import EXIT_AUTH, EXIT_USAGE, ClientError

__all__ = ["exec_token"]

API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
TIMEOUT_SECONDS = 60.0


def _spec(spec: Any, where: str) -> tuple[list[str], dict[str, str], str]:
    if not isinstance(spec, Mapping) or not isinstance(spec.get("command"), str) or not spec["command"]:
        raise ClientError(f"{where}.exec.command: required, the plugin to run", EXIT_USAGE)
    version = str(spec.get("apiVersion") or API_VERSIONS[0])
    if version not in API_VERSIONS:
        raise ClientError(
            f"{where}.exec.apiVersion: one of {', '.join(API_VERSIONS)} (got {version!r})", EXIT_USAGE
        )
    args = spec.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ClientError(f"{where}.exec.args: a list of strings", EXIT_USAGE)
    env: dict[str, str] = {}
    for i, item in enumerate(spec.get("env") or []):
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise ClientError(f"{where}.exec.env[{i}]: {{name, value}}", EXIT_USAGE)
        env[item["name"]] = str(item.get("value", ""))
    return [spec["command"], *args], env, version


def exec_token(spec: Any, where: str) -> str:
    """The bearer token the context's exec plugin prints."""
    argv, extra, version = _spec(spec, where)
    info = {"apiVersion": version, "kind": "ExecCredential", "spec": {"interactive": sys.stdin.isatty()}}
    env = {**os.environ, **extra, "KUBERNETES_EXEC_INFO": json.dumps(info)}
    try:
        done = subprocess.run(
            argv,
            env=env,
            stdout=subprocess.PIPE,  # its stderr is the user's: prompts and its own errors show there
            text=True,
            timeout=TIMEOUT_SECONDS,
            check=False,
        )
    except FileNotFoundError:
        raise ClientError(f"{where}.exec.command: {argv[0]}: not found", EXIT_AUTH) from None
    except subprocess.TimeoutExpired:
        raise ClientError(
            f"{where}.exec: {argv[0]} did not answer within {TIMEOUT_SECONDS:.0f} s", EXIT_AUTH
        ) from None
    if done.returncode != 0:
        raise ClientError(
            f"{where}.exec: {argv[0]} exited {done.returncode} (its message is above)", EXIT_AUTH
        )
    try:
        cred = json.loads(done.stdout)
    except ValueError:
        raise ClientError(
            f"{where}.exec: {argv[0]} did not print an ExecCredential (JSON)", EXIT_AUTH
        ) from None
    token = (cred.get("status") or {}).get("token") if isinstance(cred, Mapping) else None
    if not isinstance(token, str) or not token:
        raise ClientError(f"{where}.exec: {argv[0]} printed no status.token", EXIT_AUTH)
    return token
