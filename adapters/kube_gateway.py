"""The ClusterGateway on Kubernetes: create, delete and read the broker's Jobs in member clusters.

Owns the write side of the Kubernetes edge (broker.core.ports.ClusterGateway):
    create_workload   (the Job's POST answer goes to `created_job`, a hook the watching gateway keeps it
                      with; a DRA claim template's owner uid comes from it too, no GET)
                      companions first (the tenant's Namespace and LocalQueue when the broker may create
                      them, asked for once per process; a scheduling.x-k8s.io PodGroup), then the
                      batch/v1 Job; 409 AlreadyExists is success, so a retried create is harmless
    delete_workload   the Job with propagationPolicy Background (its pods follow), and a same-named PodGroup,
                      ResourceClaimTemplate (DRA) and ComputeDomain (NVLink, docs/topology.md);
                      404 is success
    stop_for_checkpoint  the checkpoint stop (adapters.checkpoint_stop), then delete_workload
    read_workload     the Job's status as a WorkloadStatus (active/ready/succeeded/failed, Complete/Failed,
                      spec.suspend); exists=False on 404
    pod_logs          the container log of a job attempt's pods (found by the gpufed.io/job-id and
                      gpufed.io/attempt labels), streamed in chunks; with follow, until the container exits
Errors surface as broker.core.errors: ClusterUnreachable, ClusterForbidden, ClusterRejected (with `cause`).
Retries are tenacity's, jittered and bounded, and only for transient failures (kube_rest.is_transient: a
reset connection, 5xx, 429): a timeout or a refusal is not retried, so a hung cluster costs one deadline
(kube_rest.DEFAULT_TIMEOUT) per call, not three. Creates are retried too: a create that did land answers
409 AlreadyExists the second time, which is success.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import urllib3
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from adapters import checkpoint_stop, kind_objects
from adapters.kube_rest import ApiStatus, KubeRest, is_transient
from broker.core.errors import ClusterRejected, ClusterUnreachable
from broker.core.k8s_names import CLOSED_ANNOTATION
from broker.core.workloads import WorkloadRef, WorkloadStatus
from broker.workload.manifest import ATTEMPT_LABEL, JOB_ID_LABEL, job_id_label_value

log = logging.getLogger(__name__)

_PLURALS = {
    "Job": "jobs",
    "PodGroup": "podgroups",
    "JobSet": "jobsets",
    "Workload": "workloads",
    "ResourceClaimTemplate": "resourceclaimtemplates",
}


def object_path(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    """The REST path of a namespaced object (or its collection when name is None)."""
    plural = _PLURALS.get(kind, kind.lower() + "s")
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    path = f"{base}/namespaces/{quote(namespace, safe='')}/{plural}"
    return path if name is None else f"{path}/{quote(name, safe='')}"


_ENSURED_KINDS = ("Namespace", "LocalQueue")
# companions the Job owns (ownerReference added once it exists): DRA claim templates, ComputeDomains,
# gang Workloads (scheduling.k8s.io)
_OWNED_KINDS = ("ResourceClaimTemplate", "ComputeDomain", "Workload")


def _ensured_key(cluster: str, obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
    meta = obj.get("metadata") or {}
    return (cluster, str(obj.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name")))


def _retrying() -> Retrying:
    return Retrying(
        retry=retry_if_exception(is_transient),
        wait=wait_random_exponential(multiplier=0.1, max=1.0),
        stop=stop_after_attempt(3),
        reraise=True,
    )


def _disrupted(failed: Mapping[str, Any] | None) -> bool:
    """The Job failed through the broker's podFailurePolicy rule on DisruptionTarget (node lost, spot
    reclaimed, preempted): the work did not fail, its place did."""
    if failed is None or failed.get("reason") != "PodFailurePolicy":
        return False
    return "DisruptionTarget" in str(failed.get("message") or "")


def workload_status(job: Mapping[str, Any], name: str, namespace: str) -> WorkloadStatus:
    """A batch/v1 Job's status as the broker reads it (reference 4)."""
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    conditions = {
        c.get("type"): c
        for c in status.get("conditions") or []
        if isinstance(c, dict) and c.get("status") == "True"
    }
    message = ""
    for kind in ("Failed", "Complete", "FailureTarget", "Suspended"):
        if kind in conditions:
            c = conditions[kind]
            message = f"{kind}: {c.get('reason', '')} {c.get('message', '')}".strip()
            break
    return WorkloadStatus(
        name=name,
        namespace=namespace,
        exists=True,
        suspended=bool(spec.get("suspend")),
        active=int(status.get("active") or 0),
        ready=int(status.get("ready") or 0),
        succeeded=int(status.get("succeeded") or 0),
        failed=int(status.get("failed") or 0),
        complete="Complete" in conditions,
        failed_terminal="Failed" in conditions,
        disrupted=_disrupted(conditions.get("Failed")),
        message=message,
    )


