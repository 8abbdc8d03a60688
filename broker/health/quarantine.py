"""The per-cluster GPU health ledger: signals in, quarantine, recovery and the circuit breaker out.

    GpuSignal         what one source says at one read about one GPU (or a whole node) that is not
                      healthy: a fatal fault, or an application XID (noted, never quarantines)
    Reading           the signals of one poll and the sources that answered it: a GPU that an answering
                      source no longer flags is healthy as far as it knows; a source that did not answer
                      changes nothing (no data is not "healthy")
    HealthPolicy      recover_after_seconds (healthy this long before it counts again), the circuit
                      breaker (breaker_share of the cluster's GPUs inside breaker_window_seconds), the
                      escalation rules, node_release_after_seconds
    advance(ledger, reading, gpus_per_node, now, policy) -> Step(ledger, notes)
                      one poll's worth of change: new faults, recoveries, node quarantines, the breaker
    view(ledger)      -> ClusterGpuHealth, what the poller publishes

States of a GPU: healthy (no entry) -> unhealthy (a fatal signal) -> recovering (every source that
answered says healthy; still out of capacity) -> healthy after recover_after_seconds; a fatal signal
while recovering makes it unhealthy again (a new fault, counted by the escalation rules).

The circuit breaker (after NVSentinel's): quarantines that began inside the window, counted in GPUs (a
quarantined node counts all its GPUs), may not exceed max(1, floor(breaker_share x the cluster's GPUs)).
A fault beyond the cap is still shown (state unhealthy) but not quarantined (`quarantined: False`,
still counted free, nobody moved for it), and the breaker is open (an alert) while any fault is held
back; held-back faults are quarantined as soon as the cap allows. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from broker.core.gpu_health import NODE_WIDE, ClusterGpuHealth, GpuFault, GpuState, NodeQuarantine
from broker.health.escalation import DEFAULT_RULES, EscalationRule, FaultRecord, escalate

__all__ = [
    "GpuSignal",
    "HealthLedger",
    "HealthNote",
    "HealthPolicy",
    "NoteKind",
    "Reading",
    "Step",
    "advance",
    "breaker_cap",
    "view",
]

Key = tuple[str, int]


@dataclass(frozen=True)
class GpuSignal:
    """One source's word on one GPU (gpu=NODE_WIDE: the whole node) that is not healthy."""

    node: str
    gpu: int
    reason: str  # "XID 79 (GPU has fallen off the bus)"
    source: str  # dcgm | prometheus | condition | taint | dra
    xid: int | None = None
    fatal: bool = True  # False: an application XID, noted once, never quarantines
    pod: str | None = None  # namespace/name holding the GPU (dcgm-exporter's pod mapping)
    uuid: str | None = None


@dataclass(frozen=True)
class Reading:
    signals: tuple[GpuSignal, ...] = ()
    sources: frozenset[str] = frozenset()  # the sources that answered this poll
    silent_nodes: frozenset[str] = frozenset()  # nodes an answering source could not read (no news)


@dataclass(frozen=True)
class HealthPolicy:
    recover_after_seconds: float = 300.0
    breaker_share: float = 0.2
    breaker_window_seconds: float = 3600.0
    node_release_after_seconds: float = 3600.0
    rules: tuple[EscalationRule, ...] = DEFAULT_RULES


class NoteKind(StrEnum):
    FAULT = "fault"  # a GPU went unhealthy (or to another fatal XID)
    HELD_BACK = "held-back"  # ... but the circuit breaker kept it from quarantine
    APPLICATION_XID = "application-xid"
    RECOVERING = "recovering"
    RECOVERED = "recovered"
    NODE_QUARANTINED = "node-quarantined"
    NODE_RELEASED = "node-released"
    BREAKER_OPEN = "breaker-open"
    BREAKER_CLOSED = "breaker-closed"


@dataclass(frozen=True)
class HealthNote:
    """Something that changed in this poll, worded for an event or a log line."""

    kind: NoteKind
    node: str
    gpu: int
    text: str
    xid: int | None = None
    pod: str | None = None


@dataclass(frozen=True)
class _Entry:
    fault: GpuFault
    quarantined_at: float | None = None


@dataclass(frozen=True)
class HealthLedger:
    """One cluster's GPU health between polls (kept by its poller; rebuilt from the sources on restart)."""

    entries: Mapping[Key, _Entry] = field(default_factory=dict)
    nodes: Mapping[str, tuple[NodeQuarantine, float]] = field(default_factory=dict)  # (q, quarantined at)
    history: tuple[FaultRecord, ...] = ()
    app_seen: Mapping[Key, int] = field(default_factory=dict)  # last application XID noted per GPU
    breaker_open: bool = False
    breaker_reason: str = ""
    released: Mapping[str, float] = field(default_factory=dict)  # node -> when its quarantine was lifted


