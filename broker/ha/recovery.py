"""Redis loss: notice that the store came back empty and rebuild the job records from the member clusters.

Owns the run marker's meaning and the rebuild. The store keeps a marker (P:run-id) once it holds the
federation's records; the leader checks it at the start of every control-loop pass (one GET). When it
is missing, Redis lost its data (or is new): every declared cluster's broker Jobs are listed, those of
this federation (annotation gpufed.io/federation = the store prefix) grouped by job id, and the newest
attempt of each becomes a PLACED record again, from the annotations every Job carries
(broker.workload.manifest.recovery_annotations: the request, when it was submitted, its idempotency key). The next
sync_status pass reads each Job and moves the record on (RUNNING, SUCCEEDED, ...); the sweep deletes
older attempts. Only then is the marker written: until it is, the store refuses submits
(errors.Recovering, 503), so a retried Idempotency-Key can never run a job twice.

A cluster that does not answer during the rebuild may hold the Job of an Idempotency-Key a client now
re-sends: until every cluster has been listed (or removed from the fleet), the clusters still pending
are handed to `pending` (the composition root keeps them in Redis: adapters.redis_recovery_gate), and
the store answers a key it does not know with 503 and that reason instead of making a second job
(submits without a key are never held back). A cluster declared lost (`lost`: the fenced ones) is let
off: a key re-sent then makes a new job elsewhere, and when the cluster comes back and its Job is
restored, the two live jobs of that key are reconciled (`duplicates`: broker.ha.duplicates keeps the
older and cancels the newer, saying so in both jobs' events).

What cannot be rebuilt is said plainly: jobs that were only QUEUED (no Job anywhere) are lost; this
process remembers the QUEUED and PENDING jobs it saw in the last pass (the leader's records in memory: id,
tenant, request); a PENDING one (held, or waiting for its dependencies: docs/batch.md) is written back as
it was, and each QUEUED one as a LOST record, without its key, so it shows in its owner's job
list and answers 410 with the report (broker.api.lost). Clusters that do not answer
during the rebuild are listed again each pass until they do. Each rebuild is logged, kept as the
store's recovery report (/v1/status' `recovery`) and counted in metrics.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace

from prometheus_client import Counter

from broker import telemetry
from broker.core.errors import ClusterError
from broker.core.k8s_names import (
    CLOSED_ANNOTATION,
    FEDERATION_ANNOTATION,
    IDEMPOTENCY_ANNOTATION,
    REQUEST_ANNOTATION,
    SUBMITTED_AT_ANNOTATION,
)
from broker.core.model import ClusterTraits, JobEvent, JobRecord, JobState
from broker.core.ports import Clock, ClusterGateway, RecoveryStore
from broker.core.workloads import WorkloadRef
from broker.workload import manifest

log = logging.getLogger(__name__)

recoveries = Counter(
    "gpufed_store_recoveries",
    "Times the state store was found empty and the job records were rebuilt from the member clusters",
    registry=telemetry.REGISTRY,
)
recovered_jobs = Counter(
    "gpufed_recovered_jobs",
    "Job records rebuilt from the member clusters' Jobs after a state store loss",
    registry=telemetry.REGISTRY,
)
lost_jobs = Counter(
    "gpufed_recovery_lost_jobs",
    "Jobs lost with the state store: they were only QUEUED (no Job in any member cluster)",
    registry=telemetry.REGISTRY,
)

# At most this many ids are named in a report (the counts are always complete).
_REPORT_IDS = 50
# Clusters listed at once during a rebuild.
_LIST_WORKERS = 8


@dataclass
class RecoveryReport:
    """What one rebuild found: the records rebuilt, the jobs lost, the clusters not yet listed."""

    at: float
    recovered: int = 0
    recovered_ids: list[str] = field(default_factory=list)
    lost_queued: int | None = None  # None: unknown (this process saw no earlier state)
    lost_queued_ids: list[str] = field(default_factory=list)
    unreadable: int = 0  # broker Jobs without a readable request annotation (older brokers' Jobs)
    clusters_listed: list[str] = field(default_factory=list)
    clusters_pending: list[str] = field(default_factory=list)
    seconds: float = 0.0
    previous_run: str | None = None

    def text(self) -> str:
        lost = "unknown" if self.lost_queued is None else str(self.lost_queued)
        pending = (
            f"; clusters not answering yet: {', '.join(self.clusters_pending)}"
            if self.clusters_pending
            else ""
        )
        return (
            f"state store found empty: {self.recovered} job record(s) rebuilt from "
            f"{len(self.clusters_listed)} cluster(s); {lost} job(s) that were only QUEUED are lost"
            f"{pending}"
        )


def newest_attempts(refs: list[WorkloadRef], federation: str) -> tuple[dict[str, WorkloadRef], int]:
    """Per job id, its newest attempt among this federation's Jobs; and how many carry no request. A job
    whose newest attempt the broker had closed (gpufed.io/closed: its end was recorded) is left out: a
    finished Job waits in its member for its ttlSecondsAfterFinished, and a rebuild does not load it again."""
    best: dict[str, WorkloadRef] = {}
    unreadable = 0
    for ref in refs:
        owner = ref.annotations.get(FEDERATION_ANNOTATION)
        if owner != federation:
            continue  # another broker's Job (or one written before the annotation existed)
        if REQUEST_ANNOTATION not in ref.annotations:
            unreadable += 1
            continue
        seen = best.get(ref.job_id)
        if seen is None or ref.attempt > seen.attempt:
            best[ref.job_id] = ref
    return {j: r for j, r in best.items() if CLOSED_ANNOTATION not in r.annotations}, unreadable


def record_of(ref: WorkloadRef, cluster: str, now: float) -> JobRecord:
    """The PLACED record of a Job (sync_status moves it on from what the cluster says)."""
    request = manifest.decode_request(ref.annotations[REQUEST_ANNOTATION])
    try:
        submitted = float(ref.annotations.get(SUBMITTED_AT_ANNOTATION, "") or ref.created_at or now)
    except ValueError:
        submitted = ref.created_at or now
    return JobRecord(
        id=ref.job_id,
        request=request,
        state=JobState.PLACED,
        attempt=ref.attempt,
        created_at=submitted,
        updated_at=now,
        cluster=cluster,
        reason=f"recovered from {cluster} after the state store was lost; following its Job {ref.name}",
        workload_name=ref.name,
        idempotency_key=ref.annotations.get(IDEMPOTENCY_ANNOTATION) or None,
    )


class StoreRecovery:
    """The leader's first step every pass: check the run marker, rebuild when it is gone."""

    def __init__(
        self,
        store: RecoveryStore,
        gateway: ClusterGateway,
        clock: Clock,
        traits: Mapping[str, ClusterTraits] | Callable[[], Mapping[str, ClusterTraits]],
        federation: str,
        tenants: Iterable[str] = (),
        queued: Callable[[], Iterable[JobRecord] | None] | None = None,
        rebuilt: Callable[[], None] | None = None,
        pending: Callable[[list[str]], None] | None = None,
        lost: Callable[[], Iterable[str]] | None = None,
        duplicates: Callable[[list[JobRecord]], object] | None = None,
    ) -> None:
        """`traits`: the member clusters, or a callable returning them now (they change at run time).
        `tenants`: the configured tenants, whose namespaces are listed too (tenant namespaces).
        `queued`: the QUEUED jobs the leader holds in memory (None: read them from the store);
        `rebuilt`: called after a rebuild (the leader's job records are read again); `pending`: told the
        clusters not listed yet (and not declared lost) after each rebuild step; `lost`: the clusters
        declared lost (fenced), let off the pending list; `duplicates`: given the records restored, to
        reconcile two live jobs of one key (broker.ha.duplicates.DuplicateKeys.reconcile)."""
        self._say_pending = pending
        self._lost = lost
        self._duplicates = duplicates
        self._store = store
        self._gateway = gateway
        self._clock = clock
        self._members = traits if callable(traits) else (lambda fixed=dict(traits): fixed)
        self._federation = federation
        self._tenants = tuple(tenants)
        self._run_id: str | None = None
        self._queued = queued
        self._rebuilt = rebuilt
        self._queued_seen: dict[str, JobRecord] | None = None
        self._pending: set[str] = set()
        self._unlisted: set[str] = set()  # pending clusters whose list failed (said once, until one works)
        self.last: RecoveryReport | None = None

    def check(self) -> RecoveryReport | None:
        """Run the marker check (and a rebuild when needed); the report of a rebuild done now, if any."""
        marker = self._store.run_marker()
        if marker is not None:
            self._run_id = marker
            if self._pending:
                self._list_pending()
                self._publish_pending()
            held = self._queued() if self._queued is not None else None
            if held is None:
                held = self._store.list_jobs([JobState.QUEUED, JobState.PENDING])
            self._queued_seen = {r.id: r for r in held if r.state in (JobState.QUEUED, JobState.PENDING)}
            return None
        return self.rebuild()

    def rebuild(self) -> RecoveryReport:
        started = self._clock.now()
        report = RecoveryReport(at=started, previous_run=self._run_id)
        self._pending = set(self._members())
        recovered = self._list_pending(report)
        report.recovered = len(recovered)
        report.recovered_ids = sorted(recovered)[:_REPORT_IDS]
        if self._queued_seen is not None:
            kept = self._keep_pending(recovered)
            lost = sorted(set(self._queued_seen) - recovered - kept)
            report.lost_queued = len(lost)
            report.lost_queued_ids = lost[:_REPORT_IDS]
            self._keep_lost([self._queued_seen[i] for i in lost], report)
        report.clusters_pending = sorted(self._pending)
        report.seconds = round(self._clock.now() - started, 3)
        self._publish_pending()  # before the marker: no keyed submit is taken while these are unknown
        run_id = "r" + uuid.uuid4().hex[:12]
        self._run_id = self._store.set_run_marker(run_id, json.dumps(asdict(report)))
        self.last = report
        first_start = report.previous_run is None and report.recovered == 0
        if first_start:
            log.info("state store initialised (run %s): no earlier records found in the clusters", run_id)
        else:
            recoveries.inc()
            recovered_jobs.inc(report.recovered)
            if report.lost_queued:
                lost_jobs.inc(report.lost_queued)
            log.warning("%s (run %s)", report.text(), run_id)
            if report.lost_queued_ids:
                log.warning(
                    "jobs lost with the state store (only QUEUED): %s", ", ".join(report.lost_queued_ids)
                )
        self._queued_seen = {}
        if self._rebuilt is not None:
            self._rebuilt()
        return report

    def _keep_pending(self, recovered: set[str]) -> set[str]:
        """The PENDING jobs this process saw (held, or waiting for their dependencies: no Job anywhere yet)
        written back as they were, their dependencies with them (docs/batch.md); their ids."""
        assert self._queued_seen is not None
        jobs = [r for i, r in self._queued_seen.items() if r.state is JobState.PENDING and i not in recovered]
        if jobs:
            now = self._clock.now()
            why = "kept through a rebuild of the state store (it waits: no Job anywhere yet)"
            self._store.restore_jobs([(r, JobEvent(r.id, now, r.state, r.attempt, why, None)) for r in jobs])
        return {r.id for r in jobs}

    def _keep_lost(self, jobs: list[JobRecord], report: RecoveryReport) -> None:
        """The jobs lost while QUEUED stay as LOST records, in their owners' lists (broker.api.lost says
        410 with this report until the owner has seen it). Their key is not kept: re-sent, it submits anew."""
        if not jobs:
            return
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(report.at))
        reason = (
            f"lost: it was QUEUED (not yet in any member cluster) when the state store lost its data, and the "
            f"rebuild at {when} could not recover it from the clusters; submit it again"
        )
        items: list[tuple[JobRecord, JobEvent | None]] = []
        for job in jobs:
            record = replace(
                job, state=JobState.LOST, updated_at=report.at, reason=reason, idempotency_key=None
            )
            items.append(
                (record, JobEvent(record.id, report.at, JobState.LOST, record.attempt, reason, None))
            )
        self._store.restore_jobs(items)

    def _publish_pending(self) -> None:
        """Hand the clusters not listed yet (and still members) to `pending`."""
        if self._say_pending is not None:
            lost = set(self._lost()) if self._lost is not None else set()
            self._say_pending(sorted((self._pending & set(self._members())) - lost))

    def _list_pending(self, report: RecoveryReport | None = None) -> set[str]:
        """List each cluster not yet read (concurrently) and restore its jobs; the ids restored."""
        restored: set[str] = set()
        now = self._clock.now()
        members = self._members()
        pending = sorted(c for c in self._pending if c in members)
        self._pending &= set(pending)
        with ThreadPoolExecutor(max(1, min(_LIST_WORKERS, len(pending)))) as pool:
            listed = list(pool.map(lambda c: self._list_all(c, members[c]), pending))
        for cluster, refs in zip(pending, listed, strict=True):
            if refs is None:
                continue  # logged once; listed again every check until it answers
            self._unlisted.discard(cluster)
            best, unreadable = newest_attempts(refs, self._federation)
            items: list[tuple[JobRecord, JobEvent | None]] = []
            for ref in best.values():
                try:
                    record = record_of(ref, cluster, now)
                except ValueError as exc:
                    log.warning("Job %s on %s: cannot rebuild its record: %s", ref.name, cluster, exc)
                    unreadable += 1
                    continue
                items.append(
                    (record, JobEvent(record.id, now, record.state, record.attempt, record.reason, cluster))
                )
            written = [r for (r, _), w in zip(items, self._store.restore_jobs(items), strict=True) if w]
            if self._duplicates is not None:  # a key re-sent while this cluster was lost: keep the older
                self._duplicates([r for r, _ in items])  # all: a reconcile cut short is done again
            ours = {r.id for r in written}
            restored |= ours
            self._pending.discard(cluster)
            if report is not None:
                report.clusters_listed.append(cluster)
                report.unreadable += unreadable
            elif ours:
                recovered_jobs.inc(len(ours))
                log.warning("rebuilt %d more job record(s) from %s, which answers again", len(ours), cluster)
        return restored

    def _list_all(self, cluster: str, traits: ClusterTraits) -> list[WorkloadRef] | None:
        """The broker's Jobs in every namespace of the cluster its tenants use; None when one fails."""
        refs: list[WorkloadRef] = []
        for namespace in traits.namespaces_for(self._tenants):
            got = self._list(cluster, namespace)
            if got is None:
                return None
            refs.extend(got)
        return refs

    def _list(self, cluster: str, namespace: str) -> list[WorkloadRef] | None:
        try:
            return self._gateway.list_workloads(cluster, namespace)
        except ClusterError as exc:
            if cluster not in self._unlisted:  # once per cluster, not once per check, until it answers
                self._unlisted.add(cluster)
                log.warning(
                    "cannot list %s to rebuild its job records yet: %s; tried again every check", cluster, exc
                )
            return None
