"""ClusterProfile (SIG-Multicluster Cluster Inventory API, `multicluster.x-k8s.io/v1alpha1`) as members.

Owns, purely (reference section 9):
- `member_of(profile, providers)`: a ClusterProfile -> `ProfileMember` (name, server, CA data, the access
  provider the broker has credentials for, the exec extension passed to that provider's plugin, the
  region and labels), or a `ProfileProblem` naming the field that keeps it out;
- `desired_members(profiles, providers)` and `reconcile(desired, current)` -> `FleetChanges`
  (added / removed / changed member names), which the composition root applies live;
- `capacity_properties(summary, observed_at)`: the `status.properties` the broker publishes for a
  member it manages (`gpu.gpufed.io/<product>.free`, `.allocatable`, `.total`,
  `gpu.gpufed.io/<product>.mig-<profile>.free`), and `merge_properties(...)`, which replaces only the
  broker's own properties and keeps those of the cluster manager and other tools.

Credentials follow KEP-5339: the profile names access providers; the consumer (the broker) holds a
provider file mapping each provider name to a client-go exec plugin, and passes the access provider's
`client.authentication.k8s.io/exec` extension to it. No secret is read from the profile.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from broker.core.model import ClusterSummary

__all__ = [
    "CLUSTERSET_LABEL",
    "EXEC_EXTENSION",
    "MANAGER_LABEL",
    "PROPERTY_PREFIX",
    "FleetChanges",
    "ProfileMember",
    "ProfileProblem",
    "capacity_properties",
    "desired_members",
    "label_selector",
    "member_of",
    "merge_properties",
    "reconcile",
]

MANAGER_LABEL = "x-k8s.io/cluster-manager"
CLUSTERSET_LABEL = "multicluster.x-k8s.io/clusterset"
EXEC_EXTENSION = "client.authentication.k8s.io/exec"
REGION_PROPERTY = "topology.kubernetes.io/region"
PROPERTY_PREFIX = "gpu.gpufed.io/"
MAX_VALUE = 1024


@dataclass(frozen=True)
class ProfileMember:
    """A member cluster as a ClusterProfile describes it; `key` is namespace/name on the hub."""

    name: str
    namespace: str
    server: str
    ca_data: str
    provider: str
    extension: Mapping[str, Any] = field(default_factory=dict)
    proxy_url: str = ""
    region: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def connection(self) -> tuple[Any, ...]:
        """What a change of means rebuilding the member's clients."""
        return (
            self.server,
            self.ca_data,
            self.provider,
            repr(sorted(self.extension.items())),
            self.proxy_url,
        )


@dataclass(frozen=True)
class ProfileProblem:
    """A profile that can't be a member, and why (the field named)."""

    name: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"clusterprofile {self.name}: {self.field}: {self.message}"


@dataclass(frozen=True)
class FleetChanges:
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()  # the connection changed: remove, then add

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)


