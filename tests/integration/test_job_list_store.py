"""Paged job lists on a real, private redis-server (adapters/redis_job_list.py via RedisStateStore):
each job exactly once across pages while jobs are added and change state, filters, bounded pages, and
records stored before the index existed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest

from adapters.redis_store import RedisStateStore
from broker.core.job_list import JobQuery
from broker.core.model import JobRecord, JobRequest, JobState

pytestmark = pytest.mark.integration

NOW = 1_800_000_000.0


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="t" + uuid.uuid4().hex[:10])
    yield s
    s.close()


def job(i: int, tenant: str = "default", at: float | None = None, name: str | None = None) -> JobRecord:
    created = NOW + i * 0.001 if at is None else at
    request = JobRequest(name or f"job-{i}", gpus_per_pod=1, tenant=tenant)
    return JobRecord(id=f"j{i:06d}", request=request, created_at=created, updated_at=created)


def walk(store: RedisStateStore, query: JobQuery, between: object = None) -> list[list[str]]:
    """Every page's job ids, following next_after to the end; `between(page_no)` runs between pages."""
    pages: list[list[str]] = []
    after: str | None = None
    while True:
        page = store.page_jobs(query, after)
        pages.append([r.id for r in page.items])
        if page.next_after is None:
            return pages
        assert len(pages) < 1000, "the walk does not end"
        after = page.next_after
        if callable(between):
            between(len(pages))


def test_a_walk_returns_each_job_once_in_submission_order(store: RedisStateStore) -> None:
    records = [job(i) for i in range(23)]
    store.create_jobs([(r, None) for r in reversed(records)])  # stored out of order
    pages = walk(store, JobQuery(limit=5))
    assert [len(p) for p in pages] == [5, 5, 5, 5, 3]
    assert [i for p in pages for i in p] == [r.id for r in records]


def test_jobs_with_the_same_submit_time_are_ordered_by_id(store: RedisStateStore) -> None:
    same = [job(i, at=NOW) for i in (3, 1, 2)]
    store.create_jobs([(r, None) for r in same])
    assert [i for p in walk(store, JobQuery(limit=2)) for i in p] == ["j000001", "j000002", "j000003"]


def test_a_walk_sees_each_job_once_while_jobs_are_added_and_change_state(store: RedisStateStore) -> None:
    first = [job(i) for i in range(40)]
    store.create_jobs([(r, None) for r in first])
    added: list[JobRecord] = []

    def churn(page_no: int) -> None:
        # jobs already returned and jobs still ahead change state; new jobs are submitted
        for r in (first[page_no * 3], first[39 - page_no]):
            state = JobState.RUNNING if page_no % 2 else JobState.SUCCEEDED
            store.save_job(replace(r, state=state, cluster="onprem-a"))
        extra = job(1000 + page_no)
        store.create_job(extra)
        added.append(extra)

    seen = [i for p in walk(store, JobQuery(limit=7), between=churn) for i in p]
    assert len(seen) == len(set(seen)), "a job came twice"
    assert set(r.id for r in first) <= set(seen), "a job that existed when the walk began was missed"
    assert set(seen) <= {r.id for r in first + added}


def test_filters_by_state_tenant_cluster_and_name(store: RedisStateStore) -> None:
    a = [job(i, tenant="vision") for i in range(6)]
    b = [job(10 + i, tenant="nlp", name="same") for i in range(4)]
    store.create_jobs([(r, None) for r in a + b])
    store.save_job(replace(a[1], state=JobState.RUNNING, cluster="onprem-a"))
    store.save_job(replace(a[4], state=JobState.RUNNING, cluster="onprem-b"))
    store.save_job(replace(b[2], state=JobState.RUNNING, cluster="onprem-a"))

    def ids(query: JobQuery) -> list[str]:
        return [i for p in walk(store, query) for i in p]

    assert ids(JobQuery(tenant="nlp", limit=3)) == [r.id for r in b]
    assert ids(JobQuery(states=(JobState.RUNNING,), limit=1)) == [a[1].id, a[4].id, b[2].id]
    assert ids(JobQuery(states=(JobState.RUNNING,), tenant="vision")) == [a[1].id, a[4].id]
    assert ids(JobQuery(cluster="onprem-a", limit=2)) == [a[1].id, b[2].id]
    assert ids(JobQuery(name="same", tenant="nlp", states=(JobState.QUEUED,))) == [b[0].id, b[1].id, b[3].id]
    assert ids(JobQuery(name="job-3")) == [a[3].id]
    assert ids(JobQuery(tenant="nobody", limit=10)) == []


def test_a_filtered_page_reads_a_bounded_part_of_the_index(store: RedisStateStore) -> None:
    """One match behind thousands of others: pages come back short (even empty) with a token, rather
    than one page reading every job."""
    records = [job(i) for i in range(2500)]
    store.create_jobs([(r, None) for r in records])
    store.save_job(replace(records[-1], state=JobState.RUNNING))
    query = JobQuery(states=(JobState.RUNNING,), limit=10)
    budget = query.scan_budget()
    assert budget is not None and budget < len(records)
    pages = walk(store, query)
    assert len(pages) >= len(records) // budget
    assert [i for p in pages for i in p] == [records[-1].id]


def test_jobs_stored_before_the_index_existed_are_listed(store: RedisStateStore) -> None:
    records = [job(i) for i in range(5)]
    store.create_jobs([(r, None) for r in records])
    r = store.client
    r.delete(f"{store.prefix}:jobs:order", f"{store.prefix}:jobs:order:tenant:default")
    late = job(7)
    store.save_job(late)  # written by save_job alone: in the jobs set, never created
    assert [i for p in walk(store, JobQuery(limit=4)) for i in p] == [x.id for x in [*records, late]]
    assert [i for p in walk(store, JobQuery(tenant="default", limit=4)) for i in p] == [
        x.id for x in [*records, late]
    ]


def test_an_unpaged_list_answers_every_match_at_once(store: RedisStateStore) -> None:
    records = [job(i) for i in range(12)]
    store.create_jobs([(r, None) for r in records])
    page = store.page_jobs(JobQuery())
    assert page.next_after is None
    assert [x.id for x in page.items] == [x.id for x in records]
