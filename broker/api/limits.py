"""The request-size limit of the HTTP API, as ASGI middleware.

Owns BodyLimit: a request whose Content-Length is over the limit is answered 413 before its body is
read; a chunked body is counted as it arrives and answered 413 at the limit (the app then sees the
client gone, and anything it answers is dropped). The body never reaches
the JSON parser, so a 10 MB submission costs nothing but the bytes read up to the limit.
"""

from __future__ import annotations

import json

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["DEFAULT_MAX_BODY_BYTES", "BodyLimit"]

DEFAULT_MAX_BODY_BYTES = 1 << 20


def _body(max_bytes: int) -> bytes:
    return json.dumps(
        {"error": "too-large", "message": f"request body over the limit of {max_bytes} bytes"}
    ).encode()


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _refuse(self, send: Send) -> None:
        body = _body(self.max_bytes)
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    await self._refuse(send)
                    return
        seen = 0
        refused = False  # the 413 has been sent: whatever the app answers after is dropped

        async def counting_receive() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request" and not refused:
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    refused = True
                    await self._refuse(send)
                    return {"type": "http.disconnect"}  # the app stops reading, as if the client left
            return message

        async def guarded_send(message: Message) -> None:
            if not refused:
                await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except ClientDisconnect:
            if not refused:  # a real client that left: not ours to answer
                raise
