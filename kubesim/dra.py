"""Dynamic Resource Allocation (`resource.k8s.io/v1`) in a simulated cluster: what the NVIDIA DRA driver
publishes, what the API server validates, and how the scheduler allocates claims.

Owns
- `DRIVER`, the DeviceClasses the driver's chart installs (`gpu.nvidia.com`, `mig.nvidia.com`), and
  `render_slices(...)`: the ResourceSlices one node's kubelet plugin publishes, with the driver's real
  device names (`gpu-<minor>`, `gpu-<minor>-mig-<profile>-<giProfileId>-<placementStart>`), attributes
  (type, uuid, productName, brand, architecture, cudaComputeCapability, driverVersion,
  cudaDriverVersion, resource.kubernetes.io/pciBusID|pcieRoot|numaNode; MIG: parentUUID, profile) and
  capacities (memory; MIG: multiprocessors, copyEngines, decoders, encoders, jpegEngines, ofaEngines,
  memory, memorySlice<i>). Partitionable GPUs (dynamic MIG, KEP-4815) publish one counter set per GPU
  (`gpu-<minor>-counter-set`: the capacities as counters plus `memory-slice-<i>`) in a slice of its own,
  and every partition, the full GPU included, `consumesCounters` from it.
- `validate(kind, obj)`: the field errors the real server reports for the four DRA kinds (subset).
- `Allocator`: the scheduler's DRA plugin: which devices a pod's claims get on a node (exact count or
  All, DeviceClass and request CEL selectors of the subset in kubesim/cel.py, devices in use by other
  allocated claims excluded, shared counters respected), and `allocation(...)` to write into the claim.

Reference: shared/reference/k8s-formats.md section 8; the GI profile ids and placements are those of the
real H200 (`nvidia-smi mig -lgip` / `-lgipp` in shared/fixtures/gpu-host-h200), the same ids on
A100/H100.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubesim.catalog import GpuModel, MigProfileSpec
from kubesim.cel import CelError, DeviceView, Selector, Version, compile_selector
from kubesim.quantity import QuantityError, format_quantity, parse_quantity

Obj = dict[str, Any]

DRIVER = "gpu.nvidia.com"
GROUP = "resource.k8s.io"
API = "resource.k8s.io/v1"
STD = "resource.kubernetes.io"
SLICES = "resourceslices.resource.k8s.io"
CLAIMS = "resourceclaims.resource.k8s.io"
TEMPLATES = "resourceclaimtemplates.resource.k8s.io"
CLASSES = "deviceclasses.resource.k8s.io"
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
MAX_DEVICES = 128
MAX_DEVICES_WITH_COUNTERS = 64

# nvidia-smi product names (GFD turns the spaces into '-') and NVML architecture names.
PRODUCT_NAMES = {
    "A100-40GB": "NVIDIA A100-SXM4-40GB",
    "A100-80GB": "NVIDIA A100-SXM4-80GB",
    "H100-80GB": "NVIDIA H100 80GB HBM3",
    "H200-141GB": "NVIDIA H200",
    "L4": "NVIDIA L4",
}
ARCHITECTURES = {"ampere": "Ampere", "hopper": "Hopper", "ada-lovelace": "Ada Lovelace"}

# GI profile ids and allowed placement starts (memory slices) per profile kind, from `nvidia-smi mig
# -lgip/-lgipp` (H200 fixture). Kind = (compute slices, memory slices, media extensions).
_GI_PROFILES: dict[tuple[int, int, bool], tuple[int, tuple[int, ...]]] = {
    (1, 1, False): (19, (0, 1, 2, 3, 4, 5, 6)),
    (1, 1, True): (20, (0, 1, 2, 3, 4, 5, 6)),
    (1, 2, False): (15, (0, 2, 4, 6)),
    (2, 2, False): (14, (0, 2, 4)),
    (3, 4, False): (9, (0, 4)),
    (4, 4, False): (5, (0,)),
    (7, 8, False): (0, (0,)),
}


def device_classes() -> list[Obj]:
    """The DeviceClasses the driver's Helm chart installs (reference section 8)."""

    def dc(name: str, dtype: str) -> Obj:
        expr = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{dtype}'"
        return {
            "apiVersion": API,
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expr}}]},
        }

    return [dc("gpu.nvidia.com", "gpu"), dc("mig.nvidia.com", "mig")]


