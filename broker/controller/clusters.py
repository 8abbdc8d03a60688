"""Cluster health and failover: note health changes, fail over the jobs of lost clusters, fence them.

Owns the failover step of the loop (observe_clusters) over the FleetCache's summaries (only moved
summaries are read): a lost cluster's jobs go back by their failover policy, the cluster is fenced
(not offered) until its stale attempts are swept, then unfenced; the loop wakes at the earliest loss
deadline of a failing cluster (seconds_until_a_loss).
"""

from __future__ import annotations

import functools
import logging

from broker.controller.job_records import PLACED_STATES
from broker.controller.sweeping import Sweeping
from broker.controller.work_queue import Wake
from broker.core.errors import (
    ClusterError,
    Fenced,
    StoreError,
)
from broker.core.model import (
    Health,
    JobRecord,
)
from broker.core.records import ClusterEvent
from broker.health import failover
from broker.health.failover import ClusterHealth

log = logging.getLogger(__name__)


class ClusterWatch(Sweeping):
    def seconds_until_a_loss(self) -> float | None:
        """Seconds until the earliest moment a cluster seen failing in the last observe_clusters becomes
        lost (no success meanwhile), or None: the control loop wakes then, not at its next pass."""
        if self._next_loss_at is None:
            return None
        return max(0.0, self._next_loss_at - self.clock.now())

    def observe_clusters(self) -> list[JobRecord]:
        """The failover step: note health changes, fail over the jobs of lost clusters (and fence them),
        and start the sweep of fenced clusters that answer again. Returns the jobs moved."""
        self._apply_pending_traits()
        if self._fresh_cache():  # only the clusters whose summary version moved are read
            self.work.note(Wake.CAPACITY)  # this pass's scheduling runs (broker.controller.control_loop)
        self._cache_observed = True
        now = self.clock.now()
        summaries = {s.cluster: s for s in self.cache.observed()}
        healths = self._cluster_health(summaries)
        for h in healths.values():
            self._note_health(h)
        fenced = self.store.fenced()
        deadlines = [
            d
            for c in self.traits
            if c not in fenced
            and (d := failover.loss_deadline(summaries.get(c), self.settings.cluster_lost_seconds))
            is not None
            and d > now
        ]
        self._next_loss_at = min(deadlines, default=None)
        lost_after = self.settings.cluster_lost_seconds
        shard = {c: self.shard_of(c) for c in summaries}  # once a pass: both uses below read it
        blind = failover.blind_shards(summaries.values(), shard.__getitem__, now, lost_after)
        self._note_blindness(blind, len(set(shard.values())))
        unseen = {c for clusters in blind.values() for c in clusters}
        lost = {c: h for c, h in healths.items() if failover.is_lost(h, now, lost_after, c in unseen)}
        if self._note_mass_loss(lost, fenced):
            lost = {}  # nothing is moved or fenced while most of the fleet is lost at once
        moved: list[JobRecord] = []
        failed_over: dict[str, int] = {}  # cluster -> jobs moved off it in this pass
        if lost:
            self.records.ensure()
            for record in self.records.in_states(PLACED_STATES):
                gone = lost.get(record.cluster or "")
                if gone is None:
                    continue
                try:
                    # every job's event carries the instant the cluster was found lost, not the moment
                    # its own write came round in this pass
                    step = self._fail_over(record, f"cluster {gone.cluster} lost: {gone.text}", at=now)
                except (StoreError, Fenced):
                    raise
                except Exception:
                    log.exception("failing over %s failed; retried next pass", record.id)
                    continue
                if step is not None:
                    moved.append(step)
                    failed_over[gone.cluster] = failed_over.get(gone.cluster, 0) + 1
            for c, h in lost.items():
                if c not in fenced and self.store.fence(c, h.text):
                    fenced[c] = h.text
                    log.warning(
                        "cluster %s fenced: %s; %d job(s) failed over", c, h.text, failed_over.get(c, 0)
                    )
                    self.store.append_cluster_event(ClusterEvent(c, now, h.health, f"fenced: {h.text}"))
        for c in fenced:
            back = healths.get(c)
            if failover.is_drain(fenced[c]):
                continue  # an operator's drain: lifted by undrain only (docs/migration.md)
            if c in self.traits and back is not None and failover.may_unfence(back):
                self.dispatcher.submit_once(c, "unfence", functools.partial(self._sweep_and_unfence, c))
        if set(fenced) != self._fenced:
            self.work.note(Wake.CLUSTER)  # fenced or offered again: placement may change
        if moved:
            self.work.note(Wake.JOB)  # failed over: queued again in this pass
        self._fenced = set(fenced)
        self._fence_reasons = dict(fenced)
        return moved

    def _note_blindness(self, blind: dict[str, list[str]], shards: int) -> None:
        """Say once per spell that the broker is blind to the whole fleet, or to one poller shard's
        clusters (failover.blind_shards), and when it sees them again."""
        everywhere = bool(blind) and len(blind) == shards
        if everywhere and not self._blind_everywhere:
            log.warning(
                "no poller has written a summary for %g s: the broker cannot see its clusters (pollers, "
                "Ray or their path to Redis stalled); no cluster is failed over for silence until one "
                "reports again",
                self.settings.cluster_lost_seconds,
            )
        elif self._blind_everywhere and not everywhere:
            log.info("the pollers report again: silent clusters are judged as usual")
        if not everywhere:  # each shard once per spell (a fleet-wide spell said none of them)
            told = set() if self._blind_everywhere else set(self._blind)
            for shard in sorted(set(blind) - told):
                clusters = blind[shard]
                log.warning(
                    "poller shard %s has written none of its %d clusters' summaries for %g s (%s%s): it is "
                    "down or restarting; they are not failed over for silence until it reports again",
                    shard,
                    len(clusters),
                    self.settings.cluster_lost_seconds,
                    ", ".join(clusters[:5]),
                    ", ..." if len(clusters) > 5 else "",
                )
            if not self._blind_everywhere:
                for shard in sorted(set(self._blind) - set(blind)):
                    log.info("poller shard %s reports again: its silent clusters are judged as usual", shard)
        self._blind = blind
        self._blind_everywhere = everywhere

    def _note_mass_loss(self, lost: dict[str, ClusterHealth], fenced: dict[str, str]) -> bool:
        """Whether most of the fleet is lost at once (failover.mass_loss): said once per spell."""
        configured = set(self.traits)
        gone = len(configured & set(lost))
        paused = failover.mass_loss(gone, len(configured), self.settings.mass_loss, self._mass_lost)
        if paused and not self._mass_lost:
            log.error(
                "%d of %d clusters lost at once (%s): failover paused, no job is moved and no cluster "
                "fenced until fewer than %.0f%% are lost; the broker's own view of the fleet (its network, "
                "its pollers) is the likelier fault (docs/reliability.md, 'Mass loss')",
                gone,
                len(configured),
                ", ".join(sorted(set(lost) - set(fenced))[:5]) or "all fenced already",
                self.settings.mass_loss.fraction * 50,
            )
        elif self._mass_lost and not paused:
            log.warning("%d of %d clusters lost: failover resumes", gone, len(configured))
        self._mass_lost = paused
        return paused

    def _note_health(self, h: ClusterHealth) -> None:
        previous = self._health_seen.get(h.cluster)
        self._health_seen[h.cluster] = h.health
        if previous == h.health:
            return
        self.work.note(Wake.CLUSTER)
        if previous is None:
            return
        level = logging.INFO if h.health in (Health.HEALTHY, Health.DEGRADED) else logging.WARNING
        log.log(level, "cluster %s: %s -> %s", h.cluster, previous, h.text)
        self.store.append_cluster_event(ClusterEvent(h.cluster, self.clock.now(), h.health, h.reason))

    def _sweep_and_unfence(self, cluster: str) -> None:
        """Fencing: delete the stale attempts in a cluster that came back, and only then offer it again."""
        try:
            deleted = self.sweep_cluster(cluster, raise_errors=True)
        except ClusterError as e:  # back to its pollers, not yet to the broker's calls: swept next pass
            self._sweep_failures.warning(
                cluster,
                "cluster %s stays fenced: deleting its stale attempts failed (%s); tried again",
                cluster,
                e,
            )
            return
        self._sweep_failures.recovered(
            cluster, "cluster %s: its stale attempts can be deleted again", cluster
        )
        if self.store.unfence(cluster):
            self.work.wake(Wake.CLUSTER)  # offered again: the queue may place there
            reason = f"fence lifted: {len(deleted)} stale attempt(s) deleted"
            log.info("cluster %s: %s", cluster, reason)
            self.store.append_cluster_event(ClusterEvent(cluster, self.clock.now(), Health.HEALTHY, reason))
