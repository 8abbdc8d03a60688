"""kubeconfig files (apiVersion v1, kind Config) for simulated clusters: one cluster, user and context each."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import yaml


def kubeconfig_dict(
    cluster: str, server: str, ca_pem: bytes, token: str, namespace: str = "default", user: str | None = None
) -> dict[str, Any]:
    """One cluster, one user (`<cluster>-admin` for the admin token, else `<cluster>-<user>`), one context
    named after the cluster."""
    user = f"{cluster}-{user or 'admin'}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [
            {
                "name": cluster,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {"name": cluster, "context": {"cluster": cluster, "user": user, "namespace": namespace}}
        ],
        "current-context": cluster,
    }


def write_kubeconfig(
    path: Path, cluster: str, server: str, ca_pem: bytes, token: str, user: str | None = None
) -> Path:
    """Write the kubeconfig with mode 0600 (it holds a bearer token), replacing any previous file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(kubeconfig_dict(cluster, server, ca_pem, token, user=user), sort_keys=False)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path
