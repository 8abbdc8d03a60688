"""The member clusters while the broker runs: what changes when clusters.yaml or a ClusterProfile hub says
so, without a restart.

FleetMembers              the live set of member clusters: gateway clients, Job informers, pollers and the
                          services' traits, re-pointed together when a cluster joins, leaves or changes
start_config_reload(...)  the watcher of clusters.yaml (broker.config.reload) applying its changes
start_cluster_profiles(...)  the ClusterProfile sync (adapters.clusterprofile) when a hub is configured
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from adapters.clusterprofile import ClusterProfileHub, ClusterProfileSync, load_provider_file
from adapters.job_informer import WatchingGateway
from adapters.kube_rest import KubeRest
from adapters.ray_actors import PollerFleet
from adapters.redis_store import RedisStateStore
from adapters.shard_ring import PollerSpec
from broker.app.auth import AuthRuntime
from broker.config import clusterprofile
from broker.config.reload import ConfigChanges, ConfigWatcher, changes
from broker.config.settings import ClusterConfig, FleetConfig
from broker.controller.service import BrokerService
from broker.core.model import ClusterSummary, ClusterTraits

log = logging.getLogger(__name__)


class FleetMembers:
    """The member clusters this process places on, changed while it runs: from clusters.yaml (read again
    by config_reload) and from ClusterProfiles. An added cluster gets a gateway client, its Jobs
    followed, a poller and its traits (placeable from the next pass); a removed one is drained: no new
    placements, its poller and summary go, and the jobs already there are still followed to their end.
    A name in clusters.yaml wins over a ClusterProfile of the same name. One change at a time."""

    def __init__(
        self,
        cfg: FleetConfig,
        services: Sequence[BrokerService],
        store: RedisStateStore,
        gateway: WatchingGateway,
        pollers: PollerFleet,
    ) -> None:
        self._services, self._store, self._gateway, self._pollers = services, store, gateway, pollers
        self._traits = dict(services[0].traits)  # the services take copies (set_traits)
        self._from_config = {c.name for c in cfg.clusters}
        self._lock = threading.RLock()
        # called with the members' traits after each change (the API processes restart on it)
        self.on_change: Callable[[dict[str, ClusterTraits]], None] | None = None

    def declared(self, name: str) -> bool:
        """The cluster is one of clusters.yaml's (now)."""
        with self._lock:
            return name in self._from_config

    def add(self, traits: ClusterTraits, kubeconfig: Path, context: str | None, followed: str) -> None:
        """Place on one more cluster; `followed` is the namespace its Jobs are watched in ("": all)."""
        with self._lock:
            self._gateway.add_cluster(KubeRest.from_kubeconfig(traits.name, kubeconfig, context), followed)
            self._pollers.add_cluster(PollerSpec(traits.name, str(kubeconfig), context, traits))
            self._traits[traits.name] = traits
            self._publish()

    def remove(self, name: str) -> None:
        with self._lock:
            self._traits.pop(name, None)
            self._publish()  # no new placement lands there from the next pass on
            self._pollers.remove_cluster(name)
            self._store.delete_summary(name)

    def redeclare(self, traits: ClusterTraits, kubeconfig: Path, context: str | None) -> None:
        """Same cluster, other traits: the poller's summaries and the next pass use them."""
        with self._lock:
            self._pollers.add_cluster(PollerSpec(traits.name, str(kubeconfig), context, traits))
            self._traits[traits.name] = traits
            self._publish()

    def reconnect(self, c: ClusterConfig) -> None:
        """Same cluster, another connection (kubeconfig, context, followed namespace, GPU allocation): a
        new gateway client and Job watch; the poller re-points itself on a new kubeconfig or context (a
        new watcher, whose summaries replace the old one's) and takes the rest as traits. Jobs already
        there are followed through the new connection."""
        with self._lock:
            self._gateway.reconnect_cluster(
                KubeRest.from_kubeconfig(c.name, c.kubeconfig, c.context), followed_namespace(c)
            )
            self.redeclare(c.traits(), c.kubeconfig, c.context)

    def apply_config(self, change: ConfigChanges) -> None:
        """A changed clusters.yaml: its clusters added, removed, re-declared and re-connected now; other
        sections logged (they take effect at the next start)."""
        with self._lock:
            for name in change.removed:
                self._from_config.discard(name)
                self.remove(name)
            for c in change.added:
                if c.name in self._traits:  # a ClusterProfile member of that name: the file's wins
                    self.remove(c.name)
                self._from_config.add(c.name)
                self.add(c.traits(), c.kubeconfig, c.context, followed_namespace(c))
            for c in change.redeclared:
                self.redeclare(c.traits(), c.kubeconfig, c.context)
            for c in change.reconnected:
                self.reconnect(c)
        if change.applied_now:
            log.info("clusters.yaml reloaded: %s", change.text())
        if change.restart:
            log.warning(
                "clusters.yaml: %s changed: that takes effect when the broker restarts",
                ", ".join(change.restart),
            )

    def traits(self) -> dict[str, ClusterTraits]:
        with self._lock:
            return dict(self._traits)

    def _publish(self) -> None:
        for service in self._services:  # the leader's (its next pass places on it) and the API's
            service.set_traits(self._traits, at_once=service is not self._services[0])
        if self.on_change is not None:
            self.on_change(dict(self._traits))


