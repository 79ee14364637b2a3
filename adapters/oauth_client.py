"""The stdio door as the user's own OAuth client for its upstream: the rules, without the I/O.

What this module owns (2025-11-25 basic/authorization: "Authorization Flow Steps", "Dynamic Client Registration",
"Resource Parameter Implementation", "Authorization Code Protection"; RFC 6749, 7591, 7636, 8252, 8628, 8707):

- which grant the user logs in with (:class:`LoginGrant`);
- PKCE (RFC 7636 §4: S256 only), from random bytes the shell draws, and the ``state`` that ties a callback to the
  authorization request it answers;
- the authorization URL, with the upstream as the resource indicator and the scopes to ask for;
- the registration request of a public native client with a loopback redirect URI (RFC 7591, RFC 8252 §7.3) and
  the reading of its answer;
- the token-endpoint forms (code, refresh, device code, client credentials) and the reading of a token answer,
  refresh token included, and of a device authorization answer and its polling errors (RFC 8628 §3.5);
- when a stored token is refreshed (:func:`refresh_due`), what it is stored under (a digest of issuer and
  resource, never a token), and the stored file's format;
- extra upstream headers from flags or a file, and the ones that are never the user's to set.

The shell (``gateway.auth.login``) draws the random bytes, serves the loopback callback, opens the browser, polls,
reads the clock and writes the token files (owner-only).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Final
from urllib.parse import parse_qs, urlencode, urlsplit

from adapters.credentials import Issued, read_token_answer
from adapters.jsonwire import JsonObject, JsonValue, JsonView

CALLBACK_PATH: Final = "/callback"
DEVICE_CODE_GRANT: Final = "urn:ietf:params:oauth:grant-type:device_code"
CLIENT_NAME: Final = "mcp-legacy-gateway stdio"
FILE_VERSION: Final = 1
# Headers that carry the transport's own framing or the protocol's own meaning: the gateway sets them, a user's
# --header never does (Authorization is the credential's: a user-set one is a static token, and login is off).
RESERVED_HEADERS: Final = frozenset({
    "host", "content-length", "content-type", "transfer-encoding", "connection", "accept", "upgrade", "te",
    "mcp-session-id", "mcp-protocol-version", "mcp-method", "last-event-id"})
MAX_HEADERS: Final = 64  # extra upstream headers, from flags and the file together
DEFAULT_POLL_SECONDS: Final = 5.0  # RFC 8628 §3.2: the interval when the server names none
SLOW_DOWN_SECONDS: Final = 5.0  # RFC 8628 §3.5: added to the interval on each slow_down


class LoginGrant(Enum):
    """How the user's stdio process obtains its upstream token (``stdio --grant``)."""

    AUTHORIZATION_CODE = "authorization_code"  # the browser and a loopback callback (RFC 8252)
    DEVICE_CODE = "device_code"  # a code typed on another device, for headless machines (RFC 8628)
    CLIENT_CREDENTIALS = "client_credentials"  # a confidential client of the user's own (RFC 6749 §4.4)
    NONE = "none"  # no login: the upstream gets no token, or the one --token-env names


@dataclass(frozen=True, slots=True)
class Pkce:
    verifier: str = field(repr=False)
    challenge: str


@dataclass(frozen=True, slots=True)
class ClientRegistration:
    """A client the authorization server knows: registered (RFC 7591) or configured (``--client-id``)."""

    client_id: str
    redirect_uri: str | None = None
    client_secret: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class StoredToken:
    """The user's token for one upstream resource at one issuer, as kept in the token folder."""

    issued: Issued
    issuer: str
    resource: str
    refresh_token: str | None = field(default=None, repr=False)
    client: ClientRegistration | None = None

    def __repr__(self) -> str:  # never a token in a log line, even through a repr
        return f"StoredToken(issuer={self.issuer!r}, resource={self.resource!r}, issued={self.issued!r})"


@dataclass(frozen=True, slots=True)
class DeviceAuthorization:
    """RFC 8628 §3.2: what the user is shown, and what the client polls with."""

    device_code: str = field(repr=False)
    user_code: str
    verification_uri: str
    verification_uri_complete: str | None
    expires_in: float
    interval: float


