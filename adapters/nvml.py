"""This host's NVIDIA GPUs as the broker sees a node: NodeFacts plus GPU-feature-discovery-style labels.

Owns reading the local GPU inventory, from one of two sources:
    NVML (nvidia-ml-py, `import pynvml`)   the live host: GPUs, memory, compute capability, MIG mode, the
                                           supported GPU-instance profiles with their max counts, the MIG
                                           instances that exist, NUMA affinity
    `nvidia-smi -q -x` XML                 a captured inventory; it carries no compute capability, no
                                           GPU-instance profiles and no NUMA node, so the compute capability
                                           comes from the architecture where that is unambiguous and the
                                           profiles from the catalog's tables (broker.core.catalog, reference 1.5)

Public:
    probe(nvidia_smi_xml: Path | None = None) -> ProbeResult    never raises for "no GPU" / "no NVML"
    render(result, fmt) -> str                                   fmt: json | yaml | table

NUMA: a PCI numa_node of -1 and NVML's "Not Supported" both mean "no NUMA information" (numa_node None).
"""

from __future__ import annotations

import contextlib
import platform
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson
import yaml

from broker.core import catalog
from broker.core.errors import MalformedObject
from broker.core.model import GpuProduct, MigProfile, MigSlices, MigStrategy, NodeFacts, NumaZone

SOURCE_NVML = "nvml"
SOURCE_XML = "nvidia-smi-xml"
SOURCE_NONE = "none"

# Architecture -> compute capability, only where every GPU of the architecture shares it.
_ARCH_COMPUTE: dict[str, tuple[int, int]] = {
    "volta": (7, 0),
    "turing": (7, 5),
    "hopper": (9, 0),
    "ada lovelace": (8, 9),
}
# NVML architecture enum (nvmlDeviceGetArchitecture) -> the name nvidia-smi prints.
_NVML_ARCH = {5: "Volta", 6: "Turing", 7: "Ampere", 8: "Ada Lovelace", 9: "Hopper", 10: "Blackwell"}


@dataclass(frozen=True)
class GpuDevice:
    """One physical GPU of this host."""

    index: int
    name: str  # as the driver reports it: "NVIDIA H200"
    uuid: str
    pci_bus_id: str
    memory_mib: int
    architecture: str = ""
    compute_major: int | None = None
    compute_minor: int | None = None
    mig_capable: bool = False
    mig_enabled: bool = False
    mig_pending_enabled: bool = False
    numa_node: int | None = None  # None: no NUMA information
    mig_profiles: tuple[MigProfile, ...] = ()  # supported GPU-instance profiles, homogeneous max counts
    mig_instances: tuple[str, ...] = ()  # profile names of the GPU instances that exist now


@dataclass(frozen=True)
class ProbeResult:
    """What probe() found. `found` is False (with `message` saying why) when there is no NVIDIA GPU."""

    source: str
    hostname: str
    gpus: tuple[GpuDevice, ...] = ()
    driver_version: str = ""
    cuda_version: str = ""  # the CUDA version the driver supports, "13.0"
    mig_profiles_source: str = ""  # nvml | catalog | "" (none)
    message: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    node: NodeFacts | None = None

    @property
    def found(self) -> bool:
        return bool(self.gpus)


# --------------------------------------------------------------------------- public


def probe(nvidia_smi_xml: Path | None = None) -> ProbeResult:
    """This host's GPUs through NVML, or the inventory in an `nvidia-smi -q -x` file when one is given.

    No NVIDIA GPU, or no NVML library, gives a result with found=False and a message, never an exception.
    A given XML file that can't be read raises MalformedObject naming the file and the field."""
    host = platform.node() or "localhost"
    if nvidia_smi_xml is not None:
        gpus, driver, cuda = _read_nvidia_smi_xml(Path(nvidia_smi_xml))
        return _result(SOURCE_XML, host, gpus, driver, cuda)
    try:
        gpus, driver, cuda = _read_nvml()
    except _NoGpuError as e:
        return ProbeResult(source=SOURCE_NONE, hostname=host, message=f"no NVIDIA GPU: {e}")
    return _result(SOURCE_NVML, host, gpus, driver, cuda)


def render(result: ProbeResult, fmt: str) -> str:
    """The result as json, yaml or a human table."""
    data = as_dict(result)
    if fmt == "json":
        return orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n"
    if fmt == "yaml":
        return yaml.safe_dump(data, sort_keys=False)
    if fmt == "table":
        return _table(result)
    raise ValueError(f"fmt: must be one of json, yaml, table (got {fmt!r})")


