"""Health agents' node conditions and taints -> GPU health signals (node-wide: they name no GPU).

NVSentinel's monitors, node-problem-detector rules and cloud node-monitoring agents report a broken GPU
node as a condition (type + status) or a taint. Each configured condition type in its bad status, and
each configured taint key of effect NoSchedule or NoExecute, is a fatal node-wide signal whose reason
quotes the agent ("node condition GpuXidError=True (XID 79 on GPU 3)"). A node whose conditions are
all good is healthy as far as these sources know.

    node_signals(name, node, conditions, taints) -> tuple[GpuSignal, ...]

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from broker.core.gpu_health import NODE_WIDE
from broker.health.quarantine import GpuSignal

__all__ = ["CONDITION", "TAINT", "node_signals"]

CONDITION = "condition"
TAINT = "taint"
_BLOCKING = frozenset({"NoSchedule", "NoExecute"})


def node_signals(
    name: str, node: Mapping[str, Any], conditions: Iterable[tuple[str, str]], taints: Iterable[str]
) -> tuple[GpuSignal, ...]:
    """The node-wide signals of one node object: `conditions` are (type, bad status) pairs, `taints` keys."""
    bad = dict(conditions)
    keys = frozenset(taints)
    out: list[GpuSignal] = []
    for c in (node.get("status") or {}).get("conditions") or ():
        if not isinstance(c, Mapping):
            continue
        ctype, status = str(c.get("type") or ""), str(c.get("status") or "")
        if ctype in bad and status == bad[ctype]:
            why = c.get("message") or c.get("reason")
            reason = f"node condition {ctype}={status}" + (f" ({str(why)[:200]})" if why else "")
            out.append(GpuSignal(name, NODE_WIDE, reason, CONDITION))
    for t in (node.get("spec") or {}).get("taints") or ():
        if isinstance(t, Mapping) and t.get("key") in keys and t.get("effect") in _BLOCKING:
            value = f"={t['value']}" if t.get("value") else ""
            reason = f"node taint {t['key']}{value}:{t['effect']}"
            out.append(GpuSignal(name, NODE_WIDE, reason, TAINT))
    return tuple(out)
