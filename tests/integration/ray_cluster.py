"""A private Ray cluster of two nodes on this host, for tests (not a test module).

    RayCluster    `ray start --head` and `ray start --address` (each `--block`, in a session of its own),
                  every port chosen free and a private temp dir and HOME, so no other Ray on the host is
                  touched; token authentication on (RAY_AUTH_MODE=token, a random RAY_AUTH_TOKEN);
                  GCS health checks every second, so a dead node is known in about 3 s.
                  kill_node(i) SIGKILLs node i's raylet (the node is lost); stop() ends exactly the
                  processes of this cluster (the sessions of its `ray start`s), never `ray stop`.
    Probe         a long-lived driver in a subprocess (the test process keeps no Ray state): named
                  actors of a namespace with what their ping() says, and the alive nodes.

Run as `python -m tests.integration.ray_cluster <address> <namespace>`: the probe's side (one JSON
request per stdin line, one JSON answer per stdout line).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from adapters.reaper import descendants
from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).parent / "ray"
ANSWER = b"@probe "


class RayCluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.temp = root / "ray"  # short: Ray's socket paths must stay under 108 bytes
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.token = secrets.token_hex(16)
        self.nodes: list[subprocess.Popen[bytes]] = []
        self.sessions: set[int] = set()  # every `ray start` begun, started or not

    def env(self) -> dict[str, str]:
        """What every process of this cluster and every client of it runs with."""
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith("RAY_")},
            "HOME": str(self.home),
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": self.token,
        }

    def _start(self, index: int, head: bool) -> None:
        worker_ports = 43000 + (self.port % 500) * 40 + index * 20
        args = [str(RAY), "start", "--block", "--disable-usage-stats", "--temp-dir", str(self.temp)]
        args += ["--head", "--port", str(self.port)] if head else ["--address", self.address]
        args += ["--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--object-store-memory", "80000000"]
        args += ["--min-worker-port", str(worker_ports), "--max-worker-port", str(worker_ports + 19)]
        for flag in (
            "--node-manager-port",
            "--object-manager-port",
            "--dashboard-agent-listen-port",
            "--dashboard-agent-grpc-port",
            "--runtime-env-agent-port",
            "--metrics-export-port",
        ):
            args += [flag, str(free_port())]
        if head:
            args += ["--include-dashboard", "false", "--dashboard-port", str(free_port())]
        env = self.env() | {
            "RAY_health_check_period_ms": "1000",
            "RAY_health_check_failure_threshold": "3",
            "RAY_health_check_initial_delay_ms": "1000",
        }
        for attempt in range(4):  # a loaded host can miss the raylet's fixed 15 s wait for its agents
            # (ray-project/ray#65983): try again
            path = self.root / f"node-{index}-{attempt}.log"
            with path.open("wb") as log:
                node = subprocess.Popen(
                    args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
            self.sessions.add(node.pid)
            deadline = time.monotonic() + 180
            written = False
            while b"Ray runtime started" not in path.read_bytes():
                if node.poll() is not None or time.monotonic() > deadline:
                    break
                written = written or self._agent_ports(node.pid)
                time.sleep(0.2)
            else:
                self.nodes.append(node)
                return
            self._end({node.pid})
        raise RuntimeError(f"ray node {index} did not start:\n{path.read_text(errors='replace')[-3000:]}")

    def _agent_ports(self, session: int) -> bool:
        """Write the port files the raylet waits for, as its agents would write them in a minimal Ray
        install (the dashboard agent: -1 for its HTTP and metrics ports; the runtime-env agent: the port
        it was given), as soon as the raylet exists. The raylet gives its agents a fixed 15 s to write
        them and exits otherwise (ray-project/ray#65983); on this shared 2-core host a Python agent can
        take longer to import. The agents write the same values once they are up. True once written."""
        raylet: Any = importlib.import_module("ray._raylet")  # Cython: no type stubs
        names = (
            ("DASHBOARD_AGENT_LISTEN_PORT_NAME", None),
            ("METRICS_AGENT_PORT_NAME", None),
            ("METRICS_EXPORT_PORT_NAME", None),
            ("RUNTIME_ENV_AGENT_PORT_NAME", "runtime_env_agent_port"),
        )
        for pid in self._members({session}):
            with contextlib.suppress(OSError):
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
                if not argv or not argv[0].endswith("raylet/raylet"):
                    continue
                flags = dict(a[2:].split("=", 1) for a in argv[1:] if a.startswith("--") and "=" in a)
                for name, flag in names:
                    port = int(flags[flag]) if flag else -1
                    raylet.persist_port(flags["session_dir"], flags["node_id"], getattr(raylet, name), port)
                return True
        return False

    def start(self) -> None:
        self._start(0, head=True)
        self._start(1, head=False)

    def raylet_pid(self, index: int) -> int:
        for pid, _ in descendants({self.nodes[index].pid}):
            with contextlib.suppress(OSError):
                if b"raylet/raylet" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return pid
        raise RuntimeError(f"no raylet under ray node {index}")

    def kill_node(self, index: int) -> None:
        os.kill(self.raylet_pid(index), signal.SIGKILL)

    @staticmethod
    def _members(sessions: set[int]) -> list[int]:
        """The live processes of these sessions (each `ray start` runs in a session of its own)."""
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    stat = Path(f"/proc/{entry}/stat").read_text()
                    fields = stat[stat.rfind(")") + 2 :].split()
                    if fields[0] != "Z" and int(fields[3]) in sessions:
                        out.append(int(entry))
        return out

    def _end(self, sessions: set[int]) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self._members(sessions):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and self._members(sessions):
                time.sleep(0.2)
        for node in self.nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.wait(timeout=1)

    def stop(self) -> None:
        """End this cluster's processes (the sessions of its `ray start`s), nothing else."""
        self._end(self.sessions)


class Probe:
    """A driver of the cluster in a subprocess (see the module docstring)."""

    def __init__(self, cluster: RayCluster, namespace: str) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.ray_cluster", cluster.address, namespace],
            cwd=REPO,
            env=cluster.env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=(cluster.root / "probe.log").open("wb"),
        )

    def ask(self, what: str, timeout: float = 60) -> Any:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write((json.dumps({"what": what, "timeout": min(timeout, 5)}) + "\n").encode())
        self._proc.stdin.flush()
        while True:  # Ray itself prints to stdout too (a raylet's death): answers are marked
            line = self._proc.stdout.readline()
            if not line:
                raise RuntimeError("the Ray probe exited (see probe.log)")
            if line.startswith(ANSWER):
                return json.loads(line[len(ANSWER) :])

    def close(self) -> None:
        self._proc.kill()
        self._proc.wait(timeout=10)


def _serve(address: str, namespace: str) -> None:
    import ray

    ray.init(address=address, namespace=namespace, log_to_driver=False, configure_logging=False)
    for line in sys.stdin:
        req = json.loads(line)
        out: Any
        if req["what"] == "nodes":
            out = {
                "head": ray.get_runtime_context().get_node_id(),
                "alive": sorted(n["NodeID"] for n in ray.nodes() if n["Alive"]),  # type: ignore[no-untyped-call]
                "cpus": ray.cluster_resources().get("CPU", 0),  # type: ignore[no-untyped-call]
            }
        else:  # "actors": every named actor of the namespace and its ping (None: no answer)
            out = {}
            for entry in ray.util.list_named_actors(all_namespaces=True):
                if entry["namespace"] != namespace:
                    continue
                try:
                    actor = ray.get_actor(entry["name"])
                    out[entry["name"]] = ray.get(actor.ping.remote(), timeout=req["timeout"])
                except Exception:
                    out[entry["name"]] = None
        sys.stdout.write(ANSWER.decode() + json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2])
