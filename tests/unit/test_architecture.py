"""The architecture as the code has it: every broker module in a package of the layers contract, and no
module in broker/ or adapters/ over 800 lines (docs/architecture.md draws both).

800 is a ceiling that warns of a module holding several concerns, not a size to aim under: a module is
split by concern or not at all, never moved piecewise to stay under a count (issue 43)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 800


def _layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = [c for c in contracts if c["type"] == "layers"]
    return [name.strip() for line in layers["layers"] for name in line.split("|")]


def test_every_broker_module_belongs_to_a_package_of_the_layers_contract() -> None:
    packages = {name for name in _layers() if name.startswith("broker.")}
    outside = []
    for path in sorted((ROOT / "broker").rglob("*.py")):
        dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if dotted in {"broker.__init__"}:
            continue
        if not any(dotted == p or dotted.startswith(p + ".") for p in packages):
            outside.append(dotted)
    assert outside == [], f"modules outside every layer (add them to a package): {outside}"


@pytest.mark.parametrize("folder", ["broker", "adapters"])
def test_no_module_is_over_800_lines(folder: str) -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in sorted((ROOT / folder).rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these by concern (at most {MAX_LINES} lines each): {long}"
