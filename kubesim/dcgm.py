"""What NVIDIA's dcgm-exporter serves for one GPU node: its series (real metric names, types and labels)
and their Prometheus text exposition (format 0.0.4).

Owns the metric catalogue (`METRICS`: name, type, help, as dcgm-exporter's counters CSV names them) and
`node_series(gpus, node, now)`, which builds a node's series on request from `ClusterGpus` (faults and
the pod mapping): nothing is kept per GPU that never had an XID, and nothing is computed per scrape
beyond the one node. A metric the site switched off (fleet `dcgmExporter.exclude`, per cluster or pool)
is absent.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from kubesim.gpuhealth import ClusterGpus, GpuNode, GpuState, gpu_node, gpu_uuid, pci_bus_id
from kubesim.store import Obj

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
EXPORTER_PORT = 9400
EXPORTER_PORT_NAME = "metrics"
EXPORTER_NAMESPACE = "gpu-operator"
EXPORTER_APP = "nvidia-dcgm-exporter"
WINDOW_LABEL = "window_size_in_ms"

# (name, Prometheus type, help) in the order dcgm-exporter writes them.
METRICS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "Whether remapping of rows is pending"),
    (
        "DCGM_EXP_XID_ERRORS_COUNT",
        "gauge",
        "Count of XID Errors within user-specified time window (see xid-count-window-size param).",
    ),
    ("DCGM_EXP_XID_ERRORS_TOTAL", "counter", "Total XID errors observed since exporter start."),
)
METRIC_NAMES = frozenset(m[0] for m in METRICS)

Series = tuple[str, list[tuple[str, str]], str]  # (metric name, labels in order, value)

_IDLE = GpuState()


def _values(
    name: str, s: GpuState, held: bool, index: int, now: float, window: float
) -> Iterator[tuple[list[tuple[str, str]], str]]:
    """(extra labels, value) of one metric for one GPU; nothing for an XID metric with no XID."""
    if name == "DCGM_FI_DEV_GPU_TEMP":
        yield [], str((62 if held else 33) + index % 7)
    elif name == "DCGM_FI_DEV_GPU_UTIL":
        yield [], "100" if held and s.unhealthy_since is None else "0"
    elif name == "DCGM_FI_DEV_XID_ERRORS":
        yield [], str(s.last_xid)
    elif name == "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL":
        yield [], str(s.sbe)
    elif name == "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL":
        yield [], str(s.dbe)
    elif name == "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS":
        yield [], str(s.uncorrectable_rows)
    elif name == "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS":
        yield [], "0"
    elif name == "DCGM_FI_DEV_ROW_REMAP_FAILURE":
        yield [], str(s.remap_failure)
    elif name == "DCGM_FI_DEV_ROW_REMAP_PENDING":
        yield [], str(s.remap_pending)
    elif name == "DCGM_EXP_XID_ERRORS_COUNT":
        for code, n in sorted(s.window_counts(now, window).items()):
            yield [("xid", str(code)), (WINDOW_LABEL, str(int(window * 1000)))], str(n)
    elif name == "DCGM_EXP_XID_ERRORS_TOTAL":
        for code, n in sorted(s.xid_totals.items()):
            yield [("xid", str(code))], str(n)


def node_series(
    gpus: ClusterGpus, node: Obj, now: float, names: Iterable[str] | None = None
) -> Iterator[Series]:
    """A node's dcgm-exporter series (only `names` when given), metric by metric, GPU by GPU."""
    info = gpu_node(node)
    if info is None:
        return
    yield from _series(gpus, info, now, names)


def _series(gpus: ClusterGpus, info: GpuNode, now: float, names: Iterable[str] | None) -> Iterator[Series]:
    off = gpus.excluded_for(info.pool)
    wanted = set(names) if names is not None else None
    holders = gpus.holders(info.name)
    base = []
    for i in range(info.count):
        labels = [
            ("gpu", str(i)),
            ("UUID", gpu_uuid(gpus.cluster, info.name, i)),
            ("pci_bus_id", pci_bus_id(i)),
            ("device", f"nvidia{i}"),
            ("modelName", info.model_name),
            ("Hostname", info.name),
            ("DCGM_FI_DRIVER_VERSION", gpus.driver_version),
        ]
        holder = holders.get(i)
        if holder is not None:
            labels += [("container", holder.container), ("namespace", holder.namespace), ("pod", holder.pod)]
        base.append((labels, gpus.states.get((info.name, i), _IDLE), holder is not None))
    for name, _, _ in METRICS:
        if name in off or (wanted is not None and name not in wanted):
            continue
        for i, (labels, state, held) in enumerate(base):
            for extra, value in _values(name, state, held, i, now, gpus.xid_window_seconds):
                yield name, labels + extra, value


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_series(name: str, labels: list[tuple[str, str]], value: str) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    return f"{name}{{{inner}}} {value}\n"


def exposition(series: Iterable[Series]) -> bytes:
    """The text format: # HELP and # TYPE once before each metric's first series."""
    meta = {m[0]: m for m in METRICS}
    out: list[str] = []
    seen: set[str] = set()
    for name, labels, value in series:
        if name not in seen:
            seen.add(name)
            _, mtype, help_text = meta.get(name, (name, "untyped", name))
            out.append(f"# HELP {name} {help_text}\n# TYPE {name} {mtype}\n")
        out.append(format_series(name, labels, value))
    return "".join(out).encode()
