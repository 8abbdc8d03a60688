"""Stopping the poller actors within a bounded time, whatever happened before (issue 21, case 10).

A broker's shutdown must finish well inside drainTimeoutSeconds. Each step here has its own short
timeout, and a step that overruns is given up (the actor is killed instead), never waited out:
    1. every actor (supervisor and shards) is asked to stop at once; they get STOP_SECONDS together;
    2. every actor is killed (no restart), by the handle this broker holds;
    3. a shard the supervisor made anew (a handle this broker does not hold) is looked up by name,
       each lookup bounded by LOOKUP_SECONDS (ray.get_actor has no timeout of its own and has been
       seen to hang after a Redis loss);
    4. Ray is shut down, if this broker started it, bounded by SHUTDOWN_SECONDS.
Whatever is left when a step gives up goes with the process (the reaper, adapters/reaper.py).

    bounded(fn, seconds, what)          run fn in a daemon thread; its result, or None after `seconds`
    stop_actors(supervisor, shards, names, shutdown)   the steps above
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

log = logging.getLogger(__name__)

STOP_SECONDS = 3.0
LOOKUP_SECONDS = 1.0
KILL_SECONDS = 1.0
SHUTDOWN_SECONDS = 5.0

T = TypeVar("T")


def bounded(fn: Callable[[], T], seconds: float, what: str) -> T | None:
    """fn() in a daemon thread: its result, or None (logged) when it raised or took over `seconds`."""
    box: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            box.append(fn())
        except BaseException as exc:  # reported below, the caller goes on either way
            failure.append(exc)

    thread = threading.Thread(target=run, name=f"gpufed-stop-{what}", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        log.warning("stopping the pollers: %s took over %.0f s; given up", what, seconds)
        return None
    if failure:
        log.debug("stopping the pollers: %s failed: %s", what, failure[0])
        return None
    return box[0] if box else None


def stop_actors(supervisor: Any, shards: Sequence[Any], names: Sequence[str], shutdown: bool) -> None:
    """Stop the supervisor and the shards (handles held) and any shard of `names` made anew since."""
    import ray

    handles = [h for h in [supervisor, *shards] if h is not None]

    def ask() -> None:
        refs = [h.stop.remote() for h in handles]
        ray.wait(refs, num_returns=len(refs), timeout=STOP_SECONDS)

    bounded(ask, STOP_SECONDS + 1.0, "asking the actors to stop")

    def kill(actor: Any) -> Callable[[], None]:
        return lambda: ray.kill(actor, no_restart=True)

    def lookup(name: str) -> Callable[[], Any]:
        return lambda: ray.get_actor(name)

    for handle in handles:
        bounded(kill(handle), KILL_SECONDS, "killing an actor")
    held = {getattr(h, "_actor_id", None) for h in handles}
    for name in names:
        actor = bounded(lookup(name), LOOKUP_SECONDS, f"looking up {name}")
        if actor is not None and getattr(actor, "_actor_id", None) not in held:
            bounded(kill(actor), KILL_SECONDS, f"killing {name}")
    if shutdown:
        bounded(ray.shutdown, SHUTDOWN_SECONDS, "ray.shutdown")
