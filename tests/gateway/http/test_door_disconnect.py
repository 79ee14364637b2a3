"""A client that disappears mid-round on the HTTP+SSE and WebSocket doors: one bridged request waits for the
client's sampling answer while another waits on the upstream; the client then closes its stream or socket.
The upstream request is closed (the 2026 cancel), the bridged request is never retried, the session, its
runtime and the door's stream are gone, no task is left behind, and another session goes on as before."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
import websockets
from aiohttp import web

from gateway.http.app import GATEWAY
from gateway.http.sse_door import STREAMS
from tests.gateway.conftest import FakeUpstream, Legacy, hang_until_closed, text
from tests.waiting import until

SAMPLING = {"method": "sampling/createMessage", "params": {
    "messages": [{"role": "user", "content": {"type": "text", "text": "pick"}}], "maxTokens": 10}}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {"sampling": {}}, "clientInfo": {"name": "gone", "version": "1"}}}


def script(upstream: FakeUpstream, closed: asyncio.Event) -> None:
    async def call(body: dict[str, Any], request: web.Request) -> Any:
        name = body["params"]["name"]
        if name == "hang":
            await hang_until_closed(request, closed)
            return web.Response()
        if name == "ask":  # never answered by the client: a retry would carry inputResponses
            return {"resultType": "input_required", "inputRequests": {"pick": SAMPLING}, "requestState": "s1"}
        return text("still here")
    upstream.script["tools/call"] = call


def call(ident: int, name: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": {"name": name, "arguments": {}}}


@asynccontextmanager
async def over_sse(base: str) -> AsyncIterator[tuple[Callable[[Any], Awaitable[None]], Callable[[], Awaitable[Any]]]]:
    async with aiohttp.ClientSession() as http, http.get(f"{base}/sse") as stream:
        assert (await stream.content.readline()).startswith(b"event: endpoint")
        path = (await stream.content.readline()).decode().removeprefix("data: ").strip()

        async def send(message: Any) -> None:
            async with http.post(base + path, json=message) as resp:
                assert resp.status == 202

        async def receive() -> Any:
            while True:
                line = (await stream.content.readline()).decode()
                if line.startswith("data: "):
                    return json.loads(line[6:])
        yield send, receive


@asynccontextmanager
async def over_websocket(base: str) -> AsyncIterator[tuple[Callable[[Any], Awaitable[None]],
                                                           Callable[[], Awaitable[Any]]]]:
    async with websockets.connect(base.replace("http", "ws", 1) + "/ws", subprotocols=["mcp"]) as ws:
        async def send(message: Any) -> None:
            await ws.send(json.dumps(message))

        async def receive() -> Any:
            return json.loads(await ws.recv())
        yield send, receive


def _server_of(task: asyncio.Task[Any]) -> Any:
    """The aiohttp server a connection-handling task belongs to (None for any other task)."""
    frame = getattr(task.get_coro(), "cr_frame", None)
    handler = frame.f_locals.get("self") if frame is not None else None
    return getattr(handler, "_manager", None)


@pytest.mark.parametrize("door", [over_sse, over_websocket], ids=["http_sse", "websocket"])
async def test_a_client_gone_mid_round_leaves_nothing_behind(door: Any, upstream: FakeUpstream,
                                                             make_gateway: Any) -> None:
    closed = asyncio.Event()
    script(upstream, closed)
    client = await make_gateway()
    gw, base = client.server.app[GATEWAY], str(client.make_url("")).rstrip("/")
    other = Legacy(client)
    await other.initialize()
    baseline = set(asyncio.all_tasks())
    async with door(base) as (send, receive):
        await send(INIT)
        assert (await receive())["result"]["protocolVersion"] == "2025-11-25"
        await send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await send(call(2, "ask"))
        await send(call(3, "hang"))
        asked = await receive()
        assert asked["method"] == "sampling/createMessage"  # the round now waits for this client's answer
        await until(lambda: any(b["params"]["name"] == "hang" for b in upstream.calls("tools/call")),
                    "the hanging call reached the upstream")
        assert await gw.store.count_sessions("anonymous") == (2, 2)
    # The client is gone without answering: its door ends the session, which ends both requests.
    await left_nothing_behind(client, upstream, other, closed, baseline)


async def left_nothing_behind(client: Any, upstream: FakeUpstream, other: Legacy, closed: asyncio.Event,
                              baseline: set[asyncio.Task[Any]]) -> None:
    """After a door's client vanished mid-round (``script``'s ``ask`` waiting for its sampling answer, ``hang``
    upstream): the hanging upstream request is closed, the session's runtime, record and door stream are gone,
    no task it started still runs, ``ask`` was never retried without its answer, and ``other`` still works."""
    gw = client.server.app[GATEWAY]
    await asyncio.wait_for(closed.wait(), 10)
    await until(lambda: set(gw.runtimes) <= {other.session_id}, "the gone session's runtime ended")

    async def one_session_left() -> bool:
        return await gw.store.count_sessions("anonymous") == (1, 1)
    await until(one_session_left, "the gone session's record was deleted")
    assert not client.server.app[STREAMS]

    def left() -> set[asyncio.Task[Any]]:
        """New tasks still running, less the fake upstream's idle keep-alive connections (the gateway's pool
        keeps them for reuse: they are not the gone client's)."""
        new = set(asyncio.all_tasks()) - baseline - {asyncio.current_task()}
        return {t for t in new if _server_of(t) is not upstream.server.runner.server}
    await until(lambda: not left(), "every task the gone client started ended", left)
    asks = [b for b in upstream.calls("tools/call") if b["params"]["name"] == "ask"]
    assert len(asks) == 1 and "inputResponses" not in asks[0]["params"]  # never retried without its answer
    answer = await other.call("tools/call", {"name": "echo", "arguments": {}})
    assert answer["result"]["content"][0]["text"] == "still here"
