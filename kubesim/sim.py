"""The simulation runner: every cluster of a fleet served from one asyncio loop in a background thread.

    with Simulation(load_fleet(path), out_dir) as sim:
        api = config.new_client_from_config(str(sim.kubeconfig_path("onprem-a")), persist_config=False)
        sim.faults("onprem-a").down()
        sim.call(lambda: sim.store("onprem-a").mutate("nodes", "", "n1", fn))

Per cluster: an ObjectStore on the shared SimClock, populated from the fleet, its controllers (one task
ticks every cluster's), a ClusterApi behind its own TLS listener on 127.0.0.1 (own CA, own bearer token),
and `<out_dir>/<cluster>.kubeconfig`. The admin endpoint (kubesim.admin) serves fault and clock controls.
The ObjectStore is not thread-safe: other threads go through `call`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import orjson

from kubesim.api import ClusterApi
from kubesim.certs import ClusterTls, make_cluster_tls
from kubesim.clock import SimClock
from kubesim.faults import ClusterFaults
from kubesim.gpuhealth import ClusterGpus, GpuState, cluster_gpus
from kubesim.http import HttpServer
from kubesim.kubeconfig import write_kubeconfig
from kubesim.operators import hidden_groups
from kubesim.prom_api import PrometheusApi
from kubesim.store import ObjectStore

log = logging.getLogger("kubesim")


def _ticker_ended(task: asyncio.Task[None]) -> None:
    """The controllers' ticker ends only when the simulation stops: any other end is said loudly."""
    if not task.cancelled() and task.exception() is not None:
        log.error("the controllers of every cluster stopped", exc_info=task.exception())


# How often every cluster's controllers look for work (Controllers.tick returns at once when none is due).
CONTROLLER_TICK_SECONDS = 0.05


class FleetLike(Protocol):
    @property
    def clusters(self) -> list[Any]: ...


Populate = Callable[[ObjectStore, Any, SimClock], None]


@dataclass
class ClusterRuntime:
    name: str
    spec: Any
    store: ObjectStore
    api: ClusterApi
    server: HttpServer
    tls: ClusterTls
    kubeconfig: Path
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    controllers: Any = None
    users: dict[str, Path] = field(default_factory=dict)  # user name -> its kubeconfig

    @property
    def url(self) -> str:
        return f"https://{self.server.host}:{self.server.port}"


