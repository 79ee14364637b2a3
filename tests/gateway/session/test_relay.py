"""Replicas on one Redis (docs/design/replicas.md#replicas-relay-through-the-store): two gateway apps, each on its
own port with its own RedisStore under one key prefix, serve one legacy session. A client's answer, cancel or DELETE
sent to the replica that does not hold the exchange reaches the one that does. Redis is found as in
``test_redis_store``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("redis")
from redis.asyncio import Redis

from gateway.http.app import GATEWAY
from gateway.session.redis_wire import Script
from tests.gateway.conftest import CAPS, Legacy, geo_upstream, hang_until_closed, text
from tests.gateway.http.test_bridge_shell import SAMPLED, SAMPLING, two_rounds
from tests.gateway.session import test_redis_store as redis_tests
from tests.waiting import scaled, until, within

redis_url, prefix = redis_tests.redis_url, redis_tests.prefix  # its fixtures, shared


async def replicas(make_gateway: Any, redis_url: str, prefix: str) -> tuple[Legacy, Legacy]:
    """A client initialized on replica A, and the same session's client on replica B."""
    store = {"url": redis_url, "prefix": prefix}
    a, b = Legacy(await make_gateway(store=store)), Legacy(await make_gateway(store=store))
    assert a.client.app[GATEWAY].replica != b.client.app[GATEWAY].replica
    await a.initialize(CAPS)
    b.session_id = a.session_id
    return a, b


async def owner_keys(redis_url: str, prefix: str, kinds: str = "aq") -> dict[str, str]:
    """The ownership records (``oa:``, ``oq:``; ``kinds="l"``: the round leases of
    docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds), each with the replica it names (an
    ownership record also names its round)."""
    client = Redis.from_url(redis_url)
    try:
        keys = [k async for k in client.scan_iter(match=f"{prefix}o[{kinds}]:*")]
        return {k.decode()[len(prefix):]: (await client.get(k)).decode().split(" ")[0] for k in keys}
    finally:
        await client.aclose()


async def test_answers_posted_to_another_replica_reach_the_exchange(make_gateway, upstream, redis_url,
                                                                    prefix) -> None:
    upstream.script["tools/call"] = two_rounds
    a, b = await replicas(make_gateway, redis_url, prefix)
    resp = await a.post("tools/call", {"name": "t", "arguments": {}})
    await within(a.next_event(resp))  # priming
    _, first = await within(a.next_event(resp))
    _, second = await within(a.next_event(resp))
    owners = await owner_keys(redis_url, prefix)
    owner = a.client.app[GATEWAY].replica
    assert owners == {f"oa:{first['id']}": owner, f"oa:{second['id']}": owner,
                      f"oq:{a.session_id}:{a.next_id}": owner}
    assert await b.answer(first["id"], SAMPLED) == 202
    assert await b.answer(second["id"], SAMPLED) == 202
    _, third = await within(a.next_event(resp))
    assert await b.answer(third["id"], SAMPLED) == 202
    _, final = await within(a.next_event(resp))
    assert final["id"] == a.next_id and final["result"]["content"][0]["text"] == "bridged"
    assert upstream.calls("tools/call")[1]["params"]["inputResponses"] == {"a": SAMPLED, "b": SAMPLED}

    async def released() -> bool:
        return await owner_keys(redis_url, prefix, "aql") == {}
    await until(released)  # answered and ended: no ownership record or lease is left


