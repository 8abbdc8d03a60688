"""dcgm-exporter series -> GPU signals (broker.health.dcgm): one table row per metric rule."""

from __future__ import annotations

import pytest

from broker.health.dcgm import Sample, signals

L = {"gpu": "3", "UUID": "GPU-1", "Hostname": "n0", "modelName": "NVIDIA H100 80GB HBM3"}
POD = {**L, "namespace": "default", "pod": "train-0-abcde", "container": "main"}


def s(name: str, value: float, **labels: str) -> Sample:
    return Sample(name, {**L, **labels}, value)


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        ([s("DCGM_FI_DEV_XID_ERRORS", 0)], []),  # 0: no XID
        ([s("DCGM_FI_DEV_XID_ERRORS", 79)], [("n0", 3, 79, True, "XID 79 (GPU has fallen off the bus)")]),
        ([s("DCGM_FI_DEV_XID_ERRORS", 13)], [("n0", 3, 13, False, "XID 13 (Graphics Engine Exception)")]),
        (
            [s("DCGM_EXP_XID_ERRORS_COUNT", 1, xid="48")],
            [("n0", 3, 48, True, "XID 48 (Double Bit ECC Error)")],
        ),
        ([s("DCGM_EXP_XID_ERRORS_COUNT", 0, xid="48")], []),
        (
            [s("DCGM_EXP_XID_ERRORS_TOTAL", 1, xid="79")],
            [("n0", 3, 79, True, "XID 79 (GPU has fallen off the bus)")],
        ),
        (
            [s("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 2)],
            [("n0", 3, None, True, "2 double-bit ECC errors since the last GPU reset")],
        ),
        ([s("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 0)], []),
        (
            [s("DCGM_FI_DEV_ROW_REMAP_FAILURE", 1)],
            [("n0", 3, None, True, "row remapping failed: the GPU needs service")],
        ),
        (
            [s("DCGM_FI_DEV_ROW_REMAP_PENDING", 1)],
            [("n0", 3, None, True, "row remapping pending: the GPU needs a reset")],
        ),
        ([s("DCGM_FI_DEV_GPU_TEMP", 90)], []),  # not a fault metric
        ([Sample("DCGM_FI_DEV_XID_ERRORS", {"gpu": "3"}, 79)], []),  # no node: skipped
        # an application XID last, a fatal one in the window: the fatal one comes first
        (
            [s("DCGM_FI_DEV_XID_ERRORS", 13), s("DCGM_EXP_XID_ERRORS_COUNT", 1, xid="79")],
            [
                ("n0", 3, 79, True, "XID 79 (GPU has fallen off the bus)"),
                ("n0", 3, 13, False, "XID 13 (Graphics Engine Exception)"),
            ],
        ),
    ],
)
def test_metric_rules(samples: list[Sample], expected: list[tuple[object, ...]]) -> None:
    got, _ = signals(samples, {})
    assert [(g.node, g.gpu, g.xid, g.fatal, g.reason) for g in got] == expected


@pytest.mark.parametrize("metric", ["DCGM_EXP_XID_ERRORS_TOTAL", "DCGM_EXP_XID_ERRORS_COUNT"])
def test_the_xid_counts_signal_only_when_they_grow(metric: str) -> None:
    first, totals = signals([s(metric, 2, xid="79")], None)
    assert first == ()  # the first read is the baseline
    same, totals = signals([s(metric, 2, xid="79")], totals)
    assert same == ()  # still counted (a window, or a counter a GPU reset does not clear): nothing new
    grew, _ = signals([s(metric, 3, xid="79")], totals)
    assert [(g.gpu, g.xid) for g in grew] == [(3, 79)]


def test_the_pod_holding_the_gpu_is_named() -> None:
    (g,), _ = signals([Sample("DCGM_FI_DEV_XID_ERRORS", POD, 79)], {})
    assert g.pod == "default/train-0-abcde" and g.uuid == "GPU-1"


def test_ignored_xids_are_application_errors() -> None:
    (g,), _ = signals([s("DCGM_FI_DEV_XID_ERRORS", 92)], {}, ignored=[92])
    assert not g.fatal
