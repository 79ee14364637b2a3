"""The gateway as an OAuth 2.1 protected resource: the rules, without the I/O.

What this module owns (2025-11-25 and 2026-07-28 basic/authorization; RFC 9728, RFC 6750, RFC 9068):

- the protected-resource metadata document each door serves, and where it is served;
- reading a bearer credential out of an ``Authorization`` header, with its bounds;
- the checks a verified JWT's header and claims must still pass after the signature (which the shell leaves to a
  JOSE library): the access-token type, the algorithm family, the scopes;
- the principal a session is bound to: the token's issuer, subject and client, never the token itself;
- every refusal as a :class:`Failure` with its cause, and the one place that turns a cause into a ``401``, ``403``
  or ``503`` with its ``WWW-Authenticate`` challenge.

The shell (``gateway.auth``) fetches keys, verifies signatures, reads the clock and caches; it decides nothing.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Final
from urllib.parse import urlsplit

from adapters.errors import AuthChallenge, ErrorValue, Reason, Rejection, reject
from adapters.jsonwire import JsonObject, JsonView

WELL_KNOWN: Final = "/.well-known/oauth-protected-resource"
# Every principal a verified access token names starts so; classification makes none of its own that do.
PRINCIPAL_PREFIX: Final = "oauth:"
# A JWT access token is a few hundred bytes to a few KiB; a longer one is refused before any parse.
MAX_TOKEN_BYTES: Final = 8000  # under aiohttp's 8190-byte header field limit, so it is ours to refuse
# RFC 6750 §2.1: b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=" (checked in C: every
# request pays for it).
_B64TOKEN: Final = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
# RFC 9068 §4: a resource server MUST check that a JWT access token's "typ" is "at+jwt" (an ID token, or any other
# JWT the same issuer signed, is not an access token).
ACCESS_TOKEN_TYPES: Final = frozenset({"at+jwt", "application/at+jwt"})
# Asymmetric algorithms only: a resource server never shares a secret with the authorization server, so "none"
# and the HMAC family (algorithm confusion with a public key used as a secret) are refused before verification.
SIGNING_ALGORITHMS: Final = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512",
                             "EdDSA")


class Cause(Enum):
    """Why a request was not authorized; telemetry counts refusals by it."""

    NO_TOKEN = "no_token"
    MALFORMED = "malformed"  # not a bearer credential, too large, not a JWT we accept
    INVALID = "invalid"  # bad signature, unknown key, wrong type or algorithm, revoked (introspection)
    EXPIRED = "expired"  # exp passed, or nbf / iat in the future beyond the leeway
    WRONG_AUDIENCE = "wrong_audience"  # issued for another resource (RFC 8707): never accepted here
    WRONG_ISSUER = "wrong_issuer"
    INSUFFICIENT_SCOPE = "insufficient_scope"
    UNAVAILABLE = "unavailable"  # the keys or the introspection endpoint could not be had


@dataclass(frozen=True, slots=True)
class Failure:
    """A refused credential: its cause, a short reason for the operator's log and the client's error, and for
    :attr:`Cause.INSUFFICIENT_SCOPE` the scopes to step up to."""

    cause: Cause
    detail: str
    scopes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ResourceServer:
    """What the gateway says of itself as a protected resource: ``resource`` is the door's public URL (its
    audience), ``authorization_servers`` the issuers it trusts, ``required_scopes`` what every request needs."""

    resource: str
    authorization_servers: tuple[str, ...]
    scopes_supported: tuple[str, ...] = ()
    required_scopes: tuple[str, ...] = ()
    resource_name: str | None = None


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a verified token speaks for. Sessions are bound to :attr:`key`: a refreshed token of the same issuer,
    subject and client keeps its session; a token is never kept."""

    issuer: str
    subject: str
    client_id: str | None
    scopes: frozenset[str]
    expires_at: float | None  # seconds since the epoch; a cached verification lasts no longer
    key: str = field(init=False, compare=False)  # computed once: every request of the principal reads it

    def __post_init__(self) -> None:
        ident = "\0".join((self.issuer, self.subject, self.client_id or ""))
        object.__setattr__(self, "key", PRINCIPAL_PREFIX + hashlib.sha256(ident.encode("utf-8")).hexdigest()[:32])


def metadata_path(resource: str) -> str:
    """Where a resource's metadata lives (RFC 9728 §3.1: the well-known segment goes between the host and the
    resource's path, so ``https://h/mcp`` is described at ``https://h/.well-known/oauth-protected-resource/mcp``)."""
    path = urlsplit(resource).path.rstrip("/")
    return WELL_KNOWN + path


def metadata_url(resource: str) -> str:
    parts = urlsplit(resource)
    return f"{parts.scheme}://{parts.netloc}{metadata_path(resource)}"