async def test_a_cancel_posted_to_another_replica_stops_the_request(make_gateway, upstream, redis_url,
                                                                    prefix) -> None:
    closed = asyncio.Event()


    def script(body, request):
        if body["params"].get("requestState") is None:
            return {"resultType": "input_required", "inputRequests": {"a": SAMPLING}, "requestState": "s1"}
        return [lambda: hang_until_closed(request, closed)]  # the second round stays in flight
    upstream.script["tools/call"] = script
    a, b = await replicas(make_gateway, redis_url, prefix)
    resp = await a.post("tools/call", {"name": "t", "arguments": {}})
    await within(a.next_event(resp))
    _, asked = await within(a.next_event(resp))
    assert await b.answer(asked["id"], SAMPLED) == 202
    await until(lambda: len(upstream.calls("tools/call")) == 2)
    assert await b.notify("notifications/cancelled", {"requestId": a.next_id, "reason": "no"}) == 202
    await within(closed.wait())  # the upstream saw its request closed (the 2026 cancel)
    assert [m for m in await within(a.events(resp)) if m.get("id") == a.next_id] == []  # and no response came


async def test_a_delete_on_another_replica_ends_the_session_everywhere(make_gateway, upstream, redis_url,
                                                                      prefix) -> None:
    upstream.script["tools/call"] = two_rounds
    upstream.script["tools/list"] = lambda body, req: {"resultType": "complete", "tools": []}
    a, b = await replicas(make_gateway, redis_url, prefix)
    listening = await a.client.get("/mcp", headers={**a.headers(), "Accept": "text/event-stream"})
    assert listening.status == 200
    resp = await a.post("tools/call", {"name": "t", "arguments": {}})
    await within(a.next_event(resp))
    await within(a.next_event(resp))  # the client is asked: the exchange waits on A
    deleted = await b.client.delete("/mcp", headers=b.headers())
    assert deleted.status == 204
    await within(a.events(listening))  # A's standalone stream ends
    assert [m for m in await within(a.events(resp)) if "result" in m] == []  # the request ends without a result
    assert (await a.post("tools/list", {})).status == 404
    assert a.session_id not in a.client.app[GATEWAY].runtimes

    async def released() -> bool:
        return await owner_keys(redis_url, prefix) == {}
    await until(released)


async def test_the_in_memory_store_has_no_relay(legacy, upstream) -> None:
    upstream.script["tools/call"] = lambda body, req: text("plain")
    gateway = legacy.client.app[GATEWAY]
    assert gateway.relay is None
    await legacy.initialize()
    assert (await legacy.call("tools/call", {"name": "t", "arguments": {}}))["result"]["content"][0]["text"] == "plain"
    assert await legacy.answer("g-unknown", SAMPLED) == 202  # an unknown answer is ignored, as before


URL_ASK = {"method": "elicitation/create", "params": {"mode": "url", "url": "https://auth.example/connect/1",
                                                      "message": "Open this page to connect."}}


def _waits_for_the_page(body: dict[str, Any], request: Any) -> dict[str, Any]:
    """connect_service's shape: one URL elicitation, then requestState-only rounds for as long as it is polled."""
    if body["params"].get("requestState") is None:
        return {"resultType": "input_required", "inputRequests": {"u": URL_ASK}, "requestState": "w"}
    return {"resultType": "input_required", "requestState": "w"}


async def test_a_cancel_on_another_replica_stops_a_round_waiting_past_its_claim(make_gateway, upstream, redis_url,
                                                                                prefix) -> None:
    """Waiting rounds keep renewing the request's ownership record: a cancel reaching the other replica long
    after the client's last answer (here: past client_answer_timeout_seconds, the record's lifetime) still
    reaches the exchange, which stops polling."""
    upstream.script["tools/call"] = _waits_for_the_page
    store = {"url": redis_url, "prefix": prefix}
    limits = {"client_answer_timeout_seconds": 0.3, "state_only_backoff_seconds": 0.01,
              "state_only_backoff_max_seconds": 0.02}
    a, b = Legacy(await make_gateway(store=store, limits=limits)), Legacy(await make_gateway(store=store))
    await a.initialize(CAPS)
    b.session_id = a.session_id
    resp = await a.post("tools/call", {"name": "t", "arguments": {}})
    await within(a.next_event(resp))
    _, asked = await within(a.next_event(resp))
    assert await b.answer(asked["id"], {"action": "accept"}) == 202
    await asyncio.sleep(scaled(0.6))  # sleep: twice the claim's lifetime passes, polling all along
    assert len(upstream.calls("tools/call")) > 5
    assert await b.notify("notifications/cancelled", {"requestId": a.next_id, "reason": "gone"}) == 202
    await until(lambda: not a.client.app[GATEWAY].runtimes[a.session_id].exchanges)
    polled = len(upstream.calls("tools/call"))
    await asyncio.sleep(0.2)  # sleep: a quiet window: no poll may follow the cancel
    assert len(upstream.calls("tools/call")) == polled


