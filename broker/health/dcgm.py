"""dcgm-exporter's metrics -> GPU health signals (whichever path they came by: the member's Prometheus
or the exporter pods through the API server's proxy).

    Sample(name, labels, value)        one series' current value
    signals(samples, before, ignored)  -> (GpuSignals, counters now): what the series say about each GPU

Read (the exporter's names; a metric a site has switched off is absent and says nothing, never zero):
    DCGM_FI_DEV_XID_ERRORS             gauge: the LAST XID of the GPU (0: none). Non-zero: that XID,
                                       fatal or application (broker.health.xid)
    DCGM_EXP_XID_ERRORS_TOTAL{xid}     counter, and
    DCGM_EXP_XID_ERRORS_COUNT{xid}     gauge of XIDs inside the exporter's window: grew since the last
                                       read (`before`): that XID now; the first read only sets the
                                       baseline (the past is not a fault now, and a GPU reset clears no
                                       counter: a value that stays says nothing new)
    DCGM_FI_DEV_ECC_DBE_VOL_TOTAL      volatile double-bit ECC errors (since the last GPU reset): > 0
    DCGM_FI_DEV_ROW_REMAP_FAILURE      1: row remapping failed (the GPU needs service)
    DCGM_FI_DEV_ROW_REMAP_PENDING      1: a remap waits for a GPU reset
Labels: `Hostname` (the node), `gpu` (index), `UUID`, and while a pod holds the GPU `namespace`/`pod`.
A series without Hostname or gpu is skipped. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from broker.health import xid
from broker.health.quarantine import GpuSignal

__all__ = ["DCGM_METRICS", "SOURCE", "Sample", "signals"]

SOURCE = "dcgm"
XID_LAST = "DCGM_FI_DEV_XID_ERRORS"
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
XID_TOTAL = "DCGM_EXP_XID_ERRORS_TOTAL"
DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
REMAP_PENDING = "DCGM_FI_DEV_ROW_REMAP_PENDING"
DCGM_METRICS = (XID_LAST, XID_COUNT, XID_TOTAL, DBE, REMAP_FAILURE, REMAP_PENDING)

Counters = Mapping[tuple[str, str, int, int], float]  # (metric, node, gpu, xid) -> value


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


def _where(labels: Mapping[str, str]) -> tuple[str, int] | None:
    node, gpu = labels.get("Hostname"), labels.get("gpu")
    if not node or gpu is None or not gpu.isdigit():
        return None
    return node, int(gpu)


def _pod(labels: Mapping[str, str]) -> str | None:
    pod, ns = labels.get("pod"), labels.get("namespace")
    return f"{ns}/{pod}" if pod and ns else None


def _xid_signal(
    node: str, gpu: int, code: int, labels: Mapping[str, str], ignored: Iterable[int]
) -> GpuSignal:
    fatal = xid.classify(code, ignored) is xid.XidClass.FATAL
    return GpuSignal(node, gpu, xid.describe(code), SOURCE, code, fatal, _pod(labels), labels.get("UUID"))


def signals(
    samples: Iterable[Sample], before: Counters | None = None, ignored: Iterable[int] = ()
) -> tuple[tuple[GpuSignal, ...], dict[tuple[str, str, int, int], float]]:
    """The GPU signals the samples carry (fatal first per GPU), and the XID counters to pass as `before`
    next time (None: the first read, a baseline only)."""
    ignored = tuple(ignored)
    out: list[GpuSignal] = []
    totals: dict[tuple[str, str, int, int], float] = {}
    for s in samples:
        where = _where(s.labels)
        if where is None:
            continue
        node, gpu = where
        code_label = s.labels.get("xid", "")
        if s.name == XID_LAST and s.value:
            out.append(_xid_signal(node, gpu, int(s.value), s.labels, ignored))
        elif s.name in (XID_COUNT, XID_TOTAL) and code_label.isdigit():
            key = (s.name, node, gpu, int(code_label))
            totals[key] = s.value
            if before is not None and s.value > before.get(key, 0.0):
                out.append(_xid_signal(node, gpu, key[3], s.labels, ignored))
        elif s.name == DBE and s.value > 0:
            out.append(
                _fatal(node, gpu, f"{int(s.value)} double-bit ECC errors since the last GPU reset", s.labels)
            )
        elif s.name == REMAP_FAILURE and s.value > 0:
            out.append(_fatal(node, gpu, "row remapping failed: the GPU needs service", s.labels))
        elif s.name == REMAP_PENDING and s.value > 0:
            out.append(_fatal(node, gpu, "row remapping pending: the GPU needs a reset", s.labels))
    # per GPU the fatal signals first, an XID before a counter's word
    out.sort(key=lambda g: (g.node, g.gpu, not g.fatal, g.xid is None))
    return tuple(out), totals


def _fatal(node: str, gpu: int, reason: str, labels: Mapping[str, str]) -> GpuSignal:
    return GpuSignal(node, gpu, reason, SOURCE, None, True, _pod(labels), labels.get("UUID"))
