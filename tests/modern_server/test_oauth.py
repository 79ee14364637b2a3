"""The core's own JWT validation ([oauth]): only access tokens its issuer signed for the core's URL are served.

Tokens the real authorization server (node oidc-provider) cannot be made to issue wrongly (expired, another
audience, alg none, HMAC confusion, an ID-token type) come from a loopback key server the test signs with."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import jwt
import pytest

from modern_server.app import VERIFIER, build_services, create_app
from modern_server.config import CoreConfig, OAuthConfig
from tests.gateway.auth.keyserver import KeyServer
from tests.gateway.auth.oidc import AuthorizationServer, authorization_server, free_port
from tests.modern_server.conftest import CoreClient


class Core:
    def __init__(self, url: str, app: Any, client: CoreClient) -> None:
        self.url, self.app, self.client = url, app, client

    async def ping(self, token: str | None) -> Any:
        return await self.client.call("tools/list", token=token)


async def serve_core(aiohttp_server: Any, tmp_path: Any, issuer: str, clock: Any = time.time,
                     **oauth: Any) -> AsyncIterator[Core]:
    port = free_port()  # a port first: the core's URL is its audience
    url = f"http://127.0.0.1:{port}/mcp"
    config = CoreConfig(database=str(tmp_path / "core.db"), anonymous_principal=None,
                        oauth=OAuthConfig(issuer=issuer, resource=url, **oauth))
    app = create_app(config, services=build_services(config, clock=clock))
    await aiohttp_server(app, port=port)
    async with aiohttp.ClientSession() as http:
        yield Core(url, app, CoreClient(http, url))


@pytest.fixture
async def keys(aiohttp_server: Any) -> KeyServer:
    keys = KeyServer()
    server = await aiohttp_server(keys.app())
    keys.issuer = str(server.make_url("")).rstrip("/")
    keys.add_key("k1")
    return keys


@pytest.fixture
async def core(aiohttp_server: Any, tmp_path: Any, keys: KeyServer) -> AsyncIterator[Core]:
    async for core in serve_core(aiohttp_server, tmp_path, keys.issuer, leeway_seconds=0):
        yield core


async def test_serves_its_metadata_naming_the_issuer(core: Core, keys: KeyServer) -> None:
    base = core.url.removesuffix("/mcp")
    async with aiohttp.ClientSession() as http, \
            http.get(base + "/.well-known/oauth-protected-resource/mcp") as resp:
        doc = await resp.json()
    assert doc == {"resource": core.url, "authorization_servers": [keys.issuer], "bearer_methods_supported": ["header"]}


async def test_no_token_is_challenged(core: Core) -> None:
    reply = await core.ping(None)
    base = core.url.removesuffix("/mcp")
    assert reply.status == 401
    assert reply.headers["WWW-Authenticate"] == (
        f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"')


async def test_a_token_for_itself_is_served_and_recorded(core: Core, keys: KeyServer) -> None:
    reply = await core.ping(keys.token(aud=core.url, sub="svc", client_id="gateway-upstream"))
    assert reply.status == 200, reply.raw
    [seen] = core.app[VERIFIER].accepted
    assert (seen.client_id, seen.sub, seen.aud) == ("gateway-upstream", "svc", (core.url,))


@pytest.mark.parametrize("case", ["other_audience", "expired", "id_token_typ", "alg_none", "hmac_confusion",
                                  "foreign_key", "other_issuer", "not_a_jwt"])
async def test_anything_else_is_refused(core: Core, keys: KeyServer, case: str) -> None:
    now = int(time.time())
    foreign = KeyServer()
    foreign.add_key("k1")
    token = {
        "other_audience": lambda: keys.token(aud="http://127.0.0.1:8808/mcp"),
        "expired": lambda: keys.token(aud=core.url, iat=now - 600, exp=now - 1),
        "id_token_typ": lambda: keys.token(aud=core.url, typ="JWT"),
        "alg_none": lambda: jwt.encode({"iss": keys.issuer, "sub": "x", "aud": core.url, "exp": now + 60}, None,
                                       algorithm="none", headers={"typ": "at+jwt", "kid": "k1"}),
        "hmac_confusion": lambda: jwt.encode({"iss": keys.issuer, "sub": "x", "aud": core.url, "exp": now + 60},
                                             "a-shared-secret-of-32-bytes-or-more!", algorithm="HS256",
                                             headers={"typ": "at+jwt", "kid": "k1"}),
        "foreign_key": lambda: foreign.token(aud=core.url, iss=keys.issuer),
        "other_issuer": lambda: keys.token(aud=core.url, iss="http://127.0.0.1:1/"),
        "not_a_jwt": lambda: "opaque-token",
    }[case]()
    reply = await core.ping(token)
    assert reply.status == 401, reply.raw
    assert 'error="invalid_token"' in reply.headers["WWW-Authenticate"]
    assert not core.app[VERIFIER].accepted


async def test_a_missing_required_scope_is_a_step_up(aiohttp_server: Any, tmp_path: Any, keys: KeyServer) -> None:
    async for core in serve_core(aiohttp_server, tmp_path, keys.issuer, required_scopes=("mcp:admin",)):
        reply = await core.ping(keys.token(aud=core.url, scope="mcp:tools"))
        assert reply.status == 403
        assert 'error="insufficient_scope"' in reply.headers["WWW-Authenticate"]
        assert 'scope="mcp:admin mcp:tools"' in reply.headers["WWW-Authenticate"]
        assert (await core.ping(keys.token(aud=core.url, scope="mcp:tools mcp:admin"))).status == 200


async def test_expiry_follows_the_cores_clock(aiohttp_server: Any, tmp_path: Any, keys: KeyServer) -> None:
    now = [time.time()]
    async for core in serve_core(aiohttp_server, tmp_path, keys.issuer, clock=lambda: now[0], leeway_seconds=0):
        token = keys.token(aud=core.url)
        assert (await core.ping(token)).status == 200
        now[0] += 301
        assert (await core.ping(token)).status == 401


async def test_the_keys_being_unreachable_is_503(core: Core, keys: KeyServer) -> None:
    keys.down = True
    reply = await core.ping(keys.token(aud=core.url))
    assert reply.status == 503 and "WWW-Authenticate" not in reply.headers


@pytest.fixture
async def issuer() -> AsyncIterator[AuthorizationServer]:
    async with authorization_server() as server:
        yield server


async def test_a_real_authorization_servers_token(aiohttp_server: Any, tmp_path: Any,
                                                 issuer: AuthorizationServer) -> None:
    """oidc-provider's client-credentials JWT for the core's URL is served; one for another resource is not."""
    async for core in serve_core(aiohttp_server, tmp_path, issuer.issuer):
        assert (await core.ping(await issuer.client_token(core.url, client="gateway-upstream"))).status == 200
        assert (await core.ping(await issuer.client_token("http://127.0.0.1:9/mcp"))).status == 401
        [seen] = core.app[VERIFIER].accepted
        assert seen.client_id == "gateway-upstream" and seen.aud == (core.url,)
