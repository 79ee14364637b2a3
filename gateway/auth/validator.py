"""Access-token verification for the gateway's doors: a JOSE library checks signatures, ``adapters.authz`` the
rest, and a verified token is remembered by its digest until it expires.

JWT access tokens (RFC 9068) are verified against their issuer's published keys (``gateway.auth.keys``); opaque
tokens are asked about at the introspection endpoint (RFC 7662) when one is configured. The cache holds digests
and principals, never a token (2025-11-25 basic/authorization "Token Handling"), and is bounded; a refusal is not
cached, so a token that failed while the keys could not be had works once they can.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import jwt

from adapters.authz import (
    SIGNING_ALGORITHMS,
    Cause,
    Failure,
    Principal,
    ResourceServer,
    bearer_token,
    check_header,
    looks_like_jwt,
    principal_of_claims,
    require_scopes,
    scopes_of,
)
from gateway.auth.fetch import AuthServerError, LazySession, get_json
from gateway.auth.keys import Issuer


@dataclass(frozen=True, slots=True)
class Introspection:
    """RFC 7662: where to ask about an opaque token, and the gateway's own client credentials for asking."""

    endpoint: str
    client_id: str
    client_secret: str
    cache_seconds: float = 60.0  # a revoked opaque token is still accepted this long at most


@dataclass(frozen=True, slots=True)
class AuthSettings:
    server: ResourceServer
    audiences: tuple[str, ...]  # every door's resource: a door's token is relayed to /mcp unchanged
    leeway_seconds: float = 30.0
    cache_entries: int = 10_000
    min_key_refresh_seconds: float = 30.0
    fetch_timeout_seconds: float = 5.0
    jwks_uri: str | None = None  # only with one issuer: its keys' URL, not discovered
    introspection: Introspection | None = None


