"""The installed package is the product: the wheel, installed into a fresh virtualenv the way the
Containerfile installs it, runs the demo and serves the dashboard from a directory outside the checkout.

How, and why this is honest and offline:
- the wheel is built from a copy of what the Containerfile copies into its build stage (its `COPY` lines:
  pyproject.toml, README.md, broker, adapters, kubesim), not from the checkout: a checkout's
  gpufed.egg-info (left by `pip install -e .`) lists every file and would ship data the package
  declarations leave out, as a fresh clone or the image would not;
- it is built as `pip wheel . --no-deps` builds it (the project's own pip, build isolation on, the build
  backend from the configured index), so what is missing from the package data is missing here;
- the virtualenv is a fresh `python -m venv` (the Containerfile: `python -m venv /opt/gpufed`), and the
  wheel is installed into it with `pip install --no-deps`: gpufed's modules, data files and console
  scripts come from the wheel alone;
- gpufed's dependencies (Ray, kubernetes, fastapi ... hundreds of MB) are not downloaded again: a .pth
  file in the new venv appends the project venv's site-packages to sys.path, after the new venv's own.
  A plain path line in a .pth file does not run that directory's own .pth files, so the project venv's
  editable install of gpufed (a .pth import hook pointing at the checkout) is not active in the new venv:
  the test checks that `broker`, `kubesim` and `adapters` are imported from the new venv.
- every command runs with the working directory a temporary directory outside the repository, and with
  no PYTHONPATH, so nothing is read relative to the checkout.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    out = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert out.returncode == 0, f"{args}: exit {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def _containerfile_sources() -> list[str]:
    """What the Containerfile's build stage copies from the build context (`COPY SRC... DEST`)."""
    sources: list[str] = []
    for line in (REPO / "Containerfile").read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            sources += [w.rstrip("/") for w in words[1:-1] if not w.startswith("--")]
    assert {"pyproject.toml", "broker", "kubesim"} <= set(sources), sources
    return sources


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """(the fresh venv's bin directory, the environment to run it with)."""
    root = tmp_path_factory.mktemp("installed")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    source = root / "src"
    source.mkdir()
    junk = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in _containerfile_sources():
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=junk)
        else:
            shutil.copy2(REPO / name, source / name)
    wheels = root / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w", str(wheels)], root, env)
    (wheel,) = wheels.glob("gpufed-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], root, env)
    python = venv / "bin" / "python"
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root, env
        ).strip()
    )
    # the project's pip installs into the new venv (--python), as the venv's own pip would
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
        root,
        env,
    )
    (site / "zz_gpufed_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    yield venv / "bin", env


def test_the_installed_package_is_imported_from_the_new_venv_with_its_data(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    bin_dir, env = installed
    code = (
        "import broker, kubesim, adapters, broker.api.routes as r, kubesim.fleet as f;"
        "from broker.app.example_config import example_config_text as e;"
        "print(broker.__file__, kubesim.__file__, adapters.__file__);"
        "print((r.DASHBOARD / 'index.html').is_file(), f.builtin_fleet('demo').is_file(), bool(e()))"
    )
    out = _run([str(bin_dir / "python"), "-c", code], tmp_path, env).splitlines()
    venv = str(bin_dir.parent)
    assert all(p.startswith(venv) for p in out[0].split()), out[0]
    assert out[1] == "True True True"


def test_kubesim_serves_its_shipped_fleet_by_name_from_any_directory(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    bin_dir, env = installed
    sim = subprocess.Popen(
        [str(bin_dir / "kubesim"), "serve", "--fleet", "small", "--out", str(tmp_path / "out")],
        cwd=tmp_path,
        env={**env, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "out" / "kubesim.json").exists() and sim.poll() is None:
            assert time.monotonic() < deadline, "kubesim did not start within 60 s"
            time.sleep(0.2)
        assert sim.poll() is None, sim.communicate()[0]
    finally:
        sim.send_signal(signal.SIGTERM)
        out, _ = sim.communicate(timeout=60)
    assert sim.returncode == 0, out


def test_the_demo_and_the_dashboard_run_from_the_installed_package_outside_the_repo(
    installed: tuple[Path, dict[str, str]], tmp_path: Path, redis_url: str
) -> None:
    """`gpufed demo --keep` from the new venv, in a temporary directory: the run ends as expected, the
    `export` line it prints makes `gpufed show-gpus` work in a shell without the venv on its PATH, the
    dashboard page and every script and stylesheet it names answer 200, then SIGTERM ends it with 0."""
    bin_dir, env = installed
    env = {**env, "REDIS_URL": redis_url, "PYTHONUNBUFFERED": "1"}
    for var in ("RAY_COLOR_PREFIX", "RAY_AUTH_MODE"):
        env.pop(var, None)
    demo = subprocess.Popen(
        [str(bin_dir / "gpufed"), "demo", "--speed", "60", "--keep"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert demo.stdout is not None
    lines: list[str] = []
    url = ""
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            line = demo.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("dashboard "):
                url = line.split()[1]
                break
        assert url, "".join(lines)[-6000:]
        cli = demo.stdout.readline()
        lines.append(cli)
        assert cli.startswith("CLI "), cli
        # the printed line, as printed, in a shell whose PATH has no gpufed (another terminal)
        shell = subprocess.run(
            ["bash", "-c", f"{cli.removeprefix('CLI').strip()} && gpufed show-gpus && gpufed top -o json"],
            cwd=tmp_path,
            env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert shell.returncode == 0 and "H100-80GB" in shell.stdout, shell.stdout + shell.stderr
        assert '"cluster": "onprem-b"' in shell.stdout  # `gpufed top` over the real API
        base = url.partition("/#token=")[0]
        page = httpx.get(base + "/", timeout=30)
        assert page.status_code == 200 and "<html" in page.text.lower()
        assets = re.findall(r'(?:src|href)="(/ui/[^"]+)"', page.text)
        assert any(a.endswith(".js") for a in assets), page.text[:500]
        for asset in assets:
            assert httpx.get(base + asset, timeout=30).status_code == 200, asset
    finally:
        demo.send_signal(signal.SIGTERM)
        rest, _ = demo.communicate(timeout=120)
    out = "".join(lines) + rest
    assert demo.returncode == 0, out[-6000:]
    assert "demo finished: every job ended where expected" in out
    assert (tmp_path / ".demo" / "demo" / "clusters.yaml").is_file()  # written where it was run
