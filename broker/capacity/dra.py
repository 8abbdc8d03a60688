"""Capacity from Dynamic Resource Allocation: NVIDIA DRA driver ResourceSlices and allocated claims.

Owns how a node's GPUs published as `resource.k8s.io/v1` ResourceSlices of driver `gpu.nvidia.com`
(reference section 8) become the same NodeFacts fields the device-plugin path fills, so both kinds land
in one ClusterSummary:

- only each pool's slices at its highest `spec.pool.generation` count (older ones are being replaced);
- whole GPUs are the devices of `type: gpu`; allocated = devices named in allocated claims, plus, on a
  partitionable GPU, the full device when a partition of it holds any of its shared counters;
- MIG profiles (`type: mig`, attribute `profile`): static MIG devices count one each; partitionable
  ones (with `consumesCounters`) count by shared counters, not by devices: `allocatable` is how many
  partitions of the profile fit a GPU whose counters are all free, `free` how many still fit in what
  the allocated devices left;
- NUMA zones from `resource.kubernetes.io/numaNode` (or a driver `numaNode`), else the PCIe root;
- the product from `productName` (with `memory`), the node is marked `dra=True`.

`merge(facts, slices, used)`: a node that publishes GPU slices takes its GPU facts from them (the device
plugin and DRA never both publish one GPU; a node with slices is read only from them, so nothing is
counted twice). A device counts only where kube-scheduler's structured allocator could give it to the
claim gpufed writes (broker/capacity/dra_rules.py lists the rules). Pure: plain dicts in, NodeFacts out;
MalformedObject names the slice and field.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from broker.capacity import dra_rules
from broker.core import catalog
from broker.core.errors import MalformedObject
from broker.core.k8s_names import DRA_DRIVER, DRA_GPU_CLASS, DRA_MIG_CLASS, L_PRODUCT
from broker.core.model import MigSlices, MigStrategy, NodeFacts, NumaZone
from broker.core.quantity import QuantityError, to_int

__all__ = [
    "DRIVER",
    "GPU_CLASS",
    "MIG_CLASS",
    "DeviceKey",
    "ParsedSlice",
    "current_slices",
    "merge",
    "parse_slice",
    "slice_node",
    "slice_pool",
    "used_devices",
]

DRIVER = DRA_DRIVER
GPU_CLASS = DRA_GPU_CLASS  # DeviceClass of whole GPUs
MIG_CLASS = DRA_MIG_CLASS  # DeviceClass of MIG devices
STD = "resource.kubernetes.io/"

DeviceKey = tuple[str, str, str]  # (driver, pool, device)


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) and name else "<resourceslice>"


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise MalformedObject(_name(obj), "spec", "missing")
    return spec


def slice_pool(obj: Mapping[str, Any]) -> tuple[str, str, int]:
    """(driver, pool name, generation) of a ResourceSlice."""
    spec = _spec(obj)
    pool = spec.get("pool")
    if not isinstance(pool, Mapping) or not isinstance(pool.get("name"), str):
        raise MalformedObject(_name(obj), "spec.pool.name", "missing")
    gen = pool.get("generation", 0)
    if not isinstance(gen, int):
        raise MalformedObject(_name(obj), "spec.pool.generation", f"expected an integer, got {gen!r}")
    return str(spec.get("driver", "")), str(pool["name"]), gen


def slice_node(obj: Mapping[str, Any]) -> str | None:
    """The node a slice's devices are local to (spec.nodeName), None for network-attached pools."""
    node = _spec(obj).get("nodeName")
    return node if isinstance(node, str) and node else None


