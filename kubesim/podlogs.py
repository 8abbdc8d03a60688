"""The simulated container log served at pods/{name}/log, and the log request's options.

Every simulated container "writes" a deterministic log derived from its containerStatuses and the simulated
clock, so it needs no storage and reads the same at any time:

    <startedAt>          kubesim: container "main" started (image busybox:1.36) on node sim-000-gpu-0
    <startedAt + 10 s>   kubesim: container "main" running, 10s elapsed
    ... one progress line every PROGRESS_SECONDS simulated seconds while it runs ...
    <finishedAt>         kubesim: container "main" exited with code 0 (Completed)

The lines of a running container are a prefix of its final lines, except where the clock ran past the
exit before the kubelet reported it (progress lines after finishedAt are dropped from the final log), so
`follow` streams the lines newer than the last it sent (`unsent`) and ends after the exit line. `previous=true` reads the container's last
terminated instance (`lastState.terminated`, written when a container restarts); without one it is the
real server's 400. Options: container, follow, previous, tailLines, sinceSeconds, sinceTime, timestamps,
limitBytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]
PROGRESS_SECONDS = 10
MAX_PROGRESS_LINES = 100_000


class LogError(Exception):
    """A log request the server refuses: (code, reason, message)."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


@dataclass(frozen=True, slots=True)
class LogOptions:
    container: str | None = None
    follow: bool = False
    previous: bool = False
    tail_lines: int | None = None
    since_seconds: int | None = None
    since_time: float | None = None
    timestamps: bool = False
    limit_bytes: int | None = None


def _parse_time(value: str) -> float:
    try:
        return datetime.strptime(
            value.replace("Z", "+0000")[:19] + "+0000", "%Y-%m-%dT%H:%M:%S%z"
        ).timestamp()
    except ValueError:
        raise LogError(
            400, "BadRequest", f'sinceTime: Invalid value: "{value}": not an RFC 3339 time'
        ) from None


def parse_options(params: dict[str, str | None]) -> LogOptions:
    """PodLogOptions from query parameters; bad values are 400s naming the field."""

    def flag(name: str) -> bool:
        return (params.get(name) or "").lower() in ("true", "1")

    def positive(name: str, minimum: int) -> int | None:
        raw = params.get(name)
        if raw is None or raw == "":
            return None
        try:
            value = int(raw)
        except ValueError:
            raise LogError(400, "BadRequest", f'{name}: Invalid value: "{raw}": must be an integer') from None
        if value < minimum:
            raise LogError(
                422,
                "Invalid",
                f'PodLogOptions "" is invalid: {name}: Invalid value: {value}: must be greater than '
                f"{'or equal to ' if minimum == 0 else ''}{max(minimum - 1, 0) if minimum else 0}",
            )
        return value

    since_s = positive("sinceSeconds", 1)
    raw_since = params.get("sinceTime")
    since_t = _parse_time(raw_since) if raw_since else None
    if since_s is not None and since_t is not None:
        raise LogError(
            422,
            "Invalid",
            'PodLogOptions "" is invalid: sinceSeconds: Forbidden: at most one of `sinceTime` or '
            "`sinceSeconds` may be specified",
        )
    return LogOptions(
        container=params.get("container") or None,
        follow=flag("follow"),
        previous=flag("previous"),
        tail_lines=positive("tailLines", 0),
        since_seconds=since_s,
        since_time=since_t,
        timestamps=flag("timestamps"),
        limit_bytes=positive("limitBytes", 1),
    )


