"""The official Python SDK's interactive OAuth client through the gateway: ``OAuthClientProvider`` meets the
gateway's 401, reads the gateway's protected-resource metadata and the authorization server's (node
oidc-provider), registers itself as a public client (RFC 7591, loopback redirect URI, no secret), runs the
authorization code grant with PKCE through a headless browser that follows the authorization URL, and goes on in
2025-11-25 mode: tool list, a sampling round and a form elicitation, bridged to the reference core.

Beyond the first token: the SDK refreshes an expired token while an elicitation round waits for its answer, and
the session and the round survive (the session is bound to the token's issuer, subject and client, not to the
token); a tool call needing a scope the token lacks (the peer's ``tool_scopes``) gets the gateway's 403
``insufficient_scope``, the SDK re-authorizes with the scopes the challenge names (2025-11-25 basic/authorization,
"Scope Challenge Handling") and the call succeeds in the same session.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from aiohttp import web
from mcp import Client
from mcp.client.auth.oauth2 import OAuthClientProvider
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata, OAuthToken
from pydantic import AnyUrl

from gateway.config.settings import load_config
from gateway.http.app import create_app
from tests.gateway.auth.oidc import AuthorizationServer, authorization_server, free_port
from tests.gateway.auth.test_sdk_oauth import Memory
from tests.gateway.http.test_e2e_sdk import elicitation_answering, pick_first, roots, sampling

core_app = pytest.importorskip("modern_server.app")
core_config = pytest.importorskip("modern_server.config")

TOKEN_TTL = 4  # seconds: short enough that an elicitation round can outlive its token


class Browser:
    """A headless user agent for the authorization endpoint: follows the authorization URL through the
    authorization server's redirects (its login and consent interactions answer themselves), keeping cookies like
    a browser, until it is sent to the client's redirect URI; it never loads that URI, it hands the query to the
    SDK's callback handler instead."""

    def __init__(self, redirect_uri: str) -> None:
        self.redirect_uri = redirect_uri
        self.http = httpx2.AsyncClient(follow_redirects=False)
        self.visited: list[dict[str, list[str]]] = []  # each authorization request's query
        self._result: AuthorizationCodeResult | None = None

    async def redirect(self, authorization_url: str) -> None:
        self.visited.append(parse_qs(urlsplit(authorization_url).query))
        response = await self.http.get(authorization_url)
        for _ in range(10):
            location = response.headers.get("location")
            assert response.is_redirect and location, (response.status_code, response.text[:500])
            target = str(response.url.join(location))
            if target.startswith(self.redirect_uri):
                query = parse_qs(urlsplit(target).query)
                assert "error" not in query, query
                self._result = AuthorizationCodeResult(code=query["code"][0], state=query["state"][0],
                                                       iss=query.get("iss", [None])[0])
                return
            response = await self.http.get(target)
        raise AssertionError("the authorization server never redirected to the client")

    async def callback(self) -> AuthorizationCodeResult:
        result, self._result = self._result, None
        assert result is not None, "the callback ran before the authorization redirect"
        return result


class History(Memory):
    """Token storage that remembers every token it was given (the first, then refreshed or re-authorized ones)."""

    def __init__(self) -> None:
        super().__init__()
        self.issued: list[OAuthToken] = []

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.issued.append(tokens)
        await super().set_tokens(tokens)


def claims(token: str) -> dict[str, Any]:
    return dict(json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "==")))


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class Seen:
    """A request the gateway answered: the digest of its token, its session and the status it got."""

    method: str
    path: str
    token: str | None
    session: str | None
    status: int
    challenge: str | None


@dataclasses.dataclass
class Stack:
    url: str  # the gateway's /mcp
    app: web.Application
    seen: list[Seen]

    def sessions(self) -> set[str]:
        return {s.session for s in self.seen if s.path == "/mcp" and s.session}


@pytest.fixture
async def issuer() -> AsyncIterator[AuthorizationServer]:
    async with authorization_server(ttl_seconds=TOKEN_TTL) as server:
        yield server


