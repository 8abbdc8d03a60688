"""Ray actors that keep every member cluster's summary fresh in Redis, and keep themselves running.

    PollerSpec, HashRing, PollerShard   adapters.poller_shard (the plain-Python shard and the ring)
    PollerSupervisor  runs in the broker's process (a thread and the liveness watch; it lives as long as
                    the broker): owns the desired cluster list (kept in Redis so that a shard restarted
                    by Ray resumes the current one), assigns clusters to shards by the ring, and every
                    second pings each shard: a shard that comes back from a crash with an old assignment
                    generation is sent the current one; a shard that is dead for good is made anew.
                    (Until issue 43 it was a Ray actor of its own: one more Ray worker process, whose
                    main thread Ray wakes every 10 ms, ~1% of a core idle on the 2-core test host.)
    PollerFleet     the broker's handle (the driver side): starts Ray (adapters.ray_embedded;
                    log_to_driver=True so the shards' health transitions reach the broker's output,
                    prefixed "(PollerShard pid=...)"), creates the shards and the supervisor (`gpufed
                    serve` with RAY_ADDRESS uses adapters.ray_shared instead: detached shards, the
                    supervisor in the leader);
                    set_clusters(specs) applies a config reload (clusters added, removed, changed);
                    add_cluster(spec) / remove_cluster(name) (ClusterProfile members) are the same
                    thing for one cluster.

One process per shard, not per cluster: each cluster costs threads (4 informers, a flusher, a prober),
not a Python process. Actor classes stay plain Python; `ray.remote` is applied in PollerFleet.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Sequence
from typing import Any

import orjson

from adapters import poller_liveness, ray_embedded, ray_stop
from adapters.poller_shard import (
    SUPERVISE_SECONDS,
    PollerShard,
    desired_clusters,
    desired_key,
    log_to_stderr,
)
from adapters.redis_store import RedisStateStore
from adapters.shard_ring import HashRing, PollerSpec, shard_name, spec_to_json
from broker.health.machine import HealthThresholds

log = logging.getLogger(__name__)

SHARD_CPU = 0.01  # a detached shard's CPU request (see placement)


def placement(detached: bool) -> dict[str, Any]:
    """Ray options of a shard actor beyond its name: on a shared Ray cluster (adapters.ray_shared) a
    shard belongs to the deployment, not to the replica that made it (lifetime "detached"), and the
    shards are spread over the Ray nodes ("SPREAD", also when Ray restarts one after its node died).
    A shard then asks for a token CPU share: Ray sends an actor that asks for no resource at all to a
    random node, where SPREAD never runs; with one, the owner's raylet deals them out round-robin."""
    if not detached:
        return {}
    return {"lifetime": "detached", "scheduling_strategy": "SPREAD", "num_cpus": SHARD_CPU}


def _being_restarted(actor: Any) -> bool:
    """Whether Ray is (re)creating this actor now (RESTARTING or PENDING_CREATION in the GCS's actor
    table; Ray's developer API, so any failure to read it counts as no)."""
    try:
        from ray._private import state

        info: Any = state.actors(actor_id=actor._actor_id.hex())
        return str(info.get("State", "")) in ("RESTARTING", "PENDING_CREATION", "DEPENDENCIES_UNREADY")
    except Exception:
        return False


