"""The ``/ws`` door under ``[gateway.auth]``, with a real authorization server (node oidc-provider).

No official SDK's WebSocket client can send a token (Python 1.x ``websocket_client(url)`` and TypeScript
``WebSocketClientTransport(url)`` take a URL only; Python 2.x ships none:
docs/design/authorization.md#the-gateway-is-a-protected-resource-and-tokens-stop-at-it), so the flow is split where
an SDK can and cannot go: the official Python SDK's ``OAuthClientProvider``, pointed at the door's own URL, meets the
door's 401, reads the door's protected-resource metadata (its ``resource`` must name ``/ws``), registers, runs the
authorization code grant with PKCE through a headless browser and gets a token for ``/ws``; a ``websockets`` client
then opens the socket with ``Authorization: Bearer``, lists tools and runs a bridged tool with its sampling rounds.
Without a token, or with one issued for another audience, the upgrade is refused 401 with the door's challenge,
before any socket exists."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import websockets
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.gateway.auth.oidc import AuthorizationServer, authorization_server
from tests.gateway.auth.test_sdk_authorization_code import History, Stack, claims, interactive, serve

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {"sampling": {}}, "clientInfo": {"name": "ws", "version": "1"}}}


@pytest.fixture
async def issuer() -> AsyncIterator[AuthorizationServer]:
    async with authorization_server(ttl_seconds=300) as server:
        yield server


@pytest.fixture
async def stack(aiohttp_server: Any, tmp_path: Path, issuer: AuthorizationServer) -> Stack:
    return await serve(aiohttp_server, tmp_path, issuer)


def door_url(stack: Stack) -> str:
    return stack.url.removesuffix("/mcp") + "/ws"


async def sdk_token(stack: Stack) -> tuple[str, History, Any]:
    """The SDK's OAuth client authorizes for the ``/ws`` door: a plain GET of the door's URL through the SDK's
    HTTP client is what meets the 401 (the SDK has no WebSocket client to carry it); the token is what the
    SDK's storage then holds."""
    storage = History()
    provider, browser = interactive(door_url(stack), storage)
    async with create_mcp_http_client(auth=provider) as http:
        await http.get(door_url(stack))
    assert storage.tokens is not None, "the SDK did not authorize"
    return storage.tokens.access_token, storage, browser


async def receive(ws: Any) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(await ws.recv())
    return message


async def answer_of(ws: Any, ident: int) -> dict[str, Any]:
    """The answer to request ``ident``; the sampling requests asked meanwhile are answered as a model would."""
    while (message := await receive(ws)).get("id") != ident or "method" in message:
        if message.get("method") == "sampling/createMessage":
            prompt = message["params"]["messages"][0]["content"]["text"]
            text = json.dumps(prompt.splitlines()[1:4]) if "JSON array" in prompt else "A parser and a gateway."
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {
                "role": "assistant", "content": {"type": "text", "text": text}, "model": "m"}}))
    return message


async def test_the_sdk_token_opens_the_socket_and_bridges(stack: Stack) -> None:
    token, _storage, browser = await sdk_token(stack)
    ws_url = door_url(stack).replace("http://", "ws://")
    async with websockets.connect(ws_url, subprotocols=["mcp"],
                                  additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        await ws.send(json.dumps(INIT))
        assert (await answer_of(ws, 1))["result"]["protocolVersion"] == "2025-11-25"
        await ws.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        tools = {tool["name"] for tool in (await answer_of(ws, 2))["result"]["tools"]}
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                  "params": {"name": "summarize_repo", "arguments": {}}}))
        summary = await answer_of(ws, 3)
    assert "summarize_repo" in tools and "parser" in summary["result"]["content"][0]["text"]
    # Discovery was the door's own: its 401 named its metadata, whose resource is the door's URL, and the token
    # was issued for that resource through the authorization code grant with PKCE.
    first = next(s for s in stack.seen if s.path == "/ws")
    assert first.status == 401 and "/.well-known/oauth-protected-resource/ws" in (first.challenge or "")
    [query] = browser.visited
    assert query["resource"] == [door_url(stack)] and query["code_challenge_method"] == ["S256"]
    assert claims(token)["aud"] in (door_url(stack), [door_url(stack)])


async def refused(url: str, **headers: str) -> tuple[int, str]:
    with pytest.raises(websockets.exceptions.InvalidStatus) as raised:
        async with websockets.connect(url, subprotocols=["mcp"], additional_headers=headers):
            pass
    response = raised.value.response
    return response.status_code, response.headers.get("WWW-Authenticate", "")


async def test_no_token_or_another_audience_is_refused_at_the_upgrade(stack: Stack,
                                                                      issuer: AuthorizationServer) -> None:
    ws_url = door_url(stack).replace("http://", "ws://")
    metadata = f'resource_metadata="{door_url(stack).removesuffix("/ws")}/.well-known/oauth-protected-resource/ws"'
    status, challenge = await refused(ws_url)
    assert status == 401 and challenge.startswith("Bearer ") and metadata in challenge
    assert "error=" not in challenge and 'scope="mcp:tools"' in challenge
    elsewhere = await issuer.client_token("http://127.0.0.1:9/elsewhere/mcp")
    status, challenge = await refused(ws_url, Authorization=f"Bearer {elsewhere}")
    assert status == 401 and 'error="invalid_token"' in challenge and metadata in challenge
    status, challenge = await refused(ws_url, Authorization="Bearer not-a-token")
    assert status == 401 and 'error="invalid_token"' in challenge
    assert not any(s.path == "/ws" and s.status == 101 for s in stack.seen)