def _ts(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return _parse_time(value)
    except LogError:
        return None


def choose_container(pod: Obj, wanted: str | None) -> str:
    """The container a log request reads, with the real server's errors."""
    name = pod["metadata"]["name"]
    spec = pod.get("spec") or {}
    names = [c.get("name") for c in spec.get("containers") or []]
    others = [
        c.get("name") for c in (spec.get("initContainers") or []) + (spec.get("ephemeralContainers") or [])
    ]
    if wanted is None:
        if len(names) == 1:
            return str(names[0])
        raise LogError(
            400,
            "BadRequest",
            f"a container name must be specified for pod {name}, choose one of: [{' '.join(map(str, names))}]"
            + (f" or one of the init containers: [{' '.join(map(str, others))}]" if others else ""),
        )
    if wanted not in names and wanted not in others:
        raise LogError(400, "BadRequest", f"container {wanted} is not valid for pod {name}")
    return wanted


def _status_of(pod: Obj, container: str) -> Obj | None:
    status = pod.get("status") or {}
    for st in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        if st.get("name") == container:
            return st  # type: ignore[no-any-return]
    return None


def _instance(pod: Obj, container: str, previous: bool) -> tuple[float, float | None, int | None, str]:
    """(startedAt, finishedAt or None while running, exit code, reason) of the instance to read."""
    name = pod["metadata"]["name"]
    st = _status_of(pod, container)
    if previous:
        last = ((st or {}).get("lastState") or {}).get("terminated")
        started = _ts((last or {}).get("startedAt")) if last else None
        if not last or started is None:
            raise LogError(
                400, "BadRequest", f'previous terminated container "{container}" in pod "{name}" not found'
            )
        return (
            started,
            _ts(last.get("finishedAt")) or started,
            int(last.get("exitCode") or 0),
            str(last.get("reason") or ""),
        )
    state = (st or {}).get("state") or {}
    if "running" in state:
        started = _ts(state["running"].get("startedAt"))
        if started is not None:
            return started, None, None, ""
    if "terminated" in state:
        term = state["terminated"]
        started = _ts(term.get("startedAt")) or _ts(term.get("finishedAt"))
        if started is not None:
            return (
                started,
                _ts(term.get("finishedAt")) or started,
                int(term.get("exitCode") or 0),
                str(term.get("reason") or ""),
            )
    reason = ((state.get("waiting") or {}).get("reason")) or "ContainerCreating"
    raise LogError(
        400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start: {reason}'
    )


def lines(
    pod: Obj, container: str, now: float, previous: bool = False
) -> tuple[list[tuple[float, str]], bool]:
    """The container's log lines up to `now` as (time, text), and whether the log is complete (exited)."""
    started, finished, code, reason = _instance(pod, container, previous)
    image = next(
        (
            c.get("image")
            for c in (pod.get("spec") or {}).get("containers") or []
            if c.get("name") == container
        ),
        "",
    )
    node = (pod.get("spec") or {}).get("nodeName") or ""
    out = [(started, f'kubesim: container "{container}" started (image {image}) on node {node}')]
    end = finished if finished is not None else now
    n = 1
    while started + n * PROGRESS_SECONDS <= end and n <= MAX_PROGRESS_LINES:
        t = started + n * PROGRESS_SECONDS
        if finished is not None and t >= finished:
            break
        out.append((t, f'kubesim: container "{container}" running, {n * PROGRESS_SECONDS}s elapsed'))
        n += 1
    if finished is not None:
        out.append(
            (finished, f'kubesim: container "{container}" exited with code {code} ({reason or "Completed"})')
        )
    return out, finished is not None


def unsent(entries: list[tuple[float, str]], last_sent: float, done: bool) -> list[tuple[float, str]]:
    """What a follow sends next, given the time of the last line it sent: the lines after it and, once
    the container has exited, the exit line (the follow ends there: it is asked once with done). Progress lines are written up to the clock while the kubelet
    has not yet reported the exit, so the finished log can hold fewer lines than were sent, with the
    exit line at or before the last one sent: counting lines would drop it."""
    fresh = [e for e in entries if e[0] > last_sent]
    if done and entries and (not fresh or fresh[-1] != entries[-1]):
        fresh.append(entries[-1])
    return fresh


def render(entries: list[tuple[float, str]], timestamps: bool) -> bytes:
    if timestamps:
        return b"".join(
            f"{datetime.fromtimestamp(t, tz=UTC).strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z {text}\n".encode()
            for t, text in entries
        )
    return b"".join(f"{text}\n".encode() for _, text in entries)


def select(entries: list[tuple[float, str]], opts: LogOptions, now: float) -> list[tuple[float, str]]:
    """The lines a non-follow read (or a follow's first batch) returns: since*, then tailLines."""
    since = opts.since_time
    if opts.since_seconds is not None:
        since = now - opts.since_seconds
    if since is not None:
        entries = [e for e in entries if e[0] >= since]
    if opts.tail_lines is not None:
        entries = entries[-opts.tail_lines :] if opts.tail_lines else []
    return entries
