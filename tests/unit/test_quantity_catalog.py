"""Quantities and the GPU catalog: GFD strings -> products, MIG tables, need -> profile."""

from __future__ import annotations

import pytest

from broker.core import catalog
from broker.core.model import MigNeed
from broker.core.quantity import QuantityError, to_int, to_millis


@pytest.mark.parametrize(
    ("text", "millis", "whole"),
    [
        ("1500m", 1500, 2),
        ("2", 2000, 2),
        ("0.5", 500, 1),
        ("1e3", 1_000_000, 1000),
        ("2Gi", 2 * 2**30 * 1000, 2 * 2**30),
        ("4Ti", 4 * 2**40 * 1000, 4 * 2**40),
        ("540Gi", 540 * 2**30 * 1000, 540 * 2**30),
        ("1k", 1_000_000, 1000),
        ("100M", 100_000_000_000, 100_000_000),
        ("250u", 1, 1),
        (8, 8000, 8),
    ],
)
def test_quantities(text: object, millis: int, whole: int) -> None:
    assert to_millis(text) == millis
    assert to_int(text) == whole


@pytest.mark.parametrize("bad", ["", "abc", "1.2.3", "5 Gi", "Gi", "1Qi", None, True, [1]])
def test_bad_quantities_raise(bad: object) -> None:
    with pytest.raises(QuantityError):
        to_int(bad)


@pytest.mark.parametrize(
    ("gfd", "memory", "name", "known", "expected_memory"),
    [
        ("NVIDIA-H100-80GB-HBM3", 81559, "H100-80GB", True, 81559),
        ("NVIDIA-H100-PCIe", None, "H100-80GB", True, 81559),
        ("NVIDIA-A100-SXM4-80GB", None, "A100-80GB", True, 81920),
        ("NVIDIA-A100-80GB-PCIe", None, "A100-80GB", True, 81920),
        ("NVIDIA-A100-PCIE-40GB", None, "A100-40GB", True, 40960),
        ("NVIDIA-A100-SXM4-40GB", None, "A100-40GB", True, 40960),
        ("NVIDIA-H200", 143771, "H200-141GB", True, 143771),
        ("NVIDIA-H200-NVL", None, "H200-141GB", True, 143771),
        ("NVIDIA-L4", None, "L4", True, 23034),
        ("NVIDIA-H100-NVL", None, "H100-NVL-94GB", True, 95830),
        ("NVIDIA-H100-80GB-HBM3-SHARED", None, "H100-80GB", True, 81559),
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", None, "A100-40GB", True, 40960),
        ("NVIDIA-A100-SXM4-80GB-MIG-INVALID", None, "A100-80GB", True, 81920),
        ("NVIDIA-H200-MIG-1g.18gb", None, "H200-141GB", True, 143771),
        # unknown variants recognised by their model token, memory disambiguating A100s
        ("NVIDIA-A100-SXM4-PG506", 81920, "A100-80GB", True, 81920),
        ("NVIDIA-H100-SXM5-80GB", None, "H100-80GB", True, 81559),
        # unknown products are kept under their raw name, never dropped
        ("NVIDIA-B200", 183359, "NVIDIA-B200", False, 183359),
        ("Quadro-RTX-6000-SHARED", None, "Quadro-RTX-6000", False, 0),
    ],
)
def test_normalise_product(
    gfd: str, memory: int | None, name: str, known: bool, expected_memory: int
) -> None:
    product = catalog.normalise_product(gfd, memory)
    assert (product.name, product.known, product.memory_mib) == (name, known, expected_memory)


def test_h200_profiles_match_the_real_host() -> None:
    # fixtures/gpu-host-h200/host.txt `nvidia-smi mig -lgip`
    got = {(p.name, p.max_per_gpu) for p in catalog.mig_profiles("H200-141GB")}
    assert got == {
        ("1g.18gb", 7),
        ("1g.18gb+me", 1),
        ("1g.35gb", 4),
        ("2g.35gb", 3),
        ("3g.71gb", 2),
        ("4g.71gb", 1),
        ("7g.141gb", 1),
    }


@pytest.mark.parametrize(
    ("product", "need", "profile"),
    [
        ("A100-80GB", MigNeed(10, 1), "1g.10gb"),
        ("H100-80GB", MigNeed(10, 1), "1g.10gb"),
        ("H200-141GB", MigNeed(10, 1), "1g.18gb"),
        ("A100-40GB", MigNeed(10, 1), "1g.10gb"),
        ("A100-40GB", MigNeed(5, 1), "1g.5gb"),
        ("A100-80GB", MigNeed(15, 1), "1g.20gb"),
        ("H200-141GB", MigNeed(20, 1), "1g.35gb"),
        ("A100-80GB", MigNeed(20, 2), "2g.20gb"),
        ("H100-80GB", MigNeed(30, 3), "3g.40gb"),
        ("H200-141GB", MigNeed(60, 3), "3g.71gb"),
        ("A100-80GB", MigNeed(80, 1), "7g.80gb"),
        ("A100-80GB", MigNeed(81, 1), None),
        ("L4", MigNeed(10, 1), None),
        ("NVIDIA-B200", MigNeed(10, 1), None),
    ],
)
def test_profile_for_need(product: str, need: MigNeed, profile: str | None) -> None:
    found = catalog.profile_for_need(product, need)
    assert (found.name if found else None) == profile


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("1g.10gb", (1, 10, False)),
        ("1g.10gb+me", (1, 10, True)),
        ("1g.10gb.me", (1, 10, True)),
        ("7g.141gb", (7, 141, False)),
    ],
)
def test_parse_profile(name: str, parsed: tuple[int, int, bool]) -> None:
    assert catalog.parse_profile(name) == parsed


@pytest.mark.parametrize("bad", ["", "1g", "0g.5gb", "g.5gb", "1g.5GB", "INVALID"])
def test_parse_profile_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="MIG profile"):
        catalog.parse_profile(bad)


def test_resource_name_of_media_profile() -> None:
    me = catalog.mig_profile("A100-80GB", "1g.10gb.me")
    assert me is not None and me.resource_name == "nvidia.com/mig-1g.10gb.me"


def test_gfd_products_round_trip() -> None:
    for name in ("H100-80GB", "A100-80GB", "A100-40GB", "H200-141GB", "L4"):
        for gfd in catalog.gfd_products(name):
            assert catalog.normalise_product(gfd).name == name
    assert catalog.gfd_products("NVIDIA-B200") == ("NVIDIA-B200",)
