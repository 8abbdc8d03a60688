"""No process the broker started survives it, whatever signal ended it (Ray's raylet, GCS, agents, workers).

Owns a watchdog process started by `gpufed serve`: `python -m adapters.reaper <broker pid>` in its own
session, holding the read end of a pipe whose write end only the broker holds. Every half second it
notes the broker's descendants (pid and start time, from /proc); when the pipe reads end-of-file (the
broker exited: normally, by SIGTERM, or by SIGKILL, which the kernel makes visible by closing the
pipe) it sends SIGTERM to every noted process still alive (same pid *and* start time: never a recycled
pid) and to their descendants, then SIGKILL after a grace period, and exits.

Ray's own cleanup (ray.shutdown()) stops most of its processes on a clean exit; this is what makes the
rule hold for the rest (the dashboard and runtime-env agents a killed driver leaves behind) and for
SIGKILL. Linux only (/proc).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

SCAN_SECONDS = 0.5
GRACE_SECONDS = 3.0

Proc = tuple[int, int]  # (pid, start time in clock ticks since boot)


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of a live process, or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces: split after the last ')'
    rest = text[text.rfind(")") + 2 :].split()
    state = rest[0]
    if state == "Z":
        return None  # a zombie is dead already
    return int(rest[1]), int(rest[19])


def descendants(roots: set[int]) -> set[Proc]:
    """Every live process below `roots` (not the roots themselves), with its start time."""
    children: dict[int, list[Proc]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        st = _stat(int(entry))
        if st is not None:
            children.setdefault(st[0], []).append((int(entry), st[1]))
    out: set[Proc] = set()
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child[0])
    return out


def _alive(procs: set[Proc]) -> set[Proc]:
    out = set()
    for pid, start in procs:
        st = _stat(pid)
        if st is not None and st[1] == start:
            out.add((pid, start))
    return out


def reap(noted: set[Proc], me: int) -> int:
    """Terminate the noted processes still alive, and theirs; returns how many had to be signalled."""
    targets = _alive(noted)
    targets |= descendants({pid for pid, _ in targets})
    targets = {p for p in targets if p[0] != me}
    for pid, _ in targets:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    while _alive(targets) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid, _ in _alive(targets):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(targets)


def watch(broker_pid: int, fd: int) -> None:
    me = os.getpid()
    noted: set[Proc] = set()
    poller = select.poll()  # not select(): the descriptor may be above 1024 (a broker of 1,000 members)
    poller.register(fd, select.POLLIN)
    while True:
        ready = poller.poll(SCAN_SECONDS * 1000)
        if ready and not os.read(fd, 4096):
            break  # end of file: the broker is gone (or asked us to clean up)
        noted = _alive(noted) | {p for p in descendants({broker_pid}) if p[0] != me}
    reap(noted, me)


class Reaper:
    """The broker's side: start the watchdog; close() asks it to clean up now and waits for it."""

    def __init__(self) -> None:
        read_end, self._write_end = os.pipe()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "adapters.reaper", str(os.getpid()), str(read_end)],
            pass_fds=(read_end,),
            start_new_session=True,  # a signal to the broker's process group does not reach it
            stdin=subprocess.DEVNULL,
        )
        os.close(read_end)
        os.set_inheritable(self._write_end, False)  # Ray's children must not keep the pipe open

    @property
    def pid(self) -> int:
        return self._proc.pid

    def close(self, timeout: float = 10.0) -> None:
        with contextlib.suppress(OSError):
            os.close(self._write_end)
        try:
            self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=5)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in a terminal reaches the broker, not us
    watch(int(sys.argv[1]), int(sys.argv[2]))
