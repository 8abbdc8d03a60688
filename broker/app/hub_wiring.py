"""Composition of kubectl-native submission through a hub (docs/hub.md): `gpufed serve` starts it when
clusters.yaml has a `hub:` section.

Owns `start_hub(cfg, service, gateway, leadership)`: the hub's client (its kubeconfig and context, as
the ClusterProfile hub's are built: adapters.kube_rest), the HubWatcher (informers on the watched kinds
the hub serves), the HubSync (the leader's duty: submit, write back, cancel), the member objects read
through the gateway, and the gateway's status changes wired to the write-back. `HubRuntime.stop()`
ends both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from adapters.hub_watcher import HubWatcher
from adapters.job_informer import WatchingGateway
from adapters.kube_rest import KubeRest, connect
from broker.config.settings import FleetConfig
from broker.controller.service import BrokerService
from broker.ha.hub_sync import HubSync
from broker.ha.leadership import Leadership
from broker.tenancy.audit import AuditRecord
from broker.workload.hub_objects import WATCHED_KINDS, WatchedKind

__all__ = ["HubRuntime", "start_hub"]


@dataclass
class HubRuntime:
    watcher: HubWatcher
    sync: HubSync

    def stop(self) -> None:
        self.sync.stop()
        self.watcher.stop()


def start_hub(
    cfg: FleetConfig,
    service: BrokerService,
    gateway: WatchingGateway,
    leadership: Leadership,
    audit: Callable[[AuditRecord], None] | None = None,
) -> HubRuntime | None:
    """The hub duty, started; None when clusters.yaml has no `hub:`. `audit`: the audit trail's writer."""
    hub = cfg.hub
    if hub is None:
        return None
    # one connection per watch (a kind, or a kind and namespace) and a few for the writes back
    watches = len(WATCHED_KINDS) * max(1, len(hub.namespaces or ()))
    rest = KubeRest("hub", connect(hub.kubeconfig, hub.context, pool_size=watches + 4))

    def member_status(
        cluster: str, api_version: str, kind: str, namespace: str, name: str
    ) -> Mapping[str, Any] | None:
        obj = gateway.read_object(cluster, api_version, kind, namespace, name)
        if obj is None:
            return None
        status = obj.get("status")
        return status if isinstance(status, dict) else {}

    syncs: list[HubSync] = []

    def on_event(kind: WatchedKind, type_: str, obj: dict[str, Any]) -> None:
        for sync in syncs:
            sync.hub_event(kind, type_, obj)

    watcher = HubWatcher(rest, on_event, hub.namespaces, hub.discovery_seconds)
    sync = HubSync(
        service,
        watcher,
        member_status,
        leader=lambda: leadership.leader,
        tenant_mapping=hub.tenant_mapping,
        reconcile_seconds=hub.reconcile_seconds,
        audit=audit,
    )
    syncs.append(sync)
    gateway.subscribe(sync.workload_changed)
    watcher.start()
    sync.start()
    return HubRuntime(watcher, sync)
