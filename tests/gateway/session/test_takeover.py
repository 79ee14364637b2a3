"""Takeover of another replica's bridged rounds (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds,
docs/design/takeover.md#a-cancel-for-a-plain-request-goes-to-every-replica,
docs/design/takeover.md#sigterm-hands-the-rounds-over), two gateway apps on one real Redis.

A replica that shuts down hands its saved rounds over (its leases released): the other continues a round from its
stored record as soon as the client's next answer or stream resumption reaches it. Killed processes (leases that
must lapse) are in ``tests/faults/test_takeover_procs.py``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import pytest

pytest.importorskip("redis")

from adapters import relay as R
from adapters.sse import parse_event_id
from gateway.http import legacy
from gateway.http.app import GATEWAY
from gateway.session import takeover
from gateway.session.exchange import HandedOver
from gateway.session.store import StoreUnavailable
from tests.gateway.conftest import CAPS, Legacy, hang_until_closed, text
from tests.gateway.http.test_bridge_shell import SAMPLED, SAMPLING, two_rounds
from tests.gateway.session import test_redis_store as redis_tests
from tests.gateway.session.test_relay import owner_keys
from tests.waiting import scaled, until, within

redis_url, prefix = redis_tests.redis_url, redis_tests.prefix  # its fixtures, shared


async def replicas(make_gateway: Any, redis_url: str, prefix: str, *, lease_seconds: float = 5.0,
                   timeout_seconds: float = 2.0, **config: Any) -> tuple[Legacy, Legacy]:
    store = {"url": redis_url, "prefix": prefix, "lease_seconds": lease_seconds, "timeout_seconds": timeout_seconds}
    a = Legacy(await make_gateway(store=store, **config))
    b = Legacy(await make_gateway(store=store, **config))
    await a.initialize(CAPS)
    b.session_id = a.session_id
    return a, b


async def first_round_asked(a: Legacy) -> tuple[Any, dict[str, Any], tuple[str, dict[str, Any]]]:
    """A two-round tools/call (``two_rounds``) started on ``a``, read up to its first round's two asks: the
    stream, the first ask, and the second with its event id (where a resumption starts from)."""
    resp = await a.post("tools/call", {"name": "t", "arguments": {"x": [1, 2]}})
    await within(a.next_event(resp))  # priming
    _, first = await within(a.next_event(resp))
    return resp, first, await within(a.next_event(resp))


async def bearer_round_asked(a: Legacy, b: Legacy, token: dict[str, str]) -> tuple[Legacy, Legacy, Any,
                                                                                    dict[str, Any],
                                                                                    tuple[str, dict[str, Any]]]:
    """A session of its own opened on ``a`` with ``token`` (a session belongs to its credential), with its client on
    ``b`` too, and a two-round tools/call sent with the token, read up to its first round's two asks."""
    a2, b2 = Legacy(a.client), Legacy(b.client)
    await a2.initialize(CAPS, **token)
    b2.session_id = a2.session_id
    resp = await a2.post("tools/call", {"name": "t", "arguments": {"x": [3]}}, **token)
    await within(a2.next_event(resp))  # priming
    _, first = await within(a2.next_event(resp))
    return a2, b2, resp, first, await within(a2.next_event(resp))


async def test_a_replica_that_shuts_down_hands_its_round_over(make_gateway, upstream, redis_url, prefix) -> None:
    upstream.script["tools/call"] = two_rounds
    a, b = await replicas(make_gateway, redis_url, prefix)
    resp, first, (last, second) = await first_round_asked(a)
    assert (await owner_keys(redis_url, prefix, "l")) != {}  # the round's lease, held by A
    assert await a.answer(first["id"], SAMPLED) == 202  # saved before acknowledged: B will have it
    await a.client.server.close()  # shutdown on a shared store: hands the round over instead of failing it
    assert [m for m in await within(until_closed(a, resp)) if "result" in m or "error" in m] == []
    assert await owner_keys(redis_url, prefix, "l") == {}  # released at once: no lease to wait for

    assert await within(b.answer(second["id"], SAMPLED)) == 202  # B takes the round over and acts on it
    await until(lambda: len(upstream.calls("tools/call")) == 2)
    calls = upstream.calls("tools/call")
    assert calls[1]["params"]["inputResponses"] == {"a": SAMPLED, "b": SAMPLED}
    assert calls[1]["params"]["requestState"] == "s1\u00e9"  # byte for byte
    stream = await within(b.resume(last))
    assert stream.status == 200
    eid, third = await within(b.next_event(stream))
    assert third["method"] == "sampling/createMessage" and parse_event_id(eid)[0] == parse_event_id(last)[0]
    assert await b.answer(third["id"], SAMPLED) == 202
    _, final = await within(b.next_event(stream))
    assert final["id"] == a.next_id and final["result"]["content"][0]["text"] == "bridged"
    assert len(upstream.calls("tools/call")) == 3

    async def released() -> bool:
        return await owner_keys(redis_url, prefix, "aql") == {}
    await until(released)


