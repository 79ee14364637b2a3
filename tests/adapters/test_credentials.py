"""The pure rules of the gateway's own upstream credentials (adapters.credentials)."""

from __future__ import annotations

import pytest

from adapters import credentials as C
from adapters.authz import ResourceServer


def test_grants_and_their_older_name() -> None:
    assert C.Grant.of("gateway") is C.Grant.STATIC
    assert [g for g in C.Grant if g.minted] == [C.Grant.CLIENT_CREDENTIALS, C.Grant.TOKEN_EXCHANGE, C.Grant.LOGIN]


def test_forms_name_the_upstreams_resource() -> None:
    assert C.client_credentials_form("https://up/mcp", ("a", "b")) == {
        "grant_type": "client_credentials", "resource": "https://up/mcp", "scope": "a b"}
    form = C.exchange_form("subj", "https://up/mcp", ())
    assert form["grant_type"] == C.TOKEN_EXCHANGE and form["subject_token"] == "subj"
    assert form["subject_token_type"] == C.ACCESS_TOKEN_TYPE and "scope" not in form


def test_a_token_answer() -> None:
    issued = C.read_token_answer({"access_token": "tok3n", "token_type": "Bearer", "expires_in": 300}, 1000.0)
    assert isinstance(issued, C.Issued) and issued.expires_at == 1300.0
    assert "tok3n" not in repr(issued)  # never in a log line through a repr
    lasting = C.read_token_answer({"access_token": "t", "token_type": "N_A"}, 0.0)
    assert isinstance(lasting, C.Issued) and lasting.expires_at == C.DEFAULT_LIFETIME_SECONDS
    assert "token_type" in str(C.read_token_answer({"access_token": "t", "token_type": "DPoP"}, 0.0))
    assert "access_token" in str(C.read_token_answer({"access_token": "a b", "token_type": "Bearer"}, 0.0))


def test_refreshed_ahead_of_expiry_but_never_before_half_its_life() -> None:
    assert C.usable_until(C.Issued("t", 0.0, 300.0), 60.0) == 240.0
    assert C.usable_until(C.Issued("t", 0.0, 30.0), 60.0) == 15.0


def test_the_cache_key_is_a_digest() -> None:
    assert C.exchange_key("tok") != "tok" and len(C.exchange_key("tok")) == 64
    assert C.exchange_key("a") != C.exchange_key("b")


@pytest.mark.parametrize(("status", "challenge", "grant", "retried", "outcome"), [
    (401, "", C.Grant.CLIENT_CREDENTIALS, False, C.Refusal.RETRY),
    (401, "", C.Grant.TOKEN_EXCHANGE, False, C.Refusal.RETRY),
    (401, "", C.Grant.TOKEN_EXCHANGE, True, C.Refusal.OPERATOR),  # once only
    (401, "", C.Grant.STATIC, False, C.Refusal.OPERATOR),  # the same token again would not do
    (403, 'Bearer error="insufficient_scope", scope="a b"', C.Grant.TOKEN_EXCHANGE, True, C.Refusal.STEP_UP),
    (403, 'Bearer error="insufficient_scope"', C.Grant.CLIENT_CREDENTIALS, True, C.Refusal.OPERATOR),
    (403, 'Bearer error="invalid_token"', C.Grant.TOKEN_EXCHANGE, True, C.Refusal.OPERATOR),
])
def test_what_a_refusal_becomes(status: int, challenge: str, grant: C.Grant, retried: bool,
                                outcome: C.Refusal) -> None:
    assert C.after_refusal(status, (challenge,) if challenge else (), grant, retried) is outcome


def test_challenge_params_with_commas_in_quotes() -> None:
    assert C.challenge_params(('DPoP algs="ES256"', 'Bearer realm="a, b", error=insufficient_scope, scope="x y"')) == {
        "realm": "a, b", "error": "insufficient_scope", "scope": "x y"}


def test_the_step_up_is_the_gateways_own_challenge() -> None:
    own = ResourceServer("https://gw/mcp", ("https://as",), required_scopes=("mcp:tools",))
    error = C.step_up(own, ('Bearer resource_metadata="https://up/.well-known/x", error="insufficient_scope", '
                            'scope="mcp:admin"',))
    assert error.challenge is not None and error.challenge.reason == "insufficient_scope"
    [value] = error.challenge.challenges
    assert 'resource_metadata="https://gw/.well-known/oauth-protected-resource/mcp"' in value
    assert 'scope="mcp:admin mcp:tools"' in value and "https://up" not in value
