"""The official Python SDK's own OAuth client through the gateway: ``ClientCredentialsOAuthProvider`` meets the
gateway's 401, reads the gateway's protected-resource metadata (whose ``resource`` must name the URL it connects
to), finds the real authorization server (node oidc-provider) from it, gets a token for the gateway's resource and
goes on in 2025-11-25 mode: tool list, a two-round sampling tool and a form elicitation, bridged to the reference
core, which never sees the client's token."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from mcp import Client
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from gateway.config.settings import load_config
from gateway.http.app import create_app
from tests.gateway.auth.oidc import AuthorizationServer, authorization_server, free_port
from tests.gateway.http.test_e2e_sdk import elicitation_answering, pick_first, sampling

core_app = pytest.importorskip("modern_server.app")
core_config = pytest.importorskip("modern_server.config")


class Memory:
    """The SDK's TokenStorage, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


@pytest.fixture
async def issuer() -> AsyncIterator[AuthorizationServer]:
    async with authorization_server() as server:
        yield server


@pytest.fixture
async def stack(aiohttp_server: Any, tmp_path: Any, issuer: AuthorizationServer) -> AsyncIterator[tuple[str, list]]:
    seen: list[dict[str, str]] = []
    core = core_app.create_app(core_config.CoreConfig(database=str(tmp_path / "core.db")))

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        seen.append({k.lower(): v for k, v in request.headers.items()})
        response: web.StreamResponse = await handler(request)
        return response

    core.middlewares.append(record)
    core_server = await aiohttp_server(core)
    port = free_port()
    config = load_config(upstream_url=str(core_server.make_url("/mcp")), port=port,
                         auth={"authorization_servers": [issuer.issuer], "scopes_supported": ["mcp:tools"],
                               "required_scopes": ["mcp:tools"]})
    await aiohttp_server(create_app(config), port=port)
    yield f"http://127.0.0.1:{port}/mcp", seen


async def test_the_sdk_discovers_authorizes_and_bridges(stack: tuple[str, list], issuer: AuthorizationServer) -> None:
    url, core_saw = stack
    storage = Memory()
    provider = ClientCredentialsOAuthProvider(url, storage, "gateway-tests", "secret-gateway-tests",
                                              scope="mcp:tools", issuer=issuer.issuer)
    elicit = elicitation_answering(action="accept", content=pick_first)
    async with create_mcp_http_client(auth=provider) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode="legacy", sampling_callback=sampling, elicitation_callback=elicit) as client:
            assert client.protocol_version == "2025-11-25"
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"summarize_repo", "notes_delete"} <= names
            summary = await client.call_tool("summarize_repo", {"repo": "demo"})
            deleted = await client.call_tool("notes_delete", {"workspaceUri": "file:///work/notes",
                                                              "title": "Standup"})
    assert not summary.is_error and summary.structured_content["files"][0] == "README.md"
    assert deleted.content[0].text.startswith("Deleted 'Standup'")
    assert storage.tokens is not None  # the SDK got its token for the gateway's resource
    token = storage.tokens.access_token
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["aud"] == url
    # The core answered every round and never saw the client's token (nor any Authorization header).
    assert core_saw and all("authorization" not in h for h in core_saw)
    assert all(token not in json.dumps(h) for h in core_saw)
