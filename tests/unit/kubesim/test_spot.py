"""Spot interruption: a notice event and cordon, then the node goes and its pods fail with DisruptionTarget."""

from __future__ import annotations

from typing import Any

from tests.unit.kubesim.world import World, batch_job, pod_condition, world

SPOT_TOLERATION = {"key": "cloud.gpufed.io/spot", "operator": "Exists", "effect": "NoSchedule"}


def _spot_pool(**extra: Any) -> dict[str, Any]:
    return {
        "name": "spot-l4",
        "min": 2,
        "max": 2,
        "provisioningDelaySeconds": 60,
        "spot": True,
        "cpu": "96",
        "memory": "384Gi",
        "gpu": {"product": "L4", "count": 8},
        **extra,
    }


def _spot_world(**extra: Any) -> World:
    return world({"name": "c", "tier": "cloud", "cloudPools": [_spot_pool(**extra)]})


def test_an_on_demand_interruption_warns_then_removes_the_node_and_fails_its_pods() -> None:
    w = _spot_world(spotNoticeSeconds=120)
    w.store.create(
        "jobs.batch",
        batch_job(
            "train", {"nvidia.com/gpu": 8}, duration=10_000, pod_extra={"tolerations": [SPOT_TOLERATION]}
        ),
    )
    w.settle()
    (pod,) = w.pods()
    node = pod["spec"]["nodeName"]
    answer = w.ctl.spot.interrupt(node)
    assert answer["node"] == node
    warned = w.store.get("nodes", "", node)
    assert warned["spec"]["unschedulable"] is True
    assert warned["metadata"]["annotations"]["sim.gpufed.io/spot-interruption-deadline"] == answer["deadline"]
    (event,) = w.events("SpotInterrupted")
    assert event["type"] == "Warning" and event["message"] == "Spot interruption warning was triggered"
    assert event["involvedObject"]["name"] == node
    w.advance(119)
    assert w.store.find("nodes", "", node) is not None
    w.advance(2)
    assert w.store.find("nodes", "", node) is None
    lost = w.pod(pod["metadata"]["name"])
    assert lost["status"]["phase"] == "Failed"
    assert pod_condition(lost, "DisruptionTarget")["reason"] == "DeletionByPodGC"
    replacement = [p for p in w.pods() if p["status"]["phase"] == "Running"]
    assert len(replacement) == 1 and replacement[0]["spec"]["nodeName"] != node
    assert w.events("RemovingNode")


def test_a_pool_name_interrupts_its_first_node_not_yet_warned() -> None:
    w = _spot_world()
    first = w.ctl.spot.interrupt("spot-l4")["node"]
    second = w.ctl.spot.interrupt("spot-l4")["node"]
    assert first != second and {first, second} == set(w.ctl.spot.spot_nodes())


def test_a_spot_pool_with_a_rate_loses_nodes_on_simulated_time() -> None:
    w = _spot_world(spotInterruptionsPerHour=6, spotNoticeSeconds=60)  # a node lasts 10 minutes on average
    original = set(w.ctl.spot.spot_nodes())
    w.advance(3000)
    assert len(original) == 2 and not original & set(w.ctl.spot.spot_nodes())
    assert len(w.events("RemovingNode")) >= 2
