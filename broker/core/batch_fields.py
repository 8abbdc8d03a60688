"""The batch fields a JobRequest carries (JobRequest.batch; the rules over them: broker.core.batch).

Plain frozen data, importing nothing of the broker, so that broker.core.model can hold it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["BatchFields", "Dependency", "Notify", "When"]


class When(StrEnum):
    """When a dependency is met (Slurm's afterok, afterany, afternotok)."""

    SUCCEEDED = "succeeded"
    FINISHED = "finished"
    FAILED = "failed"


@dataclass(frozen=True)
class Dependency:
    kind: str  # "job" or "group"
    ref: str  # as the user named it: a job's id or name, a group's name
    when: When = When.SUCCEEDED
    ids: tuple[str, ...] = ()  # the jobs it stands for when submitted (a job: its id)

    @property
    def label(self) -> str:
        return f"{self.kind} {self.ref}"


@dataclass(frozen=True)
class Notify:
    """Where to say that a job reached one of the states in `on` (a webhook, signed: docs/batch.md)."""

    webhook: str
    on: tuple[str, ...] = ("SUCCEEDED", "FAILED")


@dataclass(frozen=True)
class BatchFields:
    group: str = ""  # the job's group ("" none); an array's members share one
    array_index: int | None = None  # GPUFED_ARRAY_INDEX of an array member
    array_count: int | None = None
    parallelism: int | None = None  # an array's members placed or running at once, at most
    depends_on: tuple[Dependency, ...] = ()
    notify: Notify | None = None
