"""Ports: the Protocols the service layer needs from the outside world. Adapters implement them.

Clock           now() in epoch seconds; the only time source the service sees
ClusterGateway  create / delete / read the broker's Jobs in a member cluster (WorkloadWatch: by watch;
                MemberWatch: their pods' and the Job controller's trouble)
CheckpointGateway  stop an attempt so that it saves, read the checkpoints pods report (docs/migration.md)
StateStore      summaries, per-node tables, reservations, jobs, events and idempotency keys (Redis in
                production)
LeaderLease     the leader lease with its fencing token (broker.ha.leadership runs the control loop in the
                holder only)
BurstLedger     observed run times by shape, cloud runs for spend, each job's last wait-or-burst verdict
JobLister       one page of a job list in submission order (broker.core.job_list: Kubernetes-style paging)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Protocol, runtime_checkable

from broker.core.errors import Conflict, StoreError
from broker.core.job_list import JobDocPage, JobPage, JobQuery, KeptItems
from broker.core.model import ClusterSummary, JobEvent, JobRecord, JobState, Reservation
from broker.core.records import ClusterEvent, NodeDetail, Run, Saving
from broker.core.workloads import MemberTrouble, WorkloadRef, WorkloadStatus


@dataclass(frozen=True)
class ClusterState:
    """What the placer's cache knows of one cluster in Redis: its summary and reservations, with the
    summary version and reservation ledger a reserve must still find (compare-and-set)."""

    summary: ClusterSummary
    reservations: tuple[Reservation, ...]
    ledger: int


class SummaryMarks(NamedTuple):
    """What a cluster's summary looks like from outside, without the summary (StateStore.cluster_marks):
    its version (moves with capacity or health: a cache reads the summary again), the reservation
    ledger, how many times it was written (heartbeats too: the pods a poller saw are counted once it
    moved), and the latest heartbeat and write time (None: the summary's own are the latest)."""

    version: int
    ledger: int
    written: int
    heartbeat: float | None
    published_at: float | None


@dataclass(frozen=True)
class ReserveResult:
    """The answer of a compare-and-set reserve: RESERVED, STALE (the cluster changed since it was read:
    refresh and decide again), HELD (another placer or a newer attempt holds this job) or NO_CLUSTER."""

    status: str
    version: int
    ledger: int

    RESERVED: ClassVar[str] = "reserved"
    STALE: ClassVar[str] = "stale"
    HELD: ClassVar[str] = "held"
    NO_CLUSTER: ClassVar[str] = "no-cluster"

    @property
    def ok(self) -> bool:
        return self.status == ReserveResult.RESERVED


@dataclass(frozen=True)
class ReserveBatch:
    """Reservations of one placer on one cluster, all decided on the cluster at (version, ledger) with each
    earlier one assumed: held together by one compare-and-set (StateStore.reserve_many)."""

    cluster: str
    version: int
    ledger: int
    reservations: tuple[Reservation, ...]


@dataclass(frozen=True)
class JobWrite:
    """One compare-and-set job write of a batch (StateStore.save_jobs): as save_job's arguments."""

    record: JobRecord
    expected_state: JobState | None = None
    event: JobEvent | None = None
    expected_attempt: int | None = None


class Clock(Protocol):
    def now(self) -> float: ...


class ClusterGateway(Protocol):
    def create_workload(
        self, cluster: str, job: Mapping[str, Any], companions: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        """Create the companions (e.g. a PodGroup) first, then the batch/v1 Job. Already-exists is success."""
        ...

    def delete_workload(self, cluster: str, namespace: str, name: str) -> None:
        """Delete the Job and its pods (propagation Background). Not-found is success."""
        ...

    def read_workload(self, cluster: str, namespace: str, name: str) -> WorkloadStatus:
        """The Job's status; exists=False when the cluster has no such Job."""
        ...

    def list_workloads(self, cluster: str, namespace: str) -> list[WorkloadRef]:
        """Every Job in the namespace that carries the gpufed.io/job-id label."""
        ...


@runtime_checkable
class CheckpointGateway(Protocol):
    """A gateway that can stop an attempt through the checkpoint contract (docs/migration.md)."""

    def stop_for_checkpoint(
        self,
        cluster: str,
        namespace: str,
        name: str,
        job_id: str,
        attempt: int,
        grace_seconds: int,
        wait_seconds: float,
    ) -> tuple[str | None, bool]:
        """Delete the attempt's pods with the grace period, follow them until gone (at most
        wait_seconds) and delete the Job: (the termination message's checkpoint reference or None,
        whether every pod was seen gone)."""
        ...

    def reported_checkpoints(self, cluster: str, namespace: str) -> dict[tuple[str, int], str]:
        """(job id label value, attempt) -> the checkpoint its pod last reported (annotation)."""
        ...


@runtime_checkable
class ListingVersion(Protocol):
    """A ClusterGateway whose list_workloads answers from a watch's cache (adapters.job_informer): a
    version of that answer, so that the sweep of a cluster whose Jobs and records did not change since its
    last clean sweep is skipped (broker.controller.sweeping)."""

    def listing_version(self, cluster: str, namespace: str) -> int | None:
        """A number that changes (never back to an earlier value) whenever list_workloads(cluster,
        namespace) may answer differently; None when that answer is asked of the member, not memory."""
        ...


@runtime_checkable
class WorkloadWatch(Protocol):
    """A ClusterGateway that follows the broker's Jobs by watch (adapters.job_informer.WatchingGateway):
    it says when a Job's status changed, and whether a cluster's reads come from a synced cache."""

    def subscribe(self, on_change: Callable[[str, str], None]) -> None:
        """Call on_change(cluster, job id) whenever a broker Job's status changes (from a watch thread)."""
        ...

    def synced(self, cluster: str) -> bool: ...


@runtime_checkable
class WorkloadCloser(Protocol):
    """A ClusterGateway that marks a Job the broker has closed (its end recorded), so that a rebuild after
    a Redis loss does not load it again (broker.workload.finished_ttl)."""

    def close_workload(self, cluster: str, namespace: str, name: str, note: str) -> None:
        """Annotate the Job gpufed.io/closed = note. Not-found is success."""


@runtime_checkable
class MemberWatch(Protocol):
    """A ClusterGateway that also follows the pods of the broker's Jobs and the Job controller's
    FailedCreate events (adapters.member_watch): what goes wrong inside the member (docs/health.md)."""

    def member_trouble(self, cluster: str, namespace: str, name: str) -> MemberTrouble:
        """What the pods and events of the Job `name` say now (from memory; MemberTrouble() when nothing)."""
        ...

    def last_termination(self, cluster: str, namespace: str, name: str) -> MemberTrouble:
        """The same, once the Job failed: asks the member when the pods' watch has not told a failed
        termination yet (the Job's status may come before its pod's)."""
        ...


@runtime_checkable
class PodLogs(Protocol):
    """The container logs of a job's pods in its member cluster (the gateway implements it)."""

    def job_pods(self, cluster: str, namespace: str, job_id: str, attempt: int) -> list[str]:
        """Names of the pods of one attempt of a job (gpufed.io/job-id and gpufed.io/attempt labels)."""
        ...

    def pod_logs(
        self,
        cluster: str,
        namespace: str,
        pod: str,
        follow: bool = False,
        tail_lines: int | None = None,
        timestamps: bool = False,
    ) -> Iterator[bytes]:
        """A pod's container log in chunks; with follow, until the container exits."""
        ...


@runtime_checkable
class AttemptLogStore(Protocol):
    """The last bytes of each ended attempt's container log, kept with the job (bounded: a size cap per
    attempt, the newest few attempts, dropped some days after the job's last attempt; the store's)."""

    def put_attempt_log(self, job_id: str, attempt: int, data: bytes) -> None: ...

    def attempt_log(self, job_id: str, attempt: int) -> bytes | None:
        """The kept log of one attempt, or None when none was kept."""
        ...

    def attempt_log_numbers(self, job_id: str) -> list[int]:
        """The attempts whose logs are kept, oldest first."""
        ...


class StateStore(Protocol):
    def ping(self) -> bool:
        """True when the store answers; raises StoreError (with the cause) when it does not."""
        ...

    # --- capacity
    def put_summary(self, summary: ClusterSummary) -> ClusterSummary:
        """Store the observed summary; returns it with its new version."""
        ...

    def observed_summaries(self) -> list[ClusterSummary]: ...

    def event_lags(
        self, buckets: Sequence[float]
    ) -> dict[str, tuple[list[tuple[float, float]], float, float]]:
        """Per cluster, the pollers' event-to-Redis histogram: ([(bound, cumulative count)], sum, count)."""
        ...

    def get_nodes(self, cluster: str) -> tuple[tuple[NodeDetail, ...], float] | None:
        """The per-node table the pollers last wrote for a cluster, and when; None before the first."""
        ...

    def placeable_summaries(self, now: float | None = None) -> list[ClusterSummary]:
        """Observed summaries minus live reservations (broker.cache.reservations.deduct)."""
        ...

    # --- the placer's cache: incremental reads (Kueue's cache -> snapshot)
    def cluster_marks(self, clusters: Sequence[str]) -> dict[str, SummaryMarks]:
        """Version, ledger, writes and latest heartbeat per cluster that has a summary (SummaryMarks)."""
        ...

    def cluster_states(self, clusters: Sequence[str]) -> dict[str, ClusterState]: ...

    # --- reservations (assume / forget)
    def reserve(self, reservation: Reservation, now: float, version: int, ledger: int) -> ReserveResult:
        """Compare-and-set: hold it only if the cluster is still at that summary version and ledger."""
        ...

    def reserve_many(self, batches: Sequence[ReserveBatch], now: float) -> list[list[ReserveResult]]:
        """reserve for several clusters in one round trip: per batch, per reservation in order, its result
        (all STALE, HELD...: as reserve; one that moved costs only its own cluster's batch)."""
        ...

    def release(self, job_id: str, attempt: int | None = None, owner: str | None = None) -> bool: ...

    def release_many(self, held: Sequence[tuple[str, int | None]]) -> int:
        """release (job id, attempt) for many jobs in one round trip; returns how many were removed."""
        ...

    def prune_expired(self, now: float) -> int: ...

    def live_reservations(self, now: float) -> list[Reservation]: ...

    # --- jobs
    def removed_job(self, job_id: str) -> tuple[str, float] | None:
        """(tenant, epoch) of a finished job removed by the retention (finishedJobRetentionSeconds),
        while that is remembered; None otherwise."""
        ...

    def create_job(self, record: JobRecord, event: JobEvent | None = None) -> JobRecord:
        """Store a new job and its first event; with an idempotency key already seen, returns the
        existing job instead."""
        ...

    def create_jobs(
        self, jobs: Sequence[tuple[JobRecord, JobEvent | None]]
    ) -> list[JobRecord | StoreError | Conflict]:
        """create_job for many jobs in one round trip: per job, in order, its record or its error."""
        ...

    def get_job(self, job_id: str) -> JobRecord | None: ...

    def save_job(
        self,
        record: JobRecord,
        expected_state: JobState | None = None,
        event: JobEvent | None = None,
        expected_attempt: int | None = None,
    ) -> JobRecord:
        """Write the record (and its event, atomically); with expected_state (and expected_attempt),
        only if the stored state (and attempt) are still those (else Conflict)."""
        ...

    def save_jobs(self, writes: Sequence[JobWrite]) -> list[JobRecord | Conflict]:
        """save_job for many jobs in one round trip: per write, in order, the record or its Conflict.
        Raises Fenced when this writer's lease is no longer current (what landed before stays)."""
        ...

    def list_jobs(self, states: Sequence[JobState] | None = None) -> list[JobRecord]: ...

    def page_jobs(self, query: JobQuery, after: str | None = None) -> JobPage:
        """One page of a job list in submission order (see JobLister)."""
        ...

    def page_job_docs(
        self, query: JobQuery, after: str | None = None, kept: KeptItems | None = None
    ) -> JobDocPage:
        """The same page as the records' JSON documents (see JobLister)."""
        ...

    # --- the change stream: one entry per job write (the leader's job records follow it)
    def read_changes(
        self, after: str, block_ms: int | None = None, count: int = 10_000
    ) -> list[tuple[str, str, str]]:
        """(entry id, job id, writer id) of the job writes after stream id `after`; block_ms waits."""
        ...

    def last_change_id(self) -> str: ...

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        """The records of these jobs that exist, in one round trip."""
        ...

    # --- events
    def append_event(self, event: JobEvent) -> None: ...

    def job_events(self, job_id: str) -> list[JobEvent]: ...

    def read_events(
        self, job_id: str | None = None, after: str = "0-0", block_ms: int | None = None, count: int = 1000
    ) -> list[tuple[str, JobEvent]]:
        """Events after stream id `after`, with their ids; job_id None is the fleet stream; block_ms waits."""
        ...

    def last_event_id(self, job_id: str | None = None) -> str:
        """The id of the newest event of the job (or fleet-wide); "0-0" when none."""
        ...

    # --- clusters: fences (failover) and health events
    def fence(self, cluster: str, reason: str) -> bool: ...

    def unfence(self, cluster: str) -> bool: ...

    def fenced(self) -> dict[str, str]: ...

    def append_cluster_event(self, event: ClusterEvent) -> None: ...

    def cluster_events(self, cluster: str, count: int = 20) -> list[ClusterEvent]: ...

    # --- the last rebuild of the records after the store came back empty (broker.ha.recovery), as JSON
    def recovery_report(self) -> str | None: ...


class LeaderLease(Protocol):
    holder: str
    lease_seconds: float

    def acquire_or_renew(self) -> int | None:
        """Take or keep the lease: the fencing token while held, None while another replica holds it;
        raises StoreError when the store does not answer."""
        ...

    def release(self) -> bool:
        """Give the lease up if still held (shutdown). Returns whether it was."""
        ...


class RecoveryStore(Protocol):
    """What broker.ha.recovery needs of the store beyond StateStore: the run marker and restores."""

    def run_marker(self) -> str | None: ...

    def set_run_marker(self, run_id: str, report: str | None = None) -> str: ...

    def restore_job(self, record: JobRecord, event: JobEvent | None = None) -> bool: ...

    def restore_jobs(self, items: Sequence[tuple[JobRecord, JobEvent | None]]) -> list[bool]: ...

    def job_ids(self, state: JobState) -> set[str]: ...

    def list_jobs(self, states: Sequence[JobState] | None = None) -> list[JobRecord]: ...

    def recovery_report(self) -> str | None: ...


class BurstLedger(Protocol):
    """What the burst gate keeps (docs/burst.md): run times per shape key (newest first, bounded),
    the runs that cost money (one per job attempt, counted once), and each queued job's last verdict."""

    def run_times(self) -> dict[str, list[float]]: ...

    def add_run_time(self, key: str, seconds: float) -> None: ...

    def add_run(self, run: Run) -> bool:
        """Count one attempt's run; False when that attempt was already counted."""
        ...

    def runs(self, since: float) -> list[Run]:
        """The runs that ended at or after `since`."""
        ...

    def verdict(self, job_id: str) -> str | None: ...

    def set_verdict(self, job_id: str, verdict: str) -> None: ...

    def forget(self, job_id: str) -> None: ...

    def add_saving(self, saving: Saving) -> bool:
        """Count the cloud cost a burst-back move avoids; False when that attempt was already counted."""
        ...

    def savings(self, since: float) -> list[Saving]:
        """The savings recorded at or after `since`."""
        ...


class JobLister(Protocol):
    def page_jobs(self, query: JobQuery, after: str | None = None) -> JobPage:
        """The jobs `query` selects after position `after` (None: from the first), in submission order:
        at most query.limit, reading at most query.scan_budget() index entries; JobPage.next_after is
        None on the last page. StoreError when the store does not answer."""
        ...

    def page_job_docs(
        self, query: JobQuery, after: str | None = None, kept: KeptItems | None = None
    ) -> JobDocPage:
        """The same page, its records as their JSON documents, undecoded (an API page encodes its
        answer from them: broker.api.list_items). With `kept` (one page at a time), the items of
        jobs written since kept.cursor are dropped from it, the cursor moves on, and the documents of
        the jobs it still keeps come as None."""
        ...
