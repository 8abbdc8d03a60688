"""The GPU catalog: GFD product strings -> catalog products, and the real MIG profile tables.

Owns the names level 1 speaks in (H100-80GB, A100-80GB, H200-141GB, ...), the way back from a catalog
name to the GFD `nvidia.com/gpu.product` strings level 2 selects on, and the MIG GPU-instance profiles
of each MIG-capable product (reference 1.5). Unknown products are kept under their raw GFD string with
known=False: the broker never drops a GPU it does not recognise.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from broker.core.k8s_names import canonical_profile
from broker.core.model import GpuProduct, MigNeed, MigProfile

__all__ = [
    "CatalogEntry",
    "entry",
    "gfd_products",
    "lookup",
    "mig_profile",
    "mig_profiles",
    "names",
    "normalise_product",
    "parse_profile",
    "profile_for_need",
    "profile_satisfies",
    "split_product_label",
    "unknown_product",
]


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One catalog product: its name, nominal GFD memory (MiB), family and the GFD strings naming it."""

    name: str
    memory_mib: int
    family: str
    gfd: tuple[str, ...]  # first = the string level 2 falls back to when the cluster reported none
    mig_table: str | None = None  # key into _MIG_TABLES


# (profile, max instances per GPU) in table order; reference 1.5.
_MIG_TABLES: dict[str, tuple[tuple[str, int], ...]] = {
    "a100-40gb": (
        ("1g.5gb", 7),
        ("1g.5gb+me", 1),
        ("1g.10gb", 4),
        ("2g.10gb", 3),
        ("3g.20gb", 2),
        ("4g.20gb", 1),
        ("7g.40gb", 1),
    ),
    "80gb": (
        ("1g.10gb", 7),
        ("1g.10gb+me", 1),
        ("1g.20gb", 4),
        ("2g.20gb", 3),
        ("3g.40gb", 2),
        ("4g.40gb", 1),
        ("7g.80gb", 1),
    ),
    "h200": (
        ("1g.18gb", 7),
        ("1g.18gb+me", 1),
        ("1g.35gb", 4),
        ("2g.35gb", 3),
        ("3g.71gb", 2),
        ("4g.71gb", 1),
        ("7g.141gb", 1),
    ),
    # Reference 1.5 names these H100 NVL profiles without counts; the counts follow the A100/H100 shape.
    "h100-nvl": (("1g.12gb", 7), ("2g.24gb", 3), ("3g.47gb", 2), ("4g.47gb", 1), ("7g.94gb", 1)),
}

_ENTRIES: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        "A100-40GB", 40960, "ampere", ("NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-PCIE-40GB"), "a100-40gb"
    ),
    CatalogEntry("A100-80GB", 81920, "ampere", ("NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-80GB-PCIe"), "80gb"),
    CatalogEntry("H100-80GB", 81559, "hopper", ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe"), "80gb"),
    CatalogEntry("H100-NVL-94GB", 95830, "hopper", ("NVIDIA-H100-NVL",), "h100-nvl"),
    CatalogEntry("H200-141GB", 143771, "hopper", ("NVIDIA-H200", "NVIDIA-H200-NVL"), "h200"),
    # Grace Blackwell superchips, 4 GPUs per node, 18 nodes per NVL72 rack (one NVLink clique): 186 GB and
    # 288 GB HBM3e per GPU (NVIDIA's system pages); nominal MiB, the node's gpu.memory label wins.
    CatalogEntry("GB200", 186 * 1024, "blackwell", ("NVIDIA-GB200",)),
    CatalogEntry("GB300", 288 * 1024, "blackwell", ("NVIDIA-GB300",)),
    CatalogEntry("L4", 23034, "ada-lovelace", ("NVIDIA-L4",)),
    CatalogEntry("L40S", 46068, "ada-lovelace", ("NVIDIA-L40S",)),
    CatalogEntry("A10G", 23028, "ampere", ("NVIDIA-A10G",)),
    CatalogEntry("T4", 15360, "turing", ("Tesla-T4",)),
)
_BY_NAME = {e.name.upper(): e for e in _ENTRIES}
_BY_GFD = {g.upper(): e for e in _ENTRIES for g in e.gfd}
# Short names a user types: a catalog name without its memory ("H100" for H100-80GB, "H100-NVL"), when
# only one product has it ("A100" names two: it gets a "did you mean" instead).
_SHORT: dict[str, list[CatalogEntry]] = {}
for _e in _ENTRIES:
    _SHORT.setdefault(re.sub(r"-\d+GB$", "", _e.name).upper(), []).append(_e)