async def test_a_resumption_takes_a_handed_over_round_on(make_gateway, upstream, redis_url, prefix) -> None:
    """The round was in flight upstream when its replica stopped: the client's Last-Event-ID on the other
    replica continues it, and the upstream sees the same round again (what a takeover may repeat)."""
    closed = asyncio.Event()

    async def slow_then_done(body, request):
        if body["params"].get("requestState") is None:
            return {"resultType": "input_required", "inputRequests": {"a": SAMPLING}, "requestState": "s1"}
        if len(upstream.calls("tools/call")) == 2:  # the round in flight when A stops: never answered
            return [lambda: hang_until_closed(request, closed)]
        return text("continued")
    upstream.script["tools/call"] = slow_then_done
    a, b = await replicas(make_gateway, redis_url, prefix)
    resp = await a.post("tools/call", {"name": "t", "arguments": {}})
    await within(a.next_event(resp))
    last, asked = await within(a.next_event(resp))
    assert await a.answer(asked["id"], SAMPLED) == 202
    await until(lambda: len(upstream.calls("tools/call")) == 2)
    await a.client.server.close()
    await within(closed.wait())  # A's upstream request closed as it stopped
    stream = await within(b.resume(last))
    _, final = await within(b.next_event(stream))
    assert final["result"]["content"][0]["text"] == "continued"
    calls = upstream.calls("tools/call")
    assert len(calls) == 3 and calls[2]["params"] == calls[1]["params"]  # the same round, sent again


async def test_an_error_answering_a_resent_round_is_reported_as_an_unknown_outcome(make_gateway, upstream, redis_url,
                                                                                     prefix) -> None:
    """Issue #38, 5: the round was in flight when its replica stopped and the upstream already acted on it; the
    survivor sends it again and this upstream refuses the resend. The client is told the outcome is unknown (the
    first send may have done it), not that the round failed."""
    closed = asyncio.Event()
    refused = {"code": -32602, "message": "this confirmation was already used"}

    async def acted_then_refuses(body, request):
        if body["params"].get("requestState") is None:
            return {"resultType": "input_required", "inputRequests": {"a": SAMPLING}, "requestState": "s1"}
        if len(upstream.calls("tools/call")) == 2:  # acted on; its answer never reaches A, which stops
            return [lambda: hang_until_closed(request, closed)]
        return ("error", refused, 200)
    upstream.script["tools/call"] = acted_then_refuses
    a, b = await replicas(make_gateway, redis_url, prefix)
    resp = await a.post("tools/call", {"name": "t", "arguments": {}})
    await within(a.next_event(resp))
    last, asked = await within(a.next_event(resp))
    assert await a.answer(asked["id"], SAMPLED) == 202
    await until(lambda: len(upstream.calls("tools/call")) == 2)
    await a.client.server.close()
    await within(closed.wait())
    stream = await within(b.resume(last))
    _, final = await within(b.next_event(stream))
    assert final["id"] == a.next_id and final["error"]["code"] == -32603
    assert final["error"]["data"] == {"outcome": "unknown", "upstreamError": refused}
    calls = upstream.calls("tools/call")
    assert len(calls) == 3 and calls[2]["params"] == calls[1]["params"]


async def until_closed(client: Legacy, resp: Any) -> list[dict[str, Any]]:
    """The stream's messages until it ends, cleanly or with its connection."""
    out: list[dict[str, Any]] = []
    try:
        while True:
            eid, message = await client.next_event(resp)
            if eid is None and message is None:
                return out
            if message is not None:
                out.append(message)
    except aiohttp.ClientConnectionError:
        return out


async def test_a_cancel_for_a_stopped_replicas_round_ends_it_without_sending_it_again(make_gateway, upstream,
                                                                                     redis_url, prefix) -> None:
    upstream.script["tools/call"] = two_rounds
    a, b = await replicas(make_gateway, redis_url, prefix)
    resp = await a.post("tools/call", {"name": "t", "arguments": {}})
    await within(a.next_event(resp))
    await within(a.next_event(resp))
    await within(a.next_event(resp))  # both requests of the first round asked: the round is saved
    await a.client.server.close()  # handed over
    await within(until_closed(a, resp))
    store = b.client.app[GATEWAY].store
    assert len(await store.rounds_of(a.session_id)) == 1
    assert await b.notify("notifications/cancelled", {"requestId": a.next_id, "reason": "stop"}) == 202

    async def ended() -> bool:
        return await store.rounds_of(a.session_id) == []
    await until(ended)  # claimed and ended by B
    assert len(upstream.calls("tools/call")) == 1  # nothing was sent upstream again
    assert await owner_keys(redis_url, prefix, "aql") == {}
    assert b.client.app[GATEWAY].runtime(a.session_id).exchanges == {}


