"""Legacy ``resources/subscribe`` / ``unsubscribe`` through the session's own upstream listen (gateway.session.listen,
gateway.http.subscriptions.on_subscribe): refusals, concurrency and the acknowledged filter (2026-07-28
basic/patterns §Subscriptions)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.http.app import GATEWAY
from tests.waiting import until, until_hung_up


@pytest.mark.parametrize("error,status,answered", [
    ({"code": -32602, "message": "unknown resource"}, 400, 200),
    # The upstream refused the client's own (forwarded) token: the answer carries the status, so the client
    # authorizes again (docs/design/authorization.md#principal-and-token-passthrough), and still the upstream's error.
    ({"code": -32001, "message": "token expired"}, 401, 401),
])
async def test_a_refused_listen_answers_the_subscribe_with_the_upstreams_error(legacy, upstream, error,
                                                                               status, answered) -> None:
    upstream.script["subscriptions/listen"] = lambda body, request: ("error", error, status)
    await legacy.initialize()
    resp = await legacy.post("resources/subscribe", {"uri": "file:///nope"})
    assert resp.status == answered
    message = await resp.json()
    legacy.check(message)
    assert message["error"] == error  # translated (adapters.errors): these codes pass down unchanged
    record = await legacy.client.app[GATEWAY].store.get_session(legacy.session_id)
    assert record.subscriptions == []  # the client is not subscribed


def listen_acked_on_demand(upstream):
    """A listen per request whose ack is sent when its event (``acks[n]``, n from 1) is set; held until closed."""
    filters, acks = [], {}

    def listen(body, request):
        notifications = body["params"]["notifications"]
        filters.append(notifications)
        acks[len(filters)] = event = asyncio.Event()

        async def acknowledged():
            await event.wait()
            return {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                    "params": {"notifications": notifications}}

        async def hold():
            await until_hung_up(request)
        return [acknowledged, hold]
    upstream.script["subscriptions/listen"] = listen
    return filters, acks


async def test_concurrent_subscribes_keep_every_uri_in_the_listen(legacy, upstream) -> None:
    filters, acks = listen_acked_on_demand(upstream)
    await legacy.initialize()
    gw = legacy.client.app[GATEWAY]
    first = asyncio.ensure_future(legacy.call("resources/subscribe", {"uri": "file:///a"}))
    await until(lambda: len(filters) == 1)
    second = asyncio.ensure_future(legacy.call("resources/subscribe", {"uri": "file:///b"}))
    await asyncio.sleep(0.1)  # sleep: a quiet window: the second change must not start before the first ends
    assert len(filters) == 1  # the second waits for the first change to finish
    acks[1].set()
    await until(lambda: len(filters) == 2)
    acks[2].set()
    assert (await first)["result"] == {} and (await second)["result"] == {}
    record = await gw.store.get_session(legacy.session_id)
    assert record.subscriptions == ["file:///a", "file:///b"]
    assert gw.runtimes[legacy.session_id].listen.filter["resourceSubscriptions"] == ["file:///a", "file:///b"]
    assert filters[-1]["resourceSubscriptions"] == ["file:///a", "file:///b"]


async def test_a_get_stream_opened_during_a_subscribe_does_not_undo_it(legacy, upstream) -> None:
    filters, acks = listen_acked_on_demand(upstream)
    await legacy.initialize()
    gw = legacy.client.app[GATEWAY]
    subscribing = asyncio.ensure_future(legacy.call("resources/subscribe", {"uri": "file:///a"}))
    await until(lambda: len(filters) == 1)
    stream = await legacy.client.get("/mcp", headers={**legacy.headers(), "Accept": "text/event-stream"})
    assert stream.status == 200
    acks[1].set()
    assert (await subscribing)["result"] == {}
    # The GET's background listen change runs after it, from the saved record, and must not undo the subscribe.
    # sleep: a quiet window (there is nothing to wait for when the change rightly changes nothing)
    await asyncio.sleep(0.2)
    assert len(filters) == 1 and gw.hub.shared == {}
    assert gw.runtimes[legacy.session_id].listen.filter["resourceSubscriptions"] == ["file:///a"]


async def test_a_subscribe_the_acknowledgement_leaves_out_is_refused_and_undone(legacy, upstream) -> None:
    opened, closed = [], []

    def listen(body, request):  # honours every filter except a subscription to file:///secret
        opened.append(body["params"]["notifications"])
        granted = dict(body["params"]["notifications"])
        uris = [u for u in granted.pop("resourceSubscriptions", []) if u != "file:///secret"]
        if uris:
            granted["resourceSubscriptions"] = uris

        async def hold():
            try:
                await until_hung_up(request)
            finally:
                closed.append(body["params"]["notifications"])
        return [{"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                 "params": {"notifications": granted}}, hold]
    upstream.script["subscriptions/listen"] = listen
    await legacy.initialize()
    gw = legacy.client.app[GATEWAY]
    assert (await legacy.call("resources/subscribe", {"uri": "file:///a"}))["result"] == {}
    message = await legacy.call("resources/subscribe", {"uri": "file:///secret"})
    assert message["error"]["code"] == -32602 and "file:///secret" in message["error"]["message"]
    assert message["error"]["data"] == {"unhonouredUris": ["file:///secret"]}
    record = await gw.store.get_session(legacy.session_id)
    assert record.subscriptions == ["file:///a"]  # the client is not subscribed to it
    listener = gw.runtimes[legacy.session_id].listen
    assert listener.filter["resourceSubscriptions"] == ["file:///a"] and not listener.task.done()
    await until(lambda: closed == [opened[-1]])  # only the refused listen was closed; file:///a's one stays


def listen_reopened(upstream, second):
    """Opens before ``drop`` is set acknowledge their whole filter and end when it is set (an upstream restart);
    every open after it answers ``second(body, request)``."""
    opened, drop = [], asyncio.Event()

    def listen(body, request):
        opened.append(body["params"]["notifications"])
        if drop.is_set():
            return second(body, request)

        async def until_dropped():
            await drop.wait()
        return [{"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                 "params": {"notifications": body["params"]["notifications"]}}, until_dropped]
    upstream.script["subscriptions/listen"] = listen
    return opened, drop


def held(request):
    async def hold():
        await until_hung_up(request)
    return hold


async def test_a_reopened_listen_that_honours_less_unsubscribes_those_uris_and_says_so(legacy, upstream) -> None:
    def honour_only_a(body, request):
        granted = {**body["params"]["notifications"], "resourceSubscriptions": ["file:///a"]}
        return [{"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                 "params": {"notifications": granted}}, held(request)]
    opened, drop = listen_reopened(upstream, honour_only_a)
    await legacy.initialize()
    gw = legacy.client.app[GATEWAY]
    assert (await legacy.call("logging/setLevel", {"level": "warning"}))["result"] == {}
    for uri in ("file:///a", "file:///b"):
        assert (await legacy.call("resources/subscribe", {"uri": uri}))["result"] == {}
    stream = await legacy.client.get("/mcp", headers={**legacy.headers(), "Accept": "text/event-stream"})
    drop.set()

    async def first_message():  # after the GET stream's priming event
        while (event := await legacy.next_event(stream)) == (event[0], None) and event[0] is not None:
            pass
        return event[1]
    message = await asyncio.wait_for(first_message(), 10)  # bounded: without the warning this would hang
    assert message is not None, "the GET stream ended without the warning"
    assert message["method"] == "notifications/message" and message["params"]["level"] == "warning"
    assert message["params"]["data"]["unhonouredUris"] == ["file:///b"]
    assert (await gw.store.get_session(legacy.session_id)).subscriptions == ["file:///a"]
    listener = gw.runtimes[legacy.session_id].listen
    assert listener.filter["resourceSubscriptions"] == ["file:///a"] and not listener.task.done()
    assert opened[-1]["resourceSubscriptions"] == ["file:///a", "file:///b"]
    stream.close()


@pytest.mark.parametrize("refusal", ["json-rpc error", "bare 401"])
async def test_a_reopened_listen_the_upstream_refuses_is_not_retried_and_a_new_subscribe_works(
        legacy, upstream, refusal) -> None:
    from aiohttp import web
    refusing = [True]

    def second(body, request):
        if not refusing[0]:
            return [{"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                     "params": {"notifications": body["params"]["notifications"]}}, held(request)]
        if refusal == "bare 401":
            return web.Response(status=401, headers={"WWW-Authenticate": "Bearer"})
        return ("error", {"code": -32602, "message": "no such resource"}, 400)
    opened, drop = listen_reopened(upstream, second)
    await legacy.initialize()
    gw = legacy.client.app[GATEWAY]
    assert (await legacy.call("resources/subscribe", {"uri": "file:///a"}))["result"] == {}
    listener = gw.runtimes[legacy.session_id].listen
    drop.set()
    await until(lambda: listener.task.done())  # ended for good: no endless re-opens with a backoff
    assert len(opened) == 2 and listener.task.exception() is None
    refusing[0] = False
    assert (await legacy.call("resources/subscribe", {"uri": "file:///b"}))["result"] == {}
    assert len(opened) == 3 and opened[-1]["resourceSubscriptions"] == ["file:///a", "file:///b"]
    assert not gw.runtimes[legacy.session_id].listen.task.done()


async def test_subscribes_queued_behind_a_slow_ack_share_one_listen(legacy, upstream) -> None:
    filters, acks = listen_acked_on_demand(upstream)
    await legacy.initialize()
    gw = legacy.client.app[GATEWAY]
    uris = [f"file:///{n}" for n in range(5)]
    first = asyncio.ensure_future(legacy.call("resources/subscribe", {"uri": uris[0]}))
    await until(lambda: len(filters) == 1)
    rest = [asyncio.ensure_future(legacy.call("resources/subscribe", {"uri": u})) for u in uris[1:]]
    await until(lambda: len(gw.runtimes[legacy.session_id].listen.turns.queued) == 4)
    acks[1].set()
    await until(lambda: len(filters) == 2)
    acks[2].set()
    assert [(await call)["result"] for call in [first, *rest]] == [{}] * 5
    assert len(filters) == 2 and filters[-1]["resourceSubscriptions"] == uris  # one listen for the four queued
    assert (await gw.store.get_session(legacy.session_id)).subscriptions == uris


async def test_subscribes_queued_behind_a_dead_upstream_fail_together(legacy, upstream, monkeypatch) -> None:
    import gateway.session.listen
    monkeypatch.setattr(gateway.session.listen, "ACK_TIMEOUT_SECONDS", 0.3)
    filters, _acks = listen_acked_on_demand(upstream)  # never acknowledged
    await legacy.initialize()
    gw = legacy.client.app[GATEWAY]
    first = asyncio.ensure_future(legacy.call("resources/subscribe", {"uri": "file:///0"}))
    await until(lambda: len(filters) == 1)
    rest = [asyncio.ensure_future(legacy.call("resources/subscribe", {"uri": f"file:///{n}"})) for n in (1, 2, 3)]
    errors = [(await call)["error"] for call in [first, *rest]]
    assert all(e["data"] == {"upstream": "timeout"} for e in errors)
    assert len(filters) == 2  # the three queued ones waited for one more ack, not one each
    assert (await gw.store.get_session(legacy.session_id)).subscriptions == []
    assert gw.runtimes[legacy.session_id].listen.turns.queued == []


async def turns_behind_a_held_ack(legacy, upstream, *uris):
    """Subscribes to ``file:///a`` (its listen's ack held), then queues one change per URI behind it, called
    directly; returns (filters, acks, gw, first, queued) once they are all queued."""
    from gateway.http.subscriptions import change_listen
    filters, acks = listen_acked_on_demand(upstream)
    await legacy.initialize()
    gw = legacy.client.app[GATEWAY]

    def change(uri):
        return asyncio.ensure_future(change_listen(gw, legacy.session_id, None, (uri, True)))
    first = change("file:///a")
    await until(lambda: len(filters) == 1)
    queued = [change(uri) for uri in uris]
    await until(lambda: len(gw.runtimes[legacy.session_id].listen.turns.queued) == len(uris))
    return filters, acks, gw, first, queued


async def test_a_cancelled_turn_hands_the_queued_changes_to_the_next(legacy, upstream) -> None:
    filters, acks, gw, first, [second] = await turns_behind_a_held_ack(legacy, upstream, "file:///b")
    first.cancel()  # e.g. shutdown: the turn holding the lock goes, its queued follower must not be stranded
    await until(lambda: len(filters) == 2)
    acks[2].set()
    assert await asyncio.wait_for(second, 5) is None
    assert filters[-1]["resourceSubscriptions"] == ["file:///b"]
    assert (await gw.store.get_session(legacy.session_id)).subscriptions == ["file:///b"]
    assert first.cancelled()


async def test_a_change_cancelled_before_its_turn_is_not_applied(legacy, upstream) -> None:
    filters, acks, gw, first, [kept, gone] = await turns_behind_a_held_ack(legacy, upstream, "file:///b",
                                                                           "file:///c")
    gone.cancel()
    await until(lambda: len(gw.runtimes[legacy.session_id].listen.turns.queued) == 1)
    acks[1].set()
    await until(lambda: len(filters) == 2)
    acks[2].set()
    assert await first is None and await kept is None
    assert filters[-1]["resourceSubscriptions"] == ["file:///a", "file:///b"]
    assert (await gw.store.get_session(legacy.session_id)).subscriptions == ["file:///a", "file:///b"]


async def test_a_delete_while_a_subscribe_waits_for_its_ack_stands(legacy, upstream) -> None:
    """A subscribe writes the session's subscriptions once its listen is acknowledged; a DELETE (another
    replica's) may have ended the session during that wait. The session stays deleted (its id answers 404), and
    the subscribe is refused as for a session not found."""
    filters, acks = listen_acked_on_demand(upstream)
    await legacy.initialize()
    gw = legacy.client.app[GATEWAY]
    subscribe = asyncio.ensure_future(legacy.post("resources/subscribe", {"uri": "file:///a"}))
    await until(lambda: len(filters) == 1)
    real_change = gw.store.change_session

    async def deleted_first(session_id, change):
        await gw.store.delete_session(session_id)  # the DELETE, come while the subscribe waited
        return await real_change(session_id, change)
    gw.store.change_session = deleted_first
    acks[1].set()
    answer = await subscribe
    gw.store.change_session = real_change
    assert answer.status == 404, await answer.text()
    assert await gw.store.get_session(legacy.session_id) is None
    assert (await legacy.post("ping")).status == 404
