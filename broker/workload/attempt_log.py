"""An ended attempt's container log, kept with the job (issue 45): what is kept, and what is said when
nothing is.

Pure. A member removes a finished Job `finishedJobTtlSeconds` after it ended (broker.workload.finished_ttl)
and a moved job's earlier attempt is deleted when it moves, so the broker keeps the last MAX_BYTES of
each attempt's log when the attempt ends (broker.controller.log_keeping reads it, the store keeps it:
broker.core.ports.AttemptLogStore), and `gpufed logs --attempt N` reads it back.

    collect(pods, read)     one attempt's log: each pod's last TAIL_LINES lines (prefixed "[pod] " for a
                            gang; its first MAX_PODS pods), the whole cut to its last MAX_BYTES
    gone(...)               what the API says when the pods are gone and no log was kept
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

__all__ = ["KEEP_ATTEMPTS", "MAX_BYTES", "MAX_PODS", "TAIL_LINES", "collect", "gone"]

MAX_BYTES = 64 * 1024  # kept per attempt (all its pods together)
TAIL_LINES = 2000  # asked of the member per pod; MAX_BYTES cuts what comes back
KEEP_ATTEMPTS = 8  # the newest attempts of one job whose logs are kept
MAX_PODS = 16  # of a gang, the pods whose logs are read (the first, by name): one read per pod


def _cut(data: bytes) -> bytes:
    """The last MAX_BYTES, starting at a line boundary when one is near."""
    if len(data) <= MAX_BYTES:
        return data
    tail = data[-MAX_BYTES:]
    nl = tail.find(b"\n")
    return tail[nl + 1 :] if 0 <= nl < 1024 else tail


def collect(pods: list[str], read: Callable[[str], Iterable[bytes]]) -> bytes:
    out = bytearray()
    for pod in sorted(pods)[:MAX_PODS]:
        data = b"".join(read(pod))
        if len(pods) == 1:
            out += data
            continue
        for line in data.splitlines():
            out += f"[{pod}] ".encode() + line + b"\n"
        if len(out) > 4 * MAX_BYTES:
            out = bytearray(out[-2 * MAX_BYTES :])  # bounded while it reads a large gang
    return _cut(bytes(out))


def gone(job_id: str, state: str, attempt: int, cluster: str | None, ttl_seconds: int | None) -> str:
    """The pods of the job's attempt are not there and no log of it was kept: say why, truly."""
    where = f" in {cluster}" if cluster else ""
    if state in ("SUCCEEDED", "FAILED", "CANCELLED"):
        after = f" {ttl_seconds} s (finishedJobTtlSeconds)" if ttl_seconds is not None else ""
        return (
            f"job {job_id} ended ({state}); its Job{where} is removed{after} after it finished, with its "
            f"pods and their logs, and no log of attempt {attempt} was kept"
        )
    return f"attempt {attempt} of job {job_id} has no pods{where} and no log of it was kept"