async def test_a_handed_over_stream_resumes_on_a_third_replica(make_gateway, upstream, redis_url, prefix) -> None:
    """A handover leaves the store's copy of the stream open: the replica that continues the round goes on writing
    it, so the client resuming on a third replica gets the rest, not an end the first replica wrote."""
    upstream.script["tools/call"] = two_rounds
    a, b = await replicas(make_gateway, redis_url, prefix)
    c = Legacy(await make_gateway(store={"url": redis_url, "prefix": prefix, "lease_seconds": 5.0}))
    c.session_id = a.session_id
    resp, first, (last, second) = await first_round_asked(a)
    assert await a.answer(first["id"], SAMPLED) == 202
    await a.client.server.close()  # hands the round over
    assert [m for m in await within(until_closed(a, resp)) if "result" in m or "error" in m] == []
    assert await within(b.answer(second["id"], SAMPLED)) == 202  # B takes the round over
    await until(lambda: len(upstream.calls("tools/call")) == 2)
    stream = await within(c.resume(last))
    assert stream.status == 200
    _, third = await within(c.next_event(stream))
    assert third["method"] == "sampling/createMessage"
    assert await c.answer(third["id"], SAMPLED) == 202  # relayed to B, which holds the round
    _, final = await within(c.next_event(stream))
    assert final["id"] == a.next_id and final["result"]["content"][0]["text"] == "bridged"
    assert len(upstream.calls("tools/call")) == 3


async def test_a_save_after_the_lease_was_taken_writes_nothing_and_stops(make_gateway, upstream, redis_url,
                                                                       prefix) -> None:
    """docs/design/takeover.md#a-bridged-step-is-one-fenced-store-write: A's lease was taken while it stalled, before
    its renewal noticed: the save of the step an answer starts is fenced by the lease, so A overwrites nothing of the
    new holder's and stops without answering the request (the new holder does)."""
    upstream.script["tools/call"] = two_rounds
    a, _b = await replicas(make_gateway, redis_url, prefix)
    resp, first, _second = await first_round_asked(a)
    (lease_key,) = await owner_keys(redis_url, prefix, "l")
    client = redis_tests.Redis.from_url(redis_url)
    try:
        await client.set(prefix + lease_key, "the-new-holder", px=60_000)  # as a takeover's SET NX would
        before = await client.hget(prefix + "r:" + lease_key[3:], "r")
        assert await a.answer(first["id"], SAMPLED) == 202
        assert [m for m in await within(until_closed(a, resp)) if "result" in m or "error" in m] == []
        assert await client.hget(prefix + "r:" + lease_key[3:], "r") == before  # the holder's record, untouched
        assert await client.get(prefix + lease_key) == b"the-new-holder"
    finally:
        await client.delete(prefix + lease_key)
        await client.aclose()


async def test_a_fenced_save_sends_and_copies_none_of_the_events_it_carried(make_gateway, upstream, redis_url,
                                                                          prefix) -> None:
    """docs/design/takeover.md#a-bridged-step-is-one-fenced-store-write: the next ask is pushed on the stream and
    held for the save that writes it into the copy; when that save is fenced (A's lease was taken while the upstream
    worked) the ask is forgotten: neither sent to the client nor written where another replica would resume the
    stream."""
    gate = asyncio.Event()

    async def slow_second_round(body: dict[str, Any], request: Any) -> Any:
        if body["params"].get("requestState") is not None:
            await gate.wait()
        return two_rounds(body, request)

    upstream.script["tools/call"] = slow_second_round
    a, _b = await replicas(make_gateway, redis_url, prefix)
    resp, first, (last, second) = await first_round_asked(a)
    assert await a.answer(first["id"], SAMPLED) == 202
    assert await a.answer(second["id"], SAMPLED) == 202  # its step saved before this: the upstream now works
    await until(lambda: len(upstream.calls("tools/call")) == 2)
    (lease_key,) = await owner_keys(redis_url, prefix, "l")
    client = redis_tests.Redis.from_url(redis_url)
    store = redis_tests.RedisStore(redis_url, idle_seconds=60, prefix=prefix)
    try:
        await client.set(prefix + lease_key, "the-new-holder", px=60_000)
        gate.set()  # the second round's ask comes back to A, whose save of it is fenced
        rest = await within(until_closed(a, resp))
        assert rest == []  # not the ask, nor an answer: the new holder sends those
        name, seq = parse_event_id(last)
        copy = await store.read_events(a.session_id, name, seq)
        assert copy is not None and copy.events == () and not copy.ended  # left open for the new holder
        assert await store.read_events(a.session_id, name, seq + 1) is None  # the ask was never written
    finally:
        gate.set()
        await client.delete(prefix + lease_key)
        await client.aclose()
        await store.close()


