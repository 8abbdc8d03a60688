"""Pure failover rules: a cluster's effective health, which clusters are lost, what happens to their jobs,
and when a cluster that came back may take work again (fencing).

    effective_health(summary, now, lost_after)  the poller's verdict, overruled by freshness: a summary
                                                whose last success is older than `lost_after` reads
                                                unreachable whatever it says (a dead poller, a silent
                                                cluster), so no cluster stays "healthy" unobserved; a
                                                degraded one is lost at once only while its poller
                                                still writes (poller_silent_after), else it is silent
    is_lost(health)                             unreachable, or credentials rejected, for `lost_after`:
                                                its jobs are failed over (lifecycle.failover: requeue or
                                                FAILED by the job's policy) and the cluster is fenced.
                                                A cluster that is only *silent* (no summary written: our
                                                poller may be restarting) is not placed on, but its jobs
                                                are moved only after SILENT_LOSS_FACTOR x `lost_after`;
                                                one whose poller reported failing calls (degraded or
                                                unreachable, with a cause) is lost at heartbeat + `lost_after`
    loss_deadline(summary)                      that instant, for a failing cluster: the control loop
                                                wakes for it
    pollers_silent(summaries)                   no poller wrote any of these summaries for `lost_after`:
                                                the broker is blind to their clusters (their pollers, Ray
                                                or the path to Redis stalled), and silence then says
                                                nothing about the clusters, so none is lost *for silence*
                                                meanwhile (is_lost's `blind`): Kubernetes' node lifecycle
                                                controller stops evicting when a whole zone goes NotReady
                                                at once, for the same reason. Verdicts with a cause still
                                                count.
    blind_shards(summaries, shard_of)           the same rule per poller shard: a shard that wrote none
                                                of its clusters' summaries for `lost_after` is down or
                                                restarting (a shard writes every one of its summaries
                                                every few seconds, failing or not), so its clusters are
                                                not lost for silence either. Only a cluster silent while
                                                its own shard still writes the others is lost for its
                                                silence (after SILENT_LOSS_FACTOR x `lost_after`)
    mass_loss(lost, fleet, policy)              most of a large fleet lost at once: failover pauses. A
                                                thousand members do not all die in the same minute; the
                                                broker losing its own view of them (its network, its
                                                pollers starved, an overloaded path) does, and moving
                                                every job onto the few clusters left would pile an outage
                                                on top of it. Kubernetes' node lifecycle controller stops
                                                evicting when a zone is fully disrupted
                                                (--unhealthy-zone-threshold 0.55) for the same reason
    may_unfence(health)                         a fenced cluster is healthy again: after its stale
                                                attempts are swept it is offered to placement again
                                                (not a drained one: drain_reason / is_drain, lifted by
                                                an operator's undrain only)

The guarantee these rules give (docs/reliability.md): a job starts at least once; once a lost cluster
is reachable again and its sweep has run, at most one attempt of a job runs anywhere. While a cluster is
partitioned, the attempt there may still run beside the requeued one: the broker cannot stop what it
cannot reach. No I/O, no clock: `now` is an argument.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from broker.core.model import ClusterSummary, Health

__all__ = [
    "ClusterHealth",
    "blind_shards",
    "drain_reason",
    "effective_health",
    "fenced_for_placement",
    "is_drain",
    "is_lost",
    "loss_deadline",
    "may_unfence",
    "one_shard",
    "placement_view",
    "poller_silent_after",
    "pollers_silent",
]

_LOST = (Health.UNREACHABLE, Health.FORBIDDEN)
# What a poller reports of a cluster whose calls fail: with no success for `lost_after` it is lost as it
# stands (the poller's own UNREACHABLE verdict would come only at its next evaluation and publish).
_FAILING = (Health.UNREACHABLE, Health.DEGRADED)
# Silence alone (a cluster's summary not written while its shard writes the others) moves jobs only
# after this many times clusterLostSeconds: the cluster itself may be fine. A whole shard's silence
# moves nothing (blind_shards).
SILENT_LOSS_FACTOR = 3.0
# A poller re-writes each of its summaries at least every couple of seconds (adapters.poller_shard
# HEARTBEAT_SECONDS); one that wrote nothing for poller_silent_after(clusterLostSeconds) is not working:
# adapters.poller_liveness replaces its shard, and a degraded summary it left unwritten that long is
# silence, not a verdict (effective_health). Never judged on fewer than two missed heartbeats.
MIN_POLLER_SILENCE_SECONDS = 4.0


def poller_silent_after(lost_after: float) -> float:
    """Seconds without a write after which a poller (and what it last wrote) is taken as silent."""
    return max(lost_after / 2.0, MIN_POLLER_SILENCE_SECONDS)


@dataclass(frozen=True)
class ClusterHealth:
    cluster: str
    health: Health
    reason: str
    since: float
    silent: bool = False  # unreachable only because no summary arrived (the poller's own verdict is older)

    @property
    def text(self) -> str:
        return str(self.health) + (f" ({self.reason})" if self.reason else "")


def effective_health(
    cluster: str, summary: ClusterSummary | None, now: float, lost_after: float
) -> ClusterHealth:
    """The cluster's health as failover and operators must read it at `now`."""
    if summary is None:
        return ClusterHealth(cluster, Health.UNKNOWN, "not yet observed", 0.0)
    silent = now - summary.heartbeat
    if summary.heartbeat > 0 and silent > lost_after and summary.health is not Health.FORBIDDEN:
        why = summary.health_reason if summary.health in _FAILING and summary.health_reason else ""
        if why and summary.health is Health.DEGRADED:
            if now - (summary.published_at or summary.heartbeat) > poller_silent_after(lost_after):
                # the poller itself has been quiet: "no success since" is ours to guess, not its to say
                # (a poller starved for seconds beside a member at 50% errors could move its jobs)
                why = ""
            else:
                # the poller saw calls fail and no success since: lost now, not at its next verdict
                why = f"{why}; no successful call for {lost_after:g} s"
        reason = why or f"no successful call for {silent:.0f} s (the cluster is silent or its poller is down)"
        return ClusterHealth(
            cluster, Health.UNREACHABLE, reason, summary.heartbeat + lost_after, silent=not why
        )
    if summary.heartbeat == 0 and summary.health is Health.UNKNOWN:
        return ClusterHealth(cluster, Health.UNKNOWN, "not yet observed", 0.0)
    since = summary.health_since or summary.heartbeat
    return ClusterHealth(cluster, summary.health, summary.health_reason, since)


