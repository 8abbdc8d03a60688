"""Slow clients are cut off: a deadline for the request headers and one for the body (issue 21, case 7).

uvicorn bounds an idle keep-alive connection but not a request that arrives slowly: 2,000 connections
that each sent half a request were held open for as long as their clients liked (slow-loris). This
module's HTTP protocol (uvicorn's httptools protocol, the C parser, with two timers) closes a connection
whose request headers are not complete `headers_s` seconds after it opened (or after its previous
response), and one whose body is not complete `body_s` seconds after its headers. The app never sees
either request. The composition root passes settings.requestHeadersSeconds and requestBodySeconds
(default 10 s and 60 s, also GPUFED_REQUEST_HEADERS_SECONDS / GPUFED_REQUEST_BODY_SECONDS;
docs/operations.md).

    timed_protocol(headers_s, body_s)   the class to pass as uvicorn.Config(http=...)

httptools rather than h11: h11 parses in Python. Same deadlines, 0.72-0.79 ms of API CPU per submit instead
of 0.85-0.98 ms (`python -m benchmarks.placement submit --audited`, 3 pairs, docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger(__name__)

HEADERS_SECONDS = 10.0
BODY_SECONDS = 60.0


class _TimedHttpToolsProtocol(HttpToolsProtocol):
    headers_s = HEADERS_SECONDS
    body_s = BODY_SECONDS

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = None
        self._waiting_for = "headers"
        self._arm(self.headers_s, "headers")

    def _arm(self, seconds: float, what: str) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._waiting_for = what
        self._deadline = self.loop.call_later(seconds, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            log.debug("closing a connection whose request %s did not arrive in time", self._waiting_for)
            self.transport.close()

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._arm(self.body_s, "body")  # a request without a body completes in the same feed: disarmed

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()  # the whole request is in: the app's time is not the client's

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.timeout_keep_alive_task is not None:  # kept alive and idle: the next request's deadline
            self._arm(self.headers_s, "headers")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def timed_protocol(headers_s: float = HEADERS_SECONDS, body_s: float = BODY_SECONDS) -> type[Any]:
    return type(
        "TimedHttpToolsProtocol", (_TimedHttpToolsProtocol,), {"headers_s": headers_s, "body_s": body_s}
    )