def authorization_server_metadata_urls(issuer: str) -> tuple[str, ...]:
    """Where an issuer's metadata may be, in the order 2025-11-25 basic/authorization ("Authorization Server
    Metadata Discovery") tries them: RFC 8414 and OpenID Connect Discovery, path inserted, then OpenID appended."""
    parts = urlsplit(issuer)
    origin, path = f"{parts.scheme}://{parts.netloc}", parts.path.rstrip("/")
    if not path:
        return (f"{origin}/.well-known/oauth-authorization-server", f"{origin}/.well-known/openid-configuration")
    return (f"{origin}/.well-known/oauth-authorization-server{path}",
            f"{origin}/.well-known/openid-configuration{path}", f"{origin}{path}/.well-known/openid-configuration")


def metadata(server: ResourceServer) -> JsonObject:
    """The RFC 9728 §2 document (2025-11-25 basic/authorization, "Authorization Server Discovery")."""
    doc: JsonObject = {"resource": server.resource,
                           "authorization_servers": list(server.authorization_servers),
                           "bearer_methods_supported": ["header"]}
    if server.scopes_supported:
        doc["scopes_supported"] = list(server.scopes_supported)
    if server.resource_name:
        doc["resource_name"] = server.resource_name
    return doc


def bearer_token(authorization: str | None) -> str | Failure:
    """The token of an ``Authorization: Bearer`` header (RFC 6750 §2.1; only the header: 2025-11-25
    basic/authorization "Token Requirements" forbids tokens in the query string)."""
    if authorization is None or not authorization.strip():
        return Failure(Cause.NO_TOKEN, "no access token")
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return Failure(Cause.MALFORMED, "the Authorization header is not a Bearer token")
    if len(token) > MAX_TOKEN_BYTES:
        return Failure(Cause.MALFORMED, f"the access token is longer than {MAX_TOKEN_BYTES} bytes")
    if _B64TOKEN.fullmatch(token) is None:
        return Failure(Cause.MALFORMED, "the access token holds characters a bearer token cannot")
    return token


def looks_like_jwt(token: str) -> bool:
    """Three dot-separated parts: verified as a JWT; anything else is opaque (introspected, when configured)."""
    return token.count(".") == 2


def check_header(header: Mapping[str, object]) -> Failure | None:
    """The JOSE header before any key is looked up: an accepted algorithm and the access-token type."""
    alg = header.get("alg")
    if alg not in SIGNING_ALGORITHMS:
        return Failure(Cause.INVALID, f"signing algorithm {alg!r} is not accepted")
    typ = header.get("typ")
    if not isinstance(typ, str) or typ.lower() not in ACCESS_TOKEN_TYPES:
        return Failure(Cause.INVALID, "the token is not a JWT access token (typ at+jwt, RFC 9068)")
    return None


def scopes_of(claims: Mapping[str, object]) -> frozenset[str]:
    """RFC 9068 §2.2.3 ``scope`` (space-separated), or the ``scp`` list some servers send instead."""
    scope = claims.get("scope")
    if isinstance(scope, str):
        return frozenset(scope.split())
    scp = claims.get("scp")
    if isinstance(scp, list):
        return frozenset(s for s in scp if isinstance(s, str))
    return frozenset()


def principal_of_claims(claims: Mapping[str, object]) -> Principal | Failure:
    """The principal of verified claims (issuer and audience already checked by the verifier)."""
    issuer, subject = claims.get("iss"), claims.get("sub")
    if not isinstance(issuer, str) or not isinstance(subject, str) or not subject:
        return Failure(Cause.INVALID, "the token names no issuer or subject")
    client = claims.get("client_id")
    exp = claims.get("exp")
    expires = float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None
    return Principal(issuer, subject, client if isinstance(client, str) else None, scopes_of(claims), expires)


def require_scopes(principal: Principal, needed: Sequence[str]) -> Failure | None:
    """``insufficient_scope`` naming every scope to ask for (the token's and the missing ones: 2025-11-25
    basic/authorization "Scope Challenge Handling" lets the client request the union)."""
    missing = [s for s in needed if s not in principal.scopes]
    if not missing:
        return None
    wanted = tuple(sorted(principal.scopes | set(needed)))
    return Failure(Cause.INSUFFICIENT_SCOPE, f"the token lacks scope {' '.join(missing)}", wanted)


_STATUS: Final[Mapping[Cause, Reason]] = {
    Cause.NO_TOKEN: Reason.UNAUTHORIZED, Cause.MALFORMED: Reason.UNAUTHORIZED, Cause.INVALID: Reason.UNAUTHORIZED,
    Cause.EXPIRED: Reason.UNAUTHORIZED, Cause.WRONG_AUDIENCE: Reason.UNAUTHORIZED,
    Cause.WRONG_ISSUER: Reason.UNAUTHORIZED, Cause.INSUFFICIENT_SCOPE: Reason.INSUFFICIENT_SCOPE,
    Cause.UNAVAILABLE: Reason.AUTHORIZATION_UNAVAILABLE,
}


