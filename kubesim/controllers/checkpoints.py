"""Simulated workload checkpoints (gpufed's checkpoint contract, docs/migration.md), for the kubelet.

A pod with `sim.gpufed.io/duration-seconds` and `sim.gpufed.io/checkpoint-seconds` (how long its save
takes) stands for a training job that honours the contract:

- deleted with a grace period of at least its save time (metadata.deletionGracePeriodSeconds), its
  container "catches SIGTERM", saves for the save time and exits as the real kubelet reports a process
  that exited on SIGTERM: exit code 143, reason Error, with `progress=<seconds done>` as its termination
  message (what the container wrote to terminationMessagePath). A shorter grace period: it is killed at
  the end of it (137) with no message, as before.
- started with the env var GPUFED_RESUME_FROM=progress=<s> in its container, it runs only the remainder
  of its duration (and its progress counts from s).
- with `sim.gpufed.io/checkpoint-every-seconds`, while it runs it writes its progress to the pod
  annotation gpufed.io/checkpoint every that many seconds (its periodic checkpoint, for the case where
  its cluster is lost and cannot be asked).

Pure helpers over pod objects; the kubelet applies them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

ANN_CHECKPOINT_SECONDS = "sim.gpufed.io/checkpoint-seconds"
ANN_CHECKPOINT_EVERY = "sim.gpufed.io/checkpoint-every-seconds"
REPORTED_ANNOTATION = "gpufed.io/checkpoint"
RESUME_ENV = "GPUFED_RESUME_FROM"
SIGTERM_EXIT = 143  # 128 + SIGTERM: what a container that exits on SIGTERM reports

Obj = dict[str, Any]


def _float(text: object) -> float | None:
    try:
        value = float(str(text))
    except (TypeError, ValueError):
        return None
    return value if value >= 0 else None


def _epoch(ts: object) -> float | None:
    try:
        return datetime.strptime(str(ts), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def save_seconds(pod: Obj) -> float | None:
    """How long the pod's save takes, or None: it does not checkpoint on SIGTERM."""
    return _float((pod["metadata"].get("annotations") or {}).get(ANN_CHECKPOINT_SECONDS))


def every_seconds(pod: Obj) -> float | None:
    value = _float((pod["metadata"].get("annotations") or {}).get(ANN_CHECKPOINT_EVERY))
    return value if value else None


def resumed_progress(pod: Obj) -> float:
    """The progress its container resumes from (GPUFED_RESUME_FROM=progress=<s>), 0 when none."""
    for c in (pod.get("spec") or {}).get("containers") or ():
        for env in c.get("env") or ():
            if env.get("name") == RESUME_ENV:
                key, _, value = str(env.get("value") or "").partition("=")
                if key.strip() == "progress":
                    return _float(value) or 0.0
    return 0.0


def progress(pod: Obj, now: float, duration: float) -> float:
    """Seconds of work done at `now`: what it resumed from plus its run time, at most its duration."""
    started = _epoch((pod.get("status") or {}).get("startTime"))
    ran = max(0.0, now - started) if started is not None else 0.0
    return min(duration, resumed_progress(pod) + ran)


def save_due(pod: Obj) -> float | None:
    """When a pod being deleted has saved and exits (deletion + its save time), or None: it does not
    checkpoint, or its grace period is shorter than its save."""
    save = save_seconds(pod)
    meta = pod["metadata"]
    stamp = _epoch(meta.get("deletionTimestamp"))
    grace = _float(meta.get("deletionGracePeriodSeconds"))
    if save is None or stamp is None or grace is None or grace < save:
        return None
    return stamp - grace + save


def progress_text(done: float) -> str:
    return f"progress={done:g}"
