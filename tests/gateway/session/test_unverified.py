"""Sessions of principals nobody verified share ``max_unverified_sessions`` (adapters.admission), counted in the
store: a flood of made-up bearer tokens fills that allowance, and a verified principal (a name of the gateway's
[[tokens]] table, a token the upstream answered, or anonymous) still gets a session, on one process and on
replicas sharing a Redis; relayed 2025 sessions (a 2025-era upstream's) share it with the bridged ones."""

from __future__ import annotations

import hashlib
import json
import secrets
from typing import Any

import pytest
from aiohttp import web

from adapters.errors import limit_rejection
from adapters.records import SessionRecord
from gateway.http.app import GATEWAY
from gateway.session.redis_store import RedisStore
from gateway.session.store import InMemoryStore
from tests.gateway.conftest import Legacy
from tests.gateway.http.test_reverse_relay_limits import FakeLegacy
from tests.gateway.session import test_redis_store as redis_tests

redis_url, prefix = redis_tests.redis_url, redis_tests.prefix  # its fixtures: a private redis-server if need be

ALICE = "alice-token"  # a token of the gateway's own [[tokens]] table: verified by the gateway itself
INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
NOW = 1_000_000


def _record(session_id: str, principal: str) -> SessionRecord:
    return SessionRecord(session_id, principal, "2025-11-25", {}, {}, NOW, NOW)


@pytest.fixture(params=["memory", "redis"])
async def store(request) -> Any:
    if request.param == "memory":
        yield InMemoryStore()
        return
    url, name = request.getfixturevalue("redis_url"), request.getfixturevalue("prefix")
    shared = RedisStore(url, idle_seconds=3600, prefix=name, clock=lambda: NOW)
    try:
        yield shared
    finally:
        await shared.close()


async def test_the_store_counts_unverified_sessions_until_their_principal_is_verified(store) -> None:
    await store.put_session(_record("s1", "bearer:x"))
    await store.put_session(_record("s2", "bearer:x"))
    await store.put_session(_record("s3", "bearer:y"))
    assert await store.count_unverified("bearer:z") == 3
    await store.mark_verified("bearer:x", NOW)
    assert await store.count_unverified("bearer:x") is None  # verified: the allowance is not its concern
    assert await store.count_unverified("bearer:y") == 1  # x's two sessions left the count
    await store.put_session(_record("s4", "bearer:x"))  # a verified principal's new session never joins it
    await store.delete_session("s3")
    assert await store.count_unverified("bearer:y") == 0
    assert await store.count_sessions("bearer:x") == (3, 3)  # the other counts are as they were


async def test_an_expired_unverified_session_leaves_the_count(store) -> None:
    await store.put_session(_record("old", "bearer:x"))
    assert await store.count_unverified("bearer:y") == 1
    await store.expire_sessions(NOW + 1)
    assert await store.count_unverified("bearer:y") == 0


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def _initialize(client: Any, token: str | None = None) -> Any:
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    body = {"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": INIT}
    return await client.post("/mcp", data=json.dumps(body), headers=headers)


def _config(upstream: Any, where: str, request: Any) -> dict[str, Any]:
    """Eight sessions, three of them for unverified principals; the default upstream is passed the client's token
    (``auth = "forward"``), so its answer verifies it; alice is a name of the token table."""
    pins = {"upstreams": {"svc": {"url": upstream.url, "auth": "forward", "shares_audience": True}},
            "default_peer": {"name": "everyone", "upstream": "svc"},
            "tokens": [{"principal": "alice", "token_sha256": _sha(ALICE)}]}
    config: dict[str, Any] = {"sessions": {"max_sessions": 8, "max_unverified_sessions": 3}, "pins": pins}
    if where == "redis":
        config["store"] = {"url": request.getfixturevalue("redis_url"), "prefix": request.getfixturevalue("prefix")}
    return config


@pytest.mark.parametrize("where", ["memory", "redis"])
async def test_a_flood_of_made_up_tokens_cannot_refuse_a_verified_principal(make_gateway, upstream, request,
                                                                            where: str) -> None:
    upstream.script["tools/list"] = lambda body, _r: {"resultType": "complete", "tools": []}
    config = _config(upstream, where, request)
    client = await make_gateway(**config)
    verified = Legacy(client)
    await verified.initialize(Authorization="Bearer carol")  # a token the upstream will answer
    resp = await verified.post("tools/list", {}, Authorization="Bearer carol")
    assert resp.status == 200 and "result" in await resp.json()  # answered with the token: carol is verified now
    assert upstream.headers[-1]["Authorization"] == "Bearer carol"
    answers = [await _initialize(client, secrets.token_hex(16)) for _ in range(8)]
    assert [a.status for a in answers] == [200] * 3 + [503] * 5  # the flood fills its allowance, no more
    refused = await answers[-1].json()
    assert refused["error"]["code"] == -32000
    assert refused["error"]["data"] == {"limit": "max_unverified_sessions", "value": 3}
    # Every verified principal still gets a session: one the upstream answered, one the gateway knows, anonymous.
    assert (await _initialize(client, "carol")).status == 200
    assert (await _initialize(client, ALICE)).status == 200
    assert (await _initialize(client)).status == 200
    assert (await _initialize(client, secrets.token_hex(16))).status == 503  # the flood still cannot
    if where == "redis":  # another replica on the same Redis counts the same allowance
        other = await make_gateway(**config)
        assert (await _initialize(other, secrets.token_hex(16))).status == 503
        assert client.app[GATEWAY].replica != other.app[GATEWAY].replica