async def test_a_cancel_on_another_replica_stops_a_plain_request_answered_inline(make_gateway, upstream, redis_url,
                                                                                 prefix) -> None:
    """docs/design/takeover.md#a-cancel-for-a-plain-request-goes-to-every-replica: a plain request runs inline on A
    and claims nothing in the store; a cancel reaching B finds no owner and goes to every replica, and A stops it
    (the upstream request is closed, no answer)."""
    closed = asyncio.Event()
    upstream.script["tools/call"] = lambda body, request: [lambda: hang_until_closed(request, closed)]
    a, b = await replicas(make_gateway, redis_url, prefix)
    posted = asyncio.ensure_future(a.post("tools/call", {"name": "t", "arguments": {}}))
    await until(lambda: len(upstream.calls("tools/call")) == 1)
    exchanges = a.client.app[GATEWAY].runtime(a.session_id).exchanges
    assert list(exchanges) == [a.next_id] and not exchanges[a.next_id].keeper.saved  # inline, nothing stored
    assert await owner_keys(redis_url, prefix, "aql") == {}
    assert await b.notify("notifications/cancelled", {"requestId": a.next_id, "reason": "no"}) == 202
    await within(closed.wait())  # A closed its upstream request (the 2026 cancel)
    answer = await within(posted)
    assert answer.status == 202 and await answer.read() == b""  # cancelled: nothing is sent for it
    assert a.next_id not in exchanges and "result" in await a.call("ping")  # its id is free; the session goes on


async def test_header_maps_learned_on_one_replica_serve_the_session_on_another(make_gateway, upstream, redis_url,
                                                                                prefix) -> None:
    """2026-07-28 server/tools §x-mcp-header: the maps a tools/list taught replica A are in the session's record,
    so replica B mirrors the header on its first tools/call: no -32020, no tools/list again."""
    geo_upstream(upstream)
    a, b = await replicas(make_gateway, redis_url, prefix)
    assert "result" in await a.call("tools/list")
    message = await b.call("tools/call", {"name": "geo", "arguments": {"region": "eu"}})
    assert message["result"]["content"][0]["text"] == "ok eu"
    assert [m["method"] for m in upstream.received if m["method"].startswith("tools/")] == ["tools/list", "tools/call"]
    assert upstream.headers[-1]["Mcp-Param-Region"] == "eu"


PERIODIC = frozenset({"renew", "orphaned", "touch", "expire"})  # a replica's timers and once-a-second writes


def store_trips(gateway: Any) -> list[str]:
    """The store round trips ``gateway`` makes from now on, each named by its script (else its first command):
    one per write on the store's pipelined connection, waited for
    (docs/design/replicas.md#one-pipelined-redis-connection-per-process). Those :data:`PERIODIC` ones are left out:
    they come with time, not with a call."""
    store = gateway.store
    scripts = {getattr(store, name).sha: name.lstrip("_") for name in vars(store)
               if isinstance(getattr(store, name), Script)}
    trips: list[str] = []
    send = store.wire._send

    async def counted(commands: Any) -> Any:
        first = commands[0]
        name = scripts.get(first[1], "script") if first[0] == "EVALSHA" else str(first[0])
        if name not in PERIODIC:
            trips.append(name)
        return await send(commands)
    store.wire._send = counted
    return trips


