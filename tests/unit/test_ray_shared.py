"""The shared-Ray-cluster side of the poller fleet that needs no Ray (adapters/ray_shared.py): which Ray
to join, the token check, the replica roster in (real) Redis that decides who takes the shards down,
and a follower's view of the assignment. The Ray side: tests/integration/test_ray_shared_fleet.py."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from adapters import ray_shared
from adapters.ray_actors import placement
from adapters.redis_store import RedisStateStore
from adapters.shard_ring import HashRing, PollerSpec
from broker.app.main import StartupError, check_startup, poller_fleet
from broker.config.settings import FleetConfig
from broker.core.model import ClusterTraits, Tier


def test_ray_address_the_environment_wins_over_the_setting() -> None:
    assert ray_shared.ray_address(None, {}) is None
    assert ray_shared.ray_address("", {}) is None
    assert ray_shared.ray_address("head:6379", {}) == "head:6379"
    assert ray_shared.ray_address("head:6379", {"RAY_ADDRESS": "other:6379"}) == "other:6379"


def test_the_namespace_is_named_after_the_redis_prefix() -> None:
    assert ray_shared.namespace("gpufed") == "gpufed-gpufed"
    assert ray_shared.namespace("team-a") == "gpufed-team-a"


def test_token_auth_without_a_token_names_the_variable(tmp_path: Path) -> None:
    home = {"HOME": str(tmp_path)}
    assert ray_shared.check_token_environment(home) is None  # no token auth asked for
    assert ray_shared.check_token_environment({**home, "RAY_AUTH_MODE": "disabled"}) is None
    missing = ray_shared.check_token_environment({**home, "RAY_AUTH_MODE": "token"})
    assert missing is not None and "RAY_AUTH_TOKEN" in missing
    assert (
        ray_shared.check_token_environment({**home, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "t"}) is None
    )
    absent = ray_shared.check_token_environment(
        {**home, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(tmp_path / "nope")}
    )
    assert absent is not None and "RAY_AUTH_TOKEN_PATH" in absent
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("t")  # Ray's default path
    assert ray_shared.check_token_environment({**home, "RAY_AUTH_MODE": "token"}) is None
    bad = ray_shared.check_token_environment({**home, "RAY_AUTH_MODE": "tokens"})
    assert bad is not None and "RAY_AUTH_MODE" in bad


def test_detached_shards_are_spread_and_embedded_ones_are_not() -> None:
    assert placement(True) == {"lifetime": "detached", "scheduling_strategy": "SPREAD", "num_cpus": 0.01}
    assert placement(False) == {}


def _cfg(redis_url: str, **settings: object) -> FleetConfig:
    cluster = {"name": "a", "kubeconfig": "/nonexistent/a.kubeconfig"}
    return FleetConfig.model_validate(
        {"clusters": [cluster], "settings": {"redisUrl": redis_url, "redisPrefix": "rs", **settings}}
    )


def test_a_ray_address_makes_the_deployments_fleet_and_none_the_embedded_one(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    embedded = poller_fleet(_cfg(redis_url), "replica-a")
    assert not isinstance(embedded, ray_shared.SharedPollerFleet)
    shared = poller_fleet(_cfg(redis_url, rayAddress="head:6379"), "replica-a")
    assert isinstance(shared, ray_shared.SharedPollerFleet)
    assert (shared.address, shared.namespace) == ("head:6379", "gpufed-rs")


def test_joining_with_token_auth_and_no_token_refuses_to_start(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for var in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_ADDRESS", "head:6379")
    with pytest.raises(StartupError, match="RAY_AUTH_TOKEN"):
        check_startup(_cfg(redis_url), "127.0.0.1", 0)


def test_only_the_last_replica_to_leave_is_told_to_take_the_shards_down(redis_url: str) -> None:
    prefix = f"roster-{uuid.uuid4().hex[:6]}"
    stores = [RedisStateStore(redis_url, prefix=prefix) for _ in range(2)]
    a, b = (ray_shared.ReplicaRoster(s, name) for s, name in zip(stores, ("a", "b"), strict=True))
    try:
        a.start()
        b.start()
        assert a.others() == ["b"] and b.others() == ["a"]
        assert a.leave() is False  # b is still there: the shards stay
        assert b.others() == []
        assert b.leave() is True  # the last one
    finally:
        for s in stores:
            s.close()


def test_a_replica_gone_silent_does_not_count(redis_url: str) -> None:
    prefix = f"roster-{uuid.uuid4().hex[:6]}"
    store = RedisStateStore(redis_url, prefix=prefix)
    try:
        store.client.hset(f"{prefix}:ray:replicas", "killed", str(time.time() - 1))  # expired entry
        roster = ray_shared.ReplicaRoster(store, "me")
        roster.beat()
        assert roster.others() == []
        assert store.client.hkeys(f"{prefix}:ray:replicas") == [b"me"]  # the silent one's entry is gone
        assert roster.leave() is True
    finally:
        store.close()


def test_a_follower_keeps_the_cluster_list_and_reports_the_rings_assignment(redis_url: str) -> None:
    traits = [ClusterTraits(name=f"c{i}", tier=Tier.ONPREM, region="eu") for i in range(5)]
    specs = [PollerSpec(t.name, "/k", None, t) for t in traits]
    fleet = ray_shared.SharedPollerFleet(specs[:3], redis_url, "rs", "head:6379", "me", shards=2)
    try:
        assert not fleet.leading
        got = fleet.set_clusters(specs)  # no Ray touched: a follower applies nothing
        expected = HashRing(fleet.shard_names).assign(s.name for s in specs)
        assert got == expected
        assert fleet.status() == {"leading": False, "assignment": expected}
        fleet.unlead()  # harmless when not leading
    finally:
        fleet._store.close()
