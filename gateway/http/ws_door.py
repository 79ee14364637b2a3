"""The WebSocket door: ``ws://HOST:PORT/ws``, subprotocol ``mcp`` (what the official Python SDK's WebSocket
client asked for), one JSON-RPC message per text frame, one legacy session per connection.

Like the stdio and HTTP+SSE doors it decides nothing
(docs/design/doors.md#the-stdio-httpsse-and-websocket-doors-are-clients-of-the-streamable-http-door): each frame goes
through a
:class:`gateway.http.door.DoorClient` to this server's own ``/mcp``, so session rules, limits, pins and the bridge
are the endpoint's. The upgrade is checked as ``/mcp`` checks a request (Origin/Host, the same policy), and the
upgrade's credential is the session's. A binary frame, or text that is not JSON, is answered with a JSON-RPC
error on the socket; closing the socket ends the session, which cancels its rounds upstream.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

import aiohttp
from aiohttp import WSCloseCode, web

from adapters.classify import check_origin_host
from adapters.doors import Transport
from adapters.errors import PARSE_ERROR
from gateway.http.answers import rejection_response
from gateway.http.authorization import door_principal
from gateway.http.door import DoorClient
from gateway.http.door_hop import (
    HOP,
    client_gone,
    door_endpoint,
    door_session,
    enter_door,
    install_door_hop,
    leave_door,
    serve_until_gone,
)
from gateway.http.keys import GATEWAY
from gateway.http.outbox import Outbox, cut_off

log = logging.getLogger("gateway.http.ws_door")
SUBPROTOCOL = "mcp"


CLOSE_SECONDS = 1.0  # how long a client that stopped reading gets to take the close frame before it is cut off


async def open_socket(request: web.Request) -> web.StreamResponse:
    gw = request.app[GATEWAY]
    refused = check_origin_host(request.headers, gw.policy)
    if refused is not None:
        return rejection_response(refused)
    unauthorized = await door_principal(request, "/ws")  # [gateway.auth]: 401/403 before the upgrade
    if isinstance(unauthorized, web.StreamResponse):
        return unauthorized
    full = enter_door(request)  # door_max_sessions: refused before the upgrade, with a status the client sees
    if full is not None:
        return full
    try:
        return await _serve_socket(request)
    finally:
        leave_door(request)


async def _serve_socket(request: web.Request) -> web.WebSocketResponse:
    gw = request.app[GATEWAY]
    ws = web.WebSocketResponse(protocols=(SUBPROTOCOL,))
    await ws.prepare(request)
    limits = gw.config.connections
    frames = Outbox(limits.door_max_queued_bytes, lambda: _overflowed(request, ws, sender))
    http = door_session(gw.config, request.app[HOP])
    door = DoorClient(http, request.headers.get("Authorization"), frames, *door_endpoint(request),
                      door=gw.door_headers(Transport.WEBSOCKET), in_flight=limits.door_max_in_flight)
    sender = asyncio.get_running_loop().create_task(_send(ws, frames))
    try:
        await serve_until_gone(request, _receive(request, ws, door, Inbox(limits.door_max_queued_bytes)),
                               probe=ws.ping)
    finally:
        # The handler may be cancelled while it ends the session (shutdown; aiohttp itself does not cancel it
        # when the connection is lost, which is why serve_until_gone watches): the ending (closing the door's
        # client last) is shielded, so the session is deleted and every door task ends all the same.
        await asyncio.shield(_end(door, frames, sender))
    return ws


def _overflowed(request: web.Request, ws: web.WebSocketResponse, sender: asyncio.Task[None]) -> None:
    """The client left ``door_max_queued_bytes`` unread. **Choice:** close code 1008 (policy violation), not 1013
    (try again later): the cause is the client's own reading, which a retry would not change (RFC 6455 §7.4.1)."""
    log.warning("WebSocket door: the client is not reading its answers; closing with 1008")
    sender.cancel()
    # The transport is held here: once the handler has ended, aiohttp closes it gently (which waits for ever on
    # a client that does not read) and lets go of it.
    closing = asyncio.get_running_loop().create_task(
        _close(request.transport, ws, WSCloseCode.POLICY_VIOLATION, b"answers not read"))
    _CLOSING.add(closing)
    closing.add_done_callback(_CLOSING.discard)


_CLOSING: set[asyncio.Task[None]] = set()  # closes under way (a task nobody holds may be collected midway)


async def _close(transport: asyncio.Transport | None, ws: web.WebSocketResponse, code: int, reason: bytes) -> None:
    """The close frame, if the client takes it within :data:`CLOSE_SECONDS`; then, either way, the connection
    is cut: a client that did not read its answers does not hold a descriptor and its buffers any longer."""
    try:
        async with asyncio.timeout(CLOSE_SECONDS):
            await ws.close(code=code, message=reason)
    except TimeoutError:
        pass
    finally:
        cut_off(transport)


async def _end(door: DoorClient, frames: Outbox, sender: asyncio.Task[None]) -> None:
    try:
        await door.close()
        frames.end()
        await asyncio.gather(sender, return_exceptions=True)
    finally:
        await door.http.close()


class Inbox:
    """The client's messages read and not yet served, bounded in bytes as the outbox is: the door reads ahead of
    what it serves, so a close frame behind messages waiting for a place is seen (and answered: RFC 6455 §5.5.1)
    however long those wait, but no further than ``max_bytes``, past which it stops reading (back-pressure). A
    message reaching an empty inbox is always taken, whatever its size."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.items: deque[bytes] = deque()
        self.size = 0
        self.changed = asyncio.Condition()

    async def put(self, data: bytes) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: not self.size or self.size + len(data) <= self.max_bytes)
            self.items.append(data)
            self.size += len(data)
            self.changed.notify_all()

    async def get(self) -> bytes:
        async with self.changed:
            await self.changed.wait_for(lambda: bool(self.items))
            data = self.items.popleft()
            self.size -= len(data)
            self.changed.notify_all()
            return data


async def _receive(request: web.Request, ws: web.WebSocketResponse, door: DoorClient, inbox: Inbox) -> None:
    """Reads the client's frames into ``inbox`` while :func:`_serve` serves them, until the client closes. A
    client that closes while all its places are taken (every call waiting on the upstream) is thus seen to leave
    at once: its calls are cancelled and its close answered, not held until one of them ends."""
    async with asyncio.TaskGroup() as tasks:
        serving = tasks.create_task(_serve(request, door, inbox))
        async for frame in ws:
            if client_gone(request):  # frames it sent before it left (aiohttp still yields them) are not served
                break
            if frame.type == aiohttp.WSMsgType.TEXT:
                await inbox.put(frame.data.encode())  # waits while the inbox is full: no frame is read meanwhile
            elif frame.type == aiohttp.WSMsgType.BINARY:  # one JSON-RPC message per *text* frame
                door.write({"jsonrpc": "2.0", "id": None,
                            "error": {"code": PARSE_ERROR, "message": "binary frames are not JSON-RPC: send text"}})
        serving.cancel()  # the client closed: what it sent and was not served yet is not served


async def _serve(request: web.Request, door: DoorClient, inbox: Inbox) -> None:
    while True:
        line = await inbox.get()
        if client_gone(request):
            return
        await door.handle_line(line)  # waits for a free place: the next message waits in the inbox meanwhile


async def _send(ws: web.WebSocketResponse, frames: Outbox) -> None:
    while (data := await frames.get()) is not None:
        if ws.closed:
            return
        await ws.send_str(data.decode())


def add_ws_door(app: web.Application) -> None:
    install_door_hop(app)
    app.router.add_get("/ws", open_socket)
