"""The pure side of paged job lists (broker.core.job_list): positions sort as (submitted time, id), a continue
token comes back as the position it was made from and only for the list it was made for, anything else
is refused naming `continue`; limits are bounded; and the list's direct job view is JobView's shape."""

from __future__ import annotations

import pytest

from broker.api.lists import job_view
from broker.api.schemas import JobView
from broker.core.errors import InvalidRequest
from broker.core.job_list import (
    MAX_LIMIT,
    BadContinue,
    JobQuery,
    decode_continue,
    encode_continue,
    position_of,
)
from broker.core.model import JobRecord, JobRequest, JobState, MigNeed, Placement


def test_positions_sort_by_submitted_time_then_id() -> None:
    positions = [
        position_of(1_800_000_000.5, "jb"),
        position_of(9.0, "jz"),
        position_of(1_800_000_000.5, "ja"),
        position_of(1_800_000_000.000001, "jz"),
        position_of(0.0, "jq"),
    ]
    assert sorted(positions) == [positions[4], positions[1], positions[3], positions[2], positions[0]]


def test_a_token_returns_its_position_for_the_same_list() -> None:
    query = JobQuery(states=(JobState.QUEUED, JobState.RUNNING), tenant="vision", limit=50)
    after = position_of(1_800_000_000.25, "j0123456789ab")
    token = encode_continue(query, after)
    assert after not in token  # opaque: not the position in clear
    same_filters = JobQuery(states=(JobState.RUNNING, JobState.QUEUED), tenant="vision", limit=10)
    assert decode_continue(same_filters, token) == after  # a page size may change between pages


@pytest.mark.parametrize(
    "other",
    [
        JobQuery(states=(JobState.QUEUED,), tenant="vision"),
        JobQuery(states=(JobState.QUEUED, JobState.RUNNING), tenant="nlp"),
        JobQuery(states=(JobState.QUEUED, JobState.RUNNING), tenant="vision", cluster="a"),
        JobQuery(states=(JobState.QUEUED, JobState.RUNNING), tenant="vision", name="x"),
    ],
)
def test_a_token_is_refused_for_a_list_with_other_filters(other: JobQuery) -> None:
    token = encode_continue(JobQuery(states=(JobState.QUEUED, JobState.RUNNING), tenant="vision"), "p")
    with pytest.raises(BadContinue, match="other filters") as e:
        decode_continue(other, token)
    assert e.value.field == "continue"


@pytest.mark.parametrize("token", ["", "!!!", "abc", "eyJ2IjoxfQ", "A" * 200])
def test_a_token_not_made_here_is_refused_naming_continue(token: str) -> None:
    with pytest.raises(BadContinue) as e:
        decode_continue(JobQuery(), token)
    assert e.value.field == "continue"


def test_an_altered_token_is_refused() -> None:
    token = encode_continue(JobQuery(), position_of(5.0, "jabc"))
    for i in range(len(token)):
        flipped = token[:i] + ("B" if token[i] == "A" else "A") + token[i + 1 :]
        with pytest.raises(BadContinue):
            decode_continue(JobQuery(), flipped)


@pytest.mark.parametrize("limit", [0, -1, MAX_LIMIT + 1])
def test_limit_is_bounded_naming_the_field(limit: int) -> None:
    with pytest.raises(InvalidRequest) as e:
        JobQuery(limit=limit)
    assert e.value.field == "limit"


def test_a_page_reads_a_bounded_part_of_the_index() -> None:
    assert JobQuery(limit=500).scan_budget() == 500
    assert JobQuery().scan_budget() is None  # unpaged: every match, as before paging
    filtered = JobQuery(states=(JobState.RUNNING,), limit=500).scan_budget()
    assert filtered is not None and 500 <= filtered <= 4 * 500


@pytest.mark.parametrize(
    "record",
    [
        JobRecord(id="j1", request=JobRequest("plain"), created_at=1.5, updated_at=2.5),
        JobRecord(
            id="j2",
            request=JobRequest(
                "full",
                tenant="vision",
                gpus_per_pod=2,
                pods=3,
                gpu_products=("H100-80GB", "A100-80GB"),
                mig_profile="1g.10gb",
                mig_need=MigNeed(10),
                numa_aligned=True,
                allow_burst=True,
                max_wait_seconds=600.0,
                command=("python",),
                args=("train.py",),
                env=({"name": "A", "value": "1"},),
            ),
            state=JobState.RUNNING,
            created_at=10.0,
            updated_at=11.0,
            reason="running",
            attempt=2,
            cluster="onprem-a",
            workload_name="gpufed-j2-2",
            placement=Placement("onprem-a", "H100-80GB", "nvidia.com/gpu", 2, 3, 87, {"binpack": 50}),
            trace_parent="00-" + "a" * 32 + "-" + "b" * 16 + "-01",
        ),
    ],
)
def test_the_lists_job_view_is_jobviews_shape(record: JobRecord) -> None:
    assert job_view(record) == JobView.of(record).model_dump(by_alias=True)