# --------------------------------------------------------------------------- rendering


def _hex(*parts: str, n: int = 32) -> str:
    return hashlib.blake2b("/".join(parts).encode(), digest_size=16).hexdigest()[:n]


def _uuid(prefix: str, *parts: str) -> str:
    h = _hex(*parts)
    return f"{prefix}-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _semver(text: str) -> str:
    nums = [int(p) for p in text.split(".") if p.isdigit()][:3]
    return ".".join(str(n) for n in [*nums, 0, 0, 0][:3])


def _mem(mib: int) -> str:
    return format_quantity(float(mib) * 2**20, "memory")


def _gi(profile: MigProfileSpec) -> tuple[int, tuple[int, ...]]:
    key = (profile.compute_slices, profile.memory_slices, profile.name.endswith("+me"))
    return _GI_PROFILES[key]


def mig_device_name(minor: int, profile: MigProfileSpec, start: int) -> str:
    """The driver's canonical MIG device name: gpu-<minor>-mig-<profile without dots>-<giId>-<start>."""
    pname = profile.name.replace(".", "").replace("+", "-").lower()
    return f"gpu-{minor}-mig-{pname}-{_gi(profile)[0]}-{start}"


def place_layout(layout: Mapping[MigProfileSpec, int]) -> list[tuple[MigProfileSpec, int]]:
    """Placement starts for a per-GPU MIG layout (largest first, backtracking over the allowed starts)."""
    wanted: list[MigProfileSpec] = []
    for profile, n in sorted(layout.items(), key=lambda kv: (-kv[0].memory_slices, kv[0].name)):
        wanted += [profile] * n
    out: list[tuple[MigProfileSpec, int]] = []

    def go(i: int, used: frozenset[int]) -> bool:
        if i == len(wanted):
            return True
        p = wanted[i]
        for start in _gi(p)[1]:
            span = frozenset(range(start, start + p.memory_slices))
            if span & used or max(span) > 7:
                continue
            out.append((p, start))
            if go(i + 1, used | span):
                return True
            out.pop()
        return False

    if not go(0, frozenset()):
        raise ValueError(f"MIG layout does not fit one GPU: {', '.join(p.name for p in wanted)}")
    return out


@dataclass(frozen=True)
class NodeGpus:
    """What one DRA-managed node has: its GPU model and count, and how they are exposed."""

    model: GpuModel
    count: int
    driver_version: str = "580.159.04"
    cuda_driver: str = "13.0"
    mig_layout: Mapping[MigProfileSpec, int] = field(default_factory=dict)  # static MIG, per MIG GPU
    mig_gpus: int = 0  # the first N GPUs carry the static MIG layout
    partitionable: bool = False  # dynamic MIG: partitions + shared counters
    numa_zones: int = 1


def _gpu_attributes(cfg: NodeGpus, node: str, minor: int) -> Obj:
    bus = 0x18 + minor * 0x10 if minor < 8 else 0x90 + minor
    root = f"pci0000:{bus - 1:02x}"
    numa = minor * cfg.numa_zones // max(cfg.count, 1)
    return {
        "type": {"string": "gpu"},
        "uuid": {"string": _uuid("GPU", node, str(minor))},
        "productName": {"string": PRODUCT_NAMES.get(cfg.model.name, cfg.model.product.replace("-", " "))},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": ARCHITECTURES.get(cfg.model.family, cfg.model.family.title())},
        "cudaComputeCapability": {"version": f"{cfg.model.compute_major}.{cfg.model.compute_minor}.0"},
        "driverVersion": {"version": _semver(cfg.driver_version)},
        "cudaDriverVersion": {"version": _semver(cfg.cuda_driver)},
        f"{STD}/pciBusID": {"string": f"0000:{bus:02x}:00.0"},
        f"{STD}/pcieRoot": {"string": root},
        f"{STD}/numaNode": {"int": numa},
    }