def current_slices(slices: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The slices of driver gpu.nvidia.com at their pool's highest generation."""
    items = [(s, slice_pool(s)) for s in slices]
    top: dict[tuple[str, str], int] = {}
    for _s, (driver, pool, gen) in items:
        if driver == DRIVER:
            top[(driver, pool)] = max(top.get((driver, pool), gen), gen)
    return [s for s, (driver, pool, gen) in items if driver == DRIVER and top[(driver, pool)] == gen]


def used_devices(claims: Iterable[Mapping[str, Any]]) -> frozenset[DeviceKey]:
    """Devices named in the status.allocation of the given ResourceClaims."""
    out: set[DeviceKey] = set()
    for claim in claims:
        status = claim.get("status")
        alloc = status.get("allocation") if isinstance(status, Mapping) else None
        devices = alloc.get("devices") if isinstance(alloc, Mapping) else None
        results = devices.get("results") if isinstance(devices, Mapping) else None
        for r in results or ():
            # a device allocated with admin access stays available to other claims (KEP-5018)
            if isinstance(r, Mapping) and r.get("adminAccess") is not True:
                out.add((str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", ""))))
    return frozenset(out)


# --------------------------------------------------------------------------- devices


@dataclasses.dataclass(frozen=True)
class _Device:
    key: DeviceKey
    dtype: str
    product: str
    memory_mib: int
    profile: str | None
    zone: str | None
    consumes: tuple[tuple[str, str, int], ...]  # (counter set, counter, amount)
    blocked: str | None = None  # the allocator rule that keeps any claim of gpufed's off it (dra_rules)


def _attr(attrs: Mapping[str, Any], name: str) -> Any:
    value = attrs.get(name)
    if not isinstance(value, Mapping):
        return None
    for k in ("string", "int", "bool", "version"):
        if k in value:
            return value[k]
    return None


@functools.lru_cache(maxsize=4096)
def _int_of(text: str) -> int:
    return to_int(text)  # the same few strings ("1", "16", "9984Mi") on every device of every node


def _amount(value: Any, owner: str, field: str) -> int:
    raw = value.get("value") if isinstance(value, Mapping) else value
    try:
        return _int_of(raw) if isinstance(raw, str) else to_int(raw)
    except (QuantityError, TypeError, ValueError) as exc:
        raise MalformedObject(owner, field, str(exc)) from None


def _devices(s: Mapping[str, Any]) -> list[_Device]:
    owner = _name(s)
    driver, pool, _gen = slice_pool(s)
    out = []
    for i, d in enumerate(_spec(s).get("devices") or ()):
        if not isinstance(d, Mapping) or not isinstance(d.get("name"), str):
            raise MalformedObject(owner, f"spec.devices[{i}].name", "missing")
        attrs = d.get("attributes") or {}
        cap = d.get("capacity") or {}
        memory = _amount(cap["memory"], owner, f"spec.devices[{i}].capacity.memory") if "memory" in cap else 0
        numa = _attr(attrs, STD + "numaNode")
        if numa is None:
            numa = _attr(attrs, "numaNode")
        root = _attr(attrs, STD + "pcieRoot")
        zone = f"numa-{numa}" if numa is not None else (str(root) if root is not None else None)
        consumes = []
        for j, c in enumerate(d.get("consumesCounters") or ()):
            for cname, v in (c.get("counters") or {}).items():
                path = f"spec.devices[{i}].consumesCounters[{j}].counters[{cname}]"
                consumes.append((str(c.get("counterSet", "")), str(cname), _amount(v, owner, path)))
        profile = _attr(attrs, "profile")
        out.append(
            _Device(
                key=(driver, pool, d["name"]),
                dtype=str(_attr(attrs, "type") or ""),
                product=str(_attr(attrs, "productName") or "unknown"),
                memory_mib=memory // 2**20,
                profile=str(profile) if profile is not None else None,
                zone=zone,
                consumes=tuple(consumes),
                blocked=dra_rules.device_blocked(d),
            )
        )
    return out


def _slice_counters(s: Mapping[str, Any]) -> dict[tuple[str, str, str], int]:
    out: dict[tuple[str, str, str], int] = {}
    _driver, pool, _gen = slice_pool(s)
    for i, cs in enumerate(_spec(s).get("sharedCounters") or ()):
        for cname, v in (cs.get("counters") or {}).items():
            path = f"spec.sharedCounters[{i}].counters[{cname}]"
            out[(pool, str(cs.get("name", "")), str(cname))] = _amount(v, _name(s), path)
    return out


@dataclasses.dataclass(frozen=True)
class ParsedSlice:
    """A ResourceSlice as merge() reads it; parse once per slice version (the informer keeps these)."""

    name: str
    driver: str
    pool: str
    generation: int
    node: str | None
    devices: tuple[_Device, ...]
    counters: Mapping[tuple[str, str, str], int]
    slice_count: int = 1  # spec.pool.resourceSliceCount: slices of the pool at this generation


def parse_slice(obj: Mapping[str, Any]) -> ParsedSlice:
    """MalformedObject names the slice and the field that can't be read."""
    driver, pool, gen = slice_pool(obj)
    count = (_spec(obj).get("pool") or {}).get("resourceSliceCount", 1)
    return ParsedSlice(
        _name(obj),
        driver,
        pool,
        gen,
        slice_node(obj),
        tuple(_devices(obj)),
        _slice_counters(obj),
        count if isinstance(count, int) and count > 0 else 1,
    )


def _fits(d: _Device, left: Mapping[tuple[str, str, str], int]) -> bool:
    return all(left.get((d.key[1], cset, c), 0) >= n for cset, c, n in d.consumes)


def _take(d: _Device, left: dict[tuple[str, str, str], int]) -> None:
    for cset, c, n in d.consumes:
        left[(d.key[1], cset, c)] = left.get((d.key[1], cset, c), 0) - n


def _greedy(devices: Sequence[_Device], left: Mapping[tuple[str, str, str], int]) -> int:
    """How many of these partitions fit at once in the counters left (in slice order, as a scheduler)."""
    keys = {(d.key[1], cset, c) for d in devices for cset, c, _n in d.consumes}
    return _greedy_in(tuple(devices), frozenset((k, left.get(k, 0)) for k in keys))


@functools.lru_cache(maxsize=65536)
def _greedy_in(devices: tuple[_Device, ...], counters: frozenset[tuple[tuple[str, str, str], int]]) -> int:
    # memoised: a node's partitions and counters repeat on every pod event of that node
    room = dict(counters)
    n = 0
    for d in devices:
        if _fits(d, room):
            _take(d, room)
            n += 1
    return n


class _All:
    """Every device key (no allocator rule keeps any device of the node off)."""

    def __contains__(self, key: object) -> bool:
        return True


def merge(
    facts: NodeFacts, slices: Sequence[Mapping[str, Any] | ParsedSlice], used: Collection[DeviceKey]
) -> NodeFacts:
    """The node's facts with its GPU fields read from its DRA slices (current generation, driver
    gpu.nvidia.com); unchanged when the node publishes no GPU devices."""
    parsed = [s if isinstance(s, ParsedSlice) else parse_slice(s) for s in slices]
    top: dict[str, int] = {}
    for p in parsed:
        if p.driver == DRIVER:
            top[p.pool] = max(top.get(p.pool, p.generation), p.generation)
    current = [p for p in parsed if p.driver == DRIVER and top[p.pool] == p.generation]
    # pools of one slice (the common case) can be neither incomplete nor invalid: the API server refuses
    # a slice naming a device twice
    unusable: frozenset[str] = frozenset()
    if len(current) > 1 or any(p.slice_count > 1 for p in current):
        unusable = dra_rules.unusable_pools(
            [(p.pool, p.slice_count, [d.key[2] for d in p.devices]) for p in current]
        )
    devices = [d for s in current for d in s.devices]
    # a device the allocator would not give to gpufed's claim (incomplete or invalid pool, taint,
    # binding conditions): neither allocatable nor free; it still counts as a physical GPU
    usable = (
        _All()
        if not unusable and all(d.blocked is None for d in devices)
        else {d.key for d in devices if d.blocked is None and d.key[1] not in unusable}
    )
    gpus = [d for d in devices if d.dtype == "gpu"]
    migs = [d for d in devices if d.dtype == "mig" and d.profile]
    if not gpus and not migs:
        return facts
    full = {k: v for s in current for k, v in s.counters.items()}
    left = dict(full)
    for d in devices:
        if d.key in used:
            _take(d, left)
    # whole GPUs: free when usable, not allocated and (partitionable) every counter it needs is still free
    offered = [d for d in gpus if d.key in usable]
    free_gpus = [d for d in offered if d.key not in used and _fits(d, left)]
    sample = gpus[0] if gpus else migs[0]
    memory = max((d.memory_mib for d in gpus), default=0) or None
    product = catalog.normalise_product(sample.product.replace(" ", "-"), memory)
    # MIG: static devices one each; partitions by counters, per counter set
    mig: dict[str, list[int]] = {}
    static = [d for d in migs if not d.consumes]
    for d in static:
        if d.key not in usable:
            continue
        row = mig.setdefault(str(d.profile), [0, 0])
        row[0] += 1
        row[1] += 1 if d.key in used else 0
    by_set: dict[tuple[str, str, str], list[_Device]] = {}
    for d in migs:
        if d.consumes and d.key in usable:
            by_set.setdefault((d.key[1], d.consumes[0][0], str(d.profile)), []).append(d)
    for (_pool, _cset, profile), parts in sorted(by_set.items()):
        allocatable = _greedy(parts, full)
        free = _greedy([d for d in parts if d.key not in used], left)
        row = mig.setdefault(profile, [0, 0])
        row[0] += allocatable
        row[1] += max(0, allocatable - free)
    parents = {d.key[2].split("-mig-")[0] for d in static}
    gpu_names = {d.key[2] for d in gpus}
    zones: dict[str, list[int]] = {}
    for d in gpus:
        if d.zone is not None:
            z = zones.setdefault(d.zone, [0, 0])
            z[0] += 1 if d.key in usable else 0
            z[1] += 1 if d in free_gpus else 0
    labels = dict(facts.labels)
    labels[L_PRODUCT] = sample.product  # the DRA productName: level 2 selects on it
    changes: dict[str, Any] = {
        "product": product,
        "gpu_count": len(gpus) + len(parents - gpu_names),
        "gpus_allocatable": len(offered),
        "gpus_allocated": len(offered) - len(free_gpus),
        "mig": tuple(MigSlices(p, a, u) for p, (a, u) in sorted(mig.items())),
        "mig_strategy": MigStrategy.MIXED if mig else MigStrategy.NONE,
        "mig_settled": True,
        "shared_replicas": 1,
        "shared_allocatable": 0,
        "shared_allocated": 0,
        "labels": labels,
        "dra": True,
    }
    if len(zones) > 1 or (zones and not facts.numa_zones):
        changes["numa_zones"] = tuple(NumaZone(z, a, f) for z, (a, f) in sorted(zones.items()))
    return dataclasses.replace(facts, **changes)