@dataclass(frozen=True)
class Step:
    ledger: HealthLedger
    notes: tuple[HealthNote, ...] = ()


def breaker_cap(total_gpus: int, share: float) -> int:
    """How many GPUs may be quarantined inside one window: floor(share x total), at least 1."""
    return max(1, math.floor(share * total_gpus + 1e-9))


def _strongest(signals: Iterable[GpuSignal]) -> tuple[dict[Key, GpuSignal], dict[Key, GpuSignal]]:
    fatal: dict[Key, GpuSignal] = {}
    app: dict[Key, GpuSignal] = {}
    for s in signals:
        into = fatal if s.fatal else app
        into.setdefault((s.node, s.gpu), s)
    return fatal, app


def advance(
    ledger: HealthLedger,
    reading: Reading,
    gpus_per_node: Mapping[str, int],
    now: float,
    policy: HealthPolicy = HealthPolicy(),
) -> Step:
    """The ledger after one poll's reading, and what changed (see the module docstring)."""
    fatal, app = _strongest(reading.signals)
    notes: list[HealthNote] = []
    entries: dict[Key, _Entry] = {}
    history = list(ledger.history)
    fresh: list[Key] = []

    for key, sig in sorted(fatal.items()):
        old = ledger.entries.get(key)
        changed = old is None or old.fault.state is not GpuState.UNHEALTHY or old.fault.xid != sig.xid
        if not changed and old is not None:
            pod = old.fault.pod or sig.pod
            entries[key] = replace(old, fault=replace(old.fault, pod=pod)) if pod != old.fault.pod else old
            continue
        fault = GpuFault(
            node=sig.node, gpu=sig.gpu, state=GpuState.UNHEALTHY, reason=sig.reason, since=now,
            source=sig.source, xid=sig.xid, quarantined=old.fault.quarantined if old else False,
            pod=sig.pod or (old.fault.pod if old else None), uuid=sig.uuid,
        )  # fmt: skip
        entries[key] = _Entry(fault, old.quarantined_at if old else None)
        history.append(FaultRecord(sig.node, sig.gpu, now, sig.xid))
        fresh.append(key)

    for key, old in sorted(ledger.entries.items()):
        if key in entries:
            continue
        if old.fault.source not in reading.sources or key[0] in reading.silent_nodes:
            entries[key] = old  # its source did not answer (for that node): nothing is known
            continue
        where = old.fault.where
        if old.fault.state is GpuState.UNHEALTHY:
            entries[key] = replace(old, fault=replace(old.fault, state=GpuState.RECOVERING, since=now))
            notes.append(HealthNote(NoteKind.RECOVERING, key[0], key[1], f"{where} reports healthy again"))
        elif now - old.fault.since >= policy.recover_after_seconds:
            notes.append(
                HealthNote(
                    NoteKind.RECOVERED, key[0], key[1],
                    f"{where} back in service: healthy for {policy.recover_after_seconds:g} s",
                )
            )  # fmt: skip
        else:
            entries[key] = old

    app_seen = dict(ledger.app_seen)
    for key, sig in sorted(app.items()):
        if app_seen.get(key) != sig.xid and key not in entries:
            notes.append(
                HealthNote(
                    NoteKind.APPLICATION_XID, key[0], key[1],
                    f"{sig.reason} on GPU {key[1]} of node {key[0]}: an application error, the GPU stays in service",
                    sig.xid, sig.pod,
                )
            )  # fmt: skip
        app_seen[key] = sig.xid or 0
    for key in list(app_seen):
        if key not in app:
            del app_seen[key]

    longest = max([policy.breaker_window_seconds, *(r.window_seconds for r in policy.rules)])
    history = [f for f in history if now - f.at <= longest]
    return _quarantine(ledger, entries, history, app_seen, fresh, notes, gpus_per_node, now, policy)


