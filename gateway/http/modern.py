"""2026-07-28 requests at the legacy URL: passed through as they are and streamed back, no session, no
translation; a hang-up or shutdown closes the upstream request (the 2026 cancel)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from adapters.classify import Accepted
from adapters.errors import passthrough_ended, refusal
from gateway.http.answers import rejection_response
from gateway.http.keys import PASSTHROUGHS
from gateway.http.passthrough import Relay
from gateway.session.runtime import Gateway, log
from gateway.upstream.client import FAILURES, UpstreamClient, UpstreamFailure
from gateway.upstream.h1 import BrokenResponse

MODERN_HEADERS = ("accept", "content-type", "mcp-protocol-version", "mcp-method", "mcp-name", "authorization",
                   "traceparent", "tracestate", "baggage")


async def on_modern(request: web.Request, gw: Gateway, acc: Accepted, upstream: str) -> web.StreamResponse:
    """A 2026-07-28 request is passed through as is to ``upstream`` and streamed back (no session, no
    translation; ``adapters.session`` admitted it)."""
    headers = {k: v for k, v in request.headers.items()
               if k.lower() in MODERN_HEADERS or k.lower().startswith("mcp-param-")}
    relay, ident = request.app[PASSTHROUGHS].relay(request, acc.message.get("method")), acc.message.get("id")
    # A hang-up (the 2026 cancel: 2026-07-28 basic/patterns §Cancellation) or shutdown ends it: the upstream is closed.
    with relay:
        return await _pass_through(request, relay, gw.upstream_for(upstream), headers, ident)
    return relay.response or rejection_response(refusal("passthrough_ended", passthrough_ended(), ident))


async def _pass_through(request: web.Request, relay: Relay, upstream: UpstreamClient, headers: dict[str, str],
                        ident: Any) -> web.StreamResponse:
    try:
        async with FAILURES, await upstream.post(await request.read(), headers) as up:
            if up.status in (401, 403) and not upstream.forwards_token:  # our credential: not the client's to fix
                raise UpstreamFailure(await upstream.refused(up))
            if up.content_type != "text/event-stream":
                # A refusal of the client's own token keeps its challenge, so the client can authorize again.
                challenges = up.getall("www-authenticate") if up.status in (401, 403) else ()
                return web.Response(status=up.status, body=await up.read(), content_type=up.content_type,
                                    headers=[("WWW-Authenticate", value) for value in challenges] or None)
            relay.response = out = web.StreamResponse(status=up.status, headers={
                "Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await out.prepare(request)
            try:
                async for chunk in up.chunks():
                    await out.write(chunk)
            except ConnectionResetError:
                pass  # the modern client hung up: leaving this block closes upstream = 2026 cancel
            except (TimeoutError, BrokenResponse) as exc:  # the status is sent: the client sees the stream end
                log.warning("modern passthrough stream broke: %s", exc)
            return out
    except UpstreamFailure as failure:  # unreachable, or a JSON answer that broke, stalled or was too large
        return rejection_response(refusal("passthrough_failed", failure.error, ident))
