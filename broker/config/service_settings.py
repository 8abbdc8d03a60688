"""The control loop's settings derived from clusters.yaml's one settings model: `service_settings(settings)`
is the one place a ServiceSettings (broker.controller.base) is built from `Settings`, with the mass-loss
and member-trouble policies it carries. Defaults are declared once, on `Settings`; the plain values'
own defaults equal them (tests/unit/test_settings_once.py)."""

from __future__ import annotations

from broker.config.settings import Settings
from broker.controller.base import ServiceSettings
from broker.health.failover import MassLossPolicy
from broker.workload.member_trouble import TroublePolicy

__all__ = ["service_settings"]


def service_settings(settings: Settings) -> ServiceSettings:
    """What the control loop reads of `settings`: TTLs, loss and trouble policies, the queue, preemption."""
    return ServiceSettings(
        reservation_ttl_seconds=settings.reservation_ttl_seconds,
        finished_job_ttl_seconds=settings.finished_job_ttl_seconds,
        cluster_lost_seconds=settings.cluster_lost_seconds,
        mass_loss=MassLossPolicy(settings.mass_loss_fraction, settings.mass_loss_min_clusters),
        trouble_policy=TroublePolicy(
            settings.member_pending_seconds,
            settings.image_pull_fail_seconds,
            settings.member_avoid_seconds,
        ),
        federation=settings.redis_prefix,
        queue=settings.queue_policy(),
        preemption=settings.preemption.policy() if settings.preemption else None,
    )
