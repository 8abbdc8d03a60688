"""`gpufed rbac`: least-privilege RBAC manifests for a member cluster, from the broker's config."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
import yaml

from broker.cli.client import EXIT_USAGE, CliError
from broker.cli.common import app


@app.command()
def rbac(
    cluster: Annotated[str, typer.Option("--cluster", help="the member cluster, as named in the config")],
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="clusters.yaml (for the cluster's job namespace)")
    ] = None,
    namespace: Annotated[
        str | None, typer.Option(help="namespace the broker runs jobs in (default: from the config)")
    ] = None,
    service_account: Annotated[str, typer.Option(help="the broker's ServiceAccount")] = "gpufed-broker",
    service_account_namespace: Annotated[
        str, typer.Option(help="namespace of that ServiceAccount")
    ] = "gpufed-system",
    tenant: Annotated[
        list[str] | None,
        typer.Option(
            help="a tenant whose namespace (the config's tenantNamespace) gets the job Role; repeat"
        ),
    ] = None,
) -> None:
    """Print least-privilege RBAC manifests for a member cluster (apply them there with kubectl)."""
    from broker.config.settings import load_fleet_config
    from broker.tenancy.rbac import member_rbac

    ns = namespace
    tenant_namespaces: list[str] = []
    create = follow_all = False
    if config is not None:
        try:
            cfg = load_fleet_config(config, check_kubeconfigs=False)
        except Exception as exc:
            raise CliError(f"{config}: {exc}", EXIT_USAGE) from None
        known = {c.name: c for c in cfg.clusters}
        if cluster not in known:
            raise CliError(
                f"--cluster: {cluster!r} is not in {config} (known: {', '.join(sorted(known))})", EXIT_USAGE
            )
        traits = known[cluster].traits()
        ns = ns or traits.namespace
        tenant_namespaces = [traits.namespace_for(t) for t in (tenant or cfg.settings.tenants)]
        create = traits.create_namespaces
        follow_all = traits.tenant_namespace is not None
    elif tenant:
        raise CliError("--tenant: needs --config (the tenant namespace pattern is there)", EXIT_USAGE)
    try:
        docs = member_rbac(
            cluster,
            ns or "default",
            service_account,
            service_account_namespace,
            tenant_namespaces=tenant_namespaces,
            create_namespaces=create,
            follow_all_namespaces=follow_all,
        )
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    sys.stdout.write(f"# gpufed member-cluster RBAC for {cluster}: apply in that cluster\n")
    sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False))
