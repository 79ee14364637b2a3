"""The upstream client: one keep-alive connection pool (:mod:`gateway.upstream.h1`) per upstream that POSTs the bodies
built by ``adapters.upstream`` and reads JSON or SSE answers.

Every failure mode — refused, timeout, HTTP 5xx, a 401/403 (``adapters.errors.token_refused``), another 4xx
without a JSON-RPC error body, non-JSON, a stream that ends without the response — becomes an
:class:`UpstreamFailure` carrying an ``ErrorValue`` for the original request; an upstream HTTP 400/404 *with* a
JSON-RPC error body is returned as that error, never as a status
(docs/design/errors.md#json-rpc-errors-are-never-http-statuses-on-the-legacy-side). Closing the response is the
2026 cancel (2026-07-28 basic/patterns §Cancellation): cancelling :meth:`call` does exactly that.

A ``subscriptions/listen`` (ours or a modern client's, told by its ``Mcp-Method`` header) stays open as long as
its subscriber: it takes a slot of the pool's stream limit, never one of the request limit (:mod:`gateway.upstream.h1`).
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from adapters.bridge import UpstreamError, UpstreamResult
from adapters.credentials import Grant, Refusal, after_refusal, step_up
from adapters.errors import ErrorValue, UpstreamFault, token_refused, upstream_failure
from adapters.jsonwire import dumps, loads
from adapters.probe import ProbeAnswer, http_failure
from adapters.sse import EventTooLarge, SseDecoder
from adapters.trace import TapKind, every_kind
from adapters.upstream import UpstreamCall
from gateway.auth.credentials import CredentialError, CredentialSettings, UpstreamCredentials
from gateway.errors import UpstreamHopError
from gateway.upstream.h1 import BrokenResponse, H1Pool, PoolBusy, TooLarge, Unreachable
from gateway.upstream.transport import Response, Transport

Notify = Callable[[dict[str, Any]], None]
# Headers that describe where a call is made from, for the calls made in this context: a span's W3C traceparent
# (gateway.telemetry.otel sets it for an upstream round; the round's task inherits it). None: nothing to add.
CALL_HEADERS: contextvars.ContextVar[Callable[[], dict[str, str]] | None] = contextvars.ContextVar(
    "upstream_call_headers", default=None)
Answer = UpstreamResult | UpstreamError  # what the upstream answered a request: the bridge's own events


class UpstreamFailure(UpstreamHopError):
    def __init__(self, error: ErrorValue) -> None:
        super().__init__(error.message)
        self.error = error


@dataclass(frozen=True, slots=True)
class UpstreamSizes:
    """Bounds on an upstream answer (``GatewayConfig``'s ``max_upstream_*``/``max_sse_event_bytes``): a body read
    whole, one SSE event, the status line and headers. Over one, the call fails as ``too_large``."""

    response_bytes: int = 32 << 20
    sse_event_bytes: int = 8 << 20
    header_bytes: int = 64 << 10


class UpstreamClient:
    def __init__(self, url: str, *, connect_timeout: float, read_timeout: float,
                 tap: Callable[[str, Any], None] | None = None, auth: str = "forward",
                 credential: str | None = None, max_connections: int = 100,
                 max_stream_connections: int = 1000, sizes: UpstreamSizes = UpstreamSizes(),
                 transport: Transport | None = None, credentials: UpstreamCredentials | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        self.url = url
        self.headers = dict(headers or {})  # the operator's extra headers (``stdio --header``), on every request
        # No cookies are kept: one pool serves every session and principal, so a cookie an upstream set for one
        # would be sent for all. ``transport``: another HTTP client behind the same seam (tests inject one).
        self.pool: Transport = transport or H1Pool(
            url, connect_timeout=connect_timeout, read_timeout=read_timeout, limit=max_connections,
            stream_limit=max_stream_connections, max_head_bytes=sizes.header_bytes, max_body_bytes=sizes.response_bytes)
        self._max_event = sizes.sse_event_bytes
        self._tap = tap
        # A trace also sees every answer (adapters.trace.every_kind); None keeps the answer path free of it.
        self._answers = tap if every_kind(tap) else None
        # gateway.config.pins / adapters.credentials.Grant: which credential this upstream is sent.
        self.credentials = credentials or UpstreamCredentials(CredentialSettings(Grant.of(auth), url,
                                                                                 static_token=credential))

    async def close(self) -> None:
        await self.pool.close()
        await self.credentials.close()

    async def post(self, body: bytes, headers: dict[str, str]) -> Response:
        """One POST with this upstream's credential (never the client's token across audiences); a 401 to a
        credential the gateway obtained is sent once more with a fresh one (adapters.credentials.after_refusal).
        Failures as :class:`UpstreamFailure`."""
        extra = CALL_HEADERS.get()
        if extra is not None:
            headers = {**headers, **extra()}
        client = next((v for k, v in headers.items() if k.lower() == "authorization"), None)
        resp = await self._send(body, headers, client)
        if resp.status == 401 and after_refusal(401, (), self.grant, retried=False) is Refusal.RETRY:
            async with resp:
                await resp.read()  # small, and read whole so the connection goes back to the pool
            self.credentials.forget(client)
            resp = await self._send(body, headers, client)
        return resp

    async def _send(self, body: bytes, headers: dict[str, str], client: str | None) -> Response:
        try:
            value = await self.credentials.header(client)
        except CredentialError as exc:
            raise UpstreamFailure(upstream_failure(UpstreamFault.CREDENTIAL, str(exc))) from None
        sent = {**self.headers, **{k: v for k, v in headers.items() if k.lower() != "authorization"}}
        if value:
            sent["Authorization"] = value
        try:
            async with FAILURES:
                return await self.pool.post(body, sent, stream=_is_listen(headers))
        except ValueError as exc:  # a header that would break the framing: nothing was sent
            raise UpstreamFailure(upstream_failure(UpstreamFault.STREAM_BROKEN, str(exc))) from exc

    async def call(self, call: UpstreamCall, on_notification: Notify) -> Answer:
        """The request's answer (its result or its JSON-RPC error); notifications go to the callback."""
        if self._answers is None:
            return await self._call(call, on_notification)
        try:
            return await self._call(call, self._seen(on_notification))
        except UpstreamFailure as failure:  # what a trace shows as the reason the request failed
            self._answers(TapKind.FAILED, failure.error.to_wire())
            raise

    def _seen(self, on_notification: Notify) -> Notify:
        def seen(message: dict[str, Any]) -> None:
            assert self._answers is not None
            self._answers(TapKind.ANSWER, message)
            on_notification(message)
        return seen

    async def _call(self, call: UpstreamCall, on_notification: Notify) -> Answer:
        """:meth:`call`. A JSON answer is read here directly, not through :meth:`messages`: an async generator
        left suspended after its one message is only closed by the loop's finalizer task, which would hold the
        connection back from the pool until then (and cost a task per request)."""
        async with FAILURES, await self.open(call) as resp:
            if not _is_stream(resp):
                message = await _json_message(resp)
                answer = self._answer(call, message, on_notification)
                if answer is not None:
                    return answer
                if "id" in message:  # another request's answer: this connection is out of step, never reused
                    resp.discard()
                    raise UpstreamFailure(upstream_failure(
                        UpstreamFault.INVALID_RESPONSE, f"the answer was for another request (id {message['id']!r})"))
            else:
                async for message in _sse_messages(resp, self._max_event):
                    answer = self._answer(call, message, on_notification)
                    if answer is not None:
                        return answer
        raise UpstreamFailure(upstream_failure(UpstreamFault.STREAM_BROKEN,
                                               "the upstream stream ended without a response"))

    def _answer(self, call: UpstreamCall, message: dict[str, Any], on_notification: Notify) -> Answer | None:
        """:func:`_answer`, and a trace sees the message when it is the answer (notifications: :meth:`_seen`)."""
        answer = _answer(call, message, on_notification)
        if answer is not None and self._answers is not None:
            self._answers(TapKind.ANSWER, message)
        return answer

    async def open(self, call: UpstreamCall) -> Response:
        """POST one request; the response once its head arrived (a 5xx is already a failure here)."""
        if self._tap is not None:
            self._tap(TapKind.UPSTREAM, call.body)
        resp = await self.post(dumps(call.body), call.headers)
        if resp.status >= 500:
            resp.release()
            raise UpstreamFailure(upstream_failure(UpstreamFault.HTTP_5XX, f"HTTP {resp.status}"))
        if resp.status in (401, 403):
            raise UpstreamFailure(await self.refused(resp))
        return resp

    @property
    def grant(self) -> Grant:
        return self.credentials.grant

    @property
    def forwards_token(self) -> bool:
        return self.grant is Grant.FORWARD

    @property
    def needs_client_token(self) -> bool:
        """Its calls depend on the client's current token (passed on, or exchanged): a round continued without
        its client's next message could not be authorized (adapters.takeover.token_goes_upstream)."""
        return self.grant in (Grant.FORWARD, Grant.TOKEN_EXCHANGE)

    async def refused(self, resp: Response) -> ErrorValue:
        """An HTTP 401/403 answer (read and released) as the error for the request (adapters.errors.token_refused)."""
        async with resp:
            raw = await resp.read()
        try:
            body = loads(raw)
        except ValueError:
            body = None
        error = body.get("error") if isinstance(body, dict) else None
        challenges = resp.getall("www-authenticate")
        own = self.credentials.settings.own
        if own is not None and after_refusal(resp.status, challenges, self.grant, retried=True) is Refusal.STEP_UP:
            return step_up(own, challenges)  # the client's token bounds the exchanged one's scopes: its to step up
        return token_refused(resp.status, challenges, error if isinstance(error, dict) else None,
                             self.forwards_token)

    async def messages(self, call: UpstreamCall) -> AsyncGenerator[dict[str, Any]]:
        """Every JSON-RPC message the upstream sends for one POST (one for JSON, many for SSE)."""
        async with FAILURES, await self.open(call) as resp:
            if _is_stream(resp):
                async for message in _sse_messages(resp, self._max_event):
                    if self._answers is not None:
                        self._answers(TapKind.ANSWER, message)
                    yield message
            else:
                message = await _json_message(resp)
                if self._answers is not None:
                    self._answers(TapKind.ANSWER, message)
                yield message


