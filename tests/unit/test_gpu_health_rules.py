"""GPU health rules (broker.health.xid, .escalation, .quarantine): tables per rule.

A 'script' is a list of polls (at seconds, the fatal/application XIDs seen as node:gpu:code) over a
cluster of three 8-GPU nodes (24 GPUs: the default circuit breaker of 20% caps quarantine at 4 GPUs).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from broker.core.gpu_health import NODE_WIDE, GpuState
from broker.health import xid
from broker.health.escalation import DEFAULT_RULES, EscalationRule, FaultRecord, RuleScope, escalate
from broker.health.quarantine import (
    GpuSignal,
    HealthLedger,
    HealthPolicy,
    NoteKind,
    Reading,
    advance,
    breaker_cap,
    view,
)

NODES = {"n0": 8, "n1": 8, "n2": 8}
T0 = 10_000.0


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (13, xid.XidClass.APPLICATION),
        (31, xid.XidClass.APPLICATION),
        (43, xid.XidClass.APPLICATION),
        (45, xid.XidClass.APPLICATION),
        (68, xid.XidClass.APPLICATION),
        (109, xid.XidClass.APPLICATION),
        (48, xid.XidClass.FATAL),
        (63, xid.XidClass.FATAL),
        (64, xid.XidClass.FATAL),
        (74, xid.XidClass.FATAL),
        (79, xid.XidClass.FATAL),
        (94, xid.XidClass.FATAL),
        (95, xid.XidClass.FATAL),
        (119, xid.XidClass.FATAL),
        (999, xid.XidClass.FATAL),  # unknown: a GPU fault, as the device plugin judges
    ],
)
def test_xid_classes_follow_the_device_plugin(code: int, cls: xid.XidClass) -> None:
    assert xid.classify(code) is cls


def test_operator_ignored_xids_are_application_errors() -> None:
    assert xid.classify(92, ignored=[92]) is xid.XidClass.APPLICATION


@pytest.mark.parametrize(
    ("code", "text"),
    [(79, "XID 79 (GPU has fallen off the bus)"), (48, "XID 48 (Double Bit ECC Error)"), (150, "XID 150")],
)
def test_xid_descriptions(code: int, text: str) -> None:
    assert xid.describe(code) == text


def rec(node: str, gpu: int, at: float) -> FaultRecord:
    return FaultRecord(node, gpu, T0 + at, 79)


@pytest.mark.parametrize(
    ("history", "now", "expected"),
    [
        ([], 0, {}),
        ([rec("n0", 3, 0)], 1, {}),  # one fault is the GPU's, not the node's
        ([rec("n0", 3, 0), rec("n0", 3, 900)], 1000, {"n0": "rule repeated-gpu-fault"}),
        ([rec("n0", 3, 0), rec("n0", 3, 900)], 90_000, {}),  # the first fell out of 24 h
        ([rec("n0", 1, 0), rec("n0", 2, 10), rec("n0", 3, 20)], 30, {"n0": "rule node-many-gpus"}),
        ([rec("n0", 1, 0), rec("n0", 2, 10), rec("n1", 3, 20)], 30, {}),  # spread over nodes
        ([rec("n0", 1, 0), rec("n0", 2, 10), rec("n0", 3, 4000)], 4000, {}),  # outside the 1 h window
    ],
)
def test_escalation_rules(history: list[FaultRecord], now: float, expected: dict[str, str]) -> None:
    got = escalate(history, T0 + now, DEFAULT_RULES)
    assert {n: r.split(":")[0] for n, r in got.items()} == expected


def test_first_matching_rule_names_the_node() -> None:
    rules = (EscalationRule("strict", RuleScope.NODE, 1, 60.0), *DEFAULT_RULES)
    assert escalate([rec("n0", 3, 0)], T0 + 1, rules) == {"n0": "rule strict: 1 GPUs faulted within 60 s"}


def sig(spec: str, source: str = "dcgm", pod: str | None = None) -> GpuSignal:
    node, gpu, code = spec.split(":")
    c = int(code)
    fatal = xid.classify(c) is xid.XidClass.FATAL
    return GpuSignal(node, int(gpu), xid.describe(c), source, c, fatal, pod)


def run(
    polls: Sequence[tuple[float, list[str]]],
    policy: HealthPolicy | None = None,
    sources: frozenset[str] | None = None,
) -> tuple[HealthLedger, list[NoteKind]]:
    ledger, kinds = HealthLedger(), []
    for at, specs in polls:
        step = advance(
            ledger,
            Reading(tuple(sig(s) for s in specs), frozenset({"dcgm"}) if sources is None else sources),
            NODES,
            T0 + at,
            policy or HealthPolicy(),
        )
        ledger = step.ledger
        kinds += [n.kind for n in step.notes]
    return ledger, kinds


def states(ledger: HealthLedger) -> dict[tuple[str, int], tuple[str, bool]]:
    return {(f.node, f.gpu): (str(f.state), f.quarantined) for f in view(ledger).faults}


@pytest.mark.parametrize(
    ("polls", "expected", "notes"),
    [
        # a fatal XID: unhealthy and quarantined at once, with its reason
        ([(0, ["n0:3:79"])], {("n0", 3): ("unhealthy", True)}, [NoteKind.FAULT]),
        # an application XID never quarantines by itself; noted once while the gauge holds it
        ([(0, ["n0:3:13"]), (10, ["n0:3:13"])], {}, [NoteKind.APPLICATION_XID]),
        # healthy again: recovering (still out) until recover_after (300 s), then gone
        (
            [(0, ["n0:3:79"]), (10, []), (200, [])],
            {("n0", 3): ("recovering", True)},
            [NoteKind.FAULT, NoteKind.RECOVERING],
        ),
        (
            [(0, ["n0:3:79"]), (10, []), (320, [])],
            {},
            [NoteKind.FAULT, NoteKind.RECOVERING, NoteKind.RECOVERED],
        ),
        # faulting again while recovering is a new fault (and a second one on the GPU: the node would be
        # quarantined, but 8 GPUs are over the breaker's cap of 4)
        (
            [(0, ["n0:3:79"]), (10, []), (20, ["n0:3:48"])],
            {("n0", 3): ("unhealthy", True)},
            [NoteKind.FAULT, NoteKind.RECOVERING, NoteKind.FAULT, NoteKind.BREAKER_OPEN],
        ),
        # the same XID seen again is the same fault, not a new one
        ([(0, ["n0:3:79"]), (10, ["n0:3:79"])], {("n0", 3): ("unhealthy", True)}, [NoteKind.FAULT]),
    ],
)
def test_gpu_states(
    polls: list[tuple[float, list[str]]],
    expected: dict[tuple[str, int], tuple[str, bool]],
    notes: list[NoteKind],
) -> None:
    ledger, kinds = run(polls)
    assert states(ledger) == expected
    assert kinds == notes


def test_a_source_that_did_not_answer_changes_nothing() -> None:
    ledger, _ = run([(0, ["n0:3:79"])])
    step = advance(ledger, Reading((), frozenset()), NODES, T0 + 1000, HealthPolicy())
    assert states(step.ledger) == {("n0", 3): ("unhealthy", True)}
    assert step.notes == ()


def test_recovery_time_is_configurable() -> None:
    ledger, _ = run([(0, ["n0:3:79"]), (10, []), (40, [])], HealthPolicy(recover_after_seconds=30))
    assert states(ledger) == {}


@pytest.mark.parametrize(
    ("total", "share", "cap"), [(24, 0.2, 4), (32, 0.2, 6), (24, 0.5, 12), (3, 0.2, 1), (0, 0.2, 1)]
)
def test_breaker_cap(total: int, share: float, cap: int) -> None:
    assert breaker_cap(total, share) == cap


def test_five_faults_stop_at_the_breaker_cap_and_raise_the_alert() -> None:
    faults = ["n0:0:79", "n0:4:79", "n1:0:79", "n1:4:79", "n2:0:79"]  # two per node at most: no escalation
    polls = [(i * 10.0, faults[: i + 1]) for i in range(5)]
    ledger, kinds = run(polls)
    shown = view(ledger)
    assert sum(f.quarantined for f in shown.faults) == 4
    assert [(f.node, f.gpu) for f in shown.faults if not f.quarantined] == [("n2", 0)]
    assert (
        shown.breaker_open and "cap 4" in shown.breaker_reason and "GPU 0 of node n2" in shown.breaker_reason
    )
    assert kinds.count(NoteKind.BREAKER_OPEN) == 1 and NoteKind.HELD_BACK in kinds
    # a quarantined GPU recovers: the held-back one takes its place, the breaker closes
    ledger, kinds = run([*polls, (60, faults[1:]), (400, faults[1:])])
    assert all(f.quarantined for f in view(ledger).faults) and not view(ledger).breaker_open
    assert NoteKind.BREAKER_CLOSED in kinds


def test_breaker_counts_only_quarantines_inside_its_window() -> None:
    faults = ["n0:0:79", "n0:4:79", "n1:0:79", "n1:4:79"]
    ledger, _ = run([(0, faults), (4000, [*faults, "n2:0:79"])])
    assert all(f.quarantined for f in view(ledger).faults)


def test_repeated_faults_quarantine_the_node() -> None:
    ledger, kinds = run(
        [(0, ["n0:1:79"]), (10, ["n0:1:79", "n0:2:79"]), (20, ["n0:1:79", "n0:2:79", "n0:3:79"])],
        HealthPolicy(breaker_share=0.5),
    )
    assert [q.node for q in view(ledger).nodes] == ["n0"]
    assert "node-many-gpus" in view(ledger).nodes[0].reason
    assert NoteKind.NODE_QUARANTINED in kinds


def test_a_node_quarantine_over_the_cap_is_held_back() -> None:
    ledger, _ = run([(0, ["n0:1:79", "n0:2:79", "n0:3:79"])])  # 8 GPUs > cap 4
    assert view(ledger).nodes == () and view(ledger).breaker_open
    assert "node n0 (rule node-many-gpus" in view(ledger).breaker_reason


def test_a_quarantined_node_is_released_after_its_faults_age_out() -> None:
    policy = HealthPolicy(breaker_share=0.5, recover_after_seconds=10, node_release_after_seconds=100)
    polls = [(0, ["n0:1:79", "n0:2:79", "n0:3:79"]), (10, []), (30, [])]
    ledger, _ = run(polls, policy)
    assert [q.node for q in view(ledger).nodes] == ["n0"]
    ledger, kinds = run([*polls, (200, [])], policy)
    assert view(ledger).nodes == () and NoteKind.NODE_RELEASED in kinds


def test_a_node_wide_signal_counts_all_the_nodes_gpus() -> None:
    cond = GpuSignal("n0", NODE_WIDE, "node condition GpuXidError", "condition")
    step = advance(
        HealthLedger(), Reading((cond,), frozenset({"condition"})), NODES, T0, HealthPolicy(breaker_share=0.5)
    )
    (fault,) = view(step.ledger).faults
    assert fault.quarantined and fault.where == "node n0" and fault.state is GpuState.UNHEALTHY
    step = advance(HealthLedger(), Reading((cond,), frozenset({"condition"})), NODES, T0, HealthPolicy())
    assert not view(step.ledger).faults[0].quarantined  # 8 GPUs > the 20% cap of 24


def test_the_pod_holding_the_gpu_is_kept_and_named() -> None:
    s = GpuSignal("n0", 3, xid.describe(79), "dcgm", 79, True, "default/train-0-abcde")
    step = advance(HealthLedger(), Reading((s,), frozenset({"dcgm"})), NODES, T0, HealthPolicy())
    (note,) = step.notes
    assert (
        note.pod == "default/train-0-abcde"
        and note.text == "GPU 3 of node n0: XID 79 (GPU has fallen off the bus)"
    )
