"""The WebSocket door: ``ws://HOST:PORT/ws``, subprotocol ``mcp`` (what the official Python SDK's WebSocket
client asked for), one JSON-RPC message per text frame, one legacy session per connection.

Like the stdio and HTTP+SSE doors it decides nothing (docs/design.md §35): each frame goes through a
:class:`gateway.http.door.DoorClient` to this server's own ``/mcp``, so session rules, limits, pins and the bridge
are the endpoint's. The upgrade is checked as ``/mcp`` checks a request (Origin/Host, the same policy), and the
upgrade's credential is the session's. A binary frame, or text that is not JSON, is answered with a JSON-RPC
error on the socket; closing the socket ends the session, which cancels its rounds upstream.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from adapters.classify import check_origin_host
from adapters.doors import Transport
from gateway.http.answers import rejection_response
from gateway.http.door import DoorClient
from gateway.http.keys import GATEWAY
from gateway.http.sse_door import own_endpoint

SUBPROTOCOL = "mcp"


class _Frames:
    """DoorClient's ``out``: each message the session answers becomes one text frame, in order."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()

    def write(self, data: bytes) -> None:
        self.queue.put_nowait(data.rstrip(b"\n"))

    def flush(self) -> None:
        return None


async def open_socket(request: web.Request) -> web.StreamResponse:
    gw = request.app[GATEWAY]
    refused = check_origin_host(request.headers, gw.policy)
    if refused is not None:
        return rejection_response(refused)
    ws = web.WebSocketResponse(protocols=(SUBPROTOCOL,))
    await ws.prepare(request)
    frames, endpoint = _Frames(), own_endpoint(request)
    async with aiohttp.ClientSession() as http:
        door = DoorClient(http, request.headers.get("Authorization"), frames, *endpoint,
                          door=gw.door_headers(Transport.WEBSOCKET))
        sender = asyncio.get_running_loop().create_task(_send(ws, frames))
        try:
            await _receive(ws, door)
        finally:
            # aiohttp cancels a WebSocket handler whose connection was lost, maybe while it ends the session:
            # the ending is shielded, so the session is deleted and every door task ends all the same.
            await asyncio.shield(_end(door, frames, sender))
    return ws


async def _end(door: DoorClient, frames: _Frames, sender: asyncio.Task[None]) -> None:
    await door.close()
    frames.queue.put_nowait(None)
    await sender


async def _receive(ws: web.WebSocketResponse, door: DoorClient) -> None:
    async for frame in ws:
        if frame.type == aiohttp.WSMsgType.TEXT:
            await door.handle_line(frame.data.encode())
        elif frame.type == aiohttp.WSMsgType.BINARY:  # one JSON-RPC message per *text* frame
            door.write({"jsonrpc": "2.0", "id": None,
                        "error": {"code": -32700, "message": "binary frames are not JSON-RPC: send text"}})


async def _send(ws: web.WebSocketResponse, frames: _Frames) -> None:
    while (data := await frames.queue.get()) is not None:
        if ws.closed:
            return
        await ws.send_str(data.decode())


def add_ws_door(app: web.Application) -> None:
    app.router.add_get("/ws", open_socket)
