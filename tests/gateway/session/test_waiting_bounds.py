"""What rounds waiting for their client may hold is counted in the store (adapters.admission.admit_waiting):
``max_pending_per_session`` holds across replicas on one Redis, and the bytes of waiting rounds' records are
bounded per principal and in all, each refused with ``-32000`` naming the limit before the client is asked."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.http.app import GATEWAY
from tests.gateway.conftest import CAPS, Legacy
from tests.gateway.http.test_bridge_shell import SAMPLING
from tests.gateway.session import test_redis_store as redis_tests

redis_url, prefix = redis_tests.redis_url, redis_tests.prefix  # its fixtures: a private redis-server if need be


def asks_the_client(body: dict[str, Any], _request: Any) -> dict[str, Any]:
    """Every tools/call waits for a sampling answer the test never gives."""
    return {"resultType": "input_required", "inputRequests": {"a": SAMPLING}, "requestState": "s1"}


async def _first_message(client: Legacy, resp: Any) -> dict[str, Any]:
    """The first message of a request's answer: its stream's first one, or its JSON body."""
    if resp.headers["Content-Type"].startswith("application/json"):
        return await resp.json()
    while True:
        _, message = await asyncio.wait_for(client.next_event(resp), 30)
        if message is not None:
            return message


async def _call(client: Legacy, argument: str = "x") -> dict[str, Any]:
    resp = await client.post("tools/call", {"name": "t", "arguments": {"a": argument}})
    assert resp.status == 200
    return await _first_message(client, resp)


def _refused(message: dict[str, Any], limit: str, value: int) -> None:
    assert "id" in message and message["error"]["code"] == -32000, message
    assert message["error"]["data"] == {"limit": limit, "value": value}


async def test_max_pending_per_session_holds_across_two_replicas(make_gateway, upstream, redis_url,
                                                                 prefix) -> None:
    upstream.script["tools/call"] = asks_the_client
    store = {"url": redis_url, "prefix": prefix}
    limits = {"max_pending_per_session": 2}
    a = Legacy(await make_gateway(store=store, limits=limits))
    b = Legacy(await make_gateway(store=store, limits=limits))
    assert a.client.app[GATEWAY].replica != b.client.app[GATEWAY].replica
    await a.initialize(CAPS)
    b.session_id = a.session_id
    assert (await _call(a))["method"] == "sampling/createMessage"  # one round waits on A,
    assert (await _call(b))["method"] == "sampling/createMessage"  # one on B: the session's two
    _refused(await _call(b), "max_pending_per_session", 2)  # B's own count is 1: the store's is 2
    _refused(await _call(a), "max_pending_per_session", 2)
    gw = a.client.app[GATEWAY]
    assert len(await gw.store.rounds_of(a.session_id)) == 2  # the refused ones left nothing in the store


@pytest.mark.parametrize("where", ["memory", "redis"])
async def test_waiting_rounds_bytes_are_bounded_per_principal_and_in_all(make_gateway, upstream, request,
                                                                         where: str) -> None:
    upstream.script["tools/call"] = asks_the_client
    config: dict[str, Any] = {"limits": {"max_waiting_bytes_per_principal": 7000, "max_waiting_bytes": 10000}}
    if where == "redis":
        config["store"] = {"url": request.getfixturevalue("redis_url"), "prefix": request.getfixturevalue("prefix")}
    client = await make_gateway(**config)
    alice, bob = Legacy(client), Legacy(client)
    await alice.initialize(CAPS, Authorization="Bearer alice")
    await bob.initialize(CAPS, Authorization="Bearer bob")
    alice.headers = _with(alice.headers, "Bearer alice")
    bob.headers = _with(bob.headers, "Bearer bob")
    big = "x" * 4000
    assert (await _call(alice, big))["method"] == "sampling/createMessage"
    _refused(await _call(alice, big), "max_waiting_bytes_per_principal", 7000)  # alice's two: over 7000
    assert (await _call(bob, big))["method"] == "sampling/createMessage"  # bob's first: under 9000 in all
    _refused(await _call(bob, "y" * 1500), "max_waiting_bytes", 10000)  # bob is under his own, not the total
    assert (await _call(alice, "small"))["method"] == "sampling/createMessage"  # a small one still fits
    # A session's end gives its rounds' bytes back.
    resp = await client.delete("/mcp", headers=alice.headers())
    assert resp.status == 204
    assert (await _call(bob, "y" * 1500))["method"] == "sampling/createMessage"


def _with(headers: Any, authorization: str) -> Any:
    def bound(**extra: str) -> dict[str, str]:
        return headers(Authorization=authorization, **extra)
    return bound