class Simulation:
    """Simulated member clusters over real HTTPS, run from a background thread's event loop."""

    def __init__(
        self,
        fleet: FleetLike,
        out_dir: Path,
        speed: float = 1.0,
        host: str = "127.0.0.1",
        *,
        admin_port: int = 0,
        populate: Populate | None = None,
        controllers: bool = True,
        bookmark_interval: float = 5.0,
        history: int = 20_000,
    ) -> None:
        self.fleet = fleet
        self.out_dir = Path(out_dir)
        self.host = host
        self.clock = SimClock(speed)
        self.admin_port = admin_port
        self._populate = populate
        self._run_controllers = controllers
        self._ticker: asyncio.Task[None] | None = None
        self._bookmark_interval = bookmark_interval
        self._history = history
        self._clusters: dict[str, ClusterRuntime] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._admin: HttpServer | None = None
        self._started = False

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Simulation:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        if self._started:
            return
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="kubesim-loop", daemon=True)
        self._thread.start()
        ready.wait()
        try:
            asyncio.run_coroutine_threadsafe(self._start(), loop).result()
        except BaseException:
            self.stop()
            raise
        self._started = True

    async def _start(self) -> None:
        populate = self._populate
        if populate is None:
            from kubesim.fleet import populate as fleet_populate

            populate = fleet_populate
        controller_cls = None
        if self._run_controllers:
            from kubesim.controllers import Controllers

            controller_cls = Controllers
        self.out_dir.mkdir(parents=True, exist_ok=True)
        certs_dir = self.out_dir / "certs"
        for spec in self.fleet.clusters:
            name = spec.name
            store = ObjectStore(self.clock.now, history=self._history)
            populate(store, spec, self.clock)
            token = secrets.token_urlsafe(32)
            api = ClusterApi(name, store, self.clock, token, bookmark_interval=self._bookmark_interval)
            api.hidden_groups = hidden_groups(spec)  # workload operators it does not install
            gpus = cluster_gpus(spec, store)  # GPU health: dcgm-exporter, Prometheus API, XID faults
            api.prometheus = PrometheusApi(store, self.clock, gpus)
            api.gpus = gpus
            tls = make_cluster_tls(name, certs_dir, self.host)
            server = HttpServer(api.handle, self.host, 0, tls.server_context())
            await server.start()
            runtime = ClusterRuntime(name, spec, store, api, server, tls, self.out_dir / f"{name}.kubeconfig")
            write_kubeconfig(runtime.kubeconfig, name, runtime.url, tls.ca_pem, token)
            self._clusters[name] = runtime
            for user in getattr(spec, "users", ()):
                self._add_user(runtime, user.name, tuple(user.groups), user.token)
            if controller_cls is not None:
                runtime.controllers = controller_cls(store, self.clock, spec, gpus=gpus)
        if controller_cls is not None:
            self._ticker = asyncio.get_running_loop().create_task(
                self._tick_controllers(), name="controllers"
            )
            self._ticker.add_done_callback(_ticker_ended)
        from kubesim.admin import AdminApi

        self._admin = HttpServer(AdminApi(self).handle, self.host, self.admin_port, None)
        await self._admin.start()
        (self.out_dir / "kubesim.json").write_bytes(orjson.dumps(self.describe(), option=orjson.OPT_INDENT_2))

    async def _tick_controllers(self, interval: float = CONTROLLER_TICK_SECONDS) -> None:
        """Every cluster's controllers, one tick each every `interval`, from one task: a task per cluster
        was 10,000 timer wake-ups a second for 500 idle clusters, most of an idle kubesim's CPU. A cluster
        whose controllers raise stops being ticked (logged); the others go on."""
        stopped: set[str] = set()
        while True:
            for name, runtime in list(self._clusters.items()):
                controllers = runtime.controllers
                if controllers is None or name in stopped:
                    continue
                try:
                    controllers.tick()
                except Exception:
                    stopped.add(name)
                    log.exception("controllers of cluster %s stopped with an error", name)
            await asyncio.sleep(interval)

    def stop(self) -> None:
        """Stop serving and controlling; leaves no thread, socket or task behind."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._stop(), loop).result(timeout=30)
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        if not loop.is_closed():
            loop.close()
        self._loop = self._thread = None
        self._started = False

    async def _stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(BaseException):
                await self._ticker
            self._ticker = None
        for runtime in self._clusters.values():
            for task in runtime.tasks:
                task.cancel()
        for runtime in self._clusters.values():
            for task in runtime.tasks:
                with contextlib.suppress(BaseException):
                    await task
            runtime.api.close()
            await runtime.server.close()
        if self._admin is not None:
            await self._admin.close()
        # Let the aborted connections' handlers run to completion, then cancel anything left.
        await asyncio.sleep(0)
        current = asyncio.current_task()
        pending = [t for t in asyncio.all_tasks() if t is not current]
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5)
        await asyncio.get_running_loop().shutdown_default_executor()

    # ------------------------------------------------------------------ access

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the simulation is not running")
        return self._loop

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float | None = 60) -> Any:
        """Run fn(*args) on the simulation loop (awaiting it if it returns an awaitable) and return its result."""
        loop = self.loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise RuntimeError("Simulation.call from the simulation loop itself: call the function directly")

        async def invoke() -> Any:
            result = fn(*args)
            if inspect.isawaitable(result):
                result = await result
            return result

        return asyncio.run_coroutine_threadsafe(invoke(), loop).result(timeout)

    def _runtime(self, name: str) -> ClusterRuntime:
        try:
            return self._clusters[name]
        except KeyError:
            raise KeyError(f"no cluster {name!r}; known: {', '.join(self._clusters)}") from None

    def register_user(
        self, cluster: str, user: str, groups: tuple[str, ...], token: str | None = None
    ) -> str:
        """`add_user` on the simulation loop (the admin endpoint and start-up use it)."""
        return self._add_user(self._runtime(cluster), user, groups, token)

    def users(self, cluster: str) -> dict[str, Path]:
        """The users bound on a cluster and their kubeconfigs."""
        return dict(self._runtime(cluster).users)

    def _add_user(
        self, runtime: ClusterRuntime, user: str, groups: tuple[str, ...], token: str | None
    ) -> str:
        token = runtime.api.add_user(user, groups, token)
        path = self.out_dir / f"{runtime.name}-{user}.kubeconfig"
        write_kubeconfig(path, runtime.name, runtime.url, runtime.tls.ca_pem, token, user=user)
        runtime.users[user] = path
        return token

    def add_user(
        self, cluster: str, user: str, groups: tuple[str, ...] | list[str] = (), token: str | None = None
    ) -> str:
        """Bind a bearer token (random unless given) to `user` and `groups` on `cluster`; RBAC objects in the
        cluster decide what it may do. Writes `<out>/<cluster>-<user>.kubeconfig` (see
        `user_kubeconfig_path`) and returns the token. Safe from any thread."""
        runtime = self._runtime(cluster)
        return self.call(self._add_user, runtime, user, tuple(groups), token)  # type: ignore[no-any-return]

    def user_kubeconfig_path(self, cluster: str, user: str) -> Path:
        try:
            return self._runtime(cluster).users[user]
        except KeyError:
            raise KeyError(f"no user {user!r} on cluster {cluster!r}; add it with add_user") from None

    def cluster_names(self) -> list[str]:
        return list(self._clusters)

    def store(self, name: str) -> ObjectStore:
        """The cluster's ObjectStore; use it only on the simulation loop (through `call`)."""
        return self._runtime(name).store

    def api(self, name: str) -> ClusterApi:
        return self._runtime(name).api

    def controllers(self, name: str) -> Any:
        return self._runtime(name).controllers

    def kubeconfig_path(self, name: str) -> Path:
        return self._runtime(name).kubeconfig

    def server_url(self, name: str) -> str:
        return self._runtime(name).url

    def token(self, name: str) -> str:
        return self._runtime(name).api.token

    def ca_path(self, name: str) -> Path:
        return self._runtime(name).tls.ca_path

    @property
    def admin_url(self) -> str:
        if self._admin is None:
            raise RuntimeError("the simulation is not running")
        return f"http://{self.host}:{self._admin.port}"

    def faults(self, name: str) -> ClusterFaults:
        self._runtime(name)
        return ClusterFaults(lambda changes: self.call(self.set_faults, name, changes))

    async def set_faults(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Apply fault changes to a cluster (on the loop); returns its fault state."""
        runtime = self._runtime(name)
        api = runtime.api
        was_hanging = api.faults.hang
        api.faults.update(changes)
        cut = api.cut_watches() if changes.get("cut_watches") else 0
        reset = runtime.server.reset_connections() if changes.get("reset_connections") else 0
        if api.faults.down and runtime.server.listening:
            await runtime.server.close(drop_connections=True)
        elif not api.faults.down and not runtime.server.listening:
            await runtime.server.start()
        if was_hanging and not api.faults.hang:
            api.release_hung()
        return {
            **api.faults.as_dict(),
            "watches": api.watch_count,
            **({"cut": cut} if cut else {}),
            **({"reset": reset} if reset else {}),
        }

    def prometheus_url(self, name: str) -> str:
        """The cluster's Prometheus-compatible API (same CA and bearer token as the cluster)."""
        return f"{self._runtime(name).url}/prometheus"

    def gpu_xid(self, cluster: str, node: str, gpu: int, code: int) -> GpuState:
        """Inject XID `code` on GPU `gpu` of `node` now (thread-safe); see docs/kubesim.md, GPU health."""
        gpus = self._gpus(cluster)
        return self.call(lambda: gpus.xid(node, gpu, code, self.clock.now()))  # type: ignore[no-any-return]

    def gpu_clear(self, cluster: str, node: str, gpu: int) -> GpuState:
        """The GPU is reset or replaced: healthy again (thread-safe)."""
        gpus = self._gpus(cluster)
        return self.call(lambda: gpus.clear(node, gpu))  # type: ignore[no-any-return]

    def _gpus(self, cluster: str) -> ClusterGpus:
        gpus = self._runtime(cluster).api.gpus
        if gpus is None:
            raise KeyError(f"cluster {cluster!r} has no GPU health model")
        return gpus

    def describe(self) -> dict[str, Any]:
        """What runs where (written to <out_dir>/kubesim.json and served by the admin endpoint)."""
        return {
            "admin": self.admin_url,
            "speed": self.clock.speed,
            "clusters": [
                {
                    "name": r.name,
                    "server": r.url,
                    "kubeconfig": str(r.kubeconfig),
                    "ca": str(r.tls.ca_path),
                    "users": {u: str(p) for u, p in r.users.items()},
                    "prometheus": f"{r.url}/prometheus",
                }
                for r in self._clusters.values()
            ],
        }
