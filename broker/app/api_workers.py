"""The HTTP API's processes beside the broker process (settings.apiProcesses): started, kept, stopped.

ApiWorkers   `start(sock, members)` starts `count` processes of broker.app.api_process that accept on the broker's
             listening socket (inherited; connections made while one restarts wait in its backlog) and
             waits until each serves; a process that exits while the broker runs (a crash, a kill) is
             started again, at most once a second; `restart()` replaces them one at a time (the member
             clusters changed: `members` is written to a file they read at start); `auth_changed()` does
             the same at once for a changed `auth` section (broker.app.auth) and says which processes
             now serve it; `stop()` sends SIGTERM (in-flight requests
             finish, writes get 503), then SIGKILL after `grace_seconds`.
api_argv     the command line of one.
listening_socket(host, port)  the socket they share, opened by the broker process.

Every process is started from one thread of its own (`spawner_tid`), so it gets the niceness `gpufed
serve` started with even after the broker process's other threads were lowered (settings.controllerNice,
broker.app.cpu_priority).

A process that has exited is marked dead for prometheus_client's multiprocess gauges.

Liveness: once serving, each process's event loop beats on its ready pipe every half second
(broker.app.api_process). A process whose beats stop for `stall_seconds` (frozen by SIGSTOP, its loop
blocked) answers nobody, `/healthz` included: the supervisor SIGKILLs it and starts another (issue 48
finding 2). Meanwhile the listening socket, the broker process's, keeps accepting: connections wait in
its backlog for the new process.
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import multiprocess

from broker import telemetry
from broker.core.model import ClusterTraits

log = logging.getLogger(__name__)

READY_SECONDS = 60.0  # a process that does not serve within this long is a failed start
STALL_SECONDS = 6.0  # a serving process whose event loop has not beaten for this long is replaced


@dataclass(frozen=True)
class ApiProcessArgs:
    config: Path
    replica: str  # the broker process's lease holder name
    members_file: Path  # the member clusters' traits now (clusters.yaml's and ClusterProfiles')
    shards: Sequence[str] = ()
    tls_cert: Path | None = None
    tls_key: Path | None = None
    insecure_no_auth: bool = False


def api_argv(args: ApiProcessArgs, fd: int, ready_fd: int) -> list[str]:
    argv = [sys.executable, "-m", "broker.app.api_process", "--config", str(args.config)]
    argv += ["--fd", str(fd), "--ready-fd", str(ready_fd), "--replica", args.replica]
    argv += ["--members", str(args.members_file)]
    for shard in args.shards:
        argv += ["--shard", shard]
    if args.tls_cert is not None and args.tls_key is not None:
        argv += ["--tls-cert", str(args.tls_cert), "--tls-key", str(args.tls_key)]
    if args.insecure_no_auth:
        argv.append("--insecure-no-auth")
    return argv


@dataclass
class ApiWorkers:
    count: int
    args: ApiProcessArgs
    grace_seconds: float = 10.0
    stall_seconds: float = STALL_SECONDS
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    restarts: int = 0
    stalls: int = 0  # processes killed because their beats stopped
    _beats: dict[int, tuple[int, float]] = field(default_factory=dict)  # pid -> (beat pipe, last beat)
    _sock: socket.socket | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None
    _spawner: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="gpufed-api-spawner")
    )
    spawner_tid: int | None = None  # the native id of the thread that starts the processes

    def start(self, sock: socket.socket, members: dict[str, ClusterTraits]) -> None:
        """Start every process and wait until each serves; RuntimeError if one does not."""
        self._sock = sock
        # Every process is started by one thread that keeps the niceness `gpufed serve` started with,
        # whatever the broker process's other threads are lowered to (broker.app.cpu_priority).
        self.spawner_tid = self._spawner.submit(threading.get_native_id).result()
        write_members(self.args.members_file, members)
        with self._lock:
            self.procs = [self._spawn() for _ in range(self.count)]
        self._thread = threading.Thread(target=self._supervise, name="gpufed-api-workers", daemon=True)
        self._thread.start()

    def _spawn(self) -> subprocess.Popen[bytes]:
        return self._spawner.submit(self._spawn_here).result()

    def _spawn_here(self) -> subprocess.Popen[bytes]:
        assert self._sock is not None
        fd = self._sock.fileno()
        read_end, write_end = os.pipe()
        try:
            proc = subprocess.Popen(api_argv(self.args, fd, write_end), pass_fds=(fd, write_end))
        finally:
            os.close(write_end)
        ready = _read_ready(read_end, READY_SECONDS)
        if ready:
            os.set_blocking(read_end, False)
            self._beats[proc.pid] = (read_end, time.monotonic())  # its beats follow on the pipe
        else:
            os.close(read_end)
            _end(proc, 2.0)
            raise RuntimeError(
                f"an API process did not start serving within {READY_SECONDS:.0f} s (exit {proc.returncode})"
            )
        return proc

    def _stalled(self, proc: subprocess.Popen[bytes]) -> float | None:
        """Seconds since the process's last beat when over stall_seconds (its beats read here)."""
        fd, last = self._beats.get(proc.pid, (-1, time.monotonic()))
        if fd < 0:
            return None
        now = time.monotonic()
        try:
            if os.read(fd, 4096):
                self._beats[proc.pid] = (fd, now)
                return None
        except BlockingIOError:
            pass
        except OSError:
            return None
        return now - last if now - last > self.stall_seconds else None

    def _forget(self, pid: int) -> None:
        fd, _ = self._beats.pop(pid, (-1, 0.0))
        if fd >= 0:
            os.close(fd)

    def _supervise(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                for i, proc in enumerate(self.procs):
                    if self._stop.is_set():
                        continue
                    silent = self._stalled(proc) if proc.poll() is None else None
                    if silent is not None:
                        log.warning(
                            "API process %d answered no health check for %.1f s (frozen or blocked): "
                            "killing it and starting another; the port keeps accepting meanwhile",
                            proc.pid,
                            silent,
                        )
                        proc.kill()  # SIGKILL ends a stopped process too
                        proc.wait(timeout=10)
                        self.stalls += 1
                    if proc.poll() is None:
                        continue
                    if silent is None:
                        log.warning(
                            "API process %d exited with %s: starting another", proc.pid, proc.returncode
                        )
                    self._forget(proc.pid)
                    _mark_dead(proc.pid)
                    try:
                        self.procs[i] = self._spawn()
                        self.restarts += 1
                    except (OSError, RuntimeError) as exc:
                        log.warning("starting an API process failed (%s); trying again in a second", exc)
                        time.sleep(1.0)

    def members_changed(self, members: dict[str, ClusterTraits]) -> None:
        """The member clusters changed: the processes are replaced, one at a time, on a thread."""
        write_members(self.args.members_file, members)
        threading.Thread(target=self.restart, name="gpufed-api-restart", daemon=True).start()

    def restart(self) -> None:
        """Replace each process in turn by a new one (it reads the members afresh)."""
        with self._lock:
            if self._stop.is_set():
                return
            for i, old in enumerate(self.procs):
                self.procs[i] = self._spawn()
                _end(old, self.grace_seconds)
                self._forget(old.pid)
                _mark_dead(old.pid)

    def auth_changed(self) -> str:
        """clusters.yaml's `auth` changed and the broker process applied it: every process is replaced
        now by one that read it (the old one serves until its successor does). One that cannot be
        started: the old one is stopped anyway, so that no process serves the old credentials (the
        supervisor starts another). Returns which processes serve the new section."""
        applied: list[int] = []
        failed: list[str] = []
        with self._lock:
            if self._stop.is_set():
                return "no API process (stopping)"
            for i, old in enumerate(self.procs):
                try:
                    self.procs[i] = self._spawn()
                    applied.append(self.procs[i].pid)
                except (OSError, RuntimeError) as exc:
                    failed.append(f"{old.pid} stopped, not replaced: {exc}")
                _end(old, self.grace_seconds)
                self._forget(old.pid)
                _mark_dead(old.pid)
        text = f"{len(applied)} API process(es) ({', '.join(map(str, applied)) or 'none'})"
        return text + (f"; {'; '.join(failed)}" if failed else "")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            for proc in self.procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in self.procs:
                _end(proc, self.grace_seconds)
                self._forget(proc.pid)
                _mark_dead(proc.pid)
        self._spawner.shutdown(wait=False)


def listening_socket(host: str, port: int) -> socket.socket:
    """The API's socket, bound and listening, inherited by the API processes."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def write_members(path: Path, members: dict[str, ClusterTraits]) -> None:
    """The members' traits for the API processes (written whole, then renamed into place)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(pickle.dumps(members))
    tmp.replace(path)


def read_members(path: Path) -> dict[str, ClusterTraits] | None:
    """What write_members wrote (only ever by the broker process that started this one), or None."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    members = pickle.loads(data)  # written by our own parent process, a file only it writes
    assert isinstance(members, dict)
    return members


def _read_ready(fd: int, seconds: float) -> bool:
    """True once the process wrote its byte; False when it closed the pipe (exited) or took too long."""
    # poll, not select: a broker holding 1,000 members' connections has descriptors above select's 1024
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(seconds * 1000)) and os.read(fd, 1) == b"1"


def _end(proc: subprocess.Popen[bytes], grace: float) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def _mark_dead(pid: int) -> None:
    """Its live gauges leave /metrics (prometheus_client multiprocess mode)."""
    if os.environ.get(telemetry.MULTIPROC_ENV):
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