def as_dict(result: ProbeResult) -> dict[str, Any]:
    """Plain JSON-able data: the GPUs, the labels and the node as the broker would see it."""
    data: dict[str, Any] = {
        "found": result.found,
        "source": result.source,
        "hostname": result.hostname,
        "message": result.message,
        "driver_version": result.driver_version,
        "cuda_version": result.cuda_version,
        "mig_profiles_source": result.mig_profiles_source,
        "gpus": [
            {
                **{k: v for k, v in asdict(g).items() if k not in ("mig_profiles", "mig_instances")},
                "mig_profiles": [
                    {
                        "name": p.name,
                        "max_per_gpu": p.max_per_gpu,
                        "compute_slices": p.compute_slices,
                        "memory_gb": p.memory_gb,
                    }
                    for p in g.mig_profiles
                ],
                "mig_instances": list(g.mig_instances),
            }
            for g in result.gpus
        ],
        "labels": dict(result.labels),
    }
    n = result.node
    if n is not None:
        data["node"] = {
            "name": n.name,
            "product": None if n.product is None else asdict(n.product),
            "gpu_count": n.gpu_count,
            "gpus_allocatable": n.gpus_allocatable,
            "mig_strategy": n.mig_strategy.value,
            "mig": [asdict(m) for m in n.mig],
            "numa_zones": [asdict(z) for z in n.numa_zones],
        }
    return data


# --------------------------------------------------------------------------- building the result


def _result(source: str, host: str, gpus: list[GpuDevice], driver: str, cuda: str) -> ProbeResult:
    if not gpus:
        return ProbeResult(
            source=source,
            hostname=host,
            driver_version=driver,
            cuda_version=cuda,
            message="no NVIDIA GPU: the driver reports 0 devices",
        )
    from_driver = any(g.mig_profiles for g in gpus)
    gpus = [_with_catalog_profiles(g) if not g.mig_profiles and g.mig_capable else g for g in gpus]
    profiles_source = ""
    if any(g.mig_profiles for g in gpus):
        profiles_source = SOURCE_NVML if from_driver else "catalog"
    labels = gfd_labels(gpus, driver, cuda)
    return ProbeResult(
        source=source,
        hostname=host,
        gpus=tuple(gpus),
        driver_version=driver,
        cuda_version=cuda,
        mig_profiles_source=profiles_source,
        labels=labels,
        node=node_facts(host, gpus, labels),
    )


def _product(g: GpuDevice) -> GpuProduct:
    return catalog.normalise_product(_label_product(g.name), g.memory_mib)


def _with_catalog_profiles(g: GpuDevice) -> GpuDevice:
    product = _product(g)
    profiles = catalog.mig_profiles(product.name) if product.known else ()
    return replace(g, mig_profiles=tuple(profiles))


def _label_product(name: str) -> str:
    return "-".join(name.split())


def _family(major: int | None, minor: int | None, architecture: str) -> str:
    if major is not None:
        if major == 8:
            return "ada-lovelace" if minor == 9 else "ampere"
        return {7: "volta" if minor == 0 else "turing", 9: "hopper", 10: "blackwell", 12: "blackwell"}.get(
            major, ""
        )
    return "-".join(architecture.lower().split())


def gfd_labels(gpus: Sequence[GpuDevice], driver: str, cuda: str) -> dict[str, str]:
    """The labels GPU feature discovery would put on this node (reference 1.1), for its first GPU model."""
    g = gpus[0]
    same = [x for x in gpus if x.name == g.name]
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": _label_product(g.name),
        "nvidia.com/gpu.count": str(len(same)),
        "nvidia.com/gpu.memory": str(g.memory_mib),
        "nvidia.com/gpu.replicas": "0" if g.mig_enabled else "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.capable": "true" if any(x.mig_capable for x in gpus) else "false",
    }
    family = _family(g.compute_major, g.compute_minor, g.architecture)
    if family:
        labels["nvidia.com/gpu.family"] = family
    if g.compute_major is not None and g.compute_minor is not None:
        labels["nvidia.com/gpu.compute.major"] = str(g.compute_major)
        labels["nvidia.com/gpu.compute.minor"] = str(g.compute_minor)
    parts = driver.split(".")
    if len(parts) == 3:
        for suffix, value in zip(("major", "minor", "revision"), parts, strict=True):
            labels[f"nvidia.com/cuda.driver-version.{suffix}"] = value
        labels["nvidia.com/cuda.driver-version.full"] = driver
        for suffix, value in zip(("major", "minor", "rev"), parts, strict=True):
            labels[f"nvidia.com/cuda.driver.{suffix}"] = value  # deprecated names, still emitted by GFD
    cuda_parts = cuda.split(".")
    if len(cuda_parts) == 2:
        labels["nvidia.com/cuda.runtime-version.major"] = cuda_parts[0]
        labels["nvidia.com/cuda.runtime-version.minor"] = cuda_parts[1]
        labels["nvidia.com/cuda.runtime-version.full"] = cuda
        labels["nvidia.com/cuda.runtime.major"] = cuda_parts[0]
        labels["nvidia.com/cuda.runtime.minor"] = cuda_parts[1]
    return labels