async def test_a_result_whose_round_end_fails_still_reaches_the_client(upstream, aiohttp_client, redis_url,
                                                                      prefix) -> None:
    """docs/design/takeover.md#a-bridged-step-is-one-fenced-store-write: the round's end carries its result into the
    stream's copy; when that store step fails the result is not forgotten as a fenced ask is: the request is answered
    from this replica, and the copy (which no other replica could finish) is dropped."""
    from gateway.config.settings import load_config
    from gateway.http.app import create_app

    class EndFails(redis_tests.RedisStore):
        async def end_round(self, *args: Any, **kwargs: Any) -> None:
            raise StoreUnavailable("the session store (Redis) failed: gone at the end")

    store = EndFails(redis_url, idle_seconds=60, prefix=prefix)
    upstream.script["tools/call"] = two_rounds
    config = load_config(upstream_url=upstream.url, store={"url": redis_url, "prefix": prefix})
    app = create_app(config, store=store)

    async def close_store(_app: Any) -> None:  # a given store is the giver's to close, after the app is done
        await store.close()
    app.on_cleanup.append(close_store)
    a = Legacy(await aiohttp_client(app))
    await a.initialize(CAPS)
    resp, first, (last, second) = await first_round_asked(a)
    assert await a.answer(first["id"], SAMPLED) == 202
    assert await a.answer(second["id"], SAMPLED) == 202
    _, third = await within(a.next_event(resp))
    assert await a.answer(third["id"], SAMPLED) == 202
    rest = await within(until_closed(a, resp))
    assert [m["result"]["content"][0]["text"] for m in rest if "result" in m] == ["bridged"]
    name, _ = parse_event_id(last)
    await until(lambda: _copy_gone(store, a.session_id, name))


async def _copy_gone(store: Any, session_id: str, name: str) -> bool:
    return await store.read_events(session_id, name, 0) is None


async def test_the_sweep_continues_a_handed_over_round_unless_it_needs_a_credential(make_gateway, upstream,
                                                                                     redis_url, prefix) -> None:
    """docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds, the sweep: A stops while two rounds
    wait for their client. B's sweep takes the one whose request came without a credential over at once (no client
    message); the one whose request carried an Authorization header stays for its client, whose answer then brings
    the credential to B."""
    upstream.script["tools/call"] = two_rounds
    a, b = await replicas(make_gateway, redis_url, prefix)
    await first_round_asked(a)
    token = {"Authorization": "Bearer t1"}
    _a2, b2, _bearer, needs, _second = await bearer_round_asked(a, b, token)
    gateway_a = a.client.server.app[GATEWAY]
    await a.client.server.close()  # hands both over: no lease left, nobody holds them
    assert await owner_keys(redis_url, prefix, "l") == {}
    assert await within(takeover.sweep(gateway_a)) == 0  # not taken back by the replica that is stopping
    gateway_b = b.client.server.app[GATEWAY]
    assert await within(takeover.sweep(gateway_b)) == 1
    assert sorted((await owner_keys(redis_url, prefix, "l")).values()) == [gateway_b.replica]
    (held,) = gateway_b.leases.values()
    assert held.record.session_id == a.session_id and not held.record.authorized
    assert await within(takeover.sweep(gateway_b)) == 0  # the other one waits for its client
    assert await b2.answer(needs["id"], SAMPLED, **token) == 202
    await until(lambda: len(gateway_b.leases) == 2)
    assert {e.record.authorized for e in gateway_b.leases.values()} == {None, True}


