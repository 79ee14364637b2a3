"""The gateway as a protected resource, end to end: a real authorization server (node oidc-provider) issues the
tokens, the gateway serves its RFC 9728 metadata, challenges, verifies, binds sessions to the token's principal,
and never passes the client's token to the upstream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.gateway.auth.keyserver import KeyServer
from tests.gateway.auth.oidc import AuthorizationServer, authorization_server
from tests.gateway.conftest import Legacy

PUBLIC = "http://127.0.0.1:8808"
RESOURCE = PUBLIC + "/mcp"
METADATA = PUBLIC + "/.well-known/oauth-protected-resource/mcp"


@pytest.fixture
async def issuer() -> AsyncIterator[AuthorizationServer]:
    async with authorization_server() as server:
        yield server


@pytest.fixture
async def gateway(make_gateway: Any, issuer: AuthorizationServer) -> Any:
    return await make_gateway(public_url=PUBLIC, auth={
        "authorization_servers": [issuer.issuer], "scopes_supported": ["mcp:tools", "mcp:admin"],
        "required_scopes": ["mcp:tools"]})


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_each_door_serves_its_metadata(gateway: Any, issuer: AuthorizationServer) -> None:
    for door in ("mcp", "sse", "ws"):
        resp = await gateway.get(f"/.well-known/oauth-protected-resource/{door}")
        assert resp.status == 200
        doc = await resp.json()
        assert doc["resource"] == f"{PUBLIC}/{door}"
        assert doc["authorization_servers"] == [issuer.issuer]
        assert doc["scopes_supported"] == ["mcp:tools", "mcp:admin"]
        assert doc["bearer_methods_supported"] == ["header"]
    assert (await (await gateway.get("/.well-known/oauth-protected-resource")).json())["resource"] == RESOURCE


async def test_no_token_is_challenged_with_the_metadata(gateway: Any) -> None:
    resp = await Legacy(gateway).post("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                                     "clientInfo": {"name": "x", "version": "1"}})
    assert resp.status == 401
    assert resp.headers.getall("WWW-Authenticate") == [f'Bearer resource_metadata="{METADATA}", scope="mcp:tools"']
    body = await resp.json()
    assert body["id"] == 1 and body["error"]["data"] == {"authorization": "no_token"}


class Holder(Legacy):
    """A raw legacy client whose every request carries ``token`` (which a test may swap, as a refresh does)."""

    def __init__(self, client: Any, token: str | None = None) -> None:
        super().__init__(client)
        self.token = token

    def headers(self, **extra: str) -> dict[str, str]:
        return {**super().headers(), **(bearer(self.token) if self.token else {}), **extra}


async def ping_status(gateway: Any, token: str) -> tuple[int, str, dict[str, Any]]:
    resp = await Holder(gateway, token).post("ping")
    return resp.status, resp.headers.get("WWW-Authenticate", ""), await resp.json()


async def test_a_token_for_another_resource_is_invalid(gateway: Any, issuer: AuthorizationServer) -> None:
    status, challenge, body = await ping_status(gateway, await issuer.client_token("http://127.0.0.1:9999/mcp"))
    assert status == 401
    assert 'error="invalid_token"' in challenge and f'resource_metadata="{METADATA}"' in challenge
    assert body["error"]["data"] == {"authorization": "wrong_audience"}


async def test_a_token_without_the_required_scope_is_told_to_step_up(gateway: Any,
                                                                     issuer: AuthorizationServer) -> None:
    status, challenge, body = await ping_status(gateway, await issuer.client_token(RESOURCE, scope="mcp:admin"))
    assert status == 403
    assert 'error="insufficient_scope"' in challenge and 'scope="mcp:admin mcp:tools"' in challenge
    assert body["error"]["data"] == {"authorization": "insufficient_scope"}


async def test_a_session_follows_the_principal_not_the_token(gateway: Any, issuer: AuthorizationServer,
                                                             upstream: Any) -> None:
    upstream.script["tools/list"] = lambda body, request: {"resultType": "complete", "tools": []}
    first = await issuer.client_token(RESOURCE)
    holder = Holder(gateway, first)
    await holder.initialize()
    assert "error" not in await holder.call("tools/list", {})
    holder.token = await issuer.client_token(RESOURCE, scope="mcp:tools mcp:admin")  # the same client, refreshed
    assert holder.token != first
    assert "error" not in await holder.call("tools/list", {})
    holder.token = await issuer.client_token(RESOURCE, client="gateway-upstream")  # another principal
    resp = await holder.post("tools/list", {})
    assert resp.status == 404
    # The client's tokens never reached the upstream, which did answer the two lists.
    assert len(upstream.calls("tools/list")) == 2
    assert all("authorization" not in {k.lower() for k in h} for h in upstream.headers)


async def test_a_verified_token_does_not_draw_on_the_unverified_allowance(make_gateway: Any,
                                                                         issuer: AuthorizationServer) -> None:
    gateway = await make_gateway(public_url=PUBLIC, sessions={"max_unverified_sessions": 0},
                                 auth={"authorization_servers": [issuer.issuer]})
    holder = Holder(gateway, await issuer.client_token(RESOURCE))
    await holder.initialize()  # admitted: the gateway verified this principal itself
    assert holder.session_id


async def test_refusals_are_counted_by_cause_and_door(gateway: Any, issuer: AuthorizationServer) -> None:
    await Holder(gateway).post("ping")
    await ping_status(gateway, await issuer.client_token("http://127.0.0.1:9999/mcp"))
    await ping_status(gateway, await issuer.client_token("http://127.0.0.1:9999/mcp"))
    await ping_status(gateway, await issuer.client_token(RESOURCE))  # accepted: not counted
    text = await (await gateway.get("/metrics")).text()
    counted = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
               if line.startswith("mcp_gateway_authorization_refusals_total")}
    assert counted == {'mcp_gateway_authorization_refusals_total{cause="no_token",door="/mcp"}': 1.0,
                       'mcp_gateway_authorization_refusals_total{cause="wrong_audience",door="/mcp"}': 2.0}


async def test_readiness_needs_the_issuers_keys(make_gateway: Any, gateway: Any) -> None:
    ready = await gateway.get("/readyz")
    assert ready.status == 200, await ready.text()
    dead = await make_gateway(public_url=PUBLIC, auth={"authorization_servers": ["http://127.0.0.1:9"]})
    resp = await dead.get("/readyz")
    body = await resp.json()
    assert resp.status == 503 and "127.0.0.1:9" in body["failed"]["authorization"]
    # A client of that gateway is told to try later (503, no challenge), not that its token is bad.
    keys = KeyServer(issuer="http://127.0.0.1:9")
    keys.add_key("k1")
    status, challenge, answer = await ping_status(dead, keys.token(aud=RESOURCE))
    assert (status, challenge) == (503, "") and answer["error"]["data"] == {"authorization": "unavailable"}
