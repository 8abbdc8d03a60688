"""The pure batch rules (issue 46): dependency verdicts per `when`, cycles, an array's cap, `--array`."""

from __future__ import annotations

import pytest

from broker.core.batch import Dependency, Never, Waiting, When, dependency_verdict, find_cycle
from broker.core.batch_fields import BatchFields
from broker.core.model import JobRecord, JobRequest, JobState
from broker.intake.batch_schemas import parse_array
from broker.queue.array_cap import ArrayCap

S = JobState


@pytest.mark.parametrize(
    ("when", "state", "verdict"),
    [
        (When.SUCCEEDED, S.RUNNING, Waiting),
        (When.SUCCEEDED, S.PENDING, Waiting),
        (When.SUCCEEDED, S.SUCCEEDED, None),
        (When.SUCCEEDED, S.FAILED, Never),
        (When.SUCCEEDED, S.CANCELLED, Never),
        (When.SUCCEEDED, S.LOST, Never),
        (When.SUCCEEDED, None, Never),  # the job is gone
        (When.FINISHED, S.QUEUED, Waiting),
        (When.FINISHED, S.SUCCEEDED, None),
        (When.FINISHED, S.FAILED, None),
        (When.FINISHED, S.CANCELLED, None),
        (When.FAILED, S.RUNNING, Waiting),
        (When.FAILED, S.FAILED, None),
        (When.FAILED, S.CANCELLED, None),
        (When.FAILED, S.SUCCEEDED, Never),
    ],
)
def test_a_job_dependency_per_when_and_state(
    when: When, state: JobState | None, verdict: type | None
) -> None:
    got = dependency_verdict([Dependency("job", "train", when, ("j1",))], {"j1": state})
    assert (got is None) if verdict is None else isinstance(got, verdict)


def test_the_reasons_say_what_is_waited_for_and_what_failed() -> None:
    dep = Dependency("job", "train", When.SUCCEEDED, ("j1",))
    assert dependency_verdict([dep], {"j1": S.RUNNING}) == Waiting("waiting for job train to be succeeded")
    never = dependency_verdict([dep], {"j1": S.FAILED})
    assert never == Never("dependency failed: job train ended FAILED, wanted succeeded")


def test_a_group_dependency_waits_for_every_member_including_those_added_later() -> None:
    dep = Dependency("group", "sweep", When.FINISHED, ("a", "b"))
    states = {"a": S.SUCCEEDED, "b": S.FAILED, "c": S.RUNNING}
    assert dependency_verdict([dep], states) is None
    got = dependency_verdict([dep], states, {"sweep": ["c"]})
    assert got == Waiting("waiting for group sweep (2 of 3 done) to be finished")
    ok = Dependency("group", "sweep", When.SUCCEEDED, ("a", "b"))
    assert isinstance(dependency_verdict([ok], states), Never)


def test_cycles_through_groups_are_found() -> None:
    own = [Dependency("group", "g1", When.SUCCEEDED)]
    assert find_cycle("g1", own, {}, {}) is not None
    # x (group g2) waits for group g1; a new job of g1 waiting for g2 would wait for itself
    waiting = {"x": (Dependency("group", "g1", When.SUCCEEDED, ("s",)),)}
    new = [Dependency("group", "g2", When.SUCCEEDED, ("x",))]
    assert "g1" in (find_cycle("g1", new, waiting, {"g2": ["x"]}) or "")
    assert find_cycle("g9", new, waiting, {"g2": ["x"]}) is None
    assert find_cycle("", [Dependency("job", "x", When.SUCCEEDED, ("x",))], waiting, {}) is None


def _member(i: int, state: JobState, tenant: str = "t", group: str = "hp", cap: int | None = 2) -> JobRecord:
    batch = BatchFields(group=group, array_index=i, array_count=8, parallelism=cap)
    return JobRecord(id=f"j{i}", request=JobRequest(name=f"hp-{i}", tenant=tenant, batch=batch), state=state)


def test_an_arrays_cap_counts_placed_members_and_those_placed_in_this_pass() -> None:
    cap = ArrayCap([_member(0, S.RUNNING), _member(9, S.RUNNING, tenant="other")])
    assert cap.blocked(_member(1, S.QUEUED)) is None
    cap.take(_member(1, S.QUEUED))
    assert cap.blocked(_member(2, S.QUEUED)) == "array hp: 2 of its members placed or running, parallelism 2"
    assert cap.blocked(_member(3, S.QUEUED, tenant="other")) is None  # another tenant's group of that name
    assert cap.blocked(_member(4, S.QUEUED, cap=None)) is None


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("0-49%8", {"count": 50, "parallelism": 8}),
        ("0-7", {"count": 8}),
        ("4", {"count": 4}),
        ("8%2", {"count": 8, "parallelism": 2}),
    ],
)
def test_the_cli_array_syntax(text: str, field: dict[str, int]) -> None:
    assert parse_array(text) == field


@pytest.mark.parametrize("text", ["1-8", "a-b", "0-", "%2", "3-1"])
def test_a_bad_array_is_refused_with_the_syntax(text: str) -> None:
    with pytest.raises(ValueError, match="--array"):
        parse_array(text)