class TokenValidator:
    """``authenticate(Authorization header) -> Principal | Failure`` for one protected resource."""

    def __init__(self, settings: AuthSettings, clock: Callable[[], float] = time.time) -> None:
        self.settings, self._clock = settings, clock
        self.http = LazySession()
        self.issuers = {iss: Issuer(iss, self.http, clock, jwks_uri=settings.jwks_uri,
                                    min_refresh_seconds=settings.min_key_refresh_seconds,
                                    timeout=settings.fetch_timeout_seconds)
                        for iss in settings.server.authorization_servers}
        # header digest -> (principal, its insufficient_scope refusal or None); never a token
        self._verified: OrderedDict[bytes, tuple[Principal, Failure | None]] = OrderedDict()

    @property
    def server(self) -> ResourceServer:
        return self.settings.server

    async def close(self) -> None:
        await self.http.close()

    async def keys_failure(self) -> str | None:
        """Why some trusted issuer's signing keys cannot be had (readiness), or None: each is fetched once if it
        never was; keys already held keep serving while a refresh fails."""
        for issuer in self.issuers.values():
            try:
                await issuer.ensure()
            except AuthServerError as exc:
                return str(exc)
        return None

    async def authenticate(self, authorization: str | None) -> Principal | Failure:
        # The steady state, a client reusing its token, costs a digest and a lookup: the header is digested
        # whole (a well-formed one is ASCII), so a hit needs no parsing, and its scope check is remembered too.
        digest = _digest(authorization)
        known = self._cached(digest) if digest is not None else None
        if known is not None:
            return known[1] or known[0]
        token = bearer_token(authorization)
        if isinstance(token, Failure):
            return token
        outcome = await self._verify(token)
        if isinstance(outcome, Failure):
            return outcome
        scoped = require_scopes(outcome, self.server.required_scopes)
        if digest is not None:
            self._remember(digest, (outcome, scoped))
        return scoped or outcome

    def _cached(self, digest: bytes) -> tuple[Principal, Failure | None] | None:
        known = self._verified.get(digest)
        if known is None:
            return None
        expires = known[0].expires_at
        if expires is not None and expires <= self._clock():
            del self._verified[digest]
            return None
        self._verified.move_to_end(digest)
        return known

    def _remember(self, digest: bytes, known: tuple[Principal, Failure | None]) -> None:
        self._verified[digest] = known
        while len(self._verified) > self.settings.cache_entries:
            self._verified.popitem(last=False)

    async def _verify(self, token: str) -> Principal | Failure:
        if looks_like_jwt(token):
            return await self._verify_jwt(token)
        if self.settings.introspection is None:
            return Failure(Cause.MALFORMED, "the access token is not a JWT, and no introspection is configured")
        return await self._introspect(token, self.settings.introspection)

    async def _verify_jwt(self, token: str) -> Principal | Failure:
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            return Failure(Cause.MALFORMED, "the access token is not a well-formed JWT")
        refused = check_header(header)
        if refused is not None:
            return refused
        iss = unverified.get("iss")
        issuer = self.issuers.get(iss) if isinstance(iss, str) else None
        if issuer is None:
            return Failure(Cause.WRONG_ISSUER, "the token's issuer is not an authorization server this gateway trusts")
        kid = header.get("kid")
        try:
            key = await issuer.key(kid if isinstance(kid, str) else None)
        except AuthServerError as exc:
            return Failure(Cause.UNAVAILABLE, f"the authorization server's keys cannot be had: {exc}")
        if key is None:
            return Failure(Cause.INVALID, "the token is signed with a key its issuer does not publish")
        return self._decode(token, key, header["alg"], issuer.issuer)

    def _decode(self, token: str, key: jwt.PyJWK, alg: str, issuer: str) -> Principal | Failure:
        try:
            claims = jwt.decode(token, key, algorithms=[alg], audience=list(self.settings.audiences), issuer=issuer,
                                leeway=self.settings.leeway_seconds,
                                options={"require": ["exp", "iss", "aud", "sub"]})
        except jwt.ExpiredSignatureError:
            return Failure(Cause.EXPIRED, "the access token has expired")
        except jwt.ImmatureSignatureError:
            return Failure(Cause.EXPIRED, "the access token is not valid yet")
        except jwt.InvalidAudienceError:
            return Failure(Cause.WRONG_AUDIENCE, "the access token was issued for another resource")
        except jwt.InvalidIssuerError:
            return Failure(Cause.WRONG_ISSUER, "the access token names another issuer")
        except jwt.MissingRequiredClaimError as exc:
            return Failure(Cause.INVALID, f"the access token has no {exc.claim} claim")
        except jwt.PyJWTError:
            return Failure(Cause.INVALID, "the access token's signature does not verify")
        return principal_of_claims(claims)

    async def _introspect(self, token: str, intro: Introspection) -> Principal | Failure:
        """RFC 7662 §2: ``active`` false is a refusal; an active token must still name this resource."""
        try:
            answer = await get_json(self.http(), intro.endpoint, data={"token": token},
                                    basic=(intro.client_id, intro.client_secret),
                                    seconds=self.settings.fetch_timeout_seconds)
        except AuthServerError as exc:
            return Failure(Cause.UNAVAILABLE, f"the introspection endpoint cannot be had: {exc}")
        if answer.get("active") is not True:
            return Failure(Cause.INVALID, "the access token is not active")
        aud = answer.get("aud")
        audiences = {aud} if isinstance(aud, str) else set(aud) if isinstance(aud, list) else set()
        if not audiences & set(self.settings.audiences):
            return Failure(Cause.WRONG_AUDIENCE, "the access token was issued for another resource")
        if answer.get("iss", self.server.authorization_servers[0]) not in self.issuers:
            return Failure(Cause.WRONG_ISSUER, "the token's issuer is not an authorization server this gateway trusts")
        return self._introspected(answer, intro)

    def _introspected(self, answer: dict[str, object], intro: Introspection) -> Principal | Failure:
        now = self._clock()
        exp = answer.get("exp")
        if isinstance(exp, int | float) and not isinstance(exp, bool) and exp <= now:
            return Failure(Cause.EXPIRED, "the access token has expired")
        # RFC 7662 §2.2: sub is optional; a client-credentials token speaks for its client, so that names it.
        claims = {"iss": answer.get("iss", self.server.authorization_servers[0]),
                  "sub": answer.get("sub") or answer.get("client_id"),
                  "client_id": answer.get("client_id"), "scope": answer.get("scope")}
        principal = principal_of_claims(claims)
        if isinstance(principal, Failure):
            return principal
        until = now + intro.cache_seconds
        if isinstance(exp, int | float) and not isinstance(exp, bool):
            until = min(until, float(exp))
        return Principal(principal.issuer, principal.subject, principal.client_id, scopes_of(claims), until)


def _digest(authorization: str | None) -> bytes | None:
    """The cache key of an ``Authorization`` value: its SHA-256, or None for one that cannot be a bearer token
    (absent or not ASCII: RFC 6750 §2.1's b64token is ASCII), which takes the checking path and is refused."""
    if authorization is None or not authorization.isascii():
        return None
    return hashlib.sha256(authorization.encode("ascii")).digest()


__all__ = ["SIGNING_ALGORITHMS", "AuthSettings", "Introspection", "TokenValidator"]
