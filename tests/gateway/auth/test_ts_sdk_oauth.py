"""The official TypeScript SDK's OAuth client through the gateway (``tests/conformance/oauth_client.mjs``): its
``StreamableHTTPClientTransport`` meets the gateway's 401, discovers the gateway's metadata and the authorization
server's (node oidc-provider), registers as a public client, authorizes with code + PKCE through a headless browser,
calls ``finishAuth`` and goes on in 2025-11-25 mode: tools, two sampling rounds and a form elicitation bridged to the
reference core; then its token expires, and the SDK refreshes it on the gateway's 401 in the same session."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gateway.config.settings import load_config
from gateway.http.app import create_app
from tests.gateway.auth.oidc import AuthorizationServer, authorization_server, free_port
from tests.gateway.ts_sdk import CONFORMANCE, node, run

core_app = pytest.importorskip("modern_server.app")
core_config = pytest.importorskip("modern_server.config")

TOKEN_TTL = 3  # seconds: the script waits it out to make the SDK refresh


def claims(token: str) -> dict[str, Any]:
    return dict(json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "==")))


async def served(aiohttp_server: Any, tmp_path: Path, issuer: AuthorizationServer, core_seen: list[str | None],
                 **settings: Any) -> str:
    """The reference core behind a token-checking gateway (no leeway: an expired token is refused); /mcp's URL."""
    core = core_app.create_app(core_config.CoreConfig(database=str(tmp_path / "core.db")))

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        core_seen.append(request.headers.get("Authorization"))
        response: web.StreamResponse = await handler(request)
        return response

    core.middlewares.append(record)
    core_server = await aiohttp_server(core)
    port = free_port()
    config = load_config(upstream_url=str(core_server.make_url("/mcp")), port=port,
                         auth={"authorization_servers": [issuer.issuer], "leeway_seconds": 0,
                               "scopes_supported": ["mcp:tools", "mcp:admin"], "required_scopes": ["mcp:tools"]},
                         **settings)
    await aiohttp_server(create_app(config), port=port)
    return f"http://127.0.0.1:{port}/mcp"


async def oauth_client(tmp_path: Path, *args: str) -> tuple[list[str], dict[str, Any]]:
    """Run ``oauth_client.mjs ARGS``: its ``ok - …`` lines and its result."""
    if not (CONFORMANCE / "node_modules" / "@modelcontextprotocol" / "sdk").exists():
        pytest.skip("the TypeScript SDK is not installed (bash tests/conformance/install.sh; .ci/run does it)")
    status, out = await asyncio.wait_for(run(*node(), str(CONFORMANCE / "oauth_client.mjs"), *args, cwd=tmp_path),
                                         120)
    assert status == 0, out
    result = next(line for line in out.splitlines() if line.startswith("result "))
    return [line for line in out.splitlines() if line.startswith("ok - ")], json.loads(result[len("result "):])


async def test_the_ts_sdk_authorizes_with_pkce_and_refreshes(aiohttp_server: Any, tmp_path: Path) -> None:
    core_seen: list[str | None] = []
    async with authorization_server(ttl_seconds=TOKEN_TTL) as issuer:
        url = await served(aiohttp_server, tmp_path, issuer, core_seen)
        oks, result = await oauth_client(tmp_path, url, str(TOKEN_TTL))
    assert len(oks) == 10, oks
    assert result["auth_method"] == "none" and result["session"]
    first, refreshed = (claims(token) for token in result["tokens"])
    assert first["aud"] == url and first["iss"] == issuer.issuer and first["sub"] == "test-user"
    assert first["client_id"] == result["client_id"] == refreshed["client_id"]
    assert refreshed["sub"] == first["sub"] and refreshed["exp"] > first["exp"]
    # The core answered the bridged calls and never saw a client's token.
    assert core_seen and not any(core_seen)


async def test_the_ts_sdk_meets_a_tools_step_up(aiohttp_server: Any, tmp_path: Path) -> None:
    """SDK 1.32.2 answers a 403 ``insufficient_scope`` by refreshing when it holds a refresh token (same scope:
    the call fails again); without one it re-authorizes with the challenge's scopes and the call succeeds."""
    core_seen: list[str | None] = []
    async with authorization_server() as issuer:
        url = await served(aiohttp_server, tmp_path, issuer, core_seen,
                           pins={"default_peer": {"name": "default", "tool_scopes": {"echo": "mcp:admin"}}})
        oks, result = await oauth_client(tmp_path, url, "0", "echo")
    assert len(oks) == 11, oks
    scopes = [claims(token)["scope"].split() for token in result["tokens"]]
    assert scopes[0] == ["mcp:tools"] and {"mcp:tools", "mcp:admin"} <= set(scopes[-1])
    assert core_seen and not any(core_seen)