def node_facts(host: str, gpus: Sequence[GpuDevice], labels: Mapping[str, str]) -> NodeFacts:
    """This host as a broker node: whole GPUs where MIG is off, MIG instances (mixed) where it is on."""
    whole = [g for g in gpus if not g.mig_enabled]
    instances: dict[str, int] = {}
    for g in gpus:
        for name in g.mig_instances:
            instances[name] = instances.get(name, 0) + 1
    mig = tuple(MigSlices(profile=p, allocatable=n, allocated=0) for p, n in sorted(instances.items()))
    zones: dict[int, int] = {}
    if all(g.numa_node is not None for g in whole) and whole:
        for g in whole:
            assert g.numa_node is not None
            zones[g.numa_node] = zones.get(g.numa_node, 0) + 1
    return NodeFacts(
        name=host,
        product=_product(gpus[0]),
        gpu_count=len(gpus),
        gpus_allocatable=len(whole),
        mig_strategy=MigStrategy.MIXED if any(g.mig_enabled for g in gpus) else MigStrategy.NONE,
        mig=mig,
        numa_zones=tuple(
            NumaZone(name=f"node-{n}", gpus_allocatable=k, gpus_available=k) for n, k in sorted(zones.items())
        ),
        labels=dict(labels),
    )


def _table(result: ProbeResult) -> str:
    if not result.found:
        return f"{result.hostname}: {result.message}\n"
    lines = [
        f"host {result.hostname}  source {result.source}  driver {result.driver_version}  "
        f"CUDA {result.cuda_version}",
        "",
        f"{'GPU':<4}{'NAME':<22}{'PRODUCT':<14}{'MEMORY':>12}  {'CC':<5}{'MIG':<18}{'NUMA':<6}",
    ]
    for g in result.gpus:
        cc = f"{g.compute_major}.{g.compute_minor}" if g.compute_major is not None else "-"
        mig = "enabled" if g.mig_enabled else ("capable, disabled" if g.mig_capable else "no")
        numa = "-" if g.numa_node is None else str(g.numa_node)
        lines.append(
            f"{g.index:<4}{g.name:<22}{_product(g).name:<14}{g.memory_mib:>8} MiB  {cc:<5}{mig:<18}{numa:<6}"
        )
    for g in result.gpus:
        if g.mig_profiles:
            lines += ["", f"GPU {g.index} MIG profiles ({result.mig_profiles_source}):"]
            lines += [f"  {p.name:<14} x{p.max_per_gpu}" for p in g.mig_profiles]
    lines += ["", "labels:"] + [f"  {k}={v}" for k, v in sorted(result.labels.items())]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- nvidia-smi -q -x


def _text(el: ET.Element, path: str) -> str:
    found = el.find(path)
    return "" if found is None or found.text is None else found.text.strip()


def _read_nvidia_smi_xml(path: Path) -> tuple[list[GpuDevice], str, str]:
    src = str(path)
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        raise MalformedObject(src, "(file)", f"not a readable nvidia-smi -q -x document: {e}") from e
    if root.tag != "nvidia_smi_log":
        raise MalformedObject(src, "(root)", f"expected <nvidia_smi_log>, found <{root.tag}>")
    gpus: list[GpuDevice] = []
    for i, el in enumerate(root.findall("gpu")):
        where = f"gpu[{i}]"
        name = _text(el, "product_name")
        if not name:
            raise MalformedObject(src, f"{where}.product_name", "missing")
        mem = _text(el, "fb_memory_usage/total")
        try:
            memory_mib = int(mem.split()[0])
        except (IndexError, ValueError):
            raise MalformedObject(src, f"{where}.fb_memory_usage.total", f"not '<n> MiB': {mem!r}") from None
        arch = _text(el, "product_architecture")
        cc = _ARCH_COMPUTE.get(arch.lower())
        current = _text(el, "mig_mode/current_mig")
        pending = _text(el, "mig_mode/pending_mig")
        gpus.append(
            GpuDevice(
                index=i,
                name=name,
                uuid=_text(el, "uuid"),
                pci_bus_id=el.get("id", "") or _text(el, "pci/pci_bus_id"),
                memory_mib=memory_mib,
                architecture=arch,
                compute_major=cc[0] if cc else None,
                compute_minor=cc[1] if cc else None,
                mig_capable=current not in ("", "N/A"),
                mig_enabled=current == "Enabled",
                mig_pending_enabled=pending == "Enabled",
                numa_node=None,  # nvidia-smi -q does not report it
            )
        )
    return gpus, _text(root, "driver_version"), _text(root, "cuda_version")


