"""Escalation: when repeated GPU faults take the whole node out, as pure rule tables.

In the style of NVSentinel's health-events analyzer: a rule names a pattern of fatal faults inside a
sliding window, and a node matching it is quarantined whole (its remaining GPUs are not trusted
either: a node whose GPUs keep falling off the bus usually has a board, power or NVLink problem).

    EscalationRule(name, scope, faults, window_seconds)
        scope SAME_GPU  `faults` fatal faults on one GPU (it recovered and failed again)
        scope NODE      fatal faults on `faults` different GPUs of one node
    DEFAULT_RULES       repeated-gpu-fault: 2 on one GPU within 24 h; node-many-gpus: 3 GPUs of a
                        node within 1 h
    escalate(history, now, rules) -> {node: reason}   the nodes some rule matches now (first rule wins)

Pure: no I/O, no clock (`now` comes in).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["DEFAULT_RULES", "EscalationRule", "FaultRecord", "RuleScope", "escalate"]


class RuleScope(StrEnum):
    SAME_GPU = "same-gpu"
    NODE = "node"


@dataclass(frozen=True)
class FaultRecord:
    """One fatal fault as it began (a GPU going unhealthy, or changing to another fatal XID)."""

    node: str
    gpu: int
    at: float
    xid: int | None = None


@dataclass(frozen=True)
class EscalationRule:
    name: str
    scope: RuleScope
    faults: int  # SAME_GPU: faults on one GPU; NODE: distinct GPUs of one node that faulted
    window_seconds: float

    def matches(self, faults_on_node: Iterable[FaultRecord], now: float) -> str | None:
        """The reason this rule quarantines the node, or None."""
        recent = [f for f in faults_on_node if now - f.at <= self.window_seconds]
        if self.scope is RuleScope.SAME_GPU:
            per_gpu: dict[int, int] = {}
            for f in recent:
                per_gpu[f.gpu] = per_gpu.get(f.gpu, 0) + 1
            worst = max(per_gpu.items(), key=lambda kv: (kv[1], -kv[0]), default=None)
            if worst is not None and worst[1] >= self.faults:
                return f"rule {self.name}: GPU {worst[0]} faulted {worst[1]} times within {self.window_seconds:g} s"
            return None
        gpus = {f.gpu for f in recent}
        if len(gpus) >= self.faults:
            return f"rule {self.name}: {len(gpus)} GPUs faulted within {self.window_seconds:g} s"
        return None


DEFAULT_RULES: tuple[EscalationRule, ...] = (
    EscalationRule("repeated-gpu-fault", RuleScope.SAME_GPU, faults=2, window_seconds=86400.0),
    EscalationRule("node-many-gpus", RuleScope.NODE, faults=3, window_seconds=3600.0),
)


def escalate(
    history: Iterable[FaultRecord], now: float, rules: Iterable[EscalationRule] = DEFAULT_RULES
) -> Mapping[str, str]:
    """{node: reason} for every node a rule matches at `now` (the first matching rule names it)."""
    by_node: dict[str, list[FaultRecord]] = {}
    for f in history:
        by_node.setdefault(f.node, []).append(f)
    rules = tuple(rules)
    out: dict[str, str] = {}
    for node in sorted(by_node):
        for rule in rules:
            reason = rule.matches(by_node[node], now)
            if reason is not None:
                out[node] = reason
                break
    return out
