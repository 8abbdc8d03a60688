"""One poller fleet per deployment on a shared Ray cluster (RAY_ADDRESS or settings.rayAddress).

Without a Ray address every replica starts its own Ray and its own shards (adapters.ray_actors
PollerFleet, unchanged). With one, every replica joins that Ray cluster in the namespace named after the
Redis prefix (`namespace`), and the shards belong to the deployment:

    shards      detached actors (lifetime "detached", max_restarts=-1, "SPREAD" over the Ray nodes),
                named as before (gpufed-poller-<prefix>-<i>); a replica that dies, leader or not, takes
                none of them with it. Ray restarts a shard whose process or node died on a live node;
                a shard that publishes nothing for clusterLostSeconds / 2 is killed and so restarted
                (adapters.poller_liveness), wherever it runs.
    the leader  (the holder of the lease, broker.ha.leadership) reconciles them: lead() runs a
                PollerSupervisor in this process (not as an actor: it lives and dies with the lease)
                that makes missing shards, retires shards beyond settings.pollerShards, deals the
                clusters out by the ring (adds, removes, re-points on a config reload or a
                ClusterProfile change) and restarts dead or silent ones. unlead() stops it.
    followers   only read the summaries from Redis, as before; a config change is kept and applied
                if they become the leader.
    shutdown    a replica stops its supervisor (if it leads) and disconnects from Ray; the shards keep
                polling. Only the last replica of the deployment (ReplicaRoster: no other replica seen
                in Redis within ROSTER_TTL_SECONDS) kills them, so that a deployment scaled to zero
                leaves nothing running on the Ray cluster.

Ray token authentication (Ray >= 2.52) is Ray's own: RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or
RAY_AUTH_TOKEN_PATH) in every replica's environment, the same token as the Ray cluster's;
`check_token_environment` names the variable that is missing before ray.init does something less clear.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from adapters import ray_stop
from adapters.ray_actors import PollerFleet, PollerSupervisor
from adapters.redis_store import RedisStateStore
from adapters.shard_ring import HashRing, PollerSpec, shard_name
from broker.health.machine import HealthThresholds

log = logging.getLogger(__name__)

# The supervisor's run id on a shared cluster: one per deployment (not per replica), so a new leader
# resumes the cluster list and its generation where the previous one left them.
SHARED_RUN = "deployment"
ROSTER_SECONDS = 2.0  # how often a replica says it is alive
ROSTER_TTL_SECONDS = 10.0  # a replica not heard of for this long is gone
STARTUP_SECONDS = 60.0  # how long a new leader waits for the shards to answer before it judges them
# Shard numbers looked at beyond pollerShards when retiring surplus shards (settings: at most 64).
MAX_SHARDS = 64


def namespace(prefix: str) -> str:
    """The Ray namespace of the deployment whose Redis prefix this is."""
    return f"gpufed-{prefix}"


def ray_address(settings_address: str | None, env: Mapping[str, str]) -> str | None:
    """The Ray cluster to join: RAY_ADDRESS, else settings.rayAddress; None runs the embedded Ray."""
    return env.get("RAY_ADDRESS") or settings_address or None


def check_token_environment(env: Mapping[str, str]) -> str | None:
    """With RAY_AUTH_MODE=token, what is missing for Ray to find the token (None: nothing)."""
    mode = env.get("RAY_AUTH_MODE", "")
    if mode not in ("", "disabled", "token"):
        return f"RAY_AUTH_MODE={mode!r}: Ray takes 'token' or 'disabled'"
    if mode != "token" or env.get("RAY_AUTH_TOKEN"):
        return None
    path = env.get("RAY_AUTH_TOKEN_PATH")
    if path:
        return None if os.path.isfile(path) else f"RAY_AUTH_TOKEN_PATH={path!r}: no such file"
    default = os.path.join(env.get("HOME", "~"), ".ray", "auth_token")
    if os.path.isfile(os.path.expanduser(default)):
        return None
    return "RAY_AUTH_MODE=token needs RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH): the Ray cluster's token"


class ReplicaRoster:
    """The replicas of one deployment that are alive now, in Redis (`<prefix>:ray:replicas`, replica ->
    the time its entry expires): the last one to stop takes the shards down."""

    def __init__(self, store: RedisStateStore, replica: str) -> None:
        self._store = store
        self._key = f"{store.prefix}:ray:replicas"
        self.replica = replica
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        self._store.client.hset(self._key, self.replica, str(time.time() + ROSTER_TTL_SECONDS))

    def start(self) -> None:
        self.beat()

        def loop() -> None:
            while not self._stop.wait(ROSTER_SECONDS):
                try:
                    self.beat()
                except Exception as exc:  # Redis away: the next beat tries again
                    log.debug("replica roster: %s", exc)

        self._thread = threading.Thread(target=loop, name="gpufed-ray-roster", daemon=True)
        self._thread.start()

    def others(self) -> list[str]:
        """The other replicas heard of within ROSTER_TTL_SECONDS (the entries of replicas gone silent,
        SIGKILLed ones, are deleted on the way)."""
        now = time.time()
        raw: dict[Any, Any] = self._store.client.hgetall(self._key)
        out, gone = [], []
        for name, until in raw.items():
            replica = name.decode() if isinstance(name, bytes) else str(name)
            if float(until) <= now:
                gone.append(replica)
            elif replica != self.replica:
                out.append(replica)
        if gone:
            self._store.client.hdel(self._key, *gone)
        return sorted(out)

    def leave(self) -> bool:
        """Stop beating and leave the roster. True when this was the last replica (or Redis cannot
        tell: then the shards are left running, the safe side)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        try:
            self._store.client.hdel(self._key, self.replica)
            return not self.others()
        except Exception as exc:
            log.warning("replica roster unreadable (%s): the poller shards are left running", exc)
            return False