def _mig_capacity(p: MigProfileSpec) -> Obj:
    return {
        "multiprocessors": {"value": str(p.multiprocessors)},
        "copyEngines": {"value": str(p.copy_engines)},
        "decoders": {"value": str(p.decoders)},
        "encoders": {"value": str(p.encoders)},
        "jpegEngines": {"value": str(p.jpeg)},
        "ofaEngines": {"value": str(p.ofa)},
        "memory": {"value": _mem(p.memory_mib)},
    }


def _mig_attributes(gpu: Obj, profile: MigProfileSpec, uuid: str | None) -> Obj:
    attrs = {k: v for k, v in gpu.items() if k not in ("uuid", "type", f"{STD}/numaNode")}
    attrs["type"] = {"string": "mig"}
    attrs["parentUUID"] = {"string": gpu["uuid"]["string"]}
    attrs["profile"] = {"string": profile.name}
    if uuid is not None:
        attrs["uuid"] = {"string": uuid}
    if f"{STD}/numaNode" in gpu:
        attrs[f"{STD}/numaNode"] = gpu[f"{STD}/numaNode"]
    return attrs


_COUNTER_NAMES = {
    "multiprocessors": "multiprocessors",
    "copyEngines": "copy-engines",
    "decoders": "decoders",
    "encoders": "encoders",
    "jpegEngines": "jpeg-engines",
    "ofaEngines": "ofa-engines",
    "memory": "memory",
}


def _counters(capacity: Obj, start: int, size: int) -> Obj:
    out = {_COUNTER_NAMES[k]: {"value": v["value"]} for k, v in capacity.items() if k in _COUNTER_NAMES}
    for i in range(start, start + size):
        out[f"memory-slice-{i}"] = {"value": "1"}
    return out


def _gpu_devices(cfg: NodeGpus, node: str, minor: int) -> tuple[list[Obj], Obj | None]:
    """The devices of one GPU, and its counter set when partitionable."""
    gpu_attrs = _gpu_attributes(cfg, node, minor)
    model = cfg.model
    if cfg.partitionable and model.mig_capable:
        full = max(model.mig_profiles, key=lambda p: (p.memory_slices, p.compute_slices))
        full_cap = _mig_capacity(full)
        full_cap["memory"] = {"value": _mem(model.memory_mib)}
        set_name = f"gpu-{minor}-counter-set"
        counter_set = {"name": set_name, "counters": _counters(full_cap, 0, 8)}
        devices: list[Obj] = [
            {
                "name": f"gpu-{minor}",
                "attributes": gpu_attrs,
                "capacity": full_cap,
                "consumesCounters": [{"counterSet": set_name, "counters": _counters(full_cap, 0, 8)}],
            }
        ]
        for profile in sorted(model.mig_profiles, key=lambda p: (p.memory_slices, p.name)):
            for start in _gi(profile)[1]:
                cap = _mig_capacity(profile)
                devices.append(
                    {
                        "name": mig_device_name(minor, profile, start),
                        "attributes": _mig_attributes(gpu_attrs, profile, None),
                        "capacity": cap,
                        "consumesCounters": [
                            {"counterSet": set_name, "counters": _counters(cap, start, profile.memory_slices)}
                        ],
                    }
                )
        return devices, counter_set
    if minor < cfg.mig_gpus and cfg.mig_layout:
        devices = []
        for profile, start in place_layout(cfg.mig_layout):
            cap = _mig_capacity(profile)
            for i in range(start, start + profile.memory_slices):
                cap[f"memorySlice{i}"] = {"value": "1"}
            uuid = _uuid("MIG", node, str(minor), profile.name, str(start))
            devices.append(
                {
                    "name": mig_device_name(minor, profile, start),
                    "attributes": _mig_attributes(gpu_attrs, profile, uuid),
                    "capacity": cap,
                }
            )
        return devices, None
    return [
        {
            "name": f"gpu-{minor}",
            "attributes": gpu_attrs,
            "capacity": {"memory": {"value": _mem(model.memory_mib)}},
        }
    ], None


