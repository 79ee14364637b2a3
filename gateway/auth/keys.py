"""One trusted authorization server's metadata and signing keys, fetched when first needed and cached.

The key set is refreshed when a token names a key it does not hold (the server rotated its keys), at most once
per ``min_refresh_seconds`` so that tokens naming made-up keys cannot make the gateway hammer the server, and it
keeps at most :data:`MAX_KEYS` keys whatever the server publishes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import aiohttp
from jwt import PyJWK, PyJWKError, PyJWTError

from adapters.authz import authorization_server_metadata_urls
from gateway.auth.fetch import AuthServerError, get_json

log = logging.getLogger("gateway.auth")
MAX_KEYS = 64


class Issuer:
    """An authorization server the gateway trusts: ``issuer`` as its tokens name it."""

    def __init__(self, issuer: str, http: Callable[[], aiohttp.ClientSession], clock: Callable[[], float], *,
                 jwks_uri: str | None = None, min_refresh_seconds: float = 30.0, timeout: float = 5.0) -> None:
        self.issuer, self._http, self._clock = issuer, http, clock
        self._jwks_uri, self._min_refresh, self._timeout = jwks_uri, min_refresh_seconds, timeout
        self._metadata: dict[str, Any] | None = None
        self._keys: dict[str | None, PyJWK] = {}
        self._fetched_at: float | None = None
        self._lock = asyncio.Lock()
        self.last_error: str | None = None

    async def metadata(self) -> dict[str, Any]:
        """RFC 8414 / OpenID metadata, from the first discovery URL that answers with this issuer's document."""
        if self._metadata is None:
            errors = []
            for url in authorization_server_metadata_urls(self.issuer):
                try:
                    doc = await get_json(self._http(), url, seconds=self._timeout)
                except AuthServerError as exc:
                    errors.append(str(exc))
                    continue
                if doc.get("issuer") != self.issuer:  # RFC 8414 §3.3: the document must name the same issuer
                    errors.append(f"{url}: names issuer {doc.get('issuer')!r}")
                    continue
                self._metadata = doc
                break
            else:
                raise AuthServerError(f"no metadata for issuer {self.issuer}: " + "; ".join(errors))
        return self._metadata

    async def jwks_uri(self) -> str:
        if self._jwks_uri is None:
            uri = (await self.metadata()).get("jwks_uri")
            if not isinstance(uri, str):
                raise AuthServerError(f"issuer {self.issuer} publishes no jwks_uri")
            self._jwks_uri = uri
        return self._jwks_uri

    async def key(self, kid: str | None) -> PyJWK | None:
        """The signing key ``kid`` names (a token without ``kid``: the only key, if there is one), fetching the key
        set first or again when the key is unknown; None when the server does not publish it."""
        found = self._lookup(kid)
        if found is not None:
            return found
        async with self._lock:
            found = self._lookup(kid)  # another request may have refreshed meanwhile
            if found is None and self._due():
                await self._refresh()
                found = self._lookup(kid)
        return found

    async def ensure(self) -> None:
        """Fetch the key set now if it was never fetched (start-up, /readyz)."""
        if self._fetched_at is None:
            async with self._lock:
                if self._fetched_at is None:
                    await self._refresh()

    def _lookup(self, kid: str | None) -> PyJWK | None:
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        return self._keys.get(kid)

    def _due(self) -> bool:
        return self._fetched_at is None or self._clock() - self._fetched_at >= self._min_refresh

    async def _refresh(self) -> None:
        try:
            doc = await get_json(self._http(), await self.jwks_uri(), seconds=self._timeout)
        except AuthServerError as exc:
            self.last_error = str(exc)
            if not self._keys:
                raise
            log.warning("keeping the cached keys of %s: %s", self.issuer, exc)
            return
        self._fetched_at = self._clock()
        self._keys = _signing_keys(doc)
        self.last_error = None


def _signing_keys(doc: dict[str, Any]) -> dict[str | None, PyJWK]:
    """The usable signature keys of a JWKS (RFC 7517 §5), by ``kid``; others are skipped, not fatal."""
    keys: dict[str | None, PyJWK] = {}
    entries = doc.get("keys")
    for entry in entries if isinstance(entries, list) else []:
        if len(keys) >= MAX_KEYS:
            break
        # Signature keys of asymmetric types only: a shared secret ("oct") has no place in a published key set.
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig" or entry.get("kty") == "oct":
            continue
        try:
            keys[entry.get("kid") if isinstance(entry.get("kid"), str) else None] = PyJWK(entry)
        except (PyJWTError, PyJWKError, ValueError, TypeError, KeyError):
            continue  # malformed, or a key type or curve this build cannot use
    return keys
