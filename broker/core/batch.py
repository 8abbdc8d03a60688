"""A job's batch fields (docs/batch.md): its group, its place in an array, its dependencies, where to
notify; and the pure rules over them.

    BatchFields        JobRequest.batch: group, array index/count/parallelism, dependsOn, notify
    Dependency         one dependsOn entry: a job (by id) or a group (by name), and when it is met
    dependency_verdict what a PENDING job's dependencies say now: met, waiting (and for what), or never
                       to be met (Slurm's DependencyNeverSatisfied: the job ends FAILED without running)
    find_cycle         whether a new job's dependencies lead back to it (refused at submit, 422)

A group dependency stands for every job of the group: the members when the dependent was submitted
(Dependency.ids) and every member still active when it is judged. Groups belong to a tenant.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from broker.core.batch_fields import BatchFields, Dependency, Notify, When
from broker.core.model import JobState

__all__ = [
    "BatchFields",
    "Dependency",
    "Never",
    "Notify",
    "Verdict",
    "Waiting",
    "When",
    "dependency_verdict",
    "find_cycle",
]

_NOT_OK = (JobState.FAILED, JobState.CANCELLED, JobState.LOST)


@dataclass(frozen=True)
class Waiting:
    reason: str


@dataclass(frozen=True)
class Never:
    reason: str


Verdict = Waiting | Never | None  # None: every dependency is met


def _one(dep: Dependency, state: JobState | None) -> bool | None:
    """True: met; False: can never be met; None: not yet. `state` None: the job is gone."""
    if state is None:
        return False
    if not state.terminal:
        return None
    if dep.when is When.FINISHED:
        return True
    failed = state in _NOT_OK
    return failed if dep.when is When.FAILED else not failed


def dependency_verdict(
    deps: Iterable[Dependency],
    states: Mapping[str, JobState | None],
    members: Mapping[str, Iterable[str]] | None = None,
) -> Verdict:
    """`states`: each job id's state (None: no such job now); `members`: per group name, the ids of
    its members active now (added to those the dependency was submitted with)."""
    waiting: list[str] = []
    for dep in deps:
        ids = list(
            dict.fromkeys([*dep.ids, *((members or {}).get(dep.ref, ()) if dep.kind == "group" else ())])
        )
        pending = 0
        for job_id in ids:
            met = _one(dep, states.get(job_id))
            if met is False:
                state = states.get(job_id)
                ended = "no longer exists" if state is None else f"ended {state}"
                who = dep.label if dep.kind == "job" else f"{dep.label} (job {job_id})"
                return Never(f"dependency failed: {who} {ended}, wanted {dep.when}")
            if met is None:
                pending += 1
        if pending:
            of = f" ({len(ids) - pending} of {len(ids)} done)" if dep.kind == "group" else ""
            waiting.append(f"{dep.label}{of} to be {dep.when}")
    return Waiting("waiting for " + ", ".join(waiting)) if waiting else None


def find_cycle(
    group: str,
    deps: Iterable[Dependency],
    waiting: Mapping[str, Iterable[Dependency]],
    members: Mapping[str, Iterable[str]],
) -> str | None:
    """Why a new job of `group` with these dependencies would wait for itself, or None. `waiting`: the
    dependencies of the jobs that still wait (by id); `members`: the active members of each group."""
    if group and any(d.kind == "group" and d.ref == group for d in deps):
        return f"group {group} is this job's own group"
    seen: set[str] = set()
    todo = [
        (i, d.label) for d in deps for i in (*d.ids, *(members.get(d.ref, ()) if d.kind == "group" else ()))
    ]
    while todo:
        job_id, path = todo.pop()
        if job_id in seen:
            continue
        seen.add(job_id)
        for d in waiting.get(job_id, ()):
            step = f"{path} -> job {job_id} -> {d.label}"
            if group and d.kind == "group" and d.ref == group:
                return f"{step}, this job's own group"
            todo.extend((i, step) for i in (*d.ids, *(members.get(d.ref, ()) if d.kind == "group" else ())))
    return None
