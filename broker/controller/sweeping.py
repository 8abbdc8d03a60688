"""The sweep: delete the broker's Jobs that no current attempt owns, in every cluster that answers.

The Jobs are listed before the records are consulted (lifecycle.orphan_reason); the leader's records
(caught up after the list) answer for the Jobs they own, and only a Job they would delete or do not
know is judged on the store's record, so a sweep reads O(left-overs) records, not O(jobs).
"""

from __future__ import annotations

import functools
import logging

from broker import telemetry
from broker.controller.base import ControllerBase
from broker.core.errors import (
    ClusterError,
)
from broker.core.model import (
    JobEvent,
)
from broker.workload import lifecycle

log = logging.getLogger(__name__)


class Sweeping(ControllerBase):
    def sweep_orphans(self) -> list[str]:
        """Delete the broker's Jobs that no current attempt owns (see lifecycle.orphan_reason), in every
        declared cluster that answers, each cluster on its own worker. Returns "cluster/name" of each Job
        deleted (with the inline dispatcher; the concurrent one logs them)."""
        deleted: list[str] = []
        self.store.prune_expired(self.clock.now())
        down = self._unavailable_clusters()
        for cluster in sorted(self.traits):
            if cluster not in down:
                self.dispatcher.submit_once(
                    cluster, "sweep", functools.partial(self._sweep_into, cluster, deleted)
                )
        return deleted

    def _sweep_into(self, cluster: str, deleted: list[str]) -> None:
        deleted.extend(self.sweep_cluster(cluster))

    def sweep_cluster(self, cluster: str, raise_errors: bool = False) -> list[str]:
        """The sweep of one cluster: list the broker's Jobs there *before* reading their records, delete
        each one no current attempt owns. With raise_errors a failed list or delete raises (the fence
        stays up); else it is logged and the next sweep retries."""
        deleted: list[str] = []
        traits = self.traits[cluster]
        try:
            refs = [  # before the records; every namespace a tenant's Jobs may be in
                ref
                for namespace in traits.namespaces_for(self._tenants_known())
                for ref in self.gateway.list_workloads(cluster, namespace)
            ]
        except ClusterError as exc:
            if raise_errors:
                raise
            log.info("cannot list Jobs on %s for the sweep: %s", cluster, exc)
            return deleted
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
        return deleted
