"""``GET /mcp`` (the standalone stream, and resumption with ``Last-Event-ID``) and ``DELETE /mcp``."""

from __future__ import annotations

from aiohttp import web

from adapters.classify import Accepted
from adapters.errors import reject
from adapters.sse import parse_event_id
from gateway.http.answers import rejection_response
from gateway.http.subscriptions import listen_in_background
from gateway.session import takeover
from gateway.session.runtime import Gateway, SessionRuntime
from gateway.session.streams import StreamMode, write_stream


async def on_open_stream(request: web.Request, gw: Gateway, acc: Accepted) -> web.StreamResponse:
    assert acc.session is not None
    runtime = gw.runtime(acc.session.session_id)
    stream = runtime.standalone_stream()
    if gw.config.bridge_list_changed:
        runtime.spawn(listen_in_background(gw, acc.session.session_id, request.headers.get("Authorization")))
    return await write_stream(request, stream, mode=StreamMode.GET, retry_ms=gw.config.sse_retry_ms,
                              keepalive=gw.config.sse_keepalive_seconds)


async def on_resume(request: web.Request, gw: Gateway, acc: Accepted) -> web.StreamResponse:
    """``GET`` + ``Last-Event-ID``: replay only that stream's later events, then follow it (2025-11-25
    basic/transports §Resumability)."""
    assert acc.session is not None
    runtime: SessionRuntime = gw.runtime(acc.session.session_id)
    parsed = parse_event_id(acc.last_event_id)
    stream = runtime.streams.get(parsed[0]) if parsed else None
    if stream is None and parsed is not None and gw.relay is not None:
        # A stream another replica wrote: its round continues here if that replica stopped (docs/design.md §40).
        await takeover.resume(gw, acc.session, parsed[0], parsed[1], request.headers.get("Authorization"))
        stream = runtime.streams.get(parsed[0])
    if stream is None and parsed is not None and gw.store.shares_streams:
        return await resume_elsewhere(request, gw, runtime, *parsed)
    if stream is None or parsed is None or stream.buffer.after(parsed[1]) is None:
        return _unresumable()
    return await write_stream(request, stream, mode=StreamMode.RESUME, after=parsed[1], retry_ms=gw.config.sse_retry_ms,
                              keepalive=gw.config.sse_keepalive_seconds)


async def resume_elsewhere(request: web.Request, gw: Gateway, runtime: SessionRuntime, name: str,
                           after: int) -> web.StreamResponse:
    """A stream another replica writes (or wrote): replayed from the shared store's copy and followed there
    until it ends (docs/design.md §37)."""
    stream = await runtime.follow(name, after)
    if stream is None:
        return _unresumable()
    try:
        return await write_stream(request, stream, mode=StreamMode.RESUME, after=after,
                                  retry_ms=gw.config.sse_retry_ms, keepalive=gw.config.sse_keepalive_seconds)
    finally:
        runtime.unfollow(name)


def _unresumable() -> web.StreamResponse:
    # Not a 404: that would tell the client its whole session is gone.
    return rejection_response(reject("invalid_request", "Last-Event-ID names no resumable stream position"))


async def on_delete(request: web.Request, gw: Gateway, acc: Accepted) -> web.StreamResponse:
    assert acc.session is not None
    await gw.end_session(acc.session.session_id)  # cancels every exchange, listen and stream of the session
    return web.Response(status=204)
