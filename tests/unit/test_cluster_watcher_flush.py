"""A watcher's flush publishes every event it folded, whoever folded it first.

The poller's node table reads the watcher's snapshot every 5 s, which folds the events of the batch in
flight into the index. The flush that follows must still publish them: before, it found nothing dirty
and skipped, so the summary carrying those events waited for the member's next change or heartbeat
(1-2 s late for 1 event in 25 under churn: benchmarks/capacity_sync.py's step at +1 s)."""

from __future__ import annotations

from adapters.cluster_watcher import ClusterWatcher
from adapters.kube_informer import NODES, PODS, SYNCED
from broker.core.model import ClusterTraits
from tests.unit.k8s_builders import gpu_pod, node
from tests.unit.test_probe_scheduler import ScriptedRest


def synced_watcher(published: list[int]) -> ClusterWatcher:
    watcher: ClusterWatcher

    def on_change() -> None:
        published.append(watcher.summary(ClusterTraits(name="member")).products[0].allocated)

    watcher = ClusterWatcher(
        "member", ScriptedRest(timeout=False), resources=(NODES, PODS), on_change=on_change
    )
    for resource, items in (("nodes", [node()]), ("pods", [])):
        watcher.replace(resource, items, "1")
        watcher.report(resource, SYNCED)
    watcher.flush_due()
    return watcher


def test_an_event_folded_by_a_snapshot_is_still_published_by_the_next_flush() -> None:
    published: list[int] = []
    watcher = synced_watcher(published)
    assert published == [0]
    watcher.apply("pods", "ADDED", gpu_pod(2, "a"), "2")
    watcher.snapshot()  # the node table's read, inside the batch's interval
    watcher.flush_due()
    assert published == [0, 2]


def test_a_flush_with_nothing_new_publishes_nothing() -> None:
    published: list[int] = []
    watcher = synced_watcher(published)
    watcher.snapshot()
    watcher._wake.set()  # a poke with no event behind it (a bookmark, a probe)
    watcher.flush_due()
    assert published == [0]