def label_selector(cluster_manager: str | None, clusterset: str | None) -> str:
    """The labelSelector that lists the profiles of one manager and/or clusterset."""
    parts = []
    if cluster_manager:
        parts.append(f"{MANAGER_LABEL}={cluster_manager}")
    if clusterset:
        parts.append(f"{CLUSTERSET_LABEL}={clusterset}")
    return ",".join(parts)


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def member_of(profile: Mapping[str, Any], providers: Iterable[str]) -> ProfileMember | ProfileProblem:
    """The member a profile describes, through the first of its access providers the broker knows."""
    meta = profile.get("metadata") if isinstance(profile.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    name = _str(meta.get("name"))
    if not name:
        return ProfileProblem("<unnamed>", "metadata.name", "missing")
    status = profile.get("status") if isinstance(profile.get("status"), Mapping) else {}
    assert isinstance(status, Mapping)
    known = list(providers)
    offered = status.get("accessProviders") or status.get("credentialProviders") or []
    if not isinstance(offered, list) or not offered:
        return ProfileProblem(name, "status.accessProviders", "no access provider published yet")
    for i, ap in enumerate(offered):
        if not isinstance(ap, Mapping) or _str(ap.get("name")) not in known:
            continue
        cluster = ap.get("cluster")
        if not isinstance(cluster, Mapping) or not _str(cluster.get("server")):
            return ProfileProblem(name, f"status.accessProviders[{i}].cluster.server", "missing")
        extension: Mapping[str, Any] = {}
        for ext in cluster.get("extensions") or ():
            if isinstance(ext, Mapping) and ext.get("name") == EXEC_EXTENSION:
                value = ext.get("extension")
                extension = value if isinstance(value, Mapping) else {}
        region = ""
        for prop in status.get("properties") or ():
            if isinstance(prop, Mapping) and prop.get("name") == REGION_PROPERTY:
                region = _str(prop.get("value"))
        labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
        assert isinstance(labels, Mapping)
        return ProfileMember(
            name=name,
            namespace=_str(meta.get("namespace")),
            server=_str(cluster["server"]),
            ca_data=_str(cluster.get("certificate-authority-data")),
            provider=_str(ap["name"]),
            extension=dict(extension),
            proxy_url=_str(cluster.get("proxy-url")),
            region=region,
            labels={str(k): str(v) for k, v in labels.items()},
        )
    names = ", ".join(_str(ap.get("name")) for ap in offered if isinstance(ap, Mapping)) or "none"
    return ProfileProblem(
        name,
        "status.accessProviders",
        f"no provider the broker has credentials for (offered: {names}; known: {', '.join(known) or 'none'})",
    )


def desired_members(
    profiles: Iterable[Mapping[str, Any]], providers: Iterable[str]
) -> tuple[dict[str, ProfileMember], list[ProfileProblem]]:
    """Members by name from the listed profiles (deleting ones left out), and the profiles skipped."""
    known = list(providers)
    members: dict[str, ProfileMember] = {}
    problems: list[ProfileProblem] = []
    for p in profiles:
        meta = p.get("metadata") or {}
        if isinstance(meta, Mapping) and meta.get("deletionTimestamp"):
            continue
        got = member_of(p, known)
        if isinstance(got, ProfileProblem):
            problems.append(got)
        elif got.name in members:
            problems.append(
                ProfileProblem(got.name, "metadata.name", f"also in namespace {members[got.name].namespace}")
            )
        else:
            members[got.name] = got
    return members, problems


def reconcile(desired: Mapping[str, ProfileMember], current: Mapping[str, ProfileMember]) -> FleetChanges:
    """What to do so that the fleet's profile members are `desired`."""
    added = tuple(sorted(set(desired) - set(current)))
    removed = tuple(sorted(set(current) - set(desired)))
    changed = tuple(
        sorted(n for n in set(desired) & set(current) if desired[n].connection() != current[n].connection())
    )
    return FleetChanges(added, removed, changed)


def _prop(name: str, value: str, observed_at: str) -> dict[str, str]:
    return {"name": name, "value": value[:MAX_VALUE], "lastObservedTime": observed_at}


def capacity_properties(summary: ClusterSummary, observed_at: str) -> list[dict[str, str]]:
    """The broker's properties for a member: free/allocatable/total whole GPUs per product, free MIG
    devices per product and profile, and the member's health as the broker sees it."""
    out = [_prop(f"{PROPERTY_PREFIX}health", str(summary.health), observed_at)]
    for p in summary.products:
        base = f"{PROPERTY_PREFIX}{p.product}"
        out.append(_prop(f"{base}.free", str(p.free), observed_at))
        out.append(_prop(f"{base}.allocatable", str(p.allocatable), observed_at))
        out.append(_prop(f"{base}.total", str(p.total), observed_at))
    mig: dict[str, int] = {}
    for m in summary.mig:
        key = f"{PROPERTY_PREFIX}{m.product}.mig-{m.profile}.free"
        mig[key] = mig.get(key, 0) + m.free
    out += [_prop(k, str(v), observed_at) for k, v in sorted(mig.items())]
    return out


def merge_properties(
    existing: Sequence[Mapping[str, Any]], ours: Sequence[Mapping[str, str]]
) -> list[dict[str, Any]]:
    """Everyone else's properties as they are, then ours (replacing our previous ones)."""
    kept = [dict(p) for p in existing if not _str(p.get("name")).startswith(PROPERTY_PREFIX)]
    return kept + [dict(p) for p in ours]


def same_values(existing: Sequence[Mapping[str, Any]], ours: Sequence[Mapping[str, str]]) -> bool:
    """Whether our properties already hold these values (then only a heartbeat needs writing)."""
    have = {
        _str(p.get("name")): _str(p.get("value"))
        for p in existing
        if _str(p.get("name")).startswith(PROPERTY_PREFIX)
    }
    return have == {p["name"]: p["value"] for p in ours}
