"""The WebSocket and HTTP+SSE doors under hostile or careless clients (issue #38): doors work when
``allowed_hosts`` names no loopback host, one socket holds one session, a flood is read no faster than it is
served, a client that does not read is closed, and every message is answered."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from adapters.doors import DOOR_HEADER
from gateway.config.settings import load_config
from gateway.http.app import create_app
from gateway.http.door_hop import HOP
from gateway.http.keys import GATEWAY
from gateway.ops.connections import CappedRunner, ConnectionCap
from tests.gateway.conftest import FakeUpstream, hang_until_closed, text
from tests.waiting import until

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "door", "version": "1"}}}
PUBLIC = "gateway.example"  # the only Host the gateways below allow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Any]:
    runners: list[web.AppRunner] = []

    async def serve(**settings: Any) -> tuple[web.Application, int]:
        port = _free_port()
        config = load_config(port=port, usage={"db": str(tmp_path / f"usage{port}.sqlite3")}, **settings)
        runner = web.AppRunner(create_app(config))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        return runner.app, port
    yield serve
    for runner in runners:
        await runner.cleanup()


async def _answer(ws: aiohttp.ClientWebSocketResponse, ident: Any) -> dict[str, Any]:
    async with asyncio.timeout(10):
        while True:
            message: dict[str, Any] = json.loads(await ws.receive_str())
            if message.get("id") == ident and "method" not in message:
                return message


async def test_doors_work_when_allowed_hosts_names_no_loopback_host(served: Any) -> None:
    _app, port = await served(allowed_hosts=[PUBLIC])
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(f"ws://127.0.0.1:{port}/ws", protocols=("mcp",),
                                   headers={"Host": PUBLIC}) as ws:
            await ws.send_str(json.dumps(INIT))
            assert (await _answer(ws, 1))["result"]["protocolVersion"] == "2025-11-25"
            await ws.send_str(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
            assert "tools" in (await _answer(ws, 2))["result"]
        async with http.get(f"http://127.0.0.1:{port}/sse", headers={"Host": PUBLIC}) as stream:
            endpoint = await _sse_endpoint(stream)
            async with http.post(f"http://127.0.0.1:{port}{endpoint}", json=INIT, headers={"Host": PUBLIC}) as ack:
                assert ack.status == 202
            assert (await _sse_message(stream))["result"]["protocolVersion"] == "2025-11-25"
        # The doors' own pass is their key: an outside client naming a door without it is still refused.
        async with http.post(f"http://127.0.0.1:{port}/mcp", json=INIT, headers={
                "Host": "localhost", DOOR_HEADER: "websocket not-the-key",
                "Accept": "application/json, text/event-stream"}) as refused:
            assert refused.status == 403


async def _sse_endpoint(stream: aiohttp.ClientResponse) -> str:
    async for raw in stream.content:
        line = raw.decode().strip()
        if line.startswith("data:"):
            return line[5:].strip()
    raise AssertionError("no endpoint event")


async def _sse_message(stream: aiohttp.ClientResponse) -> dict[str, Any]:
    async with asyncio.timeout(10):
        async for raw in stream.content:
            line = raw.decode().strip()
            if line.startswith("data:"):
                message: dict[str, Any] = json.loads(line[5:])
                return message
    raise AssertionError("the stream ended")


def _call(ident: int, name: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": {"name": name, "arguments": {}}}


def _scripted(upstream: FakeUpstream, closed: asyncio.Event, big: int = 0) -> None:
    async def call(body: dict[str, Any], request: web.Request) -> Any:
        if body["params"]["name"] == "hang":
            await hang_until_closed(request, closed)
            return web.Response()
        return text("x" * big)
    upstream.script["tools/call"] = call


async def _hangs(upstream: FakeUpstream) -> int:
    return sum(b["params"]["name"] == "hang" for b in upstream.calls("tools/call"))


async def _counted(gw: Any, counts: tuple[int, int]) -> bool:
    return await gw.store.count_sessions("anonymous") == counts


async def _hanging(upstream: FakeUpstream, calls: int) -> bool:
    return await _hangs(upstream) >= calls


async def test_a_socket_is_read_no_faster_than_its_messages_are_served(upstream: FakeUpstream,
                                                                      make_gateway: Any) -> None:
    closed = asyncio.Event()
    _scripted(upstream, closed)
    client = await make_gateway(connections={"door_max_in_flight": 2})
    gw = client.server.app[GATEWAY]
    async with client.session.ws_connect(client.make_url("/ws"), protocols=("mcp",)) as ws:
        await ws.send_str(json.dumps(INIT))
        await _answer(ws, 1)
        for ident in range(2, 8):
            await ws.send_str(json.dumps(_call(ident, "hang")))
        await ws.send_str(json.dumps({"jsonrpc": "2.0", "id": 8, "method": "ping"}))
        await until(lambda: _hanging(upstream, 2))
        await asyncio.sleep(0.3)  # sleep: a quiet window: no third call may reach the upstream
        assert await _hangs(upstream) == 2  # the rest wait unread behind them, the ping too
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await ws.receive_str()
    # The socket closed: what ran is cancelled upstream, and nothing that waited is sent after it.
    await asyncio.wait_for(closed.wait(), 10)
    await until(lambda: not gw.runtimes)
    assert not gw.runtimes and await _hangs(upstream) == 2


async def test_one_session_per_socket(upstream: FakeUpstream, make_gateway: Any) -> None:
    client = await make_gateway()
    gw = client.server.app[GATEWAY]
    async with client.session.ws_connect(client.make_url("/ws"), protocols=("mcp",)) as ws:
        await ws.send_str(json.dumps(INIT))
        assert "result" in await _answer(ws, 1)
        for ident in range(2, 6):
            await ws.send_str(json.dumps({**INIT, "id": ident}))
            assert (await _answer(ws, ident))["error"]["code"] == -32600
        assert await gw.store.count_sessions("anonymous") == (1, 1)
        await ws.send_str(json.dumps({"jsonrpc": "2.0", "id": 9, "method": "ping"}))
        assert (await _answer(ws, 9))["result"] == {}  # the first session goes on


async def test_a_client_that_does_not_read_is_closed(upstream: FakeUpstream, make_gateway: Any) -> None:
    closed = asyncio.Event()
    _scripted(upstream, closed, big=100_000)
    client = await make_gateway(connections={"door_max_queued_bytes": 1024, "door_max_in_flight": 4})
    gw = client.server.app[GATEWAY]
    sock = await _raw_websocket(client.make_url("/ws"))
    try:
        await _raw_send(sock, INIT)
        await until(lambda: _counted(gw, (1, 1)))
        assert await gw.store.count_sessions("anonymous") == (1, 1)
        for ident in range(2, 400):  # 40 MB of answers: more than every buffer between here and the gateway
            await _raw_send(sock, _call(ident, "big"))
        await until(lambda: not gw.runtimes and _counted(gw, (0, 0)))
        assert not gw.runtimes and await gw.store.count_sessions("anonymous") == (0, 0)
    finally:
        sock.close()


async def _raw_websocket(url: Any) -> socket.socket:
    """A WebSocket client that never reads what it is sent (a library's client reads into its own buffer)."""
    sock = socket.create_connection((url.host, url.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(sock, (b"GET /ws HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
                                   b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                                   b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mcp\r\n\r\n"))
    head = b""
    while b"\r\n\r\n" not in head:
        head += await loop.sock_recv(sock, 1)
    assert head.startswith(b"HTTP/1.1 101")
    return sock


async def _raw_send(sock: socket.socket, message: Any) -> None:
    payload = json.dumps(message).encode()
    assert len(payload) < 1 << 16
    length = bytes([0x80 | len(payload)]) if len(payload) < 126 else bytes([0x80 | 126]) + len(payload).to_bytes(2)
    frame = b"\x81" + length + b"\0\0\0\0" + payload  # masked with a zero key: the text as is
    try:
        await asyncio.get_running_loop().sock_sendall(sock, frame)
    except OSError:
        pass  # the gateway closed it


async def test_a_message_whose_loopback_request_fails_is_answered(tmp_path: Path) -> None:
    port = _free_port()
    config = load_config(port=port, usage={"db": str(tmp_path / "usage.sqlite3")})
    runner = CappedRunner(create_app(config), ConnectionCap(2))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with aiohttp.ClientSession() as http, http.ws_connect(f"ws://127.0.0.1:{port}/ws",
                                                                    protocols=("mcp",)) as ws:
            await ws.send_str(json.dumps(INIT))
            await _answer(ws, 1)
            # The hop's socket is gone: the door's next new loopback connection fails.
            os.unlink(str(runner.app[HOP].path))
            await ws.send_str(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            await ws.send_str(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
            await ws.send_str(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "ping"}))
            answers = [await _answer(ws, 2), await _answer(ws, 3)]
    finally:
        await runner.cleanup()
    assert any(a.get("error", {}).get("code") == -32603 for a in answers)


async def _capped(config: Any, limit: int) -> tuple[CappedRunner, int]:
    """A gateway as ``serve`` runs it: its client port through the connection cap, its doors' hop beside it."""
    port = _free_port()
    runner = CappedRunner(create_app(config.model_copy(update={"port": port})), ConnectionCap(limit))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, port


async def test_a_door_with_many_calls_waiting_leaves_the_connection_cap_to_other_clients(
        upstream: FakeUpstream, tmp_path: Path) -> None:
    closed = asyncio.Event()
    _scripted(upstream, closed)
    config = load_config(upstream_url=upstream.url, usage={"db": str(tmp_path / "usage.sqlite3")})
    runner, port = await _capped(config, 4)
    try:
        async with aiohttp.ClientSession() as http, http.ws_connect(f"ws://127.0.0.1:{port}/ws",
                                                                    protocols=("mcp",)) as ws:
            await ws.send_str(json.dumps(INIT))
            await _answer(ws, 1)
            for ident in range(2, 42):  # more than door_max_in_flight (32): that many wait upstream
                await ws.send_str(json.dumps(_call(ident, "hang")))
            await until(lambda: _hanging(upstream, 32))
            assert await _hangs(upstream) == 32  # every one of them reached the upstream through the hop
            for _ in range(3):  # the cap (4) holds the socket and these clients, one at a time
                async with aiohttp.ClientSession() as other:
                    async with other.get(f"http://127.0.0.1:{port}/healthz") as health:
                        assert health.status == 200
                    async with other.post(f"http://127.0.0.1:{port}/mcp", json=INIT, headers={
                            "Accept": "application/json, text/event-stream"}) as init:
                        assert init.status == 200 and "Mcp-Session-Id" in init.headers
    finally:
        await runner.cleanup()
    assert closed.is_set()  # the socket's end cancelled its waiting calls upstream


async def test_door_sessions_over_door_max_sessions_are_refused_before_the_upgrade(
        upstream: FakeUpstream, tmp_path: Path) -> None:
    config = load_config(upstream_url=upstream.url, usage={"db": str(tmp_path / "usage.sqlite3")},
                         connections={"door_max_sessions": 1})
    runner, port = await _capped(config, 16)
    try:
        async with aiohttp.ClientSession() as http, http.ws_connect(f"ws://127.0.0.1:{port}/ws",
                                                                    protocols=("mcp",)) as ws:
            await ws.send_str(json.dumps(INIT))
            await _answer(ws, 1)
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(f"ws://127.0.0.1:{port}/ws", protocols=("mcp",))
            assert refused.value.status == 503
            async with http.get(f"http://127.0.0.1:{port}/sse") as stream:
                assert stream.status == 503
                assert (await stream.json())["error"]["data"]["limit"] == "door_max_sessions"
        await until(lambda: runner.app[HOP].open == 0)  # the first socket closed: its place is free again
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/sse") as stream:
            assert stream.status == 200 and (await _sse_endpoint(stream)).startswith("/messages")
    finally:
        await runner.cleanup()


async def test_a_client_gone_behind_its_unread_flood_has_its_calls_ended(upstream: FakeUpstream,
                                                                          make_gateway: Any) -> None:
    """A client that closes its socket while the door is not reading it (every place taken by calls waiting on
    the upstream, and its inbox of messages read ahead full): its FIN waits in its kernel behind the frames it
    sent, which the door will not read. The door's ping draws a reset from the closed socket, and the door ends:
    its calls are cancelled upstream."""
    closed = asyncio.Event()
    _scripted(upstream, closed)
    # door_max_queued_bytes also bounds what the door reads ahead of what it serves: the least, so it fills soon.
    client = await make_gateway(connections={"door_max_in_flight": 2, "door_max_queued_bytes": 1024})
    gw = client.server.app[GATEWAY]
    sock = await _raw_websocket(client.make_url("/ws"))
    await _raw_send(sock, INIT)
    await until(lambda: _counted(gw, (1, 1)), "the door's session is stored")
    # The door is done with the initialize once its answer waits on the socket (left there for the drain below).
    await until(lambda: select.select([sock], [], [], 0)[0], "the door answers the initialize")
    ident, stalled, frame = 2, 0, b""
    while stalled < 5:  # until neither kernel takes more (the door serves 2 of these): the rest wait in ours
        stalled += 1
        with contextlib.suppress(BlockingIOError):
            while True:
                if not frame:
                    payload = json.dumps(_call(ident, "hang")).encode()
                    frame, ident = b"\x81" + bytes([0x80 | len(payload)]) + b"\0\0\0\0" + payload, ident + 1
                # A frame the kernel takes in part is finished next time: the stream stays whole frames.
                frame, stalled = frame[sock.send(frame):], 0
        await asyncio.sleep(0.1)  # sleep: the kernels' time to drain before the next fill (5 stalls: full)
    assert await _hangs(upstream) == 2 and not closed.is_set()
    with contextlib.suppress(BlockingIOError):
        while sock.recv(1 << 16):  # everything it was sent: nothing unread, so closing sends a FIN, not a reset
            pass
    sock.close()
    await asyncio.wait_for(closed.wait(), 3)  # the upstream read timeout is 600 s: only the door's end does it
    await until(lambda: not gw.runtimes)
    assert not gw.runtimes


async def test_a_door_call_is_bounded_by_the_gateway_not_by_aiohttps_default(upstream: FakeUpstream,
                                                                           make_gateway: Any,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A door's loopback hop adds no total timeout of its own: aiohttp's default (300 s in all) cut off a bridged
    call waiting longer on a person. Here the default is made 0.3 s, and a call the upstream answers after 1 s
    still gets its result through the WebSocket door."""
    async def slow(body: dict[str, Any], request: web.Request) -> Any:
        await asyncio.sleep(1.0)  # sleep: the upstream's own slowness, longer than the shrunk default
        return text("late")
    upstream.script["tools/call"] = slow
    client = await make_gateway()
    monkeypatch.setattr(aiohttp.client, "DEFAULT_TIMEOUT", aiohttp.ClientTimeout(total=0.3))
    async with client.session.ws_connect(client.make_url("/ws"), protocols=("mcp",)) as ws:
        await ws.send_str(json.dumps(INIT))
        await _answer(ws, 1)
        await ws.send_str(json.dumps(_call(2, "slow")))
        answer = await _answer(ws, 2)
    assert "error" not in answer, answer
    assert answer["result"]["content"][0]["text"] == "late"
