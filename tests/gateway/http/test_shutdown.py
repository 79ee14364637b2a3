"""Shutdown first lets the requests waiting on their upstream be answered (for half the shutdown timeout), then
answers every request still in flight: -32603 "gateway shutting down" with the request's id, on its SSE stream (a
bridged request waiting for the client) or as its JSON answer (a first round still waiting upstream), so a client
stops waiting instead of hanging on a stream that just ends."""

from __future__ import annotations

import asyncio
import logging

from gateway.http.app import GATEWAY
from tests.gateway.conftest import Legacy
from tests.gateway.http.test_bridge_shell import two_rounds
from tests.waiting import until


async def test_a_bridged_request_waiting_for_the_client_gets_the_shutdown_error(make_gateway, upstream) -> None:
    upstream.script["tools/call"] = two_rounds
    client = Legacy(await make_gateway())
    await client.initialize()
    resp = await client.post("tools/call", {"name": "t", "arguments": {}})
    await client.next_event(resp)  # priming
    _, asked = await client.next_event(resp)
    assert asked["method"] == "sampling/createMessage"
    closing = asyncio.ensure_future(client.client.server.close())
    rest = await client.events(resp)
    await closing
    final = rest[-1]
    cancelled = {m["params"]["requestId"] for m in rest if m.get("method") == "notifications/cancelled"}
    assert asked["id"] in cancelled  # the client's open requests are withdrawn first
    assert final["id"] == client.next_id and final["error"]["code"] == -32603
    assert final["error"]["data"] == {"gateway": "shutting_down"}


async def test_a_first_round_waiting_upstream_gets_the_shutdown_error_as_json(make_gateway, upstream, caplog) -> None:
    never = asyncio.Event()

    async def hang(body, request):
        await never.wait()
    upstream.script["tools/call"] = hang
    client = Legacy(await make_gateway(shutdown_timeout_seconds=0.4))  # 0.2 s for it to be answered
    await client.initialize()
    call = asyncio.ensure_future(client.post("tools/call", {"name": "t", "arguments": {}}))
    await until(lambda: upstream.calls("tools/call"))
    closing = asyncio.ensure_future(client.client.server.close())
    resp = await call
    message = await resp.json()
    await closing
    assert resp.status == 200 and message["id"] == client.next_id
    assert message["error"]["data"] == {"gateway": "shutting_down"}
    assert "1 requests still waiting on their upstream are answered shutting_down" in caplog.text


async def test_a_first_round_answered_during_the_shutdown_gets_its_result(make_gateway, upstream, caplog) -> None:
    """The upstream may already be carrying the call out: the client gets its answer, not an error for a call
    that happened (a plain request's first round is saved nowhere, so no other replica could finish it)."""
    caplog.set_level(logging.INFO, logger="gateway")
    answer = asyncio.Event()

    async def slow(body, request):
        await answer.wait()
        return {"resultType": "complete", "content": [{"type": "text", "text": "done"}]}
    upstream.script["tools/call"] = slow
    client = Legacy(await make_gateway())
    await client.initialize()
    call = asyncio.ensure_future(client.post("tools/call", {"name": "t", "arguments": {}}))
    await until(lambda: upstream.calls("tools/call"))
    closing = asyncio.ensure_future(client.client.server.close())
    await asyncio.sleep(0.2)  # sleep: a quiet window: the shutdown must not end the call
    assert not call.done()  # the shutdown waits for it
    answer.set()
    resp = await call
    message = await resp.json()
    await closing
    assert resp.status == 200 and message["result"]["content"][0]["text"] == "done"
    assert "shutting down: up to 5 s for 1 requests waiting on their upstream" in caplog.text
    assert "still waiting on their upstream" not in caplog.text


async def test_a_first_round_that_asks_the_client_during_the_shutdown_ends_at_once(make_gateway, upstream) -> None:
    """Waiting for a client (a person, maybe) is not part of the drain: a round that turns out to need one is
    ended with the shutdown error as soon as it asks, well within the drain's time."""
    answer = asyncio.Event()

    async def asks_later(body, request):
        await answer.wait()
        return two_rounds(body, request)
    upstream.script["tools/call"] = asks_later
    client = Legacy(await make_gateway(shutdown_timeout_seconds=30))
    await client.initialize()
    call = asyncio.ensure_future(client.post("tools/call", {"name": "t", "arguments": {}}))
    await until(lambda: upstream.calls("tools/call"))
    loop = asyncio.get_running_loop()
    started = loop.time()
    closing = asyncio.ensure_future(client.client.server.close())
    await until(lambda: client.client.app[GATEWAY].closing, "the shutdown began")
    answer.set()
    rest = await client.events(await call)
    await closing
    assert loop.time() - started < 5  # not the 15 s the drain could last
    assert rest[-1]["error"]["data"] == {"gateway": "shutting_down"}
    assert any(m.get("method") == "sampling/createMessage" for m in rest)  # asked, then withdrawn
