"""What a door (WebSocket, HTTP+SSE) holds for a client that reads slower than it is answered: the messages
waiting to be written, bounded in bytes.

A client that does not read its socket would otherwise grow the gateway's memory with every answer. Past
``door_max_queued_bytes`` the door gives up on the client (its socket closed, its stream ended), which ends its
session like any close. A message reaching an empty outbox is always taken, whatever its size: the bound is
on what waits, not on one answer (answers have their own bound, ``max_upstream_response_bytes``). Such a client
is cut off with a reset (:func:`cut_off`).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Callable


class Outbox:
    """A door client's ``out``: each write is one message, queued for the door's writer task."""

    def __init__(self, max_bytes: int, on_overflow: Callable[[], None]) -> None:
        self.max_bytes, self.on_overflow = max_bytes, on_overflow
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.size = 0  # bytes queued and not yet taken by the writer
        self.overflowed = False

    def write(self, data: bytes) -> None:
        if self.overflowed:
            return
        data = data.rstrip(b"\n")
        if self.size and self.size + len(data) > self.max_bytes:
            self.overflowed = True
            self.on_overflow()
            return
        self.size += len(data)
        self.queue.put_nowait(data)

    def flush(self) -> None:
        return None

    def end(self) -> None:
        """The writer stops once what is queued before this is written."""
        self.queue.put_nowait(None)

    async def get(self) -> bytes | None:
        data = await self.queue.get()
        self.size -= len(data or b"")
        return data


def cut_off(transport: asyncio.Transport | None) -> None:
    """Ends a connection at once, with what the kernel still holds for it: closed with a zero linger the socket
    is reset. A plain close would leave the kernel delivering the megabytes already in its buffers to a client
    that does not read, for minutes after the gateway let go, and the client would not learn it was cut off."""
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()
