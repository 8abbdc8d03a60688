"""A thread that wakes the control loop when another writer changes a job (a submit, a cancel).

Owns one blocking read of the store's change stream at a time (XREAD BLOCK: one command a second while
nothing happens, however many jobs exist). It does not consume: the pass reads the changes itself
(JobRecords.catch_up), so a pass run without this thread (tests, run_once) sees the same; after a wake
it waits for the pass to move the cursor (or a short while) before reading again.
"""

from __future__ import annotations

import logging
import threading

from broker.controller.job_records import JobRecords
from broker.controller.work_queue import WorkQueue
from broker.core.errors import StoreError
from broker.core.ports import StateStore

log = logging.getLogger(__name__)

BLOCK_MS = 1000


class ChangeFeed:
    def __init__(self, store: StateStore, records: JobRecords, queue: WorkQueue) -> None:
        self._store = store
        self._records = records
        self._queue = queue
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._records.built:
                self._stop.wait(0.2)
                continue
            cursor = self._records.cursor
            try:
                changes = self._store.read_changes(cursor, block_ms=BLOCK_MS, count=1)
            except StoreError as exc:
                log.debug("change feed: %s", exc)
                self._stop.wait(1.0)
                continue
            if not changes:
                continue
            self._queue.wake()
            for _ in range(50):  # until the pass has read them (or 0.5 s)
                if self._stop.wait(0.01) or self._records.cursor != cursor:
                    break

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="gpufed-change-feed", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=BLOCK_MS / 1000 + 1)
            self._thread = None