class Poll(Enum):
    """A device-code token request's answer other than a token (RFC 8628 §3.5)."""

    PENDING = "authorization_pending"
    SLOW_DOWN = "slow_down"
    FAILED = "failed"


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def pkce(random_bytes: bytes) -> Pkce:
    """RFC 7636 §4.1-4.2: a verifier of 43+ unreserved characters from at least 32 random bytes, its S256 challenge."""
    if len(random_bytes) < 32:
        raise ValueError("PKCE needs at least 32 random bytes")
    verifier = _b64url(random_bytes)
    return Pkce(verifier, _b64url(hashlib.sha256(verifier.encode("ascii")).digest()))


def state_of(random_bytes: bytes) -> str:
    return _b64url(random_bytes)


def supports_s256(as_metadata: JsonView) -> bool:
    """2025-11-25 basic/authorization, "Authorization Code Protection": without ``S256`` listed the client MUST
    refuse to go on (an absent list says nothing, so it is refused too)."""
    methods = as_metadata.get("code_challenge_methods_supported")
    return isinstance(methods, list) and "S256" in methods


def authorization_url(endpoint: str, client_id: str, redirect_uri: str, challenge: Pkce, state: str,
                      resource: str, scopes: Sequence[str]) -> str:
    """RFC 6749 §4.1.1 with PKCE (RFC 7636 §4.3) and the upstream as the resource (RFC 8707 §2)."""
    query = {"response_type": "code", "client_id": client_id, "redirect_uri": redirect_uri,
             "code_challenge": challenge.challenge, "code_challenge_method": "S256", "state": state,
             "resource": resource}
    if scopes:
        query["scope"] = " ".join(scopes)
    joiner = "&" if urlsplit(endpoint).query else "?"
    return f"{endpoint}{joiner}{urlencode(query)}"


def callback_code(query: str, state: str) -> str | tuple[str, str]:
    """The code a loopback callback carries (RFC 6749 §4.1.2), or ``(error, why)``: another state is a forged or
    stale callback (RFC 6749 §10.12), an ``error`` is the authorization server's refusal (§4.1.2.1)."""
    params = {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items() if v}
    if not params.get("state"):
        return ("invalid_state", "the callback carries no state")
    if params["state"] != state:
        return ("invalid_state", "the callback's state is not the one this login sent")
    if "error" in params:
        return (params["error"], params.get("error_description", "the authorization server refused"))
    code = params.get("code")
    return code if code else ("invalid_request", "the callback carries no code")


MAX_SAID_CHARS: Final = 200  # of the authorization server's error_description, quoted on the callback page


def callback_page(result: str | tuple[str, str], ended: bool) -> tuple[int, str]:
    """What the browser shows at the loopback callback (status, plain text): the login's outcome, or why this
    callback was not taken. A callback with a missing or other state is not this login's answer (RFC 6749
    §10.12): it is refused and the login goes on waiting for its own; one after the login ended changes nothing."""
    if isinstance(result, tuple) and result[0] == "invalid_state":
        return 400, (f"Not taken: {result[1]}. It is not the answer to the login this program started, which "
                     "still waits for its own.\n")
    if ended:
        return 409, "Not taken: this program's login has already ended. You can close this window.\n"
    if isinstance(result, str):
        return 200, "Logged in: you can close this window.\n"
    error, why = (part[:MAX_SAID_CHARS].replace("\n", " ") for part in result)
    return 400, (f"Login refused by the authorization server: {error} ({why}). Nothing was stored; "
                 "the program says so too. You can close this window.\n")


def scopes_to_ask(challenge_scope: str | None, scopes_supported: Sequence[str], configured: Sequence[str]) -> tuple[
        str, ...]:
    """2025-11-25 basic/authorization, "Scope Selection Strategy": configured scopes, else the challenge's
    ``scope``, else all the resource's metadata lists."""
    if configured:
        return tuple(configured)
    if challenge_scope:
        return tuple(challenge_scope.split())
    return tuple(scopes_supported)


def registration_request(redirect_uri: str, grant: LoginGrant) -> JsonObject:
    """RFC 7591 §2 for a public native client (RFC 8252 §8.4: no secret): loopback redirect URI, no client
    authentication at the token endpoint, the grants this login uses (refresh tokens included)."""
    grants = [DEVICE_CODE_GRANT] if grant is LoginGrant.DEVICE_CODE else ["authorization_code"]
    return {"client_name": CLIENT_NAME, "application_type": "native", "token_endpoint_auth_method": "none",
            "grant_types": [*grants, "refresh_token"],
            "response_types": ["code"] if grant is LoginGrant.AUTHORIZATION_CODE else [],
            "redirect_uris": [redirect_uri] if grant is LoginGrant.AUTHORIZATION_CODE else []}


