"""The HTTP+SSE and WebSocket doors driven by the official TypeScript SDK's ``SSEClientTransport`` and
``WebSocketClientTransport`` (``tests/conformance/door_client.mjs``): a tool call with two live sampling rounds,
a prompt with live elicitation and a plain call, against the gateway app with its embedded core."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.config.settings import load_config
from gateway.http.app import create_app
from tests.gateway.ts_sdk import door_client


@pytest.mark.parametrize("door, scheme, path", [("sse", "http", "/sse"), ("ws", "ws", "/ws")])
async def test_the_typescript_sdk_on_the_door(door: str, scheme: str, path: str, aiohttp_server: Any,
                                              tmp_path: Path) -> None:
    server = await aiohttp_server(create_app(load_config(usage={"db": str(tmp_path / "usage.sqlite3")})))
    url = f"{scheme}://127.0.0.1:{server.port}{path}"
    checks = await door_client(tmp_path, door, url)
    assert len(checks) == 6, checks
    assert f"ok - the session negotiates 2025-11-25 over {door}" in checks