def followed_namespace(c: ClusterConfig) -> str:
    """The namespace whose Jobs the gateway watches on this cluster ("": every one, for tenant namespaces,
    docs/tenancy.md)."""
    return "" if c.tenant_namespace else c.namespace


def start_config_reload(
    cfg: FleetConfig,
    members: FleetMembers,
    path: Path,
    load: Callable[[], FleetConfig],
    auth: AuthRuntime | None = None,
) -> ConfigWatcher | None:
    """Watch clusters.yaml (settings.configReloadSeconds; 0: not at all) and apply what changed in it
    (its clusters, and its `auth` section through `auth`, which audits every reload)."""
    interval = cfg.settings.config_reload_seconds
    if interval <= 0:
        return None
    running = [cfg]

    def apply(new: FleetConfig) -> None:
        change = changes(running[0], new)
        members.apply_config(change)
        if auth is not None:
            auth.apply_config(running[0], new, [change.text(), *change.restart])
        running[0] = new

    refused = auth.config_refused if auth is not None else None
    watcher = ConfigWatcher(path, load, apply, interval_seconds=interval, on_invalid=refused)
    watcher.start()
    return watcher


def start_cluster_profiles(
    cfg: FleetConfig, members: FleetMembers, store: RedisStateStore, workdir: Path
) -> ClusterProfileSync | None:
    """Members from ClusterProfiles on the hub (cfg.clusterProfiles), joined and drained through
    `members`."""
    cpc = cfg.cluster_profiles
    if cpc is None:
        return None
    providers = load_provider_file(cpc.provider_file)
    hub = ClusterProfileHub(
        KubeRest.from_kubeconfig("hub", cpc.hub_kubeconfig, cpc.context),
        cpc.namespace,
        clusterprofile.label_selector(cpc.cluster_manager, cpc.clusterset),
    )

    def on_add(member: clusterprofile.ProfileMember, kubeconfig: Path) -> None:
        if members.declared(member.name):
            log.warning("clusterprofile %s: a cluster of that name is in clusters.yaml; ignored", member.name)
            return
        traits = ClusterTraits(
            name=member.name,
            region=member.region,
            labels=dict(member.labels),
            namespace=cpc.member_namespace,
            gpu_allocation=cpc.gpu_allocation,
            tenant_namespace=cfg.settings.tenant_namespace,  # the fleet's tenancy (docs/tenancy.md)
            create_namespaces=cfg.settings.create_namespaces,
        )
        # its Jobs followed by watch like the declared clusters' (reads are GETs until that syncs)
        followed = "" if cfg.settings.tenant_namespace else cpc.member_namespace  # "": every namespace
        members.add(traits, kubeconfig, None, followed)

    def on_remove(name: str) -> None:
        if not members.declared(name):
            members.remove(name)

    def summary_of(name: str) -> ClusterSummary | None:
        # every member with a profile gets its capacity published, clusters.yaml ones included
        return store.get_summary(name)

    sync = ClusterProfileSync(
        hub,
        providers,
        workdir,
        on_add,
        on_remove,
        summary_of if cpc.publish else None,
        poll_seconds=cpc.poll_seconds,
        publish_seconds=cpc.publish_seconds,
    )
    sync.start()
    return sync
