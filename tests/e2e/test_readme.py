"""README's "Try it by hand" block runs as written, line by line, in a copy of the repository's layout.

What the test adds, and why: the lines ending in `&` start servers, so the test starts them as
background processes and waits until they answer before the next line (a user waits too); the fixed port
8080 in the block becomes a free port (tests run beside other brokers), and REDIS_URL points at the
test's private Redis (README: `make setup` makes Redis answer at $REDIS_URL; `gpufed serve` honours it).
Every other line runs through bash exactly as printed, and must exit 0, or with the code its comment
names (`exit 1`). The servers are stopped at the end and nothing may be left running.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port, wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
LINKED = (".venv", "tools", "kubesim", "tests", "examples", "clusters.example.yaml")


def readme_block(heading: str) -> list[str]:
    """The command lines of the first ```sh block after `heading`, continuation lines joined."""
    text = (REPO / "README.md").read_text()
    after = text[text.index(heading) :]
    block = re.search(r"```sh\n(.*?)```", after, re.S)
    assert block is not None, f"no sh block after {heading}"
    return [line for line in block.group(1).replace("\\\n", " ").splitlines() if line.strip()]


def _expected_exit(line: str) -> int:
    m = re.search(r"#.*\bexit (\d+)", line)
    return int(m.group(1)) if m else 0


def test_every_command_of_the_readme_runs_as_written(tmp_path: Path, redis_url: str) -> None:
    for name in LINKED:
        (tmp_path / name).symlink_to(REPO / name)
    port = free_port()
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "PYTHONUNBUFFERED": "1",
        "GPUFED_CONFIG": os.devnull,
    }
    env.pop("GPUFED_URL", None)
    servers: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        for raw in readme_block("## Try it by hand"):
            line = raw.replace("8080", str(port))
            command = line.split("#", 1)[0].strip() if not line.lstrip().startswith("#") else ""
            if not command:
                continue
            if command.startswith("export "):
                key, _, value = command.removeprefix("export ").partition("=")
                env[key] = value
                continue
            if command.endswith("&"):
                log = tmp_path / f"server-{len(servers)}.log"
                with log.open("wb") as out:
                    proc = subprocess.Popen(
                        shlex.split(command[:-1]),
                        cwd=tmp_path,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                servers.append((proc, log))
                _wait_until_serving(proc, command, tmp_path, port)
                assert proc.poll() is None, log.read_text()[-3000:]
                continue
            done = subprocess.run(
                ["bash", "-c", command],
                check=False,
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
            )
            assert done.returncode == _expected_exit(line), (
                f"{command}\nexit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
            )
            assert "Traceback" not in done.stderr, done.stderr
    finally:
        for proc, _ in reversed(servers):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc, log in reversed(servers):
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
                pytest.fail(f"a README server ignored SIGTERM: {log.read_text()[-2000:]}")


def _wait_until_serving(proc: subprocess.Popen[bytes], command: str, workdir: Path, port: int) -> None:
    if "kubesim serve" in command:
        wait_for(
            lambda: (workdir / ".demo/kubeconfigs/kubesim.json").exists() or proc.poll() is not None,
            timeout=60,
            what="kubesim to write its kubeconfigs",
        )
    else:
        wait_for(lambda: _fleet_ready(port) or proc.poll() is not None, timeout=120, what="the broker")


def _fleet_ready(port: int) -> bool:
    try:
        return len(httpx.get(f"http://127.0.0.1:{port}/v1/fleet", timeout=2).json()["clusters"]) == 3
    except (httpx.HTTPError, KeyError, ValueError):
        return False
