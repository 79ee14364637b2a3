"""The core as an OAuth 2.1 protected resource: JWT access tokens for its own URL only.

With ``[oauth]`` configured (:class:`modern_server.config.OAuthConfig`) every request needs a bearer JWT access token
(RFC 9068) that its trusted issuer signed with an asymmetric key, whose ``typ`` is ``at+jwt``, whose ``aud`` names
the core's own resource URL and which has not expired (2026-07-28 basic/authorization, "Token Validation" and
Security Considerations, "Access Token Privilege Restriction": a server MUST only accept tokens issued for itself).
Anything else is 401 with ``WWW-Authenticate: Bearer resource_metadata=...``; a token without a required scope
is 403 ``insufficient_scope``. The core serves its own RFC 9728 metadata naming the issuer.

The issuer's keys come from its RFC 8414 metadata (or ``jwks_uri``), fetched with a timeout and a size cap, and are
fetched again for an unknown ``kid`` at most once per ``MIN_REFRESH_SECONDS``. The claims of every accepted token
(``client_id``, ``sub``, ``aud``; never the token) are kept in a short ring so tests can see whom the core served.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import jwt

from modern_server.config import OAuthConfig

WELL_KNOWN = "/.well-known/oauth-protected-resource"
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
MAX_TOKEN_BYTES = 8192
MAX_BODY_BYTES = 512 << 10
MIN_REFRESH_SECONDS = 30.0
ACCEPTED_KEPT = 1000


class Refused(Exception):
    """A request the core does not serve: ``status`` 401 or 403 (or 503 when the keys cannot be had)."""

    def __init__(self, status: int, error: str | None, detail: str, scope: str | None = None) -> None:
        super().__init__(detail)
        self.status, self.error, self.scope = status, error, scope


@dataclass(frozen=True, slots=True)
class Accepted:
    """What the core saw of a token it accepted."""

    client_id: str | None
    sub: str
    aud: tuple[str, ...]
    scope: str
    exp: float


def metadata_path(resource: str) -> str:
    """RFC 9728 §3.1: the well-known segment goes between the host and the resource's path."""
    return WELL_KNOWN + urlsplit(resource).path.rstrip("/")


