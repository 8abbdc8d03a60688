"""XID errors: which are the application's fault and which are the GPU's, and how they read.

NVIDIA's k8s-device-plugin marks a GPU unhealthy on every XID except the ones it skips as application
errors (13, 31, 43, 45, 68, 109: the consequence of a program's own fault, such as a bad memory access
or a killed context); gpufed judges the same way by default, so the broker and the member's own
allocatable agree. An operator may add codes to skip (`ignoredXids`). The descriptions follow NVIDIA's
XID catalog (docs.nvidia.com/deploy/xid-errors).

    classify(code, ignored=())  -> XidClass.APPLICATION | XidClass.FATAL
    describe(code)              -> "XID 79 (GPU has fallen off the bus)"

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

__all__ = ["APPLICATION_XIDS", "CATALOG", "XidClass", "classify", "describe"]

# The device plugin's skip list (applicationErrorXids): never a GPU fault by themselves.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})

CATALOG: dict[int, str] = {
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    32: "Invalid or corrupted push buffer stream",
    38: "Driver firmware error",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double Bit ECC Error",
    56: "Display Engine error",
    57: "Error programming video memory interface",
    58: "Unstable video memory interface detected",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    68: "Video processor exception",
    69: "Graphics Engine class error",
    74: "NVLink Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    109: "Context Switch Timeout Error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
    140: "Unrecovered ECC Error",
}


class XidClass(StrEnum):
    APPLICATION = "application"  # the program's fault: the GPU stays usable
    FATAL = "fatal"  # the GPU's fault: out of capacity until it reports healthy again


def classify(code: int, ignored: Iterable[int] = ()) -> XidClass:
    """APPLICATION for the device plugin's skip list and the operator's `ignored` codes, else FATAL
    (as the device plugin judges: an XID it does not know is a GPU fault). 0 (no XID) is not a fault
    and must not be classified: callers drop it first."""
    if code in APPLICATION_XIDS or code in frozenset(ignored):
        return XidClass.APPLICATION
    return XidClass.FATAL


def describe(code: int) -> str:
    """'XID 79 (GPU has fallen off the bus)'; a code outside the catalog is 'XID 150'."""
    text = CATALOG.get(code)
    return f"XID {code} ({text})" if text else f"XID {code}"
