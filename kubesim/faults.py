"""Fault injection for one simulated cluster: what is set, and a thread-safe handle to set it.

Faults: down (listener closed: connection refused), hang (connections accepted, requests never
answered), latency (seconds added to every answer), error_rate (that fraction of requests answered with
one of error_codes, 429/503 with Retry-After), expired_token (every request 401), forbidden (every
request 403, as if RBAC were revoked), and the one-shots cut_watches (close every open watch stream) and
reset_connections (reset every open TCP connection, watches and idle kept-alive ones alike: the client sees
ECONNRESET on its next read, as after a load balancer or NAT dropping its state).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

ERROR_CODES = (500, 503, 429)


class FaultError(ValueError):
    """A fault setting that is not understood (the admin endpoint answers 400)."""


@dataclass(slots=True)
class FaultState:
    down: bool = False
    hang: bool = False
    latency: float = 0.0
    error_rate: float = 0.0
    error_codes: list[int] = field(default_factory=lambda: list(ERROR_CODES))
    retry_after: int = 1
    expired_token: bool = False
    forbidden: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def active(self) -> bool:
        return self != FaultState()

    def update(self, changes: dict[str, Any]) -> None:
        """Apply changes (validated first, so a bad one changes nothing). `clear: true` resets first."""
        new = FaultState() if changes.get("clear") else FaultState(**self.as_dict())
        for key, value in changes.items():
            if key in ("clear", "cut_watches", "reset_connections"):
                continue
            if key in ("down", "hang", "expired_token", "forbidden"):
                if not isinstance(value, bool):
                    raise FaultError(f"{key} must be true or false")
                setattr(new, key, value)
            elif key in ("latency", "error_rate", "retry_after"):
                if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                    raise FaultError(f"{key} must be a number >= 0")
                if key == "error_rate" and value > 1:
                    raise FaultError("error_rate is a fraction between 0 and 1")
                setattr(new, key, int(value) if key == "retry_after" else float(value))
            elif key == "error_codes":
                if (
                    not isinstance(value, list)
                    or not value
                    or not all(c in (500, 503, 429, 504) for c in value)
                ):
                    raise FaultError("error_codes is a non-empty list of 500, 503, 504 and 429")
                new.error_codes = list(value)
            else:
                raise FaultError(f"unknown fault {key!r}")
        for name in self.__slots__:
            setattr(self, name, getattr(new, name))

    def pick_error(self, rng: random.Random) -> int | None:
        if self.error_rate > 0 and rng.random() < self.error_rate:
            return rng.choice(self.error_codes)
        return None


class ClusterFaults:
    """Set and clear one cluster's faults from any thread (each call waits until the fault is in force)."""

    def __init__(self, apply: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self._apply = apply

    def set(self, **changes: Any) -> dict[str, Any]:
        """Any mix of the FaultState fields, plus cut_watches=True, reset_connections=True and clear=True;
        returns the new state."""
        return self._apply(changes)

    def down(self, on: bool = True) -> dict[str, Any]:
        return self.set(down=on)

    def up(self) -> dict[str, Any]:
        return self.set(down=False)

    def hang(self, on: bool = True) -> dict[str, Any]:
        return self.set(hang=on)

    def latency(self, seconds: float) -> dict[str, Any]:
        return self.set(latency=seconds)

    def error_rate(
        self, rate: float, codes: list[int] | tuple[int, ...] = ERROR_CODES, retry_after: int = 1
    ) -> dict[str, Any]:
        return self.set(error_rate=rate, error_codes=list(codes), retry_after=retry_after)

    def expire_token(self, on: bool = True) -> dict[str, Any]:
        return self.set(expired_token=on)

    def forbid(self, on: bool = True) -> dict[str, Any]:
        return self.set(forbidden=on)

    def cut_watches(self) -> dict[str, Any]:
        return self.set(cut_watches=True)

    def reset_connections(self) -> dict[str, Any]:
        """Reset (TCP RST) every open connection of the cluster now; the listener stays open."""
        return self.set(reset_connections=True)

    def clear(self) -> dict[str, Any]:
        return self.set(clear=True)

    def state(self) -> dict[str, Any]:
        return self.set()
