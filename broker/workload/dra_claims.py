"""Level 2 on DRA clusters: the ResourceClaimTemplate a Job's pods claim their GPUs through.

Owns when a placement asks through DRA (a MIG placement on DRA nodes names the DeviceClass
`mig.nvidia.com` as its resource; a whole-GPU placement whose product the cluster serves through DRA,
`Placement.dra`, or on a cluster declared `gpuAllocation: dra`), and the template:
one request `gpus` of `exactly: {deviceClassName, count, selectors}` with CEL selectors on the driver's
attributes (`productName`, `profile`) and capacity (`memory`), in the forms the driver's examples use.
The template is named like the Job (so it is created before it and deleted with it) and carries the
broker's job labels. Pure: returns plain dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from broker.core.k8s_names import DRA_DRIVER, DRA_GPU_CLASS, DRA_MIG_CLASS, GPU
from broker.core.model import ClusterTraits, JobRequest, Placement

__all__ = ["CLAIM_NAME", "DraRequest", "claim_template", "dra_request"]

DRIVER = DRA_DRIVER
GPU_CLASS = DRA_GPU_CLASS
CLAIM_NAME = "gpus"  # the pod's claim and the template's request


@dataclass(frozen=True)
class DraRequest:
    device_class: str
    count: int
    selectors: tuple[str, ...]


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _product_selector(placement: Placement) -> tuple[str, ...]:
    # DRA productName values contain spaces ("NVIDIA H100 80GB HBM3"); GFD label values never do, so a
    # cluster that mixes both kinds reports both and only the DRA form selects devices.
    names = sorted({p for p in placement.gfd_products if " " in p})
    if not names:
        return ()
    attr = f"device.attributes['{DRIVER}'].productName"
    if len(names) == 1:
        return (f"{attr} == {_quote(names[0])}",)
    return (f"{attr} in [{', '.join(_quote(n) for n in names)}]",)


def dra_request(job: JobRequest, placement: Placement, traits: ClusterTraits) -> DraRequest | None:
    """The DRA request for each pod of this placement, or None when it asks with extended resources."""
    if placement.units_per_pod <= 0:
        return None
    if placement.resource_name == DRA_MIG_CLASS and placement.mig_profile:
        selectors = (
            f"device.attributes['{DRIVER}'].profile == {_quote(placement.mig_profile)}",
            *_product_selector(placement),
        )
        return DraRequest(DRA_MIG_CLASS, placement.units_per_pod, selectors)
    # whole GPUs: the kind level 1 counted for the product (capacity.rollup.counted_kind); traits.dra
    # also for a placement recorded before placements carried their kind
    if (placement.dra or traits.dra) and placement.resource_name == GPU and placement.mig_profile is None:
        selectors = _product_selector(placement)
        if job.min_gpu_memory_mib:
            selectors += (
                f"device.capacity['{DRIVER}'].memory.compareTo(quantity('{job.min_gpu_memory_mib}Mi')) >= 0",
            )
        return DraRequest(GPU_CLASS, placement.units_per_pod, selectors)
    return None


def claim_template(
    name: str, namespace: str, labels: Mapping[str, str], request: DraRequest
) -> dict[str, Any]:
    """The resource.k8s.io/v1 ResourceClaimTemplate of one attempt."""
    exactly: dict[str, Any] = {"deviceClassName": request.device_class, "count": request.count}
    if request.selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in request.selectors]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {"spec": {"devices": {"requests": [{"name": CLAIM_NAME, "exactly": exactly}]}}},
    }