async def test_the_sweep_continues_a_credentialed_round_whose_upstream_gets_the_gateways_own(
        make_gateway, upstream, redis_url, prefix, monkeypatch) -> None:
    """A client token that never goes upstream is not needed to go on: on an upstream sent the gateway's own
    credential (``auth = "gateway"``), the sweep continues the round of a request that carried a token as it does
    any other, and every upstream call, the repeated retry included, carries the gateway's credential, never the
    client's (adapters.takeover.token_goes_upstream)."""
    monkeypatch.setenv("TAKEOVER_TEST_UPSTREAM_TOKEN", "ours")
    pins = {"upstreams": {"svc": {"url": upstream.url, "auth": "gateway", "token_env": "TAKEOVER_TEST_UPSTREAM_TOKEN"}},
            "default_peer": {"name": "everyone", "upstream": "svc"}}
    upstream.script["tools/call"] = two_rounds
    a, b = await replicas(make_gateway, redis_url, prefix, pins=pins)
    token = {"Authorization": "Bearer the-clients"}
    a2, b2, _resp, first, (last, second) = await bearer_round_asked(a, b, token)
    assert await a2.answer(first["id"], SAMPLED, **token) == 202
    await a.client.server.close()  # hands it over: no lease left, nobody holds it
    gateway_b = b.client.server.app[GATEWAY]
    assert await within(takeover.sweep(gateway_b)) == 1  # continued without a message from its client
    (held,) = gateway_b.leases.values()
    assert held.record.session_id == a2.session_id and held.record.authorized is None
    assert await within(b2.answer(second["id"], SAMPLED, **token)) == 202
    stream = await within(b2.resume(last, **token))
    _, third = await within(b2.next_event(stream))
    assert third["method"] == "sampling/createMessage"
    assert await b2.answer(third["id"], SAMPLED, **token) == 202
    _, final = await within(b2.next_event(stream))
    assert final["result"]["content"][0]["text"] == "bridged"
    sent = [h.get("Authorization") for h, m in zip(upstream.headers, upstream.received, strict=True)
            if m.get("method") == "tools/call"]
    assert sent == ["Bearer ours"] * 3


async def test_the_sweep_ends_a_round_whose_session_went_idle(make_gateway, upstream, redis_url, prefix) -> None:
    """A round nobody holds whose session is idle past the limit has nobody left to answer: the sweep ends it
    (its record and lease go) instead of continuing it, and nothing is sent upstream again."""
    upstream.script["tools/call"] = two_rounds
    a, b = await replicas(make_gateway, redis_url, prefix)
    await first_round_asked(a)
    await a.client.server.close()  # handed over: the round is orphaned at once
    gateway_b = b.client.server.app[GATEWAY]
    later = gateway_b.clock() + gateway_b.policy.session_idle_ms + 1_000
    gateway_b.clock = lambda: later  # the session has been idle past the limit

    async def rounds() -> list[Any]:
        return await gateway_b.store.rounds_of(a.session_id)
    assert len(await rounds()) == 1
    assert await within(takeover.sweep(gateway_b)) == 0
    assert await rounds() == [] and gateway_b.leases == {}
    assert await owner_keys(redis_url, prefix, "l") == {}
    assert len(upstream.calls("tools/call")) == 1  # asked once, never sent again


async def test_an_answer_relayed_to_a_replica_that_dies_before_acting_is_not_lost(make_gateway, upstream, redis_url,
                                                                                 prefix) -> None:
    """docs/design/replicas.md#replicas-relay-through-the-store,
    docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds: B relays the client's answer to A, which
    owns the round; A receives it and stops before acting on it (as a killed process would, its relay never
    acknowledging). B keeps the answer, and the client's POST unacknowledged: with no acknowledgement it delivers the
    answer by the stored round, which it takes over once A's lease is free, and only then answers 202, so the round
    goes on with both answers instead of waiting for one that was acknowledged and lost."""
    upstream.script["tools/call"] = two_rounds
    a, b = await replicas(make_gateway, redis_url, prefix, timeout_seconds=0.5)
    resp, first, (_last, second) = await first_round_asked(a)
    relay_a, received = a.client.app[GATEWAY].relay, asyncio.Event()

    async def dies_on_receipt(data: Any) -> None:  # received, never acted on, never acknowledged
        received.set()
    relay_a.deliver = dies_on_receipt
    posted = asyncio.ensure_future(b.answer(first["id"], SAMPLED))  # relayed to A, the round's owner
    await within(received.wait())
    # sleep: B's relay wait must time out (0.5 s) so that B asks its stored round, still held by A
    await asyncio.sleep(scaled(0.6))
    assert not posted.done()  # not acknowledged while nobody acted on it
    await a.client.server.close()  # A goes; its saved round, both asks outstanding, is free to take over
    assert await within(posted) == 202  # acted on where B took the round over
    await within(until_closed(a, resp))
    assert await within(b.answer(second["id"], SAMPLED)) == 202
    await until(lambda: len(upstream.calls("tools/call")) == 2)
    assert upstream.calls("tools/call")[1]["params"]["inputResponses"] == {"a": SAMPLED, "b": SAMPLED}


