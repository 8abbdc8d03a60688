"""A list page encoded from the stored record documents (broker.api.list_items) is, byte for byte, the
answer the records' views give (broker.api.lists.job_view + queue fields, orjson): for records of every
shape, for documents written before fields existed (validation fills in defaults; so must the view),
for queued jobs with their place and predicted start; and an unchanged document's item is reused while
a changed one is read again."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import orjson
import pytest
from pydantic import TypeAdapter

from broker.api.burst import prediction_view
from broker.api.list_items import encode_page, view_of_doc
from broker.api.lists import job_view
from broker.burst.wait_prediction import Prediction
from broker.core.job_list import JobDocPage, KeptItems
from broker.core.model import (
    FailoverPolicy,
    ImagePullFailure,
    JobRecord,
    JobRequest,
    JobState,
    MigNeed,
    Placement,
)
from broker.core.topology import NvlinkClique
from broker.queue import queueing

_JOB = TypeAdapter(JobRecord)


def _full(i: int, state: JobState) -> JobRecord:
    return JobRecord(
        id=f"j{i:04d}",
        request=JobRequest(
            f"full-{i}",
            tenant="vision",
            gpus_per_pod=2,
            pods=3,
            gpu_products=("H100-80GB", "A100-80GB"),
            mig_profile="1g.10gb",
            mig_need=MigNeed(10, 2),
            numa_aligned=True,
            allow_burst=True,
            max_wait_seconds=600,  # an int where a float goes: the view shows 600.0 either way
            command=("python",),
            args=("train.py", "--x=1"),
            env=({"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s"}}}),
            labels={"team": "ml", "é": "ü"},
            priority_class="high",
            failover=FailoverPolicy.NEVER,
            nvlink_clique=NvlinkClique.REQUIRED,
            on_image_pull_failure=ImagePullFailure.REQUEUE,
            checkpoint_grace_seconds=30,
            source="hub:jobs.batch/ns/x",
        ),
        state=state,
        created_at=10 + i,  # an int where a float goes
        updated_at=11.000001,
        reason='running "quoted" \u2603',
        attempt=2,
        cluster="onprem-a",
        workload_name="gpufed-j2-2",
        placement=Placement(
            "onprem-a", "H100-80GB", "nvidia.com/gpu", 2, 3, 87, {"binpack": 50}, "1g.10gb", True, clique="c1"
        ),
        trace_parent="00-" + "a" * 32 + "-" + "b" * 16 + "-01",
        warnings=("never fits: x",),
        resume_from="s3://ckpt/1",
    )


def _records() -> list[JobRecord]:
    rng = random.Random(7)
    out = [JobRecord(id="j-plain", request=JobRequest("plain"), created_at=1.5, updated_at=2.5)]
    out += [_full(i, state) for i, state in enumerate(JobState)]
    for i in range(40):  # mixed shapes
        placement = None
        if rng.random() < 0.5:
            placement = Placement(f"c{i % 3}", "A100", "nvidia.com/gpu", 1, 1, rng.randint(0, 100))
        out.append(
            JobRecord(
                id=f"r{i:03d}",
                request=JobRequest(f"n{i}", tenant=rng.choice(["a", "b"]), gpus_per_pod=rng.randint(0, 8)),
                state=rng.choice(list(JobState)),
                created_at=rng.random() * 2e9,
                updated_at=rng.random() * 2e9,
                cluster=placement.cluster if placement else None,
                placement=placement,
                trace_parent=rng.choice([None, "", "garbage", "00-" + "c" * 32 + "-" + "d" * 16 + "-01"]),
            )
        )
    return out


def _slots(records: list[JobRecord]) -> dict[str, queueing.Slot]:
    queued = [r for r in records if r.state is JobState.QUEUED]
    return {
        r.id: queueing.Slot(r, n + 1, 0, 0, blocked="quota x" if n % 2 else None)
        for n, r in enumerate(queued)
    }


def _predictions(records: list[JobRecord]) -> dict[str, Prediction]:
    queued = [r for r in records if r.state is JobState.QUEUED]
    return {r.id: Prediction(r.id, "onprem-a", "H100", 100.0, 5.5, 1, None) for r in queued[::2]}


def _as_before(records: list[JobRecord], token: str | None) -> bytes:
    """What the list answered before it read documents: the stored records' views, queue fields, orjson."""
    slots, predicted = _slots(records), _predictions(records)
    items = []
    for r in [_JOB.validate_json(_JOB.dump_json(r)) for r in records]:
        body = job_view(r)
        slot = slots.get(r.id) if r.state is JobState.QUEUED else None
        body["queuePosition"] = slot.position if slot is not None else None
        body["queueReason"] = slot.reason if slot is not None else None
        if r.state is JobState.QUEUED:
            body.update(prediction_view(predicted.get(r.id)))
        items.append(body)
    metadata: dict[str, Any] = {} if token is None else {"continue": token}
    return orjson.dumps({"kind": "JobList", "apiVersion": "gpufed/v1", "metadata": metadata, "items": items})


