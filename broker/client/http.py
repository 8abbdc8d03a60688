"""The broker's HTTP API for Python programs (and the CLI): one httpx client, typed calls, paging, waiting.

    Client(server=None, token=None, context=None)
        connects as the CLI does (broker.client.config.resolve_target: arguments, then $GPUFED_URL /
        $GPUFED_TOKEN, then the config file's context); a `with` block closes it.
    submit(job, dry_run=False, idempotency_key=None)   a dict (native spec, batch/v1 Job or a kind:
        JobSet, TrainJob, PyTorchJob, RayJob), YAML text or a path to a YAML/JSON file; an `array`
        answers {kind: JobList, group, items}
    get / resolve_job / jobs (every page) / pages (one page at a time) / wait / events / watch / logs /
    cancel / groups / group / cancel_group / hold / release / tenants
Every failure is a ClientError: the broker's message (and field), the HTTP status, an exit code.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import EventSource

from broker.client.config import Target, resolve_target
from broker.client.errors import EXIT_AUTH, EXIT_FAILED, EXIT_UNREACHABLE, EXIT_USAGE, ClientError

__all__ = ["DEFAULT_CHUNK_SIZE", "TERMINAL", "Client"]

DEFAULT_CHUNK_SIZE = 500  # jobs per page when a list is walked (kubectl's --chunk-size default)
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED", "LOST")


def _message(r: httpx.Response) -> str:
    try:
        body = r.json()
    except ValueError:
        return r.text.strip().splitlines()[0] if r.text.strip() else r.reason_phrase
    if not isinstance(body, Mapping):
        return r.reason_phrase
    message = str(body.get("message") or body.get("detail") or r.reason_phrase)
    fields = body.get("fields") or []
    if fields and len(fields) == 1 and fields[0].get("field") and fields[0]["field"] not in message:
        message = f"{fields[0]['field']}: {message}"
    return message


class Client:
    """The broker's HTTP API; closes with the `with` block (or close())."""

    def __init__(
        self,
        target: Target | None = None,
        timeout: float = 30.0,
        *,
        server: str | None = None,
        token: str | None = None,
        context: str | None = None,
    ) -> None:
        """`target`, or `server` / `token` / `context` resolved as the CLI resolves its flags (then
        $GPUFED_URL, $GPUFED_TOKEN and the config file's context)."""
        if target is None:
            target = resolve_target(
                server or os.environ.get("GPUFED_URL"),
                token or os.environ.get("GPUFED_TOKEN"),
                context or os.environ.get("GPUFED_CONTEXT"),
            )
        self.target = target
        headers = {"Authorization": f"Bearer {target.token}"} if target.token else {}
        self.http = httpx.Client(
            base_url=target.server, headers=headers, timeout=timeout, verify=target.verify
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check(self, r: httpx.Response) -> None:
        if r.status_code < 400:
            return
        text = _message(r)
        if r.status_code in (401, 403):
            raise ClientError(f"{r.status_code} {text}", EXIT_AUTH, r.status_code)
        raise ClientError(f"{r.status_code} {text}", EXIT_FAILED, r.status_code)

    def _unreachable(self, e: httpx.HTTPError) -> ClientError:
        cause = str(e) or type(e).__name__
        return ClientError(f"cannot reach the broker at {self.target.server}: {cause}", EXIT_UNREACHABLE)

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            r = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as e:
            raise self._unreachable(e) from None
        self._check(r)
        try:
            return r.json()
        except ValueError:
            raise ClientError(f"{method} {path}: the broker answered {r.status_code} without JSON") from None

    def list_all(
        self, path: str, params: Sequence[tuple[str, str]] = (), chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> list[dict[str, Any]]:
        """Every item of a paged list, fetched `chunk_size` at a time by following metadata.continue
        (kubectl's --chunk-size; 0: one unpaged request)."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page_params = list(params)
            if chunk_size > 0:
                page_params.append(("limit", str(chunk_size)))
            if token:
                page_params.append(("continue", token))
            body = self.call("GET", path, params=page_params)
            items.extend(body.get("items", []))
            token = (body.get("metadata") or {}).get("continue")
            if not token or chunk_size <= 0:
                return items

    @contextmanager
    def stream(
        self, path: str, params: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> Iterator[httpx.Response]:
        """A streamed GET (logs, events); errors before the first byte as ClientError."""
        try:
            with self.http.stream(
                "GET", path, params=params, timeout=httpx.Timeout(30.0, read=None), **kwargs
            ) as r:
                if r.status_code >= 400:
                    r.read()
                    self._check(r)
                yield r
        except httpx.HTTPError as e:
            raise self._unreachable(e) from None

    def resolve_job(self, ref: str) -> dict[str, Any]:
        """The job with this id, or else the one job with this name; ambiguous names are refused."""
        try:
            r = self.http.get(f"/v1/jobs/{ref}")
        except httpx.HTTPError as e:
            raise self._unreachable(e) from None
        if r.status_code != 404:
            self._check(r)
            job: dict[str, Any] = r.json()
            return job
        matches = self.list_all("/v1/jobs", [("name", ref)])
        if not matches:
            raise ClientError(f"no job with id or name {ref!r}")
        live = [j for j in matches if j.get("state") not in ("SUCCEEDED", "FAILED", "CANCELLED", "LOST")]
        if len(matches) > 1 and len(live) == 1:  # names are unique among live jobs: the name means it
            return dict(live[0])
        if len(matches) > 1:
            ids = ", ".join(j["id"] for j in matches[:5]) + (", ..." if len(matches) > 5 else "")
            raise ClientError(f"{len(matches)} jobs are named {ref!r} ({ids}): give an id", EXIT_USAGE)
        return dict(matches[0])

    # ------------------------------------------------------------------ jobs

    def submit(
        self,
        job: Mapping[str, Any] | str | Path,
        *,
        dry_run: bool = False,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Submit a job: a dict (a native spec, a batch/v1 Job or a workload kind such as a JobSet), YAML
        or JSON text, or a path to such a file. Returns the job (an array: {kind: JobList, group, items};
        dry_run: what submit would answer, with `explain`, and nothing is created)."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        params = {"dryRun": "All"} if dry_run else None
        if isinstance(job, Path):
            job = job.read_text()
        if isinstance(job, str):
            headers["Content-Type"] = "application/yaml"
            body: dict[str, Any] = self.call(
                "POST", "/v1/jobs", content=job.encode(), headers=headers, params=params
            )
        else:
            body = self.call("POST", "/v1/jobs", json=dict(job), headers=headers, params=params)
        return body

    def get(self, job_id: str) -> dict[str, Any]:
        """One job by id."""
        body: dict[str, Any] = self.call("GET", f"/v1/jobs/{job_id}")
        return body

    def jobs(
        self, states: Sequence[str] = (), name: str | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> list[dict[str, Any]]:
        """Every job this caller sees (optionally in these states, of this name), oldest first, fetched
        `chunk_size` at a time."""
        params = [("state", s) for s in states] + ([("name", name)] if name else [])
        return self.list_all("/v1/jobs", params, chunk_size)

    def pages(
        self, limit: int = DEFAULT_CHUNK_SIZE, states: Sequence[str] = ()
    ) -> Iterator[list[dict[str, Any]]]:
        """The job list one page at a time (at most `limit` jobs each), following `continue` tokens."""
        token: str | None = None
        while True:
            params = [("state", s) for s in states] + [("limit", str(limit))]
            if token:
                params.append(("continue", token))
            body = self.call("GET", "/v1/jobs", params=params)
            yield list(body.get("items", []))
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                return

    def wait(self, job_id: str, timeout: float | None = None, interval: float = 1.0) -> dict[str, Any]:
        """The job once it has ended (SUCCEEDED, FAILED, CANCELLED, LOST); ClientError after `timeout`."""
        started = time.monotonic()
        while True:
            job = self.get(job_id)
            if job["state"] in TERMINAL:
                return job
            if timeout is not None and time.monotonic() - started > timeout:
                raise ClientError(f"job {job_id} still {job['state']} after {timeout:g}s")
            time.sleep(interval)

    def events(self, job_id: str) -> list[dict[str, Any]]:
        """A job's transitions so far, oldest first."""
        items: list[dict[str, Any]] = self.call("GET", f"/v1/jobs/{job_id}/events")["items"]
        return items

    def watch(self, job_id: str) -> Iterator[dict[str, Any]]:
        """A job's transitions as they happen (the SSE stream), ending after its terminal one."""
        with self.stream(f"/v1/jobs/{job_id}/events", params={"watch": "1"}) as resp:
            for sse in EventSource(resp).iter_sse():
                if sse.event != "transition":
                    continue
                event: dict[str, Any] = json.loads(sse.data)
                yield event
                if event.get("state") in TERMINAL:
                    return

    def logs(self, job_id: str, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        """The job's container log, line by line (follow: until the container exits)."""
        params: dict[str, Any] = {}
        if follow:
            params["follow"] = "1"
        if tail is not None:
            params["tailLines"] = str(tail)
        with self.stream(f"/v1/jobs/{job_id}/logs", params=params) as resp:
            yield from resp.iter_lines()

    def cancel(self, job_id: str) -> dict[str, Any]:
        """Cancel a job (its workload is deleted from its cluster); the job, CANCELLED."""
        body: dict[str, Any] = self.call("DELETE", f"/v1/jobs/{job_id}")
        return body

    def hold(self, job_id: str) -> dict[str, Any]:
        """Hold a job not placed yet (PENDING "held by ..." until released)."""
        body: dict[str, Any] = self.call("POST", f"/v1/jobs/{job_id}/hold")
        return body

    def release(self, job_id: str) -> dict[str, Any]:
        """Release a held job."""
        body: dict[str, Any] = self.call("POST", f"/v1/jobs/{job_id}/release")
        return body

    # ------------------------------------------------------------------ groups and tenants

    def groups(self) -> list[dict[str, Any]]:
        """The groups this caller sees: {name, tenant, counts, total} each."""
        items: list[dict[str, Any]] = self.call("GET", "/v1/groups")["items"]
        return items

    def group(self, name: str) -> dict[str, Any]:
        """A group: {name, tenant, counts (by state), total, items (its jobs)}."""
        body: dict[str, Any] = self.call("GET", f"/v1/groups/{name}")
        return body

    def cancel_group(self, name: str) -> dict[str, Any]:
        """Cancel every live job of a group: {name, cancelled (ids), counts}."""
        body: dict[str, Any] = self.call("POST", f"/v1/groups/{name}/cancel")
        return body

    def tenants(self) -> list[dict[str, Any]]:
        """Quota, use, borrowing and jobs per tenant (a user sees its own tenant)."""
        items: list[dict[str, Any]] = self.call("GET", "/v1/tenants")["items"]
        return items