def ask_per_round(body: dict[str, Any], _request: Any) -> dict[str, Any]:
    """Two rounds of one request to the client each (the benchmark's ``summarize_repo``), then the result."""
    state = body["params"].get("requestState")
    if state is None:
        return {"resultType": "input_required", "inputRequests": {"a": SAMPLING}, "requestState": "r1"}
    if state == "r1":
        return {"resultType": "input_required", "inputRequests": {"b": SAMPLING}, "requestState": "r2"}
    return text("bridged")


async def bridged_call(caller: Legacy, answerer: Legacy) -> None:
    """A two-round call through ``caller``, whose requests to the client are answered through ``answerer``."""
    resp = await caller.post("tools/call", {"name": "t", "arguments": {}})
    while True:
        _, message = await within(caller.next_event(resp))
        assert message is None or "error" not in message, message
        if message is not None and "method" in message:
            assert await answerer.answer(message["id"], SAMPLED) == 202
        elif message is not None:
            assert message["result"]["content"][0]["text"] == "bridged"
            return


async def test_a_relayed_answer_costs_one_store_round_trip_more_than_one_answered_where_its_round_runs(
        make_gateway, upstream, redis_url, prefix) -> None:
    """docs/design/replicas.md#replicas-relay-through-the-store: a two-round call whose answers reach the replica
    running it costs six store round trips (the session read, four saves, the end); with the answers on another
    replica, each costs that replica one more, its owner's lookup and the publish in one script, and nothing for the
    session read (the record it read last) or for the acknowledgement (sent by the save of the answer's step). So
    the relayed call costs eight, and no round trip is a bare publish."""
    upstream.script["tools/call"] = ask_per_round
    a, b = await replicas(make_gateway, redis_url, prefix)
    gw_a, gw_b = a.client.app[GATEWAY], b.client.app[GATEWAY]
    await bridged_call(a, b)  # B reads the session's record once, for its first answer
    at_a, at_b = store_trips(gw_a), store_trips(gw_b)
    await bridged_call(a, a)
    assert (at_a, at_b) == (["HGET", "save_round", "save_round", "save_round", "save_round", "end_round"], [])
    at_a.clear()
    await bridged_call(a, b)
    assert at_a == ["HGET", "save_round", "save_round", "save_round", "save_round", "end_round"]
    assert at_b == ["relay_to_owner", "relay_to_owner"]


async def test_a_replica_that_lost_its_bus_subscribes_again_and_is_relayed_to(make_gateway, upstream, redis_url,
                                                                             prefix) -> None:
    """The owner's subscription killed by Redis (as by a restart or a dropped connection): its relay subscribes
    again (gateway.session.relay.RESUBSCRIBE_SECONDS), and answers posted to the other replica reach it again."""
    from adapters.relay import relay_channel
    from gateway.session.redis_wire import RedisWire
    from tests.gateway.session.test_redis_wire import client_id

    upstream.script["tools/call"] = two_rounds
    a, b = await replicas(make_gateway, redis_url, prefix)
    name = relay_channel(prefix, a.client.app[GATEWAY].replica)
    wire = RedisWire(redis_url, timeout_seconds=2)
    try:
        killed = await until(lambda: client_id(wire, name), "replica A's relay subscription in CLIENT LIST")
        assert await wire.call("CLIENT", "KILL", "ID", killed) == 1

        async def again() -> bool:
            return await client_id(wire, name) not in (None, killed)
        await until(again, "replica A subscribed again")
    finally:
        await wire.close()
    resp = await a.post("tools/call", {"name": "t", "arguments": {}})
    await within(a.next_event(resp))  # priming
    for _ in range(3):
        _, asked = await within(a.next_event(resp))
        assert await b.answer(asked["id"], SAMPLED) == 202
    _, final = await within(a.next_event(resp))
    assert final["result"]["content"][0]["text"] == "bridged"