def _page(records: list[JobRecord], kept: KeptItems | None = None) -> JobDocPage:
    """A page as the store sends it: no document for a job whose item `kept` holds."""
    docs = [None if kept is not None and kept.get(r.id) else _JOB.dump_json(r) for r in records]
    return JobDocPage(tuple(r.id for r in records), tuple(docs), None)


def _queue(records: list[JobRecord]) -> Any:
    slots, predicted = _slots(records), _predictions(records)
    asked: list[list[str]] = []

    def queue(ids: list[str]) -> tuple[Mapping[str, queueing.Slot], dict[str, dict[str, Any]]]:
        asked.append(ids)
        return slots, {i: prediction_view(predicted.get(i)) for i in ids}

    return queue, asked


@pytest.mark.parametrize("token", [None, "tok-en_1"])
def test_a_page_from_documents_is_the_answer_the_views_give(token: str | None) -> None:
    records = _records()
    page = _page(records)
    queue, asked = _queue(records)
    got = encode_page(page, token, queue, KeptItems())
    assert got == _as_before(records, token)
    assert asked == [[r.id for r in records if r.state is JobState.QUEUED]]


def test_each_documents_view_is_the_records_view() -> None:
    for r in _records():
        raw = _JOB.dump_json(r)
        assert orjson.dumps(view_of_doc(orjson.loads(raw))) == orjson.dumps(job_view(_JOB.validate_json(raw)))


# fields older records were written without (each added after the first release)
_LATER = {
    "record": [
        "resume_from",
        "move_to",
        "avoid",
        "warnings",
        "trace_parent",
        "not_before",
        "dispatch_failures",
    ],
    "request": [
        "on_image_pull_failure",
        "checkpoint_grace_seconds",
        "workload",
        "avoid_clusters",
        "source",
        "nvlink_clique",
        "env_from",
        "volumes",
        "volume_mounts",
        "pod_annotations",
    ],
    "placement": ["clique", "dra", "gfd_products", "preferred_nodes", "burst", "mig_profile", "scores"],
    "mig_need": ["compute_slices"],
}


def test_a_document_written_before_fields_existed_reads_as_validation_reads_it() -> None:
    for r in _records():
        doc = orjson.loads(_JOB.dump_json(r))
        for key in _LATER["record"]:
            doc.pop(key, None)
        for key in _LATER["request"]:
            doc["request"].pop(key, None)
        if doc["placement"] is not None:
            for key in _LATER["placement"]:
                doc["placement"].pop(key)
        if doc["request"]["mig_need"] is not None:
            doc["request"]["mig_need"].pop("compute_slices")
        old = orjson.dumps(doc)
        assert orjson.dumps(view_of_doc(orjson.loads(old))) == orjson.dumps(job_view(_JOB.validate_json(old)))


def test_a_kept_item_is_sent_again_and_a_changed_job_read_again() -> None:
    kept = KeptItems(max_items=3)
    running = _full(1, JobState.RUNNING)
    queued = _full(2, JobState.QUEUED)
    queue, asked = _queue([running, queued])
    first = encode_page(_page([running, queued]), None, queue, kept)
    assert len(kept) == 1 and kept.get(running.id)  # a queued item follows the queue: never kept
    again = _page([running, queued], kept)
    assert again.docs[0] is None and again.docs[1] is not None
    assert encode_page(again, None, queue, kept) == first
    assert len(asked) == 2  # the queued job is placed in the queue on every page

    done = replace(running, state=JobState.SUCCEEDED, reason="done")
    kept.forget([running.id])  # what the store does for a job written since the cursor
    second = orjson.loads(encode_page(_page([done], kept), None, queue, kept))
    assert second["items"][0]["state"] == "SUCCEEDED" and second["items"][0]["reason"] == "done"

    for i in range(5):  # bounded: dropped whole when full
        encode_page(_page([_full(10 + i, JobState.RUNNING)]), None, queue, kept)
        assert len(kept) <= 3


def test_a_page_without_a_document_for_a_job_not_kept_is_refused() -> None:
    queue, _ = _queue([])
    with pytest.raises(AssertionError, match="neither kept nor sent"):
        encode_page(JobDocPage(("j1",), (None,), None), None, queue, KeptItems())
