"""The dashboard in a real browser: headless Chromium from the distribution's packages, driven by Playwright
for Python (executable_path: no browser download), against a running broker over kubesim's demo fleet.

Checks what an operator looks at: the fleet view (clusters, products, MIG, the per-node heatmap), the
queue with the reason a job waits, a job's timeline, and that a token typed in is sent as a Bearer token.
Screenshots land in the test's tmp directory (printed in the test output).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, Request, expect, sync_playwright

from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import wait_for
from tests.demo_broker import demo_broker

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
# The demo config runs with auth on: the admin token of its tokens.yaml, set by the broker fixture.
AUTH: dict[str, str] = {}
SIM: list[Simulation] = []  # the module's simulation, for the test that makes a cluster fail


def chromium_path() -> str:
    """The distribution's Chromium (installed by `make browser`, which `make test` runs)."""
    found = os.environ.get("GPUFED_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "no chromium on PATH: run `make browser` (apt-get install chromium)"
    return found


@pytest.fixture(scope="module")
def broker_url(redis_url: str, ray_session: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
    with (
        Simulation(fleet, tmp_path_factory.mktemp("kubeconfigs"), speed=50.0) as sim,
        demo_broker(sim, tmp_path_factory.mktemp("broker"), redis_url, "gpufed-dashboard") as broker,
    ):
        AUTH.update(broker.auth)
        SIM.append(sim)
        yield broker.url


@pytest.fixture
def page(broker_url: str) -> Iterator[Page]:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), headless=True, args=["--no-sandbox"])
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        pg = context.new_page()
        try:
            yield pg
        finally:
            context.close()
            browser.close()


def _shot(page: Page, out: Path, name: str) -> Path:
    path = out / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


def test_the_dashboard_shows_fleet_queue_reason_and_a_jobs_timeline(
    broker_url: str, page: Page, tmp_path: Path
) -> None:
    running = httpx.post(
        f"{broker_url}/v1/jobs",
        json={"name": "train-h100", "gpus": 8, "gpuProducts": ["H100-80GB"], "durationSeconds": 600},
        headers=AUTH,
    ).json()
    waiting = httpx.post(
        f"{broker_url}/v1/jobs",
        json={"name": "too-big", "gpus": 16, "gpuProducts": ["H100-80GB"]},
        headers=AUTH,
    ).json()
    burst = httpx.post(  # only the cloud cluster has H200s: it bursts, and its cost counts as spend
        f"{broker_url}/v1/jobs",
        json={
            "name": "h200-burst",
            "gpus": 4,
            "gpuProducts": ["H200-141GB"],
            "allowBurst": True,
            "durationSeconds": 600,
            "tenant": "research",
        },
        headers=AUTH,
    ).json()
    wait_for(
        lambda: (
            httpx.get(f"{broker_url}/v1/jobs/{burst['id']}", headers=AUTH).json()["cluster"] == "cloud-burst"
        ),
        timeout=30,
        what="the H200 job placed in the cloud",
    )
    wait_for(
        lambda: (
            httpx.get(f"{broker_url}/v1/jobs/{waiting['id']}", headers=AUTH).json()["reason"].startswith("0/")
        ),
        timeout=30,
        what="the big job's no-fit reason",
    )

    sent: list[dict[str, str]] = []
    page.on("request", lambda r: sent.append(r.headers) if "/v1/" in r.url else None)
    page.goto(broker_url + "/")

    # a token typed in is kept and sent as a Bearer token from then on
    token = AUTH["Authorization"].removeprefix("Bearer ")
    page.get_by_label("API token").fill(token)
    with page.expect_request(lambda r: r.url.endswith("/v1/clusters")) as req_info:
        page.get_by_role("button", name="Use token").click()
    req: Request = req_info.value
    assert req.headers.get("authorization") == f"Bearer {token}"

    # fleet: one card per cluster, whole-GPU products and the MIG profiles
    for cluster in ("onprem-a", "onprem-b", "cloud-burst"):
        expect(page.locator("#clusters h3", has_text=cluster)).to_be_visible()
    expect(page.locator("#products tbody th", has_text="H100-80GB")).to_be_visible()
    # tenants (issue 46): the burst job's tenant, with what it runs, from GET /v1/tenants
    research = page.locator("#tenants-table tbody tr", has=page.locator("th", has_text="research"))
    expect(research).to_contain_text("H200-141GB=1")
    expect(page.locator("#clusters").get_by_text("A100-80GB MIG 1g.10gb")).to_be_visible()
    expect(page.get_by_role("img", name="H100-80GB on onprem-b: 16 of 24 GPUs free")).to_be_visible(
        timeout=30_000
    )

    # cluster health with the why
    expect(page.locator("#health-table tbody tr", has_text="onprem-a")).to_contain_text("healthy")
    expect(page.locator("#health-table tbody tr", has_text="onprem-a")).to_contain_text("watched live")

    # the queue says why the big job waits
    row = page.locator("#queue-table tbody tr", has_text="too-big")
    expect(row).to_contain_text("0/3 clusters are available")
    expect(row).to_contain_text("first in the queue")  # its place in the global queue (docs/tenancy.md)
    expect(row).to_contain_text("never on-prem")  # its predicted start (docs/burst.md)

    # burst spend per tenant: the H200 job's expected cost is committed against research's budget
    spend_row = page.locator("#spend-table tbody tr", has_text="research")
    expect(spend_row).to_contain_text("$", timeout=30_000)

    # per-node detail on request: the heatmap and the table, with why a node offers nothing
    page.get_by_label("Show every GPU node").check()
    expect(page.get_by_role("list", name="nodes of onprem-b by free GPUs")).to_be_visible(timeout=30_000)
    expect(page.locator("#nodes table", has_text="onprem-b")).to_contain_text(
        "nvidia.com/gpu=present:NoSchedule"
    )
    _shot(page, tmp_path, "fleet")

    # a job's timeline, selected from the filtered job list
    page.get_by_label("Name or id").fill("train-h100")
    page.get_by_role("button", name=running["id"]).click()
    timeline = page.locator("#timeline-list")
    expect(timeline).to_contain_text("submitted")
    expect(timeline).to_contain_text("placed on onprem-b")
    expect(page.locator("#timeline-meta")).to_contain_text("trace id")
    _shot(page, tmp_path, "timeline")

    assert all(h.get("authorization") == f"Bearer {token}" for h in sent[-3:])


