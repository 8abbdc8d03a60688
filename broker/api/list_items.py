"""A job list page's answer, encoded from the stored record documents without building JobRecords.

The store hands a page over as each job's record document: the JSON that TypeAdapter(JobRecord) writes
(the dataclasses' fields by name, enums by value; broker.core.job_list.JobDocPage). Validating 500 of
them into JobRecords and building their views cost ~35 us a job; here a document is parsed with orjson
and its view read straight from it (`view_of_doc`, the same dict broker.api.lists.job_view builds from
the record: tests/unit/test_list_items.py checks both give the same bytes, for documents written by
older brokers too: a field they lack takes the dataclass default, as validation would give it).

A job that is not QUEUED looks the same whatever the queue does, so its encoded item is kept by job id
(broker.core.job_list.KeptItems): the store follows its change stream from the items' cursor, drops
the items of jobs written since, and sends documents only for the jobs not kept; a page of unchanged
jobs is their ids from Redis and their kept bytes joined. QUEUED jobs are read and parsed each time:
their items carry the queue's current view (position, reason, predicted start).

Owns the document-to-view mapping and the page's encoding; reads nothing itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any

import orjson

from broker.core.job_list import JobDocPage, KeptItems
from broker.core.model import JobRecord, JobRequest, JobState, MigNeed, Placement
from broker.queue import queueing

__all__ = ["encode_page", "view_of_doc"]

_QUEUED = JobState.QUEUED.value
_NO_SLOT = b',"queuePosition":null,"queueReason":null}'


def _json_default(value: object) -> object:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple):
        return [_json_default(v) for v in value]
    return value


def _defaults(cls: type) -> dict[str, Any]:
    """The fields of dataclass `cls` that have defaults, in their JSON form (what validation fills in
    for a document written before the field existed)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = _json_default(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = _json_default(f.default_factory())
    return out


_RECORD = _defaults(JobRecord)
_REQUEST = _defaults(JobRequest)
_PLACEMENT = _defaults(Placement)
_MIG_NEED = _defaults(MigNeed)


def _float(value: Any) -> Any:
    return None if value is None else float(value)


def view_of_doc(doc: Mapping[str, Any]) -> dict[str, Any]:
    """broker.api.lists.job_view of the record whose document is `doc` (a parsed record document)."""
    d = {**_RECORD, **doc}
    req = {**_REQUEST, **d["request"]}
    p = d["placement"]
    if p is not None:
        p = {**_PLACEMENT, **p}
    need = req["mig_need"]
    tp = d["trace_parent"]
    batch = req["batch"] if isinstance(req["batch"], dict) else {}  # docs/batch.md (absent: older brokers)
    trace: list[str] = tp.split("-") if tp else []
    return {
        "id": d["id"],
        "name": req["name"],
        "tenant": req["tenant"],
        "state": d["state"],
        "reason": d["reason"],
        "attempt": d["attempt"],
        "cluster": d["cluster"],
        "workload": d["workload_name"],
        "placement": None
        if p is None
        else {
            "cluster": p["cluster"],
            "product": p["product"],
            "resourceName": p["resource_name"],
            "unitsPerPod": p["units_per_pod"],
            "pods": p["pods"],
            "score": p["score"],
            "scores": p["scores"],
            "migProfile": p["mig_profile"],
            "burst": p["burst"],
            "clique": p["clique"],
            "dra": p.get("dra", False),  # a document written before the claim kind was per job has none
        },
        "createdAt": float(d["created_at"]),
        "updatedAt": float(d["updated_at"]),
        "request": {
            "gpus": req["gpus_per_pod"],
            "pods": req["pods"],
            "gpuProducts": req["gpu_products"],
            "migProfile": req["mig_profile"],
            "migNeedGB": None if need is None else {**_MIG_NEED, **need}["memory_gb"],
            "numaAligned": req["numa_aligned"],
            "allowBurst": req["allow_burst"],
            "maxWaitSeconds": _float(req["max_wait_seconds"]),
            "failover": req["failover"],
            "onImagePullFailure": req["on_image_pull_failure"],
            "image": req["image"],
            "command": req["command"],
            "args": req["args"],
            "env": req["env"],
            "labels": req["labels"],
            "priorityClass": req["priority_class"],
            "nvlinkClique": req["nvlink_clique"],
            "checkpointGraceSeconds": req["checkpoint_grace_seconds"],
        },
        "traceId": trace[1] if len(trace) == 4 else None,
        "warnings": d["warnings"],
        "source": req["source"] or None,
        "resumeFrom": d["resume_from"],
        "group": batch.get("group") or None,
        "dependsOn": [
            {x["kind"]: x["ref"], "when": x.get("when", "succeeded")} for x in batch.get("depends_on", ())
        ],
        "heldBy": d["held_by"],
    }


QueueSlots = Callable[[list[str]], tuple[Mapping[str, queueing.Slot], Mapping[str, dict[str, Any]]]]


def encode_page(page: JobDocPage, token: str | None, queue: QueueSlots, kept: KeptItems) -> bytes:
    """The JobList answer (the bytes orjson.dumps writes for broker.api.lists' answer dict) for `page`;
    `queue(ids)` gives the queued ones' slots and predictions (by id). The items of jobs that are not
    queued are kept in `kept` (one page at a time), and taken from it where the page sent no
    document."""
    parts: list[bytes] = []
    queued: list[tuple[int, dict[str, Any]]] = []
    for job_id, raw in zip(page.ids, page.docs, strict=True):
        item = kept.get(job_id) if raw is None else None
        if item is None:
            if raw is None:
                raise AssertionError(f"job {job_id}: neither kept nor sent")
            view = view_of_doc(orjson.loads(raw))
            if view["state"] == _QUEUED:
                queued.append((len(parts), view))
            else:
                item = orjson.dumps(view)[:-1] + _NO_SLOT
                kept.put(job_id, item)
        parts.append(item or b"")
    if queued:
        slots, predicted = queue([view["id"] for _, view in queued])
        for i, view in queued:
            slot = slots.get(view["id"])
            view["queuePosition"] = slot.position if slot is not None else None
            view["queueReason"] = slot.reason if slot is not None else None
            view.update(predicted[view["id"]])
            parts[i] = orjson.dumps(view)
    metadata = b"{}" if token is None else orjson.dumps({"continue": token})
    items = b",".join(parts)
    return (
        b'{"kind":"JobList","apiVersion":"gpufed/v1","metadata":' + metadata + b',"items":[' + items + b"]}"
    )
