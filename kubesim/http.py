"""A small HTTP/1.1 server on asyncio streams: keep-alive, chunked streaming, TCP_NODELAY, fault hooks.

Why not aiohttp.web: the simulated API needs to drop, hang and close connections at will (faults), to
stream watch events as chunks with no buffering, and to serve 100 TLS listeners from one loop cheaply.
A request handler is `async (Request, Connection) -> Response | None`; None means the handler wrote the
response itself (a watch stream through `Connection.start_chunked`).
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import contextlib
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

REASONS = {
    200: "OK",
    201: "Created",
    202: "Accepted",
    204: "No Content",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    406: "Not Acceptable",
    409: "Conflict",
    410: "Gone",
    413: "Request Entity Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}
MAX_BODY = 32 * 1024 * 1024
# asyncio's TLS read buffer per connection (CPython's default is 256 KiB): a kubesim process serving 500
# members holds ~6,000 connections, 1.5 GiB of buffers at the default.
TLS_READ_BUFFER_BYTES = 32 * 1024
_CLOSED_ERRORS = (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, OSError)


@dataclass(slots=True)
class Request:
    method: str
    target: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-cased names
    body: bytes = b""

    def param(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else default


@dataclass(slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[[Request, "Connection"], Awaitable[Response | None]]


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str], str]:
    lines = head.decode("latin-1").split("\r\n")
    method, target, version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return method.upper(), target, headers, version


class Connection:
    """One client connection; the handler may take it over to stream a chunked response."""

    def __init__(
        self, server: HttpServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.closed = asyncio.Event()

    @property
    def peer(self) -> Any:
        return self.writer.get_extra_info("peername")

    def abort(self) -> None:
        """Drop the connection now (fault injection, shutdown)."""
        self.closed.set()
        transport = self.writer.transport
        with contextlib.suppress(Exception):
            transport.abort()

    def reset(self) -> None:
        """Drop the connection with a TCP reset (SO_LINGER 0): the peer's next read fails ECONNRESET."""
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.abort()

    async def send(self, resp: Response, keep_alive: bool = True) -> None:
        head = [f"HTTP/1.1 {resp.status} {REASONS.get(resp.status, 'Unknown')}"]
        head.append(f"Content-Type: {resp.content_type}")
        head.append(f"Content-Length: {len(resp.body)}")
        head.extend(f"{k}: {v}" for k, v in resp.headers)
        if not keep_alive:
            head.append("Connection: close")
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + resp.body)
        await self.writer.drain()

    async def start_chunked(
        self, status: int, content_type: str, headers: Sequence[tuple[str, str]] = ()
    ) -> None:
        head = [
            f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}",
            f"Content-Type: {content_type}",
            "Transfer-Encoding: chunked",
            "Cache-Control: no-cache, private",
        ]
        head.extend(f"{k}: {v}" for k, v in headers)
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        await self.writer.drain()

    def write_chunk(self, data: bytes) -> None:
        if data:
            self.writer.write(b"%x\r\n%s\r\n" % (len(data), data))

    def write_chunks(self, chunks: list[bytes]) -> None:
        """Several chunks in one write (one TLS record batch, one send)."""
        self.writer.write(b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks if c))

    async def drain(self) -> None:
        await self.writer.drain()

    async def end_chunked(self) -> None:
        self.writer.write(b"0\r\n\r\n")
        await self.writer.drain()


class HttpServer:
    """Serves one listening socket (TLS or plain) with a handler; can close, hang up and reopen."""

    def __init__(
        self, handler: Handler, host: str, port: int = 0, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self._handler = handler
        self.host = host
        self.port = port
        self._ssl = ssl_context
        self._server: asyncio.Server | None = None
        self.connections: set[Connection] = set()

    @property
    def listening(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        """Bind (the same port again after a close) and accept."""
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
            sock.listen(512)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER_BYTES
        tls: dict[str, Any] = {"ssl": self._ssl, "ssl_handshake_timeout": 10} if self._ssl else {}
        self._server = await asyncio.start_server(self._serve, sock=sock, limit=256 * 1024, **tls)

    async def close(self, drop_connections: bool = True) -> None:
        """Stop listening (new connections are refused); optionally drop the open ones too."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        if drop_connections:
            for conn in list(self.connections):
                conn.abort()
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)

    def reset_connections(self) -> int:
        """Reset every open connection (the listener stays open); returns how many."""
        conns = list(self.connections)
        for conn in conns:
            conn.reset()
        return len(conns)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Connection(self, reader, writer)
        self.connections.add(conn)
        try:
            while not conn.closed.is_set():
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.LimitOverrunError:
                    await conn.send(Response(431, b"request header too large"), keep_alive=False)
                    break
                try:
                    method, target, headers, version = _parse_head(head)
                    body = await self._read_body(reader, headers)
                except ValueError:
                    await conn.send(Response(400, b"malformed request", "text/plain"), keep_alive=False)
                    break
                if body is None:
                    await conn.send(Response(413, b"body too large"), keep_alive=False)
                    break
                split = urlsplit(target)
                req = Request(
                    method,
                    target,
                    unquote(split.path),
                    parse_qs(split.query, keep_blank_values=True),
                    headers,
                    body,
                )
                resp = await self._handler(req, conn)
                keep_alive = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
                if resp is None:  # the handler streamed a response; the stream ends the exchange
                    if not keep_alive:
                        break
                    continue
                await conn.send(resp, keep_alive)
                if not keep_alive:
                    break
        except _CLOSED_ERRORS:
            pass
        except asyncio.CancelledError:
            conn.abort()
            raise
        finally:
            self.connections.discard(conn)
            conn.closed.set()
            with contextlib.suppress(Exception):
                writer.close()

    @staticmethod
    async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes | None:
        if headers.get("transfer-encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            total = 0
            while True:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (await reader.readuntil(b"\r\n")) != b"\r\n":
                        pass
                    return b"".join(parts)
                total += size
                if total > MAX_BODY:
                    return None
                parts.append(await reader.readexactly(size))
                await reader.readexactly(2)
        length = int(headers.get("content-length") or 0)
        if length > MAX_BODY:
            return None
        return await reader.readexactly(length) if length else b""
