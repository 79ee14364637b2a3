"""Token verification (gateway.auth.validator) against a key server on loopback: every way a token can be
wrong is refused with its cause, never an exception; good tokens are verified once and then cached by digest."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from adapters.authz import Cause, Failure, Principal, ResourceServer
from gateway.auth.validator import AuthSettings, TokenValidator
from tests.gateway.auth.keyserver import RESOURCE, KeyServer


@pytest.fixture
async def keys(aiohttp_server: Any) -> KeyServer:
    ks = KeyServer()
    ks.add_key("k1")
    server = await aiohttp_server(ks.app())
    ks.issuer = str(server.make_url("")).rstrip("/")
    return ks


@pytest.fixture
async def validator(keys: KeyServer) -> AsyncIterator[TokenValidator]:
    server = ResourceServer(RESOURCE, (keys.issuer,), required_scopes=("mcp:tools",))
    v = TokenValidator(AuthSettings(server, (RESOURCE,), leeway_seconds=5, min_key_refresh_seconds=0))
    yield v
    await v.close()


async def cause(v: TokenValidator, token: str) -> Cause:
    outcome = await v.authenticate(f"Bearer {token}")
    assert isinstance(outcome, Failure), outcome
    return outcome.cause


async def test_a_good_token_names_its_principal(keys: KeyServer, validator: TokenValidator) -> None:
    outcome = await validator.authenticate(f"Bearer {keys.token()}")
    assert isinstance(outcome, Principal)
    assert (outcome.issuer, outcome.subject, outcome.client_id) == (keys.issuer, "alice", "app")


async def test_a_verified_token_is_cached_by_digest(keys: KeyServer, validator: TokenValidator) -> None:
    token = keys.token()
    first = await validator.authenticate(f"Bearer {token}")
    keys.down = True  # a second check must not need the keys
    hits = keys.jwks_hits
    assert await validator.authenticate(f"Bearer {token}") == first
    assert keys.jwks_hits == hits
    assert all(isinstance(k, bytes) and token.encode() != k for k in validator._verified)


async def test_a_remembered_token_keeps_its_scope_refusal(keys: KeyServer, validator: TokenValidator) -> None:
    """The steady state skips parsing and the signature, not the scope check: a token lacking the resource's
    scope is refused again from the cache, with the same step-up scopes, without asking the keys."""
    header = f"Bearer {keys.token(scope='other')}"
    first = await validator.authenticate(header)
    keys.down, hits = True, keys.jwks_hits
    again = await validator.authenticate(header)
    assert isinstance(again, Failure) and again == first and again.cause is Cause.INSUFFICIENT_SCOPE
    assert keys.jwks_hits == hits


async def test_a_header_that_cannot_be_a_bearer_token_is_refused_and_not_remembered(
        keys: KeyServer, validator: TokenValidator) -> None:
    for header in (f"Bearer {keys.token()}\u00e9", "Bearer t\u00f6ken", None):
        outcome = await validator.authenticate(header)
        assert isinstance(outcome, Failure) and outcome.cause in (Cause.MALFORMED, Cause.NO_TOKEN)
    assert not validator._verified


@pytest.mark.parametrize("claims, expected", [
    ({"exp": int(time.time()) - 60}, Cause.EXPIRED),
    ({"nbf": int(time.time()) + 600}, Cause.EXPIRED),
    ({"aud": "http://127.0.0.1:9999/mcp"}, Cause.WRONG_AUDIENCE),
    ({"aud": None}, Cause.INVALID),
    ({"sub": None}, Cause.INVALID),
    ({"exp": None}, Cause.INVALID),
    ({"scope": "other"}, Cause.INSUFFICIENT_SCOPE),
])
async def test_claims_refusals(keys: KeyServer, validator: TokenValidator, claims: dict[str, Any],
                               expected: Cause) -> None:
    assert await cause(validator, keys.token(**claims)) is expected


async def test_an_expired_token_within_the_leeway_passes(keys: KeyServer, validator: TokenValidator) -> None:
    assert isinstance(await validator.authenticate(f"Bearer {keys.token(exp=int(time.time()) - 2)}"), Principal)


async def test_a_foreign_issuer_is_refused_before_any_fetch(keys: KeyServer, validator: TokenValidator) -> None:
    hits = keys.jwks_hits
    assert await cause(validator, keys.token(iss="https://evil.example")) is Cause.WRONG_ISSUER
    assert keys.jwks_hits == hits


async def test_an_id_token_is_not_an_access_token(keys: KeyServer, validator: TokenValidator) -> None:
    assert await cause(validator, keys.token(typ="JWT")) is Cause.INVALID


async def test_a_key_the_issuer_does_not_publish(keys: KeyServer, validator: TokenValidator) -> None:
    stranger = KeyServer()
    stranger.add_key("k1")
    assert await cause(validator, keys.token(key=stranger.keys["k1"])) is Cause.INVALID  # same kid, other key
    assert await cause(validator, keys.token("k9", key=stranger.keys["k1"])) is Cause.INVALID


async def test_rotated_keys_are_fetched_on_an_unknown_kid(keys: KeyServer, validator: TokenValidator) -> None:
    assert isinstance(await validator.authenticate(f"Bearer {keys.token()}"), Principal)
    keys.add_key("k2", "ec")
    assert isinstance(await validator.authenticate(f"Bearer {keys.token('k2')}"), Principal)


async def test_unknown_kids_refetch_at_most_once_per_interval(keys: KeyServer) -> None:
    server = ResourceServer(RESOURCE, (keys.issuer,))
    v = TokenValidator(AuthSettings(server, (RESOURCE,), min_key_refresh_seconds=3600))
    try:
        stranger = KeyServer()
        stranger.add_key("x")
        for n in range(5):
            assert await cause(v, keys.token(f"made-up-{n}", key=stranger.keys["x"])) is Cause.INVALID
        assert keys.jwks_hits == 1
    finally:
        await v.close()


def _unsigned(header: dict[str, Any], claims: dict[str, Any]) -> str:
    part = lambda v: base64.urlsafe_b64encode(json.dumps(v).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"{part(header)}.{part(claims)}."


async def test_alg_none_is_refused(keys: KeyServer, validator: TokenValidator) -> None:
    claims = jwt.decode(keys.token(), options={"verify_signature": False})
    assert await cause(validator, _unsigned({"alg": "none", "typ": "at+jwt", "kid": "k1"}, claims)) is Cause.INVALID


async def test_algorithm_confusion_is_refused(keys: KeyServer, validator: TokenValidator) -> None:
    """HS256 signed with the published public key as the secret: the classic confusion attack."""
    public = keys.keys["k1"].public_key().public_bytes(serialization.Encoding.PEM,
                                                       serialization.PublicFormat.SubjectPublicKeyInfo)
    claims = jwt.decode(keys.token(), options={"verify_signature": False})
    forged = _unsigned({"alg": "HS256", "typ": "at+jwt", "kid": "k1"}, claims)[:-1]
    signature = hmac.new(public, forged.encode(), hashlib.sha256).digest()
    forged += "." + base64.urlsafe_b64encode(signature).rstrip(b"=").decode()
    assert await cause(validator, forged) is Cause.INVALID
    # RS256 header over an EC key's signature: the key type does not match the algorithm
    keys.add_key("k3", "ec")
    _, body, sig = keys.token("k3").split(".")
    head = base64.urlsafe_b64encode(json.dumps({"alg": "RS256", "typ": "at+jwt", "kid": "k3"}).encode())
    assert await cause(validator, f"{head.rstrip(b'=').decode()}.{body}.{sig}") is Cause.INVALID


async def test_a_tampered_payload_is_refused(keys: KeyServer, validator: TokenValidator) -> None:
    head, _, sig = keys.token().split(".")
    claims = jwt.decode(keys.token(), options={"verify_signature": False}) | {"sub": "mallory"}
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    assert await cause(validator, f"{head}.{body}.{sig}") is Cause.INVALID


@pytest.mark.parametrize("token", ["a.b.c", "....", "x" * 50, "e30.e30.e30"])
async def test_garbage_is_malformed_or_invalid(validator: TokenValidator, token: str) -> None:
    assert await cause(validator, token) in (Cause.MALFORMED, Cause.INVALID)


async def test_keys_that_cannot_be_had_are_an_outage(keys: KeyServer, validator: TokenValidator) -> None:
    keys.down = True
    assert await cause(validator, keys.token()) is Cause.UNAVAILABLE
    keys.down = False  # not cached: once the keys can be had, the same token passes
    assert isinstance(await validator.authenticate(f"Bearer {keys.token()}"), Principal)


async def test_an_unreachable_issuer_is_an_outage() -> None:
    server = ResourceServer(RESOURCE, ("http://127.0.0.1:9",))
    v = TokenValidator(AuthSettings(server, (RESOURCE,), fetch_timeout_seconds=2))
    ks = KeyServer(issuer="http://127.0.0.1:9")
    ks.add_key("k1")
    try:
        assert await cause(v, ks.token()) is Cause.UNAVAILABLE
    finally:
        await v.close()


async def test_the_cache_is_bounded(keys: KeyServer) -> None:
    server = ResourceServer(RESOURCE, (keys.issuer,))
    v = TokenValidator(AuthSettings(server, (RESOURCE,), cache_entries=3))
    try:
        for n in range(6):
            assert isinstance(await v.authenticate(f"Bearer {keys.token(jti=str(n))}"), Principal)
        assert len(v._verified) == 3
    finally:
        await v.close()


async def test_a_slow_key_server_is_an_outage_within_the_fetch_timeout(keys: KeyServer) -> None:
    keys.delay = 5.0
    server = ResourceServer(RESOURCE, (keys.issuer,))
    v = TokenValidator(AuthSettings(server, (RESOURCE,), fetch_timeout_seconds=0.5))
    try:
        began = time.monotonic()
        assert await cause(v, keys.token()) is Cause.UNAVAILABLE
        assert time.monotonic() - began < 3  # both discovery URLs tried, each within its timeout
    finally:
        await v.close()


async def test_metadata_naming_another_issuer_is_not_trusted(keys: KeyServer, validator: TokenValidator) -> None:
    keys.claimed_issuer = "https://evil.example"
    assert await cause(validator, keys.token()) is Cause.UNAVAILABLE
    assert keys.jwks_hits == 0  # its keys were never fetched


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"keys": "x"}', b'{"keys": [{"kty": "RSA", "n": "!"}]}',
                                  b'{"keys": [' + b'{"kty": "oct", "k": "c2VjcmV0"},' * 3 + b'{}]}'])
async def test_a_lying_key_set_refuses_tokens_without_an_error(keys: KeyServer, validator: TokenValidator,
                                                               body: bytes) -> None:
    keys.jwks_body = body
    assert await cause(validator, keys.token()) in (Cause.INVALID, Cause.UNAVAILABLE)
