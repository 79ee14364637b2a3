"""The WebSocket and HTTP+SSE doors under hostile or careless clients (issue #38): doors work when
``allowed_hosts`` names no loopback host, one socket holds one session, a flood is read no faster than it is
served, a client that does not read is closed, and every message is answered."""

from __future__ import annotations

import asyncio
import json
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
