"""The simulator's GPU catalog: real GFD label values and MIG profile tables, and the labels/resources of a node.

Owns
- `GpuModel` / `MigProfileSpec`: per product the GPU feature discovery values (product string with spaces
  turned into `-`, memory in MiB, family, compute capability, default machine) and the MIG profile table
  of reference section 1.5 (name, compute slices, memory slices, homogeneous maximum per GPU).
- `mig_layout(model, config)`: the per-GPU slice counts of a mig-parted config (`all-<profile>`,
  `all-balanced`).
- `gpu_labels_and_resources(...)`: the `nvidia.com/*` labels and extended resources a GPU node shows for a
  GPU model, count, MIG strategy/config and time-slicing/MPS sharing (reference 1.1 - 1.4).

Values marked UNCONFIRMED in the reference (per-profile MIG memory in MiB, multiprocessor and engine
counts) are plausible constants here; the H200 numbers come from the real host in
shared/fixtures/gpu-host-h200 (`nvidia-smi mig -lgip`). Consumers must read them, never derive them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MIG_CONFIG_DISABLED = "all-disabled"
MIG_CONFIG_BALANCED = "all-balanced"


@dataclass(frozen=True, slots=True)
class MigProfileSpec:
    """One MIG GPU-instance profile: `1g.10gb` or `1g.10gb+me`."""

    name: str
    compute_slices: int  # the "g"
    memory_slices: int  # of 8
    max_per_gpu: int  # homogeneous maximum (reference 1.5)
    memory_mib: int  # what GFD reports as mig-<p>.memory (UNCONFIRMED except H200)
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg: int
    ofa: int

    @property
    def resource_suffix(self) -> str:
        """`1g.10gb+me` -> `1g.10gb.me` (the `+` becomes `.` in resource and label names)."""
        return self.name.replace("+", ".")

    @property
    def resource_name(self) -> str:
        return f"nvidia.com/mig-{self.resource_suffix}"

    @property
    def memory_gb(self) -> int:
        return int(self.name.split(".")[1].split("gb")[0])


@dataclass(frozen=True, slots=True)
class GpuModel:
    """A GPU product as GFD labels it."""

    name: str  # catalog name: "H100-80GB"
    product: str  # nvidia.com/gpu.product: "NVIDIA-H100-80GB-HBM3"
    memory_mib: int
    family: str
    compute_major: int
    compute_minor: int
    machine: str  # default nvidia.com/gpu.machine
    mig_profiles: tuple[MigProfileSpec, ...] = ()
    balanced: tuple[tuple[str, int], ...] = ()  # all-balanced, per GPU
    aliases: tuple[str, ...] = field(default=())

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)

    def profile(self, name: str) -> MigProfileSpec:
        wanted = name.replace(".me", "+me") if name.endswith(".me") else name
        for p in self.mig_profiles:
            if p.name == wanted:
                return p
        known = ", ".join(p.name for p in self.mig_profiles) or "none (not MIG capable)"
        raise KeyError(f"{self.name} has no MIG profile {name!r}; known: {known}")


def _profiles(
    sizes: tuple[str, str, str, str, str],  # names for g1 (1 mem slice), g1 (2), g2, g3/g4, g7
    memory: dict[int, int],  # memory slices -> MiB
    sms: tuple[int, int, int, int, int, int],  # 1g, 1g-double, 2g, 3g, 4g, 7g
    engines: dict[str, tuple[int, int, int, int, int]],  # profile kind -> (copy, dec, enc, jpeg, ofa)
) -> tuple[MigProfileSpec, ...]:
    small, small2, two, three_four, seven = sizes
    rows = (
        (f"1g.{small}", 1, 1, 7, sms[0], "1g"),
        (f"1g.{small}+me", 1, 1, 1, sms[0], "1g+me"),
        (f"1g.{small2}", 1, 2, 4, sms[1], "1g"),
        (f"2g.{two}", 2, 2, 3, sms[2], "2g"),
        (f"3g.{three_four}", 3, 4, 2, sms[3], "3g"),
        (f"4g.{three_four}", 4, 4, 1, sms[4], "4g"),
        (f"7g.{seven}", 7, 8, 1, sms[5], "7g"),
    )
    out = []
    for name, g, mem, count, sm, kind in rows:
        ce, dec, enc, jpeg, ofa = engines[kind]
        out.append(MigProfileSpec(name, g, mem, count, memory[mem], sm, ce, dec, enc, jpeg, ofa))
    return tuple(out)


# Engines per profile kind (copy, decoder, encoder, jpeg, ofa).
_AMPERE_ENGINES = {
    "1g": (1, 0, 0, 0, 0),
    "1g+me": (1, 1, 0, 1, 1),
    "2g": (2, 1, 0, 0, 0),
    "3g": (3, 2, 0, 0, 0),
    "4g": (4, 2, 0, 0, 0),
    "7g": (7, 5, 0, 1, 1),
}
# From the real H200's `nvidia-smi mig -lgip` (shared/fixtures/gpu-host-h200/host.txt).
_HOPPER_ENGINES = {
    "1g": (1, 1, 0, 1, 0),
    "1g+me": (1, 1, 0, 1, 1),
    "2g": (2, 2, 0, 2, 0),
    "3g": (3, 3, 0, 3, 0),
    "4g": (4, 4, 0, 4, 0),
    "7g": (8, 7, 0, 7, 1),
}

A100_40GB = GpuModel(
    name="A100-40GB",
    product="NVIDIA-A100-SXM4-40GB",
    memory_mib=40960,
    family="ampere",
    compute_major=8,
    compute_minor=0,
    machine="DGX-A100",
    mig_profiles=_profiles(
        ("5gb", "10gb", "10gb", "20gb", "40gb"),
        {1: 4864, 2: 9856, 4: 19968, 8: 40192},
        (14, 14, 28, 42, 56, 98),
        _AMPERE_ENGINES,
    ),
    balanced=(("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1)),
    aliases=("NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-PCIE-40GB"),
)
A100_80GB = GpuModel(
    name="A100-80GB",
    product="NVIDIA-A100-SXM4-80GB",
    memory_mib=81920,
    family="ampere",
    compute_major=8,
    compute_minor=0,
    machine="DGX-A100",
    mig_profiles=_profiles(
        ("10gb", "20gb", "20gb", "40gb", "80gb"),
        {1: 9728, 2: 19968, 4: 40192, 8: 80384},
        (14, 14, 28, 42, 56, 98),
        _AMPERE_ENGINES,
    ),
    balanced=(("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)),
    aliases=("NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-80GB-PCIe"),
)
H100_80GB = GpuModel(
    name="H100-80GB",
    product="NVIDIA-H100-80GB-HBM3",
    memory_mib=81559,
    family="hopper",
    compute_major=9,
    compute_minor=0,
    machine="DGX-H100",
    mig_profiles=_profiles(
        ("10gb", "20gb", "20gb", "40gb", "80gb"),
        {1: 9984, 2: 20096, 4: 40320, 8: 80896},
        (16, 26, 32, 60, 64, 132),
        _HOPPER_ENGINES,
    ),
    balanced=(("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)),
    aliases=("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe"),
)
H200_141GB = GpuModel(
    name="H200-141GB",
    product="NVIDIA-H200",  # nvidia-smi: "NVIDIA H200" (fixture gpu-host-h200)
    memory_mib=143771,  # fixture: 143771 MiB
    family="hopper",
    compute_major=9,
    compute_minor=0,
    machine="DGX-H200",
    mig_profiles=_profiles(
        ("18gb", "35gb", "35gb", "71gb", "141gb"),
        {1: 16384, 2: 33280, 4: 71424, 8: 143360},  # fixture: 16.00, 32.50, 69.75, 140.00 GiB
        (16, 26, 32, 60, 64, 132),  # fixture SM counts
        _HOPPER_ENGINES,
    ),
    balanced=(("1g.18gb", 2), ("2g.35gb", 1), ("3g.71gb", 1)),
    aliases=("NVIDIA-H200", "NVIDIA-H200-NVL"),
)
L4 = GpuModel(
    name="L4",
    product="NVIDIA-L4",
    memory_mib=23034,
    family="ada-lovelace",
    compute_major=8,
    compute_minor=9,
    machine="g6.48xlarge",
    aliases=("NVIDIA-L4",),
)

# Grace Blackwell superchip nodes: 4 GPUs each, 18 nodes per NVL72 rack (one NVLink clique, labelled by
# GFD nvidia.com/gpu.clique; fleet files set it per pool). 186 GB / 288 GB HBM3e per GPU (nominal MiB).
GB200 = GpuModel(
    name="GB200",
    product="NVIDIA-GB200",
    memory_mib=186 * 1024,
    family="blackwell",
    compute_major=10,
    compute_minor=0,
    machine="GB200-NVL72",
    aliases=("NVIDIA-GB200",),
)
GB300 = GpuModel(
    name="GB300",
    product="NVIDIA-GB300",
    memory_mib=288 * 1024,
    family="blackwell",
    compute_major=10,
    compute_minor=3,
    machine="GB300-NVL72",
    aliases=("NVIDIA-GB300",),
)

CATALOG: dict[str, GpuModel] = {
    m.name: m for m in (A100_40GB, A100_80GB, H100_80GB, H200_141GB, L4, GB200, GB300)
}


def gpu_model(name: str) -> GpuModel:
    """A catalog entry by catalog name (H100-80GB) or GFD product string; KeyError names the known ones."""
    if name in CATALOG:
        return CATALOG[name]
    for model in CATALOG.values():
        if name in model.aliases:
            return model
    raise KeyError(f"unknown GPU product {name!r}; known: {', '.join(CATALOG)}")


def mig_layout(model: GpuModel, config: str) -> dict[MigProfileSpec, int]:
    """Slices per GPU for a mig-parted config name: `all-balanced`, `all-<profile>` (`+me` or `.me`)."""
    if not model.mig_capable:
        raise ValueError(f"{model.name} is not MIG capable")
    if config == MIG_CONFIG_BALANCED:
        return {model.profile(name): count for name, count in model.balanced}
    if config.startswith("all-") and config != MIG_CONFIG_DISABLED:
        profile = model.profile(config[len("all-") :])
        return {profile: profile.max_per_gpu}
    raise ValueError(
        f"unknown MIG config {config!r} for {model.name}; use all-balanced or all-<profile> "
        f"({', '.join(p.name for p in model.mig_profiles)})"
    )


@dataclass(frozen=True, slots=True)
class GpuNodeConfig:
    """How one node's GPUs are exposed: what the device plugin, GFD and mig-manager are configured to do."""

    model: GpuModel
    count: int
    mig_strategy: str = "none"  # none | single | mixed
    mig_config: str = MIG_CONFIG_DISABLED
    mig_gpus: int | None = None  # mixed: how many GPUs are MIG-enabled (default all)
    mig_config_state: str = "success"
    sharing: str = "none"  # none | time-slicing | mps
    replicas: int = 1
    rename_by_default: bool = False
    driver_version: str = "580.159.04"
    cuda_runtime: str = "13.0"
    machine: str = ""


