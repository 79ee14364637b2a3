"""The gateway's own client authenticating with private_key_jwt (RFC 7523) instead of a secret: the real
authorization server knows the client only by its public key, and the core (checking JWTs for itself) sees the
gateway's client-credentials token; a key file that cannot be read stops the start in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gateway.config.settings import load_config
from gateway.http.app import GATEWAY, create_app
from tests.gateway.auth.oidc import authorization_server
from tests.gateway.auth.test_upstream_credentials import PUBLIC, RESOURCE, Holder, start_core, tools_listed


def key_pair(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = tmp_path / "client-key.pem"
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    public = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
    return pem, {"keys": [{**public, "kid": "gw-1", "use": "sig", "alg": "ES256"}]}


async def test_the_gateway_signs_its_own_client_assertion(aiohttp_server: Any, aiohttp_client: Any,
                                                          monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pem, jwks = key_pair(tmp_path)
    monkeypatch.setenv("PKJWT_JWKS", json.dumps(jwks))  # the authorization server registers the public key
    async with authorization_server() as issuer:
        core = await start_core(aiohttp_server, tmp_path, issuer.issuer)
        config = load_config(upstream_url=core.url, public_url=PUBLIC, auth={
            "authorization_servers": [issuer.issuer], "required_scopes": ["mcp:tools"]}, upstream_auth={
            "auth": "client_credentials", "issuer": issuer.issuer, "client_id": "gateway-pkjwt",
            "client_assertion_key_file": str(pem), "client_assertion_kid": "gw-1", "scopes": ["mcp:tools"]})
        gateway = await aiohttp_client(create_app(config))
        holder = Holder(gateway, await issuer.client_token(RESOURCE))
        await holder.initialize()
        assert "summarize_repo" in tools_listed(await holder.call("tools/list", {}))
    assert {(a.client_id, a.aud) for a in core.accepted} == {("gateway-pkjwt", (core.url,))}
    assert gateway.app[GATEWAY].upstream.credentials.fetched == 1


def test_an_unreadable_key_file_is_one_line(tmp_path: Path) -> None:
    from gateway.auth.credentials import credentials_for

    (tmp_path / "bad.pem").write_text("not a key")
    config = load_config(upstream_url="http://127.0.0.1:9/mcp", upstream_auth={
        "auth": "client_credentials", "issuer": "http://127.0.0.1:9", "client_id": "gw",
        "client_assertion_key_file": str(tmp_path / "bad.pem")})
    with pytest.raises(ValueError, match=r"client_assertion_key_file .*bad\.pem"):
        credentials_for(config.upstream_auth, "http://127.0.0.1:9/mcp", config, {})