async def test_a_relayed_answer_is_acknowledged_once_its_owner_saved_its_step(make_gateway, upstream, redis_url,
                                                                             prefix) -> None:
    """A healthy owner acknowledges a relayed answer once its step is saved, and B then does nothing more with
    it; an answer its owner does not await is acknowledged as not held."""
    upstream.script["tools/call"] = two_rounds
    a, b = await replicas(make_gateway, redis_url, prefix)
    _resp, first, (_last, second) = await first_round_asked(a)
    relay_a, relay_b = a.client.app[GATEWAY].relay, b.client.app[GATEWAY].relay
    seen: list[bool] = []
    answer = relay_b.answer

    async def watched(session_id: str, message: Any) -> Any:
        acked = await answer(session_id, message)
        if acked is not None:
            acked.add_done_callback(lambda done: seen.append(done.result()))
        return acked
    relay_b.answer = watched
    assert await within(b.answer(first["id"], SAMPLED)) == 202
    await until(lambda: seen == [True])
    assert await owner_keys(redis_url, prefix, "a") != {}  # A still owns the ask not answered yet
    unknown = R.Answer(a.session_id, {"jsonrpc": "2.0", "id": "g-never-asked", "result": {}},
                       R.ReplyTo(b.client.app[GATEWAY].replica, "token-1"))
    acked = relay_b.acks["token-1"] = asyncio.get_running_loop().create_future()
    await relay_a.deliver(R.encode(unknown))
    assert await within(acked) is False
    del relay_b.acks["token-1"]  # put there by hand, without the relay's own clean-up
    assert await within(b.answer(second["id"], SAMPLED)) == 202
    await until(lambda: seen == [True, True])
    await until(lambda: len(upstream.calls("tools/call")) == 2)
    assert upstream.calls("tools/call")[1]["params"]["inputResponses"] == {"a": SAMPLED, "b": SAMPLED}
    assert relay_b.acks == {}  # nothing left waiting


async def test_an_answer_relayed_as_its_round_is_handed_over_is_acknowledged_as_not_acted_on(
        make_gateway, upstream, redis_url, prefix) -> None:
    """A's exchange hands its round over (as at SIGTERM) with the client's relayed answer queued behind that: A
    tells B the answer was not acted on (so B gives it to the round where it goes on, §34) rather than that it
    was; the round, taken over by B, then goes on with both answers."""
    upstream.script["tools/call"] = two_rounds
    a, b = await replicas(make_gateway, redis_url, prefix)
    _resp, first, (_last, second) = await first_round_asked(a)
    relay_a, relay_b = a.client.app[GATEWAY].relay, b.client.app[GATEWAY].relay
    handed = a.client.app[GATEWAY].runtime(a.session_id).awaiting[first["id"]].door.hand_over()
    acked = relay_b.acks["token-2"] = asyncio.get_running_loop().create_future()
    relayed = R.Answer(a.session_id, {"jsonrpc": "2.0", "id": first["id"], "result": SAMPLED},
                       R.ReplyTo(b.client.app[GATEWAY].replica, "token-2"))
    await relay_a.deliver(R.encode(relayed))  # queued behind the hand-over, in the same turn
    assert await within(acked) is False
    del relay_b.acks["token-2"]  # put there by hand, without the relay's own clean-up
    await within(handed)
    for ask in (first, second):  # the client's answers, as B's fallback would give the first one
        assert await within(b.answer(ask["id"], SAMPLED)) == 202
    await until(lambda: len(upstream.calls("tools/call")) == 2)
    assert upstream.calls("tools/call")[1]["params"]["inputResponses"] == {"a": SAMPLED, "b": SAMPLED}


async def test_an_answer_queued_as_its_round_is_handed_over_is_refused_for_sending_again(
        make_gateway, upstream, redis_url, prefix) -> None:
    """docs/design/takeover.md#sigterm-hands-the-rounds-over: A's exchange hands its round over (as at SIGTERM) with
    the client's answer, posted to A itself, queued behind that. The answer is refused (HandedOver: the POST's 503),
    not acknowledged while nobody acted on it; sent again, to B, it reaches the round where it goes on."""
    upstream.script["tools/call"] = two_rounds
    a, b = await replicas(make_gateway, redis_url, prefix)
    _resp, first, (_last, second) = await first_round_asked(a)
    exchange = a.client.app[GATEWAY].runtime(a.session_id).awaiting[first["id"]]
    handed = exchange.door.hand_over()
    with pytest.raises(HandedOver):  # queued behind the hand-over, in the same turn
        await within(exchange.door.answer_now(first["id"], {"jsonrpc": "2.0", "id": first["id"], "result": SAMPLED}))
    await within(handed)
    for ask in (first, second):
        assert await within(b.answer(ask["id"], SAMPLED)) == 202
    await until(lambda: len(upstream.calls("tools/call")) == 2)
    assert upstream.calls("tools/call")[1]["params"]["inputResponses"] == {"a": SAMPLED, "b": SAMPLED}


