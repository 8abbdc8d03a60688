"""Poller shards own clusters by consistent hashing (adapters.poller_shard.HashRing).

What an operator cares about: every cluster has exactly one owner, the load is spread, the owner is the
same in every process, and growing the fleet (a shard or a cluster more) moves few clusters.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from adapters.shard_ring import HashRing, PollerSpec, shard_of, spec_from_json, spec_to_json
from broker.core.model import ClusterTraits, Tier

CLUSTERS = [f"cluster-{i:04d}" for i in range(1000)]


def test_every_cluster_has_one_owner_and_the_load_is_spread() -> None:
    ring = HashRing([f"s{i}" for i in range(4)])
    groups = ring.assign(CLUSTERS)
    assert sorted(c for g in groups.values() for c in g) == sorted(CLUSTERS)
    assert all(150 <= len(g) <= 350 for g in groups.values()), {k: len(v) for k, v in groups.items()}


def test_adding_a_shard_moves_about_one_cluster_in_n_plus_one() -> None:
    before = HashRing([f"s{i}" for i in range(4)])
    after = HashRing([f"s{i}" for i in range(5)])
    moved = [c for c in CLUSTERS if before.owner(c) != after.owner(c)]
    assert all(after.owner(c) == "s4" for c in moved)  # only to the new shard
    assert 100 <= len(moved) <= 300  # ~1/5 of 1,000, never a reshuffle


def test_adding_or_removing_a_cluster_moves_no_other() -> None:
    ring = HashRing([f"s{i}" for i in range(3)])
    before = ring.assign(CLUSTERS[:-1])
    after = ring.assign(CLUSTERS)
    owner = ring.owner(CLUSTERS[-1])
    assert after[owner] == sorted([*before[owner], CLUSTERS[-1]])
    assert all(after[s] == before[s] for s in after if s != owner)


def test_the_owner_is_the_same_in_every_process_and_shard_of_agrees() -> None:
    """Poller shards are separate processes (Ray actors), each with its own str-hash seed: the owner
    must not follow Python's randomised hash()."""
    here = [shard_of(c, 3) for c in CLUSTERS[:50]]
    code = (
        "from adapters.shard_ring import shard_of\n"
        "print([shard_of(f'cluster-{i:04d}', 3) for i in range(50)])"
    )
    for seed in ("1", "2"):
        other = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True, text=True, check=True, timeout=120,
        )  # fmt: skip
        assert ast.literal_eval(other.stdout.strip()) == here
    assert len(set(here)) == 3  # not one owner for all
    assert {shard_of(c, 1) for c in CLUSTERS} == {0}
    ring = HashRing(["0", "1", "2"])
    assert all(str(shard_of(c, 3)) == ring.owner(c) for c in CLUSTERS)


def test_an_empty_ring_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one node"):
        HashRing([])


def test_a_spec_survives_json() -> None:
    spec = PollerSpec(
        "c1",
        "/k/c1.kubeconfig",
        None,
        ClusterTraits(
            name="c1", tier=Tier.CLOUD, labels={"a": "b"}, price_per_gpu_hour={"H100": 2.5}, spot=True
        ),
    )
    assert spec_from_json(spec_to_json(spec)) == spec
