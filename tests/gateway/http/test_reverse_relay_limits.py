"""The gateway's own rules over 2025-era upstreams
(docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge): relayed 2025 sessions count against
``[gateway.sessions]``'s bounds, and the relay and the pooled sessions send the upstream's configured credential
(``[gateway.upstream_auth]``), never a token issued for the gateway. The legacy server is a tiny aiohttp fake on
loopback that records what reached it."""

from __future__ import annotations

import uuid
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from adapters.errors import limit_rejection
from gateway.config.settings import load_config
from gateway.http.app import create_app
from tests.gateway.auth.keyserver import KeyServer

PUBLIC = "http://127.0.0.1:8808"
TOKEN_ENV = "TEST_LEGACY_UPSTREAM_TOKEN"
LEGACY = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
MODERN = {**LEGACY, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover"}
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "1"}}


class FakeLegacy:
    """A 2025-11-25 server: sessions, ``initialize``, any other request answered ``{}``, DELETE; no GET stream.
    ``seen``: (method, Authorization) of every request."""

    def __init__(self) -> None:
        self.sessions: set[str] = set()
        self.seen: list[tuple[str, str | None]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/mcp", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        auth, sid = request.headers.get("Authorization"), request.headers.get("Mcp-Session-Id")
        if request.method != "POST":
            self.seen.append((request.method, auth))
            if request.method == "DELETE" and sid in self.sessions:
                self.sessions.discard(sid)
                return web.Response(status=200)
            return web.Response(status=405)
        message = await request.json()
        self.seen.append((message.get("method", "response"), auth))
        if message.get("method") == "initialize":
            sid = uuid.uuid4().hex
            self.sessions.add(sid)
            result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                      "serverInfo": {"name": "fake-legacy", "version": "1"}}
            return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": result},
                                     headers={"Mcp-Session-Id": sid})
        if sid not in self.sessions:
            return web.Response(status=404)
        if "id" not in message or "method" not in message:
            return web.Response(status=202)
        return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": {}})


@pytest.fixture
async def legacy(aiohttp_server: Any) -> tuple[FakeLegacy, str]:
    fake = FakeLegacy()
    server = await aiohttp_server(fake.app())
    return fake, str(server.make_url("/mcp"))


async def _gateway(aiohttp_server: Any, url: str, **overrides: Any) -> str:
    config = load_config(upstream_url=url, upstream_era="2025-11-25", **overrides)
    return str((await aiohttp_server(create_app(config))).make_url("/mcp"))


def _initialize(ident: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "1"}}}


async def _init(http: aiohttp.ClientSession, url: str, ident: int, token: str) -> tuple[int, Any, str | None]:
    headers = {**LEGACY, "Authorization": f"Bearer {token}"}
    async with http.post(url, json=_initialize(ident), headers=headers) as resp:
        return resp.status, await resp.json(), resp.headers.get("Mcp-Session-Id")


async def test_relayed_sessions_count_against_the_per_principal_bound(aiohttp_server: Any,
                                                                      legacy: tuple[FakeLegacy, str]) -> None:
    fake, upstream = legacy
    url = await _gateway(aiohttp_server, upstream, sessions={"max_sessions_per_principal": 2})
    async with aiohttp.ClientSession() as http:
        opened = [await _init(http, url, i, "alice") for i in (1, 2)]
        assert [status for status, _, sid in opened if sid] == [200, 200]
        status, body, sid = await _init(http, url, 3, "alice")
        assert (status, body, sid) == (503, limit_rejection("max_sessions_per_principal", 2, 3).body(), None)
        assert [m for m, _ in fake.seen].count("initialize") == 2  # the refused one never reached the server
        assert (await _init(http, url, 4, "bob"))[0] == 200  # another principal has its own bound
        # Ending one of alice's sessions (DELETE, answered by the server) gives its slot back.
        headers = {**LEGACY, "Authorization": "Bearer alice", "Mcp-Session-Id": str(opened[0][2]),
                   "MCP-Protocol-Version": "2025-11-25"}
        async with http.delete(url, headers=headers) as resp:
            assert resp.status == 200
        assert (await _init(http, url, 5, "alice"))[0] == 200


