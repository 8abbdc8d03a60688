"""An array's parallelism cap (`array: {parallelism: P}`, Slurm's `%P`): at most P of its members placed
or running at once (docs/batch.md).

ArrayCap is built from the jobs holding GPUs now and is asked, in queue order, whether a queued member may
be placed in this pass (`blocked`); each member placed is counted at once (`take`), so one pass never
places more than the cap. An array is its tenant's group. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.core.model import JobRecord

__all__ = ["ArrayCap"]


def _key(record: JobRecord) -> tuple[str, str] | None:
    b = record.request.batch
    if b.parallelism is None or b.array_index is None:
        return None
    return (record.request.tenant, b.group)


class ArrayCap:
    def __init__(self, active: Iterable[JobRecord]) -> None:
        """`active`: the jobs placed, admitted or running now."""
        self._held: dict[tuple[str, str], int] = {}
        for r in active:
            key = _key(r)
            if key is not None:
                self._held[key] = self._held.get(key, 0) + 1

    def blocked(self, record: JobRecord) -> str | None:
        """Why this queued member must wait for a member to end (None: it may be placed)."""
        key = _key(record)
        cap = record.request.batch.parallelism
        if key is None or cap is None:
            return None
        held = self._held.get(key, 0)
        if held < cap:
            return None
        return f"array {key[1]}: {held} of its members placed or running, parallelism {cap}"

    def take(self, record: JobRecord) -> None:
        """Count a member placed in this pass."""
        key = _key(record)
        if key is not None:
            self._held[key] = self._held.get(key, 0) + 1