def read_registration(doc: JsonView, redirect_uri: str | None) -> ClientRegistration | str:
    """RFC 7591 §3.2.1: the client id the server assigned (and a secret, if it insists on one)."""
    client_id, secret = doc.get("client_id"), doc.get("client_secret")
    if not isinstance(client_id, str) or not client_id:
        return "the registration answer holds no client_id"
    return ClientRegistration(client_id, redirect_uri, secret if isinstance(secret, str) and secret else None)


def code_form(code: str, redirect_uri: str, challenge: Pkce, client_id: str, resource: str) -> dict[str, str]:
    """RFC 6749 §4.1.3 with the verifier (RFC 7636 §4.5) and the resource again (RFC 8707 §2.2)."""
    return {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
            "code_verifier": challenge.verifier, "client_id": client_id, "resource": resource}


def refresh_form(refresh_token: str, client_id: str, resource: str) -> dict[str, str]:
    """RFC 6749 §6 with the resource (RFC 8707 §2.2: the new token is for the same audience)."""
    return {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": client_id,
            "resource": resource}


def device_form(client_id: str, resource: str, scopes: Sequence[str]) -> dict[str, str]:
    """RFC 8628 §3.1, with the resource (RFC 8707 §2)."""
    form = {"client_id": client_id, "resource": resource}
    if scopes:
        form["scope"] = " ".join(scopes)
    return form


def device_token_form(device_code: str, client_id: str, resource: str) -> dict[str, str]:
    """RFC 8628 §3.4."""
    return {"grant_type": DEVICE_CODE_GRANT, "device_code": device_code, "client_id": client_id,
            "resource": resource}


def read_device_authorization(doc: JsonView) -> DeviceAuthorization | str:
    """RFC 8628 §3.2; ``interval`` defaults to 5 seconds."""
    code, user, uri = doc.get("device_code"), doc.get("user_code"), doc.get("verification_uri")
    if not all(isinstance(v, str) and v for v in (code, user, uri)):
        return "the device authorization answer lacks device_code, user_code or verification_uri"
    assert isinstance(code, str) and isinstance(user, str) and isinstance(uri, str)
    complete = doc.get("verification_uri_complete")
    return DeviceAuthorization(code, user, uri, complete if isinstance(complete, str) else None,
                               _positive(doc.get("expires_in"), 600.0), _positive(doc.get("interval"),
                                                                                   DEFAULT_POLL_SECONDS))


def read_poll_error(doc: JsonView) -> Poll:
    """A device-code token request's 400 (RFC 8628 §3.5): wait, wait longer, or give up."""
    error = doc.get("error")
    return Poll.PENDING if error == Poll.PENDING.value else Poll.SLOW_DOWN if error == Poll.SLOW_DOWN.value \
        else Poll.FAILED


def _number(value: JsonValue) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _positive(value: JsonValue, default: float) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return default


def read_user_token(answer: JsonView, now: float, issuer: str, resource: str,
                    client: ClientRegistration | None, previous: StoredToken | None = None) -> StoredToken | str:
    """A token answer as the token to store; a refresh answer without a new refresh token keeps the old one
    (RFC 6749 §6: the server MAY issue a new one)."""
    issued = read_token_answer(answer, now)
    if isinstance(issued, str):
        return issued
    refresh = answer.get("refresh_token")
    if not (isinstance(refresh, str) and refresh):
        refresh = previous.refresh_token if previous is not None else None
    return StoredToken(issued, issuer, resource, refresh, client)


def refresh_due(token: StoredToken, now: float, margin_seconds: float) -> bool:
    """Refreshed ahead of expiry: ``margin_seconds`` before, or at half its life if it lives less than twice
    that (a short-lived token is still used, not refreshed for every call)."""
    life = token.issued.expires_at - token.issued.issued_at
    return now >= token.issued.expires_at - min(margin_seconds, life / 2)


def token_file_name(issuer: str, resource: str) -> str:
    """The file a token is kept in: per issuer and resource, named by digest (no URL characters in a path)."""
    return "token-" + hashlib.sha256(f"{issuer}\n{resource}".encode()).hexdigest()[:32] + ".json"


