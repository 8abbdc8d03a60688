"""The async member client's bearer token: read from the kubeconfig's refresh hook once per
BEARER_RECHECK_SECONDS, not on every request, and read again at once after a 401 (a rotated token).

A real aiohttp server on loopback stands for the member's API server: it accepts one token at a time."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from kubernetes import client

from adapters.kube_async import AsyncKubeRest
from broker.core.errors import ClusterForbidden


class Member:
    """An API server that answers GET /version to one accepted bearer token, 401 to any other."""

    def __init__(self) -> None:
        self.accepted = "Bearer first"
        self.seen: list[str] = []

    async def version(self, request: web.Request) -> web.Response:
        token = request.headers.get("Authorization", "")
        self.seen.append(token)
        if token != self.accepted:
            return web.json_response(
                {"kind": "Status", "reason": "Unauthorized", "message": "bad token", "code": 401}, status=401
            )
        return web.json_response({"major": "1", "minor": "37", "gitVersion": "v1.37.0"})


def configuration(host: str, tokens: dict[str, str], hook_calls: list[int]) -> client.Configuration:
    """A client Configuration whose refresh hook hands out tokens["current"], as the kubeconfig loader's
    hook does for an exec plugin's token."""
    cfg = client.Configuration(host=host, api_key={"BearerToken": tokens["current"]})

    def refresh(c: client.Configuration) -> None:
        hook_calls.append(1)
        c.api_key["BearerToken"] = tokens["current"]

    cfg.refresh_api_key_hook = refresh  # type: ignore[assignment]  # the client types its hook as None
    return cfg


def test_the_token_is_not_reread_per_request_but_a_401_rereads_it() -> None:
    asyncio.run(_rotation())


async def _rotation() -> None:
    server = Member()
    app = web.Application()
    app.router.add_get("/version", server.version)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host = f"http://127.0.0.1:{runner.addresses[0][1]}"
    tokens = {"current": "Bearer first"}
    hook_calls: list[int] = []
    rest = AsyncKubeRest("m1", configuration(host, tokens, hook_calls), connect_timeout=2.0)
    try:
        for _ in range(20):
            await rest.probe((2.0, 2.0))
        assert server.seen == ["Bearer first"] * 20
        assert len(hook_calls) == 1, "the refresh hook ran for every request"

        # The token is rotated: the member accepts only the new one, the hook now hands it out.
        server.accepted = tokens["current"] = "Bearer second"
        with pytest.raises(ClusterForbidden):
            await rest.probe((2.0, 2.0))  # sent with the token read before the rotation
        await rest.probe((2.0, 2.0))  # the 401 made it read the token again
        assert server.seen[-2:] == ["Bearer first", "Bearer second"]
    finally:
        await rest.close()
        await runner.cleanup()