_PROFILE = re.compile(r"^(?P<g>[1-9]\d*)g\.(?P<mem>[1-9]\d*)gb(?P<me>\+me)?$")
_MIG_SUFFIX = re.compile(r"-MIG-(?P<profile>.+)$", re.IGNORECASE)


def names() -> tuple[str, ...]:
    """Every catalog product name, in catalog order."""
    return tuple(e.name for e in _ENTRIES)


def entry(name: str) -> CatalogEntry | None:
    """The catalog entry of a catalog name (case-insensitive), or None."""
    return _BY_NAME.get(name.upper())


def lookup(name: str) -> CatalogEntry | None:
    """The catalog product a user means: its name (any case), a GFD gpu.product value as the nodes
    carry it (NVIDIA-H100-80GB-HBM3), or a short name only one product has (h100 -> H100-80GB)."""
    key = name.strip().upper()
    found = _BY_NAME.get(key) or _BY_GFD.get(key)
    if found is None and len(_SHORT.get(key, ())) == 1:
        found = _SHORT[key][0]
    return found


def unknown_product(name: str, others: Iterable[str] = ()) -> str:
    """Why `name` is no GPU product, with what was probably meant: "unknown GPU product 'a100'; did you
    mean A100-40GB or A100-80GB? (known: ...)". `others`: products seen in the fleet, not in the catalog."""
    known = sorted(set(names()) | set(others))
    key = name.strip().upper()
    guesses = [e.name for e in _SHORT.get(key, ())]
    if not guesses:
        by_upper = {k.upper(): k for k in known}
        guesses = [by_upper[m] for m in difflib.get_close_matches(key, list(by_upper), n=3, cutoff=0.6)]
    if not guesses:
        guesses = [k for k in known if key and key in k.upper()][:3]
    hint = f"; did you mean {' or '.join(guesses)}?" if guesses else ""
    return f"unknown GPU product {name!r}{hint} (known: {', '.join(known)})"


def split_product_label(gfd_product: str) -> tuple[str, str | None, bool]:
    """Split a gpu.product label into (parent product, MIG profile or None, shared).

    "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb" -> ("NVIDIA-A100-SXM4-40GB", "1g.5gb", False);
    "NVIDIA-H100-80GB-HBM3-SHARED" -> ("NVIDIA-H100-80GB-HBM3", None, True); "...-MIG-INVALID" gives
    the profile "INVALID".
    """
    raw = gfd_product.strip()
    shared = raw.upper().endswith("-SHARED")
    if shared:
        raw = raw[: -len("-SHARED")]
    match = _MIG_SUFFIX.search(raw)
    if match is None:
        return raw, None, shared
    profile = match["profile"]
    return raw[: match.start()], ("INVALID" if profile.upper() == "INVALID" else profile), shared


