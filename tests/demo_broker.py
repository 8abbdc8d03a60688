"""A broker over the demo fleet for integration tests: the demo's clusters.yaml pointed at a kubesim
Simulation, a private Redis prefix, the admin's token, `gpufed serve`'s composition, and a wait until
every cluster has a summary. One place for what the walking skeleton, failover, burst and dashboard
tests each used to write out.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import httpx

from broker.app import main as composition
from broker.app.demo import read_demo_tokens, write_demo_config
from broker.config.settings import load_fleet_config
from kubesim.sim import Simulation
from tests.conftest import free_port, wait_for


class DemoBroker(NamedTuple):
    url: str
    auth: dict[str, str]  # the admin's Authorization header
    broker: composition.Broker  # its parts (pollers, store, ...), for tests that break one


def demo_config(
    sim: Simulation, workdir: Path, redis_url: str, prefix: str, settings: Mapping[str, Any] | None = None
) -> tuple[Path, dict[str, str]]:
    """The demo's clusters.yaml for `sim`'s clusters (with `settings` merged) and the admin's header."""
    kubeconfigs = {name: sim.kubeconfig_path(name) for name in sim.cluster_names()}
    path = write_demo_config(workdir, kubeconfigs, redis_url, prefix, settings)
    return path, {"Authorization": "Bearer " + read_demo_tokens(workdir)["admin"]}


def every_cluster_healthy(url: str, auth: dict[str, str], clusters: int) -> bool:
    """All `clusters` member clusters are listed by the broker, each healthy."""
    try:
        r = httpx.get(f"{url}/v1/clusters", timeout=10, headers=auth)
    except httpx.HTTPError:
        return False
    items = r.json()["items"] if r.status_code == 200 else []
    return len(items) == clusters and all(c["health"] == "healthy" for c in items)


@contextmanager
def demo_broker(
    sim: Simulation,
    workdir: Path,
    redis_url: str,
    prefix: str,
    settings: Mapping[str, Any] | None = None,
    timeout: float = 90.0,
) -> Iterator[DemoBroker]:
    """A running broker over `sim`, yielded once every cluster reads healthy."""
    path, auth = demo_config(sim, workdir, redis_url, prefix, settings)
    port = free_port()
    with composition.running_broker(load_fleet_config(path), port=port) as broker:
        url = f"http://127.0.0.1:{port}"
        clusters = len(sim.cluster_names())
        wait_for(
            lambda: every_cluster_healthy(url, auth, clusters), timeout=timeout, what="every cluster healthy"
        )
        yield DemoBroker(url, auth, broker)
