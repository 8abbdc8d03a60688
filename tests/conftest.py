"""Shared pytest fixtures, session-scoped servers first.

Fixtures here:
    redis_server   a private `redis-server` (from PATH) on a free port for this test session, no persistence
    redis_url      its URL, redis://127.0.0.1:<port>/0
    admin_tokens   (a helper) a tokens file with one admin, for a broker started from a test's own config
    ray_session    Ray started once in this test process (a pytest-xdist worker), stopped at the end
    worker_ray     that Ray's address, for `gpufed serve` processes that join it (RAY_ADDRESS) instead of
                   starting a Ray each; their detached poller shards are killed after the test

Other engineers add their fixtures below their own section header.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import yaml

from adapters import redis_process
from adapters.redis_process import RedisProcess, private_redis

T = TypeVar("T")

# --------------------------------------------------------------------------- redis (adapters)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    """A private redis-server for this test session; stopped at the end."""
    if shutil.which("redis-server") is None:
        pytest.fail(
            "redis-server is not on PATH: the integration tests need it (apt-get install redis-server)"
        )
    with private_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisProcess) -> str:
    """URL of the session's private redis-server (db 0). Tests isolate themselves by key prefix."""
    return redis_server.url


# --------------------------------------------------------------------------- ray and the broker (service)


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """Ray started once per test session (never per test), stopped at the end."""
    import ray

    from adapters import ray_embedded

    if not ray.is_initialized():  # the broker's embedded Ray, its output not copied to the tests'
        os.environ.update(ray_embedded.embedded_ray_env())
        ray.init(**{**ray_embedded.embedded_ray_options(), "log_to_driver": False})
    try:
        yield
    finally:
        ray.shutdown()


class WorkerRay:
    """This pytest worker's Ray (ray_session above), for brokers that join it rather than start a
    Ray of their own (RAY_ADDRESS: docs/operations.md "Running on a Ray cluster"): a broker process then
    costs no Ray start-up (GCS, raylet, dashboard, agents: seconds of CPU each on the 2-core CI host).
    Each broker's shards are detached actors in the Ray namespace of its Redis prefix (adapters.ray_shared),
    so tests never see each other's; a SIGKILLed broker leaves them polling, so `clear` kills them after
    each test. Tests about the broker's own Ray (its processes gone after SIGTERM or SIGKILL, its stop
    after a Redis loss) start brokers without it."""

    def __init__(self) -> None:
        import ray

        self.address: str = ray.get_runtime_context().gcs_address

    def clear(self) -> None:
        """Kill every broker's detached poller shard left in this Ray (namespaces gpufed-<prefix>)."""
        import ray

        for actor in ray.util.list_named_actors(all_namespaces=True):
            if actor["namespace"].startswith("gpufed-"):
                with contextlib.suppress(ValueError):  # gone meanwhile
                    ray.kill(ray.get_actor(actor["name"], namespace=actor["namespace"]), no_restart=True)


