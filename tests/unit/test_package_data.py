"""What the wheel carries beside the modules: every data file in the packages is named by pyproject's
package data under a key that is a real package (a key naming a module, as `broker.api.routes` once did,
silently ships nothing), and the packaged example config is the repository's clusters.example.yaml.
The wheel itself is built, installed and run in tests/e2e/test_installed_package.py."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from broker.app.example_config import example_config_text
from broker.cli import run

REPO = Path(__file__).resolve().parents[2]
PACKAGE_DATA: dict[str, list[str]] = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"][
    "setuptools"
]["package-data"]


def _data_files() -> set[Path]:
    return {
        p.relative_to(REPO)
        for top in ("broker", "adapters", "kubesim")
        for p in (REPO / top).rglob("*")
        if p.is_file()
        and p.suffix not in (".py", ".pyc", ".pyi")
        and "__pycache__" not in p.parts
        and p.name != "py.typed"
    }


@pytest.mark.parametrize("package", sorted(PACKAGE_DATA))
def test_every_package_data_key_is_a_package(package: str) -> None:
    assert (REPO / package.replace(".", "/") / "__init__.py").is_file(), f"{package} is not a package"


def test_every_data_file_in_the_packages_is_shipped() -> None:
    shipped = {
        f.relative_to(REPO)
        for package, globs in PACKAGE_DATA.items()
        for pattern in globs
        for f in (REPO / package.replace(".", "/")).glob(pattern)
        if f.is_file()
    }
    missing = _data_files() - shipped
    assert not missing, f"not in [tool.setuptools.package-data]: {sorted(map(str, missing))}"
    assert Path("broker/api/dashboard/app.js") in shipped


def test_the_packaged_example_config_is_the_repositorys() -> None:
    assert example_config_text() == (REPO / "clusters.example.yaml").read_text(), (
        "broker/app/clusters.example.yaml differs: cp clusters.example.yaml broker/app/"
    )


def test_a_command_that_exits_with_a_message_says_it(capsys: pytest.CaptureFixture[str]) -> None:
    """sys.exit("message") inside a command is exit 1 with the message, never 1 without a word."""
    from broker.cli.common import app

    @app.command("zz-exit-with-message", hidden=True)
    def _exit() -> None:
        raise SystemExit("the demo fleet is missing")

    try:
        assert run(["zz-exit-with-message"]) == 1
    finally:
        app.registered_commands[:] = [c for c in app.registered_commands if c.name != "zz-exit-with-message"]
    assert "gpufed: error: the demo fleet is missing" in capsys.readouterr().err


def test_serve_without_a_config_outside_the_checkout_points_at_the_packaged_example(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An installed package in any directory: `gpufed serve` says where the example it ships is."""
    monkeypatch.chdir(tmp_path)
    assert run(["serve"]) == 1
    err = capsys.readouterr().err
    assert "clusters.yaml: cannot read" in err and len(err.strip().splitlines()) == 1
    hint = err.split("(start from the example: cp ", 1)[1].split()[0]
    assert Path(hint).read_text() == (REPO / "clusters.example.yaml").read_text()
