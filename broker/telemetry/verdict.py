"""What telemetry reads of a placement verdict, as Protocols: telemetry sits below the scheduler, so the
placement span reads a cluster's verdict by shape (broker.scheduler.placement.ClusterVerdict has it)."""

from __future__ import annotations

from typing import Protocol

__all__ = ["Rejection", "Verdict"]


class Rejection(Protocol):
    """What a placement span says of a failed filter: the plugin and its reason."""

    @property
    def plugin(self) -> str: ...

    @property
    def reason(self) -> str: ...


class Verdict(Protocol):
    """What a placement span reads of one cluster's verdict (broker.scheduler.placement.ClusterVerdict)."""

    @property
    def cluster(self) -> str: ...

    @property
    def score(self) -> int: ...

    @property
    def rejection(self) -> Rejection | None: ...
