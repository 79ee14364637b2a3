"""Idle sessions share one upstream listen (gateway.session.listen.ListenHub); a subscribing session gets its own."""

from __future__ import annotations

import asyncio

import pytest

from gateway.http.app import GATEWAY
from tests.gateway.conftest import Legacy, text
from tests.waiting import until, until_hung_up, within


def scripted_listen(upstream):
    """A listen that acks, then sends tools/list_changed when ``fire`` is set, and holds until closed."""
    opened, closed, fire = [], [], asyncio.Event()

    def listen(body, request):
        notifications = body["params"]["notifications"]
        opened.append(notifications)
        sub = {"io.modelcontextprotocol/subscriptionId": body["id"]}

        def gone() -> bool:
            return request.transport is None or request.transport.is_closing()

        async def changed():
            try:  # the server cancels this handler when the gateway closes the listen (2026 cancel)
                await until_hung_up(request, unless=fire)
            finally:
                if gone():
                    closed.append(notifications)
            if gone():
                return None
            return {"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {"_meta": sub}}

        async def hold():
            try:
                await until_hung_up(request)
            finally:
                if notifications not in closed:
                    closed.append(notifications)
        return [{"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                 "params": {"notifications": notifications, "_meta": sub}}, changed, hold]
    upstream.script["subscriptions/listen"] = listen
    return opened, closed, fire


async def open_stream(legacy: Legacy):
    stream = await legacy.client.get("/mcp", headers={**legacy.headers(), "Accept": "text/event-stream"})
    assert stream.status == 200
    assert (await legacy.next_event(stream))[1] is None  # priming
    return stream




async def test_sessions_share_one_listen_and_each_gets_every_notification(make_gateway, upstream):
    opened, closed, fire = scripted_listen(upstream)
    client = await make_gateway()
    sessions = [Legacy(client) for _ in range(3)]
    streams = []
    for legacy in sessions:
        await legacy.initialize()
        streams.append(await open_stream(legacy))
    hub = client.app[GATEWAY].hub
    await until(lambda: sum(len(e.members) for e in hub.shared.values()) == 3)
    assert len(opened) == 1  # one upstream listen for three idle sessions
    fire.set()
    for legacy, stream in zip(sessions, streams, strict=True):
        _, note = await legacy.next_event(stream)
        assert note == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    for legacy in sessions[:2]:
        assert (await legacy.client.delete("/mcp", headers=legacy.headers())).status == 204
    await asyncio.sleep(0.1)  # sleep: a quiet window: the shared listen must stay open
    assert closed == []  # the last member still holds it
    assert (await sessions[2].client.delete("/mcp", headers=sessions[2].headers())).status == 204
    await until(lambda: len(closed) == 1)  # the last one out closes the upstream listen
    assert hub.shared == {}


async def test_a_subscribing_session_moves_to_its_own_listen_and_back(make_gateway, upstream):
    opened, closed, _fire = scripted_listen(upstream)
    client = await make_gateway()
    a, b = Legacy(client), Legacy(client)
    for legacy in (a, b):
        await legacy.initialize()
        await open_stream(legacy)
    hub = client.app[GATEWAY].hub
    await until(lambda: len(opened) == 1 and sum(len(e.members) for e in hub.shared.values()) == 2)
    assert (await a.call("resources/subscribe", {"uri": "file:///n/1"}))["result"] == {}
    assert opened[-1]["resourceSubscriptions"] == ["file:///n/1"] and len(opened) == 2
    assert [list(e.members) for e in hub.shared.values()] == [[b.session_id]]
    assert (await a.call("resources/unsubscribe", {"uri": "file:///n/1"}))["result"] == {}
    await until(lambda: closed and "resourceSubscriptions" in closed[-1])  # its own listen closed
    assert sorted(m for e in hub.shared.values() for m in e.members) == sorted([a.session_id, b.session_id])
    assert len(opened) == 2  # it rejoined the shared listen, which was still open


class Authed(Legacy):
    """A legacy client with its own bearer token: each distinct token gets its own shared listen."""

    def __init__(self, client, token: str) -> None:
        super().__init__(client)
        self.token = token

    def headers(self, **extra: str) -> dict[str, str]:
        return {**super().headers(**extra), "Authorization": f"Bearer {self.token}"}


MODERN_LISTEN = {"jsonrpc": "2.0", "id": "ml", "method": "subscriptions/listen", "params": {
    "notifications": {"toolsListChanged": True}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}


async def test_held_open_listens_never_take_the_connections_requests_need(make_gateway, upstream) -> None:
    opened, _closed, _fire = scripted_listen(upstream)
    upstream.script["tools/call"] = lambda b, r: text("ok")
    client = await make_gateway(upstream_max_connections=2)
    users = [Authed(client, f"user{i}") for i in range(3)]
    for user in users[:2]:  # two tokens: two shared listens, each holding an upstream connection
        await user.initialize()
        await open_stream(user)
    modern = asyncio.ensure_future(client.post("/mcp", json=MODERN_LISTEN, headers={  # a modern client's own
        "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "subscriptions/listen"}))
    await until(lambda: len(opened) == 3)
    await asyncio.wait_for(users[2].initialize(), 3)
    message = await asyncio.wait_for(users[2].call("tools/call", {"name": "echo", "arguments": {}}), 3)
    assert message["result"]["content"][0]["text"] == "ok"
    (await modern).close()


async def test_a_request_finding_every_connection_busy_fails_within_the_connect_timeout(make_gateway,
                                                                                         upstream) -> None:
    gate = asyncio.Event()

    async def blocked(body, request):
        await gate.wait()
        return text("late")
    upstream.script["tools/call"] = blocked
    client = await make_gateway(upstream_max_connections=1, upstream_connect_timeout_seconds=0.3)
    legacy = Legacy(client)
    await legacy.initialize()
    first = asyncio.ensure_future(legacy.call("tools/call", {"name": "slow", "arguments": {}}))
    await until(lambda: upstream.calls("tools/call"))
    message = await asyncio.wait_for(legacy.call("tools/list"), 3)
    assert message["error"]["code"] == -32603 and "busy" in message["error"]["message"]
    assert "all 1 request connections are in use" in message["error"]["message"]
    gate.set()
    assert (await first)["result"]["content"][0]["text"] == "late"


def unacknowledged_listen(upstream):
    """A listen whose ack waits for ``ack`` to be set, then holds until closed."""
    ack, opened, closed = asyncio.Event(), [], []

    def listen(body, request):
        opened.append(body["id"])

        async def acknowledged():
            await ack.wait()
            return {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                    "params": {"notifications": body["params"]["notifications"]}}

        async def hold():
            try:
                await until_hung_up(request)
            finally:
                closed.append(body["id"])
        return [acknowledged, hold]
    upstream.script["subscriptions/listen"] = listen
    return ack, opened, closed


async def _delete(legacy: Legacy) -> None:
    assert (await legacy.client.delete("/mcp", headers=legacy.headers())).status == 204


async def _expire(legacy: Legacy) -> None:
    gw = legacy.client.app[GATEWAY]
    real = gw.clock
    gw.clock = lambda: real() + 3_601_000
    assert await gw.sweep_expired(force=True) == 1
    gw.clock = real


@pytest.mark.parametrize("end", [_delete, _expire])
async def test_a_session_ended_while_its_shared_listen_awaits_the_ack_leaves_no_listen(make_gateway, upstream,
                                                                                      end) -> None:
    ack, opened, closed = unacknowledged_listen(upstream)
    client = await make_gateway()
    gw = client.app[GATEWAY]
    legacy = Legacy(client)
    await legacy.initialize()
    await open_stream(legacy)
    await until(lambda: opened)
    await end(legacy)
    assert gw.hub.shared == {}
    ack.set()  # (the fake upstream only notices the close once it writes)
    await until(lambda: closed == opened)  # nobody is left to receive it: the upstream listen was closed
    assert gw.hub.shared == {} and gw.hub.tasks == set()


async def test_a_shared_listen_another_session_still_awaits_survives_the_first_ones_end(make_gateway,
                                                                                       upstream) -> None:
    ack, opened, closed = unacknowledged_listen(upstream)
    client = await make_gateway()
    hub = client.app[GATEWAY].hub
    first, second = Legacy(client), Legacy(client)
    for legacy in (first, second):
        await legacy.initialize()
        await open_stream(legacy)
    await until(lambda: opened and sum(e.waiting for e in hub.shared.values()) == 2)
    await _delete(first)
    ack.set()
    await until(lambda: [list(e.members) for e in hub.shared.values()] == [[second.session_id]])
    assert len(opened) == 1 and closed == []


async def test_a_shared_listen_whose_reopen_is_refused_is_forgotten_and_a_new_one_opens(make_gateway,
                                                                                      upstream) -> None:
    from tests.gateway.session.test_subscribe import held, listen_reopened
    refusing = [True]

    def second(body, request):
        if refusing[0]:
            return ("error", {"code": -32001, "message": "token expired"}, 401)
        return [{"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                 "params": {"notifications": body["params"]["notifications"]}}, held(request)]
    opened, drop = listen_reopened(upstream, second)
    client = await make_gateway()
    gw = client.app[GATEWAY]
    a, b = Legacy(client), Legacy(client)
    for legacy in (a, b):
        await legacy.initialize()
        await open_stream(legacy)
    await until(lambda: len(gw.hub.shared) == 1 and len(next(iter(gw.hub.shared.values())).members) == 2)
    entry = next(iter(gw.hub.shared.values()))
    assert len(opened) == 1
    drop.set()
    await until(lambda: entry.listener.task.done())
    assert len(opened) == 2 and gw.hub.shared == {} and entry.members == {}
    assert gw.runtimes[a.session_id].hub_key is None and gw.runtimes[b.session_id].hub_key is None
    refusing[0] = False
    c = Legacy(client)
    await c.initialize()
    await open_stream(c)  # a later session is not joined to the dead listen: a new one opens
    await until(lambda: len(opened) == 3 and len(gw.hub.shared) == 1)
    assert not next(iter(gw.hub.shared.values())).listener.task.done()


async def test_a_listen_refused_behind_a_get_stream_is_told_on_that_stream(legacy, upstream) -> None:
    upstream.script["subscriptions/listen"] = lambda body, request: ("error", {"code": -32001, "message": "no"}, 403)
    await legacy.initialize()
    assert (await legacy.call("logging/setLevel", {"level": "warning"}))["result"] == {}
    stream = await open_stream(legacy)
    _eid, message = await asyncio.wait_for(legacy.next_event(stream), 10)
    assert message["method"] == "notifications/message" and message["params"]["level"] == "warning"
    assert message["params"]["data"]["error"] == {"code": -32001, "message": "no"}
    stream.close()


async def test_a_listen_refused_after_its_session_ended_reports_nothing_unretrieved(legacy, upstream) -> None:
    """DELETE while the GET stream's listen is still opening; the upstream then refuses the listen. The refusal
    had nobody left to read it, and asyncio reported 'Future exception was never retrieved' (found through the
    stdio door, whose client closes right after initializing)."""
    import gc

    deleted, refused = asyncio.Event(), asyncio.Event()

    async def refuse_late(body, request):
        await deleted.wait()  # refused only once its session ended
        refused.set()
        return ("error", {"code": -32601, "message": "nope"}, 404)
    upstream.script["subscriptions/listen"] = refuse_late
    await legacy.initialize()
    reported: list[dict] = []
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        stream = await legacy.client.get("/mcp", headers=legacy.headers(Accept="text/event-stream"))
        await legacy.next_event(stream)  # the stream is open; its listen is being opened
        assert (await legacy.client.delete("/mcp", headers=legacy.headers())).status == 204
        deleted.set()
        await within(refused.wait())
        for _ in range(40):  # the refusal arrives, then the future is collected
            await asyncio.sleep(0.02)  # sleep: a quiet window for asyncio's report, collected meanwhile
            gc.collect()
    finally:
        loop.set_exception_handler(previous)
    assert [c.get("message") for c in reported] == []
