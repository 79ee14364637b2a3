"""Bounded JSON fetches from an authorization server: metadata, keys, introspection.

An authorization server is trusted for what it signs, not for how it answers: every fetch has a total timeout,
a body cap, no redirects (a metadata or key URL that moves is a misconfiguration, not something to follow to
another host), and fails as :class:`AuthServerError`, which the validator turns into a 503, never a 500.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from adapters.jsonwire import loads
from gateway.errors import AuthError

MAX_BODY_BYTES = 512 << 10  # a JWKS or a metadata document is a few KiB


class LazySession:
    """One aiohttp client session for an owner's fetches, made on first use (inside the serving loop, not when
    the owner is built) and made again if it was closed; ``await close()`` when the owner ends."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    def __call__(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


class AuthServerError(AuthError):
    """An authorization server (or its key set) could not be read; the message says which URL and why."""


async def get_json(http: aiohttp.ClientSession, url: str, *, data: dict[str, str] | None = None,
                   basic: tuple[str, str] | None = None, seconds: float = 5.0) -> dict[str, Any]:
    """GET (or, with ``data``, a form POST) ``url`` and its JSON object; anything else is AuthServerError."""
    method = "POST" if data is not None else "GET"
    headers = {"Accept": "application/json"}
    if basic is not None:  # client authentication, RFC 6749 §2.3.1
        headers["Authorization"] = aiohttp.encode_basic_auth(*basic)
    try:
        async with http.request(method, url, data=data, headers=headers, allow_redirects=False,
                                timeout=aiohttp.ClientTimeout(total=seconds)) as resp:
            if resp.status != 200:
                raise AuthServerError(f"{url}: HTTP {resp.status}")
            body = await resp.content.read(MAX_BODY_BYTES + 1)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise AuthServerError(f"{url}: {type(exc).__name__} {exc}".rstrip()) from None
    if len(body) > MAX_BODY_BYTES:
        raise AuthServerError(f"{url}: answer larger than {MAX_BODY_BYTES} bytes")
    try:
        value = loads(body)
    except ValueError:
        raise AuthServerError(f"{url}: not JSON") from None
    if not isinstance(value, dict):
        raise AuthServerError(f"{url}: not a JSON object")
    return value
