"""The ends of modern (2026-07-28) passthrough requests: the client's hang-up and the gateway's shutdown.

Closing the response is the 2026 cancel (DIGEST §4.10), so a modern client that disconnects must have its
upstream request closed at once. aiohttp cancels no handler when its client disconnects unless the server runs
with ``handler_cancellation`` (``web.run_app`` leaves it off), and it must stay off: for a legacy 2025 request a
disconnect is not a cancel (S25 transports). aiohttp 3.14 gives a handler no connection-lost callback either, so
each passthrough polls its own transport and cancels only its own upstream exchange. Shutdown ends every open
passthrough at once: otherwise aiohttp waits ``shutdown_timeout`` (twice) for these streams.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

from aiohttp import web

HANGUP_POLL_SECONDS = 0.25  # how late a hang-up may be noticed


class Relay:
    """One passthrough. ``async with relay:`` wraps the upstream exchange; a hang-up or :meth:`end` cancels the
    block (leaving it closes the upstream response) and the ``async with`` then exits normally: the handler
    returns :attr:`response` when the stream had started."""

    __slots__ = ("_request", "_owner", "_scope", "_watch", "response")

    def __init__(self, request: web.BaseRequest, owner: Passthroughs) -> None:
        self._request, self._owner = request, owner
        self._scope = asyncio.timeout(None)  # rescheduled to "now" to end the block
        self._watch: asyncio.TimerHandle | None = None
        self.response: web.StreamResponse | None = None

    async def __aenter__(self) -> Relay:
        await self._scope.__aenter__()
        self._owner.open.add(self)
        self._watch = asyncio.get_running_loop().call_later(HANGUP_POLL_SECONDS, self._check)
        if self._owner.closing:  # a request that slipped in during shutdown ends as soon as it starts
            self.end()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool:
        self._owner.open.discard(self)
        if self._watch is not None:
            self._watch.cancel()
        try:
            await self._scope.__aexit__(kind, exc, tb)
        except TimeoutError:
            return True  # our own cancel (the scope turns only that into TimeoutError): ended, not failed
        return False

    def end(self) -> None:
        if self._scope.when() is None:  # not ended yet
            self._scope.reschedule(asyncio.get_running_loop().time())

    def _check(self) -> None:
        transport = self._request.transport
        if transport is None or transport.is_closing():
            self.end()
        else:
            self._watch = asyncio.get_running_loop().call_later(HANGUP_POLL_SECONDS, self._check)


class Passthroughs:
    """The open passthroughs of one app, so shutdown can end them."""

    def __init__(self) -> None:
        self.open: set[Relay] = set()
        self.closing = False

    def relay(self, request: web.BaseRequest) -> Relay:
        return Relay(request, self)

    def end_all(self) -> None:
        self.closing = True
        for relay in list(self.open):
            relay.end()
