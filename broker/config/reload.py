"""clusters.yaml read again while the broker runs: what changed in it, and the thread that notices.

changes(old, new) -> ConfigChanges   what the new file changes, pure: the clusters added, removed,
                                     re-declared (traits only: tier, region, labels, prices, Kueue,
                                     schedulers, spot, tenancy) and re-connected (kubeconfig path, context,
                                     followed namespace, GPU allocation: a new client, Job watch and
                                     poller), all applied without a restart; and the other sections that
                                     changed (settings, clusterProfiles), which take effect at the next
                                     start. (`auth` is applied at once by broker.app.auth.)
ConfigWatcher(path, load, apply)     a daemon thread that loads the file again when its modification time
                                     or size changes (checked every `interval_seconds`). A file that does not
                                     load is logged with its error and counted; the running config is kept
                                     and nothing already accepted is touched. `apply(new)` gets each file
                                     that loads, once; `on_invalid(message)` each that does not.

The broker's composition root (broker.app.main) applies the changes to the running fleet: docs/health.md.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker import telemetry
from broker.config.settings import ClusterConfig, FleetConfig
from broker.core.errors import ConfigError

__all__ = ["ConfigChanges", "ConfigWatcher", "changes"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConfigChanges:
    added: tuple[ClusterConfig, ...] = ()
    removed: tuple[str, ...] = ()
    redeclared: tuple[ClusterConfig, ...] = ()  # same connection, other traits
    reconnected: tuple[ClusterConfig, ...] = ()  # connection changed: new client, Job watch and poller
    restart: tuple[str, ...] = ()  # other sections changed ("settings.leaseSeconds"): the next start

    @property
    def applied_now(self) -> bool:
        return bool(self.added or self.removed or self.redeclared or self.reconnected)

    def text(self) -> str:
        parts = [
            f"{label}: {', '.join(names)}"
            for label, names in (
                ("added", [c.name for c in self.added]),
                ("removed", list(self.removed)),
                ("re-declared", [c.name for c in self.redeclared]),
                ("re-connected", [c.name for c in self.reconnected]),
            )
            if names
        ]
        return "; ".join(parts) or "no member cluster changed"


def _connection(c: ClusterConfig) -> tuple[object, ...]:
    return (c.kubeconfig, c.context, c.namespace, c.tenant_namespace is not None, c.gpu_allocation)


def _changed_keys(section: str, old: object, new: object) -> list[str]:
    if old == new:
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        return [f"{section}.{k}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    return [section]


def changes(old: FleetConfig, new: FleetConfig) -> ConfigChanges:
    """What `new` changes against the running `old`, cluster by cluster and section by section."""
    before = {c.name: c for c in old.clusters}
    after = {c.name: c for c in new.clusters}
    added = tuple(after[n] for n in after if n not in before)
    removed = tuple(n for n in before if n not in after)
    redeclared: list[ClusterConfig] = []
    reconnected: list[ClusterConfig] = []
    for name, now in after.items():
        was = before.get(name)
        if was is None or now == was:
            continue
        if _connection(now) != _connection(was):
            reconnected.append(now)
        else:
            redeclared.append(now)
    restart: list[str] = []
    for section in ("settings", "clusterProfiles", "hub"):  # auth: applied at once (broker.app.auth)
        restart += _changed_keys(
            section,
            old.model_dump(by_alias=True, mode="json").get(section),
            new.model_dump(by_alias=True, mode="json").get(section),
        )
    return ConfigChanges(added, removed, tuple(redeclared), tuple(reconnected), tuple(restart))


class ConfigWatcher:
    """Loads `path` again whenever it changes on disk and hands each good config to `apply`."""

    def __init__(
        self,
        path: Path,
        load: Callable[[], FleetConfig],
        apply: Callable[[FleetConfig], None],
        interval_seconds: float = 5.0,
        on_invalid: Callable[[str], None] | None = None,
    ) -> None:
        self.path = path
        self._load, self._apply, self._on_invalid = load, apply, on_invalid
        self._interval = interval_seconds
        self._seen = self._stamp()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpufed-config-reload", daemon=True)
        self.last_error: str | None = None

    def _stamp(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=5)

    def check(self) -> bool:
        """One look at the file: True when a changed file was loaded and applied."""
        stamp = self._stamp()
        if stamp == self._seen:
            return False
        self._seen = stamp
        try:
            cfg = self._load()
        except ConfigError as exc:
            self.last_error = str(exc)
            telemetry.config_reloads.labels("invalid").inc()
            log.warning("%s changed but was not applied: %s; the running config is kept", self.path, exc)
            if self._on_invalid is not None:
                self._on_invalid(str(exc))
            return False
        self.last_error = None
        self._apply(cfg)
        telemetry.config_reloads.labels("applied").inc()
        return True

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.check()
            except Exception:  # a reload must never end the broker: logged, tried again on the next change
                telemetry.config_reloads.labels("failed").inc()
                log.exception("applying the changed %s failed", self.path)