async def serve(aiohttp_server: Any, tmp_path: Path, issuer: AuthorizationServer, **settings: Any) -> Stack:
    core = core_app.create_app(core_config.CoreConfig(database=str(tmp_path / "core.db")))
    core_server = await aiohttp_server(core)
    port = free_port()
    # No leeway: a token past its expiry is refused, so a round that outlives its token only completes if the
    # client refreshed it.
    config = load_config(upstream_url=str(core_server.make_url("/mcp")), port=port,
                         auth={"authorization_servers": [issuer.issuer], "leeway_seconds": 0,
                               "scopes_supported": ["mcp:tools", "mcp:admin"], "required_scopes": ["mcp:tools"]},
                         **settings)
    app = create_app(config)
    seen: list[Seen] = []

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        bearer = request.headers.get("Authorization", "").removeprefix("Bearer ")
        response: web.StreamResponse = await handler(request)
        seen.append(Seen(request.method, request.path, digest(bearer) if bearer else None,
                         request.headers.get("Mcp-Session-Id"), response.status,
                         response.headers.get("WWW-Authenticate")))
        return response

    app.middlewares.append(record)
    await aiohttp_server(app, port=port)
    return Stack(f"http://127.0.0.1:{port}/mcp", app, seen)


@pytest.fixture
async def stack(aiohttp_server: Any, tmp_path: Path, issuer: AuthorizationServer) -> Stack:
    return await serve(aiohttp_server, tmp_path, issuer)


def interactive(url: str, storage: History) -> tuple[OAuthClientProvider, Browser]:
    redirect_uri = f"http://127.0.0.1:{free_port()}/callback"
    browser = Browser(redirect_uri)
    metadata = OAuthClientMetadata(client_name="gateway tests", redirect_uris=[AnyUrl(redirect_uri)],
                                   grant_types=["authorization_code", "refresh_token"], response_types=["code"],
                                   token_endpoint_auth_method="none")
    return OAuthClientProvider(url, metadata, storage, browser.redirect, browser.callback), browser


async def test_authorization_code_with_pkce_then_refresh_in_a_waiting_round(stack: Stack,
                                                                             issuer: AuthorizationServer) -> None:
    storage = History()
    provider, browser = interactive(stack.url, storage)
    first: list[str] = []

    async def elicit_slowly(context: Any, params: Any) -> Any:
        assert storage.tokens is not None
        first.append(storage.tokens.access_token)
        await asyncio.sleep(TOKEN_TTL + 0.5)  # sleep: the token the round started with expires while the user thinks
        return await elicitation_answering(action="accept", content=pick_first)(context, params)

    async with create_mcp_http_client(auth=provider) as http:
        transport = streamable_http_client(stack.url, http_client=http)
        async with Client(transport, mode="legacy", sampling_callback=sampling,
                          elicitation_callback=elicit_slowly) as client:
            assert client.protocol_version == "2025-11-25"
            names = {tool.name for tool in (await client.list_tools()).tools}
            summary = await client.call_tool("summarize_repo", {"repo": "demo"})
            deleted = await client.call_tool("notes_delete", {"workspaceUri": "file:///work/notes",
                                                              "title": "Standup"})
    assert {"summarize_repo", "notes_delete"} <= names
    assert not summary.is_error and summary.structured_content["files"][0] == "README.md"
    assert deleted.content[0].text.startswith("Deleted 'Standup'")

    # Discovery went through the gateway's metadata; registration made a public client; one authorization with
    # PKCE (S256) for the gateway's resource, in the fixed test account's name.
    assert stack.seen[0].status == 401 and stack.seen[0].token is None
    assert f'resource_metadata="{stack.url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")}"' \
        in (stack.seen[0].challenge or "")
    assert [s.status for s in stack.seen if s.path == "/.well-known/oauth-protected-resource/mcp"] == [200]
    assert storage.client is not None and storage.client.token_endpoint_auth_method == "none"
    assert storage.client.client_secret is None
    assert len(browser.visited) == 1
    query = browser.visited[0]
    assert query["code_challenge_method"] == ["S256"] and query["resource"] == [stack.url]
    assert "mcp:tools" in query["scope"][0].split()
    token = claims(storage.issued[0].access_token)
    assert token["aud"] == stack.url and token["sub"] == "test-user"
    assert token["client_id"] == storage.client.client_id and token["iss"] == issuer.issuer

    # The elicitation's answer went with a refreshed token (no second authorization) in the same session.
    assert storage.issued[-1].access_token != first[0] and storage.issued[-1].refresh_token
    refreshed = digest(storage.issued[-1].access_token)
    assert len(stack.sessions()) == 1
    assert any(s.token == refreshed and s.session and s.status < 300 for s in stack.seen)
    assert all(s.status < 400 for s in stack.seen[1:])  # nothing refused after the first challenge
    assert claims(storage.issued[-1].access_token)["sub"] == token["sub"]