async def test_a_cancel_given_to_a_round_as_it_is_handed_over_follows_the_round(make_gateway, upstream, redis_url,
                                                                                 prefix) -> None:
    """docs/design/takeover.md#sigterm-hands-the-rounds-over: A's exchange hands its round over (as at SIGTERM) with
    the client's cancel, posted to A itself, queued behind that. The cancel is not dropped with the exchange (the
    round would go on elsewhere, and its client's 202 would be a lie): it follows the round, which here means A, once
    its exchange let go, takes the stored round and ends it, and nothing is sent upstream for it again."""
    upstream.script["tools/call"] = two_rounds
    a, _b = await replicas(make_gateway, redis_url, prefix)
    _resp, _first, _second = await first_round_asked(a)
    gw = a.client.app[GATEWAY]
    session = await gw.store.get_session(a.session_id)
    exchange = gw.runtime(a.session_id).exchanges[a.next_id]
    handed = exchange.door.hand_over()
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": a.next_id}}
    await within(legacy.cancel(gw, session, a.next_id, None, cancel))  # queued behind the hand-over, same turn
    assert handed.done()  # the exchange let the round go before the cancel went after it
    assert await gw.store.rounds_of(a.session_id) == []  # ended where the cancel took it, not left to go on
    assert await owner_keys(redis_url, prefix, "aql") == {}
    assert len(upstream.calls("tools/call")) == 1
    with pytest.raises(HandedOver):  # the exchange itself says so, to whoever gives it a cancel now
        await within(exchange.door.cancel_now(None))


async def test_a_replica_shutting_down_refuses_an_answer_it_would_have_to_take_a_round_on_for(
        make_gateway, upstream, redis_url, prefix) -> None:
    """docs/design/takeover.md#sigterm-hands-the-rounds-over: a replica shutting down takes no round on. A handed A's
    round over (nobody holds it); a client's answer reaching B while B is shutting down gets 503 (-32603,
    ``data.gateway = "handed_over"``, the answer's id) to send again, rather than B taking the round on as it exits.
    Sent again once B is open, it is acted on there. (An answer for a round a live replica runs is still relayed to
    it by a stopping replica.)"""
    upstream.script["tools/call"] = two_rounds
    a, b = await replicas(make_gateway, redis_url, prefix)
    _resp, first, _second = await first_round_asked(a)
    await a.client.server.close()  # hands the round over: no lease left, nobody holds it
    gateway_b = b.client.app[GATEWAY]
    gateway_b.closing = True
    body = {"jsonrpc": "2.0", "id": first["id"], "result": SAMPLED}
    resp = await within(b.client.post("/mcp", json=body, headers=b.headers()))
    assert resp.status == 503
    refusal = await resp.json()
    assert refusal["id"] == first["id"] and refusal["error"]["code"] == -32603
    assert refusal["error"]["data"] == {"gateway": "handed_over"}
    assert gateway_b.leases == {} and await owner_keys(redis_url, prefix, "l") == {}  # not taken on
    gateway_b.closing = False
    assert await within(b.answer(first["id"], SAMPLED)) == 202  # sent again: B takes the round on and acts
    assert len(gateway_b.leases) == 1


async def test_an_answer_relayed_to_a_frozen_owner_goes_where_its_round_is_taken_over(make_gateway, upstream,
                                                                                     redis_url, prefix) -> None:
    """docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds: A, the round's owner, is frozen (its
    subscription still counts as listening, but it neither acts on what it receives nor renews its lease). B, given
    the client's answer, keeps relaying it and asking for A's word; once A's lease lapses, B takes the round over and
    acts on the answer itself."""
    upstream.script["tools/call"] = two_rounds
    a, b = await replicas(make_gateway, redis_url, prefix, lease_seconds=1.0, timeout_seconds=0.3)
    _resp, first, (_last, second) = await first_round_asked(a)
    gw_a, received = a.client.app[GATEWAY], []

    async def frozen(data: Any) -> None:
        received.append(data)

    async def not_renewed(*args: Any, **kwargs: Any) -> list[str]:
        return []
    gw_a.relay.deliver, gw_a.store.renew_leases = frozen, not_renewed
    assert await within(b.answer(first["id"], SAMPLED)) == 202  # once acted on: where B took the round over
    assert len(received) >= 2  # relayed to A again while A still held the lease
    assert b.client.app[GATEWAY].leases  # B took the round over once A's lease lapsed, before the 202
    assert await within(b.answer(second["id"], SAMPLED)) == 202
    await until(lambda: len(upstream.calls("tools/call")) == 2)
    assert upstream.calls("tools/call")[1]["params"]["inputResponses"] == {"a": SAMPLED, "b": SAMPLED}


