"""Relayed 2025 sessions counted by every replica on one store
(docs/design/eras.md#relayed-sessions-count-against-the-gateways-session-limits): two gateways on one Redis (a key
prefix of this test alone) relaying 2025 clients to the fake 2025 server of ``test_reverse_relay_limits``. A
session opened through one replica takes its principal's slot on the other; a DELETE or an upstream 404 through
either gives it back; the lease of a session whose replica died runs out after the idle time."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from aiohttp import web

pytest.importorskip("redis")

from adapters.errors import limit_rejection
from gateway.config.settings import load_config
from gateway.http.app import create_app
from tests.gateway.http.test_reverse_relay_limits import LEGACY, FakeLegacy, _init, legacy  # noqa: F401  (a fixture)
from tests.gateway.session.test_redis_store import prefix, redis_url  # noqa: F401  (fixtures)
from tests.waiting import until, until_hung_up

IDLE = 1.5  # seconds: the gateway's idle time, so the lease of a session nobody uses runs out within a test
KEY_ENV = "TEST_RELAY_REPLICAS_STATE_KEY"


@pytest.fixture(autouse=True)
def _one_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "one key for every replica")  # each replica opens the others' sealed session ids


async def _replicas(aiohttp_server: Any, upstream: str, redis_url: str, prefix: str,  # noqa: F811
                    **sessions: Any) -> list[Any]:
    config = load_config(upstream_url=upstream, upstream_era="2025-11-25", session_idle_seconds=IDLE,
                         store={"url": redis_url, "prefix": prefix}, sessions=sessions,
                         reverse={"state_key_env": KEY_ENV})
    return [await aiohttp_server(create_app(config)) for _ in range(2)]


class Listening(FakeLegacy):
    """Also a session's GET stream: an event, then open until the client hangs up or ``ended`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.ended = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.method != "GET" or request.headers.get("Mcp-Session-Id") not in self.sessions:
            return await super().handle(request)
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(b"id: 1\ndata: \n\n")  # a priming event (2025-11-25 basic/transports)
        await until_hung_up(request, self.ended)
        return out


def _headers(token: str, sid: str) -> dict[str, str]:
    return {**LEGACY, "Authorization": f"Bearer {token}", "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}


async def test_one_principals_relayed_sessions_are_bounded_across_replicas(
        aiohttp_server: Any, legacy: tuple[FakeLegacy, str], redis_url: str, prefix: str) -> None:  # noqa: F811
    fake, upstream = legacy
    a, b = await _replicas(aiohttp_server, upstream, redis_url, prefix, max_sessions_per_principal=1)
    url_a, url_b = str(a.make_url("/mcp")), str(b.make_url("/mcp"))

    def full(ident: int) -> tuple[int, Any, None]:
        return 503, limit_rejection("max_sessions_per_principal", 1, ident).body(), None

    async with aiohttp.ClientSession() as http:
        status, _, sid = await _init(http, url_a, 1, "alice")
        assert status == 200 and sid
        assert await _init(http, url_b, 2, "alice") == full(2)  # A's session holds alice's one slot on B too
        assert (await _init(http, url_b, 3, "bob"))[0] == 200
        async with http.delete(url_b, headers=_headers("alice", sid)) as resp:  # ended through the other replica
            assert resp.status == 200
        status, _, sid = await _init(http, url_b, 4, "alice")
        assert status == 200 and sid
        assert await _init(http, url_a, 5, "alice") == full(5)
        fake.sessions.clear()  # the server forgot it (restarted): its 404 ends the session for the gateway too
        ping = {"jsonrpc": "2.0", "id": 6, "method": "ping"}
        async with http.post(url_a, json=ping, headers=_headers("alice", sid)) as resp:
            assert resp.status == 404
        assert (await _init(http, url_a, 7, "alice"))[0] == 200


async def test_a_dead_replicas_relayed_sessions_stop_counting_after_the_idle_time(
        aiohttp_server: Any, legacy: tuple[FakeLegacy, str], redis_url: str, prefix: str) -> None:  # noqa: F811
    _, upstream = legacy
    a, b = await _replicas(aiohttp_server, upstream, redis_url, prefix, max_sessions=2)
    url_a, url_b = str(a.make_url("/mcp")), str(b.make_url("/mcp"))
    async with aiohttp.ClientSession() as http:
        status, _, kept = await _init(http, url_a, 1, "alice")
        assert status == 200 and kept
        assert (await _init(http, url_a, 2, "bob"))[0] == 200
        await a.close()  # A dies with its sessions open: nothing of it releases them
        assert await _init(http, url_b, 3, "carol") == (503, limit_rejection("max_sessions", 2, 3).body(), None)
        ping = {"jsonrpc": "2.0", "id": 4, "method": "ping"}

        async def one_slot_free() -> bool:
            # alice's session is still used (through B), which renews its lease; bob's is not, and lapses
            async with http.post(url_b, json=ping, headers=_headers("alice", kept)) as resp:
                assert resp.status == 200
            status, _, _ = await _init(http, url_b, 5, "carol")
            return status == 200

        await until(one_slot_free, "bob's lease ran out: carol's initialize is admitted")
        assert await _init(http, url_b, 6, "dave") == (503, limit_rejection("max_sessions", 2, 6).body(), None)


async def test_an_open_get_stream_keeps_its_sessions_lease(aiohttp_server: Any, redis_url: str,  # noqa: F811
                                                           prefix: str) -> None:  # noqa: F811
    fake = Listening()
    upstream = str((await aiohttp_server(fake.app())).make_url("/mcp"))
    a, b = await _replicas(aiohttp_server, upstream, redis_url, prefix, max_sessions_per_principal=1)
    url_a, url_b = str(a.make_url("/mcp")), str(b.make_url("/mcp"))
    async with aiohttp.ClientSession() as http:
        status, _, sid = await _init(http, url_a, 1, "alice")
        assert status == 200 and sid
        get = {**_headers("alice", sid), "Accept": "text/event-stream"}
        async with http.get(url_a, headers=get) as stream:
            assert stream.status == 200 and await stream.content.readuntil(b"\n\n")
            # sleep: two leases pass with nothing but the GET stream open: it is use, so the lease is renewed
            await asyncio.sleep(2 * IDLE)
            status, body, _ = await _init(http, url_b, 2, "alice")
            assert status == 503 and body["error"]["data"]["limit"] == "max_sessions_per_principal"
            fake.ended.set()