async def test_relayed_sessions_count_against_max_sessions(aiohttp_server: Any,
                                                                      legacy: tuple[FakeLegacy, str]) -> None:
    _, upstream = legacy
    url = await _gateway(aiohttp_server, upstream, sessions={"max_sessions": 1})
    async with aiohttp.ClientSession() as http:
        assert (await _init(http, url, 1, "alice"))[0] == 200
        status, body, _ = await _init(http, url, 2, "bob")
        assert (status, body) == (503, limit_rejection("max_sessions", 1, 2).body())


async def test_the_relay_and_the_pool_send_the_static_upstream_credential(
        aiohttp_server: Any, legacy: tuple[FakeLegacy, str], monkeypatch: Any) -> None:
    fake, upstream = legacy
    monkeypatch.setenv(TOKEN_ENV, "upstream-secret")
    url = await _gateway(aiohttp_server, upstream, upstream_auth={"auth": "static", "token_env": TOKEN_ENV})
    async with aiohttp.ClientSession() as http:
        assert (await _init(http, url, 1, "client-token"))[0] == 200  # a 2025 client, relayed
        body = {"jsonrpc": "2.0", "id": 2, "method": "server/discover", "params": {"_meta": META}}
        async with http.post(url, json=body, headers={**MODERN, "Authorization": "Bearer client-token"}) as resp:
            assert resp.status == 200  # a 2026 client: the pooled session's initialize and initialized
    assert [m for m, _ in fake.seen if m != "GET"] == ["initialize", "initialize", "notifications/initialized"]
    assert {auth for _, auth in fake.seen} == {"Bearer upstream-secret"}


async def test_with_gateway_auth_no_client_token_reaches_the_legacy_server(
        aiohttp_server: Any, legacy: tuple[FakeLegacy, str]) -> None:
    fake, upstream = legacy
    keys = KeyServer()
    keys.issuer = str((await aiohttp_server(keys.app())).make_url("")).rstrip("/")
    keys.add_key("k1")
    url = await _gateway(aiohttp_server, upstream, public_url=PUBLIC,
                         auth={"authorization_servers": [keys.issuer]})  # upstream_auth: "none" by default
    token = keys.token()
    async with aiohttp.ClientSession() as http:
        status, _, sid = await _init(http, url, 1, token)
        assert status == 200 and sid
        body = {"jsonrpc": "2.0", "id": 2, "method": "server/discover", "params": {"_meta": META}}
        async with http.post(url, json=body, headers={**MODERN, "Authorization": f"Bearer {token}"}) as resp:
            assert resp.status == 200
    assert [m for m, _ in fake.seen if m != "GET"] == ["initialize", "initialize", "notifications/initialized"]
    assert {auth for _, auth in fake.seen} == {None}  # the GET stream's too, when it was opened yet


PEERS = """
[gateway.sessions]
max_sessions = 1

[upstreams.old]
url = "{legacy}"
era = "2025-11-25"

[[peers]]
name = "old-clients"
client_name = "old-*"
upstream = "old"
"""


async def test_a_forward_session_counts_the_relayed_ones(aiohttp_server: Any, legacy: tuple[FakeLegacy, str],
                                                         tmp_path: Any) -> None:
    """The main upstream is the embedded 2026 core (forward sessions), ``old`` the fake 2025 server (relayed)."""
    _, upstream = legacy
    path = tmp_path / "gateway.toml"
    path.write_text(PEERS.format(legacy=upstream))
    config = load_config(path, state_dir=str(tmp_path / "state"))
    url = str((await aiohttp_server(create_app(config))).make_url("/mcp"))
    old = _initialize(1)
    old["params"]["clientInfo"]["name"] = "old-one"
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=old, headers=LEGACY) as resp:
            assert resp.status == 200 and resp.headers.get("Mcp-Session-Id")
        async with http.post(url, json=_initialize(2), headers=LEGACY) as resp:  # a forward session
            assert (resp.status, await resp.json()) == (503, limit_rejection("max_sessions", 1, 2).body())