async def test_an_answer_its_live_owner_never_acts_on_is_refused_not_acknowledged(make_gateway, upstream,
                                                                                  redis_url, prefix) -> None:
    """docs/design/replicas.md#replicas-relay-through-the-store: A owns the round, keeps its lease and listens, but
    never acts on the relayed answer (a stuck process). B relays it again, asking for A's word, until a few store
    timeouts past the lease time, then answers the client's POST 503 (-32603, ``data.store``): the client learns the
    answer was not taken, instead of a 202 for an answer nobody has. The round still awaits it on A."""
    upstream.script["tools/call"] = two_rounds
    a, b = await replicas(make_gateway, redis_url, prefix, lease_seconds=1.0, timeout_seconds=0.25)
    _resp, first, _second = await first_round_asked(a)
    received: list[Any] = []

    async def stuck(data: Any) -> None:
        received.append(data)
    a.client.app[GATEWAY].relay.deliver = stuck
    body = {"jsonrpc": "2.0", "id": first["id"], "result": SAMPLED}
    resp = await within(b.client.post("/mcp", json=body, headers=b.headers()))
    assert resp.status == 503
    error = (await resp.json())["error"]
    assert error["code"] == -32603 and error["data"] == {"store": "unavailable"}
    assert len(received) == 1 + 4 + 2  # at once, then again after each store timeout: the lease's four, and two
    assert first["id"] in a.client.app[GATEWAY].runtime(a.session_id).awaiting  # not taken: still asked
    assert len(upstream.calls("tools/call")) == 1


async def test_a_cancel_relayed_to_a_replica_that_dies_before_acting_still_ends_the_round(make_gateway, upstream,
                                                                                         redis_url, prefix) -> None:
    """docs/design/replicas.md#replicas-relay-through-the-store: B relays the client's cancel to A, which receives it
    and stops before acting on it. B keeps the cancel, and its POST unacknowledged: with no acknowledgement it ends
    the round where it is taken over, and nothing is sent upstream for it again (without that, the round would go on
    with the client's next answers)."""
    upstream.script["tools/call"] = two_rounds
    a, b = await replicas(make_gateway, redis_url, prefix, timeout_seconds=0.5)
    resp, _first, _second = await first_round_asked(a)
    relay_a, received = a.client.app[GATEWAY].relay, asyncio.Event()

    async def dies_on_receipt(data: Any) -> None:  # received, never acted on, never acknowledged
        received.set()
    relay_a.deliver = dies_on_receipt
    posted = asyncio.ensure_future(b.notify("notifications/cancelled", {"requestId": a.next_id, "reason": "stop"}))
    await within(received.wait())
    # sleep: B's relay wait must time out (0.5 s) so that B asks its stored round, still held by A
    await asyncio.sleep(scaled(0.6))
    assert not posted.done()
    await a.client.server.close()  # A goes; its saved round is free to take over
    assert await within(posted) == 202  # the round ended where B took it over
    await within(until_closed(a, resp))
    store_b = b.client.app[GATEWAY].store

    async def ended() -> bool:
        return await store_b.rounds_of(a.session_id) == []
    await until(ended)  # claimed and ended by B
    assert len(upstream.calls("tools/call")) == 1  # nothing was sent upstream again
    assert b.client.app[GATEWAY].runtime(a.session_id).exchanges == {}


async def test_an_acknowledgement_that_never_arrives_leaves_nothing_delivered_twice(make_gateway, upstream,
                                                                                   redis_url, prefix,
                                                                                   caplog) -> None:
    """The owner acts on a relayed answer but its acknowledgement (published by the save of the answer's step,
    docs/design/replicas.md#replicas-relay-through-the-store) never reaches the sender: the sender, hearing nothing,
    delivers the answer by the stored round, which has moved past it, so nothing is delivered or sent upstream
    twice."""
    caplog.set_level(logging.INFO, logger="gateway")
    upstream.script["tools/call"] = two_rounds
    a, b = await replicas(make_gateway, redis_url, prefix, timeout_seconds=0.5)
    _resp, first, (_last, second) = await first_round_asked(a)
    relay_b = b.client.app[GATEWAY].relay
    deliver, lost = relay_b.deliver, []

    async def acks_lost(data: Any) -> None:
        relayed = R.decode(data) if isinstance(data, bytes | str) else data
        if isinstance(relayed, R.Ack):
            lost.append(relayed)
            return
        await deliver(data)
    relay_b.deliver = acks_lost
    for ask in (first, second):
        assert await within(b.answer(ask["id"], SAMPLED)) == 202
    await until(lambda: len(upstream.calls("tools/call")) == 2)
    await until(lambda: relay_b.acks == {})  # B stopped waiting: the stored round needs neither answer
    await asyncio.sleep(0.2)  # sleep: a quiet window: no third call may follow
    assert len(upstream.calls("tools/call")) == 2
    assert upstream.calls("tools/call")[1]["params"]["inputResponses"] == {"a": SAMPLED, "b": SAMPLED}
    assert [ack.held for ack in lost] == [True, True]  # both were acted on, and said so
    assert sum("no acknowledgement for a relayed message" in r.getMessage() for r in caplog.records) == 2