def client_file_name(issuer: str) -> str:
    """The registered client per issuer: a registration is reused by every resource of that issuer."""
    return "client-" + hashlib.sha256(issuer.encode()).hexdigest()[:32] + ".json"


def dump_client(client: ClientRegistration) -> JsonObject:
    doc: JsonObject = {"version": FILE_VERSION, "client_id": client.client_id}
    if client.redirect_uri:
        doc["redirect_uri"] = client.redirect_uri
    if client.client_secret:
        doc["client_secret"] = client.client_secret
    return doc


def load_client(doc: JsonValue) -> ClientRegistration | None:
    if not isinstance(doc, dict) or doc.get("version") != FILE_VERSION:
        return None
    redirect = doc.get("redirect_uri")
    found = read_registration(doc, redirect if isinstance(redirect, str) else None)
    return None if isinstance(found, str) else found


def dump_token(token: StoredToken) -> JsonObject:
    issued = token.issued
    doc: JsonObject = {"version": FILE_VERSION, "issuer": token.issuer, "resource": token.resource,
                           "access_token": issued.token, "token_type": "Bearer", "issued_at": issued.issued_at,
                           "expires_at": issued.expires_at}
    if issued.scope is not None:
        doc["scope"] = issued.scope
    if token.refresh_token:
        doc["refresh_token"] = token.refresh_token
    if token.client is not None:
        doc["client"] = dump_client(token.client)
    return doc


def load_token(doc: JsonValue, issuer: str, resource: str) -> StoredToken | None:
    """A stored token, only if it is well formed and for this issuer and resource (never another audience's)."""
    if not isinstance(doc, dict) or doc.get("version") != FILE_VERSION:
        return None
    if doc.get("issuer") != issuer or doc.get("resource") != resource:
        return None
    issued_at, expires_at = _number(doc.get("issued_at")), _number(doc.get("expires_at"))
    issued = read_token_answer({**doc, "expires_in": 1}, 0.0)
    if isinstance(issued, str) or issued_at is None or expires_at is None:
        return None
    issued = replace(issued, issued_at=issued_at, expires_at=expires_at)
    refresh = doc.get("refresh_token")
    return StoredToken(issued, issuer, resource, refresh if isinstance(refresh, str) and refresh else None,
                       load_client(doc.get("client")))


def parse_headers(lines: Iterable[str], origin: str) -> dict[str, str] | str:
    """``Name: value`` lines (a file's blank lines and ``#`` comments skipped) as headers, or why not: a name that
    is not an RFC 9110 token, a value with a control character, a reserved header, too many."""
    found: dict[str, str] = {}
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, colon, value = line.partition(":")
        name, value = name.strip(), value.strip()
        where = f"{origin} line {number}" if origin != "--header" else f"--header {line!r}"
        if not colon or not name or not all(c.isascii() and (c.isalnum() or c in "!#$%&'*+-.^_`|~") for c in name):
            return f"{where}: not 'Name: value'"
        if any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in value):
            return f"{where}: the value holds a control character"
        if name.lower() in RESERVED_HEADERS:
            return f"{where}: {name} is the gateway's to set"
        found[name] = value
        if len(found) > MAX_HEADERS:
            return f"more than {MAX_HEADERS} extra upstream headers"
    return found


def has_authorization(headers: Mapping[str, str]) -> bool:
    """A user-set ``Authorization`` header is the user's own static credential: no login runs."""
    return any(name.lower() == "authorization" for name in headers)


def resource_covers(resource: str, upstream_url: str) -> bool:
    """RFC 9728 §3.3 / RFC 8707 §2: the resource an upstream's metadata names must be the upstream itself (its
    URL, or a parent of it on the same origin); otherwise a login would get a token for someone else's server."""
    have, want = urlsplit(resource), urlsplit(upstream_url)
    if (have.scheme, have.netloc.lower()) != (want.scheme, want.netloc.lower()):
        return False
    prefix = have.path.rstrip("/")
    return want.path == prefix or want.path.startswith(prefix + "/") or not prefix


def can_open_browser(environ: Mapping[str, str], platform: str) -> bool:
    """Whether a browser can be shown: macOS and Windows have one; elsewhere only with a display or ``$BROWSER``."""
    if platform == "darwin" or platform.startswith("win"):
        return True
    return any(environ.get(name) for name in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER"))
