"""Downstream SSE streams as data: every message the gateway sends a legacy client goes through an
:class:`OutStream` (numbered, buffered for ``Last-Event-ID`` resumption), which wakes the writers waiting on it.
Writing a stream as an HTTP answer (JSON or SSE, chosen lazily) is ``gateway.http.streams``; here a writer's
response is only a :class:`Body` a step may write to (:meth:`OutStream.flush`).

A dropped client connection only ends the *writer*; the stream and the work feeding it go on (2025-11-25: a
disconnect is not a cancellation), so a later ``GET`` with ``Last-Event-ID`` replays what was missed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Protocol

from adapters.sse import PRIMING_SEQ, Event, ReplayBuffer
from adapters.trace import TapKind
from gateway.errors import SessionError
from gateway.session.store import StreamAppend

Tap = Callable[[str, Any], None]


class StreamGone(SessionError):
    """The requested events were evicted from the replay buffer (or never existed)."""


class Mirror(Protocol):
    """Where a stream's events are copied for other replicas (``gateway.session.replay.Mirror``)."""

    async def start(self) -> None: ...
    def kick(self) -> None: ...
    def durable(self, items: list[Event]) -> list[Event]: ...
    def stop(self) -> None: ...
    def leave_open(self) -> None: ...
    def hold(self) -> bool: ...
    def held_events(self) -> StreamAppend | None: ...
    def released(self, copy: StreamAppend | None, written: bool, *, forget: bool = True) -> None: ...


class Body(Protocol):
    """What a step may do with a waiting writer's response (an aiohttp ``StreamResponse`` already prepared):
    write events, or the last ones with the end of the body."""

    async def write(self, data: bytes) -> None: ...
    async def write_eof(self, data: bytes = b"") -> None: ...


class Sink:
    """A writer's response and the last event it wrote, so that while it waits a step can write what it pushed
    itself (:meth:`OutStream.flush`, docs/design/takeover.md#a-step-runs-in-the-task-of-its-event). ``busy``: such a
    write is under way."""

    __slots__ = ("busy", "response", "seq", "waiter", "writer")

    def __init__(self, response: Body, seq: int, writer: int) -> None:
        self.response, self.seq, self.writer = response, seq, writer
        self.busy = False
        self.waiter: asyncio.Future[None] | None = None  # its wait's future while it waits


