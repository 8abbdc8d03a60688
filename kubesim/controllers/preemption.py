"""Default preemption of the simulated kube-scheduler: which lower-priority pods to evict, on which node.

Owns the victim choice (pure over what it is given; the Scheduler does the writes):
- `eligible(pod, priority, terminating_lower_on_nominated)`: PodEligibleToPreemptOthers: not with
  preemptionPolicy Never, and not while the victims of an earlier preemption on its nominated node are
  still terminating.
- `select_victims(...)`: SelectVictimsOnNode: on a node that fails the pod only for resources, remove every
  running pod of lower priority; if the pod then fits, add them back most important first (higher
  priority, then earlier start) while it still fits; what is left are the victims.
- `pick_node(candidates)`: pickOneNodeForPreemption: the lowest highest-victim priority, then the lowest sum
  of victim priorities, then the fewest victims, then the latest start of the highest-priority victims,
  then the first node by name. PodDisruptionBudgets are not weighed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kubesim.controllers.pods import Requests
from kubesim.store import Obj

_OFFSET = 2**31  # the real scheduler adds MaxInt32 + 1 to each priority before summing

FitCheck = Callable[[Requests], list[str]]  # used -> fit_reasons


@dataclass(slots=True)
class Victim:
    pod: Obj
    priority: int
    start: str  # status.startTime ("" when unknown)
    requests: Requests  # including the pod slot ("pods": 1)


@dataclass(slots=True)
class Candidate:
    node: str
    victims: list[Victim]


def resource_only(reasons: list[str]) -> bool:
    """Whether removing pods could help: every reason is a resource shortage."""
    return bool(reasons) and all(r.startswith("Insufficient ") or r == "Too many pods" for r in reasons)


def eligible(pod: Obj, terminating_lower_on_nominated: bool) -> bool:
    spec = pod.get("spec") or {}
    if spec.get("preemptionPolicy") == "Never":
        return False
    nominated = (pod.get("status") or {}).get("nominatedNodeName")
    return not (nominated and terminating_lower_on_nominated)


def _minus(used: Requests, victims: list[Victim]) -> Requests:
    out = dict(used)
    for v in victims:
        for r, q in v.requests.items():
            out[r] = out.get(r, 0.0) - q
    return out


def select_victims(
    node: str, used: Requests, running: list[Victim], priority: int, fits: FitCheck
) -> Candidate | None:
    """The fewest, least important pods of lower priority whose removal lets the pod fit, or None."""
    lower = [v for v in running if v.priority < priority]
    if not lower:
        return None
    if fits(_minus(used, lower)):
        return None
    # reprieve the most important first: higher priority, then the one that started earlier
    order = sorted(lower, key=lambda v: (-v.priority, v.start or "~"))
    victims = list(order)
    for v in order:
        trial = [x for x in victims if x is not v]
        if not fits(_minus(used, trial)):
            victims = trial
    return Candidate(node, victims) if victims else None


def pick_node(candidates: list[Candidate]) -> Candidate:
    def key(c: Candidate) -> tuple[int, int, int, str, str]:
        top = max(v.priority for v in c.victims)
        top_start = min((v.start for v in c.victims if v.priority == top), default="")
        # latest start first: invert by sorting on the negated string order via a tuple trick below
        return (
            top,
            sum(v.priority + _OFFSET for v in c.victims),
            len(c.victims),
            _inverted(top_start),
            c.node,
        )

    return min(candidates, key=key)


def _inverted(ts: str) -> str:
    """A key that sorts later RFC 3339 timestamps first (digits complemented)."""
    return "".join(chr(ord("9") - (ord(ch) - ord("0"))) if ch.isdigit() else ch for ch in ts)