def challenge(server: ResourceServer, failure: Failure) -> str | None:
    """The ``WWW-Authenticate`` value (RFC 6750 §3, RFC 9728 §5.1): where the metadata is, the scope to ask
    for, and ``error`` when a token was sent. None for an outage: no challenge, the client retries later."""
    if failure.cause is Cause.UNAVAILABLE:
        return None
    parts = [f'resource_metadata="{metadata_url(server.resource)}"']
    scope = failure.scopes or server.required_scopes
    if scope:
        parts.append(f'scope="{" ".join(scope)}"')
    if failure.cause is Cause.INSUFFICIENT_SCOPE:
        parts.append('error="insufficient_scope"')
    elif failure.cause is not Cause.NO_TOKEN:
        parts.append('error="invalid_token"')
        parts.append(f'error_description="{_quotable(failure.detail)}"')
    return "Bearer " + ", ".join(parts)


def refusal(server: ResourceServer, failure: Failure, ident: object = None) -> Rejection:
    """The HTTP answer to a refused credential: 401 (authorize again), 403 (step up) or 503 (try later), with
    a JSON-RPC error whose ``data.authorization`` names the cause."""
    base = reject(_STATUS[failure.cause], failure.detail, ident)
    header = challenge(server, failure)
    error = ErrorValue(base.error.code, base.error.message, {"authorization": failure.cause.value},
                       challenge=AuthChallenge(base.reason, (header,)) if header else None)
    return Rejection(base.reason, base.status, error, base.ident)


def _quotable(text: str) -> str:
    """RFC 6750 §3: error_description is printable ASCII without the quote and backslash."""
    return "".join(c for c in text if 0x20 <= ord(c) <= 0x7E and c not in '"\\')


@dataclass(frozen=True, slots=True)
class UpstreamProtection:
    """What an upstream's 401 and its RFC 9728 metadata say: the resource (the audience its tokens must name),
    the authorization servers it trusts, the scopes it knows."""

    resource: str
    authorization_servers: tuple[str, ...]
    scopes_supported: tuple[str, ...] = ()


def challenge_params(challenge: str) -> tuple[str, dict[str, str]]:
    """A ``WWW-Authenticate`` challenge's scheme and auth-params (RFC 9110 §11.2: ``token`` or quoted-string
    values, commas between), lower-cased names; a malformed rest is ignored, never raised on."""
    scheme, _, rest = challenge.strip().partition(" ")
    params: dict[str, str] = {}
    i, n = 0, len(rest)
    while i < n:
        eq = rest.find("=", i)
        if eq < 0:
            break
        name = rest[i:eq].strip(" ,").lower()
        value, i = _param_value(rest, eq + 1)
        if name:
            params[name] = value
    return scheme.lower(), params


def _param_value(text: str, i: int) -> tuple[str, int]:
    """One value from ``text[i:]`` and where the next parameter starts."""
    while i < len(text) and text[i] == " ":
        i += 1
    if i < len(text) and text[i] == '"':
        out, i = [], i + 1
        while i < len(text) and text[i] != '"':
            if text[i] == "\\" and i + 1 < len(text):
                i += 1
            out.append(text[i])
            i += 1
        end = text.find(",", i)
        return "".join(out), len(text) if end < 0 else end + 1
    end = text.find(",", i)
    end = len(text) if end < 0 else end
    return text[i:end].strip(), end + 1


def resource_metadata_location(challenges: Sequence[str], upstream_url: str) -> str:
    """Where an upstream's protected-resource metadata is: its Bearer challenge's ``resource_metadata``, else the
    well-known URL its own URL gives (2025-11-25 basic/authorization "Protected Resource Metadata Discovery")."""
    for challenge in challenges:
        scheme, params = challenge_params(challenge)
        if scheme == "bearer" and params.get("resource_metadata", "").startswith(("https://", "http://")):
            return params["resource_metadata"]
    return metadata_url(upstream_url)


def read_protection(doc: JsonView) -> UpstreamProtection | str:
    """The upstream's metadata document as an :class:`UpstreamProtection`, or why it cannot be used."""
    resource, servers = doc.get("resource"), doc.get("authorization_servers")
    if not isinstance(resource, str) or not resource.startswith(("https://", "http://")):
        return "its protected-resource metadata names no resource URL"
    if not isinstance(servers, list) or not servers or not all(
            isinstance(s, str) and s.startswith(("https://", "http://")) for s in servers):
        return "its protected-resource metadata names no authorization server"
    scopes = doc.get("scopes_supported")
    known = tuple(s for s in scopes if isinstance(s, str)) if isinstance(scopes, list) else ()
    return UpstreamProtection(resource, tuple(s for s in servers if isinstance(s, str)), known)
