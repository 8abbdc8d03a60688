"""What `explain` says first: where a job would go, in words that agree with its place in the queue.

Pure. Owns `summary(decision, slot)`: a dry run decides over the fleet as it is now, while the jobs
ahead in the queue are offered the room first; so "would place on X" is true only for the job first in
the queue. Behind others it reads "would place on X once the N jobs ahead of it are placed"; held by a
quota, the quota's rule; nothing fitting, the same diagnosis a queued job's own reason carries
(NoFit.message: explain and the scheduling pass decide over one fleet, broker.health.failover.placement_view).
"""

from __future__ import annotations

from broker.core.model import NoFit, Placement
from broker.queue.queueing import Slot

__all__ = ["summary"]


def summary(decision: Placement | NoFit, slot: Slot | None) -> str:
    if isinstance(decision, NoFit):
        return decision.message
    where = f"would place on {decision.cluster}"
    if slot is None:
        return where + " now"
    if slot.blocked is not None:
        return f"held back by a quota ({slot.blocked}); on its turn it {where}"
    ahead = slot.position - 1
    if ahead <= 0:
        return where + " now"
    return f"{where} once the {ahead} job{'s' if ahead != 1 else ''} ahead of it {'are' if ahead != 1 else 'is'} placed"
