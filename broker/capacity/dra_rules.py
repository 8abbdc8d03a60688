"""Which DRA devices kube-scheduler's structured allocator could give to the claim gpufed writes.

Owns the allocator's rules (k8s.io/dynamic-resource-allocation/structured, Kubernetes 1.34/1.35) that
change what is free, as pure predicates over ResourceSlice data. gpufed's claim (workload/dra_claims.py)
is one `exactly` request of a DeviceClass with CEL selectors: no tolerations, no admin access, no
capacity requests, no constraints. For such a claim a device is available only when

  allocated        no other claim's `status.allocation.devices.results[]` names it, except results with
                   `adminAccess: true` (KEP-5018: admin access does not take the device)  [dra.used_devices]
  counters         on a partitionable device (KEP-4815), every shared counter it consumes is still left
                   after the allocated devices of the pool took theirs                   [dra.merge]
  taints           it has no taint of effect NoSchedule or NoExecute (KEP-5055; gpufed's claim tolerates
                   none; effect None and unknown effects do not block)                       [device_blocked]
  binding          it publishes no `bindingConditions` (KEP-5007, alpha: with the gate off, as by
                   default, the allocator never selects such a device)                       [device_blocked]
  complete pool    its pool's current generation has all `resourceSliceCount` slices (a pool being
                   republished is skipped)                                                  [unusable_pools]
  valid pool       no device name appears twice in its pool's current generation (an invalid pool is
                   skipped)                                                                 [unusable_pools]

Not applied, because gpufed's claim or the member's default feature gates make them moot: consumable
capacity (KEP-5075, alpha: devices with `allowMultipleAllocations`), per-device node selection,
`matchAttribute` constraints, `allocationMode: All`, prioritized lists (gpufed writes none), and
DeviceTaintRule objects (alpha API; only taints in the slices are read).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["BINDING_CONDITIONS", "BLOCKING_EFFECTS", "TAINTED", "device_blocked", "unusable_pools"]

BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
TAINTED = "taint"
BINDING_CONDITIONS = "binding-conditions"


def device_blocked(device: Mapping[str, Any]) -> str | None:
    """The rule that keeps gpufed's claim off this device (a ResourceSlice `spec.devices[]` entry), or
    None when the allocator could give it."""
    for taint in device.get("taints") or ():
        if isinstance(taint, Mapping) and taint.get("effect") in BLOCKING_EFFECTS:
            return TAINTED
    if device.get("bindingConditions"):
        return BINDING_CONDITIONS
    return None


def unusable_pools(slices: Iterable[tuple[str, int, Sequence[str]]]) -> frozenset[str]:
    """Pools the allocator skips, from (pool, resourceSliceCount, device names) of each slice at the
    pool's current generation: incomplete (fewer slices than announced) or invalid (a device name twice)."""
    seen: dict[str, int] = {}
    announced: dict[str, int] = {}
    names: dict[str, set[str]] = {}
    invalid: set[str] = set()
    for pool, count, devices in slices:
        seen[pool] = seen.get(pool, 0) + 1
        announced[pool] = max(announced.get(pool, 0), count)
        known = names.setdefault(pool, set())
        for name in devices:
            if name in known:
                invalid.add(pool)
            known.add(name)
    incomplete = {p for p, n in seen.items() if n < announced[p]}
    return frozenset(invalid | incomplete)
