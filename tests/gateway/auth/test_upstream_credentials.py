"""Upstream credentials without token passthrough, end to end: a real authorization server (node oidc-provider,
with the RFC 8693 grant tests/conformance/authorization_server.mjs registers), the gateway with [gateway.auth],
and the reference core validating JWTs with its own URL as audience ([oauth]). What the core accepted is asserted
from the core's side: only tokens issued for itself, never the client's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from gateway.config.settings import load_config
from gateway.http.app import GATEWAY, create_app
from gateway.ops.cli import check_config
from modern_server.app import VERIFIER, build_services
from modern_server.app import create_app as create_core
from modern_server.config import CoreConfig, OAuthConfig
from tests.gateway.auth.oidc import AuthorizationServer, authorization_server, free_port
from tests.gateway.conftest import Legacy

PUBLIC = "http://127.0.0.1:8808"
RESOURCE = PUBLIC + "/mcp"
SECRET_ENV = "TEST_GATEWAY_UPSTREAM_SECRET"


class Holder(Legacy):
    """A raw legacy client whose every request carries ``token``."""

    def __init__(self, client: Any, token: str) -> None:
        super().__init__(client)
        self.token = token

    def headers(self, **extra: str) -> dict[str, str]:
        return {**super().headers(), "Authorization": f"Bearer {self.token}", **extra}


@dataclass
class Core:
    url: str
    app: web.Application
    offset: float = 0.0  # the core's clock runs this far ahead of the real one
    seen: list[tuple[str | None, int]] = field(default_factory=list)  # (Authorization, status) of every POST

    @property
    def accepted(self) -> list[Any]:
        return list(self.app[VERIFIER].accepted)


@pytest.fixture
async def issuer() -> AsyncIterator[AuthorizationServer]:
    async with authorization_server() as server:
        yield server


async def start_core(aiohttp_server: Any, tmp_path: Any, issuer: str, **oauth: Any) -> Core:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    config = CoreConfig(database=str(tmp_path / "core.db"), anonymous_principal=None,
                        oauth=OAuthConfig(issuer=issuer, resource=url, leeway_seconds=0, **oauth))
    core = Core(url, web.Application())
    core.app = create_core(config, services=build_services(config, clock=lambda: time.time() + core.offset))

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        response: web.StreamResponse = await handler(request)
        if request.method == "POST":
            core.seen.append((request.headers.get("Authorization"), response.status))
        return response

    core.app.middlewares.append(record)
    await aiohttp_server(core.app, port=port)
    return core


async def start_gateway(aiohttp_client: Any, monkeypatch: Any, core: Core, issuer: AuthorizationServer,
                        **upstream_auth: Any) -> Any:
    monkeypatch.setenv(SECRET_ENV, "secret-gateway-upstream")
    config = load_config(upstream_url=core.url, public_url=PUBLIC, auth={
        "authorization_servers": [issuer.issuer], "scopes_supported": ["mcp:tools", "mcp:admin"],
        "required_scopes": ["mcp:tools"]}, upstream_auth={
        "issuer": issuer.issuer, "client_id": "gateway-upstream", "client_secret_env": SECRET_ENV, **upstream_auth})
    return await aiohttp_client(create_app(config))


def tools_listed(message: dict[str, Any]) -> set[str]:
    assert "result" in message, message
    return {tool["name"] for tool in message["result"]["tools"]}


async def test_client_credentials_the_core_sees_only_the_gateways_own_token(
        aiohttp_server: Any, aiohttp_client: Any, monkeypatch: Any, tmp_path: Any,
        issuer: AuthorizationServer) -> None:
    core = await start_core(aiohttp_server, tmp_path, issuer.issuer)
    gateway = await start_gateway(aiohttp_client, monkeypatch, core, issuer, auth="client_credentials",
                                  scopes=["mcp:tools"])
    client_token = await issuer.client_token(RESOURCE)
    holder = Holder(gateway, client_token)
    await holder.initialize()
    assert "summarize_repo" in tools_listed(await holder.call("tools/list", {}))
    assert "summarize_repo" in tools_listed(await holder.call("tools/list", {}))
    assert len(core.accepted) >= 3  # discover and two lists, every one with a token the core accepted
    assert {(a.client_id, a.aud) for a in core.accepted} == {("gateway-upstream", (core.url,))}
    assert all(auth != f"Bearer {client_token}" for auth, _ in core.seen)
    assert gateway.app[GATEWAY].upstream.credentials.fetched == 1  # cached, not fetched per request


async def test_token_exchange_the_core_sees_the_subject_in_a_token_for_itself(
        aiohttp_server: Any, aiohttp_client: Any, monkeypatch: Any, tmp_path: Any,
        issuer: AuthorizationServer) -> None:
    core = await start_core(aiohttp_server, tmp_path, issuer.issuer)
    gateway = await start_gateway(aiohttp_client, monkeypatch, core, issuer, auth="token_exchange")
    first = await issuer.client_token(RESOURCE)
    holder = Holder(gateway, first)
    await holder.initialize()
    tools_listed(await holder.call("tools/list", {}))
    other = Holder(gateway, await issuer.client_token(RESOURCE, client="gateway-upstream"))
    await other.initialize()
    tools_listed(await other.call("tools/list", {}))
    subjects = {(a.sub, a.client_id, a.aud) for a in core.accepted}
    # Each client's own subject, in a token the gateway's client obtained for the core's URL; never another aud.
    assert subjects == {("gateway-tests", "gateway-upstream", (core.url,)),
                        ("gateway-upstream", "gateway-upstream", (core.url,))}
    assert all(auth not in (f"Bearer {first}", f"Bearer {other.token}") for auth, _ in core.seen)
    assert gateway.app[GATEWAY].upstream.credentials.fetched == 2  # one exchange per subject token, then cached


async def test_an_upstream_401_is_retried_once_with_a_fresh_token(
        aiohttp_server: Any, aiohttp_client: Any, monkeypatch: Any, tmp_path: Any,
        issuer: AuthorizationServer) -> None:
    core = await start_core(aiohttp_server, tmp_path, issuer.issuer)
    gateway = await start_gateway(aiohttp_client, monkeypatch, core, issuer, auth="client_credentials")
    holder = Holder(gateway, await issuer.client_token(RESOURCE))
    await holder.initialize()
    tools_listed(await holder.call("tools/list", {}))
    expires = core.accepted[-1].exp
    await asyncio.sleep(1.1)  # sleep: the next token the authorization server issues expires at least a second later
    core.offset = expires + 0.5 - time.time()  # the core now holds the gateway's cached token expired
    before = len(core.seen)
    tools_listed(await holder.call("tools/list", {}))  # refused once (401), then sent again with a fresh token
    assert [status for _, status in core.seen[before:]] == [401, 200]
    assert core.seen[-2][0] != core.seen[-1][0]
    assert gateway.app[GATEWAY].upstream.credentials.fetched == 2
    core.offset += 3600  # every token is expired now: one retry, then the failure, never a loop
    before = len(core.seen)
    failed = await holder.call("tools/list", {})
    assert failed["error"]["data"] == {"upstream": "unauthorized"}
    assert [status for _, status in core.seen[before:]] == [401, 401]


async def test_an_exchanged_token_short_of_scope_is_the_gateways_step_up(
        aiohttp_server: Any, aiohttp_client: Any, monkeypatch: Any, tmp_path: Any,
        issuer: AuthorizationServer) -> None:
    core = await start_core(aiohttp_server, tmp_path, issuer.issuer, required_scopes=("mcp:admin",))
    gateway = await start_gateway(aiohttp_client, monkeypatch, core, issuer, auth="token_exchange")
    holder = Holder(gateway, await issuer.client_token(RESOURCE, scope="mcp:tools"))
    resp = await holder.post("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                            "clientInfo": {"name": "raw", "version": "1"}})
    assert resp.status == 403
    challenge = resp.headers["WWW-Authenticate"]
    assert f'resource_metadata="{PUBLIC}/.well-known/oauth-protected-resource/mcp"' in challenge  # the gateway's
    assert 'error="insufficient_scope"' in challenge and 'scope="mcp:admin mcp:tools"' in challenge
    holder.token = await issuer.client_token(RESOURCE, scope="mcp:tools mcp:admin")  # the client steps up
    await holder.initialize()
    tools_listed(await holder.call("tools/list", {}))
    assert {a.scope for a in core.accepted} == {"mcp:tools mcp:admin"}


@pytest.mark.parametrize(("body", "why"), [
    ('[gateway.upstream_auth]\nauth = "forward"\n', "shares_audience"),
    ('[upstreams.x]\nurl = "https://elsewhere.example/mcp"\nauth = "forward"\n', "shares_audience"),
    ('[gateway.upstream_auth]\nauth = "client_credentials"\nissuer = "https://as.example"\nclient_id = "g"\n',
     "client_secret_env"),
    ('[gateway.upstream_auth]\nauth = "token_exchange"\nissuer = "https://as.example"\nclient_id = "g"\n'
     'client_secret_env = "S"\n', "needs [gateway.auth]"),
    ('[upstreams.x]\nurl = "https://elsewhere.example/mcp"\nauth = "token_exchange"\nclient_id = "g"\n'
     'client_secret_env = "S"\n', "issuer (or token_endpoint)"),
])
def test_check_config_refuses_incoherent_upstream_credentials(tmp_path: Any, capsys: Any, body: str,
                                                              why: str) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(body)
    assert check_config(str(path)) == 2
    assert why in capsys.readouterr().err


async def test_a_client_secret_named_but_unset_stops_the_start(monkeypatch: Any, aiohttp_client: Any) -> None:
    monkeypatch.delenv(SECRET_ENV, raising=False)
    config = load_config(upstream_url="http://127.0.0.1:9/mcp", upstream_auth={
        "auth": "client_credentials", "issuer": "http://127.0.0.1:9", "client_id": "g",
        "client_secret_env": SECRET_ENV})
    with pytest.raises(ValueError, match=SECRET_ENV):
        await aiohttp_client(create_app(config))