class PollerSupervisor:
    """Keeps the shards assigned and alive (a Ray actor; see the module docstring)."""

    def __init__(
        self,
        specs: list[PollerSpec],
        shard_names: list[str],
        redis_url: str,
        prefix: str,
        run_id: str,
        shard_options: dict[str, Any],
        check_seconds: float = SUPERVISE_SECONDS,
        worker_logging: bool = False,
        start: bool = True,
    ) -> None:
        """`start`: begin the checks (and the liveness watch) now; otherwise start() does, once the
        caller has made the shards and seen them answer (adapters.ray_shared)."""
        if worker_logging:
            log_to_stderr()
        self._store = RedisStateStore(redis_url, prefix=prefix)
        self._key = desired_key(prefix)
        self._prefix = prefix
        self._redis_url = redis_url
        self._shard_names = list(shard_names)
        self._ring = HashRing(self._shard_names)
        self._shard_options = shard_options
        self._check = check_seconds
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.restarts: dict[str, int] = {n: 0 for n in self._shard_names}
        self._pids: dict[str, int] = {}
        self.checks = 0
        self._errors: dict[str, str] = {}  # shard -> the last error checking it (until a check passes)
        lost = float(shard_options["health"].lost_seconds) if shard_options.get("health") else 10.0
        self._liveness = poller_liveness.ShardLiveness(
            self._store, self._shard_names, poller_liveness.silent_after(lost)
        )
        saved = desired_clusters(self._store, run_id)
        if saved is not None:  # this is a restart: resume
            self._specs, self._generation = saved
        else:
            self._specs = list(specs)
            self._generation = 1
        self._run = run_id
        self._save()
        self._thread = threading.Thread(target=self._loop, name="gpufed-supervisor", daemon=True)
        if start:
            self.start()

    def start(self, fresh: bool = False) -> None:
        """Check every second, and watch the shards' output. `fresh`: the shards have just started:
        each gets the start-up grace before its silence counts."""
        for shard in self._shard_names if fresh else []:
            self._liveness.restarted(shard)
        self._thread.start()
        # a frozen shard never crashes: judged by its output, on a thread of its own (a ping of a
        # frozen shard blocks the check above for its whole timeout)
        self._liveness.watch(self.assignment, self._kill, self._stop)

    def _save(self) -> None:
        body = {
            "run": self._run,
            "generation": self._generation,
            "specs": [spec_to_json(s) for s in self._specs],
        }
        self._store.client.set(self._key, orjson.dumps(body))

    def _groups(self) -> dict[str, list[PollerSpec]]:
        return self._ring.assign_specs(self._specs)

    def assignment(self) -> dict[str, list[str]]:
        with self._lock:
            return {shard: [s.name for s in group] for shard, group in self._groups().items()}

    def _actor(self, name: str) -> Any:
        import ray

        return ray.get_actor(name)

    def set_clusters(self, specs: list[PollerSpec]) -> dict[str, list[str]]:
        """The fleet is now these clusters: reassign every shard (by the ring), forget the summaries of
        the clusters gone. Returns the assignment."""
        import ray

        with self._lock:
            gone = {s.name for s in self._specs} - {s.name for s in specs}
            self._specs = list(specs)
            self._generation += 1
            self._save()
            groups = self._groups()
            gen = self._generation
        refs = [self._actor(shard).assign.remote(group, gen) for shard, group in groups.items()]
        ray.get(refs, timeout=60)
        for name in sorted(gone):
            self._store.delete_summary(name)
        if gone:
            log.info("poller supervisor: clusters removed: %s", ", ".join(sorted(gone)))
        return self.assignment()

    def _ensure(self, shard: str, group: list[PollerSpec], gen: int) -> None:
        """One supervision check of one shard."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            actor = self._actor(shard)
        except ValueError:  # no actor of that name: dead for good (killed without restart): make it anew
            self._create(shard, group, gen)
            return
        try:
            info = ray.get(actor.ping.remote(), timeout=5)
        except (GetTimeoutError, RayActorError) as e:
            # Restarting (Ray brings it back), or dead for good (the next pass makes it anew).
            self._errors[shard] = f"ping: {type(e).__name__}"
            return
        pid = int(info["pid"])
        before = self._pids.get(shard)
        self._pids[shard] = pid
        if before != pid and (before is not None or info.get("restarted")):
            self._liveness.restarted(shard)
            self.restarts[shard] += 1
            log.warning(
                "poller shard %s restarted (pid %s -> %d); it resumes its clusters", shard, before, pid
            )
        if int(info["generation"]) != gen:
            log.info(
                "poller shard %s holds assignment %s, not %d: re-assigning", shard, info["generation"], gen
            )
            ray.get(actor.assign.remote(group, gen), timeout=60)

    def _kill(self, shard: str) -> None:
        import ray

        actor = self._actor(shard)
        if self._shard_options.get("detached") and _being_restarted(actor):
            # its process or node died and Ray is starting it again (on a live node): a kill now would
            # only make Ray start over
            log.warning("poller shard %s is being restarted by Ray; not killed", shard)
            return
        ray.kill(actor, no_restart=False)  # Ray restarts it; it resumes by itself
        poller_liveness.force_kill_local(self._pids.get(shard))  # a stopped process: at once

    def _create(self, shard: str, group: list[PollerSpec], gen: int) -> None:
        import ray

        log.warning("poller shard %s is gone; starting it anew with %d clusters", shard, len(group))
        self.restarts[shard] += 1
        self._liveness.restarted(shard)  # a new process lists its clusters before it publishes
        opts = dict(self._shard_options)
        remote = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)(PollerShard)
        remote.options(name=shard, get_if_exists=True, **placement(bool(opts.get("detached")))).remote(
            group,
            self._redis_url,
            self._prefix,
            opts["summary_interval_seconds"],
            generation=gen,
            health=opts["health"],
            autostart=True,
            worker_logging=opts["worker_logging"],
            ring=(self._run, shard, self._shard_names),
        )

    def check(self) -> None:
        """One supervision pass over every shard."""
        with self._lock:
            groups = self._groups()
            gen = self._generation
        self.checks += 1
        for shard in self._shard_names:
            try:
                self._errors.pop(shard, None)
                self._ensure(shard, groups.get(shard, []), gen)
            except Exception as e:
                if self._errors.get(shard) != repr(e):
                    log.exception("poller supervisor: checking shard %s failed", shard)
                self._errors[shard] = repr(e)

    def _loop(self) -> None:
        while not self._stop.wait(self._check):
            self.check()

    def status(self) -> dict[str, Any]:
        return {
            "generation": self._generation,
            "pids": dict(self._pids),
            "restarts": dict(self.restarts),
            "errors": dict(self._errors),
            "checks": self.checks,
            "assignment": self.assignment(),
        }

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=5)
        self._store.close()


class PollerFleet:
    """The poller shards of one broker and their supervisor, as named Ray actors."""

    def __init__(
        self,
        specs: list[PollerSpec],
        redis_url: str,
        prefix: str,
        shards: int = 1,
        summary_interval_seconds: float = 0.2,
        health: HealthThresholds | None = None,
    ) -> None:
        self._specs = list(specs)
        self._redis_url = redis_url
        self._prefix = prefix
        self._shards = max(1, shards)
        self._interval = summary_interval_seconds
        self._health = health or HealthThresholds()
        self._names = [shard_name(prefix, i) for i in range(self._shards)]
        self._actors: list[Any] = []
        self._supervisor: PollerSupervisor | None = None
        self._started_ray = False

    @property
    def shard_names(self) -> list[str]:
        return list(self._names)

    def start(self) -> None:
        import ray

        if not ray.is_initialized():
            ray_embedded.start_embedded_ray(os.environ.get("RAY_ADDRESS"))
            self._started_ray = True
        groups = HashRing(self._names).assign_specs(self._specs)
        run_id = uuid.uuid4().hex
        remote_shard = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)(PollerShard)
        for shard in self._names:
            actor = remote_shard.options(name=shard).remote(
                groups[shard],
                self._redis_url,
                self._prefix,
                self._interval,
                generation=1,
                health=self._health,
                autostart=True,
                worker_logging=True,
                ring=(run_id, shard, self._names),
            )
            self._actors.append(actor)
        ray.get([a.ping.remote() for a in self._actors], timeout=120)
        self._supervisor = PollerSupervisor(
            self._specs,
            self._names,
            self._redis_url,
            self._prefix,
            run_id,
            {"summary_interval_seconds": self._interval, "health": self._health, "worker_logging": True},
        )

    def _running(self) -> PollerSupervisor:
        if self._supervisor is None:
            raise RuntimeError("the poller fleet is not started (or stopped)")
        return self._supervisor

    def set_clusters(self, specs: Sequence[PollerSpec]) -> dict[str, list[str]]:
        """A config reload: the fleet is now exactly these clusters (added ones start, removed ones stop
        and their summaries are deleted, changed ones are re-pointed), without a restart. Returns
        {shard: [clusters]}."""
        self._specs = list(specs)
        return self._running().set_clusters(list(specs))

    def add_cluster(self, spec: PollerSpec) -> bool:
        """Watch one more cluster (set_clusters with it added; a changed spec re-points it). False when
        it was watched already with the same spec."""
        current = {s.name: s for s in self._specs}
        if current.get(spec.name) == spec:
            return False
        current[spec.name] = spec
        self.set_clusters(list(current.values()))
        return True

    def remove_cluster(self, name: str) -> bool:
        """Stop watching a cluster and delete its summary (set_clusters without it). False when it was
        not watched."""
        if all(s.name != name for s in self._specs):
            return False
        self.set_clusters([s for s in self._specs if s.name != name])
        return True

    def assignment(self) -> dict[str, list[str]]:
        return self._running().assignment()

    def status(self) -> dict[str, Any]:
        """The supervisor's view: assignment generation, shard pids, restarts, assignment."""
        return self._running().status()

    def shard_pids(self) -> dict[str, int]:
        """Each shard actor's process id now (from the shard itself)."""
        import ray

        out: dict[str, int] = {}
        for name in self._names:
            actor: Any = ray.get_actor(name)
            info: dict[str, Any] = ray.get(actor.ping.remote(), timeout=30)
            out[name] = int(info["pid"])
        return out

    def health(self) -> dict[str, str]:
        import ray

        out: dict[str, str] = {}
        for name in self._names:
            out.update(ray.get(ray.get_actor(name).health.remote(), timeout=30))
        return out

    def stop(self) -> None:
        """Stop the supervisor and the shards, each step bounded (adapters.ray_stop)."""
        import ray

        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None:  # its checks first: none may make a shard anew meanwhile
            ray_stop.bounded(supervisor.stop, ray_stop.STOP_SECONDS, "stopping the supervisor")
        if not ray.is_initialized():
            return
        ray_stop.stop_actors(None, self._actors, self._names, shutdown=self._started_ray)
        self._actors = []
        self._started_ray = False
