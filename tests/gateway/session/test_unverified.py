"""Sessions of principals nobody verified share ``max_unverified_sessions`` (adapters.admission), counted in the
store: a flood of made-up bearer tokens fills that allowance, and a verified principal (a name of the gateway's
[[tokens]] table, a token the upstream answered, or anonymous) still gets a session, on one process and on
replicas sharing a Redis."""

from __future__ import annotations

import hashlib
import json
import secrets
from typing import Any

import pytest

from adapters.records import SessionRecord
from gateway.http.app import GATEWAY
from gateway.session.redis_store import RedisStore
from gateway.session.store import InMemoryStore
from tests.gateway.conftest import Legacy
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
