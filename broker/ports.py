"""Ports: the Protocols the service layer needs from the outside world. Adapters implement them.

Clock           now() in epoch seconds; the only time source the service sees
ClusterGateway  create / delete / read the broker's Jobs in a member cluster
StateStore      summaries, per-node tables, reservations, jobs, events and idempotency keys (Redis in
                production)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from broker.model import (
    ClusterSummary,
    JobEvent,
    JobRecord,
    JobState,
    Reservation,
    WorkloadRef,
    WorkloadStatus,
)
from broker.node_detail import NodeDetail


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

    def placeable_summaries(self) -> list[ClusterSummary]:
        """Observed summaries minus live reservations: what the placer reads."""
        ...

    # --- reservations (assume / forget)
    def reserve(self, reservation: Reservation, now: float) -> bool:
        """Atomically reserve unless the cluster's free units (minus live reservations) can't cover it."""
        ...

    def release(self, job_id: str) -> None: ...

    def live_reservations(self, now: float) -> list[Reservation]: ...

    # --- jobs
    def create_job(self, record: JobRecord) -> JobRecord:
        """Store a new job; with an idempotency key already seen, returns the existing job instead."""
        ...

    def get_job(self, job_id: str) -> JobRecord | None: ...

    def save_job(self, record: JobRecord, expected_state: JobState | None = None) -> JobRecord:
        """Write the record; with expected_state, only if the stored state is still that (else Conflict)."""
        ...

    def list_jobs(self, states: Sequence[JobState] | None = None) -> list[JobRecord]: ...

    # --- events
    def append_event(self, event: JobEvent) -> None: ...

    def job_events(self, job_id: str) -> list[JobEvent]: ...
