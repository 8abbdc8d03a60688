"""Webhook deliveries of job transitions (docs/batch.md "Notifications"), off the control loop.

WebhookNotifier runs in the leader, beside the control loop and never in it:
    a follower thread  reads the fleet-wide event stream from a cursor kept in Redis (P:notify:cursor),
                       asks broker.core.notify which targets want each event, and for each new delivery
                       (SET NX P:notify:seen:<delivery id>, kept 7 days: one delivery per job, attempt,
                       state and target) writes it to P:notify:pending (a hash) before it moves the
                       cursor on, then offers it to the bounded in-memory queue (full: it waits in Redis)
    worker threads     POST each delivery (JSON, X-Gpufed-Signature signed with its tenant's secret,
                       X-Gpufed-Delivery its id) with tenacity's jittered backoff: a network error, a
                       timeout, 429 or 5xx is tried again, up to `attempts`; then it leaves the pending
                       hash, and the job's events say "webhook delivered ..." or "webhook failed ..."
A restart (or a new leader) loads P:notify:pending again, so a delivery accepted is delivered at least
once. A webhook that hangs holds one worker for its timeout per try, never the control loop.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping

import httpx
import redis
from prometheus_client import Counter
from tenacity import RetryError, Retrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from broker.core import notify
from broker.core.errors import StoreError
from broker.core.model import JobEvent, JobState
from broker.core.ports import StateStore

__all__ = ["WebhookNotifier"]

log = logging.getLogger(__name__)

deliveries = Counter(
    "gpufed_webhook_deliveries",
    "Webhook deliveries of job transitions that ended, by outcome (delivered, failed, refused)",
    ["outcome"],
)

_SEEN_TTL_SECONDS = 7 * 86400


class _Retryable(Exception):
    """An answer worth trying again (429, 5xx) or no answer at all."""


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, _Retryable | httpx.TransportError)


class WebhookNotifier:
    def __init__(
        self,
        store: StateStore,
        client: redis.Redis,
        prefix: str,
        tenants: Callable[[], Mapping[str, notify.TenantNotify]],
        *,
        workers: int = 2,
        max_queue: int = 1000,
        timeout: float = 5.0,
        attempts: int = 5,
        backoff_max: float = 30.0,
    ) -> None:
        self._store = store
        self._r = client
        self._p = prefix
        self._tenants = tenants
        self._workers = workers
        self._queue: queue.Queue[str] = queue.Queue(maxsize=max_queue)
        self._timeout = timeout
        self._attempts = attempts
        self._backoff_max = backoff_max
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.delivered = 0
        self.failed = 0

    def _k(self, *parts: str) -> str:
        return ":".join([self._p, "notify", *parts])

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._threads:
            return
        self._stop = stop = threading.Event()  # its own: threads of an earlier start never wake again
        self._queue = queue.Queue(maxsize=self._queue.maxsize)
        names = [("gpufed-notify-follow", self._follow)]
        names += [(f"gpufed-notify-{i}", self._work) for i in range(self._workers)]
        for name, target in names:
            t = threading.Thread(target=target, args=(stop, self._queue), name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, wait: float = 1.0) -> None:
        """Stop following and sending; waits at most `wait` seconds in all (a worker in the middle of a
        slow POST finishes it on its own: at least once allows it, and a deposed leader must not wait)."""
        self._stop.set()
        deadline = time.monotonic() + wait
        for t in self._threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        self._threads = []

    # ------------------------------------------------------------------ the follower

    def _follow(self, stop: threading.Event, work: queue.Queue[str]) -> None:
        requeue_at = 0.0
        while not stop.is_set():
            try:
                if time.monotonic() >= requeue_at:  # what waits in Redis (a restart, a full queue)
                    self._offer_pending(work)
                    requeue_at = time.monotonic() + 5.0
                self._follow_once(work)
            except (StoreError, redis.RedisError) as e:
                log.warning("notifications: the store does not answer (%s); trying again", e)
                stop.wait(1.0)
            except Exception:
                log.exception("notifications: following the event stream failed; trying again")
                stop.wait(1.0)

    def _follow_once(self, work: queue.Queue[str]) -> None:
        cursor_raw = self._r.get(self._k("cursor"))
        if cursor_raw is None:  # first start: from now on, not the whole history
            cursor = self._store.last_event_id()
            self._r.set(self._k("cursor"), cursor)
        else:
            cursor = cursor_raw.decode() if isinstance(cursor_raw, bytes) else str(cursor_raw)
        events = self._store.read_events(None, after=cursor, block_ms=500, count=200)
        if not events:
            return
        tenants = self._tenants()
        for event_id, event in events:
            self._accept(event, tenants, work)
            cursor = event_id
        self._r.set(self._k("cursor"), cursor)

    def _accept(
        self, event: JobEvent, tenants: Mapping[str, notify.TenantNotify], work: queue.Queue[str]
    ) -> None:
        if event.reason.startswith(notify.DELIVERY_PREFIX):
            return
        record = self._store.get_job(event.job_id)
        if record is None:
            return
        tenant = tenants.get(record.request.tenant)
        for url, delivery_id in notify.deliveries(record, event, tenant):
            if not self._r.set(self._k("seen", delivery_id), "1", nx=True, ex=_SEEN_TTL_SECONDS):
                continue  # delivered (or accepted) already
            item = {"url": url, "body": notify.payload(record, event), "tenant": record.request.tenant}
            self._r.hset(self._k("pending"), delivery_id, json.dumps(item))
            try:
                work.put_nowait(delivery_id)
            except queue.Full:
                log.warning("notifications: queue full; %s waits in the store", delivery_id)

    def _offer_pending(self, work: queue.Queue[str]) -> None:
        queued = set(work.queue)
        for raw in self._r.hkeys(self._k("pending")):
            delivery_id = raw.decode() if isinstance(raw, bytes) else str(raw)
            if delivery_id in queued:
                continue
            try:
                work.put_nowait(delivery_id)
            except queue.Full:
                return

    # ------------------------------------------------------------------ the workers

    def _work(self, stop: threading.Event, work: queue.Queue[str]) -> None:
        while not stop.is_set():
            try:
                delivery_id = work.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                self._deliver(delivery_id)
            except (StoreError, redis.RedisError) as e:
                log.warning("notifications: %s kept pending: the store does not answer (%s)", delivery_id, e)
            except Exception:
                log.exception("notifications: delivering %s failed; it stays pending", delivery_id)

    def _deliver(self, delivery_id: str) -> None:
        raw = self._r.hget(self._k("pending"), delivery_id)
        if raw is None:
            return  # another worker (or an earlier leader) finished it
        item = json.loads(raw)
        body = notify.body_bytes(item["body"])
        tenant = self._tenants().get(item["tenant"])
        secret = tenant.secret if tenant is not None else ""
        tries = 0
        outcome: str
        try:
            for attempt in Retrying(
                retry=retry_if_exception(_retryable),
                stop=stop_after_attempt(self._attempts),
                wait=wait_random_exponential(multiplier=0.5, max=self._backoff_max),
                reraise=False,
            ):
                with attempt:
                    tries += 1
                    status = self._post(item["url"], body, secret, delivery_id)
            outcome = f"delivered to {item['url']} (HTTP {status}, {tries} tr{'y' if tries == 1 else 'ies'})"
            self.delivered += 1
            deliveries.labels("delivered").inc()
        except RetryError as e:
            outcome = f"failed to {item['url']} after {tries} tries: {e.last_attempt.exception()}"
            self.failed += 1
            deliveries.labels("failed").inc()
        except httpx.HTTPError as e:
            outcome = f"failed to {item['url']}: {e}"
            self.failed += 1
            deliveries.labels("failed").inc()
        except _Refused as e:
            outcome = f"refused by {item['url']}: {e}"
            self.failed += 1
            deliveries.labels("refused").inc()
        b = item["body"]
        why = f"{notify.DELIVERY_PREFIX}{b['state']} {outcome}"
        self._store.append_event(
            JobEvent(b["id"], time.time(), JobState(b["state"]), b["attempt"], why, b["cluster"])
        )
        self._r.hdel(self._k("pending"), delivery_id)

    def _post(self, url: str, body: bytes, secret: str, delivery_id: str) -> int:
        headers = {"Content-Type": "application/json", "X-Gpufed-Delivery": delivery_id}
        if secret:
            headers[notify.SIGNATURE_HEADER] = notify.signature(secret, int(time.time()), body)
        r = httpx.post(url, content=body, headers=headers, timeout=self._timeout)
        if r.status_code == 429 or r.status_code >= 500:
            raise _Retryable(f"HTTP {r.status_code}")
        if r.status_code >= 400:
            raise _Refused(f"HTTP {r.status_code}")
        return r.status_code


class _Refused(Exception):
    """A 4xx other than 429: the receiver will not take it; not tried again."""
