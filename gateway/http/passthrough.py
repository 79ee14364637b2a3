"""The ends of modern (2026-07-28) passthrough requests: the client's hang-up and the gateway's shutdown.

Closing the response is the 2026 cancel (2026-07-28 basic/patterns §Cancellation), so a modern client that
disconnects must have its upstream request closed at once. aiohttp cancels no handler when its client disconnects
unless the server runs with ``handler_cancellation`` (``web.run_app`` leaves it off), and it must stay off: for a
legacy 2025 request a disconnect is not a cancel (2025-11-25 basic/transports). aiohttp 3.14 gives a handler no
connection-lost callback either, so one timer checks the open passthroughs' transports every ``HANGUP_POLL_SECONDS``
and cancels the exchange of each one whose client is gone. Shutdown lets the passthroughs that end by themselves end
(:meth:`Passthroughs.drain`, as the gateway drains its legacy requests, docs/design/takeover.md#shutdown) and ends a
``subscriptions/listen``, which never does, at once: otherwise aiohttp waits ``shutdown_timeout`` (twice) for these
streams."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Final

from aiohttp import web

from gateway.session.runtime import wait_while

HANGUP_POLL_SECONDS = 0.25  # how late a hang-up may be noticed
LASTING: Final = frozenset({"subscriptions/listen"})  # 2026 requests whose stream lasts until the client closes it


class Relay:
    """One passthrough. ``with relay:`` wraps the upstream exchange; a hang-up or :meth:`end` cancels the
    handler's task inside the block (leaving it closes the upstream response) and the block then exits normally:
    the handler returns :attr:`response` when the stream had started.

    A plain ``with`` and a task cancel, not ``asyncio.timeout``: the benchmark's instruction count put the
    timeout scope and a timer per request at 8% of a passthrough request; one timer serves all open relays."""

    __slots__ = ("_owner", "_request", "_task", "ended", "lasting", "response")

    def __init__(self, request: web.BaseRequest, owner: Passthroughs, lasting: bool) -> None:
        self._request, self._owner, self.lasting = request, owner, lasting
        self._task: asyncio.Task | None = None
        self.ended = False
        self.response: web.StreamResponse | None = None

    def __enter__(self) -> Relay:
        self._task = asyncio.current_task()
        self._owner.enter(self)
        if self._owner.closing:  # a request that slipped in during shutdown ends as soon as it starts
            self.end()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        self._owner.open.discard(self)
        # Our own cancel, and nobody else's on top of it: the request ended, it did not fail.
        return bool(self.ended and kind is asyncio.CancelledError and self._task is not None
                    and self._task.uncancel() == 0)

    def end(self) -> None:
        if not self.ended and self._task is not None:
            self.ended = True
            self._task.cancel()

    def gone(self) -> bool:
        transport = self._request.transport
        return transport is None or transport.is_closing()


class Passthroughs:
    """The open passthroughs of one app: one timer checks them all for a hang-up while any is open, and
    shutdown ends them."""

    def __init__(self) -> None:
        self.open: set[Relay] = set()
        self.closing = False
        self._watch: asyncio.TimerHandle | None = None

    def relay(self, request: web.BaseRequest, method: object = None) -> Relay:
        return Relay(request, self, method in LASTING)

    def enter(self, relay: Relay) -> None:
        self.open.add(relay)
        if self._watch is None:
            self._watch = asyncio.get_running_loop().call_later(HANGUP_POLL_SECONDS, self._check)

    def _check(self) -> None:
        self._watch = None
        for relay in [r for r in self.open if r.gone()]:
            relay.end()
        if self.open:
            self._watch = asyncio.get_running_loop().call_later(HANGUP_POLL_SECONDS, self._check)

    def end_all(self) -> None:
        self.closing = True
        for relay in list(self.open):
            relay.end()

    async def drain(self, seconds: float) -> None:
        """Shutdown: no new passthrough starts, the lasting ones end now, the others get up to ``seconds`` to be
        answered (a 2026 call cut off is an error for a call the upstream may have carried out), and then end."""
        self.closing = True
        for relay in [r for r in self.open if r.lasting]:
            relay.end()
        await wait_while(lambda: len(self.open), seconds)
        self.end_all()
