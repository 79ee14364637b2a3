"""adapters.oauth_client: the stdio door's login rules, without I/O."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from adapters import oauth_client as O
from adapters.credentials import Issued

# RFC 7636 Appendix B: the octets, the verifier they give and its S256 challenge.
RFC7636_OCTETS = bytes([116, 24, 223, 180, 151, 153, 224, 37, 79, 250, 96, 125, 216, 173, 187, 186, 22, 212, 37, 77,
                        105, 214, 191, 240, 91, 88, 5, 88, 83, 132, 141, 121])


def test_pkce_is_rfc_7636_appendix_b() -> None:
    pair = O.pkce(RFC7636_OCTETS)
    assert pair.verifier == "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    assert pair.challenge == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    assert "dBjft" not in repr(pair)
    with pytest.raises(ValueError):
        O.pkce(b"short")


def test_the_authorization_url_names_the_resource_the_challenge_and_the_state() -> None:
    url = O.authorization_url("https://as.example/authorize?tenant=a", "client-1", "http://127.0.0.1:5000/callback",
                              O.pkce(RFC7636_OCTETS), "st", "https://mcp.example/mcp", ("mcp:tools", "mcp:admin"))
    query = parse_qs(urlsplit(url).query)
    assert query["tenant"] == ["a"] and query["resource"] == ["https://mcp.example/mcp"]
    assert query["code_challenge_method"] == ["S256"] and query["scope"] == ["mcp:tools mcp:admin"]
    assert query["code_challenge"] == ["E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"] and query["state"] == ["st"]
    assert "dBjft" not in url  # the verifier never leaves the process before the token request


@pytest.mark.parametrize(("query", "result"), [
    ("code=abc&state=st", "abc"),
    ("code=abc&state=other", ("invalid_state", "the callback's state is not the one this login sent")),
    ("code=abc", ("invalid_state", "the callback carries no state")),
    ("code=abc&state=", ("invalid_state", "the callback carries no state")),
    ("error=access_denied&state=other", ("invalid_state", "the callback's state is not the one this login sent")),
    ("error=access_denied&error_description=no&state=st", ("access_denied", "no")),
    ("state=st", ("invalid_request", "the callback carries no code")),
])
def test_a_callback_is_taken_only_with_its_state(query: str, result: object) -> None:
    assert O.callback_code(query, "st") == result


def test_s256_must_be_listed() -> None:
    assert O.supports_s256({"code_challenge_methods_supported": ["plain", "S256"]})
    assert not O.supports_s256({"code_challenge_methods_supported": ["plain"]})
    assert not O.supports_s256({})


def test_scopes_configured_then_challenged_then_supported() -> None:
    assert O.scopes_to_ask("a b", ("c",), ("d",)) == ("d",)
    assert O.scopes_to_ask("a b", ("c",), ()) == ("a", "b")
    assert O.scopes_to_ask(None, ("c",), ()) == ("c",)


def test_a_stored_token_round_trips_and_is_for_its_issuer_and_resource_only() -> None:
    client = O.ClientRegistration("c1", "http://127.0.0.1:1/callback")
    token = O.read_user_token({"access_token": "secret-at", "token_type": "Bearer", "expires_in": 100,
                               "refresh_token": "secret-rt",
                               "scope": "mcp:tools"}, 1000.0, "https://as", "https://mcp/mcp", client)
    assert isinstance(token, O.StoredToken) and token.issued.expires_at == 1100.0
    doc = O.dump_token(token)
    assert O.load_token(doc, "https://as", "https://mcp/mcp") == token
    assert O.load_token(doc, "https://as", "https://other/mcp") is None  # never another audience's token
    assert O.load_token(doc, "https://evil", "https://mcp/mcp") is None
    assert O.load_token({**doc, "expires_at": "soon"}, "https://as", "https://mcp/mcp") is None
    assert O.load_token("garbage", "https://as", "https://mcp/mcp") is None
    assert "secret" not in repr(token)  # a token never reaches a log line through a repr
    assert O.token_file_name("https://as", "https://mcp/mcp") != O.token_file_name("https://as", "https://other/mcp")


def test_a_refresh_answer_without_a_refresh_token_keeps_the_old_one() -> None:
    old = O.StoredToken(Issued("at", 0, 100), "i", "r", "rt-old")
    fresh = O.read_user_token({"access_token": "at2", "token_type": "Bearer", "expires_in": 100}, 50, "i", "r", None,
                              old)
    assert isinstance(fresh, O.StoredToken) and fresh.refresh_token == "rt-old"
    assert O.read_user_token({"access_token": "at2", "token_type": "mac"}, 0, "i", "r", None) == \
        "the token answer's token_type is 'mac', not Bearer"


def test_refresh_is_due_ahead_of_expiry_or_at_half_a_short_life() -> None:
    long = O.StoredToken(Issued("t", 0, 3600), "i", "r")
    assert not O.refresh_due(long, 3539, 60) and O.refresh_due(long, 3540, 60)
    short = O.StoredToken(Issued("t", 0, 4), "i", "r")
    assert not O.refresh_due(short, 1.9, 60) and O.refresh_due(short, 2, 60)


def test_the_registration_is_a_public_native_client() -> None:
    doc = O.registration_request("http://127.0.0.1:9/callback", O.LoginGrant.AUTHORIZATION_CODE)
    assert doc["token_endpoint_auth_method"] == "none" and doc["application_type"] == "native"
    assert doc["redirect_uris"] == ["http://127.0.0.1:9/callback"]
    assert "refresh_token" in doc["grant_types"] and "authorization_code" in doc["grant_types"]
    device = O.registration_request("", O.LoginGrant.DEVICE_CODE)
    assert device["grant_types"] == [O.DEVICE_CODE_GRANT, "refresh_token"] and device["redirect_uris"] == []
    assert O.read_registration({}, None) == "the registration answer holds no client_id"


def test_device_answers_and_polling() -> None:
    found = O.read_device_authorization({"device_code": "d", "user_code": "U-1", "verification_uri": "https://x/d"})
    assert isinstance(found, O.DeviceAuthorization) and found.interval == 5.0 and found.expires_in == 600.0
    assert isinstance(O.read_device_authorization({"device_code": "d"}), str)
    assert O.read_poll_error({"error": "authorization_pending"}) is O.Poll.PENDING
    assert O.read_poll_error({"error": "slow_down"}) is O.Poll.SLOW_DOWN
    assert O.read_poll_error({"error": "expired_token"}) is O.Poll.FAILED


@pytest.mark.parametrize(("lines", "expected"), [
    (["X-Team: blue", "  # comment", "", "X-Empty:"], {"X-Team": "blue", "X-Empty": ""}),
    (["Authorization: Bearer mine"], {"Authorization": "Bearer mine"}),
    (["no colon"], "f line 1: not 'Name: value'"),
    (["Bad Name: v"], "f line 1: not 'Name: value'"),
    (["X-A: v\x00"], "f line 1: the value holds a control character"),
    (["Mcp-Session-Id: s"], "f line 1: Mcp-Session-Id is the gateway's to set"),
    ([f"X-{i}: v" for i in range(O.MAX_HEADERS + 1)], f"more than {O.MAX_HEADERS} extra upstream headers"),
])
def test_extra_headers(lines: list[str], expected: object) -> None:
    assert O.parse_headers(lines, "f") == expected


def test_the_resource_must_be_the_upstream() -> None:
    assert O.resource_covers("https://mcp.example/mcp", "https://mcp.example/mcp")
    assert O.resource_covers("https://mcp.example", "https://mcp.example/mcp")
    assert not O.resource_covers("https://mcp.example/mcp", "https://mcp.example/mcpx")
    assert not O.resource_covers("https://other.example/mcp", "https://mcp.example/mcp")
    assert not O.resource_covers("http://mcp.example/mcp", "https://mcp.example/mcp")


def test_a_browser_is_opened_only_where_one_can_be_shown() -> None:
    assert O.can_open_browser({}, "darwin") and O.can_open_browser({}, "win32")
    assert not O.can_open_browser({}, "linux") and O.can_open_browser({"DISPLAY": ":0"}, "linux")
