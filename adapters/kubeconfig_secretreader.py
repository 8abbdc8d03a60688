"""A ClusterProfile credentials plugin for a kubeconfig kept in a hub Secret (KEP-5339 exec model).

Behaves like cluster-inventory-api's `kubeconfig-secretreader` plugin, so a profile written for that
plugin works unchanged: the access provider's `client.authentication.k8s.io/exec` extension
`{name, key, namespace?, context?}` names a Secret on the hub whose `data[key]` holds a kubeconfig; the
plugin (run by client-go-style clients with `provideClusterInfo: true`, which passes the extension in
KUBERNETES_EXEC_INFO as `spec.cluster.config`) reads it with the hub credentials of its own KUBECONFIG
and prints an ExecCredential with the selected context's user `token` and/or
`client-certificate-data`/`client-key-data` (as PEM). The kubeconfig's own `exec`, file paths and
extensions are not used, as in the original.

    python -m adapters.kubeconfig_secretreader       (execConfig.command / args in the provider file)

Errors go to stderr with exit code 1 and never include credentials.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Mapping
from typing import Any

import yaml

from adapters.kube_rest import ApiStatus, KubeRest
from broker.core.errors import GpufedError

__all__ = ["credential", "main"]


class PluginError(Exception):
    """What the plugin tells its caller on stderr."""


def _pick(items: Any, name: str, what: str) -> Mapping[str, Any]:
    for item in items or ():
        if isinstance(item, Mapping) and item.get("name") == name:
            value = item.get(what)
            if isinstance(value, Mapping):
                return value
    raise PluginError(f"kubeconfig in the secret: no {what} named {name!r}")


def credential(kubeconfig_text: str, context: str | None, api_version: str) -> dict[str, Any]:
    """The ExecCredential for a kubeconfig's context (default: its current-context)."""
    try:
        doc = yaml.safe_load(kubeconfig_text)
    except yaml.YAMLError:
        raise PluginError("kubeconfig in the secret: not valid YAML") from None
    if not isinstance(doc, Mapping):
        raise PluginError("kubeconfig in the secret: not a kubeconfig document")
    ctx_name = context or doc.get("current-context")
    if not isinstance(ctx_name, str) or not ctx_name:
        raise PluginError("kubeconfig in the secret: no context given and no current-context")
    ctx = _pick(doc.get("contexts"), ctx_name, "context")
    user = _pick(doc.get("users"), str(ctx.get("user", "")), "user")
    status: dict[str, str] = {}
    if isinstance(user.get("token"), str) and user["token"]:
        status["token"] = user["token"]
    cert, key = user.get("client-certificate-data"), user.get("client-key-data")
    if isinstance(cert, str) and isinstance(key, str) and cert and key:
        status["clientCertificateData"] = base64.b64decode(cert).decode()
        status["clientKeyData"] = base64.b64decode(key).decode()
    if not status:
        raise PluginError(
            f"kubeconfig in the secret: user of context {ctx_name!r} has neither token nor client-certificate-data/client-key-data"
        )
    return {"apiVersion": api_version, "kind": "ExecCredential", "status": status}


def _namespace_default() -> str:
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


def run(env: Mapping[str, str]) -> dict[str, Any]:
    info = json.loads(env.get("KUBERNETES_EXEC_INFO") or "{}")
    api_version = str(info.get("apiVersion") or "client.authentication.k8s.io/v1")
    config = ((info.get("spec") or {}).get("cluster") or {}).get("config")
    if not isinstance(config, Mapping):
        raise PluginError(
            "no cluster config: set provideClusterInfo: true and the access provider's exec extension"
        )
    name, key = config.get("name"), config.get("key")
    if not isinstance(name, str) or not name:
        raise PluginError("exec extension: name (the Secret's name) is required")
    if not isinstance(key, str) or not key:
        raise PluginError("exec extension: key (the Secret's data key) is required")
    namespace = config.get("namespace") if isinstance(config.get("namespace"), str) else None
    hub_kubeconfig = env.get("KUBECONFIG")
    if not hub_kubeconfig:
        raise PluginError("KUBECONFIG (the hub's) is not set in the plugin's environment")
    rest = KubeRest.from_kubeconfig("hub", hub_kubeconfig, env.get("GPUFED_HUB_CONTEXT") or None)
    try:
        ns = namespace or _namespace_default()
        try:
            secret = rest.request("GET", f"/api/v1/namespaces/{ns}/secrets/{name}")
        except ApiStatus as e:
            raise PluginError(f"secret {ns}/{name}: {e.code} {e.reason}") from None
        raw = (secret.get("data") or {}).get(key)
        if not isinstance(raw, str):
            raise PluginError(f"secret {ns}/{name}: no data key {key!r}")
        context = config.get("context") if isinstance(config.get("context"), str) else None
        return credential(base64.b64decode(raw).decode(), context, api_version)
    finally:
        rest.close()


def main() -> int:
    try:
        print(json.dumps(run(os.environ)))
        return 0
    except (PluginError, GpufedError, ValueError) as e:
        print(f"kubeconfig-secretreader: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