def render_slices(node: str, cfg: NodeGpus, generation: int = 1) -> list[Obj]:
    """The ResourceSlices of one node's pool (pool name = node name), as the kubelet plugin publishes them.

    Devices go into slices of at most 128 devices (64 when they consume counters); counter sets get a
    slice of their own (a v1 slice carries devices or sharedCounters, not both)."""
    devices: list[Obj] = []
    counter_sets: list[Obj] = []
    for minor in range(cfg.count):
        devs, cs = _gpu_devices(cfg, node, minor)
        devices += devs
        if cs is not None:
            counter_sets.append(cs)
    limit = MAX_DEVICES_WITH_COUNTERS if counter_sets else MAX_DEVICES
    chunks = [devices[i : i + limit] for i in range(0, len(devices), limit)] or [[]]
    specs: list[Obj] = []
    if counter_sets:
        specs.append({"sharedCounters": counter_sets})
    specs += [{"devices": chunk} for chunk in chunks]
    out = []
    for i, extra in enumerate(specs):
        out.append(
            {
                "apiVersion": API,
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-{DRIVER}-{_hex(node, str(i), n=5)}"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": node,
                    "pool": {"name": node, "generation": generation, "resourceSliceCount": len(specs)},
                    **extra,
                },
            }
        )
    return out


# --------------------------------------------------------------------------- validation

_ALLOCATION_MODES = ("ExactCount", "All")


def _check_selectors(sels: Any, path: str, causes: list[tuple[str, str]]) -> None:
    if sels is None:
        return
    if not isinstance(sels, list):
        causes.append((path, "Invalid value: must be a list"))
        return
    for i, sel in enumerate(sels):
        cel = sel.get("cel") if isinstance(sel, dict) else None
        expr = cel.get("expression") if isinstance(cel, dict) else None
        if not isinstance(expr, str) or not expr.strip():
            causes.append((f"{path}[{i}].cel.expression", "Required value"))
            continue
        try:
            compile_selector(expr)
        except CelError as exc:
            causes.append(
                (f"{path}[{i}].cel.expression", f"Invalid value: {expr!r}: compilation failed: {exc}")
            )


def _check_exact(req: Any, path: str, causes: list[tuple[str, str]]) -> None:
    if not isinstance(req, dict):
        causes.append((path, "Required value"))
        return
    if not req.get("deviceClassName"):
        causes.append((f"{path}.deviceClassName", "Required value"))
    mode = req.get("allocationMode", "ExactCount")
    if mode not in _ALLOCATION_MODES:
        causes.append(
            (f"{path}.allocationMode", f'Unsupported value: "{mode}": supported values: "All", "ExactCount"')
        )
    count = req.get("count")
    if count is not None:
        if mode == "All":
            causes.append(
                (
                    f"{path}.count",
                    f"Invalid value: {count}: must not be specified when allocationMode is 'All'",
                )
            )
        elif not isinstance(count, int) or isinstance(count, bool) or count <= 0:
            causes.append((f"{path}.count", f"Invalid value: {count}: must be greater than zero"))
    _check_selectors(req.get("selectors"), f"{path}.selectors", causes)