def _guess(parent: str, memory_mib: int | None) -> CatalogEntry | None:
    """Recognise GFD strings not in the table (new board variants) by their model token."""
    tokens = set(re.split(r"[-_ ]+", parent.upper()))
    big = memory_mib is not None and memory_mib > 60_000
    for name in ("GB200", "GB300"):
        if name in tokens:
            return _BY_NAME[name]
    if "H200" in tokens:
        return _BY_NAME["H200-141GB"]
    if "H100" in tokens:
        return _BY_NAME["H100-NVL-94GB" if "NVL" in tokens else "H100-80GB"]
    if "A100" in tokens or any(t.startswith("A100") for t in tokens):
        eighty = "80GB" in tokens or any(t.endswith("80GB") for t in tokens) or big
        return _BY_NAME["A100-80GB" if eighty else "A100-40GB"]
    for name in ("L40S", "L4", "A10G", "T4"):
        if name in tokens:
            return _BY_NAME[name]
    return None


def normalise_product(gfd_product: str, memory_mib: int | None = None) -> GpuProduct:
    """The catalog product of a GFD `nvidia.com/gpu.product` value.

    `-SHARED` and `-MIG-<profile>` suffixes are stripped (the parent product is what matters).
    `memory_mib` (the gpu.memory label of a full GPU) wins over the catalog's nominal memory when given.
    Unknown products keep their raw (suffix-stripped) name with known=False.
    """
    parent, _profile, _shared = split_product_label(gfd_product)
    found = _BY_GFD.get(parent.upper()) or _BY_NAME.get(parent.upper()) or _guess(parent, memory_mib)
    if found is None:
        return GpuProduct(name=parent, memory_mib=memory_mib or 0, family="", known=False)
    return GpuProduct(
        name=found.name, memory_mib=memory_mib or found.memory_mib, family=found.family, known=True
    )


def gfd_products(product: str) -> tuple[str, ...]:
    """The GFD gpu.product strings of a catalog product; an unknown product is its own GFD string."""
    found = entry(product)
    return found.gfd if found is not None else (product,)


def parse_profile(name: str) -> tuple[int, int, bool]:
    """(compute_slices, memory_gb, media_ext) of a MIG profile name such as "1g.10gb" or "1g.10gb+me".

    The resource-name form with '.me' ("1g.10gb.me") is accepted too. Raises ValueError otherwise.
    """
    text = canonical_profile(name)
    match = _PROFILE.match(text)
    if match is None:
        raise ValueError(f"not a MIG profile name: {name!r} (expected like 1g.10gb or 1g.10gb+me)")
    return int(match["g"]), int(match["mem"]), match["me"] is not None


def mig_profiles(product: str) -> tuple[MigProfile, ...]:
    """The MIG profiles of a catalog product (empty for products without MIG or unknown ones)."""
    found = entry(product)
    if found is None or found.mig_table is None:
        return ()
    out = []
    for name, count in _MIG_TABLES[found.mig_table]:
        slices, memory_gb, _me = parse_profile(name)
        out.append(MigProfile(name=name, compute_slices=slices, memory_gb=memory_gb, max_per_gpu=count))
    return tuple(out)


def mig_profile(product: str, name: str) -> MigProfile | None:
    """A profile of `product` by name ("1g.10gb", "1g.10gb+me" or "1g.10gb.me"), or None."""
    try:
        slices, memory_gb, media = parse_profile(name)
    except ValueError:
        return None
    return next(
        (
            p
            for p in mig_profiles(product)
            if (p.compute_slices, p.memory_gb, p.name.endswith("+me")) == (slices, memory_gb, media)
        ),
        None,
    )


def profile_satisfies(profile: MigProfile, need: MigNeed) -> bool:
    """Whether a profile gives at least the memory and compute sevenths of a need."""
    return profile.memory_gb >= need.memory_gb and profile.compute_slices >= need.compute_slices


def profile_for_need(product: str, need: MigNeed) -> MigProfile | None:
    """The smallest profile of `product` that meets a need (fewest slices, then least memory).

    Media-extension profiles (+me, one per GPU) are never chosen for a need. None when nothing fits.
    """
    fitting = [p for p in mig_profiles(product) if not p.name.endswith("+me") and profile_satisfies(p, need)]
    return min(fitting, key=lambda p: (p.compute_slices, p.memory_gb, -p.max_per_gpu), default=None)
