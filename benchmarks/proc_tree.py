"""Every process a server started, and what they cost together: the whole process tree of the broker
(the `gpufed serve` process, its API processes and every Ray process it started), for the benchmarks
that judge idle CPU and memory goals (issue 49: the Ray processes are in the goal, shown beside it).

A process belongs to the tree of `root` when any of these holds (read from /proc, Linux):
- it descends from `root` (its parent, or its parent's parent, ... is `root`);
- `root` leads a session of its own (the benchmarks start `gpufed serve` with `start_new_session`) and
  the process is in that session: a daemon that double-forked away from its parent (re-parented to
  init or a subreaper) keeps its session id unless it calls setsid itself;
- its command line names a Ray session directory (`/tmp/ray/session_...`) that a process already in
  the tree names: Ray's GCS, raylet, dashboard, log monitor and agents all carry `--session-dir=` or
  `--session-name=`, so one that Ray daemonised into a session of its own is still found;
and, closed over: the descendants of every process found so.

The parts: `broker` (root itself), `API` (broker.app.api_process), `reaper` (adapters.reaper), and Ray's by role (GCS, raylet,
dashboard, agents, monitors, workers: a Ray worker's command line is `ray::<actor>`); anything else in
the tree is `other`. CPU is utime + stime (/proc/PID/stat); memory is PSS (/proc/PID/smaps_rollup:
each shared page split between the processes that map it, so the sum counts a shared library once)
beside RSS (which counts it in every process)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.proc_stats import HZ, cmdline, cpu_ticks

_RAY_SESSION = re.compile(r"/tmp/ray/session_[0-9_-]+|session_\d{4}-\d\d-\d\d_[0-9_-]+")

# (part, a substring of the command line), first match wins; checked after `broker` and `API`.
_ROLES: tuple[tuple[str, str], ...] = (
    ("API", "broker.app.api_process"),
    ("reaper", "adapters.reaper"),
    ("Ray GCS", "gcs_server"),
    ("Ray raylet", "raylet/raylet"),
    ("Ray dashboard", "dashboard/dashboard.py"),
    ("Ray agents", "dashboard/agent.py"),
    ("Ray agents", "runtime_env/agent"),
    ("Ray agents", "ray::DashboardAgent"),
    ("Ray agents", "ray::RuntimeEnvAgent"),
    ("Ray monitors", "log_monitor.py"),
    ("Ray monitors", "autoscaler/_private/monitor.py"),
    ("Ray workers", "ray::"),
    ("Ray workers", "default_worker.py"),
)


@dataclass(frozen=True)
class Proc:
    """One process as /proc shows it now."""

    pid: int
    ppid: int
    sid: int
    cmd: str


def _read(pid: int) -> Proc | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return Proc(pid, int(fields[1]), int(fields[3]), cmdline(pid))


def all_processes() -> dict[int, Proc]:
    out: dict[int, Proc] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (proc := _read(int(entry.name))) is not None:
            out[proc.pid] = proc
    return out


def ray_sessions(cmd: str) -> set[str]:
    """The Ray session names (`session_<date>_<time>_<n>_<pid>`) a command line mentions."""
    return {m.rsplit("/", 1)[-1] for m in _RAY_SESSION.findall(cmd)}


def tree(root: int, procs: dict[int, Proc] | None = None) -> set[int]:
    """The pids of `root`'s whole tree (see the module's docstring), `root` included while it lives."""
    procs = all_processes() if procs is None else procs
    if root not in procs:
        return set()
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    leads_session = procs[root].sid == root
    found: set[int] = set()
    sessions: set[str] = set()
    todo = [root]
    while True:
        while todo:
            pid = todo.pop()
            if pid in found:
                continue
            found.add(pid)
            sessions |= ray_sessions(procs[pid].cmd)
            todo.extend(children.get(pid, []))
        todo = [
            p.pid
            for p in procs.values()
            if p.pid not in found
            and ((leads_session and p.sid == root) or (sessions and ray_sessions(p.cmd) & sessions))
        ]
        if not todo:
            return found


def part(pid: int, root: int, cmd: str) -> str:
    if pid == root:
        return "broker"
    for name, needle in _ROLES:
        if needle in cmd:
            return name
    return "other"


def pss_rss_mib(pid: int) -> tuple[float, float]:
    """(PSS, RSS) of one process in MiB from /proc/PID/smaps_rollup (0 when it is gone or unreadable)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0.0, 0.0
    kib = {
        k.strip(): int(v.split()[0])
        for k, _, v in (line.partition(":") for line in text.splitlines()[1:])
        if v.strip()
    }
    return kib.get("Pss", 0) / 1024, kib.get("Rss", 0) / 1024


@dataclass(frozen=True)
class TreeSample:
    """The tree of `root` at one moment: each pid's part, CPU ticks and command line."""

    root: int
    parts: dict[int, str]
    ticks: dict[int, int]
    cmds: dict[int, str] = field(default_factory=dict)


def sample(root: int) -> TreeSample:
    procs = all_processes()
    pids = tree(root, procs)
    return TreeSample(
        root,
        {p: part(p, root, procs[p].cmd) for p in pids},
        {p: cpu_ticks(p) for p in pids},
        {p: procs[p].cmd for p in pids},
    )


def _by_part(values: Iterable[tuple[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in values:
        out[name] = out.get(name, 0.0) + value
    out["total"] = sum(v for k, v in out.items())
    return dict(sorted(out.items(), key=lambda kv: (kv[0] == "total", kv[0])))


def cpu_percent(before: TreeSample, after: TreeSample, seconds: float) -> dict[str, float]:
    """% of one core each part (and `total`) used between two samples: a process there at both counts
    its ticks between them, one that started in between all of its ticks; one that ended in between is
    lost (its ticks can no longer be read), so the figure is a floor."""
    return _by_part(
        (name, (after.ticks[p] - before.ticks.get(p, 0)) / HZ / seconds * 100)
        for p, name in after.parts.items()
    )


def memory(root: int) -> tuple[dict[str, float], dict[str, float]]:
    """(PSS, RSS) in MiB of each part of `root`'s tree and their `total`s."""
    now = sample(root)
    sizes = {p: pss_rss_mib(p) for p in now.parts}
    return (
        _by_part((name, sizes[p][0]) for p, name in now.parts.items()),
        _by_part((name, sizes[p][1]) for p, name in now.parts.items()),
    )


def counts(s: TreeSample) -> dict[str, int]:
    """How many processes each part holds, by part's name."""
    out: dict[str, int] = {}
    for name in s.parts.values():
        out[name] = out.get(name, 0) + 1
    return dict(sorted(out.items()))


def others(s: TreeSample) -> list[str]:
    """The command lines (their first 80 characters) of the processes in no known part."""
    return sorted(s.cmds.get(p, "")[:80] for p, name in s.parts.items() if name == "other")


def line(values: dict[str, float], unit: str, fmt: str = ".1f") -> str:
    """`total X<unit> (broker a, API b, Ray raylet c, ...)`: the total first, its parts beside it."""
    parts = ", ".join(f"{k} {format(v, fmt)}{unit}" for k, v in values.items() if k != "total")
    return f"{format(values.get('total', 0.0), fmt)}{unit} ({parts})"


if __name__ == "__main__":  # python -m benchmarks.proc_tree PID: the tree of a running broker
    import sys

    pid = int(sys.argv[1]) if len(sys.argv) > 1 else os.getpid()
    s = sample(pid)
    print(counts(s))
    pss, rss = memory(pid)
    print("PSS", line(pss, " MiB", ".0f"), "RSS", line(rss, " MiB", ".0f"))
