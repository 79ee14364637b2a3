"""Modern (2026-07-28) passthrough under production server settings: a real ``AppRunner`` as ``web.run_app``
builds it (``handler_cancellation=False``; aiohttp's test server turns it on, which hides these bugs).

Closing the response is the 2026 cancel (2026-07-28 basic/patterns §Cancellation): a modern client's hang-up must close
the upstream request at once, and shutdown must not wait for open passthrough streams.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.config.settings import load_config
from gateway.http.app import GATEWAY, create_app
from gateway.http.passthrough import Passthroughs
from tests.waiting import until, until_hung_up

MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {}}
LISTEN = {"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
          "params": {"notifications": {"toolsListChanged": True}, "_meta": MODERN_META}}
CALL = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "slow", "arguments": {},
                                                                     "_meta": MODERN_META}}


def headers(method: str) -> dict[str, str]:
    return {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": method}


class Held:
    """An upstream answer held open until the gateway closes the connection it came on."""

    def __init__(self) -> None:
        self.open: bool | None = None

    async def hold(self, request: web.Request) -> None:
        self.open = True
        try:
            await until_hung_up(request)
        finally:
            self.open = False


@pytest.fixture
async def served(upstream, unused_tcp_port) -> AsyncIterator[tuple[web.AppRunner, str]]:
    app = create_app(load_config(upstream_url=upstream.url))
    runner = web.AppRunner(app, shutdown_timeout=5)  # handler_cancellation=False, as web.run_app uses
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    try:
        yield runner, f"http://127.0.0.1:{unused_tcp_port}/mcp"
    finally:
        if runner.server is not None:  # a test may have shut it down already
            await runner.cleanup()


def scripted_listen(upstream: Any) -> Held:
    held = Held()

    def listen(body: dict[str, Any], request: web.Request) -> list[Any]:
        async def hold() -> None:
            await held.hold(request)
        return [{"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                 "params": {"notifications": body["params"]["notifications"]}}, hold]
    upstream.script["subscriptions/listen"] = listen
    return held


async def test_a_modern_client_hang_up_closes_the_upstream_listen_at_once(served, upstream) -> None:
    runner, url = served
    held = scripted_listen(upstream)
    async with aiohttp.ClientSession() as http:
        resp = await http.post(url, json=LISTEN, headers=headers("subscriptions/listen"))
        assert resp.status == 200 and await resp.content.readline()
        await until(lambda: held.open)
        resp.close()
    await until(lambda: held.open is False, seconds=1.5)
    pool = runner.app[GATEWAY].upstream.pool
    await until(lambda: pool.connections == 0, seconds=0.5)


async def test_a_modern_client_hang_up_cancels_a_tool_call_still_waiting_for_its_answer(served, upstream) -> None:
    _runner, url = served
    held = Held()

    async def slow(body: dict[str, Any], request: web.Request) -> dict[str, Any]:
        await held.hold(request)  # no head is sent: the gateway is still in upstream.post
        return {"resultType": "complete", "content": []}
    upstream.script["tools/call"] = slow
    async with aiohttp.ClientSession() as http:
        request = asyncio.ensure_future(http.post(url, json=CALL, headers=headers("tools/call")))
        await until(lambda: held.open)
        request.cancel()  # the client gives up before any answer: it closes its connection
        with pytest.raises(asyncio.CancelledError):
            await request
    await until(lambda: held.open is False, seconds=1.5)


async def test_shutdown_ends_an_open_modern_stream_at_once(served, upstream) -> None:
    runner, url = served
    held = scripted_listen(upstream)
    async with aiohttp.ClientSession() as http:
        resp = await http.post(url, json=LISTEN, headers=headers("subscriptions/listen"))
        assert await resp.content.readline()
        await until(lambda: held.open)
        started = time.monotonic()
        await runner.cleanup()
        assert time.monotonic() - started < 2  # not shutdown_timeout (5 s), twice
        assert await resp.content.read() is not None  # the stream ended; the client is not left hanging
    await until(lambda: held.open is False, seconds=1.0)


async def test_a_passthrough_that_starts_during_shutdown_ends_at_once() -> None:
    relays = Passthroughs()
    relays.end_all()

    class Transport:
        def is_closing(self) -> bool:
            return False

    class Connected:  # a request whose client is still there
        transport = Transport()

    relay = relays.relay(Connected())  # type: ignore[arg-type]
    started = time.monotonic()
    with relay:
        await asyncio.sleep(5)  # sleep: the handler's work, which the relay's end cancels
    assert time.monotonic() - started < 0.5 and not relays.open and relay.ended


async def test_a_cancel_that_is_not_the_relays_own_still_propagates() -> None:
    relays = Passthroughs()

    class Connected:
        class transport:
            @staticmethod
            def is_closing() -> bool:
                return False

    async def handler() -> None:
        with relays.relay(Connected()):  # type: ignore[arg-type]
            await asyncio.sleep(5)  # sleep: the handler's work, cancelled below

    task = asyncio.ensure_future(handler())
    await until(lambda: relays.open, "the handler's relay is open")
    task.cancel()  # e.g. the server cancelling its handlers: not a hang-up, must not be swallowed
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not relays.open


async def test_shutdown_lets_a_modern_call_under_way_be_answered(served, upstream) -> None:
    """A 2026 call waiting on its upstream is drained as a legacy one is (docs/design/takeover.md#shutdown): its
    client gets the answer, while a listen on the same gateway, which never ends by itself, is ended at once."""
    runner, url = served
    held, answer = scripted_listen(upstream), asyncio.Event()

    async def slow(body: dict[str, Any], request: web.Request) -> dict[str, Any]:
        await answer.wait()
        return {"resultType": "complete", "content": [{"type": "text", "text": "done"}]}
    upstream.script["tools/call"] = slow
    async with aiohttp.ClientSession() as http:
        listen = await http.post(url, json=LISTEN, headers=headers("subscriptions/listen"))
        assert await listen.content.readline()
        await until(lambda: held.open)
        call = asyncio.ensure_future(http.post(url, json=CALL, headers=headers("tools/call")))
        await until(lambda: bool(upstream.calls("tools/call")))
        cleanup = asyncio.ensure_future(runner.cleanup())
        await until(lambda: held.open is False, seconds=1.0)  # the listen is not waited for
        assert not call.done()
        answer.set()
        resp = await call
        message = await resp.json()
        await cleanup
    assert resp.status == 200 and message["result"]["content"][0]["text"] == "done"
