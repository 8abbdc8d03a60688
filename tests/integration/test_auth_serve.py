"""Credentials and the audit trail in `gpufed serve`'s composition (broker.app.main.running_broker with its
clusters.yaml reload), on kubesim's demo fleet, Redis and Ray: single sign-on switched on by editing the
`auth` section of clusters.yaml, a token removed from the tokens file, a submit and the reloads in
GET /v1/audit and in the JSON-lines file, all without a restart.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from broker.app import main as composition
from broker.app.demo import read_demo_tokens
from broker.config.settings import load_fleet_config
from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import free_port, wait_for
from tests.demo_broker import demo_config
from tests.oidc_issuer import AUDIENCE, LocalIssuer

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
    with Simulation(fleet, tmp_path_factory.mktemp("kubeconfigs"), speed=20.0) as s:
        yield s


def test_sso_switched_on_and_a_token_removed_take_effect_without_a_restart(
    sim: Simulation, redis_url: str, ray_session: None, tmp_path: Path
) -> None:
    audit_file = tmp_path / "audit.jsonl"
    path, admin = demo_config(
        sim,
        tmp_path,
        redis_url,
        "authserve",
        {"configReloadSeconds": 0.2, "audit": {"logFile": str(audit_file)}},
    )
    tokens = read_demo_tokens(tmp_path)
    viewer = {"Authorization": f"Bearer {tokens['viewer']}"}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with (
        LocalIssuer().serving() as issuer,
        composition.running_broker(
            load_fleet_config(path), port=port, reload_from=(path, lambda: load_fleet_config(path))
        ),
    ):

        def get(headers: dict[str, str], route: str = "/v1/jobs", **params: Any) -> httpx.Response:
            return httpx.get(f"{url}{route}", headers=headers, params=params, timeout=10)

        sso = {"Authorization": f"Bearer {issuer.token(sub='ana', groups=['ml-team'])}"}
        assert get(sso).status_code == 401  # no oidc yet: an unknown token

        doc = yaml.safe_load(path.read_text())
        doc["auth"]["oidc"] = {
            "issuerUrl": issuer.url,
            "audience": AUDIENCE,
            "tenantsFromGroups": {"ml-team": "ml"},
        }
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        wait_for(lambda: get(sso).status_code == 200, timeout=30, what="single sign-on to be switched on")
        r = httpx.post(f"{url}/v1/jobs", headers=sso, json={"name": "sso-job", "gpus": 1}, timeout=10)
        assert r.status_code == 201 and r.json()["tenant"] == "ml"

        entries = yaml.safe_load((tmp_path / "tokens.yaml").read_text())
        (tmp_path / "tokens.yaml").write_text(yaml.safe_dump([e for e in entries if e["name"] != "viewer"]))
        wait_for(
            lambda: get(viewer).status_code == 401, timeout=30, what="the removed viewer token to be refused"
        )
        assert get(admin).status_code == 200

        def trail() -> list[tuple[str, str, str]]:
            items = get(admin, "/v1/audit").json()["items"]
            return [(r["subject"], r["verb"], r["object"]) for r in items]

        wait_for(lambda: ("ana", "submit", f"job/{r.json()['id']}") in trail(), timeout=10, what="the submit")
        seen = trail()
        assert ("system:config-reload", "reload", "clusters.yaml") in seen
        assert ("system:config-reload", "reload", "auth.tokensFile") in seen
        assert ("system:anonymous", "read", "/v1/jobs") in seen  # the refused calls
    logged = [yaml.safe_load(line) for line in audit_file.read_text().splitlines()]
    assert any(x["subject"] == "ana" and x["verb"] == "submit" for x in logged)
