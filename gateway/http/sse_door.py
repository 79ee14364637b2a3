"""The HTTP+SSE door (2024-11-05 basic/transports §HTTP with SSE), on the same server as ``/mcp``.

``GET /sse`` opens a stream whose first event, ``endpoint``, names the session's POST URL
(``/messages?session_id=…``); each POST there is answered 202 and every response, request and notification
of the session goes on the stream. The door decides nothing: its stream's messages pass through a
:class:`gateway.http.door.DoorClient` to this server's own ``/mcp`` endpoint
(docs/design/doors.md#the-stdio-httpsse-and-websocket-doors-are-clients-of-the-streamable-http-door), so the
Origin/Host checks, principal binding, limits, pins and the bridge are the endpoint's. The door itself checks
only what is its own: the stream's Origin/Host (the same policy), and that a POST carries the credential its
stream was opened with (another caller gets 404, as on ``/mcp``).
"""

from __future__ import annotations

import asyncio
import logging
import secrets

from aiohttp import web

from adapters.classify import check_origin_host, principal_of
from adapters.doors import Transport
from adapters.errors import Reason, reject
from adapters.jsonwire import loads
from gateway.http.answers import Acknowledgement, rejection_response
from gateway.http.authorization import door_principal
from gateway.http.door import DoorClient
from gateway.http.door_hop import (
    HOP,
    door_endpoint,
    door_session,
    enter_door,
    install_door_hop,
    leave_door,
    serve_until_gone,
)
from gateway.http.keys import GATEWAY
from gateway.http.outbox import Outbox, cut_off

log = logging.getLogger("gateway.http.sse_door")

KEEPALIVE_SECONDS = 15.0


class _Stream:
    """One ``GET /sse``: its door client, and the events waiting to be written on its stream (its ``out``)."""

    def __init__(self, principal: str, events: Outbox) -> None:
        self.principal, self.events = principal, events
        self.door: DoorClient | None = None


STREAMS = web.AppKey("sse_door_streams", dict)


def _stream_ended(request: web.Request) -> None:
    """The client left ``door_max_queued_bytes`` unread: its stream is ended, which ends its session."""
    log.warning("HTTP+SSE door: the client is not reading its stream; ending it")
    cut_off(request.transport)


async def open_stream(request: web.Request) -> web.StreamResponse:
    gw = request.app[GATEWAY]
    refused = check_origin_host(request.headers, gw.policy)
    if refused is not None:
        return rejection_response(refused)
    principal = await door_principal(request, "/sse")  # [gateway.auth]: 401/403 before the stream opens
    if isinstance(principal, web.StreamResponse):
        return principal
    full = enter_door(request)  # door_max_sessions: refused before the stream opens
    if full is not None:
        return full
    try:
        return await _serve_stream(request, principal)
    finally:
        leave_door(request)


async def _serve_stream(request: web.Request, verified: str | None) -> web.StreamResponse:
    gw = request.app[GATEWAY]
    authorization = request.headers.get("Authorization")
    limits = gw.config.connections
    events = Outbox(limits.door_max_queued_bytes, lambda: _stream_ended(request))
    principal = verified or principal_of(authorization, gw.policy.tokens)
    stream, stream_id = _Stream(principal, events), secrets.token_urlsafe(24)
    endpoint, host = door_endpoint(request)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    http = door_session(gw.config, request.app[HOP])
    stream.door = door = DoorClient(http, authorization, events, endpoint, host,
                                    gw.door_headers(Transport.HTTP_SSE), in_flight=limits.door_max_in_flight)
    request.app[STREAMS][stream_id] = stream
    try:
        await response.write(f"event: endpoint\ndata: /messages?session_id={stream_id}\n\n".encode())
        await serve_until_gone(request, _pump(stream, response))  # its calls end as soon as it is gone
    except (ConnectionResetError, asyncio.CancelledError):
        pass  # the client went away: its session ends below
    finally:
        request.app[STREAMS].pop(stream_id, None)
        await asyncio.shield(_end(door))  # a second cancellation must not stop the ending halfway
    return response


async def _end(door: DoorClient) -> None:
    try:
        await door.close()
    finally:
        await door.http.close()  # last: the ending's DELETE goes through it


async def _pump(stream: _Stream, response: web.StreamResponse) -> None:
    while True:
        try:
            data = await asyncio.wait_for(stream.events.get(), KEEPALIVE_SECONDS)
        except TimeoutError:
            await response.write(b": keep-alive\n\n")
            continue
        if data is None:  # the server is shutting down
            return
        await response.write(b"event: message\ndata: " + data + b"\n\n")


async def post_message(request: web.Request) -> web.StreamResponse:
    gw = request.app[GATEWAY]
    refused = check_origin_host(request.headers, gw.policy)
    if refused is not None:
        return rejection_response(refused)
    verified = await door_principal(request, "/sse")
    if isinstance(verified, web.StreamResponse):
        return verified
    stream = request.app[STREAMS].get(request.query.get("session_id", ""))
    principal = verified or principal_of(request.headers.get("Authorization"), gw.policy.tokens)
    if stream is None or stream.door is None or stream.principal != principal:
        return rejection_response(reject(Reason.UNKNOWN_SESSION, "no such HTTP+SSE session"))
    if verified:  # a refreshed token of the same principal: the door relays the newest one from now on
        stream.door.authorization = request.headers.get("Authorization")
    body = await request.read()
    try:
        loads(body)
    except ValueError:
        return rejection_response(reject(Reason.PARSE_ERROR, "the body is not valid JSON"))
    await stream.door.handle_line(body)  # initialize is answered on the stream before this 202
    return Acknowledgement()


async def _end_streams(app: web.Application) -> None:
    for stream in list(app[STREAMS].values()):
        stream.events.end()


def add_sse_door(app: web.Application) -> None:
    app[STREAMS] = {}
    install_door_hop(app)
    app.router.add_get("/sse", open_stream)
    app.router.add_post("/messages", post_message)
    app.on_shutdown.append(_end_streams)


__all__ = ["add_sse_door", "open_stream", "post_message"]
