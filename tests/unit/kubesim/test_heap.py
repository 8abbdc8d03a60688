"""kubesim serve's heap freezing (kubesim/heap.py): what the simulator holds leaves the full
collections, and a young reference cycle that is already garbage is collected first, not kept forever.
Run in a subprocess: freezing this test process's heap would change the collector for every test after."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROBE = textwrap.dedent(
    """
    import gc, threading, time, weakref
    from kubesim.heap import freeze_periodically

    class Node:
        pass

    held = [{"kind": "Pod", "metadata": {"name": f"p{i}"}} for i in range(1000)]  # what a fleet holds
    cycle = Node()
    cycle.me = cycle  # garbage only the collector can free
    gone = weakref.ref(cycle)
    del cycle
    stop = threading.Event()
    thread = freeze_periodically(stop, every_s=0.01)
    deadline = time.monotonic() + 30
    while gc.get_freeze_count() < len(held) and time.monotonic() < deadline:
        time.sleep(0.01)  # polling the frozen count, with a deadline
    stop.set()
    thread.join()
    print(gone() is None, gc.get_freeze_count() >= len(held))
    """
)


def test_the_heap_is_frozen_after_young_garbage_cycles_are_collected() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split() == ["True", "True"]
