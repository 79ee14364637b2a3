"""The MRTR bridge through the shell: live client requests on the POST's SSE stream, answers by POST, retries,
cancellation, resumption with Last-Event-ID, and subscriptions bridged to the GET stream."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.config.settings import load_config
from gateway.http.app import GATEWAY, create_app
from gateway.session.store import InMemoryStore, StoreUnavailable
from tests.gateway.conftest import Legacy, SharedMemoryStore, hang_until_closed, text
from tests.waiting import until, until_hung_up


async def two_requests_sent(legacy: Legacy):
    """Start a bridged tools/call and read its priming event and the two live input requests."""
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {}})
    await legacy.next_event(resp)  # priming
    _, first = await legacy.next_event(resp)
    _, second = await legacy.next_event(resp)
    return resp, first, second

SAMPLING = {"method": "sampling/createMessage", "params": {
    "messages": [{"role": "user", "content": {"type": "text", "text": "pick"}}], "maxTokens": 10}}
SAMPLED = {"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m"}


def two_rounds(body, headers):
    params = body["params"]
    answers, state = params.get("inputResponses"), params.get("requestState")
    if state is None:
        return {"resultType": "input_required", "inputRequests": {"a": SAMPLING, "b": SAMPLING},
                "requestState": "s1\u00e9"}
    if state == "s1\u00e9":
        assert set(answers) == {"a", "b"}
        return {"resultType": "input_required", "inputRequests": {"c": SAMPLING}, "requestState": "s2"}
    assert state == "s2" and set(answers) == {"c"}
    return text("bridged")


async def test_two_rounds_with_concurrent_requests(legacy, upstream) -> None:
    upstream.script["tools/call"] = two_rounds
    await legacy.initialize()
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {"x": [1, 2]}})
    assert resp.content_type == "text/event-stream"
    _, priming = await legacy.next_event(resp)
    assert priming is None
    _, first = await legacy.next_event(resp)
    _, second = await legacy.next_event(resp)
    assert {first["method"], second["method"]} == {"sampling/createMessage"} and first["id"] != second["id"]
    assert await legacy.answer(second["id"], SAMPLED) == 202
    assert await legacy.answer(first["id"], SAMPLED) == 202
    _, third = await legacy.next_event(resp)
    assert await legacy.answer(third["id"], SAMPLED) == 202
    _, final = await legacy.next_event(resp)
    assert final["id"] == legacy.next_id and final["result"]["content"][0]["text"] == "bridged"
    calls = upstream.calls("tools/call")
    assert len({c["id"] for c in calls}) == 3
    assert all(c["params"]["arguments"] == {"x": [1, 2]} and c["params"]["name"] == "t" for c in calls)
    assert "requestState" not in calls[0]["params"] and calls[1]["params"]["requestState"] == "s1\u00e9"
    assert calls[1]["params"]["inputResponses"] == {"a": SAMPLED, "b": SAMPLED}


async def test_a_round_started_by_an_answer_uses_the_session_record_its_request_read(legacy, upstream) -> None:
    """The stored session record is read once per bridged request
    (docs/design/takeover.md#a-clients-answer-is-checked-on-its-requests-session-record): its answers are checked
    against the record the request was accepted with, and the rounds they complete are sent with it."""
    from gateway.http.app import GATEWAY
    upstream.script["tools/call"] = two_rounds
    await legacy.initialize()
    store = legacy.client.app[GATEWAY].store
    reads: list[str] = []
    get_session = store.get_session

    async def counted(session_id: str):
        reads.append(session_id)
        return await get_session(session_id)
    store.get_session = counted
    resp, first, second = await two_requests_sent(legacy)
    await legacy.answer(first["id"], SAMPLED)
    await legacy.answer(second["id"], SAMPLED)
    _, third = await legacy.next_event(resp)
    await legacy.answer(third["id"], SAMPLED)
    _, final = await legacy.next_event(resp)
    assert final["result"]["content"][0]["text"] == "bridged" and len(upstream.calls("tools/call")) == 3
    assert reads == [legacy.session_id]  # the call's: none for the three answers or the retries


async def test_missing_capability_is_never_sent(legacy, upstream) -> None:
    upstream.script["tools/call"] = two_rounds
    await legacy.initialize(caps={"roots": {}})
    message = await legacy.call("tools/call", {"name": "t", "arguments": {}})
    assert message["error"]["code"] == -32021 and "'sampling'" in message["error"]["message"]
    assert len(upstream.calls("tools/call")) == 1


async def test_client_refusal_ends_the_bridge(legacy, upstream) -> None:
    upstream.script["tools/call"] = two_rounds
    await legacy.initialize()
    resp, first, second = await two_requests_sent(legacy)
    await legacy.answer(first["id"], error={"code": -1, "message": "User rejected sampling"})
    rest = await legacy.events(resp)
    assert rest[0] == {"jsonrpc": "2.0", "method": "notifications/cancelled",
                       "params": {"requestId": second["id"], "reason": "the original request ended"}}
    assert rest[-1]["error"]["code"] == -1 and "User rejected sampling" in rest[-1]["error"]["message"]
    assert len(upstream.calls("tools/call")) == 1


async def test_cancellation_mid_bridge_stops_everything(legacy, upstream) -> None:
    upstream.script["tools/call"] = two_rounds
    await legacy.initialize()
    resp, first, second = await two_requests_sent(legacy)
    cancel = {"requestId": legacy.next_id, "reason": "changed my mind"}
    assert await legacy.notify("notifications/cancelled", cancel) == 202
    rest = await legacy.events(resp)
    assert sorted(m["params"]["requestId"] for m in rest) == sorted([first["id"], second["id"]])
    assert all(m["method"] == "notifications/cancelled" for m in rest)  # and no response (2025-11-25 §Cancellation)
    assert await legacy.answer(first["id"], SAMPLED) == 202  # late answers are ignored
    assert len(upstream.calls("tools/call")) == 1
    assert (await legacy.call("ping"))["result"] == {}


async def test_cancellation_closes_the_in_flight_upstream_request(legacy, upstream) -> None:
    closed = asyncio.Event()

    upstream.script["tools/call"] = lambda b, r: [lambda: hang_until_closed(r, closed)]
    await legacy.initialize()
    post = asyncio.ensure_future(legacy.post("tools/call", {"name": "t", "arguments": {}}))
    await until(lambda: upstream.calls("tools/call"))
    await legacy.notify("notifications/cancelled", {"requestId": legacy.next_id})
    await asyncio.wait_for(closed.wait(), 10)
    assert (await post).status == 202  # nothing was sent before the cancel: no response at all


async def test_dropped_stream_is_not_a_cancel_and_resumes_with_last_event_id(legacy, upstream) -> None:
    upstream.script["tools/call"] = two_rounds
    await legacy.initialize()
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {}})
    await legacy.next_event(resp)
    first_id, first = await legacy.next_event(resp)
    _, second = await legacy.next_event(resp)
    resp.close()  # the client's connection drops
    await legacy.answer(first["id"], SAMPLED)
    await legacy.answer(second["id"], SAMPLED)
    await until(lambda: len(upstream.calls("tools/call")) >= 2)
    again = await legacy.client.get("/mcp", headers={**legacy.headers(), "Accept": "text/event-stream",
                                                     "Last-Event-ID": first_id})
    _, replayed = await legacy.next_event(again)
    assert replayed == second  # replay starts right after the last event the client saw
    _, third = await legacy.next_event(again)
    await legacy.answer(third["id"], SAMPLED)
    _, final = await legacy.next_event(again)
    assert final["result"]["content"][0]["text"] == "bridged"
    bad = await legacy.client.get("/mcp", headers={**legacy.headers(), "Accept": "text/event-stream",
                                                   "Last-Event-ID": "nostream.4"})
    assert bad.status == 400


async def test_url_elicitation_gets_an_id_and_a_completion(legacy, upstream) -> None:
    url = {"method": "elicitation/create", "params": {"mode": "url", "message": "open", "url": "https://x/c/1"}}

    def connect(body, headers):
        state = body["params"].get("requestState")
        if state is None:
            return {"resultType": "input_required", "inputRequests": {"connect": url}, "requestState": "w1"}
        if state == "w1":
            return {"resultType": "input_required", "requestState": "w2"}  # out-of-band step not done yet
        return text("connected")
    upstream.script["tools/call"] = connect
    await legacy.initialize()
    resp = await legacy.post("tools/call", {"name": "connect", "arguments": {}})
    await legacy.next_event(resp)
    _, ask = await legacy.next_event(resp)
    eid = ask["params"]["elicitationId"]
    assert ask["params"]["url"] == "https://x/c/1"
    await legacy.answer(ask["id"], {"action": "accept"})
    rest = await legacy.events(resp)
    assert rest[0] == {"jsonrpc": "2.0", "method": "notifications/elicitation/complete",
                       "params": {"elicitationId": eid}}
    assert rest[1]["result"]["content"][0]["text"] == "connected"
    assert upstream.calls("tools/call")[2]["params"] == {**upstream.calls("tools/call")[2]["params"],
                                                         "requestState": "w2"}


async def test_roots_are_cached_until_the_client_says_they_changed(legacy, upstream) -> None:
    def scan(body, headers):
        if "inputResponses" not in body["params"]:
            return {"resultType": "input_required", "inputRequests": {"roots": {"method": "roots/list"}}}
        return text(body["params"]["inputResponses"]["roots"]["roots"][0]["uri"])
    upstream.script["tools/call"] = scan
    await legacy.initialize()

    async def run_once(expect_ask: bool) -> None:
        resp = await legacy.post("tools/call", {"name": "scan", "arguments": {}})
        if expect_ask:
            await legacy.next_event(resp)
            _, ask = await legacy.next_event(resp)
            assert ask["method"] == "roots/list"
            await legacy.answer(ask["id"], {"roots": [{"uri": "file:///w", "name": "w"}]})
            message = next(m for m in await legacy.events(resp) if "result" in m)
        else:
            message = await resp.json()
        assert message["result"]["content"][0]["text"] == "file:///w"
    await run_once(True)
    await run_once(False)  # the client declared roots.listChanged: the cache is trusted
    assert await legacy.notify("notifications/roots/list_changed") == 202
    await run_once(True)


async def test_subscribe_opens_a_listen_and_updates_reach_the_get_stream(legacy, upstream) -> None:
    release = asyncio.Event()
    filters = []

    def listen(body, request):
        notifications = body["params"]["notifications"]
        filters.append(notifications)
        sub = {"io.modelcontextprotocol/subscriptionId": body["id"]}

        async def updated():
            await release.wait()
            if "resourceSubscriptions" not in notifications:
                return None
            return {"jsonrpc": "2.0", "method": "notifications/resources/updated",
                    "params": {"uri": "file:///n/1", "_meta": sub}}

        async def hold():  # keep the listen open until the gateway closes it
            await until_hung_up(request)
        return [{"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                 "params": {"notifications": notifications, "_meta": sub}}, updated, hold]
    upstream.script["subscriptions/listen"] = listen
    await legacy.initialize()
    stream = await legacy.client.get("/mcp", headers={**legacy.headers(), "Accept": "text/event-stream"})
    assert stream.status == 200
    _, priming = await legacy.next_event(stream)
    assert priming is None
    assert (await legacy.call("resources/subscribe", {"uri": "file:///n/1"}))["result"] == {}
    assert filters[-1] == {"toolsListChanged": True, "resourcesListChanged": True,
                           "resourceSubscriptions": ["file:///n/1"]}
    release.set()
    _, note = await legacy.next_event(stream)
    assert note == {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "file:///n/1"}}
    assert (await legacy.call("resources/unsubscribe", {"uri": "file:///n/1"}))["result"] == {}
    assert "resourceSubscriptions" not in filters[-1]


async def test_a_new_get_stream_supersedes_the_old_one(legacy, upstream) -> None:
    await legacy.initialize()
    headers = {**legacy.headers(), "Accept": "text/event-stream"}
    first = await legacy.client.get("/mcp", headers=headers)
    await legacy.next_event(first)  # priming
    second = await legacy.client.get("/mcp", headers=headers)
    await legacy.next_event(second)
    assert await legacy.next_event(first) == (None, None)  # the old connection ends: no message goes to both


async def test_the_pending_round_is_in_the_store_and_another_process_could_continue_it(make_gateway,
                                                                                       upstream) -> None:
    from adapters import bridge as B
    from gateway.http.app import GATEWAY
    upstream.script["tools/call"] = two_rounds
    legacy = Legacy(await make_gateway(session_store=SharedMemoryStore()))  # a store another process reads
    await legacy.initialize()
    resp, first, second = await two_requests_sent(legacy)
    gw = legacy.client.app[GATEWAY]
    (stored,) = await gw.store.rounds_of(legacy.session_id)
    assert stored.phase == "awaiting_client" and stored.round == 1 and stored.request_state == "s1\u00e9"
    assert set(stored.outstanding) == {first["id"], second["id"]}
    session = await gw.store.get_session(legacy.session_id)
    other = B.BridgeMachine(stored, B.BridgeContext(B.BridgeLimits(), session.client_capabilities, lambda: "x"))
    other.handle(B.ClientAnswered(first["id"], SAMPLED))
    assert other.handle(B.ClientAnswered(second["id"], SAMPLED)) == [
        B.CallUpstream({"inputResponses": {"a": SAMPLED, "b": SAMPLED}, "requestState": "s1\u00e9"})]
    await legacy.notify("notifications/cancelled", {"requestId": legacy.next_id})
    await legacy.events(resp)
    assert await gw.store.rounds_of(legacy.session_id) == []  # deleted when the request ends


async def test_a_set_level_during_a_subscribe_is_not_lost(legacy, upstream) -> None:
    from gateway.http.app import GATEWAY
    ack = asyncio.Event()

    def listen(body, request):
        async def acknowledged():
            await ack.wait()
            return {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                    "params": {"notifications": body["params"]["notifications"]}}

        async def hold():
            await until_hung_up(request)
        return [acknowledged, hold]
    upstream.script["subscriptions/listen"] = listen
    await legacy.initialize()
    subscribing = asyncio.ensure_future(legacy.call("resources/subscribe", {"uri": "file:///a"}))
    await until(lambda: upstream.calls("subscriptions/listen"))
    assert (await legacy.call("logging/setLevel", {"level": "error"}))["result"] == {}
    ack.set()
    assert (await subscribing)["result"] == {}
    record = await legacy.client.app[GATEWAY].store.get_session(legacy.session_id)
    assert (record.log_level, record.subscriptions) == ("error", ["file:///a"])


def gateway_tasks() -> list[asyncio.Task]:
    import gateway
    package = gateway.__path__[0]
    return [t for t in asyncio.all_tasks() if t.get_coro().cr_code.co_filename.startswith(package)]


async def test_delete_mid_bridge_leaves_no_task_behind(legacy, upstream) -> None:
    upstream.script["tools/call"] = two_rounds
    upstream.script["subscriptions/listen"] = lambda body, request: [
        {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
         "params": {"notifications": body["params"]["notifications"]}}, _hold(request)]
    await legacy.initialize()
    stream = await legacy.client.get("/mcp", headers={**legacy.headers(), "Accept": "text/event-stream"})
    await legacy.call("resources/subscribe", {"uri": "file:///a"})
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {}})
    await legacy.next_event(resp)
    await legacy.next_event(resp)
    assert gateway_tasks()  # the exchange and the listen are running
    assert (await legacy.client.delete("/mcp", headers=legacy.headers())).status == 204
    assert gateway_tasks() == []
    rest = await legacy.events(resp)  # the stream just ends: no response for a request of a dead session
    assert [m["method"] for m in rest] == ["sampling/createMessage"] and await legacy.events(stream) == []


def _hold(request):
    async def hold():
        await until_hung_up(request)
    return hold


async def test_an_answer_is_acknowledged_only_after_the_next_round_left(upstream, aiohttp_client) -> None:
    """The 202 for the answer that completes a round is prepared after the retry was handed to the upstream
    (docs/design/bridge.md#a-clients-answer-is-acted-on-before-it-is-acknowledged): the acknowledgement's send is off
    the round's critical path."""
    from gateway.config.settings import load_config
    from gateway.http.app import create_app

    order: list[str] = []

    def tap(direction: str, message: dict) -> None:
        if direction == "upstream" and message.get("method") == "tools/call":
            order.append(f"upstream {message['params'].get('requestState')}")

    async def prepared(_request, response) -> None:
        if response.status == 202:
            order.append("202")

    app = create_app(load_config(upstream_url=upstream.url), tap=tap)
    app.on_response_prepare.append(prepared)
    legacy = Legacy(await aiohttp_client(app))
    upstream.script["tools/call"] = two_rounds
    await legacy.initialize()
    order.clear()
    resp, first, second = await two_requests_sent(legacy)
    assert await legacy.answer(second["id"], SAMPLED) == 202  # the round still waits for the other answer
    assert await legacy.answer(first["id"], SAMPLED) == 202  # this one completes it: the retry leaves first
    assert order == ["upstream None", "202", "upstream s1\u00e9", "202"]
    _, third = await legacy.next_event(resp)
    assert third["method"] == "sampling/createMessage"


class _CountingStore(InMemoryStore):
    """Counts session reads."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def get_session(self, session_id: str) -> Any:
        self.reads += 1
        return await super().get_session(session_id)


async def test_an_answer_to_a_waiting_round_is_checked_on_its_record_without_a_store_read(upstream,
                                                                                         aiohttp_client) -> None:
    """docs/design/takeover.md#a-clients-answer-is-checked-on-its-requests-session-record: while a round waits here
    for the client, its answers are classified on the record the request was accepted with; anything else (another
    principal's answer, a request) on the stored one."""
    store = _CountingStore()
    upstream.script["tools/call"] = two_rounds
    client = Legacy(await aiohttp_client(create_app(load_config(upstream_url=upstream.url), store=store)))
    await client.initialize()
    resp, first, second = await two_requests_sent(client)
    reads = store.reads
    body = {"jsonrpc": "2.0", "id": first["id"], "result": SAMPLED}
    stranger = await client.client.post("/mcp", json=body, headers=client.headers(Authorization="Bearer other"))
    assert stranger.status == 404 and store.reads == reads + 1  # refused as an unknown session, as ever
    assert await client.answer(first["id"], SAMPLED) == 202
    assert "result" in await client.call("ping")
    assert store.reads == reads + 2  # the ping's: none for the answer
    assert await client.answer(second["id"], SAMPLED) == 202  # completes the round: its retry needs no read
    _, third = await client.next_event(resp)
    assert third["method"] == "sampling/createMessage" and store.reads == reads + 2
    retry = upstream.calls("tools/call")[1]
    assert retry["params"]["inputResponses"] == {"a": SAMPLED, "b": SAMPLED}
    assert (await client.client.delete("/mcp", headers=client.headers())).status in (200, 204)
    assert await client.answer(third["id"], SAMPLED) == 404  # the session ended: no round holds its record


class _StoreFailingRounds(SharedMemoryStore):
    """A shared store that goes away while a bridged request waits for the client."""

    async def put_round(self, record: Any, lease: Any = None, owners: Any = None, **_: Any) -> bool:
        raise StoreUnavailable("redis://127.0.0.1:1: connection refused")

    async def end_round(self, bridge_id: str, replica: str, **_: Any) -> None:
        raise StoreUnavailable("redis://127.0.0.1:1: connection refused")


async def test_a_store_failing_mid_bridge_is_said_as_such_and_nothing_leaks(upstream, aiohttp_client) -> None:
    upstream.script["tools/call"] = two_rounds
    client = Legacy(await aiohttp_client(create_app(load_config(upstream_url=upstream.url),
                                                    store=_StoreFailingRounds())))
    await client.initialize()
    # The round is saved before the client is asked
    # (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds): the failure is the only answer, JSON or
    # SSE.
    final = await client.call("tools/call", {"name": "t", "arguments": {}})
    assert final["error"]["code"] == -32603 and final["error"]["data"] == {"store": "unavailable"}
    assert client.client.app[GATEWAY].runtime(client.session_id).exchanges == {}  # the id is free again
    assert "result" in await client.call("ping")
