"""The upstream transport seam: what :class:`gateway.upstream.client.UpstreamClient` needs from an HTTP client.

The default is :class:`gateway.upstream.h1.H1Pool`
(docs/design/upstream.md#the-upstream-hops-http-client-is-gatewayupstreamh1 says why it is not aiohttp's client). Any
object with these methods can stand in: another pool (HTTP/2, a proxy-aware one), or a test's in-memory fake that
answers without sockets. Errors follow :mod:`gateway.upstream.h1`'s: ``Unreachable`` (and ``PoolBusy``),
``BrokenResponse`` (and ``TooLarge``), ``TimeoutError``, ``ValueError`` for a header that would break the framing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Protocol


class Response(Protocol):
    """A response whose status line and headers have arrived; leaving it (``async with``) releases it."""

    status: int
    headers: dict[str, str]  # lower-cased names; a repeated header's values comma-joined

    @property
    def content_type(self) -> str: ...
    def getall(self, name: str) -> tuple[str, ...]: ...
    def chunks(self) -> AsyncIterator[bytes]: ...
    async def read(self) -> bytes: ...
    def release(self) -> None: ...
    def discard(self) -> None: ...
    async def __aenter__(self) -> Response: ...
    async def __aexit__(self, *exc: object) -> None: ...


class Transport(Protocol):
    async def post(self, body: bytes, headers: Mapping[str, str], *, stream: bool = False) -> Response:
        """Send one POST to the upstream's URL; ``stream``: the answer stays open for long (a listen)."""
        ...

    async def close(self) -> None: ...