def _driver_labels(driver: str, runtime: str) -> dict[str, str]:
    major, minor, rev = ([*driver.split("."), "", ""])[:3]
    r_major, r_minor = ([*runtime.split("."), ""])[:2]
    return {
        "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": rev,
        "nvidia.com/cuda.driver-version.full": driver,
        "nvidia.com/cuda.driver.major": major,
        "nvidia.com/cuda.driver.minor": minor,
        "nvidia.com/cuda.driver.rev": rev,
        "nvidia.com/cuda.runtime-version.major": r_major,
        "nvidia.com/cuda.runtime-version.minor": r_minor,
        "nvidia.com/cuda.runtime-version.full": runtime,
        "nvidia.com/cuda.runtime.major": r_major,
        "nvidia.com/cuda.runtime.minor": r_minor,
    }


def _mig_device_labels(prefix: str, p: MigProfileSpec) -> dict[str, str]:
    return {
        f"{prefix}.memory": str(p.memory_mib),
        f"{prefix}.multiprocessors": str(p.multiprocessors),
        f"{prefix}.slices.gi": str(p.compute_slices),
        f"{prefix}.slices.ci": str(p.compute_slices),
        f"{prefix}.engines.copy": str(p.copy_engines),
        f"{prefix}.engines.decoder": str(p.decoders),
        f"{prefix}.engines.encoder": str(p.encoders),
        f"{prefix}.engines.jpeg": str(p.jpeg),
        f"{prefix}.engines.ofa": str(p.ofa),
    }


