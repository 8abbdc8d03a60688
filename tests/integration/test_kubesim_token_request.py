"""kubesim issues service-account tokens (TokenRequest, `kubectl create token`), so adding a member cluster
can be rehearsed locally as docs/operations.md describes it: a ServiceAccount, `gpufed rbac` applied, a
token made for it, and that token allowed exactly what the RBAC grants. Real kubectl throughout."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubesim.fleet import synthetic_fleet
from kubesim.sim import Simulation

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
KUBECTL = REPO / "tools" / "bin" / "kubectl"
CLUSTER = "sim-000"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    assert KUBECTL.is_file(), f"kubectl is missing at {KUBECTL}: run `make setup`"
    with Simulation(synthetic_fleet(1, 2), tmp_path_factory.mktemp("kubesim-token"), controllers=False) as s:
        yield s


def _kubectl(
    sim: Simulation, home: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(sim.kubeconfig_path(CLUSTER)), "HOME": str(home)}
    return subprocess.run(
        [str(KUBECTL), "--cache-dir", str(home / "cache"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_kubectl_create_token_authenticates_as_the_service_account(sim: Simulation, tmp_path: Path) -> None:
    assert _kubectl(sim, tmp_path, "create", "namespace", "gpufed-system").returncode == 0
    assert (
        _kubectl(sim, tmp_path, "create", "serviceaccount", "gpufed-broker", "-n", "gpufed-system").returncode
        == 0
    )
    made = _kubectl(
        sim, tmp_path, "create", "token", "gpufed-broker", "-n", "gpufed-system", "--duration", "1h"
    )
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token

    denied = _kubectl(sim, tmp_path, "--token", token, "get", "nodes")
    assert denied.returncode != 0
    assert (
        'User "system:serviceaccount:gpufed-system:gpufed-broker" cannot list resource "nodes"'
        in denied.stderr
    )

    rbac = subprocess.run(
        [str(REPO / ".venv" / "bin" / "gpufed"), "rbac", "--cluster", CLUSTER, "--namespace", "default"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    applied = _kubectl(sim, tmp_path, "apply", "-f", "-", stdin=rbac)
    assert applied.returncode == 0, applied.stderr
    allowed = _kubectl(sim, tmp_path, "--token", token, "get", "nodes", "-o", "name")
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stdout.count("node/") == 2

    missing = _kubectl(sim, tmp_path, "create", "token", "nobody", "-n", "gpufed-system")
    assert missing.returncode != 0 and 'serviceaccounts "nobody" not found' in missing.stderr
