"""No process the broker started survives it, whatever signal ended it (Ray's raylet, GCS, agents, workers).

Owns a watchdog process started by `gpufed serve`: `python -m adapters.reaper <broker pid> <fd> <mark>`
in its own session, holding the read end of a pipe whose write end only the broker holds. When the pipe
reads end-of-file (the broker exited: normally, by SIGTERM, or by SIGKILL, which the kernel makes
visible by closing the pipe) it sends SIGTERM to every process the broker started that is still alive,
then SIGKILL after a grace period, and exits.

Which processes the broker started is found when it is needed, not tracked: before the watchdog starts,
the broker puts a random mark in its environment (`GPUFED_REAPER_MARK=<128 random bits>`), which every
process it starts afterwards inherits, and theirs in turn (Ray's GCS, raylet, dashboard, agents and
workers all keep their parent's environment). At end-of-file the watchdog reads /proc/PID/environ of
every process (what the process was started with: a later change in the process does not show) and
takes those carrying the mark, a daemon that double-forked out of the broker's tree or into a session
of its own included, plus the descendants of those. The mark is not in the watchdog's own environment.

So that a process forked without exec by a process that then died is covered too (its environ is its
forker's start-up environment), the watchdog also notes the broker's descendants (pid and start time)
on a period that starts at half a second after start and after any change, and doubles while nothing
changes, up to `SCAN_MAX_SECONDS`: idle, it costs nothing measurable.

A process is signalled through a pidfd opened before its start time is checked, so a signal never
reaches a recycled pid. Ray's own cleanup (ray.shutdown()) stops most of its processes on a clean exit;
this is what makes the rule hold for the rest and for SIGKILL. Linux only (/proc, pidfd).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

MARK_VARIABLE = "GPUFED_REAPER_MARK"
SCAN_MIN_SECONDS = 0.5
SCAN_MAX_SECONDS = 60.0
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


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def descendants(roots: set[int]) -> set[Proc]:
    """Every live process below `roots` (not the roots themselves), with its start time."""
    children: dict[int, list[Proc]] = {}
    for pid in _pids():
        st = _stat(pid)
        if st is not None:
            children.setdefault(st[0], []).append((pid, st[1]))
    out: set[Proc] = set()
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child[0])
    return out


def marked(mark: str) -> set[Proc]:
    """Every live process started with `MARK_VARIABLE=mark` in its environment."""
    needle = f"\0{MARK_VARIABLE}={mark}\0".encode()
    out: set[Proc] = set()
    for pid in _pids():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue  # gone, or another user's
        if needle in b"\0" + environ + b"\0" and (st := _stat(pid)) is not None:
            out.add((pid, st[1]))
    return out


def _alive(procs: Iterable[Proc]) -> set[Proc]:
    out = set()
    for pid, start in procs:
        st = _stat(pid)
        if st is not None and st[1] == start:
            out.add((pid, start))
    return out


def _signal(proc: Proc, sig: signal.Signals) -> None:
    """Send `sig` to `proc` if that very process is still alive: the pidfd is opened before the start time
    is checked, so a match means the pidfd holds that process, never a later one given the same pid."""
    pid, start = proc
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        st = _stat(pid)
        if st is not None and st[1] == start:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                signal.pidfd_send_signal(fd, sig)
    finally:
        os.close(fd)


def started_by_broker(noted: set[Proc], mark: str, me: int) -> set[Proc]:
    """What the broker started and is still alive: the noted processes, the marked ones, and theirs."""
    found = _alive(noted) | marked(mark)
    found |= descendants({pid for pid, _ in found})
    return {p for p in found if p[0] != me}


def reap(noted: set[Proc], mark: str, me: int) -> int:
    """Terminate every process the broker started; returns how many had to be signalled."""
    targets = started_by_broker(noted, mark, me)
    for proc in targets:
        _signal(proc, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    while _alive(targets) and time.monotonic() < deadline:
        time.sleep(0.1)
    # what is left, and anything started meanwhile (a worker a dying raylet spawned) goes now
    for proc in started_by_broker(targets, mark, me):
        _signal(proc, signal.SIGKILL)
    return len(targets)


def watch(broker_pid: int, fd: int, mark: str) -> None:
    me = os.getpid()
    noted: set[Proc] = set()
    last: set[Proc] = set()
    period = SCAN_MIN_SECONDS
    poller = select.poll()  # not select(): the descriptor may be above 1024 (a broker of 1,000 members)
    poller.register(fd, select.POLLIN)
    while True:
        ready = poller.poll(period * 1000)
        if ready and not os.read(fd, 4096):
            break  # end of file: the broker is gone (or asked us to clean up)
        seen = {p for p in descendants({broker_pid}) if p[0] != me}
        noted = _alive(noted) | seen  # one that left the tree (daemonised) stays noted while it lives
        period = SCAN_MIN_SECONDS if seen != last else min(period * 2, SCAN_MAX_SECONDS)
        last = seen
    reap(noted, mark, me)


class Reaper:
    """The broker's side: mark its environment, start the watchdog; close() asks it to clean up now and
    waits for it. Built before the broker starts anything (Ray, API processes): those inherit the mark."""

    def __init__(self) -> None:
        mark = secrets.token_hex(16)
        env = {k: v for k, v in os.environ.items() if k != MARK_VARIABLE}
        read_end, self._write_end = os.pipe()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "adapters.reaper", str(os.getpid()), str(read_end), mark],
            pass_fds=(read_end,),
            start_new_session=True,  # a signal to the broker's process group does not reach it
            stdin=subprocess.DEVNULL,
            env=env,
        )
        os.close(read_end)
        os.set_inheritable(self._write_end, False)  # Ray's children must not keep the pipe open
        os.environ[MARK_VARIABLE] = mark  # every process started from here on carries it

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
    watch(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
