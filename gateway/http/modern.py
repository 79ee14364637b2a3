"""2026-07-28 requests at the legacy URL: passed through as they are and streamed back, no session, no
translation; a hang-up or shutdown closes the upstream request (the 2026 cancel)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from adapters.classify import Accepted
from adapters.errors import Reason, passthrough_ended, refusal
from adapters.jsonwire import dumps, loads
from adapters.sse import EventTooLarge, SseDecoder, encode_event
from adapters.tool_policy import OPEN, ToolPolicy, filter_answer
from gateway.http.answers import rejection_response
from gateway.http.keys import PASSTHROUGHS
from gateway.http.passthrough import Relay
from gateway.session.runtime import Gateway, log
from gateway.upstream.client import FAILURES, UpstreamClient, UpstreamFailure
from gateway.upstream.h1 import BrokenResponse

MODERN_HEADERS = ("accept", "content-type", "mcp-protocol-version", "mcp-method", "mcp-name", "authorization",
                   "traceparent", "tracestate", "baggage")


async def on_modern(request: web.Request, gw: Gateway, acc: Accepted, upstream: str,
                    tools: ToolPolicy = OPEN) -> web.StreamResponse:
    """A 2026-07-28 request is passed through as is to ``upstream`` and streamed back (no session, no
    translation; ``adapters.session`` admitted it). A ``tools/list`` answer loses the tools the peer's policy
    hides (adapters.tool_policy), as a legacy session's does."""
    headers = {k: v for k, v in request.headers.items()
               if k.lower() in MODERN_HEADERS or k.lower().startswith("mcp-param-")}
    method, ident = acc.message.get("method"), acc.message.get("id")
    relay = request.app[PASSTHROUGHS].relay(request, method)
    edit = _ListFilter(tools, gw.config.auth.enabled, gw.config.max_sse_event_bytes) \
        if method == "tools/list" and not tools.open else None
    # A hang-up (the 2026 cancel: 2026-07-28 basic/patterns §Cancellation) or shutdown ends it: the upstream is closed.
    with relay:
        return await _pass_through(request, relay, gw.upstream_for(upstream), headers, ident, edit)
    return relay.response or rejection_response(refusal(Reason.PASSTHROUGH_ENDED, passthrough_ended(), ident))


class _ListFilter:
    """A policy peer's ``tools/list`` answer, filtered: a JSON body whole, an SSE stream event by event (2026-07-28
    gives its events no ids to keep: basic/transports, no resumability)."""

    def __init__(self, tools: ToolPolicy, scoped: bool, max_event_bytes: int) -> None:
        self.tools, self.scoped, self.decoder = tools, scoped, SseDecoder(max_event_bytes)

    def body(self, data: bytes) -> bytes:
        try:
            return dumps(filter_answer(self.tools, loads(data), self.scoped))
        except ValueError:  # not JSON: the client sees what the upstream sent, with no tool in it to hide
            return data

    def chunk(self, data: bytes) -> bytes:
        return b"".join(self._event(text) for text in self.decoder.feed(data))

    def _event(self, text: str) -> bytes:
        try:
            return encode_event(None, filter_answer(self.tools, loads(text), self.scoped))
        except ValueError:
            return b"".join(b"data: " + line.encode() + b"\n" for line in text.split("\n")) + b"\n"


async def _pass_through(request: web.Request, relay: Relay, upstream: UpstreamClient, headers: dict[str, str],
                        ident: Any, edit: _ListFilter | None = None) -> web.StreamResponse:
    try:
        async with FAILURES, await upstream.post(await request.read(), headers) as up:
            if up.status in (401, 403) and not upstream.forwards_token:  # our credential: not the client's to fix
                raise UpstreamFailure(await upstream.refused(up))
            if up.content_type != "text/event-stream":
                # A refusal of the client's own token keeps its challenge, so the client can authorize again.
                challenges = up.getall("www-authenticate") if up.status in (401, 403) else ()
                body = await up.read()
                return web.Response(status=up.status, body=edit.body(body) if edit else body,
                                    content_type=up.content_type,
                                    headers=[("WWW-Authenticate", value) for value in challenges] or None)
            relay.response = out = web.StreamResponse(status=up.status, headers={
                "Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await out.prepare(request)
            try:
                async for chunk in up.chunks():
                    await out.write(edit.chunk(chunk) if edit else chunk)
            except ConnectionResetError:
                pass  # the modern client hung up: leaving this block closes upstream = 2026 cancel
            except (TimeoutError, BrokenResponse, EventTooLarge) as exc:  # the status is sent: the stream ends
                log.warning("modern passthrough stream broke: %s", exc)
            return out
    except UpstreamFailure as failure:  # unreachable, or a JSON answer that broke, stalled or was too large
        return rejection_response(refusal(Reason.PASSTHROUGH_FAILED, failure.error, ident))