def gpu_labels_and_resources(cfg: GpuNodeConfig, timestamp: int) -> tuple[dict[str, str], dict[str, int]]:
    """GFD/GPU-operator labels (all strings) and the extended resources for a node's GPUs."""
    model = cfg.model
    sharing = cfg.sharing if cfg.replicas > 1 else "none"
    replicas = cfg.replicas if sharing != "none" else 1
    labels: dict[str, str] = {
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.deploy.device-plugin": "true",
        "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
        "nvidia.com/gpu.deploy.dcgm-exporter": "true",
        "nvidia.com/gpu.product": model.product,
        "nvidia.com/gpu.count": str(cfg.count),
        "nvidia.com/gpu.memory": str(model.memory_mib),
        "nvidia.com/gpu.family": model.family,
        "nvidia.com/gpu.compute.major": str(model.compute_major),
        "nvidia.com/gpu.compute.minor": str(model.compute_minor),
        "nvidia.com/gpu.machine": cfg.machine or model.machine,
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/gpu.replicas": str(replicas),
        "nvidia.com/gpu.sharing-strategy": sharing,
        "nvidia.com/mig.capable": "true" if model.mig_capable else "false",
        "nvidia.com/mps.capable": "true" if sharing == "mps" else "false",
        "nvidia.com/vgpu.present": "false",
        "nvidia.com/gfd.timestamp": str(timestamp),
        **_driver_labels(cfg.driver_version, cfg.cuda_runtime),
    }
    resources: dict[str, int] = {}
    shared_suffix = "-SHARED" if sharing != "none" and not cfg.rename_by_default else ""
    gpu_resource = (
        "nvidia.com/gpu.shared" if sharing != "none" and cfg.rename_by_default else "nvidia.com/gpu"
    )

    if model.mig_capable:
        labels["nvidia.com/mig.config"] = cfg.mig_config
        labels["nvidia.com/mig.config.state"] = cfg.mig_config_state

    if cfg.mig_strategy == "none" or cfg.mig_config == MIG_CONFIG_DISABLED:
        labels["nvidia.com/gpu.product"] = model.product + shared_suffix
        resources[gpu_resource] = cfg.count * replicas
        return labels, resources

    layout = mig_layout(model, cfg.mig_config)
    labels["nvidia.com/mig.strategy"] = cfg.mig_strategy
    if cfg.mig_strategy == "single":
        if len(layout) != 1:
            # GFD's answer to a heterogeneous layout under the single strategy.
            labels.update(
                {
                    "nvidia.com/gpu.product": f"{model.product}-MIG-INVALID",
                    "nvidia.com/gpu.count": "0",
                    "nvidia.com/gpu.memory": "0",
                }
            )
            resources["nvidia.com/gpu"] = 0
            return labels, resources
        ((profile, per_gpu),) = layout.items()
        slices = per_gpu * cfg.count
        labels.update(_mig_device_labels("nvidia.com/gpu", profile))
        labels["nvidia.com/gpu.product"] = f"{model.product}-MIG-{profile.resource_suffix}{shared_suffix}"
        labels["nvidia.com/gpu.count"] = str(slices)
        resources[gpu_resource] = slices * replicas
        return labels, resources

    # mixed: the gpu.* labels keep describing the physical GPUs; one label set per profile.
    mig_gpus = cfg.count if cfg.mig_gpus is None else cfg.mig_gpus
    labels["nvidia.com/gpu.replicas"] = "0" if mig_gpus == cfg.count else str(replicas)
    for profile, per_gpu in layout.items():
        prefix = f"nvidia.com/mig-{profile.resource_suffix}"
        count = per_gpu * mig_gpus
        labels[f"{prefix}.count"] = str(count)
        labels.update(_mig_device_labels(prefix, profile))
        labels[f"{prefix}.product"] = f"{model.product}-MIG-{profile.resource_suffix}{shared_suffix}"
        labels[f"{prefix}.replicas"] = str(replicas)
        labels[f"{prefix}.sharing-strategy"] = sharing
        resources[profile.resource_name] = count * replicas
    if mig_gpus < cfg.count:
        resources[gpu_resource] = (cfg.count - mig_gpus) * replicas
    return labels, resources
