"""The goodput benchmark's simulation (benchmarks/goodput.py), run tiny: same draw in both modes, the
health-aware run loses less work, never starts a job on a quarantined GPU, and ignores application XIDs."""

from __future__ import annotations

import pytest

from benchmarks.goodput import (
    GPUS_PER_NODE,
    META_GPU_FAULTS_PER_GPU_SECOND,
    HealthAware,
    Params,
    Simulation,
    simulate,
)

# 12 hours of the demo-shaped fleet at 1 x scale (64 GPUs), faults 1,500 x Meta's rate: about a dozen
TINY = Params(scale=1, hours=12, seed=7, rate_multiplier=1500, repair_hours=6)


def test_the_fault_rate_is_metas_llama3_figure() -> None:
    per_1000_node_days = META_GPU_FAULTS_PER_GPU_SECOND * 86400 * GPUS_PER_NODE * 1000
    assert per_1000_node_days == pytest.approx(2.22, abs=0.01)


def test_both_modes_replay_the_same_week_and_health_aware_loses_less_work() -> None:
    aware, blind = simulate(TINY, aware=True), simulate(TINY, aware=False)
    assert aware.fatal_faults == blind.fatal_faults >= 5
    assert aware.app_xids == blind.app_xids > 0
    lost_aware, lost_blind = aware.allocated - aware.useful, blind.allocated - blind.useful
    assert lost_aware < lost_blind
    assert aware.goodput > blind.goodput
    assert blind.broken_starts > aware.broken_starts, "blind keeps placing jobs on the broken GPU"
    assert aware.quarantined_starts == 0, "no job starts on a GPU the broker quarantined"
    assert simulate(TINY, aware=True) == aware, "a seed replays exactly"


def test_an_application_xid_never_quarantines_a_gpu_and_a_fatal_one_does() -> None:
    sim = Simulation(Params(scale=1, hours=1, seed=1, rate_multiplier=0), aware=True)
    strategy = sim.strategy
    assert isinstance(strategy, HealthAware)
    node = sim.nodes[0]
    node.app[2] = 13
    strategy.poll(sim, node.cluster, 100.0)
    assert strategy.usable(0, 2)
    node.broken[5] = 79
    strategy.poll(sim, node.cluster, 200.0)
    assert not strategy.usable(0, 5) and strategy.usable(0, 4)