async def test_a_tool_needing_a_scope_steps_up_in_the_same_session(aiohttp_server: Any, tmp_path: Path,
                                                                   issuer: AuthorizationServer) -> None:
    stack = await serve(aiohttp_server, tmp_path, issuer,
                        pins={"default_peer": {"name": "default", "tool_scopes": {"summarize_repo": "mcp:admin"}}})
    storage = History()
    provider, browser = interactive(stack.url, storage)
    async with create_mcp_http_client(auth=provider) as http:
        transport = streamable_http_client(stack.url, http_client=http)
        async with Client(transport, mode="legacy", sampling_callback=sampling) as client:
            await client.list_tools()
            assert claims(storage.issued[-1].access_token)["scope"].split() == ["mcp:tools"]
            summary = await client.call_tool("summarize_repo", {"repo": "demo"})
    assert not summary.is_error and summary.structured_content["files"][0] == "README.md"  # sampled, too
    # The SDK met the 403, re-authorized asking for the union the challenge named, and retried.
    assert len(browser.visited) == 2
    assert {"mcp:tools", "mcp:admin"} <= set(browser.visited[1]["scope"][0].split())
    assert {"mcp:tools", "mcp:admin"} <= set(claims(storage.issued[-1].access_token)["scope"].split())
    refused = [s for s in stack.seen if s.status == 403]
    assert len(refused) == 1 and 'error="insufficient_scope"' in (refused[0].challenge or "")
    assert 'scope="mcp:admin mcp:tools"' in (refused[0].challenge or "")
    # Every later POST (the retried call, then the rest) carried the stepped-up token; the GET stream opened
    # before the step-up keeps the token it opened with (its authorization was checked when it opened).
    after = [s for s in stack.seen[stack.seen.index(refused[0]) + 1:] if s.method == "POST"]
    assert after and all(s.status < 400 and s.token != refused[0].token for s in after)
    assert len(stack.sessions()) == 1


async def test_authorization_code_at_the_sse_door(stack: Stack) -> None:
    """The HTTP+SSE door: the SDK connects to ``/sse``, is sent to that door's own metadata (whose resource is the
    URL it connected to), authorizes for it and works through the door."""
    sse = stack.url.removesuffix("/mcp") + "/sse"
    storage = History()
    provider, browser = interactive(sse, storage)
    elicit = elicitation_answering(action="accept", content=pick_first)
    async with sse_client(sse, auth=provider) as (read, write), ClientSession(
            read, write, sampling_callback=sampling, elicitation_callback=elicit,
            list_roots_callback=roots) as session:
        await session.initialize()
        names = {tool.name for tool in (await session.list_tools()).tools}
        summary = await session.call_tool("summarize_repo", {})
        deleted = await session.call_tool("notes_delete", {"workspaceUri": "file:///work/notes", "title": "Standup"})
        await session.send_ping()  # the deletion's list_changed notifications arrive before the session closes
    assert {"summarize_repo", "notes_delete"} <= names
    assert not summary.is_error and "parser" in summary.content[0].text
    assert deleted.content[0].text.startswith("Deleted 'Standup'")
    assert len(browser.visited) == 1 and browser.visited[0]["resource"] == [sse]
    assert claims(storage.issued[0].access_token)["aud"] == sse
    assert [s.status for s in stack.seen if s.path == "/.well-known/oauth-protected-resource/sse"] == [200]
