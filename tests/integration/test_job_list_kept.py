"""Pages for a reader that keeps items (adapters/redis_job_list.py with broker.core.job_list.KeptItems),
on a real redis-server: a job's document comes again exactly when the job was written since the
reader's cursor (by any writer); what the change stream cannot tell any more (trimmed, no cursor)
drops everything kept; filters and each-job-once hold as without keeping."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace

import orjson
import pytest

from adapters.redis_store import RedisStateStore
from broker.core.job_list import JobDocPage, JobQuery, KeptItems
from broker.core.model import JobRecord, JobRequest, JobState

pytestmark = pytest.mark.integration

NOW = 1_800_000_000.0


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="k" + uuid.uuid4().hex[:10])
    yield s
    s.close()


def job(i: int, tenant: str = "default") -> JobRecord:
    request = JobRequest(f"job-{i}", gpus_per_pod=1, tenant=tenant)
    return JobRecord(id=f"j{i:06d}", request=request, created_at=NOW + i * 0.001, updated_at=NOW)


def page(store: RedisStateStore, kept: KeptItems, query: JobQuery, after: str | None = None) -> JobDocPage:
    """A page as the API reads one, keeping an item for every document sent."""
    p = store.page_job_docs(query, after, kept)
    for job_id, raw in zip(p.ids, p.docs, strict=True):
        if raw is not None:
            kept.put(job_id, raw)
        assert kept.get(job_id) is not None
    return p


def sent(p: JobDocPage) -> list[str]:
    return [i for i, raw in zip(p.ids, p.docs, strict=True) if raw is not None]


def test_a_document_comes_again_only_for_a_job_written_since(store: RedisStateStore, redis_url: str) -> None:
    records = [job(i) for i in range(6)]
    store.create_jobs([(r, None) for r in records])
    kept = KeptItems()
    q = JobQuery(limit=10)
    first = page(store, kept, q)
    assert list(first.ids) == sent(first) == [r.id for r in records]
    assert sent(page(store, kept, q)) == []  # nothing written since: ids only

    other = RedisStateStore(redis_url, prefix=store.prefix)
    try:  # another writer (another broker replica) moves two jobs on
        other.save_job(replace(records[1], state=JobState.RUNNING, cluster="a"))
        other.save_job(replace(records[4], state=JobState.SUCCEEDED, cluster="b"))
    finally:
        other.close()
    third = page(store, kept, q)
    assert list(third.ids) == [r.id for r in records]
    assert sent(third) == [records[1].id, records[4].id]
    states = {i: orjson.loads(raw)["state"] for i, raw in zip(third.ids, third.docs, strict=True) if raw}
    assert states == {records[1].id: "RUNNING", records[4].id: "SUCCEEDED"}


def test_a_cursor_the_stream_cannot_answer_drops_everything_kept(store: RedisStateStore) -> None:
    records = [job(i) for i in range(4)]
    store.create_jobs([(r, None) for r in records])
    kept = KeptItems()
    q = JobQuery(limit=10)
    page(store, kept, q)
    assert sent(page(store, kept, q)) == []
    kept.cursor = "1-0"  # older than the stream's first entry: entries after it may have been trimmed
    assert sent(page(store, kept, q)) == [r.id for r in records]
    assert sent(page(store, kept, q)) == []
    store.client.delete(f"{store.prefix}:changes")  # the stream is gone (a Redis that lost its data)
    assert sent(page(store, kept, q)) == [r.id for r in records]


def test_a_walk_with_kept_items_sees_each_job_once_with_its_current_state(store: RedisStateStore) -> None:
    records = [job(i, tenant=("a", "b")[i % 2]) for i in range(30)]
    store.create_jobs([(r, None) for r in records])
    kept = KeptItems()
    for query in (
        JobQuery(),
        JobQuery(tenant="a", limit=3),
        JobQuery(states=(JobState.QUEUED,), limit=5),
    ):
        page(store, kept, query)  # something kept from an earlier list
    moved: dict[str, JobState] = {}
    seen: list[str] = []
    after = None
    query = JobQuery(states=(JobState.QUEUED, JobState.RUNNING), limit=4)
    while True:
        p = page(store, kept, query, after)
        for job_id in p.ids:
            item = kept.get(job_id)
            assert item is not None
            assert orjson.loads(item)["state"] == moved.get(job_id, JobState.QUEUED).value
        seen += p.ids
        if p.next_after is None:
            break
        after = p.next_after
        last = int(seen[-1][1:])
        store.save_job(replace(records[last], state=JobState.RUNNING))  # one already listed
        moved[records[last].id] = JobState.RUNNING
        ahead = records[min(29, last + 2)]
        store.save_job(replace(ahead, state=JobState.SUCCEEDED))  # one ahead leaves the wanted states
        moved[ahead.id] = JobState.SUCCEEDED
        later = records[min(29, last + 3)]
        if moved.get(later.id) is None:  # one ahead stays wanted: its kept item is out of date
            store.save_job(replace(later, state=JobState.RUNNING, reason="moved"))
            moved[later.id] = JobState.RUNNING
    assert len(seen) == len(set(seen))
    assert set(seen) == {r.id for r in records if moved.get(r.id) is not JobState.SUCCEEDED}
