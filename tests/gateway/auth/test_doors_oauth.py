"""The other doors under ``[gateway.auth]``: ``/sse`` and ``/ws`` challenge before they open, naming their own
metadata, and the official SDK's ``sse_client`` with its OAuth provider authorizes at ``/sse`` and works through
the door (the embedded reference core behind it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client

from gateway.config.settings import load_config
from gateway.http.app import create_app
from tests.gateway.auth.oidc import AuthorizationServer, authorization_server, free_port
from tests.gateway.auth.test_sdk_oauth import Memory
from tests.gateway.http.test_e2e_sdk import roots, sampling


@pytest.fixture
async def issuer() -> AsyncIterator[AuthorizationServer]:
    async with authorization_server() as server:
        yield server


@pytest.fixture
async def base(tmp_path: Path, issuer: AuthorizationServer) -> AsyncIterator[str]:
    port = free_port()
    config = load_config(port=port, usage={"db": str(tmp_path / "usage.sqlite3")}, state_dir=str(tmp_path),
                         auth={"authorization_servers": [issuer.issuer], "required_scopes": ["mcp:tools"]})
    runner = web.AppRunner(create_app(config))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("door", ["sse", "ws"])
async def test_a_door_challenges_before_it_opens(base: str, door: str) -> None:
    headers = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Protocol": "mcp"} if door == "ws" else {}
    async with aiohttp.ClientSession() as http, http.get(f"{base}/{door}", headers=headers) as resp:
        assert resp.status == 401
        challenge = resp.headers["WWW-Authenticate"]
    assert f'resource_metadata="{base}/.well-known/oauth-protected-resource/{door}"' in challenge


async def test_messages_of_another_principal_are_refused(base: str, issuer: AuthorizationServer) -> None:
    mine = await issuer.client_token(f"{base}/sse")
    theirs = await issuer.client_token(f"{base}/sse", client="gateway-upstream")
    async with aiohttp.ClientSession() as http, http.get(f"{base}/sse", headers={
            "Authorization": f"Bearer {mine}"}) as stream:
        assert stream.status == 200
        endpoint = (await stream.content.readline(), await stream.content.readline())[1].decode().split()[1]
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        async with http.post(base + endpoint, json=ping, headers={"Authorization": f"Bearer {theirs}"}) as resp:
            assert resp.status == 404
        async with http.post(base + endpoint, json=ping) as resp:
            assert resp.status == 401


async def test_the_sdk_authorizes_at_sse_and_bridges(base: str, issuer: AuthorizationServer) -> None:
    storage = Memory()
    provider = ClientCredentialsOAuthProvider(f"{base}/sse", storage, "gateway-tests", "secret-gateway-tests",
                                              scope="mcp:tools", issuer=issuer.issuer)
    async with sse_client(f"{base}/sse", auth=provider) as (read, write), ClientSession(
            read, write, sampling_callback=sampling, list_roots_callback=roots) as session:
        await session.initialize()
        tools = await session.list_tools()
        summary = await session.call_tool("summarize_repo", {})
    assert "summarize_repo" in {tool.name for tool in tools.tools}
    assert not summary.is_error and "parser" in summary.content[0].text
    assert storage.tokens is not None
