"""What the benchmarks read of the processes they start, from /proc (Linux): CPU time, time waiting for a
CPU, command lines, the process tree, and the niceness of a session's autogroup."""

from __future__ import annotations

import os
from pathlib import Path

HZ = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid: int) -> int:
    """utime + stime of one process, in clock ticks (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


def memory_mib(pid: int) -> tuple[float, float]:
    """(resident now, the most resident so far) of one process in MiB (/proc/PID/status VmRSS and
    VmHWM; 0 when it is gone)."""
    try:
        fields = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
        )
    except OSError:
        return 0.0, 0.0
    kib = [int(fields.get(k, "0 kB").split()[0]) for k in ("VmRSS", "VmHWM")]
    return kib[0] / 1024, kib[1] / 1024


def cpu_wait_ns(pid: int) -> int:
    """Nanoseconds the threads of one process have spent runnable but waiting for a CPU
    (/proc/PID/task/*/schedstat, its second field; 0 when it is gone)."""
    total = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0
    for task in tasks:
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total


def set_autogroup_nice(pid: int, niceness: int) -> None:
    """The niceness of the autogroup (session) of `pid`: Linux's autogroup scheduler shares the CPU
    between sessions first, by this, then between a session's processes by theirs (sched(7))."""
    try:
        Path(f"/proc/{pid}/autogroup").write_text(str(niceness))
    except OSError as e:
        print(f"note    /proc/{pid}/autogroup: {e}; the niceness holds inside its session only")


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def descendants(pid: int) -> set[int]:
    """Every live process under `pid` (Ray's raylet, GCS and worker processes run under the broker)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out
