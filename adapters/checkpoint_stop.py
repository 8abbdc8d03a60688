"""The checkpoint stop on Kubernetes (docs/migration.md): stop one attempt of a job so that it saves.

Owns `stop_for_checkpoint` and `reported_checkpoints` over one member's KubeRest:

    stop_for_checkpoint  1. list the attempt's pods (labels gpufed.io/job-id, gpufed.io/attempt), keeping the
                            list's resourceVersion
                         2. delete the Job with propagationPolicy Orphan: its controller makes no
                            replacement pods, and the pods keep running for now
                         3. delete each pod with DeleteOptions.gracePeriodSeconds = the job's grace: the
                            kubelet sends SIGTERM, the container saves and writes where to its
                            terminationMessagePath
                         4. watch the pods from the list's resourceVersion until each is terminal or
                            deleted (a DELETED event carries the pod's last state), at most `wait_seconds`:
                            the reference is status.containerStatuses[].state.terminated.message
                         Returns (reference or None, whether every pod was seen gone).
    reported_checkpoints the annotation gpufed.io/checkpoint of the broker's running pods in a namespace,
                         by job id: the last checkpoint each job reported (what a lost cluster's job
                         resumes from)

The companions (PodGroup, claim templates) are deleted by the caller (KubeGateway.delete_workload).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from adapters.kube_rest import ApiStatus, KubeRest
from broker.core.errors import ClusterRejected, ClusterUnreachable
from broker.workload import checkpoint
from broker.workload.manifest import ATTEMPT_LABEL, JOB_ID_LABEL, job_id_label_value

log = logging.getLogger(__name__)

__all__ = ["reported_checkpoints", "stop_for_checkpoint"]


def _pods_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods"


def _gone(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name") or "")


def _delete(rest: KubeRest, path: str, body: Mapping[str, Any]) -> None:
    try:
        rest.request("DELETE", path, body=dict(body))
    except ApiStatus as e:
        if e.code != 404:
            raise ClusterRejected(rest.cluster, f"delete {path}: {e.code} {e.message}") from e


def stop_for_checkpoint(
    rest: KubeRest,
    namespace: str,
    name: str,
    job_id: str,
    attempt: int,
    grace_seconds: int,
    wait_seconds: float,
) -> tuple[str | None, bool]:
    """Stop the attempt's pods with `grace_seconds` and read the checkpoint reference they leave."""
    selector = [("labelSelector", f"{JOB_ID_LABEL}={job_id_label_value(job_id)},{ATTEMPT_LABEL}={attempt}")]
    path = _pods_path(namespace)
    try:
        pods, rv = rest.list_pages(path, selector=selector)
    except ApiStatus as e:
        raise ClusterRejected(rest.cluster, f"list pods: {e.code} {e.message}") from e
    reference: str | None = None
    live: set[str] = set()
    for pod in pods:
        reference = reference or checkpoint.termination_reference(pod)
        if not _gone(pod):
            live.add(_name(pod))
    orphan = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Orphan"}
    job_path = f"/apis/batch/v1/namespaces/{quote(namespace, safe='')}/jobs/{quote(name, safe='')}"
    _delete(rest, job_path, orphan)
    graceful = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": grace_seconds}
    for pod_name in sorted(live):
        _delete(rest, f"{path}/{quote(pod_name, safe='')}", graceful)
    deadline = time.monotonic() + wait_seconds
    while live:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            for event in rest.watch(path, rv, max(1, int(left)), left + 5.0, selector):
                obj = event.get("object") or {}
                kind = event.get("type")
                if kind == "ERROR":  # 410 Gone: read the pods again from a fresh list
                    pods, rv = rest.list_pages(path, selector=selector)
                    present = {_name(p) for p in pods if not _gone(p)}
                    for p in pods:
                        reference = reference or checkpoint.termination_reference(p)
                    live &= present
                    break
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                if kind == "BOOKMARK":
                    continue
                reference = checkpoint.termination_reference(obj) or reference
                if kind == "DELETED" or _gone(obj):
                    live.discard(_name(obj))
                if not live or time.monotonic() >= deadline:
                    break
        except ClusterUnreachable as e:
            log.warning("cluster %s: following the stop of %s: %s", rest.cluster, name, e)
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        except ApiStatus as e:
            raise ClusterRejected(rest.cluster, f"watch pods: {e.code} {e.message}") from e
    return reference, not live


def reported_checkpoints(rest: KubeRest, namespace: str) -> dict[tuple[str, int], str]:
    """(job id label value, attempt) -> the checkpoint its running pod last reported (annotation)."""
    try:
        pods, _ = rest.list_pages(_pods_path(namespace), selector=[("labelSelector", JOB_ID_LABEL)])
    except ApiStatus as e:
        raise ClusterRejected(rest.cluster, f"list pods: {e.code} {e.message}") from e
    out: dict[tuple[str, int], str] = {}
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        ref = checkpoint.reported_reference(pod)
        attempt = str(labels.get(ATTEMPT_LABEL) or "")
        if ref is not None and attempt.isdigit():
            out[(str(labels.get(JOB_ID_LABEL)), int(attempt))] = ref
    return out
