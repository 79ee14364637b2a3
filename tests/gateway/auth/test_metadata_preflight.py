"""The protected-resource metadata read from a browser: a client that sends ``MCP-Protocol-Version`` with its
metadata request (the TypeScript SDK does) makes the browser ask first (a CORS preflight); the gateway answers it
for every door's metadata and the bare well-known URL, and the read that follows may be shared with any origin."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from gateway.config.settings import load_config
from gateway.http.app import create_app
from tests.gateway.auth.oidc import free_port


@pytest.fixture
async def base() -> AsyncIterator[str]:
    port = free_port()
    # The issuer is never asked: reading metadata needs no token.
    config = load_config(port=port, auth={"authorization_servers": ["http://127.0.0.1:9/issuer"]})
    runner = web.AppRunner(create_app(config))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("path", ["/.well-known/oauth-protected-resource/mcp",
                                  "/.well-known/oauth-protected-resource/sse",
                                  "/.well-known/oauth-protected-resource"])
async def test_a_browser_may_read_the_metadata_with_the_protocol_header(base: str, path: str) -> None:
    origin = {"Origin": "https://inspector.example"}
    async with aiohttp.ClientSession() as http:
        async with http.options(base + path, headers={**origin, "Access-Control-Request-Method": "GET",
                                                      "Access-Control-Request-Headers": "mcp-protocol-version"}) as ask:
            assert ask.status == 204
            assert ask.headers["Access-Control-Allow-Origin"] == "*"
            assert "GET" in ask.headers["Access-Control-Allow-Methods"]
            assert "mcp-protocol-version" in ask.headers["Access-Control-Allow-Headers"].lower()
        async with http.get(base + path, headers={**origin, "MCP-Protocol-Version": "2025-11-25"}) as read:
            assert read.status == 200 and read.headers["Access-Control-Allow-Origin"] == "*"
            assert (await read.json())["resource"].startswith(base)