class SharedPollerFleet(PollerFleet):
    """The deployment's poller shards on a shared Ray cluster (see the module docstring)."""

    def __init__(
        self,
        specs: list[PollerSpec],
        redis_url: str,
        prefix: str,
        address: str,
        replica: str,
        shards: int = 1,
        summary_interval_seconds: float = 0.2,
        health: HealthThresholds | None = None,
    ) -> None:
        super().__init__(specs, redis_url, prefix, shards, summary_interval_seconds, health)
        self.address = address
        self.namespace = namespace(prefix)
        self._store = RedisStateStore(redis_url, prefix=prefix)
        self._roster = ReplicaRoster(self._store, replica)
        self._lock = threading.Lock()
        self._leading = False
        self._epoch = 0  # each lead() and unlead() starts a new one: a stale take-over installs nothing

    def start(self) -> None:
        """Join the Ray cluster in the deployment's namespace. Makes no shard: the leader does."""
        import ray

        problem = check_token_environment(os.environ)
        if problem is not None:
            raise RuntimeError(f"joining the Ray cluster at {self.address}: {problem}")
        if not ray.is_initialized():
            ray.init(
                address=self.address,
                namespace=self.namespace,
                log_to_driver=True,
                configure_logging=False,
            )
        self._roster.start()
        log.info("joined the Ray cluster at %s, namespace %s", self.address, self.namespace)

    def _options(self) -> dict[str, Any]:
        return {
            "summary_interval_seconds": self._interval,
            "health": self._health,
            "worker_logging": True,
            "detached": True,
        }

    def lead(self) -> None:
        """This replica holds the lease now: reconcile the shards (on a thread of its own: the elector
        that calls this must go on renewing the lease)."""
        with self._lock:
            if self._leading:
                return
            self._leading = True
            self._epoch += 1
            epoch = self._epoch
        threading.Thread(target=self._take_charge, args=(epoch,), name="gpufed-ray-lead", daemon=True).start()

    def _take_charge(self, epoch: int) -> None:
        """Make the supervisor (retried every few seconds while this replica still leads), then
        apply this replica's cluster list."""
        supervisor: PollerSupervisor | None = None
        while supervisor is None:
            with self._lock:
                if self._epoch != epoch:
                    return
            try:
                self._retire_surplus()
                supervisor = PollerSupervisor(
                    self._specs,
                    self._names,
                    self._redis_url,
                    self._prefix,
                    SHARED_RUN,
                    self._options(),
                    start=False,
                )
                supervisor.check()  # missing shards made, old assignments re-sent
                self._await_shards()
                supervisor.start(fresh=True)  # their silence counts once they answer
            except Exception:
                log.exception("taking charge of the poller shards failed; retrying")
                if supervisor is not None:
                    supervisor.stop()
                    supervisor = None
                time.sleep(2.0)
        with self._lock:
            if self._epoch != epoch:  # deposed (or deposed and elected again) meanwhile
                supervisor.stop()
                return
            self._supervisor = supervisor
            specs = list(self._specs)
        try:
            assignment = supervisor.set_clusters(specs)  # this replica's clusters, if they differ
            log.info("leading the poller shards: %s", {k: len(v) for k, v in assignment.items()})
        except Exception:
            log.exception("assigning the clusters to the poller shards failed; the checks retry")

    def _await_shards(self, timeout: float = STARTUP_SECONDS) -> None:
        """Until every shard answers a ping, at most `timeout` (a new one imports, connects and lists
        its clusters first: judging its silence before that would kill it mid-start). One that does not
        answer by then (frozen, or on a node Ray has not declared dead yet) is left to the checks."""
        import ray

        deadline = time.monotonic() + timeout
        for name in self._names:
            while time.monotonic() < deadline:
                try:
                    ray.get(ray.get_actor(name).ping.remote(), timeout=max(0.1, deadline - time.monotonic()))
                    break
                except ValueError:  # not registered yet
                    time.sleep(0.5)
                except Exception as exc:  # no answer in time, or dead: the checks take it from here
                    log.warning("poller shard %s does not answer (%s); the checks take it over", name, exc)
                    break

    def unlead(self) -> None:
        """The lease is gone: stop reconciling (the shards go on polling)."""
        with self._lock:
            self._leading = False
            self._epoch += 1
            supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None:
            supervisor.stop()

    @property
    def leading(self) -> bool:
        return self._supervisor is not None

    def _retire_surplus(self) -> None:
        """Kill the shards beyond settings.pollerShards (a deployment that had more)."""
        import ray

        wanted = set(self._names)
        for i in range(len(self._names), MAX_SHARDS):
            name = shard_name(self._prefix, i)
            if name in wanted:
                continue
            try:
                actor = ray.get_actor(name)
            except ValueError:
                break  # shards are numbered from 0: none beyond this one
            log.info("retiring poller shard %s (pollerShards is %d)", name, len(self._names))
            ray.kill(actor, no_restart=True)

    def set_clusters(self, specs: Sequence[PollerSpec]) -> dict[str, list[str]]:
        """The fleet is now these clusters: applied by the leader; a follower keeps them for when it
        leads (every replica reads the same clusters.yaml). Returns {shard: [clusters]}."""
        with self._lock:
            self._specs = list(specs)
            supervisor: PollerSupervisor | None = self._supervisor
        if supervisor is not None:
            return supervisor.set_clusters(list(specs))
        return self.assignment()

    def assignment(self) -> dict[str, list[str]]:
        groups = HashRing(self._names).assign_specs(self._specs)
        return {shard: [s.name for s in group] for shard, group in groups.items()}

    def status(self) -> dict[str, Any]:
        supervisor: PollerSupervisor | None = self._supervisor
        if supervisor is not None:
            return {**supervisor.status(), "leading": True}
        return {"leading": False, "assignment": self.assignment()}

    def stop(self) -> None:
        """Stop reconciling and leave the Ray cluster; the last replica also kills the shards."""
        import ray

        self.unlead()
        last = self._roster.leave()
        if ray.is_initialized():
            if last:
                log.info("the last replica stops: killing the poller shards in %s", self.namespace)
                ray_stop.stop_actors(None, [], self._names, shutdown=False)
            else:
                log.info("other replicas run: the poller shards in %s go on polling", self.namespace)
            ray_stop.bounded(ray.shutdown, ray_stop.SHUTDOWN_SECONDS, "leaving the Ray cluster")
        self._store.close()
