"""``GET /mcp`` (the standalone stream, and resumption with ``Last-Event-ID``) and ``DELETE /mcp``."""

from __future__ import annotations

from collections.abc import Awaitable

from aiohttp import web

from adapters.classify import Accepted
from adapters.errors import Reason, reject
from adapters.sse import parse_event_id
from gateway.http.answers import ready, rejection_response
from gateway.http.streams import StreamMode, write_stream
from gateway.http.subscriptions import listen_in_background
from gateway.session import takeover
from gateway.session.runtime import Gateway, SessionRuntime
from gateway.session.streams import OutStream


def on_open_stream(request: web.Request, gw: Gateway, acc: Accepted) -> Awaitable[web.StreamResponse]:
    """The standalone stream: its writer's coroutine, returned rather than awaited here, so that no frame holding
    the request's verdict (its parsed session record) stays alive under a stream open for the session's life."""
    assert acc.session is not None
    runtime = gw.runtime(acc.session.session_id)
    stream = runtime.standalone_stream()
    if gw.config.bridge_list_changed:
        runtime.spawn(listen_in_background(gw, acc.session.session_id, request.headers.get("Authorization")))
    return write_stream(request, stream, mode=StreamMode.GET, retry_ms=gw.config.sse_retry_ms,
                        keepalive=gw.config.sse_keepalive_seconds)


def on_resume(request: web.Request, gw: Gateway, acc: Accepted) -> Awaitable[web.StreamResponse]:
    """``GET`` + ``Last-Event-ID``: replay only that stream's later events, then follow it (2025-11-25
    basic/transports §Resumability). A stream of this replica's is written by a coroutine returned as
    :func:`on_open_stream` returns its own; one from the store goes through :func:`resume_from_store`."""
    assert acc.session is not None
    runtime: SessionRuntime = gw.runtime(acc.session.session_id)
    parsed = parse_event_id(acc.last_event_id)
    stream = runtime.streams.get(parsed[0]) if parsed else None
    if stream is None and parsed is not None and (gw.relay is not None or gw.store.shares_streams):
        return resume_from_store(request, gw, acc, runtime, *parsed)
    return _replay(request, gw, stream, parsed)


async def resume_from_store(request: web.Request, gw: Gateway, acc: Accepted, runtime: SessionRuntime, name: str,
                            after: int) -> web.StreamResponse:
    """A stream this replica does not hold: its round continues here if the replica writing it stopped
    (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds), else it is read from the shared store's
    copy (§37)."""
    assert acc.session is not None
    if gw.relay is not None:
        await takeover.resume(gw, acc.session, name, after, request.headers.get("Authorization"))
    stream = runtime.streams.get(name)
    if stream is None and gw.store.shares_streams:
        return await resume_elsewhere(request, gw, runtime, name, after)
    return await _replay(request, gw, stream, (name, after))


def _replay(request: web.Request, gw: Gateway, stream: OutStream | None,
            parsed: tuple[str, int] | None) -> Awaitable[web.StreamResponse]:
    if stream is None or parsed is None or stream.buffer.after(parsed[1]) is None:
        return ready(_unresumable())
    return write_stream(request, stream, mode=StreamMode.RESUME, after=parsed[1], retry_ms=gw.config.sse_retry_ms,
                        keepalive=gw.config.sse_keepalive_seconds)


async def resume_elsewhere(request: web.Request, gw: Gateway, runtime: SessionRuntime, name: str,
                           after: int) -> web.StreamResponse:
    """A stream another replica writes (or wrote): replayed from the shared store's copy and followed there
    until it ends (docs/design/replicas.md#sse-replay-across-replicas)."""
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
    return rejection_response(reject(Reason.INVALID_REQUEST, "Last-Event-ID names no resumable stream position"))


async def on_delete(request: web.Request, gw: Gateway, acc: Accepted) -> web.StreamResponse:
    assert acc.session is not None
    await gw.end_session(acc.session.session_id)  # cancels every exchange, listen and stream of the session
    return web.Response(status=204)
