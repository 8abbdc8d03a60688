"""`gpufed demo` end to end, as a user runs it: jobs land where they should, and nothing is left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def _processes_mentioning(token: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if token in line and "ps -eo" not in line]


def test_demo_places_every_job_where_expected_and_leaves_no_process(tmp_path: Path, redis_url: str) -> None:
    """With --keep the demo stays up after its run and says how to reach it (the dashboard URL with a
    token); SIGTERM then ends it cleanly. Its output has no Ray notices or raw colour codes."""
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONUNBUFFERED": "1"}
    for var in ("RAY_COLOR_PREFIX", "RAY_AUTH_MODE"):
        env.pop(var, None)
    workdir = tmp_path / "demo"
    demo = subprocess.Popen(
        [sys.executable, "-m", "broker.cli", "demo", "--workdir", str(workdir), "--speed", "40", "--keep"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert demo.stdout is not None
    lines: list[str] = []
    url = ""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        line = demo.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("dashboard "):
            url = line.split()[1]
            break
    assert url, "".join(lines)[-6000:]
    # docs/quickstart.md: the printed `export` line, run in another terminal (no .venv on its PATH), makes
    # the CLI work as `make demo` users type it
    cli = demo.stdout.readline()
    lines.append(cli)
    shell = subprocess.run(
        ["bash", "-c", f"{cli.removeprefix('CLI').strip()} && gpufed show-gpus"],
        cwd=tmp_path,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shell.returncode == 0 and "H100-80GB" in shell.stdout, shell.stdout + shell.stderr
    base, _, token = url.partition("/#token=")
    fleet = httpx.get(f"{base}/v1/fleet", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert fleet.status_code == 200 and len(fleet.json()["clusters"]) == 3  # still serving after the run
    assert httpx.get(base + "/", timeout=30).status_code == 200
    demo.send_signal(signal.SIGTERM)
    rest, _ = demo.communicate(timeout=120)
    out = "".join(lines) + rest
    assert demo.returncode == 0, out[-6000:]
    assert "demo finished: every job ended where expected" in out
    assert "\x1b[" not in out and "Token authentication is enabled" not in out
    assert str(workdir / "kubeconfigs") in out  # its own directory, not the README's .demo/kubeconfigs
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 4}
    assert "onprem-b" in rows["llm-pretrain-h100x8"]
    assert "cloud-burst" in rows["h200-burst"]
    assert "onprem-a" in rows["inference-mig"] and "mig" in rows["inference-mig"]
    assert "QUEUED" in rows["too-big-16gpu"]
    assert "0/3 clusters are available" in out

    # Ray names its session directory after the driver's pid: no server of that session may outlive it.
    session_suffix = f"_{demo.pid}/"
    deadline = time.monotonic() + 30
    while (left := _processes_mentioning(session_suffix)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, left
    assert not _processes_mentioning(str(workdir))
