"""What the broker's embedded Ray is started with (adapters/ray_embedded.py, issue 43), and the idle
poller shard's publisher, which sleeps until a write falls due instead of waking five times a second
(adapters/poller_shard.py). That Ray with these options still restarts a crashed shard:
tests/integration/test_poller_fleet.py and test_poller_liveness.py (their Ray is started the same way,
tests/conftest.py `ray_session`); what the options save: benchmarks/ray_idle.py, docs/benchmarks.md."""

from __future__ import annotations

import uuid

from adapters import ray_embedded
from adapters.poller_shard import EVENT_LAGS_INTERVAL_SECONDS, PollerShard


def test_the_embedded_ray_keeps_the_brokers_logging_and_no_dashboard() -> None:
    options = ray_embedded.embedded_ray_options({})
    assert options["include_dashboard"] is False
    assert options["log_to_driver"] is True  # the shards' health transitions in the broker's output
    assert options["configure_logging"] is False
    assert options["_system_config"] == ray_embedded.SYSTEM_CONFIG
    assert "address" not in options  # an embedded Ray: joining a cluster passes none of this


def test_an_operators_ray_variable_wins_over_the_brokers_choice() -> None:
    env = {"RAY_memory_monitor_refresh_ms": "250", "LOG_NAME_UPDATE_INTERVAL_S": "0.5"}
    config = ray_embedded.embedded_ray_options(env)["_system_config"]
    assert "memory_monitor_refresh_ms" not in config  # Ray reads the operator's variable instead
    assert config["raylet_report_resources_period_milliseconds"] == 1000
    extra = ray_embedded.embedded_ray_env(env)
    assert "LOG_NAME_UPDATE_INTERVAL_S" not in extra  # not overwritten
    assert extra["RAY_LOG_MONITOR_MANY_FILES_THRESHOLD"] == "0"


def test_an_idle_shard_publisher_sleeps_until_a_write_is_due_and_a_marked_cluster_wakes_it(
    redis_url: str,
) -> None:
    shard = PollerShard([], redis_url, f"idle-{uuid.uuid4().hex[:8]}")
    try:
        assert shard._next_due() == 0.0  # nothing written yet: the first pass is due at once
        shard.publish_once()  # writes the (empty) event-lag histogram
        due = shard._next_due()
        assert EVENT_LAGS_INTERVAL_SECONDS - 1.0 < due <= EVENT_LAGS_INTERVAL_SECONDS
        shard._wake.clear()
        shard._mark("member-a")  # a health transition, a failed write, an added cluster
        assert shard._wake.is_set()
        assert shard._next_due() == 0.0  # retried at the next pass, not after the sleep
    finally:
        shard.stop()
