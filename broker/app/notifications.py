"""The composition of job notifications (docs/batch.md "Notifications"): the leader's webhook notifier
(adapters.webhooks) over the leader's store, with each tenant's target and secret from the config."""

from __future__ import annotations

from adapters.redis_store import RedisStateStore
from adapters.webhooks import WebhookNotifier
from broker.config.notify import tenant_notify
from broker.config.settings import FleetConfig

__all__ = ["build_notifier"]


def build_notifier(cfg: FleetConfig, store: RedisStateStore) -> WebhookNotifier:
    """Started when this process leads, stopped when it no longer does (broker.app.main)."""
    tenants = tenant_notify({name: t.notify for name, t in cfg.settings.tenants.items()})
    return WebhookNotifier(store, store.client, cfg.settings.redis_prefix, lambda: tenants)