# --------------------------------------------------------------------------- NVML


class _NoGpuError(Exception):
    """No NVML library, no driver, or no device: a normal outcome on a CPU host."""


def _nvml_str(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _read_nvml() -> tuple[list[GpuDevice], str, str]:
    try:
        import pynvml
    except ImportError as e:  # the package is a dependency, but a trimmed install may lack it
        raise _NoGpuError(f"nvidia-ml-py is not installed ({e})") from e
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        raise _NoGpuError(str(e)) from e
    try:
        driver = _nvml_str(pynvml.nvmlSystemGetDriverVersion())
        cuda = ""
        with contextlib.suppress(pynvml.NVMLError):
            v = int(pynvml.nvmlSystemGetCudaDriverVersion())
            cuda = f"{v // 1000}.{(v % 1000) // 10}"
        count = int(pynvml.nvmlDeviceGetCount())
        return [_nvml_device(pynvml, i) for i in range(count)], driver, cuda
    except pynvml.NVMLError as e:
        raise _NoGpuError(f"NVML failed: {e}") from e
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _sysfs_numa_node(pci_bus_id: str) -> int | None:
    """The PCI device's numa_node from sysfs; -1 (or no file) means unknown."""
    bus = pci_bus_id.lower()
    if len(bus.split(":")[0]) == 8:  # NVML's 8-digit domain; sysfs uses 4
        bus = bus[4:]
    try:
        value = int(Path(f"/sys/bus/pci/devices/{bus}/numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def _nvml_device(nv: Any, index: int) -> GpuDevice:
    h = nv.nvmlDeviceGetHandleByIndex(index)
    name = _nvml_str(nv.nvmlDeviceGetName(h))
    pci = _nvml_str(nv.nvmlDeviceGetPciInfo(h).busId)
    memory_mib = int(nv.nvmlDeviceGetMemoryInfo(h).total) // (1024 * 1024)
    major, minor = (int(x) for x in nv.nvmlDeviceGetCudaComputeCapability(h))
    try:
        arch = _NVML_ARCH.get(int(nv.nvmlDeviceGetArchitecture(h)), "")
    except nv.NVMLError:
        arch = ""
    try:
        current, pending = (int(x) for x in nv.nvmlDeviceGetMigMode(h))
        capable = True
    except nv.NVMLError:  # Not Supported: no MIG on this GPU
        current, pending, capable = 0, 0, False
    numa: int | None
    try:
        numa = int(nv.nvmlDeviceGetNumaNodeId(h))
        numa = numa if numa >= 0 else None
    except (nv.NVMLError, AttributeError):
        numa = None
    if numa is None:
        numa = _sysfs_numa_node(pci)
    profiles: list[MigProfile] = []
    by_id: dict[int, str] = {}
    if capable:
        for p in range(nv.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = nv.nvmlDeviceGetGpuInstanceProfileInfo(h, p)
            except nv.NVMLError:  # Not Supported / Invalid Argument: the driver has no such profile
                continue
            pname = _nvml_str(info.name).removeprefix("MIG ").strip()
            slices, mem_gb, _ = catalog.parse_profile(pname)
            profiles.append(MigProfile(pname, slices, mem_gb, int(info.instanceCount)))
            by_id[int(info.id)] = pname
    instances: list[str] = []
    if current == 1:
        for m in range(int(nv.nvmlDeviceGetMaxMigDeviceCount(h))):
            try:
                mh = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, m)
                gi = nv.nvmlDeviceGetGpuInstanceById(h, int(nv.nvmlDeviceGetGpuInstanceId(mh)))
                instances.append(by_id.get(int(nv.nvmlGpuInstanceGetInfo(gi).profileId), "unknown"))
            except nv.NVMLError:
                continue
    return GpuDevice(
        index=index,
        name=name,
        uuid=_nvml_str(nv.nvmlDeviceGetUUID(h)),
        pci_bus_id=pci,
        memory_mib=memory_mib,
        architecture=arch,
        compute_major=major,
        compute_minor=minor,
        mig_capable=capable,
        mig_enabled=current == 1,
        mig_pending_enabled=pending == 1,
        numa_node=numa,
        mig_profiles=tuple(profiles),
        mig_instances=tuple(instances),
    )
