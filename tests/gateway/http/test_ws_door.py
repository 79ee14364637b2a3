"""The WebSocket door, driven by the ``websockets`` library's client (subprotocol ``mcp``; the official Python
SDK 2.x ships no WebSocket client): a bridged tools/call asks for sampling on the socket, the answer goes back
on it, the result follows; bad frames get their JSON-RPC error; a foreign Origin is refused at the upgrade;
closing the socket ends the session."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
import websockets
from aiohttp import web

from gateway.config.settings import load_config
from gateway.http.app import create_app


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def gateway_port(tmp_path: Path) -> Any:
    port = _free_port()
    runner = web.AppRunner(create_app(load_config(port=port, usage={"db": str(tmp_path / "usage.sqlite3")})))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield port
    await runner.cleanup()


async def _next(ws: Any) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(await ws.recv())
    return message


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {"sampling": {}}, "clientInfo": {"name": "ws", "version": "1"}}}


async def test_a_bridged_call_over_a_websocket(gateway_port: int) -> None:
    async with websockets.connect(f"ws://127.0.0.1:{gateway_port}/ws", subprotocols=["mcp"]) as ws:
        assert ws.subprotocol == "mcp"
        await ws.send(json.dumps(INIT))
        assert (await _next(ws))["result"]["protocolVersion"] == "2025-11-25"
        await ws.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                  "params": {"name": "summarize_repo", "arguments": {}}}))
        for _ in range(2):  # the core's two sampling rounds, asked live on the socket
            asked = await _next(ws)
            while asked.get("method") != "sampling/createMessage":
                asked = await _next(ws)
            prompt = asked["params"]["messages"][0]["content"]["text"]
            text = json.dumps(prompt.splitlines()[1:4]) if "JSON array" in prompt else "A parser and a gateway."
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": asked["id"], "result": {
                "role": "assistant", "content": {"type": "text", "text": text}, "model": "m"}}))
        final = await _next(ws)
        while final.get("id") != 2:
            final = await _next(ws)
    assert "parser" in final["result"]["content"][0]["text"]


async def test_bad_frames_and_a_foreign_origin(gateway_port: int) -> None:
    async with websockets.connect(f"ws://127.0.0.1:{gateway_port}/ws", subprotocols=["mcp"]) as ws:
        await ws.send(b"\x00\x01")
        assert (await _next(ws))["error"]["code"] == -32700
        await ws.send("{not json")
        assert (await _next(ws))["error"]["code"] == -32700
        await ws.send(json.dumps(INIT))
        assert "result" in await _next(ws)
    with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
        async with websockets.connect(f"ws://127.0.0.1:{gateway_port}/ws", subprotocols=["mcp"],
                                      origin="http://evil.example"):
            pass
    assert refused.value.response.status_code == 403


async def test_a_2024_11_05_client_keeps_its_revision_on_the_socket(gateway_port: int) -> None:
    old = {**INIT, "params": {**INIT["params"], "protocolVersion": "2024-11-05"}}  # type: ignore[dict-item]
    async with websockets.connect(f"ws://127.0.0.1:{gateway_port}/ws", subprotocols=["mcp"]) as ws:
        await ws.send(json.dumps(old))
        assert (await _next(ws))["result"]["protocolVersion"] == "2024-11-05"
        await ws.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                  "params": {"name": "echo", "arguments": {"text": "old"}}}))
        answer = await _next(ws)
        while answer.get("id") != 2:
            answer = await _next(ws)
    assert answer["result"]["content"][0]["text"] == "old"
