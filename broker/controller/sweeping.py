"""The sweep: delete the broker's Jobs that no current attempt owns, in every cluster that answers.

The Jobs are listed before the records are consulted (lifecycle.orphan_reason); the leader's records
(caught up after the list) answer for the Jobs they own, and only a Job they would delete or do not
know is judged on the store's record, so a sweep reads O(left-overs) records, not O(jobs).

A cluster whose Jobs are listed from a watch's cache (broker.core.ports.ListingVersion) is not walked
again while neither its Jobs nor the leader's records moved since its last clean sweep (nothing
deleted, nothing failed): orphan_reason is a function of the two, so the walk would find nothing. An
idle fleet's sweep then costs one change-stream read per cluster every 30 s, not a look at every Job.
"""

from __future__ import annotations

import functools
import logging
import threading

from broker import telemetry
from broker.controller.base import ControllerBase
from broker.core.errors import (
    ClusterError,
)
from broker.core.model import (
    JobEvent,
)
from broker.core.ports import ListingVersion
from broker.workload import lifecycle

log = logging.getLogger(__name__)

# What a sweep saw of a cluster before it listed: the records' version, the namespaces, their listings'
_Seen = tuple[int, tuple[str, ...], tuple[int, ...]]


class Sweeping(ControllerBase):
    # (gateway, the gateway as a ListingVersion or None): asked once per gateway, as _member_watch
    _listing_of: tuple[object, ListingVersion | None] | None = None
    # cluster -> what its last clean sweep saw (the records' version, namespaces, the listings' versions)
    _swept: dict[str, _Seen]
    _sweeping: dict[str, threading.Lock]  # one sweep of a cluster at a time

    def sweep_orphans(self) -> list[str]:
        """Delete the broker's Jobs that no current attempt owns (see lifecycle.orphan_reason), in every
        declared cluster that answers, each cluster on its own worker. Returns "cluster/name" of each Job
        deleted (with the inline dispatcher; the concurrent one logs them). A cluster unchanged since its
        last clean sweep is skipped here, on the caller's thread, after one catch-up for all: at 1,000
        quiet members a sweep pass started a thousand dispatch threads to find nothing."""
        deleted: list[str] = []
        self.store.prune_expired(self.clock.now())
        down = self._unavailable_clusters()
        if self.records.built:
            self.records.catch_up()  # what others wrote since: their writes move the version
        tenants = self._tenants_known()
        for cluster in sorted(self.traits):
            if cluster in down:
                continue
            namespaces = self.traits[cluster].namespaces_for(tenants)
            seen = self._unchanged_since(cluster, namespaces)
            if seen is None:
                continue  # neither its Jobs nor the records moved since its last clean sweep
            self.dispatcher.submit_once(
                cluster, "sweep", functools.partial(self._sweep_into, cluster, deleted, namespaces, seen)
            )
        return deleted

    def _sweep_into(
        self, cluster: str, deleted: list[str], namespaces: tuple[str, ...], seen: _Seen | tuple[()]
    ) -> None:
        with self._sweeping.setdefault(cluster, threading.Lock()):
            deleted.extend(self._walk(cluster, namespaces, seen, raise_errors=False))

    def sweep_cluster(self, cluster: str, raise_errors: bool = False) -> list[str]:
        """The sweep of one cluster: list the broker's Jobs there *before* reading their records, delete
        each one no current attempt owns. With raise_errors a failed list or delete raises (the fence
        stays up); else it is logged and the next sweep retries. Sweeps of one cluster run one at a time:
        the periodic sweep and an unfencing one both deleted the same Job, and both said so."""
        with self._sweeping.setdefault(cluster, threading.Lock()):
            return self._sweep_cluster(cluster, raise_errors)

    def _sweep_cluster(self, cluster: str, raise_errors: bool) -> list[str]:
        namespaces = self.traits[cluster].namespaces_for(self._tenants_known())
        if not raise_errors and self.records.built:
            self.records.catch_up()  # what others wrote since: their writes move the version
        seen = () if raise_errors else self._unchanged_since(cluster, namespaces)  # unfencing: always
        if seen is None:
            return []  # neither its Jobs nor the records moved since its last clean sweep
        return self._walk(cluster, namespaces, seen, raise_errors)

    def _walk(
        self, cluster: str, namespaces: tuple[str, ...], seen: _Seen | tuple[()], raise_errors: bool
    ) -> list[str]:
        """List the cluster's Jobs, then delete those no current attempt owns; `seen` (what was seen
        before the list) is kept as its last clean sweep if nothing was left over."""
        deleted: list[str] = []
        try:
            refs = [  # before the records; every namespace a tenant's Jobs may be in
                ref for namespace in namespaces for ref in self.gateway.list_workloads(cluster, namespace)
            ]
        except ClusterError as exc:
            if raise_errors:
                raise
            log.info("cannot list Jobs on %s for the sweep: %s", cluster, exc)
            return deleted
        clean = True
        if self.records.built:
            self.records.catch_up()  # the records read after the list, as orphan_reason needs
        for ref in refs:
            # The leader's records answer for the Jobs they own (read after the list: catch_up);
            # a Job they would delete, or do not know, is judged on the store's record.
            record = self.records.get(ref.job_id) if self.records.built else None
            if record is not None and lifecycle.orphan_reason(ref, record) is None:
                continue
            record = self.store.get_job(ref.job_id)
            reason = lifecycle.orphan_reason(ref, record)
            if reason is None or record is None:
                continue
            clean = False  # deleted or not, the next sweep looks again
            try:
                self.gateway.delete_workload(cluster, ref.namespace, ref.name)
            except ClusterError as exc:
                if raise_errors:
                    raise
                log.warning("cannot delete left-over Job %s on %s: %s", ref.name, cluster, exc)
                continue
            log.info("deleted left-over Job %s on %s: %s", ref.name, cluster, reason)
            self.store.append_event(
                JobEvent(
                    job_id=record.id,
                    at=self.clock.now(),
                    state=record.state,
                    attempt=record.attempt,
                    reason=f"deleted left-over Job {ref.name} on {cluster}: {reason}",
                    cluster=cluster,
                    trace_id=telemetry.trace_id_of(record.trace_parent),
                )
            )
            deleted.append(f"{cluster}/{ref.name}")
        if clean and seen:
            self._swept[cluster] = seen
        return deleted

    def _unchanged_since(self, cluster: str, namespaces: tuple[str, ...]) -> _Seen | tuple[()] | None:
        """None: the cluster's Jobs and the records are as its last clean sweep saw them (skip it). Else
        what this sweep sees before it lists, to keep if it ends clean; () when the gateway lists from
        the member (no version: every sweep walks). The caller has caught the records up just before."""
        gateway = self.gateway
        if self._listing_of is None or self._listing_of[0] is not gateway:
            self._listing_of = (gateway, gateway if isinstance(gateway, ListingVersion) else None)
        listing = self._listing_of[1]
        if listing is None or not self.records.built:
            return ()
        versions = [listing.listing_version(cluster, namespace) for namespace in namespaces]
        if any(v is None for v in versions):
            return ()
        seen = (self.records.version, namespaces, tuple(v for v in versions if v is not None))
        return None if self._swept.get(cluster) == seen else seen
