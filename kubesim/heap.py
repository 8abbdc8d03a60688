"""kubesim serve's heap: what it holds is left out of Python's full garbage collections.

A simulated fleet holds every node, pod, Job and event of its clusters, and at fleet scale that grows by
hundreds of thousands of objects that are never garbage (deleted objects are freed by their reference
counts). Python's full collection scans all of them each time the heap has grown by a quarter: at 20
clusters x 50 nodes with 8,000 Jobs that is several full scans of 100,000-700,000 objects, each holding
Python's lock for up to half a second, which stalls all the clusters' API servers at once and takes CPU
from the broker under test on the same machine (benchmarks/fleet_scale.py). `freeze_periodically`
moves what the heap holds into the permanent generation every FREEZE_SECONDS, after collecting the young
generations (where short-lived cycles such as exceptions and futures die), so full collections scan
only what arrived since. Only `kubesim serve` does this: an in-process Simulation (the tests') leaves
the interpreter's collector as it is.
"""

from __future__ import annotations

import gc
import threading

__all__ = ["FREEZE_SECONDS", "freeze_periodically"]

FREEZE_SECONDS = 2.0


def freeze_now() -> None:
    gc.collect(1)  # young cycles die here, not in the permanent generation
    gc.freeze()


def freeze_periodically(stop: threading.Event, every_s: float = FREEZE_SECONDS) -> threading.Thread:
    """Freeze the heap now and every `every_s` seconds until `stop` is set."""

    def run() -> None:
        freeze_now()
        while not stop.wait(every_s):
            freeze_now()

    thread = threading.Thread(target=run, name="kubesim-heap", daemon=True)
    thread.start()
    return thread
