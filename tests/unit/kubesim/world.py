"""Builders for kubesim scenario tests: a populated cluster with its controllers on a frozen clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubesim.clock import SimClock
from kubesim.controllers import Controllers
from kubesim.fleet import ClusterSpec, parse_fleet, populate
from kubesim.store import Obj, ObjectStore

START = 1_800_000_000.0


@dataclass
class World:
    store: ObjectStore
    clock: SimClock
    cluster: ClusterSpec
    ctl: Controllers

    def settle(self) -> None:
        assert self.ctl.settle() < 100, "controllers did not settle"

    def advance(self, seconds: float) -> None:
        """Step simulated time, settling at every timed event on the way (like a running simulation)."""
        end = self.clock.now() + seconds
        self.settle()
        while (due := self.ctl.next_due()) is not None and due <= end:
            self.clock.advance(max(0.0, due - self.clock.now()))
            self.settle()
        self.clock.advance(max(0.0, end - self.clock.now()))
        self.settle()

    def pods(self, namespace: str = "default") -> list[Obj]:
        return sorted(self.store.list("pods", namespace)[0], key=lambda p: p["metadata"]["name"])

    def pod(self, name: str, namespace: str = "default") -> Obj:
        return self.store.get("pods", namespace, name)

    def job(self, name: str, namespace: str = "default") -> Obj:
        return self.store.get("jobs.batch", namespace, name)

    def events(self, reason: str) -> list[Obj]:
        return [e for e in self.store.list("events")[0] if e["reason"] == reason]


def world(cluster: dict[str, Any]) -> World:
    cluster = {"region": "eu-west", **cluster}
    spec = parse_fleet({"clusters": [cluster]}, "test").clusters[0]
    clock = SimClock(speed=0, start=START)
    store = ObjectStore(clock.now)
    populate(store, spec, clock)
    return World(store, clock, spec, Controllers(store, clock, spec))


def pool(name: str, count: int, product: str = "H100-80GB", gpus: int = 8, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "count": count,
        "cpu": "64",
        "memory": "512Gi",
        "gpu": {"product": product, "count": gpus, **extra.pop("gpu", {})},
        **extra,
    }


def container(resources: dict[str, Any] | None = None, name: str = "main") -> dict[str, Any]:
    return {"name": name, "image": "trainer:1", "resources": {"limits": resources or {}}}


def pod_spec(resources: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"containers": [container(resources)], "restartPolicy": "Never", **extra}


def bare_pod(
    name: str,
    resources: dict[str, Any] | None = None,
    *,
    duration: float = 30,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": labels or {},
            "annotations": {"sim.gpufed.io/duration-seconds": str(duration)},
        },
        "spec": pod_spec(resources, **spec),
    }


def batch_job(
    name: str,
    resources: dict[str, Any] | None = None,
    *,
    duration: float = 30,
    exit_code: int = 0,
    labels: dict[str, str] | None = None,
    pod_extra: dict[str, Any] | None = None,
    **spec: Any,
) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": {
            **spec,
            "template": {
                "metadata": {
                    "labels": {"app": name},
                    "annotations": {
                        "sim.gpufed.io/duration-seconds": str(duration),
                        "sim.gpufed.io/exit-code": str(exit_code),
                    },
                },
                "spec": pod_spec(resources, **(pod_extra or {})),
            },
        },
    }


def scheduled(pod: Obj) -> str:
    return str(pod["spec"].get("nodeName") or "")


def pod_condition(pod: Obj, ctype: str) -> Obj:
    for c in pod.get("status", {}).get("conditions", []):
        if c["type"] == ctype:
            return dict(c)
    raise AssertionError(f"{pod['metadata']['name']} has no {ctype} condition: {pod.get('status')}")


def job_condition(job: Obj, ctype: str) -> Obj | None:
    for c in job.get("status", {}).get("conditions", []):
        if c["type"] == ctype:
            return dict(c)
    return None