class OutStream:
    __slots__ = ("_changes", "_deferred", "_hushed", "_parked", "_tap", "_waiters", "_writer", "buffer", "closed",
                 "mirror", "name", "status")

    def __init__(self, name: str, capacity: int, tap: Tap | None = None, first_seq: int = PRIMING_SEQ + 1) -> None:
        self.name = name
        self.buffer = ReplayBuffer(capacity, first_seq)
        self.closed = False
        # The copy for other replicas (a shared store only): an event goes out once the copy holds it.
        self.mirror: Mirror | None = None
        # The HTTP status and headers of the answer when it is still a lone JSON response (an upstream's refusal
        # of the client's token, adapters.errors.AuthChallenge); an SSE answer is 200 whatever it carries.
        self.status: tuple[int, tuple[tuple[str, str], ...]] = (200, ())
        self._tap = tap
        # Wake-ups: a count of changes, and the futures of the writers waiting for the next one (made as they
        # wait): an asyncio.Event per stream would hold an empty deque block for every idle session.
        self._changes = 0
        self._waiters: list[asyncio.Future[None]] | None = None
        self._writer = 0
        self._parked: Sink | None = None  # the writer waiting for a change, when it gave its sink
        self._hushed = False  # a step is under way: its changes wake nobody until flush()
        self._deferred = False  # a change was hushed

    def claim(self) -> int:
        """A new writer takes the stream over; the previous one ends (2025-11-25: each message goes on exactly one
        stream connection, never broadcast to two)."""
        self._writer += 1
        self._notify()
        return self._writer

    def _notify(self) -> None:
        self._changes += 1
        if self._hushed:
            self._deferred = True
            return
        self._wake_waiters()

    def _wake_waiters(self) -> None:
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    async def _changed(self, since: int, sink: Sink | None = None) -> None:
        """Return once the stream has changed after change ``since`` (at once if it already has). Each waiter has
        a future of its own: a keep-alive timeout cancels only its own wait. A writer that gives its ``sink`` may
        be written for meanwhile (:meth:`flush`)."""
        if self._changes != since:
            return
        waiter = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        if sink is not None:
            sink.waiter, self._parked = waiter, sink
        try:
            await waiter
        finally:
            if sink is not None and self._parked is sink:
                self._parked = sink.waiter = None
            if self._waiters is not None and waiter in self._waiters:  # not woken: a timeout, or cancelled
                self._waiters.remove(waiter)
                if not self._waiters:
                    self._waiters = None

    def hush(self) -> None:
        """A step is under way (``gateway.session.exchange``): what it pushes wakes nobody until :meth:`flush`."""
        self._hushed = True

    async def flush(self) -> None:
        """The step is over: write what it pushed to the waiting writer's response from this task, instead of waking
        the writer for it (docs/design/takeover.md#a-step-runs-in-the-task-of-its-event), when that writer is the
        only one waiting and the copy for other replicas, if any, already holds all of it (the step's save carried
        it); else wake the waiters, as a push does. The writer is woken anyway when the stream ended (its request
        returns) or the write failed (it writes them again and finds out)."""
        self._hushed, deferred = False, self._deferred
        self._deferred = False
        if not deferred:
            return
        sink = self._parked
        items = self.buffer.after(sink.seq) if sink is not None else None
        if (sink is None or not items or sink.busy or sink.writer != self._writer or self._waiters != [sink.waiter]
                or (self.mirror is not None and len(self.mirror.durable(items)) != len(items))):
            self._wake_waiters()
            return
        before, sink.busy, sink.seq = sink.seq, True, items[-1].seq
        data = b"".join([e.encode(self.name) for e in items])
        try:
            if self.closed and sink.seq == self.buffer.next_seq - 1:
                await sink.response.write_eof(data)  # the last event and the end of the body in one send
            else:
                await sink.response.write(data)
                return
        except ConnectionResetError:  # the client went away: the writer takes these events again, and its own
            sink.seq = before         # write ends its request (a resume replays them from the buffer)
        finally:
            sink.busy = False
            if self._parked is not sink:  # it woke while this write waited: it waits for the write to end
                self._wake_waiters()
        self._wake_waiters()

    def preload(self, events: Iterable[Event]) -> None:
        """Events another replica wrote on this stream, kept here for resumption (a takeover,
        docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds): not traced or copied again. They must
        start at the stream's next seq and follow each other."""
        for event in events:
            assert event.seq == self.buffer.next_seq, "a stream is preloaded with consecutive events"
            self.buffer.append(event.message)

    def wake(self) -> None:
        """Wake the writer (the mirror copied more: it may send it)."""
        self._notify()

    def push(self, message: Any) -> None:
        if self.closed:
            return
        self.buffer.append(message)
        if self._tap is not None:
            self._tap(TapKind.DOWNSTREAM, message)
        if self.mirror is not None:
            self.mirror.kick()
        self._notify()

    def finish(self, message: Any | None = None) -> None:
        """Write the final message (if any) and end the stream in one step, so the JSON/SSE choice never races."""
        if message is not None:
            self.push(message)
        self.closed = True
        if self.mirror is not None:
            self.mirror.kick()
        self._notify()

    async def wait_first(self) -> None:
        while self.buffer.next_seq == PRIMING_SEQ + 1 and not self.closed:
            await self._changed(self._changes)

    async def batches_after(self, seq: int, keepalive: float, writer: int = 0,
                            sink: Sink | None = None) -> AsyncIterator[list[Event]]:
        """Events after ``seq`` as they come, in batches: everything buffered at each wake-up at once, so a
        round's input requests (or a notification and the response) go out in one write — one send syscall,
        which the benchmark's profile showed is the dearest thing here. The first batch comes at once (empty
        when nothing is buffered yet); a later empty batch is a keep-alive tick. Ends when superseded. With a
        ``sink``, its ``seq`` is the position (a step may write for the writer while it waits: :meth:`flush`)."""
        first = True
        while not writer or writer == self._writer:
            if sink is not None:
                while sink.busy:  # a step's write for this writer waits on the connection: after it
                    await self._changed(self._changes)
                seq = sink.seq
            wake = self._changes  # a change while the batch is written wakes the wait below at once
            items = self.buffer.after(seq)
            if items is None:
                raise StreamGone(self.name)
            if items and self.mirror is not None:
                items = self.mirror.durable(items)
            if items:
                seq = items[-1].seq
                if sink is not None:
                    sink.seq = seq
            if items or first:
                yield items
                first = False
            if self.closed and seq == self.buffer.next_seq - 1:
                return
            if not items:
                try:  # asyncio.timeout, not wait_for: no extra task per idle stream (memory per session)
                    async with asyncio.timeout(keepalive):
                        await self._changed(wake, sink)
                except TimeoutError:
                    if sink is None or not sink.busy:
                        yield []

    def single_response(self) -> Any | None:
        """The JSON answer when the stream holds exactly the final response and nothing else. A stream that ended
        holding only a request to the client (its round handed over to another replica as it was asked, §42) is
        not one: answered as SSE, it stays resumable there, where a JSON body would hand the client a request as
        if it were the answer to its own."""
        if self.closed and len(self.buffer) == 1 and self.buffer.next_seq == PRIMING_SEQ + 2:
            only = self.buffer.after(PRIMING_SEQ)
            message = only[0].message if only else None
            if isinstance(message, dict) and ("result" in message or "error" in message):
                return message
        return None
