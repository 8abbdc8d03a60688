"""`gpufed serve` with `apiProcesses: 1` (the chart's default), auth on, on real Redis, the demo fleet in
kubesim, this worker's Ray and a local OIDC issuer:
- a changed `auth` section of clusters.yaml reaches the API process that answers the port, not only the
  broker process (issue 48 finding 1); one case per credential source: the tokens file's path, and the
  OIDC group mappings;
- a frozen API process (SIGSTOP) is killed and replaced, and /healthz answers again (finding 2).

The times (config change to the first refused request, freeze to /healthz) are printed (`-s`) and
recorded in docs/reliability.md; they are not asserted (the host is shared).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from adapters.reaper import descendants
from broker.app.demo import read_demo_tokens, write_demo_config
from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import WorkerRay, free_port, wait_for
from tests.oidc_issuer import AUDIENCE, LocalIssuer

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


class Served:
    """One `gpufed serve` with one API process; `edit(fn)` rewrites its clusters.yaml."""

    def __init__(
        self, config: Path, port: int, log: Path, proc: subprocess.Popen[bytes], workdir: Path
    ) -> None:
        self.config, self.url, self.log, self.proc, self.workdir = (
            config,
            f"http://127.0.0.1:{port}",
            log,
            proc,
            workdir,
        )
        self.tokens = read_demo_tokens(workdir)

    def edit(self, change: Any) -> float:
        doc = yaml.safe_load(self.config.read_text())
        change(doc)
        tmp = self.config.with_name("clusters.yaml.new")
        tmp.write_text(yaml.safe_dump(doc, sort_keys=False))
        tmp.replace(self.config)
        return time.monotonic()

    def get(self, path: str, token: str) -> int:
        try:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            return httpx.get(self.url + path, headers=headers, timeout=10).status_code
        except httpx.HTTPError:
            return 0


@pytest.fixture(scope="module")
def issuer() -> Iterator[LocalIssuer]:
    with LocalIssuer().serving() as served:
        yield served


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, ray_session: None, issuer: LocalIssuer
) -> Iterator[Served]:
    worker_ray = WorkerRay()  # module-wide (the function-scoped fixture's, cleared at the end)
    workdir = tmp_path_factory.mktemp("apiauth")
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
    with Simulation(fleet, workdir / "kubeconfigs", speed=50.0) as sim:
        kubeconfigs = {name: sim.kubeconfig_path(name) for name in sim.cluster_names()}
        settings = {"apiProcesses": 1, "configReloadSeconds": 0.5, "leaseSeconds": 2.0}
        config = write_demo_config(workdir, kubeconfigs, redis_url, "apiauth" + os.urandom(4).hex(), settings)
        doc = yaml.safe_load(config.read_text())
        doc["auth"]["oidc"] = {
            "issuerUrl": issuer.url,
            "audience": AUDIENCE,
            "tenantsFromGroups": {"ml-team": "research"},
            "rolesFromGroups": {"gpufed-admins": "admin"},
        }
        config.write_text(yaml.safe_dump(doc, sort_keys=False))
        port = free_port()
        env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "PROMETHEUS_MULTIPROC_DIR")}
        log = workdir / "broker.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "broker.cli", "serve", "--config", str(config), "--port", str(port)],
                cwd=REPO,
                env=env | {"PYTHONUNBUFFERED": "1", "RAY_ADDRESS": worker_ray.address},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        s = Served(config, port, log, proc, workdir)
        try:

            def ready() -> bool:
                if proc.poll() is not None:
                    pytest.fail(f"gpufed serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
                return s.get("/readyz", "") == 200

            wait_for(ready, timeout=120, interval=0.5, what="gpufed serve to be ready")
            wait_for(
                lambda: "the HTTP API runs in 1 process(es) of its own" in log.read_text(),
                timeout=60,
                interval=0.2,
                what="the API process to serve",
            )
            yield s
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=30)
            worker_ray.clear()


def test_a_user_removed_by_pointing_tokens_file_elsewhere_is_refused_by_the_api_process(
    served: Served,
) -> None:
    research = served.tokens["research"]
    assert served.get("/v1/jobs", research) == 200
    entries = yaml.safe_load((served.workdir / "tokens.yaml").read_text())
    without = served.workdir / "tokens-without-research.yaml"
    without.write_text(yaml.safe_dump([e for e in entries if e["name"] != "research"]))

    def point(doc: dict[str, Any]) -> None:
        doc["auth"]["tokensFile"] = str(without)

    changed = served.edit(point)
    wait_for(lambda: served.get("/v1/jobs", research) == 401, timeout=60, interval=0.2, what="research's 401")
    print(f"\nresearch refused {time.monotonic() - changed:.1f} s after the tokensFile change")
    assert served.get("/v1/jobs", served.tokens["admin"]) == 200  # the others are still in

    def reloaded() -> str | None:  # logged once the old API process has finished its requests and gone
        return next((ln for ln in served.log.read_text().splitlines() if "auth reloaded" in ln), None)

    line = str(wait_for(reloaded, timeout=60, interval=0.2, what="the auth reload's log line"))
    assert "the broker process" in line and "1 API process(es)" in line, line


def test_a_removed_oidc_admin_mapping_ends_admin_rights_in_the_api_process(
    served: Served, issuer: LocalIssuer
) -> None:
    token = issuer.token(sub="ada", groups=["ml-team", "gpufed-admins"], exp_in=600)
    wait_for(lambda: served.get("/v1/audit", token) == 200, timeout=30, interval=0.2, what="ada as admin")

    def unmap(doc: dict[str, Any]) -> None:
        doc["auth"]["oidc"]["rolesFromGroups"] = {}

    changed = served.edit(unmap)
    wait_for(lambda: served.get("/v1/audit", token) == 403, timeout=60, interval=0.2, what="ada's 403")
    print(f"\nada no longer admin {time.monotonic() - changed:.1f} s after the rolesFromGroups change")
    assert served.get("/v1/jobs", token) == 200  # still a user of her tenant


def _api_processes(pid: int) -> set[int]:
    found = set()
    for p, _ in descendants({pid}):
        try:
            if b"broker.app.api_process" in Path(f"/proc/{p}/cmdline").read_bytes():
                found.add(p)
        except OSError:
            pass
    return found


def test_a_frozen_api_process_is_replaced_and_healthz_answers_again(served: Served) -> None:
    # one API process (a replaced one from an earlier auth change may still be finishing its requests)
    wait_for(
        lambda: len(_api_processes(served.proc.pid)) == 1, timeout=60, interval=0.2, what="one API process"
    )
    (frozen,) = _api_processes(served.proc.pid)
    assert served.get("/healthz", "") == 200
    os.kill(frozen, signal.SIGSTOP)
    stopped = time.monotonic()
    try:

        def answers() -> bool:
            try:
                return httpx.get(served.url + "/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(answers, timeout=60, interval=0.5, what="/healthz to answer after the API process froze")
        print(f"\n/healthz answered {time.monotonic() - stopped:.1f} s after the API process froze")
        assert frozen not in _api_processes(served.proc.pid)
        assert len(_api_processes(served.proc.pid)) == 1
        assert f"API process {frozen} answered no health check" in served.log.read_text()
        assert served.get("/v1/jobs", served.tokens["admin"]) == 200
    finally:
        if Path(f"/proc/{frozen}").exists():
            os.kill(frozen, signal.SIGCONT)
