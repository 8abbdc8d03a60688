"""Paged job lists, as Kubernetes lists: the query, the page, and the opaque `continue` token.

A list walks the jobs in the order they were submitted, (submitted time in microseconds, job id): the
position of a job is fixed when it is submitted and never changes, whatever happens to the job later
(the store keeps an index in that order, adapters/redis_job_list.py). A `continue` token carries the
position of the last job the previous page looked at, so a walk that follows the tokens returns every
job that existed when it started exactly once, however jobs move between states meanwhile; jobs
submitted during the walk come at its end (or not at all if it already ended).

    JobQuery      the filters (states, tenant, cluster, name) and `limit` (None: every match at once)
    JobPage       one page: the records, and the position to continue after (None: the last page)
    JobDocPage    the same page as the records' stored JSON documents, undecoded (what the API encodes
                  its answer from: broker.api.list_items), by job id; a document the reader keeps
                  current (KeptItems) is not sent again
    KeptItems     what a reader keeps from earlier pages (the API: each job's encoded item), by job id,
                  and how far it has followed the store's job changes (an opaque cursor): the store
                  drops the items of jobs written since, and sends only the others' documents
    position_of   a job's position in the walk (the index's member)
    encode_continue / decode_continue
                  the token: base64url of {position, digest of the filters}, checksummed. A token
                  edited by hand, cut short, or sent with other filters than the walk began with is a
                  BadContinue (400 naming `continue`). It is not a security boundary: the server applies
                  the caller's tenant to every page whatever the token says.

A page holds at most `limit` jobs. With filters it may hold fewer (even none) and still carry a token:
a page reads at most `scan_budget` index entries, so its cost does not grow with the jobs the broker
holds (Kubernetes lists answer the same way).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass

from broker.core.errors import InvalidRequest
from broker.core.model import JobRecord, JobState

__all__ = [
    "MAX_LIMIT",
    "BadContinue",
    "JobDocPage",
    "JobPage",
    "JobQuery",
    "KeptItems",
    "decode_continue",
    "encode_continue",
    "position_of",
]

MAX_LIMIT = 5000  # the most jobs one page may ask for
_SCAN_FACTOR = 4  # a filtered page reads at most this many index entries per job it may answer
_SCAN_MIN = 1000
_TOKEN_VERSION = 1
_CHECK_BYTES = 8
_CHECK_KEY = b"gpufed-job-list"


class BadContinue(InvalidRequest):
    """A `continue` token that this server did not make for this list (answered 400)."""

    def __init__(self, detail: str) -> None:
        super().__init__("continue", detail)


@dataclass(frozen=True)
class JobQuery:
    """Which jobs a list answers, and how many at most per page (None: all in one answer)."""

    states: tuple[JobState, ...] = ()
    tenant: str | None = None
    cluster: str | None = None
    name: str | None = None
    limit: int | None = None

    def __post_init__(self) -> None:
        if self.limit is not None and not 1 <= self.limit <= MAX_LIMIT:
            raise InvalidRequest("limit", f"must be between 1 and {MAX_LIMIT}, got {self.limit}")

    @property
    def filtered(self) -> bool:
        """Filters the index cannot answer by itself (the tenant has an index of its own)."""
        return bool(self.states) or self.cluster is not None or self.name is not None

    def scan_budget(self) -> int | None:
        """How many index entries one page reads at most (None: no bound, an unpaged list)."""
        if self.limit is None:
            return None
        if not self.filtered:
            return self.limit
        return max(self.limit * _SCAN_FACTOR, _SCAN_MIN)

    def digest(self) -> str:
        """The filters, digested: a token is valid only for the list it was made for."""
        text = json.dumps(
            [sorted(s.value for s in self.states), self.tenant, self.cluster, self.name],
            separators=(",", ":"),
        )
        return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()

    def matches(self, record: JobRecord) -> bool:
        """The filters as a predicate (what the store's index walk applies)."""
        return (
            (not self.states or record.state in self.states)
            and (self.tenant is None or record.request.tenant == self.tenant)
            and (self.cluster is None or record.cluster == self.cluster)
            and (self.name is None or record.request.name == self.name)
        )


@dataclass(frozen=True)
class JobPage:
    """One page of a list: its records in walk order, and where the next page starts (None: last)."""

    items: tuple[JobRecord, ...]
    next_after: str | None


@dataclass(frozen=True)
class JobDocPage:
    """One page as the records' JSON documents (the form TypeAdapter(JobRecord) writes and reads: the
    dataclasses' fields by name, enums by value), in walk order: ids[i]'s document is docs[i], None
    where the reader's KeptItems holds that job's item and it is current; next_after as JobPage's."""

    ids: tuple[str, ...]
    docs: tuple[bytes | None, ...]
    next_after: str | None


class KeptItems:
    """What a reader keeps from earlier pages, by job id, current up to `cursor` in the store's change
    stream ('' : nothing followed yet). Not thread-safe: whoever pages with it reads one page at a time,
    from the page's read until it has kept what it read (else an item read before a change could be
    kept after the store applied the change). Bounded: dropped whole when it holds `max_items`."""

    def __init__(self, max_items: int = 50_000) -> None:
        self.cursor = ""
        self._max = max_items
        self._items: dict[str, bytes] = {}

    def get(self, job_id: str) -> bytes | None:
        return self._items.get(job_id)

    def put(self, job_id: str, item: bytes) -> None:
        if len(self._items) >= self._max:
            self._items.clear()
        self._items[job_id] = item

    def forget(self, job_ids: Iterable[str]) -> None:
        """These jobs were written since the items were read."""
        for job_id in job_ids:
            self._items.pop(job_id, None)

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


def position_of(created_at: float, job_id: str) -> str:
    """A job's place in the walk: fixed-width microseconds, then the id, so that byte order is
    (submitted time, id) order."""
    micros = max(0, round(created_at * 1_000_000))
    return f"{micros:020d}|{job_id}"


def _check(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, key=_CHECK_KEY, digest_size=_CHECK_BYTES).digest()


def encode_continue(query: JobQuery, after: str) -> str:
    """The token for the page after position `after` of the list `query` answers."""
    payload = json.dumps({"v": _TOKEN_VERSION, "a": after, "q": query.digest()}, separators=(",", ":"))
    raw = payload.encode()
    return base64.urlsafe_b64encode(raw + _check(raw)).decode().rstrip("=")


def decode_continue(query: JobQuery, token: str) -> str:
    """The position a token continues after; BadContinue when the token is not one of ours for this
    list (malformed, altered, or from a list with other filters)."""
    try:
        blob = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (ValueError, TypeError):
        raise BadContinue("not a continue token this server made (not base64url)") from None
    raw, check = blob[:-_CHECK_BYTES], blob[-_CHECK_BYTES:]
    if len(blob) <= _CHECK_BYTES or _check(raw) != check:
        raise BadContinue("not a continue token this server made (altered or cut short)")
    try:
        body = json.loads(raw)
        version, after, digest = body["v"], body["a"], body["q"]
    except (ValueError, KeyError, TypeError):
        raise BadContinue("not a continue token this server made") from None
    if version != _TOKEN_VERSION or not isinstance(after, str) or not isinstance(digest, str):
        raise BadContinue("a continue token of another version: start the list again")
    if digest != query.digest():
        raise BadContinue(
            "this token continues a list with other filters (state, tenant, cluster, name): "
            "send the same filters as the first page, or start again without a token"
        )
    return after