def workload_ref(job: Mapping[str, Any], namespace: str) -> WorkloadRef | None:
    """A Job carrying the broker's labels as a WorkloadRef; None when its labels are not in a shape the
    broker writes (not ours: leave it alone)."""
    meta = job.get("metadata") or {}
    labels = meta.get("labels") or {}
    try:
        attempt = int(labels.get(ATTEMPT_LABEL, ""))
    except ValueError:
        return None
    if JOB_ID_LABEL not in labels:
        return None
    return WorkloadRef(
        name=str(meta.get("name")),
        namespace=str(meta.get("namespace") or namespace),
        job_id=str(labels[JOB_ID_LABEL]),
        attempt=attempt,
        annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
        created_at=_epoch(meta.get("creationTimestamp")),
    )


def _epoch(stamp: object) -> float:
    """An RFC 3339 timestamp (metadata.creationTimestamp) as epoch seconds; 0.0 when absent or odd."""
    if not isinstance(stamp, str) or not stamp:
        return 0.0
    try:
        return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


class KubeGateway:
    """broker.core.ports.ClusterGateway over KubeRest clients, one per member cluster."""

    def __init__(self, clusters: Mapping[str, KubeRest]) -> None:
        self._clusters = dict(clusters)
        # (cluster, kind, namespace, name) of the tenant Namespaces and LocalQueues created or found:
        # they are sent with every Job, but asked for once per broker process (forgotten when a Job
        # create finds its namespace gone).
        self._ensured: set[tuple[str, str, str, str]] = set()
        self._kind_apis = kind_objects.KindApis()  # which workload kinds each member serves

    @classmethod
    def from_kubeconfigs(cls, kubeconfigs: Mapping[str, tuple[Path | str, str | None]]) -> KubeGateway:
        """{cluster: (kubeconfig path, context)} -> a gateway with one ApiClient per cluster."""
        return cls(
            {name: KubeRest.from_kubeconfig(name, path, ctx) for name, (path, ctx) in kubeconfigs.items()}
        )

    def add_cluster(self, rest: KubeRest) -> None:
        self._clusters[rest.cluster] = rest

    def close(self) -> None:
        for r in self._clusters.values():
            r.close()

    def _rest(self, cluster: str) -> KubeRest:
        try:
            return self._clusters[cluster]
        except KeyError:
            raise ClusterRejected(cluster, "not a member cluster of this broker") from None

    def _create(self, rest: KubeRest, obj: Mapping[str, Any]) -> dict[str, Any] | None:
        """POST the object; the API server's answer (the object as created), None when it existed."""
        meta = obj.get("metadata") or {}
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if not (isinstance(api_version, str) and isinstance(kind, str) and meta.get("name")):
            raise ClusterRejected(rest.cluster, "manifest: apiVersion, kind and metadata.name are required")
        if kind == "Namespace":  # cluster-scoped
            path = "/api/v1/namespaces"
        else:
            path = object_path(api_version, kind, str(meta.get("namespace") or "default"))
        try:
            for attempt in _retrying():
                with attempt:
                    created = rest.request("POST", path, body=dict(obj))
        except ApiStatus as e:
            if e.code == 409:  # already there: a retried create is harmless
                return None
            raise ClusterRejected(
                rest.cluster, f"create {kind} {meta.get('name')}: {e.code} {e.message}"
            ) from e
        return created if isinstance(created, dict) else None

    def created_job(self, cluster: str, job: Mapping[str, Any]) -> None:
        """The API server's answer to a Job create (a subclass keeps it: adapters.job_informer)."""

    def create_workload(
        self, cluster: str, job: Mapping[str, Any], companions: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        rest = self._rest(cluster)
        for obj in companions:
            if obj.get("kind") in _ENSURED_KINDS:
                key = _ensured_key(cluster, obj)
                if key in self._ensured:
                    continue
                self._create(rest, obj)
                self._ensured.add(key)
            else:
                self._create(rest, obj)
        try:
            created = self._create(rest, job)
        except ClusterRejected as exc:
            if isinstance(exc.__cause__, ApiStatus) and exc.__cause__.code == 404:
                # the namespace went away since it was created: create it again next time
                self._ensured = {k for k in self._ensured if k[0] != cluster}
            raise
        if created is not None and job.get("kind") == "Job":
            self.created_job(cluster, created)
        templates = [c for c in companions if c.get("kind") in _OWNED_KINDS]
        if templates:
            self._own_by_job(rest, job, templates, created)

    def _own_by_job(
        self,
        rest: KubeRest,
        job: Mapping[str, Any],
        objs: Sequence[Mapping[str, Any]],
        created: Mapping[str, Any] | None = None,
    ) -> None:
        """Give DRA claim templates an ownerReference to their Job, so they go when the Job goes (the
        garbage collector), whoever deletes it. Best effort: delete_workload removes them by name too."""
        meta = job.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
        api_version, kind = str(job.get("apiVersion") or "batch/v1"), str(job.get("kind") or "Job")
        try:
            if created is None:  # it existed already (a retried create): read its uid
                created = rest.request("GET", object_path(api_version, kind, namespace, name))
            owner = {
                "apiVersion": api_version,
                "kind": kind,
                "name": name,
                "uid": (created.get("metadata") or {}).get("uid"),
                "controller": False,
                "blockOwnerDeletion": True,
            }
            for obj in objs:
                tmeta = obj.get("metadata") or {}
                path = object_path(
                    str(obj["apiVersion"]), str(obj["kind"]), namespace, str(tmeta.get("name"))
                )
                # client-go's RetryOnConflict: the member's own controller (the ComputeDomain driver's)
                # may update the object between our read and our write; read it again and retry
                for attempt in Retrying(
                    retry=retry_if_exception(lambda e: isinstance(e, ApiStatus) and e.code == 409),
                    stop=stop_after_attempt(5),
                    wait=wait_random_exponential(multiplier=0.05, max=1.0),
                    reraise=True,
                ):
                    with attempt:
                        current = rest.request("GET", path)
                        refs = current.setdefault("metadata", {}).setdefault("ownerReferences", [])
                        if not any(r.get("uid") == owner["uid"] for r in refs):
                            refs.append(owner)
                            rest.request("PUT", path, body=current)
        except (ApiStatus, ClusterUnreachable) as e:
            log.warning("cluster %s: could not tie claim templates to Job %s: %s", rest.cluster, name, e)

    def delete_workload(self, cluster: str, namespace: str, name: str) -> None:
        rest = self._rest(cluster)
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        for api_version, kind in (
            ("batch/v1", "Job"),
            ("scheduling.x-k8s.io/v1alpha1", "PodGroup"),
            ("resource.k8s.io/v1", "ResourceClaimTemplate"),
            ("resource.nvidia.com/v1beta1", "ComputeDomain"),
            ("scheduling.k8s.io/v1alpha1", "Workload"),
        ):
            try:
                for attempt in _retrying():
                    with attempt:
                        rest.request("DELETE", object_path(api_version, kind, namespace, name), body=body)
            except ApiStatus as e:
                if e.code != 404:  # gone already (or no PodGroup CRD / Workload API): success
                    raise ClusterRejected(cluster, f"delete {kind} {name}: {e.code} {e.message}") from e
        kind_objects.delete_kinds(
            rest, self._kind_apis, namespace, name
        )  # a JobSet, RayJob, ... of that name

    def read_object(
        self, cluster: str, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        """One member object of any kind as the API server has it (a GET); None when not found: a workload
        kind's object (broker.workload.kinds.follow.KindObjects), or the member copy the hub's status
        write-back reads (docs/hub.md)."""
        return kind_objects.read_object(self._rest(cluster), api_version, kind, namespace, name)

    def kinds_served(self, cluster: str) -> bool:
        """Whether the member serves any workload kind's API (a failed look: yes): their objects are
        listed by request, not followed by watch."""
        return bool(self._kind_apis.served(self._rest(cluster)))

    def kind_refs(self, cluster: str, namespace: str) -> list[WorkloadRef]:
        """The broker's objects of the workload kinds a member serves, as WorkloadRefs."""
        items = kind_objects.list_refs(self._rest(cluster), self._kind_apis, namespace)
        return kind_objects.refs(items, namespace, workload_ref)

    def close_workload(self, cluster: str, namespace: str, name: str, note: str) -> None:
        """broker.core.ports.WorkloadCloser: a merge-patch of the Job's gpufed.io/closed annotation."""
        rest = self._rest(cluster)
        body = {"metadata": {"annotations": {CLOSED_ANNOTATION: note}}}
        try:
            rest.request(
                "PATCH",
                object_path("batch/v1", "Job", namespace, name),
                body=body,
                content_type="application/merge-patch+json",
            )
        except ApiStatus as e:
            if e.code != 404:  # gone already (its TTL ran out): nothing to mark
                raise ClusterRejected(cluster, f"mark Job {name} closed: {e.code} {e.message}") from e

    def stop_for_checkpoint(
        self,
        cluster: str,
        namespace: str,
        name: str,
        job_id: str,
        attempt: int,
        grace_seconds: int,
        wait_seconds: float,
    ) -> tuple[str | None, bool]:
        """broker.core.ports.CheckpointGateway: adapters.checkpoint_stop, then the Job's companions."""
        rest = self._rest(cluster)
        out = checkpoint_stop.stop_for_checkpoint(
            rest, namespace, name, job_id, attempt, grace_seconds, wait_seconds
        )
        self.delete_workload(cluster, namespace, name)
        return out

    def reported_checkpoints(self, cluster: str, namespace: str) -> dict[tuple[str, int], str]:
        return checkpoint_stop.reported_checkpoints(self._rest(cluster), namespace)

    def read_workload(self, cluster: str, namespace: str, name: str) -> WorkloadStatus:
        rest = self._rest(cluster)
        try:
            for attempt in _retrying():
                with attempt:
                    job = rest.request("GET", object_path("batch/v1", "Job", namespace, name))
        except ApiStatus as e:
            if e.code == 404:
                return WorkloadStatus(name=name, namespace=namespace, exists=False)
            raise ClusterRejected(cluster, f"read Job {name}: {e.code} {e.message}") from e
        return workload_status(job, name, namespace)

    def list_workloads(self, cluster: str, namespace: str) -> list[WorkloadRef]:
        rest = self._rest(cluster)
        path = f"/apis/batch/v1/namespaces/{quote(namespace, safe='')}/jobs"
        try:
            for try_ in _retrying():
                with try_:
                    jobs, _ = rest.list_pages(path, selector=[("labelSelector", JOB_ID_LABEL)])
        except ApiStatus as e:
            raise ClusterRejected(cluster, f"list Jobs: {e.code} {e.message}") from e
        refs = [ref for ref in (workload_ref(job, namespace) for job in jobs) if ref is not None]
        return refs + self.kind_refs(cluster, namespace)

    def job_pods(self, cluster: str, namespace: str, job_id: str, attempt: int) -> list[str]:
        """Names of the pods of one attempt of a broker job, by completion index then name."""
        rest = self._rest(cluster)
        selector = f"{JOB_ID_LABEL}={job_id_label_value(job_id)},{ATTEMPT_LABEL}={attempt}"
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods"
        try:
            pods, _ = rest.list_pages(path, selector=[("labelSelector", selector)])
        except ApiStatus as e:
            raise ClusterRejected(cluster, f"list pods: {e.code} {e.message}") from e

        def key(pod: Mapping[str, Any]) -> tuple[int, str]:
            meta = pod.get("metadata") or {}
            index = (meta.get("annotations") or {}).get("batch.kubernetes.io/job-completion-index", "")
            return (int(index) if str(index).isdigit() else 0, str(meta.get("name")))

        return [str(p["metadata"]["name"]) for p in sorted(pods, key=key)]

    def pod_logs(
        self,
        cluster: str,
        namespace: str,
        pod: str,
        follow: bool = False,
        tail_lines: int | None = None,
        timestamps: bool = False,
    ) -> Iterator[bytes]:
        """The pod's container log (GET pods/{name}/log) in chunks as the cluster sends them; with
        follow, the stream stays open until the container exits or the caller stops reading."""
        rest = self._rest(cluster)
        query: list[tuple[str, Any]] = []
        if follow:
            query.append(("follow", "true"))
        if tail_lines is not None:
            query.append(("tailLines", tail_lines))
        if timestamps:
            query.append(("timestamps", "true"))
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}/log"
        try:
            resp = rest.open_stream(path, query)
        except ApiStatus as e:
            raise ClusterRejected(cluster, f"log of pod {pod}: {e.code} {e.message}") from e
        try:
            yield from resp.stream(16 * 1024, decode_content=True)
        except (urllib3.exceptions.HTTPError, OSError) as e:  # the cluster closed it: the stream ended
            log.debug("cluster %s: log stream of %s ended: %s", cluster, pod, e)
        finally:
            resp.release_conn()