def loss_deadline(summary: ClusterSummary | None, lost_after: float) -> float | None:
    """When a cluster whose poller reports failing calls becomes lost if no call succeeds meanwhile
    (epoch seconds), or None (healthy, unknown, or silent: silence has its own, longer, rule). The
    control loop wakes for it, so detection is not rounded up to its next pass."""
    if (
        summary is None
        or summary.heartbeat <= 0
        or summary.health not in _FAILING
        or not summary.health_reason
    ):
        return None
    return summary.heartbeat + lost_after


def pollers_silent(summaries: Iterable[ClusterSummary], now: float, lost_after: float) -> bool:
    """True when there are summaries and none was written by its poller within `lost_after` of `now`.

    A summary's write time is its `published_at`, or its heartbeat where the poller did not say (a
    summary written by an older broker): a poller writes every cluster's summary every few seconds,
    failing or not, so only a stalled poller side leaves every one of them old at once."""
    written = [s.published_at or s.heartbeat for s in summaries]
    return bool(written) and all(now - w > lost_after for w in written)


def one_shard(cluster: str) -> str:
    """The shard_of of a fleet whose poller layout is not known: every cluster under one name."""
    return ""


def blind_shards(
    summaries: Iterable[ClusterSummary], shard_of: Callable[[str], str], now: float, lost_after: float
) -> dict[str, list[str]]:
    """{shard: its clusters, sorted} for every poller shard (`shard_of(cluster)`) that wrote none of its
    clusters' summaries within `lost_after` of `now` (pollers_silent over that shard's summaries). A
    shard killed under load may take longer than 3 x `lost_after` to come back; its clusters are fine
    meanwhile, as far as anyone knows. Every cluster under one name ("") is the whole fleet's rule."""
    groups: dict[str, list[ClusterSummary]] = {}
    for s in summaries:
        groups.setdefault(shard_of(s.cluster), []).append(s)
    return {
        shard: sorted(s.cluster for s in group)
        for shard, group in groups.items()
        if pollers_silent(group, now, lost_after)
    }


