"""Opaque access tokens (RFC 7662): the real authorization server issues opaque tokens for a resource whose path
holds ``/opaque/``; the gateway asks its introspection endpoint with its own client, accepts an active token for
one of its doors, refuses one for another resource or an inactive one, and asks again only after its cache time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.gateway.auth.oidc import AuthorizationServer, authorization_server
from tests.gateway.auth.test_gateway_oauth import Holder

PUBLIC = "http://127.0.0.1:8808/opaque"
RESOURCE = PUBLIC + "/mcp"


@pytest.fixture
async def issuer() -> AsyncIterator[AuthorizationServer]:
    async with authorization_server() as server:
        yield server


@pytest.fixture
async def gateway(make_gateway: Any, issuer: AuthorizationServer, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("TEST_INTROSPECTION_SECRET", "secret-gateway-upstream")
    return await make_gateway(public_url=PUBLIC, auth={
        "authorization_servers": [issuer.issuer], "required_scopes": ["mcp:tools"],
        "introspection_endpoint": f"{issuer.issuer}/token/introspection",
        "introspection_client_id": "gateway-upstream", "introspection_secret_env": "TEST_INTROSPECTION_SECRET"})


async def test_an_active_opaque_token_opens_a_session(gateway: Any, issuer: AuthorizationServer,
                                                      upstream: Any) -> None:
    upstream.script["tools/list"] = lambda body, request: {"resultType": "complete", "tools": []}
    token = await issuer.client_token(RESOURCE)
    assert token.count(".") != 2  # opaque, not a JWT
    holder = Holder(gateway, token)
    await holder.initialize()
    assert "error" not in await holder.call("tools/list", {})
    # The same client's next token is the same principal (sub falls back to client_id): the session goes on.
    holder.token = await issuer.client_token(RESOURCE)
    assert "error" not in await holder.call("tools/list", {})


@pytest.mark.parametrize("token, cause", [("never-issued-token", "invalid"), (None, "wrong_audience")])
async def test_inactive_or_foreign_opaque_tokens_are_refused(gateway: Any, issuer: AuthorizationServer,
                                                             token: str | None, cause: str) -> None:
    token = token or await issuer.client_token("http://127.0.0.1:9999/opaque/mcp")
    resp = await Holder(gateway, token).post("ping")
    assert resp.status == 401 and 'error="invalid_token"' in resp.headers["WWW-Authenticate"]
    assert (await resp.json())["error"]["data"] == {"authorization": cause}


async def test_without_introspection_an_opaque_token_is_malformed(make_gateway: Any,
                                                                  issuer: AuthorizationServer) -> None:
    gateway = await make_gateway(public_url=PUBLIC, auth={"authorization_servers": [issuer.issuer]})
    resp = await Holder(gateway, await issuer.client_token(RESOURCE)).post("ping")
    assert resp.status == 401 and (await resp.json())["error"]["data"] == {"authorization": "malformed"}
