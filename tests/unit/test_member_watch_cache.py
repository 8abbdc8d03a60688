"""adapters.member_watch.TroubleCache as the informers feed it: a Job's trouble from its pods or, with no
pod, from the Job controller's FailedCreate; the subscriber told once per change of what a Job's pods
say, not per pod event; the last exit code kept while the Job has pods."""

from __future__ import annotations

from typing import Any

from adapters.member_watch import TroubleCache
from broker.core.workloads import MemberTrouble, PodTrouble, Termination

JOB = "gf-j1-1"


def pod(name: str, *, waiting: str | None = None, exit_code: int | None = None) -> dict[str, Any]:
    cs: dict[str, Any] = {"name": "main", "state": {}}
    if waiting:
        cs["state"]["waiting"] = {"reason": waiting, "message": f"{waiting} says why"}
    if exit_code is not None:
        cs["state"]["terminated"] = {"reason": "Error", "exitCode": exit_code}
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"gpufed.io/job-id": "j1"},
            "ownerReferences": [{"kind": "Job", "name": JOB}],
        },
        "spec": {"nodeName": "n1"},
        "status": {"containerStatuses": [cs]},
    }


def refused(name: str = "ev1") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "reason": "FailedCreate",
        "message": 'Error creating: pods "gf-j1-1-" is forbidden: no PriorityClass with name production was found',
        "involvedObject": {"kind": "Job", "name": JOB},
    }


def cache() -> tuple[TroubleCache, list[tuple[str, str]]]:
    told: list[tuple[str, str]] = []
    return TroubleCache("a", {JOB: "j1"}.get, lambda c, j: told.append((c, j))), told


def test_a_pods_trouble_is_told_once_per_change() -> None:
    c, told = cache()
    c.apply("pods", "ADDED", pod("p0"), "1")
    assert c.view(JOB) == MemberTrouble() and told == []  # a healthy pod says nothing
    c.apply("pods", "MODIFIED", pod("p0", waiting="ErrImagePull"), "2")
    c.apply("pods", "MODIFIED", pod("p0", waiting="ErrImagePull"), "3")  # the same again (a resync)
    assert c.view(JOB).trouble == PodTrouble("ErrImagePull", "ErrImagePull says why", "p0")
    assert told == [("a", "j1")]
    c.apply("pods", "MODIFIED", pod("p0", waiting="ImagePullBackOff"), "4")
    assert len(told) == 2
    c.apply("pods", "MODIFIED", pod("p0"), "5")  # pulled at last
    assert c.view(JOB) == MemberTrouble() and len(told) == 3


def test_a_failed_create_counts_only_while_the_job_has_no_pod() -> None:
    c, told = cache()
    c.replace("events", [refused()], "1")
    assert c.view(JOB).trouble is not None and c.view(JOB).trouble.kind == "FailedCreate"  # type: ignore[union-attr]
    assert told == [("a", "j1")]
    c.apply("pods", "ADDED", pod("p0"), "2")  # created after all (the quota freed up)
    assert c.view(JOB).trouble is None
    c.replace("events", [], "3")  # the event aged out
    assert c.view(JOB) == MemberTrouble()


def test_the_last_exit_code_is_kept_while_the_job_has_pods() -> None:
    c, _ = cache()
    c.apply("pods", "ADDED", pod("p0", exit_code=2), "1")
    assert c.view(JOB).termination == Termination("Error", 2, "p0", "main")
    c.apply("pods", "DELETED", pod("p0", exit_code=2), "2")
    assert c.view(JOB) == MemberTrouble()