def is_lost(h: ClusterHealth, now: float, lost_after: float, blind: bool = False) -> bool:
    """Unreachable (the poller already waited `lost_after` without a success, or the summary went
    silent that long, unless the broker is `blind` to it: see pollers_silent and blind_shards), or
    credentials rejected for
    `lost_after`."""
    if h.health is Health.UNREACHABLE:
        if h.silent and blind:
            return False
        return not h.silent or now - h.since >= (SILENT_LOSS_FACTOR - 1) * lost_after
    return h.health is Health.FORBIDDEN and now - h.since >= lost_after


@dataclass(frozen=True)
class MassLossPolicy:
    """When failover pauses (settings massLossFraction, massLossMinClusters; docs/reliability.md)."""

    fraction: float = 0.55  # of the configured clusters lost at once (1.0: only when all are)
    min_clusters: int = 10  # smaller fleets always fail over: two of three sites can truly be down


def mass_loss(lost: int, fleet: int, policy: MassLossPolicy, paused: bool = False) -> bool:
    """Whether `lost` clusters of a `fleet` of configured ones is a mass loss: failover pauses (no job is
    moved and no cluster fenced for it). Once `paused`, it resumes only when fewer than half that share
    are lost: at 1,000 starved members the count hovered round the threshold, and resuming at 54% fenced
    539 clusters at once, 18 s before 987 were lost again."""
    share = policy.fraction * (0.5 if paused else 1.0)
    return fleet >= policy.min_clusters and lost >= share * fleet


def may_unfence(h: ClusterHealth) -> bool:
    """A fenced cluster may be swept and offered again once it answers normally."""
    return h.health in (Health.HEALTHY, Health.DEGRADED)


# A fence an operator set for maintenance (gpufed drain): its reason starts with this; health never lifts it.
DRAIN_PREFIX = "drained"


def drain_reason(by: str, reason: str) -> str:
    """The fence reason of a drained cluster (docs/migration.md)."""
    return f"{DRAIN_PREFIX} by {by}: {reason}" if reason else f"{DRAIN_PREFIX} by {by}"


def is_drain(fence_reason: str) -> bool:
    """The fence is an operator's drain (lifted only by undrain), not a lost cluster's."""
    return fence_reason.startswith(DRAIN_PREFIX + " ")


def lost_health(h: ClusterHealth) -> bool:
    return h.health in _LOST


# What a job's reason says of a cluster fenced after a loss that answers again: it is offered once the
# attempts left there are deleted (fencing), not "unreachable".
SWEEP_PENDING = "back from a loss: offered once its stale attempts are deleted"


def fenced_for_placement(
    summaries: Iterable[ClusterSummary], fenced: Mapping[str, str]
) -> list[ClusterSummary]:
    """The fenced clusters' summaries (cluster -> fence reason) as level 1 should see them, so a job's
    reason still counts them rather than leaving them out of the count, and says what is true of them: a
    drained one as drained, with the operator's reason ("1 drained by admin: maintenance"); a lost one
    as lost while it is (its own unreachable or forbidden verdict: "1 credentials rejected"), and as
    awaiting its sweep once it answers again (SWEEP_PENDING)."""
    out = []
    for s in summaries:
        why = fenced.get(s.cluster)
        if why is None:
            continue
        if is_drain(why):
            out.append(replace(s, fence_reason=why))
        elif s.health in _LOST:
            out.append(s)
        elif s.health in (Health.HEALTHY, Health.DEGRADED):
            out.append(replace(s, fence_reason=SWEEP_PENDING))
        else:
            out.append(replace(s, health=Health.UNREACHABLE))
    return out


def placement_view(
    offered: Iterable[ClusterSummary], fenced_summaries: Iterable[ClusterSummary], fenced: Mapping[str, str]
) -> list[ClusterSummary]:
    """The one fleet level 1 decides over, for the scheduler's pass and for explain alike: the offered
    clusters, and the fenced ones counted as rejected (fenced_for_placement), so a job's reason and
    explain's answer name the same clusters the same way."""
    return [*(s for s in offered if s.cluster not in fenced), *fenced_for_placement(fenced_summaries, fenced)]