def _quarantine(
    ledger: HealthLedger,
    entries: dict[Key, _Entry],
    history: list[FaultRecord],
    app_seen: dict[Key, int],
    fresh: list[Key],
    notes: list[HealthNote],
    gpus_per_node: Mapping[str, int],
    now: float,
    policy: HealthPolicy,
) -> Step:
    total = sum(gpus_per_node.values())
    cap = breaker_cap(total, policy.breaker_share)
    window = policy.breaker_window_seconds

    def width(key: Key) -> int:
        return gpus_per_node.get(key[0], 1) if key[1] == NODE_WIDE else 1

    nodes: dict[str, tuple[NodeQuarantine, float]] = {}
    released = {n: at for n, at in ledger.released.items() if any(f.node == n for f in history)}
    for node, (q, at) in ledger.nodes.items():
        last = max((f.at for f in history if f.node == node), default=q.since)
        if any(k[0] == node for k in entries) or now - last < policy.node_release_after_seconds:
            nodes[node] = (q, at)
        else:
            released[node] = now  # the faults that quarantined it do not quarantine it again
            notes.append(HealthNote(NoteKind.NODE_RELEASED, node, NODE_WIDE, f"node {node} back in service"))

    def in_window() -> int:
        used = sum(gpus_per_node.get(n, 0) for n, (_, at) in nodes.items() if now - at <= window)
        for key, e in entries.items():
            recent = e.quarantined_at is not None and now - e.quarantined_at <= window
            if e.fault.quarantined and recent and key[0] not in nodes:
                used += width(key)
        return used

    held: list[str] = []
    for key in fresh:  # a new fault on a GPU still out from an earlier one
        e = entries[key]
        if e.fault.quarantined:
            notes.append(
                HealthNote(
                    NoteKind.FAULT,
                    key[0],
                    key[1],
                    f"{e.fault.where}: {e.fault.reason}",
                    e.fault.xid,
                    e.fault.pod,
                )
            )
    for key in sorted(k for k, e in entries.items() if not e.fault.quarantined):
        e = entries[key]
        if in_window() + width(key) <= cap:
            entries[key] = _Entry(replace(e.fault, quarantined=True), now)
            if key in fresh:
                notes.append(
                    HealthNote(
                        NoteKind.FAULT,
                        key[0],
                        key[1],
                        f"{e.fault.where}: {e.fault.reason}",
                        e.fault.xid,
                        e.fault.pod,
                    )
                )
        else:
            held.append(f"{e.fault.where} ({e.fault.reason})")
            if key in fresh:
                notes.append(
                    HealthNote(
                        NoteKind.HELD_BACK, key[0], key[1],
                        f"{e.fault.where}: {e.fault.reason}; not quarantined: circuit breaker at its cap of {cap} GPUs",
                        e.fault.xid, e.fault.pod,
                    )
                )  # fmt: skip

    since_release = [f for f in history if f.at > released.get(f.node, float("-inf"))]
    for node, reason in escalate(since_release, now, policy.rules).items():
        if node in nodes:
            continue
        extra = gpus_per_node.get(node, 0) - sum(
            1 for k, e in entries.items() if k[0] == node and e.fault.quarantined and k[1] != NODE_WIDE
        )
        if in_window() + max(0, extra) <= cap:
            nodes[node] = (NodeQuarantine(node, reason, now), now)
            notes.append(
                HealthNote(NoteKind.NODE_QUARANTINED, node, NODE_WIDE, f"node {node} quarantined: {reason}")
            )
        else:
            held.append(f"node {node} ({reason})")

    breaker_reason = ""
    if held:
        breaker_reason = (
            f"circuit breaker open: {in_window()} of {total} GPUs quarantined within {window:g} s "
            f"(cap {cap}, {policy.breaker_share:.0%}); held back: {', '.join(held)}"
        )
    if held and not ledger.breaker_open:
        notes.append(HealthNote(NoteKind.BREAKER_OPEN, "", NODE_WIDE, breaker_reason))
    if not held and ledger.breaker_open:
        notes.append(HealthNote(NoteKind.BREAKER_CLOSED, "", NODE_WIDE, "circuit breaker closed"))
    out = HealthLedger(entries, nodes, tuple(history), app_seen, bool(held), breaker_reason, released)
    return Step(out, tuple(notes))


def view(
    ledger: HealthLedger, policy: HealthPolicy = HealthPolicy(), now: float | None = None
) -> ClusterGpuHealth:
    """What the poller publishes: the faults by node and GPU, quarantined nodes, the breaker and the
    fatal faults inside the breaker window (all of the kept history when `now` is not given)."""
    recent = [f for f in ledger.history if now is None or now - f.at <= policy.breaker_window_seconds]
    return ClusterGpuHealth(
        faults=tuple(e.fault for _, e in sorted(ledger.entries.items())),
        nodes=tuple(q for _, (q, _) in sorted(ledger.nodes.items())),
        breaker_open=ledger.breaker_open,
        breaker_reason=ledger.breaker_reason,
        recent_faults=len(recent),
        observed=True,
    )