class Verifier:
    """Bearer header -> :class:`Accepted`, or :class:`Refused`."""

    def __init__(self, config: OAuthConfig, clock: Callable[[], float]) -> None:
        self.config, self._clock = config, clock
        self.accepted: deque[Accepted] = deque(maxlen=ACCEPTED_KEPT)
        self._keys: dict[str | None, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self._lock = asyncio.Lock()
        self._http: aiohttp.ClientSession | None = None

    def metadata(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"resource": self.config.resource, "authorization_servers": [self.config.issuer],
                               "bearer_methods_supported": ["header"]}
        if self.config.scopes_supported:
            doc["scopes_supported"] = list(self.config.scopes_supported)
        return doc

    def challenge(self, refused: Refused) -> str:
        parts = self.config.resource.split("://", 1)
        origin = parts[0] + "://" + parts[1].split("/", 1)[0]
        value = f'Bearer resource_metadata="{origin}{metadata_path(self.config.resource)}"'
        if refused.scope:
            value += f', scope="{refused.scope}"'
        if refused.error:
            value += f', error="{refused.error}"'
        return value

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    async def verify(self, authorization: str | None) -> Accepted:
        token = _bearer(authorization)
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Refused(401, "invalid_token", "not a JWT") from None
        if header.get("alg") not in ALGORITHMS:
            raise Refused(401, "invalid_token", "signing algorithm not accepted")
        if str(header.get("typ", "")).lower() not in ("at+jwt", "application/at+jwt"):
            raise Refused(401, "invalid_token", "not a JWT access token (typ at+jwt)")
        kid = header.get("kid")
        key = await self._key(kid if isinstance(kid, str) else None)
        accepted = self._decode(token, key, str(header["alg"]))
        self.accepted.append(accepted)
        return accepted

    def _decode(self, token: str, key: jwt.PyJWK, alg: str) -> Accepted:
        config = self.config
        try:
            claims = self._decode_at(token, key, alg)
        except jwt.ExpiredSignatureError:
            raise Refused(401, "invalid_token", "the token has expired") from None
        except jwt.InvalidAudienceError:
            raise Refused(401, "invalid_token", "the token was issued for another resource") from None
        except jwt.PyJWTError as exc:
            raise Refused(401, "invalid_token", f"the token does not verify ({type(exc).__name__})") from None
        scopes = str(claims.get("scope", "")).split()
        missing = [s for s in config.required_scopes if s not in scopes]
        if missing:
            raise Refused(403, "insufficient_scope", "the token lacks a required scope",
                          " ".join(sorted({*scopes, *config.required_scopes})))
        aud = claims["aud"]
        client = claims.get("client_id")
        return Accepted(client if isinstance(client, str) else None, str(claims["sub"]),
                        tuple(aud) if isinstance(aud, list) else (str(aud),), " ".join(scopes), float(claims["exp"]))

    def _decode_at(self, token: str, key: jwt.PyJWK, alg: str) -> dict[str, Any]:
        """PyJWT checks the signature, ``iss``, ``aud`` and ``nbf``; ``exp`` against this verifier's clock."""
        config = self.config
        claims: dict[str, Any] = jwt.decode(token, key, algorithms=[alg], audience=config.resource,
                                            issuer=config.issuer, leeway=config.leeway_seconds,
                                            options={"require": ["exp", "iss", "aud", "sub"], "verify_exp": False})
        exp = claims["exp"]
        if not isinstance(exp, int | float) or exp <= self._clock() - config.leeway_seconds:
            raise jwt.ExpiredSignatureError("expired")
        return claims

    async def _key(self, kid: str | None) -> jwt.PyJWK:
        if kid not in self._keys:
            async with self._lock:
                now = self._clock()
                if kid not in self._keys and (self._fetched_at is None
                                              or now - self._fetched_at >= MIN_REFRESH_SECONDS):
                    await self._fetch_keys()
                    self._fetched_at = now
        key = self._keys.get(kid) or (next(iter(self._keys.values())) if kid is None and self._keys else None)
        if key is None:
            raise Refused(401, "invalid_token", "the token is signed with a key its issuer does not publish")
        return key

    async def _fetch_keys(self) -> None:
        try:
            jwks_uri = self.config.jwks_uri or await self._discovered_jwks_uri()
            jwks = await self._get(jwks_uri)
            keys = {}
            for entry in jwks.get("keys", [])[:64]:
                try:
                    key = jwt.PyJWK(entry)
                except jwt.PyJWTError:
                    continue  # an unsupported key type (or a symmetric one) is not a signing key for us
                keys[entry.get("kid")] = key
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise Refused(503, None, f"the issuer's keys cannot be had: {exc}") from None
        self._keys = keys

    async def _discovered_jwks_uri(self) -> str:
        """RFC 8414 §3 first, then OpenID Connect Discovery."""
        parts = urlsplit(self.config.issuer)
        origin, path = f"{parts.scheme}://{parts.netloc}", parts.path.rstrip("/")
        for url in (f"{origin}/.well-known/oauth-authorization-server{path}",
                    f"{origin}{path}/.well-known/openid-configuration"):
            try:
                found = (await self._get(url)).get("jwks_uri")
            except ValueError:
                continue
            if isinstance(found, str):
                return found
        raise ValueError(f"{self.config.issuer} publishes no jwks_uri")

    async def _get(self, url: str) -> dict[str, Any]:
        if self._http is None:
            self._http = aiohttp.ClientSession()
        async with self._http.get(url, allow_redirects=False, timeout=aiohttp.ClientTimeout(total=5)) as resp:
            body = await resp.content.read(MAX_BODY_BYTES + 1)
            if resp.status != 200 or len(body) > MAX_BODY_BYTES:
                raise ValueError(f"{url}: HTTP {resp.status}")
        value = json.loads(body)
        if not isinstance(value, dict):
            raise ValueError(f"{url}: not a JSON object")
        return value


def _bearer(authorization: str | None) -> str:
    if not authorization:
        raise Refused(401, None, "this server requires an access token")
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN_BYTES or not token.isascii():
        raise Refused(401, "invalid_token", "expected 'Authorization: Bearer <access token>'")
    return token