class _Failures:
    """The one mapping of the pool's errors (while connecting, sending or reading a response) to
    :class:`UpstreamFailure`. Stateless: use the one instance, :data:`FAILURES`, as an async context manager."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, kind: Any, exc: BaseException | None, _tb: Any) -> None:
        if exc is None:  # every answer that arrived: nothing to map
            return
        if isinstance(exc, (TooLarge, EventTooLarge)):  # before BrokenResponse: TooLarge is one
            raise UpstreamFailure(upstream_failure(UpstreamFault.TOO_LARGE, str(exc))) from exc
        if isinstance(exc, PoolBusy):  # the upstream may be fine: the gateway's own connection limit is full
            raise UpstreamFailure(upstream_failure(UpstreamFault.BUSY, str(exc))) from exc
        if isinstance(exc, Unreachable):
            raise UpstreamFailure(upstream_failure(UpstreamFault.UNREACHABLE, str(exc))) from exc
        if isinstance(exc, TimeoutError):
            raise UpstreamFailure(upstream_failure(UpstreamFault.TIMEOUT, "no answer in time")) from exc
        if isinstance(exc, BrokenResponse):
            raise UpstreamFailure(upstream_failure(UpstreamFault.STREAM_BROKEN, str(exc))) from exc


FAILURES = _Failures()


def _is_listen(headers: dict[str, str]) -> bool:
    """A listen is answered by a stream that lasts as long as its subscriber (2026-07-28 basic/patterns
    §Subscriptions)."""
    for name, value in headers.items():
        if value == "subscriptions/listen" and name.lower() == "mcp-method":
            return True
    return False


def _is_stream(resp: Response) -> bool:
    return resp.status == 200 and resp.content_type == "text/event-stream"


def _answer(call: UpstreamCall, message: dict[str, Any], on_notification: Notify) -> Answer | None:
    """The outcome if ``message`` answers ``call``; None for a notification or someone else's message."""
    if "method" in message and "id" not in message:
        on_notification(message)
        return None
    if isinstance(message.get("error"), dict) and message.get("id") in (None, call.body.get("id")):
        return UpstreamError(message["error"])  # id null: rejected before the id was read (still ours)
    if message.get("id") != call.body.get("id"):
        return None
    if "result" in message:
        return UpstreamResult(message["result"])
    raise UpstreamFailure(upstream_failure(UpstreamFault.INVALID_RESPONSE, "a response with neither result nor error"))


async def _json_message(resp: Response) -> dict[str, Any]:
    raw = await resp.read()
    try:
        message = loads(raw)
    except ValueError:
        message = None
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        if resp.status >= 400:  # say what is at that URL, as the start-up probe does (adapters.probe)
            raise UpstreamFailure(http_failure(ProbeAnswer(resp.status, resp.content_type, raw)))
        raise UpstreamFailure(upstream_failure(UpstreamFault.NON_JSON, f"HTTP {resp.status} without a JSON-RPC body"))
    if resp.status >= 400 and not isinstance(message.get("error"), dict):
        raise UpstreamFailure(upstream_failure(UpstreamFault.HTTP_STATUS, f"HTTP {resp.status}"))
    return message


async def _sse_messages(resp: Response, max_event_bytes: int) -> AsyncIterator[dict[str, Any]]:
    decoder = SseDecoder(max_event_bytes)
    async for chunk in resp.chunks():
        for data in decoder.feed(chunk):
            if not data:
                continue  # priming / empty events
            try:
                message = loads(data)
            except ValueError as exc:
                raise UpstreamFailure(upstream_failure(UpstreamFault.NON_JSON, "an SSE event was not JSON")) from exc
            if isinstance(message, dict):
                yield message