def _check_claim_spec(spec: Any, path: str, causes: list[tuple[str, str]]) -> None:
    devices = spec.get("devices") if isinstance(spec, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    if requests is None:
        return  # an empty claim is valid
    if not isinstance(requests, list):
        causes.append((f"{path}.devices.requests", "Invalid value: must be a list"))
        return
    seen: set[str] = set()
    for i, req in enumerate(requests):
        rpath = f"{path}.devices.requests[{i}]"
        if not isinstance(req, dict):
            causes.append((rpath, "Invalid value: must be an object"))
            continue
        name = req.get("name")
        if not name:
            causes.append((f"{rpath}.name", "Required value"))
        elif name in seen:
            causes.append((f"{rpath}.name", f'Duplicate value: "{name}"'))
        else:
            seen.add(str(name))
        exact, first = req.get("exactly"), req.get("firstAvailable")
        if exact is None and first is None:
            causes.append((rpath, "Required value: exactly one of `exactly` or `firstAvailable` is required"))
        elif exact is not None and first is not None:
            causes.append(
                (
                    rpath,
                    "Invalid value: exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set",
                )
            )
        elif exact is not None:
            _check_exact(exact, f"{rpath}.exactly", causes)
        else:
            if not isinstance(first, list) or not first:
                causes.append((f"{rpath}.firstAvailable", "Required value"))
                continue
            for j, sub in enumerate(first):
                if not isinstance(sub, dict) or not sub.get("name"):
                    causes.append((f"{rpath}.firstAvailable[{j}].name", "Required value"))
                _check_exact(sub, f"{rpath}.firstAvailable[{j}]", causes)


def _check_slice(spec: Any, causes: list[tuple[str, str]]) -> None:
    if not isinstance(spec, dict):
        causes.append(("spec", "Required value"))
        return
    if not spec.get("driver"):
        causes.append(("spec.driver", "Required value"))
    pool = spec.get("pool")
    if not isinstance(pool, dict) or not pool.get("name"):
        causes.append(("spec.pool.name", "Required value"))
    else:
        gen = pool.get("generation", 0)
        if not isinstance(gen, int) or gen < 0:
            causes.append(
                ("spec.pool.generation", f"Invalid value: {gen}: must be greater than or equal to 0")
            )
        count = pool.get("resourceSliceCount")
        if not isinstance(count, int) or count <= 0:
            causes.append(
                ("spec.pool.resourceSliceCount", f"Invalid value: {count}: must be greater than zero")
            )
    where = [k for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(k)]
    if len(where) != 1:
        causes.append(
            (
                "spec",
                "Invalid value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required",
            )
        )
    devices = spec.get("devices") or []
    counters = spec.get("sharedCounters") or []
    if devices and counters:
        causes.append(("spec", "Invalid value: only one of `devices` or `sharedCounters` may be set"))
    uses_counters = any(isinstance(d, dict) and d.get("consumesCounters") for d in devices)
    limit = MAX_DEVICES_WITH_COUNTERS if uses_counters else MAX_DEVICES
    if len(devices) > limit:
        causes.append(("spec.devices", f"Too many: {len(devices)}: must have at most {limit} items"))
    names: set[str] = set()
    for i, d in enumerate(devices):
        name = d.get("name") if isinstance(d, dict) else None
        if not name:
            causes.append((f"spec.devices[{i}].name", "Required value"))
            continue
        if name in names:
            causes.append((f"spec.devices[{i}].name", f'Duplicate value: "{name}"'))
        names.add(name)
        for aname, value in (d.get("attributes") or {}).items():
            kinds = [k for k in ("int", "bool", "string", "version") if k in (value or {})]
            if len(kinds) != 1:
                causes.append(
                    (
                        f"spec.devices[{i}].attributes[{aname}]",
                        "Invalid value: exactly one value must be specified",
                    )
                )
        for cname, value in (d.get("capacity") or {}).items():
            try:
                parse_quantity((value or {}).get("value", ""))
            except QuantityError:
                causes.append((f"spec.devices[{i}].capacity[{cname}].value", "Required value"))


def validate_pod_claims(spec: Obj, path: str) -> list[tuple[str, str]]:
    """A pod spec's `resourceClaims` and its containers' `resources.claims`, as the real server checks."""
    causes: list[tuple[str, str]] = []
    names: list[str] = []
    for i, claim in enumerate(spec.get("resourceClaims") or ()):
        cpath = f"{path}.resourceClaims[{i}]"
        if not isinstance(claim, dict):
            causes.append((cpath, "Invalid value: must be an object"))
            continue
        name = claim.get("name")
        if not name:
            causes.append((f"{cpath}.name", "Required value"))
        elif name in names:
            causes.append((f"{cpath}.name", f'Duplicate value: "{name}"'))
        else:
            names.append(str(name))
        by_name, by_template = claim.get("resourceClaimName"), claim.get("resourceClaimTemplateName")
        if by_name and by_template:
            causes.append(
                (
                    cpath,
                    "Invalid value: at most one of `resourceClaimName` or `resourceClaimTemplateName` may be specified",
                )
            )
        elif not by_name and not by_template:
            causes.append(
                (
                    cpath,
                    "Invalid value: must specify one of: `resourceClaimName`, `resourceClaimTemplateName`",
                )
            )
    listed = ": " + ", ".join(sorted(names)) if names else " which is empty"
    for kind in ("initContainers", "containers"):
        for j, c in enumerate(spec.get(kind) or ()):
            resources = c.get("resources") if isinstance(c, dict) else None
            for k, ref in enumerate(
                (resources or {}).get("claims") or () if isinstance(resources, dict) else ()
            ):
                rpath = f"{path}.{kind}[{j}].resources.claims[{k}]"
                rname = ref.get("name") if isinstance(ref, dict) else None
                if not rname:
                    causes.append((rpath, "Required value"))
                elif rname not in names:
                    causes.append(
                        (
                            rpath,
                            f'Not found: "{rname}": must be one of the names in pod.spec.resourceClaims{listed}',
                        )
                    )
    return causes


def validate(kind: str, obj: Obj) -> list[tuple[str, str]]:
    """Field errors (path, message) for a DRA object, as the real API server reports them (a subset)."""
    causes: list[tuple[str, str]] = []
    spec = obj.get("spec")
    if kind == "DeviceClass":
        _check_selectors((spec or {}).get("selectors"), "spec.selectors", causes)
    elif kind == "ResourceSlice":
        _check_slice(spec, causes)
    elif kind == "ResourceClaim":
        _check_claim_spec(spec, "spec", causes)
    elif kind == "ResourceClaimTemplate":
        if not isinstance(spec, dict) or not isinstance(spec.get("spec"), dict):
            causes.append(("spec.spec", "Required value"))
        else:
            _check_claim_spec(spec["spec"], "spec.spec", causes)
    return causes


def validate_update(kind: str, old: Obj, new: Obj) -> list[tuple[str, str]]:
    """Claims and templates have an immutable spec (the real server: 'field is immutable')."""
    if kind in ("ResourceClaim", "ResourceClaimTemplate") and old.get("spec") != new.get("spec"):
        return [("spec", "Invalid value: field is immutable")]
    return []


# --------------------------------------------------------------------------- allocation


@dataclass(frozen=True)
class Device:
    driver: str
    pool: str
    name: str
    node: str
    view: DeviceView
    consumes: tuple[tuple[str, str, float], ...]  # (counterSet, counter, amount)


def _attr_value(value: Mapping[str, Any]) -> Any:
    if "version" in value:
        return Version.parse(str(value["version"]))
    for k in ("string", "int", "bool"):
        if k in value:
            return value[k]
    return None


def _view(driver: str, device: Obj) -> DeviceView:
    attrs: dict[str, dict[str, Any]] = {}
    for name, value in (device.get("attributes") or {}).items():
        domain, _, short = name.rpartition("/")
        attrs.setdefault(domain or driver, {})[short] = _attr_value(value or {})
    caps: dict[str, dict[str, float]] = {}
    for name, value in (device.get("capacity") or {}).items():
        domain, _, short = name.rpartition("/")
        try:
            caps.setdefault(domain or driver, {})[short] = parse_quantity((value or {}).get("value", 0))
        except QuantityError:
            continue
    return DeviceView(driver=driver, attributes=attrs, capacity=caps)


def current_slices(slices: Iterable[Obj]) -> list[Obj]:
    """The slices of each (driver, pool) at the pool's highest generation (older ones are stale)."""
    top: dict[tuple[str, str], int] = {}
    items = list(slices)
    for s in items:
        spec = s.get("spec") or {}
        key = (spec.get("driver", ""), (spec.get("pool") or {}).get("name", ""))
        top[key] = max(top.get(key, 0), int((spec.get("pool") or {}).get("generation", 0)))
    out = []
    for s in items:
        spec = s.get("spec") or {}
        key = (spec.get("driver", ""), (spec.get("pool") or {}).get("name", ""))
        if int((spec.get("pool") or {}).get("generation", 0)) == top[key]:
            out.append(s)
    return out


@dataclass
class _Inventory:
    devices: dict[str, list[Device]]  # node -> devices in slice order
    counters: dict[tuple[str, str, str, str], float]  # (driver, pool, set, counter) -> capacity


def _inventory(slices: Iterable[Obj]) -> _Inventory:
    inv = _Inventory({}, {})
    for s in sorted(current_slices(slices), key=lambda o: o["metadata"]["name"]):
        spec = s.get("spec") or {}
        driver = spec.get("driver", "")
        pool = (spec.get("pool") or {}).get("name", "")
        node = spec.get("nodeName") or ""
        for cs in spec.get("sharedCounters") or ():
            for cname, value in (cs.get("counters") or {}).items():
                inv.counters[(driver, pool, cs.get("name", ""), cname)] = parse_quantity(
                    value.get("value", 0)
                )
        for d in spec.get("devices") or ():
            consumes = tuple(
                (c.get("counterSet", ""), cname, parse_quantity(v.get("value", 0)))
                for c in d.get("consumesCounters") or ()
                for cname, v in (c.get("counters") or {}).items()
            )
            inv.devices.setdefault(node, []).append(
                Device(driver, pool, d["name"], node, _view(driver, d), consumes)
            )
    return inv


class AllocationError(Exception):
    """A claim that cannot be allocated on the node; the message is the scheduler's reason."""


class Allocator:
    """Finds devices for a pod's claims on one node, from the slices, classes and allocated claims given."""

    def __init__(self, slices: Iterable[Obj], classes: Iterable[Obj], claims: Iterable[Obj]) -> None:
        self._inv = _inventory(slices)
        self._classes: dict[str, list[Selector]] = {}
        for dc in classes:
            sels = []
            for sel in (dc.get("spec") or {}).get("selectors") or ():
                try:
                    sels.append(compile_selector(((sel or {}).get("cel") or {}).get("expression", "")))
                except CelError:
                    sels.append(compile_selector("false"))
            self._classes[dc["metadata"]["name"]] = sels
        self._used: set[tuple[str, str, str]] = set()
        self._consumed: dict[tuple[str, str, str, str], float] = {}
        by_key = {(d.driver, d.pool, d.name): d for devs in self._inv.devices.values() for d in devs}
        for claim in claims:
            alloc = (claim.get("status") or {}).get("allocation") or {}
            for r in (alloc.get("devices") or {}).get("results") or ():
                key = (r.get("driver", ""), r.get("pool", ""), r.get("device", ""))
                self._take(by_key.get(key), key)

    def _take(self, device: Device | None, key: tuple[str, str, str]) -> None:
        self._used.add(key)
        if device is None:
            return
        for cset, counter, amount in device.consumes:
            ck = (device.driver, device.pool, cset, counter)
            self._consumed[ck] = self._consumed.get(ck, 0.0) + amount

    def _fits(self, device: Device, extra: Mapping[tuple[str, str, str, str], float]) -> bool:
        for cset, counter, amount in device.consumes:
            ck = (device.driver, device.pool, cset, counter)
            have = self._inv.counters.get(ck)
            if have is None:
                return False
            if self._consumed.get(ck, 0.0) + extra.get(ck, 0.0) + amount > have + 1e-9:
                return False
        return True

    def node_devices(self, node: str) -> list[Device]:
        return self._inv.devices.get(node, [])

    def allocate(self, node: str, claims: Sequence[Obj]) -> list[list[Obj]]:
        """For each claim (not yet allocated), the `results` entries on `node`; AllocationError if not."""
        picked: set[tuple[str, str, str]] = set()
        extra: dict[tuple[str, str, str, str], float] = {}
        out: list[list[Obj]] = []
        devices = self.node_devices(node)
        for claim in claims:
            results: list[Obj] = []
            reqs = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ()
            for req in reqs:
                options: list[tuple[str, Obj]]
                if req.get("exactly") is not None:
                    options = [(req["name"], req["exactly"])]
                else:
                    options = [
                        (f"{req['name']}/{sub['name']}", sub) for sub in req.get("firstAvailable") or ()
                    ]
                for rname, exact in options:
                    chosen = self._pick(devices, exact, picked, extra)
                    if chosen is not None:
                        for d in chosen:
                            key = (d.driver, d.pool, d.name)
                            picked.add(key)
                            for cset, counter, amount in d.consumes:
                                ck = (d.driver, d.pool, cset, counter)
                                extra[ck] = extra.get(ck, 0.0) + amount
                            results.append(
                                {"request": rname, "driver": d.driver, "pool": d.pool, "device": d.name}
                            )
                        break
                else:
                    raise AllocationError("cannot allocate all claims")
            out.append(results)
        return out

    def _pick(
        self,
        devices: list[Device],
        exact: Obj,
        picked: set[tuple[str, str, str]],
        extra: dict[tuple[str, str, str, str], float],
    ) -> list[Device] | None:
        cls = exact.get("deviceClassName", "")
        if cls not in self._classes:
            return None
        sels = self._classes[cls] + [
            compile_selector(s["cel"]["expression"]) for s in exact.get("selectors") or ()
        ]
        mode = exact.get("allocationMode", "ExactCount")
        want = int(exact.get("count", 1))
        local_extra = dict(extra)
        chosen: list[Device] = []
        matching = 0
        for d in devices:
            key = (d.driver, d.pool, d.name)
            if not all(s.matches(d.view) for s in sels):
                continue
            matching += 1
            if key in self._used or key in picked or not self._fits(d, local_extra):
                continue
            chosen.append(d)
            for cset, counter, amount in d.consumes:
                ck = (d.driver, d.pool, cset, counter)
                local_extra[ck] = local_extra.get(ck, 0.0) + amount
            if mode != "All" and len(chosen) == want:
                return chosen
        if mode == "All" and chosen and len(chosen) == matching:
            return chosen
        return None


def allocation(node: str, results: list[Obj]) -> Obj:
    """A claim's status.allocation for devices on `node` (nodeSelector by metadata.name, as the scheduler)."""
    return {
        "devices": {"results": results},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }


def allocated_node(claim: Obj) -> str | None:
    """The node an allocated claim is bound to (its allocation.nodeSelector), or None."""
    alloc = (claim.get("status") or {}).get("allocation")
    if not alloc:
        return None
    for term in ((alloc.get("nodeSelector") or {}).get("nodeSelectorTerms")) or ():
        for f in term.get("matchFields") or ():
            if f.get("key") == "metadata.name" and f.get("values"):
                return str(f["values"][0])
    return ""
