"""broker.ha.lease_view: what an API process says of the lease it never holds, read from the store."""

from __future__ import annotations

import pytest

from broker.core.errors import StoreError
from broker.ha.lease_view import LeaseView


class Lease:
    def __init__(self, value: str | None) -> None:
        self.value: str | None = value
        self.reads = 0
        self.down = False

    def holder_now(self) -> str | None:
        self.reads += 1
        if self.down:
            raise StoreError("redis: connection refused")
        return self.value


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize(
    ("value", "leader", "token"),
    [
        ("broker-a|7", True, 7),  # this replica's broker process holds it
        ("broker-b|8", False, None),  # another replica does
        (None, False, None),  # nobody does (an election in progress)
        ("broker-a|x", False, None),  # not a token: never called leader on a bad value
    ],
)
def test_role_follows_the_lease_in_the_store(value: str | None, leader: bool, token: int | None) -> None:
    view = LeaseView("broker-a", Lease(value).holder_now)
    assert (view.leader, view.token, view.error) == (leader, token, None)
    assert view.readiness()


def test_reads_are_cached_for_a_second_then_follow_a_takeover() -> None:
    lease, clock = Lease("broker-a|7"), Clock()
    view = LeaseView("broker-a", lease.holder_now, cache_seconds=1.0, monotonic=clock)
    assert view.leader and view.token == 7 and view.error is None
    assert lease.reads == 1
    lease.value = "broker-b|8"
    clock.t += 0.5
    assert view.leader  # still the cached answer
    clock.t += 0.6
    assert not view.leader and lease.reads == 2


def test_a_store_that_does_not_answer_makes_readiness_fail_with_the_reason() -> None:
    lease = Lease("broker-a|7")
    lease.down = True
    view = LeaseView("broker-a", lease.holder_now)
    assert not view.leader
    with pytest.raises(RuntimeError, match="leader lease unavailable: redis: connection refused"):
        view.readiness()