@pytest.fixture
def worker_ray(ray_session: None) -> Iterator[WorkerRay]:
    """This worker's Ray for brokers to join; request it before any fixture that stops those brokers
    (fixtures end in the reverse order of their set-up: the shards are killed once the brokers are gone)."""
    shared = WorkerRay()
    try:
        yield shared
    finally:
        shared.clear()


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (for servers tests start)."""
    return redis_process.free_port()


def wait_for(
    predicate: Callable[[], object], timeout: float, interval: float = 0.05, what: str = "condition"
) -> object:
    """Poll `predicate` until it returns something truthy; fail the test with `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def poll_for(what: str, probe: Callable[[], T | None], deadline_s: float, interval: float = 0.02) -> T:
    """Poll until probe() returns something truthy and return that; fail naming `what` and the last value
    seen (wait_for above does the same for an untyped predicate, naming only `what`)."""
    end = time.monotonic() + deadline_s
    last: T | None = None
    while time.monotonic() < end:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"not within {deadline_s}s: {what} (last: {last!r})")


# --------------------------------------------------------------------------- auth (tenancy)


def admin_tokens(directory: Path) -> tuple[Path, dict[str, str]]:
    """A tokens file (docs/tenancy.md) with one admin of the tenant "default" in `directory`, and the
    header that sends its token: for tests that start a broker from their own config (auth is on)."""
    token = secrets.token_urlsafe(24)
    path = directory / "tokens.yaml"
    path.write_text(
        yaml.safe_dump([{"name": "test-admin", "tenant": "default", "role": "admin", "token": token}])
    )
    return path, {"Authorization": f"Bearer {token}"}


# --------------------------------------------------------------------------- kubesim's own log (issue 7)


class _KubesimErrors(logging.Handler):
    """Every ERROR (or traceback) kubesim's server code logs while the suite runs in this process."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(
            f"{record.name}: {record.getMessage()}" + (" (with traceback)" if record.exc_info else "")
        )


_KUBESIM_ERRORS = _KubesimErrors()


# --------------------------------------------------------------------------- reruns (integration, e2e)

# An integration or end-to-end test runs real processes (Redis, kubesim servers, Ray, brokers) on a
# 2-core CI host; one that fails is run once more (pytest-rerunfailures) and the summary names it as
# RERUN and counts the reruns. A pure unit test never is, and neither is a test marked `race` (a
# concurrency test: concurrent placers, two brokers, service races, crash safety): a race that fails
# one run in ten must fail the suite, not turn green on its second try. If a race test is rerun all the
# same (someone passed --reruns), the session fails. A rerun is a flake with a cause to fix, not a pass
# to forget: README.md "Tests" lists the causes found so far.
RERUNS = 1


# --------------------------------------------------------------------------- the order of files (xdist)

# Under `-n N --dist loadfile` each worker takes the next file in collection order when it is nearly out
# of work (pyproject.toml turns off xdist's own reorder, which put the files with the most tests first:
# the many quick unit files ahead of the one-test files that start a fleet, so those ran last, on a
# single worker, while the others had nothing left). The costliest files start first, then every other
# integration and end-to-end file, then the unit tests, which fill the workers up to the end. A file's
# own tests keep their order. The list, costliest first: the files of over ~12 s (setup, tests and
# teardown summed from --durations) in a measured run (docs/benchmarks.md, "The demo and the test
# suite"; 2026-12-03, after the broker processes of the crash-safety files joined the worker's Ray);
# a file missing from it only starts later. test_crash_safety.py was split in two for the same
# reason: it alone was the longest file by far.
SLOWEST_FILES = (
    "tests/integration/test_failover.py",
    "tests/integration/test_ray_shared_fleet.py",
    "tests/integration/test_crash_safety.py",
    "tests/integration/test_crash_safety_leaders.py",
    "tests/integration/test_poller_fleet.py",
    "tests/e2e/test_readme.py",
    "tests/integration/test_cluster_health.py",
    "tests/integration/test_following.py",
    "tests/integration/test_workload_kinds.py",
    "tests/integration/test_member_watch_pacing.py",
    "tests/e2e/test_dashboard.py",
    "tests/integration/test_rebuild_with_a_member_down.py",
    "tests/integration/test_two_brokers.py",
    "tests/integration/test_config_reload.py",
    "tests/integration/test_kubesim_kubectl_ops.py",
    "tests/integration/test_poller_liveness.py",
    "tests/integration/test_clusterprofile_fleet.py",
    "tests/integration/test_checkpoint_moves.py",
    "tests/integration/test_hub_kubectl.py",
    "tests/e2e/test_demo.py",
    "tests/integration/test_member_rbac.py",
    "tests/integration/test_job_informer.py",
    "tests/integration/test_nvlink_fleet.py",
    "tests/unit/test_rerun_policy.py",
    "tests/integration/test_member_trouble_kubectl.py",
    "tests/integration/test_redis_sentinel.py",
    "tests/integration/test_burst_kubesim.py",
    "tests/integration/test_oidc_audit.py",
    "tests/integration/test_openapi_contract.py",
    "tests/integration/test_api_processes.py",
    "tests/integration/test_auth_serve.py",
    "tests/integration/test_shutdown_after_redis_loss.py",
)


def _file_rank(item: pytest.Item) -> tuple[int, int]:
    path = item.nodeid.split("::", 1)[0]
    if path in SLOWEST_FILES:
        return (0, SLOWEST_FILES.index(path))
    if path.startswith(("tests/integration/", "tests/e2e/")):
        return (1, 0)
    return (2, 0)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_file_rank)  # stable: a file's tests stay together and in their order
    for item in items:
        if item.get_closest_marker("flaky") is not None:
            continue
        if item.get_closest_marker("race") is not None:
            item.add_marker(pytest.mark.flaky(reruns=0))  # wins over a --reruns on the command line
            continue
        real_parts = item.get_closest_marker("integration") or item.get_closest_marker("e2e")
        if real_parts is not None:
            item.add_marker(pytest.mark.flaky(reruns=RERUNS))


_RERUNS: list[str] = []  # node ids of the tests rerun, once per rerun (on the controller under xdist)
_RACE_RERUNS: list[str] = []
_RERUN_WHY: dict[str, list[str]] = {}  # node id -> why each of its failed tries failed


def _why(report: pytest.TestReport) -> str:
    """A failed try's cause in one line: its phase and its `E ` lines, the first and the last three (an
    assertion's message may run long; its comparison comes last), else the report's last line. The
    summary prints it, since a rerun that then passes shows no failure: without it a flake's cause is lost
    with the run."""
    text = report.longreprtext or ""
    errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    errors = [line for line in errors if line]
    if len(errors) > 4:
        errors = [errors[0], "...", *errors[-3:]]
    lines = errors or text.strip().splitlines()[-1:]
    return f"({report.when}) " + " | ".join(lines)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if str(report.outcome) == "rerun":  # pytest-rerunfailures sets an outcome pytest does not type
        _RERUNS.append(report.nodeid)
        _RERUN_WHY.setdefault(report.nodeid, []).append(_why(report))
        if "race" in report.keywords:
            _RACE_RERUNS.append(report.nodeid)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say how many tests were run again and which (none is the goal; each one is a flake to fix)."""
    terminalreporter.write_line(f"reruns: {len(_RERUNS)}" + (":" if _RERUNS else ""))
    for nodeid in sorted(set(_RERUNS)):
        terminalreporter.write_line(f"  RERUN {nodeid} ({_RERUNS.count(nodeid)}x)")
        for why in _RERUN_WHY.get(nodeid, []):
            terminalreporter.write_line(f"    failed first: {why[:500]}")
    if _RACE_RERUNS:
        terminalreporter.write_line(
            "race tests were rerun (never allowed: a race must fail the suite): " + ", ".join(_RACE_RERUNS)
        )


def pytest_sessionstart(session: pytest.Session) -> None:
    logging.getLogger("kubesim").addHandler(_KUBESIM_ERRORS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """Under pytest-xdist: a worker's kubesim errors reach the controller, which fails the session."""
    output = getattr(node, "workeroutput", None) or {}
    _KUBESIM_ERRORS.records.extend(output.get("kubesim_errors", []))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The suite fails when any kubesim server, serving any test, logged an error or a traceback: a
    simulated cluster that crashes on what real clients send would hide broker bugs."""
    logging.getLogger("kubesim").removeHandler(_KUBESIM_ERRORS)
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller says it
        workeroutput["kubesim_errors"] = list(_KUBESIM_ERRORS.records)
        return
    if _RACE_RERUNS:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if _KUBESIM_ERRORS.records:
        print("\nkubesim logged errors during the test session:", *_KUBESIM_ERRORS.records[:20], sep="\n  ")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
