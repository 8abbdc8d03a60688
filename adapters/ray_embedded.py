"""The embedded Ray: how a broker that joins no Ray cluster starts its own (issue 43: its idle cost).

    embedded_ray_options(env)   ray.init's keyword arguments for the embedded Ray
    embedded_ray_env(env)       the environment variables its Python daemons read when they start
    start_embedded_ray(address) ray.init with both: the one place the broker (adapters.ray_actors) and
                                benchmarks.ray_idle start it

Idle, an embedded Ray's daemons wake hundreds of times a second on timers made for large clusters; the
options below space out the ones a one-node Ray with a handful of actors does not need often. What each
one does, what it costs and why it is safe: docs/operations.md, "The embedded Ray". An operator's own
`RAY_<key>` environment variable wins over the value here (the key is then left out of _system_config).

With RAY_ADDRESS (or settings.rayAddress) the broker joins that cluster as it is: none of this applies.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

# RayConfig keys (Ray 2.60's ray_config_def; each can also be set as the environment variable RAY_<key>).
SYSTEM_CONFIG: dict[str, Any] = {
    # raylet: no Python worker per CPU started in advance when the broker connects: each that no shard
    # took stayed idle for good, woken every 10 ms like every Ray worker (~0.8% of a core each here)
    "prestart_worker_first_driver": False,
    # raylet: report its resources to the GCS every 1 s, not every 100 ms (the actors ask for no CPU)
    "raylet_report_resources_period_milliseconds": 1000,
    # raylet: whether a global GC is due (object store pressure) every 10 s, not every 100 ms
    "raylet_check_gc_period_milliseconds": 10_000,
    # raylet: disk usage of the object store's directory every 10 s, not every 100 ms
    "local_fs_monitor_interval_ms": 10_000,
    # raylet: the memory monitor (Ray's OOM killer of workers) reads memory every 2 s, not every 250 ms
    "memory_monitor_refresh_ms": 2000,
    # raylet: idle workers looked for every 5 s, not every 200 ms
    "kill_idle_workers_interval_ms": 5000,
    # raylet: the object manager's timer (transfers between nodes; there is one node) every 1 s
    "object_manager_timer_freq_ms": 1000,
    # raylet: the work backlog (for an autoscaler, which has nothing to scale here) every 5 s
    "report_worker_backlog_interval_ms": 5000,
    # raylet: debug_state.txt written every 10 min, not every 10 s
    "debug_dump_period_milliseconds": 600_000,
    # GCS: the nodes' resource loads (for an autoscaler) pulled every 5 s, not every 1 s
    "gcs_pull_resource_loads_period_milliseconds": 5000,
    # every process: no per-handler timing of the event loops (only shown in debug dumps)
    "event_stats": False,
    # every process: no Ray metrics (the broker's /metrics is its own prometheus_client registry)
    "enable_metrics_collection": False,
    "metrics_report_interval_ms": 60_000,
    # workers: no task events sent to the GCS each second (`ray list tasks` and the dashboard's
    # timeline, neither used; the actor table that the supervisor reads is the GCS's own)
    "task_events_report_interval_ms": 0,
}

# Read by Ray's Python daemons (log_monitor.py, the autoscaler's monitor.py) when they start.
ENV: dict[str, str] = {
    # log_monitor: look for new log files every 2 s, not on every 100 ms pass (it globbed the logs
    # directory 10 times a second); a new worker's lines are read from the file's start all the same
    "RAY_LOG_MONITOR_MANY_FILES_THRESHOLD": "0",
    "LOG_NAME_UPDATE_INTERVAL_S": "2",
    # the autoscaler's monitor (nothing to scale on an embedded Ray): a pass every 60 s, not every 5 s
    "AUTOSCALER_UPDATE_INTERVAL_S": "60",
}


def embedded_ray_options(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """ray.init's arguments for the embedded Ray; a key the environment sets as RAY_<key> is left to it."""
    env = os.environ if env is None else env
    return {
        "include_dashboard": False,
        # the shards' health transitions reach the broker's output, "(PollerShard pid=...)"
        "log_to_driver": True,
        "configure_logging": False,
        "_system_config": {k: v for k, v in SYSTEM_CONFIG.items() if f"RAY_{k}" not in env},
    }


def embedded_ray_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables to add to the environment before ray.init (those not set already)."""
    env = os.environ if env is None else env
    return {k: v for k, v in ENV.items() if k not in env}


def start_embedded_ray(address: str | None = None) -> None:
    """ray.init for the embedded Ray; with `address`, join that cluster as before issue 43."""
    import ray

    if address:
        ray.init(address=address, include_dashboard=False, log_to_driver=True, configure_logging=False)
        return
    os.environ.update(embedded_ray_env())
    ray.init(**embedded_ray_options())
