"""Shutdown answers every request in flight: -32603 "gateway shutting down" with the request's id, on its SSE
stream (a bridged request waiting for the client) or as its JSON answer (a first round waiting upstream), so
a client stops waiting instead of hanging on a stream that just ends."""

from __future__ import annotations

import asyncio

from tests.gateway.conftest import Legacy
from tests.gateway.http.test_bridge_shell import two_rounds


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


async def test_a_first_round_waiting_upstream_gets_the_shutdown_error_as_json(make_gateway, upstream) -> None:
    never = asyncio.Event()

    async def hang(body, request):
        await never.wait()
    upstream.script["tools/call"] = hang
    client = Legacy(await make_gateway())
    await client.initialize()
    call = asyncio.ensure_future(client.post("tools/call", {"name": "t", "arguments": {}}))
    while not upstream.calls("tools/call"):
        await asyncio.sleep(0.01)
    closing = asyncio.ensure_future(client.client.server.close())
    resp = await call
    message = await resp.json()
    await closing
    assert resp.status == 200 and message["id"] == client.next_id
    assert message["error"]["data"] == {"gateway": "shutting_down"}