class CarolOnly(FakeLegacy):
    """A 2025-era server that takes carol's token only (401 for any other)."""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != "Bearer carol":
            return web.Response(status=401)
        return await super().handle(request)


async def _relayed_config(upstream: Any, aiohttp_server: Any, where: str, request: Any) -> dict[str, Any]:
    """As :func:`_config`, with two sessions for unverified principals and two 2025-era servers (fakes) that the
    clients named ``old-*`` and ``fwd-*`` are relayed to as they are: ``old`` is sent no credential, ``fwd`` the
    client's own token (``auth = "forward"``), and takes carol's only."""
    config = _config(upstream, where, request)
    config["sessions"]["max_unverified_sessions"] = 2
    urls = [str((await aiohttp_server(fake.app())).make_url("/mcp")) for fake in (FakeLegacy(), CarolOnly())]
    config["pins"]["upstreams"]["old"] = {"url": urls[0], "era": "2025-11-25"}
    config["pins"]["upstreams"]["fwd"] = {"url": urls[1], "era": "2025-11-25", "auth": "forward",
                                          "shares_audience": True}
    config["pins"]["peers"] = [{"name": "old-clients", "client_name": "old-*", "upstream": "old"},
                               {"name": "fwd-clients", "client_name": "fwd-*", "upstream": "fwd"}]
    return config


async def _relayed(client: Any, token: str | None = None, ident: int = 7, name: str = "old-tool") -> Any:
    """A 2025 client named ``name``: relayed to the 2025-era server its peer names."""
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    params = {**INIT, "clientInfo": {"name": name, "version": "1"}}
    body = {"jsonrpc": "2.0", "id": ident, "method": "initialize", "params": params}
    return await client.post("/mcp", data=json.dumps(body), headers=headers)


@pytest.mark.parametrize("where", ["memory", "redis"])
async def test_relayed_sessions_share_the_unverified_allowance_with_bridged_ones(
        make_gateway, upstream, aiohttp_server, request, where: str) -> None:
    """docs/design/eras.md#relayed-sessions-count-against-the-gateways-session-limits: a relayed session of a
    principal nobody verified counts against ``max_unverified_sessions`` as a bridged one does, and a relayed
    ``initialize`` past it gets the bridged handshake's refusal; a relayed server's answer to the client's own
    token verifies its principal, as the gateway's token table does."""
    config = await _relayed_config(upstream, aiohttp_server, where, request)
    client = await make_gateway(**config)
    assert (await _relayed(client, "carol", name="fwd-tool")).status == 200  # fwd took carol's token: verified
    assert (await _relayed(client, "mallory", name="fwd-tool")).status == 401  # refused: no session, no count
    flood = [secrets.token_hex(16) for _ in range(3)]
    assert [(await _relayed(client, token)).status for token in flood[:2]] == [200, 200]
    relayed, bridged = await _relayed(client, flood[2], ident=8), await _initialize(client, flood[2])
    assert (relayed.status, await relayed.json()) == (503, limit_rejection("max_unverified_sessions", 2, 8).body())
    assert (bridged.status, await bridged.json()) == (503, limit_rejection("max_unverified_sessions", 2, 7).body())
    # Verified principals still get sessions, relayed or bridged: the server's, the gateway's, anonymous.
    assert [(await _relayed(client, t)).status for t in ("carol", ALICE, None)] == [200, 200, 200]
    assert (await _initialize(client, ALICE)).status == 200
    if where == "redis":  # another replica on the same Redis counts the same allowance
        other = await make_gateway(**config)
        assert (await _relayed(other, secrets.token_hex(16))).status == 503
        assert (await _relayed(other, "carol")).status == 200


async def test_bridged_sessions_leave_relayed_ones_no_room_and_a_server_sent_no_token_verifies_nobody(
        make_gateway, upstream, aiohttp_server, request) -> None:
    """The other way round: bridged sessions of unverified principals fill the allowance for relayed ones. And a
    2025-era server sent no credential (or the gateway's own) checked nothing of the client's token, so its answer
    verifies nobody: carol's session there counts as unverified until something checks her token."""
    config = await _relayed_config(upstream, aiohttp_server, "memory", request)
    client = await make_gateway(**config)
    assert (await _relayed(client, "carol")).status == 200  # old: no token went, none was checked
    assert (await _initialize(client, secrets.token_hex(16))).status == 200  # bridged: the second and last
    for token, name in ((secrets.token_hex(16), "old-tool"), ("carol", "old-tool"), ("carol", "fwd-tool")):
        refused = await _relayed(client, token, ident=9, name=name)
        assert (refused.status, await refused.json()) == (503, limit_rejection("max_unverified_sessions", 2, 9).body())
    assert (await _relayed(client, ALICE)).status == 200
