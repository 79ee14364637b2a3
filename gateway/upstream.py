"""The upstream client: one ``aiohttp.ClientSession`` (connection reuse) that POSTs the bodies built by
``adapters.upstream`` and reads JSON or SSE answers.

Every failure mode — refused, timeout, HTTP 5xx, a 4xx without a JSON-RPC error body, non-JSON, a stream that
ends without the response — becomes an :class:`UpstreamFailure` carrying an ``ErrorValue`` for the original
request; an upstream HTTP 400/404 *with* a JSON-RPC error body is returned as that error, never as a status
(DIGEST §4.2). Closing the response is the 2026 cancel (DIGEST §4.10): cancelling :meth:`call` does exactly that.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp

from adapters.errors import ErrorValue, upstream_failure
from adapters.sse import SseDecoder
from adapters.upstream import UpstreamCall

Notify = Callable[[dict[str, Any]], None]


class UpstreamFailure(Exception):
    def __init__(self, error: ErrorValue) -> None:
        super().__init__(error.message)
        self.error = error


class UpstreamClient:
    def __init__(self, url: str, *, connect_timeout: float, read_timeout: float,
                 tap: Callable[[str, Any], None] | None = None, auth: str = "forward",
                 credential: str | None = None, max_connections: int = 100) -> None:
        self.url = url
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=read_timeout)
        self._session: aiohttp.ClientSession | None = None
        self._tap = tap
        # gateway.pins: "forward" (shared audience), "gateway" (our own credential) or "none".
        self._auth, self._credential, self._limit = auth, credential, max_connections

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._limit)
            # No cookie jar: one client serves every session and principal, so a cookie an upstream set for
            # one would be sent for all (and the jar's per-request bookkeeping was measurable in the profile).
            self._session = aiohttp.ClientSession(timeout=self._timeout, connector=connector,
                                                  cookie_jar=aiohttp.DummyCookieJar())
        return self._session

    def authorize(self, headers: dict[str, str]) -> dict[str, str]:
        """The headers with the Authorization this upstream may see (no token passthrough across audiences)."""
        if self._auth == "forward":
            return headers
        out = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        if self._auth == "gateway" and self._credential:
            out["Authorization"] = f"Bearer {self._credential}"
        return out

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def call(self, call: UpstreamCall, on_notification: Notify) -> tuple[str, dict[str, Any]]:
        """``("result", result)`` or ``("error", error)`` for the request; notifications go to the callback."""
        async for message in self.messages(call):
            if "method" in message and "id" not in message:
                on_notification(message)
                continue
            if isinstance(message.get("error"), dict) and message.get("id") in (None, call.body.get("id")):
                return "error", message["error"]  # id null: rejected before the id was read (still ours)
            if message.get("id") != call.body.get("id"):
                continue
            if "result" in message:
                return "result", message["result"]
            raise UpstreamFailure(upstream_failure("invalid_response", "a response with neither result nor error"))
        raise UpstreamFailure(upstream_failure("stream_broken", "the upstream stream ended without a response"))

    async def messages(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any]]:
        """Every JSON-RPC message the upstream sends for one POST (one for JSON, many for SSE)."""
        if self._tap is not None:
            self._tap("upstream", call.body)
        try:
            async with self.session.post(self.url, json=call.body, headers=self.authorize(call.headers)) as resp:
                kind = resp.content_type
                if resp.status >= 500:
                    raise UpstreamFailure(upstream_failure("http_5xx", f"HTTP {resp.status}"))
                if kind == "text/event-stream" and resp.status == 200:
                    async for message in _sse_messages(resp):
                        yield message
                    return
                yield await _json_message(resp)
        except aiohttp.ClientConnectorError as exc:
            raise UpstreamFailure(upstream_failure("unreachable", str(exc))) from exc
        except TimeoutError as exc:
            raise UpstreamFailure(upstream_failure("timeout", "no answer in time")) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamFailure(upstream_failure("stream_broken", type(exc).__name__)) from exc


async def _json_message(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    raw = await resp.read()
    try:
        message = json.loads(raw)
    except ValueError:
        message = None
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        kind = "http_status" if resp.status >= 400 else "non_json"
        raise UpstreamFailure(upstream_failure(kind, f"HTTP {resp.status} without a JSON-RPC body"))
    if resp.status >= 400 and not isinstance(message.get("error"), dict):
        raise UpstreamFailure(upstream_failure("http_status", f"HTTP {resp.status}"))
    return message


async def _sse_messages(resp: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    decoder = SseDecoder()
    async for chunk in resp.content.iter_any():
        for data in decoder.feed(chunk):
            if not data:
                continue  # priming / empty events
            try:
                message = json.loads(data)
            except ValueError as exc:
                raise UpstreamFailure(upstream_failure("non_json", "an SSE event was not JSON")) from exc
            if isinstance(message, dict):
                yield message
