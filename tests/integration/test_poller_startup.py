"""A poller shard that is starting is not taken for a frozen one (the start-up limit of adapters.poller_liveness).

ShardLiveness over a real Redis and a fake clock: a shard whose clusters are not all listed yet (a
summary missing, or "unknown": syncing) is judged on STARTUP_LIMIT_SECONDS from its start, not on the
silence limit; once they are, silence counts as before; a replacement starts the start-up clock again.
Before this, every shard of a 1,000-member cold start was killed 5 s in, while it listed its members,
over and over.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from adapters.poller_liveness import STARTUP_LIMIT_SECONDS, ShardLiveness
from adapters.redis_store import RedisStateStore
from broker.core.model import ClusterSummary, Health

pytestmark = pytest.mark.integration

BOOT = 1_800_000_000.0
SILENCE = 5.0
GROUPS = {"shard-0": ["c1", "c2"]}


class Clock:
    def __init__(self) -> None:
        self.now = BOOT

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="boot" + uuid.uuid4().hex[:8])
    yield s
    s.close()


def publish(store: RedisStateStore, cluster: str, at: float, health: Health = Health.HEALTHY) -> None:
    store.put_summary(ClusterSummary(cluster=cluster, health=health, heartbeat=at, published_at=at))


def test_a_starting_shard_is_judged_on_the_start_up_limit_not_on_silence(store: RedisStateStore) -> None:
    clock = Clock()
    publish(store, "c1", BOOT - 600)  # a summary its predecessor wrote before this broker started
    liveness = ShardLiveness(store, ["shard-0"], SILENCE, clock=clock)
    assert liveness.silent(GROUPS) == {}
    clock.now = BOOT + 60  # still listing 125 members on a busy host: starting, not frozen
    assert liveness.silent(GROUPS) == {}
    clock.now = BOOT + STARTUP_LIMIT_SECONDS + 1  # never published: frozen at start, replaced
    assert liveness.silent(GROUPS) == {"shard-0": pytest.approx(STARTUP_LIMIT_SECONDS + 1)}


def test_a_shard_busy_listing_after_its_first_syncing_summaries_is_not_killed(store: RedisStateStore) -> None:
    """The 1,000-member cold start: each shard wrote its clusters' "syncing" summaries at once, then
    went quiet for seconds while it listed them all, and was killed for it."""
    clock = Clock()
    liveness = ShardLiveness(store, ["shard-0"], SILENCE, clock=clock)
    assert liveness.silent(GROUPS) == {}
    publish(store, "c1", BOOT + 1, Health.UNKNOWN)
    publish(store, "c2", BOOT + 1, Health.UNKNOWN)
    clock.now = BOOT + 30  # quiet for 29 s, still listing
    assert liveness.silent(GROUPS) == {}
    publish(store, "c1", BOOT + 40)  # c1 listed; c2 still syncing
    clock.now = BOOT + 90
    assert liveness.silent(GROUPS) == {}
    clock.now = BOOT + STARTUP_LIMIT_SECONDS + 1  # past the limit, silent for 81 s: replaced after all
    assert liveness.silent(GROUPS) == {"shard-0": pytest.approx(STARTUP_LIMIT_SECONDS + 1 - 40)}


def test_once_it_is_up_silence_counts_as_before(store: RedisStateStore) -> None:
    clock = Clock()
    liveness = ShardLiveness(store, ["shard-0"], SILENCE, clock=clock)
    assert liveness.silent(GROUPS) == {}  # the supervisor's first pass, at once
    publish(store, "c1", BOOT + 30)
    publish(store, "c2", BOOT + 30, Health.UNREACHABLE)  # a member down from the start: listed as lost
    clock.now = BOOT + 30 + SILENCE - 1
    assert liveness.silent(GROUPS) == {}
    clock.now = BOOT + 30 + SILENCE + 1  # SIGSTOP once it is up: replaced 5 s on
    assert liveness.silent(GROUPS) == {"shard-0": pytest.approx(SILENCE + 1)}

    liveness.replaced("shard-0", SILENCE + 1, "test")  # its successor starts now: a start-up of its own
    clock.now += 2
    publish(store, "c1", clock.now, Health.UNKNOWN)  # its first, "syncing" summaries
    clock.now += 88  # then quiet for 88 s while it lists
    assert liveness.silent(GROUPS) == {}
    publish(store, "c1", clock.now)
    publish(store, "c2", clock.now)
    clock.now += SILENCE + 1
    assert liveness.silent(GROUPS) == {"shard-0": pytest.approx(SILENCE + 1)}
