"""What one workload kind's adapter provides (the Kind record registry.py keys by apiVersion and kind).

    demand(obj)            Demand (pods per role, GPUs per pod, gang, priority, queue); InvalidRequest names
                           the kind's field
    templates(obj)         the pod templates inside a (copied) object, (role, template, asks for GPUs), for
                           level 2 to write its hints into; a kind without pod templates returns none and
                           writes its hints through `overrides`
    managed_by_path        where spec.managedBy lives (removed from the member copy)
    kueue_suspend_path     where the kind is suspended for Kueue (None: Kueue does not admit it here; the
                           member copy is then created running, as before)
    status(obj, pods)      the member object's status as a WorkloadStatus (the kind's own semantics)
    own_controllers        managedBy values that name the kind's own controller
Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from broker.core.workloads import WorkloadStatus
from broker.workload.kinds.demand import Demand

__all__ = ["Kind", "Template", "condition", "status_from"]

Template = tuple[str, dict[str, Any], bool]  # (role name, the PodTemplateSpec in the object, GPU role)


@dataclass(frozen=True)
class Kind:
    api_version: str
    kind: str
    plural: str
    demand: Callable[[Mapping[str, Any]], Demand]
    templates: Callable[[dict[str, Any]], list[Template]]
    status: Callable[[Mapping[str, Any], str, str, int], WorkloadStatus]
    managed_by_path: tuple[str, ...] = ("spec", "managedBy")
    kueue_suspend_path: tuple[str, ...] | None = None  # spec.suspend for Kueue's JobSet / RayJob integrations
    overrides: Callable[[dict[str, Any], dict[str, Any]], None] | None = None  # (obj, hinted pod template)

    @property
    def group(self) -> str:
        return self.api_version.split("/", 1)[0]

    @property
    def api(self) -> str:
        """The group/version a member must serve: "jobset.x-k8s.io/v1alpha2"."""
        return self.api_version


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The status condition of this type when it is True, else None."""
    status = obj.get("status") or {}
    for c in status.get("conditions") or ():
        if isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True":
            return c
    return None


def status_from(
    name: str,
    namespace: str,
    *,
    pods: int,
    complete: bool = False,
    failed: Mapping[str, Any] | str | None = None,
    running: bool = False,
    suspended: bool = False,
    active: int = 0,
) -> WorkloadStatus:
    """A WorkloadStatus for lifecycle.observe from a kind's verdicts: `running` means every pod of the
    workload is ready (ready = pods, so the job goes RUNNING and its reservation is released)."""
    if failed is not None:
        message = (
            failed if isinstance(failed, str) else str(failed.get("message") or failed.get("reason") or "")
        )
        return WorkloadStatus(
            name=name, namespace=namespace, exists=True, failed_terminal=True, message=message
        )
    if complete:
        return WorkloadStatus(name=name, namespace=namespace, exists=True, complete=True, succeeded=pods)
    return WorkloadStatus(
        name=name,
        namespace=namespace,
        exists=True,
        suspended=suspended,
        active=active,
        ready=pods if running else 0,
    )
