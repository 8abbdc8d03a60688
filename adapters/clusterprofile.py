"""ClusterProfile discovery and publishing on a hub cluster (`multicluster.x-k8s.io/v1alpha1`).

Owns the I/O around broker/config/clusterprofile.py:
    load_provider_file(path)   the KEP-5339 credentials provider file: {"providers": [{"name", "execConfig"}]}
                               (execConfig as in a kubeconfig user's `exec`); errors name the field
    member_kubeconfig(...)     a kubeconfig for one member: the access provider's server, CA and the
                               `client.authentication.k8s.io/exec` extension as the cluster, the
                               provider's exec plugin as the user (provideClusterInfo passes the
                               extension to the plugin in KUBERNETES_EXEC_INFO); written 0600
    ClusterProfileHub          list the profiles (label selector on manager / clusterset) and write a
                               profile's status.properties (read-modify-write of the status subresource)
    ClusterProfileSync         a thread: every pollSeconds list -> reconcile -> on_add / on_remove hooks
                               (the composition root wires them to pollers, gateway and service); every
                               publishSeconds the broker's capacity properties of each member it manages

Credentials never come from the profile and are never logged; kubeconfigs hold only the exec command.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from adapters.kube_rest import ApiStatus, KubeRest
from broker.config import clusterprofile as cp
from broker.core.errors import ClusterError, ConfigError
from broker.core.model import ClusterSummary

log = logging.getLogger(__name__)

API = "/apis/multicluster.x-k8s.io/v1alpha1"


def load_provider_file(path: Path) -> dict[str, dict[str, Any]]:
    """Access provider name -> exec config, from a KEP-5339 provider file (JSON or YAML)."""
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the provider file: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid JSON/YAML: {exc}") from None
    providers = raw.get("providers") if isinstance(raw, Mapping) else None
    if not isinstance(providers, list) or not providers:
        raise ConfigError(f"{path}: providers: a non-empty list is required")
    out: dict[str, dict[str, Any]] = {}
    for i, p in enumerate(providers):
        name = p.get("name") if isinstance(p, Mapping) else None
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{path}: providers[{i}].name: required")
        exec_cfg = p.get("execConfig")
        if not isinstance(exec_cfg, Mapping) or not isinstance(exec_cfg.get("command"), str):
            raise ConfigError(f"{path}: providers[{i}].execConfig.command: required")
        if not str(exec_cfg.get("apiVersion", "")).startswith("client.authentication.k8s.io/"):
            raise ConfigError(
                f"{path}: providers[{i}].execConfig.apiVersion: client.authentication.k8s.io/v1 expected"
            )
        if name in out:
            raise ConfigError(f"{path}: providers[{i}].name: duplicate provider {name!r}")
        out[name] = dict(exec_cfg)
    return out


def member_kubeconfig(member: cp.ProfileMember, exec_config: Mapping[str, Any]) -> dict[str, Any]:
    """The kubeconfig of one profile member through its access provider's exec plugin."""
    cluster: dict[str, Any] = {"server": member.server}
    if member.ca_data:
        cluster["certificate-authority-data"] = member.ca_data
    if member.proxy_url:
        cluster["proxy-url"] = member.proxy_url
    if member.extension:
        cluster["extensions"] = [{"name": cp.EXEC_EXTENSION, "extension": dict(member.extension)}]
    user_exec = {"interactiveMode": "Never", "provideClusterInfo": True, **dict(exec_config)}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": member.name, "cluster": cluster}],
        "users": [{"name": f"{member.provider}", "user": {"exec": user_exec}}],
        "contexts": [{"name": member.name, "context": {"cluster": member.name, "user": member.provider}}],
        "current-context": member.name,
    }


