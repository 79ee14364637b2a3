"""A 401 to a credential the gateway obtained, in reverse
(docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge): the pooled sessions of 2026
clients and the relayed requests of 2025 clients send the request once more with a fresh token, as the forward
direction does (``UpstreamClient.post``), and only once. On loopback: a fake token endpoint minting ``tok-1``,
``tok-2``... (client credentials), and the fake 2025 server of ``test_reverse_relay_limits`` refusing revoked
tokens with 401."""

from __future__ import annotations

import itertools
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.config.settings import load_config
from gateway.http.app import GATEWAY, create_app
from tests.gateway.http.test_reverse_relay_limits import LEGACY, META, MODERN, FakeLegacy, _initialize
from tests.waiting import until

SECRET_ENV = "TEST_REVERSE_UPSTREAM_SECRET"


class Refusing(FakeLegacy):
    """Refuses (401) every request whose token is in ``revoked``, or every one with ``refuse_all``."""

    def __init__(self) -> None:
        super().__init__()
        self.revoked: set[str] = set()
        self.refuse_all = False
        self.refused: list[str | None] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization")
        if self.refuse_all or auth in {f"Bearer {t}" for t in self.revoked}:
            self.refused.append(auth)
            return web.Response(status=401, headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
        return await super().handle(request)


@pytest.fixture
async def upstream(aiohttp_server: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Refusing, str, str]:
    """The fake 2025 server, its URL, and a token endpoint minting a new token each time (client credentials)."""
    fake, minted = Refusing(), itertools.count(1)

    async def token(request: web.Request) -> web.Response:
        form = await request.post()
        assert form["grant_type"] == "client_credentials"
        return web.json_response({"access_token": f"tok-{next(minted)}", "token_type": "Bearer", "expires_in": 3600})

    tokens = web.Application()
    tokens.router.add_post("/token", token)
    endpoint = str((await aiohttp_server(tokens)).make_url("/token"))
    monkeypatch.setenv(SECRET_ENV, "gateway-secret")
    return fake, str((await aiohttp_server(fake.app())).make_url("/mcp")), endpoint


async def _gateway(aiohttp_server: Any, upstream: tuple[Refusing, str, str]) -> Any:
    _, url, endpoint = upstream
    config = load_config(upstream_url=url, upstream_era="2025-11-25", upstream_auth={
        "auth": "client_credentials", "token_endpoint": endpoint, "client_id": "gateway", "resource": url,
        "client_secret_env": SECRET_ENV})
    return await aiohttp_server(create_app(config))


def _fetched(server: Any) -> int:
    return int(server.app[GATEWAY].upstream.credentials.fetched)


async def test_a_relayed_request_refused_401_is_sent_once_more_with_a_fresh_token(
        aiohttp_server: Any, upstream: tuple[Refusing, str, str]) -> None:
    fake = upstream[0]
    fake.revoked = {"tok-1"}
    gateway = await _gateway(aiohttp_server, upstream)
    url = str(gateway.make_url("/mcp"))
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=_initialize(1), headers=LEGACY) as resp:
            assert resp.status == 200, await resp.text()
            sid = resp.headers["Mcp-Session-Id"]
        assert fake.refused == ["Bearer tok-1"] and fake.seen == [("initialize", "Bearer tok-2")]
        headers = {**LEGACY, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
        fake.revoked.add("tok-2")  # revoked while cached: the next request meets a 401 too
        async with http.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers=headers) as resp:
            assert (resp.status, await resp.json()) == (200, {"jsonrpc": "2.0", "id": 2, "result": {}})
        assert fake.seen[-1] == ("ping", "Bearer tok-3") and _fetched(gateway) == 3
        fake.refuse_all = True  # a fresh token refused too: that 401 is the answer, never a loop
        async with http.post(url, json={"jsonrpc": "2.0", "id": 3, "method": "ping"}, headers=headers) as resp:
            assert resp.status == 401
        assert fake.refused[-2:] == ["Bearer tok-3", "Bearer tok-4"] and _fetched(gateway) == 4


async def test_a_pooled_sessions_request_refused_401_is_sent_once_more_with_a_fresh_token(
        aiohttp_server: Any, upstream: tuple[Refusing, str, str]) -> None:
    fake = upstream[0]
    fake.revoked = {"tok-1"}
    gateway = await _gateway(aiohttp_server, upstream)
    url = str(gateway.make_url("/mcp"))
    async with aiohttp.ClientSession() as http:
        discover = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}}
        async with http.post(url, json=discover, headers=MODERN) as resp:
            assert resp.status == 200, await resp.text()  # the pool's initialize: refused once, then a fresh token
        assert fake.refused == ["Bearer tok-1"]
        assert [m for m in fake.seen if m[0] != "GET"] == [("initialize", "Bearer tok-2"),
                                                           ("notifications/initialized", "Bearer tok-2")]
        await until(lambda: ("GET", "Bearer tok-2") in fake.seen, "the session's GET stream was asked for")
        fake.revoked.add("tok-2")  # revoked while the session lives
        body = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": META}}
        async with http.post(url, json=body, headers={**MODERN, "Mcp-Method": "tools/list"}) as resp:
            answer = await resp.json()
        assert resp.status == 200 and answer["result"]["resultType"] == "complete", answer
        assert fake.refused[-1] == "Bearer tok-2" and fake.seen[-1] == ("tools/list", "Bearer tok-3")
        assert _fetched(gateway) == 3
