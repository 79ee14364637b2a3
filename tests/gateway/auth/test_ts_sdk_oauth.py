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


async def test_the_ts_sdk_authorizes_with_pkce_and_refreshes(aiohttp_server: Any, tmp_path: Path) -> None:
    if not (CONFORMANCE / "node_modules" / "@modelcontextprotocol" / "sdk").exists():
        pytest.skip("the TypeScript SDK is not installed (bash tests/conformance/install.sh; .ci/run does it)")
    core = core_app.create_app(core_config.CoreConfig(database=str(tmp_path / "core.db")))
    core_seen: list[str | None] = []

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        core_seen.append(request.headers.get("Authorization"))
        response: web.StreamResponse = await handler(request)
        return response

    core.middlewares.append(record)
    core_server = await aiohttp_server(core)
    issuer: AuthorizationServer
    async with authorization_server(ttl_seconds=TOKEN_TTL) as issuer:
        port = free_port()
        config = load_config(upstream_url=str(core_server.make_url("/mcp")), port=port,
                             auth={"authorization_servers": [issuer.issuer], "leeway_seconds": 0,
                                   "scopes_supported": ["mcp:tools"], "required_scopes": ["mcp:tools"]})
        await aiohttp_server(create_app(config), port=port)
        url = f"http://127.0.0.1:{port}/mcp"
        status, out = await asyncio.wait_for(
            run(*node(), str(CONFORMANCE / "oauth_client.mjs"), url, str(TOKEN_TTL), cwd=tmp_path), 120)
    assert status == 0, out
    oks = [line for line in out.splitlines() if line.startswith("ok - ")]
    assert len(oks) == 10, out
    result = json.loads(next(line for line in out.splitlines() if line.startswith("result "))[len("result "):])
    assert result["auth_method"] == "none" and result["session"]
    first, refreshed = (claims(token) for token in result["tokens"])
    assert first["aud"] == url and first["iss"] == issuer.issuer and first["sub"] == "test-user"
    assert first["client_id"] == result["client_id"] == refreshed["client_id"]
    assert refreshed["sub"] == first["sub"] and refreshed["exp"] > first["exp"]
    # The core answered the bridged calls and never saw a client's token.
    assert core_seen and not any(core_seen)
