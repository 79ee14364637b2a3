"""The protected-resource rules (adapters.authz), without a loop: metadata, bearer parsing, header checks,
principals, scopes and the refusal each cause becomes."""

from __future__ import annotations

import pytest

from adapters import authz
from adapters.authz import Cause, Failure, Principal, ResourceServer

SERVER = ResourceServer("https://gw.example/mcp", ("https://as.example",), ("mcp:tools", "mcp:admin"),
                        ("mcp:tools",), "Gateway")


def test_metadata_is_served_beside_the_resource_path() -> None:
    assert authz.metadata_path("https://gw.example/mcp") == "/.well-known/oauth-protected-resource/mcp"
    assert authz.metadata_path("https://gw.example/") == "/.well-known/oauth-protected-resource"
    assert authz.metadata_url("https://gw.example:8443/a/sse") == \
        "https://gw.example:8443/.well-known/oauth-protected-resource/a/sse"


def test_metadata_document_names_the_resource_and_its_servers() -> None:
    assert authz.metadata(SERVER) == {
        "resource": "https://gw.example/mcp", "authorization_servers": ["https://as.example"],
        "bearer_methods_supported": ["header"], "scopes_supported": ["mcp:tools", "mcp:admin"],
        "resource_name": "Gateway"}


def test_authorization_server_metadata_urls_in_discovery_order() -> None:
    assert authz.authorization_server_metadata_urls("https://as.example") == (
        "https://as.example/.well-known/oauth-authorization-server",
        "https://as.example/.well-known/openid-configuration")
    assert authz.authorization_server_metadata_urls("https://as.example/tenant1/") == (
        "https://as.example/.well-known/oauth-authorization-server/tenant1",
        "https://as.example/.well-known/openid-configuration/tenant1",
        "https://as.example/tenant1/.well-known/openid-configuration")


@pytest.mark.parametrize("header, cause", [
    (None, Cause.NO_TOKEN), ("", Cause.NO_TOKEN), ("Basic dXNlcjpwYXNz", Cause.MALFORMED),
    ("Bearer", Cause.MALFORMED), ("Bearer " + "a" * (authz.MAX_TOKEN_BYTES + 1), Cause.MALFORMED),
    ("Bearer abc\u00e9", Cause.MALFORMED), ("Bearer a b", Cause.MALFORMED),
])
def test_bearer_token_refusals(header: str | None, cause: Cause) -> None:
    result = authz.bearer_token(header)
    assert isinstance(result, Failure) and result.cause is cause


def test_bearer_token_scheme_is_case_insensitive() -> None:
    assert authz.bearer_token("bearer abc.def.ghi") == "abc.def.ghi"


@pytest.mark.parametrize("header", [
    {"alg": "none", "typ": "at+jwt"}, {"alg": "HS256", "typ": "at+jwt"}, {"typ": "at+jwt"},
    {"alg": "RS256", "typ": "JWT"}, {"alg": "RS256"},
])
def test_header_refusals(header: dict[str, str]) -> None:
    refused = authz.check_header(header)
    assert refused is not None and refused.cause is Cause.INVALID


def test_access_token_headers_pass() -> None:
    assert authz.check_header({"alg": "RS256", "typ": "at+jwt"}) is None
    assert authz.check_header({"alg": "ES256", "typ": "application/at+JWT"}) is None


def _principal(sub: str = "alice", client: str | None = "app", scopes: frozenset[str] = frozenset()) -> Principal:
    made = authz.principal_of_claims({"iss": "https://as.example", "sub": sub, "client_id": client,
                                      "scope": " ".join(sorted(scopes)), "exp": 100})
    assert isinstance(made, Principal)
    return made


def test_principal_is_issuer_subject_and_client_not_the_token() -> None:
    assert _principal().key == _principal(scopes=frozenset({"x"})).key  # a refreshed token: the same session
    assert _principal().key != _principal(sub="bob").key
    assert _principal().key != _principal(client="other-app").key
    assert _principal().key.startswith("oauth:") and "alice" not in _principal().key
    assert _principal().expires_at == 100.0


def test_claims_without_subject_are_refused() -> None:
    refused = authz.principal_of_claims({"iss": "https://as.example"})
    assert isinstance(refused, Failure) and refused.cause is Cause.INVALID


def test_scopes_from_scope_or_scp() -> None:
    assert authz.scopes_of({"scope": "a b"}) == {"a", "b"}
    assert authz.scopes_of({"scp": ["a", 3, "c"]}) == {"a", "c"}
    assert authz.scopes_of({}) == frozenset()


def test_step_up_names_every_scope_to_ask_for() -> None:
    refused = authz.require_scopes(_principal(scopes=frozenset({"mcp:tools"})), ("mcp:admin",))
    assert refused is not None and refused.cause is Cause.INSUFFICIENT_SCOPE
    assert refused.scopes == ("mcp:admin", "mcp:tools")
    assert authz.require_scopes(_principal(scopes=frozenset({"mcp:admin"})), ("mcp:admin",)) is None


@pytest.mark.parametrize("failure, status, expected", [
    (Failure(Cause.NO_TOKEN, "no access token"), 401,
     'Bearer resource_metadata="https://gw.example/.well-known/oauth-protected-resource/mcp", scope="mcp:tools"'),
    (Failure(Cause.EXPIRED, 'expired "now"'), 401,
     'Bearer resource_metadata="https://gw.example/.well-known/oauth-protected-resource/mcp", scope="mcp:tools", '
     'error="invalid_token", error_description="expired now"'),
    (Failure(Cause.INSUFFICIENT_SCOPE, "lacks", ("mcp:admin", "mcp:tools")), 403,
     'Bearer resource_metadata="https://gw.example/.well-known/oauth-protected-resource/mcp", '
     'scope="mcp:admin mcp:tools", error="insufficient_scope"'),
])
def test_refusal_status_and_challenge(failure: Failure, status: int, expected: str) -> None:
    rejection = authz.refusal(SERVER, failure, 7)
    assert rejection.status == status and rejection.ident == 7
    assert rejection.error.data == {"authorization": failure.cause.value}
    assert rejection.error.challenge is not None and rejection.error.challenge.challenges == (expected,)


def test_an_outage_is_503_without_a_challenge() -> None:
    rejection = authz.refusal(SERVER, Failure(Cause.UNAVAILABLE, "keys down"))
    assert rejection.status == 503 and rejection.error.challenge is None