def test_a_new_user_signs_in_by_link_sees_numa_and_cancels_and_reads_logs_from_the_jobs_table(
    broker_url: str, page: Page
) -> None:
    """Issue 28 point 8: before a token is typed the page asks for one (no red 401); the link `gpufed demo
    --keep` prints (#token=) signs in and leaves the address bar clean; onprem-b's cards say its nodes run
    single-numa-node; the jobs table has tenant and GPU columns, and cancel and logs actions."""
    page.goto(broker_url + "/")
    status = page.locator("#status")
    expect(status).to_contain_text("asks for an API token")
    expect(status).not_to_have_class("error")

    token = AUTH["Authorization"].removeprefix("Bearer ")
    page.goto(broker_url + "/#token=" + token)
    expect(status).to_contain_text("Live")
    assert "token" not in page.url

    # with onprem-b's whole-node H100 busy, its free H100s sit on single-numa-node nodes (4 + 4): said so
    filler = httpx.post(
        f"{broker_url}/v1/jobs",
        json={"name": "fill-h100", "gpus": 8, "gpuProducts": ["H100-80GB"], "durationSeconds": 600},
        headers=AUTH,
    ).json()
    try:
        expect(page.locator("#clusters .numa-note").first).to_contain_text("single-numa-node", timeout=30_000)
        expect(page.get_by_text("pod slots (NUMA zones) by free GPUs").first).to_be_visible()
        # "nodes by free GPUs" counts nodes: onprem-b's two single-numa-node nodes have 8 free each
        card = page.locator("#clusters article", has=page.locator("h3", has_text="onprem-b"))
        expect(
            card.get_by_role("img", name=re.compile(r"^nodes by free GPUs: .*2 with 8 free"))
        ).to_be_visible()
    finally:
        httpx.delete(f"{broker_url}/v1/jobs/{filler['id']}", headers=AUTH)  # the other test counts free H100s

    queued = httpx.post(
        f"{broker_url}/v1/jobs", json={"name": "cancel-me", "gpus": 16, "tenant": "nlp"}, headers=AUTH
    ).json()
    row = page.locator("#jobs-table tbody tr", has_text="cancel-me")
    expect(row).to_contain_text("nlp", timeout=30_000)  # the tenant column
    expect(row).to_contain_text("16 GPUs")  # the GPU column
    page.on("dialog", lambda d: d.accept())
    row.get_by_role("button", name="Cancel cancel-me").click()
    wait_for(
        lambda: (
            httpx.get(f"{broker_url}/v1/jobs/{queued['id']}", headers=AUTH).json()["state"] == "CANCELLED"
        ),
        timeout=30,
        what="the job cancelled from the dashboard",
    )
    expect(row).to_contain_text("CANCELLED", timeout=30_000)

    row.get_by_role("button", name="Logs of cancel-me").click()
    expect(page.get_by_label("Job log")).to_be_visible()
    expect(page.get_by_label("Job log")).to_contain_text("No log")  # it never ran: said, not an error


def test_a_cluster_that_became_forbidden_shows_no_green_free_bars(broker_url: str, page: Page) -> None:
    """Issue 28 point 8: a cluster whose credentials were refused keeps only its last-known figures, in
    grey and said so, not green "free" bars. (Last in this file: the cluster is made healthy again.)"""
    faults = SIM[0].faults("cloud-burst")
    faults.expire_token()
    try:
        wait_for(
            lambda: any(
                c["name"] == "cloud-burst" and c["health"] == "forbidden"
                for c in httpx.get(f"{broker_url}/v1/clusters", headers=AUTH).json()["items"]
            ),
            timeout=60,
            what="cloud-burst forbidden",
        )
        page.goto(broker_url + "/#token=" + AUTH["Authorization"].removeprefix("Bearer "))
        card = page.locator("#clusters article", has=page.locator("h3", has_text="cloud-burst"))
        expect(card).to_contain_text("Not offered to placement (forbidden)", timeout=30_000)
        expect(card.locator(".seg.free")).to_have_count(0)
        expect(card.get_by_role("img", name="H200-141GB on cloud-burst").first).to_have_attribute(
            "aria-label", re.compile("free when last seen \\(forbidden\\)")
        )
    finally:
        faults.expire_token(False)
