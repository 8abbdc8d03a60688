"""DRA capacity as kube-scheduler's structured allocator sees it: one row per allocator rule that changes
which devices the claim gpufed writes could get (broker/capacity/dra_rules.py names them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from broker.capacity import dra_rules
from tests.unit.test_dra_capacity import (
    claim,
    counter_set,
    facts,
    full_partitionable,
    gpu,
    mig,
    mig_rows,
    rslice,
)


def _taint(effect: str) -> Callable[[dict[str, Any]], None]:
    def apply(dev: dict[str, Any]) -> None:
        dev["taints"] = [{"key": "gpu.nvidia.com/unhealthy", "value": "xid-79", "effect": effect}]

    return apply


def _binding(dev: dict[str, Any]) -> None:
    dev["bindingConditions"] = ["FabricReady"]
    dev["bindingFailureConditions"] = ["FabricFailed"]


@pytest.mark.parametrize(
    ("rule", "change", "allocatable", "free"),
    [
        ("taint NoSchedule blocks", _taint("NoSchedule"), 3, 3),
        ("taint NoExecute blocks", _taint("NoExecute"), 3, 3),
        ("taint effect None does not block", _taint("None"), 4, 4),
        ("binding conditions (alpha gate off) block", _binding, 3, 3),
        ("an untouched device is free", lambda dev: None, 4, 4),
    ],
)
def test_device_rules(
    rule: str, change: Callable[[dict[str, Any]], None], allocatable: int, free: int
) -> None:
    devices = [gpu(i) for i in range(4)]
    change(devices[0])
    f = facts([rslice(devices)])
    assert (f.gpu_count, f.gpus_allocatable, f.gpus_free) == (4, allocatable, free), rule


def test_allocated_devices_are_not_free_but_admin_access_does_not_take_a_device() -> None:
    used = claim("gpu-0")
    admin = claim("gpu-1")
    admin["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True
    f = facts([rslice([gpu(i) for i in range(4)])], [used, admin])
    assert (f.gpus_allocatable, f.gpus_allocated, f.gpus_free) == (4, 1, 3)


def test_a_pool_missing_slices_of_its_generation_is_skipped() -> None:
    f = facts([rslice([gpu(0), gpu(1)], count=2)])  # announced 2 slices, 1 published so far
    assert (f.gpu_count, f.gpus_allocatable, f.gpus_free) == (2, 0, 0)
    whole = facts([rslice([gpu(0)], count=2, suffix="a"), rslice([gpu(1)], count=2, suffix="b")])
    assert (whole.gpus_allocatable, whole.gpus_free) == (2, 2)


def test_a_pool_naming_a_device_twice_is_invalid_and_skipped() -> None:
    f = facts([rslice([gpu(0)], count=2, suffix="a"), rslice([gpu(0)], count=2, suffix="b")])
    assert (f.gpus_allocatable, f.gpus_free) == (0, 0)


def test_shared_counters_a_used_partition_leaves_no_whole_gpu() -> None:
    devices = [
        full_partitionable(0),
        mig(0, "3g.40gb", 4, counters=True),
        mig(0, "3g.40gb", 0, counters=True),
    ]
    f = facts(
        [rslice(devices, count=2, suffix="d"), rslice(counters=[counter_set(0)], count=2, suffix="c")],
        [claim("gpu-0-mig-3g40gb-9-4")],
    )
    assert (f.gpus_allocatable, f.gpus_free) == (1, 0)
    assert mig_rows(f)["3g.40gb"] == (2, 1)


def test_a_tainted_partition_is_not_offered() -> None:
    part = mig(0, "3g.40gb", 4, counters=True)
    _taint("NoSchedule")(part)
    devices = [full_partitionable(0), part, mig(0, "3g.40gb", 0, counters=True)]
    f = facts([rslice(devices, count=2, suffix="d"), rslice(counters=[counter_set(0)], count=2, suffix="c")])
    assert mig_rows(f)["3g.40gb"] == (1, 1)  # only the untainted one at slices 0-3


def test_rule_predicates() -> None:
    assert dra_rules.device_blocked({"taints": [{"key": "k", "effect": "NoExecute"}]}) == dra_rules.TAINTED
    assert dra_rules.device_blocked({"bindingConditions": ["x"]}) == dra_rules.BINDING_CONDITIONS
    assert dra_rules.device_blocked({"name": "gpu-0"}) is None
    assert dra_rules.unusable_pools([("a", 2, ["x"]), ("b", 1, ["y", "y"]), ("c", 1, ["z"])]) == {"a", "b"}