def write_kubeconfig(directory: Path, member: cp.ProfileMember, exec_config: Mapping[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{member.name}.kubeconfig"
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(member_kubeconfig(member, exec_config), f, sort_keys=False)
    os.replace(tmp, path)
    return path


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ClusterProfileHub:
    """The hub's ClusterProfile API."""

    def __init__(self, rest: KubeRest, namespace: str, selector: str) -> None:
        self.rest = rest
        self.namespace = namespace
        self.selector = selector

    def _path(self, name: str | None = None, status: bool = False) -> str:
        base = f"{API}/namespaces/{self.namespace}/clusterprofiles"
        return base if name is None else f"{base}/{name}" + ("/status" if status else "")

    def list_profiles(self) -> list[dict[str, Any]]:
        query = [("labelSelector", self.selector)] if self.selector else []
        body = self.rest.request("GET", self._path(), query)
        return [i for i in body.get("items") or [] if isinstance(i, dict)]

    def publish(self, name: str, ours: list[dict[str, str]], heartbeat: bool) -> bool:
        """Write our properties into the profile's status (others' kept). Returns whether it wrote."""
        for _ in range(3):
            current = self.rest.request("GET", self._path(name))
            status = current.setdefault("status", {})
            existing = status.get("properties") or []
            if not heartbeat and cp.same_values(existing, ours):
                return False
            status["properties"] = cp.merge_properties(existing, ours)
            try:
                self.rest.request("PUT", self._path(name, status=True), body=current)
                return True
            except ApiStatus as e:
                if e.code != 409:  # a concurrent writer (the cluster manager): read again
                    raise
        return False


AddHook = Callable[[cp.ProfileMember, Path], None]
RemoveHook = Callable[[str], None]
SummaryOf = Callable[[str], ClusterSummary | None]


class ClusterProfileSync:
    """Keeps the broker's profile members equal to the hub's profiles, and publishes their capacity."""

    def __init__(
        self,
        hub: ClusterProfileHub,
        providers: Mapping[str, Mapping[str, Any]],
        workdir: Path,
        on_add: AddHook,
        on_remove: RemoveHook,
        summary_of: SummaryOf | None = None,
        poll_seconds: float = 2.0,
        publish_seconds: float = 10.0,
        heartbeat_seconds: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.hub = hub
        self.providers = dict(providers)
        self.workdir = workdir
        self.on_add = on_add
        self.on_remove = on_remove
        self.summary_of = summary_of
        self.poll_seconds = poll_seconds
        self.publish_seconds = publish_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.clock = clock
        self.members: dict[str, cp.ProfileMember] = {}
        self.problems: dict[str, str] = {}
        self._published: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def sync_once(self) -> cp.FleetChanges:
        """List the profiles and apply the difference: added, removed, changed (removed then added)."""
        profiles = self.hub.list_profiles()
        desired, problems = cp.desired_members(profiles, self.providers)
        for p in problems:
            if self.problems.get(p.name) != str(p):
                log.warning("%s", p)
        self.problems = {p.name: str(p) for p in problems}
        with self._lock:
            changes = cp.reconcile(desired, self.members)
            for name in (*changes.removed, *changes.changed):
                self.on_remove(name)
                self.members.pop(name, None)
                self._published.pop(name, None)
            for name in (*changes.changed, *changes.added):
                member = desired[name]
                path = write_kubeconfig(self.workdir, member, self.providers[member.provider])
                self.on_add(member, path)
                self.members[name] = member
        if not changes.empty:
            log.info(
                "clusterprofiles: added %s, removed %s, changed %s",
                list(changes.added),
                list(changes.removed),
                list(changes.changed),
            )
        return changes

    def publish_once(self) -> int:
        """Write the capacity properties of each member whose summary is known. Returns the writes."""
        if self.summary_of is None:
            return 0
        now = self.clock()
        written = 0
        with self._lock:
            members = dict(self.members)
        for name, member in members.items():
            summary = self.summary_of(name)
            if summary is None:
                continue
            ours = cp.capacity_properties(summary, rfc3339(now))
            beat = now - self._published.get(name, 0.0) >= self.heartbeat_seconds
            try:
                if ClusterProfileHub(self.hub.rest, member.namespace or self.hub.namespace, "").publish(
                    name, ours, beat
                ):
                    written += 1
                    self._published[name] = now
            except (ApiStatus, ClusterError) as e:
                log.warning("clusterprofile %s: cannot publish properties: %s", name, e)
        return written

    def _run(self) -> None:
        next_publish = 0.0
        while not self._stop.is_set():
            try:
                self.sync_once()
            except (ApiStatus, ClusterError, ConfigError) as e:
                log.warning("clusterprofiles: cannot list the hub's profiles: %s", e)
            except Exception:
                log.exception("clusterprofiles: sync failed; retrying")
            if time.monotonic() >= next_publish:
                try:
                    self.publish_once()
                except Exception:
                    log.exception("clusterprofiles: publishing failed; retrying")
                next_publish = time.monotonic() + self.publish_seconds
            self._stop.wait(self.poll_seconds)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpufed-clusterprofiles", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.hub.rest.close()
