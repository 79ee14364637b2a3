"""SSE replay across replicas (docs/design/replicas.md#sse-replay-across-replicas): a replica's own streams are copied
to the shared store (:class:`Mirror`), and a ``GET`` + ``Last-Event-ID`` for a stream another replica writes is served
from that copy and follows it (:class:`Follower`).

Only on a store that shares streams (``StreamCopies.shares_streams``); on the in-process store a stream's own
buffer is the only copy and nothing here runs. A mirror starts when a stream is first written as SSE (a lone
JSON answer is never resumable, so it is never copied), and an event goes to the client only once the copy
holds it: a client that saw an event can resume after it on any replica (2025-11-25 basic/transports
§Resumability). A round's save may carry the copy's next append in its own store write (:meth:`Mirror.hold`,
docs/design/takeover.md#a-bridged-step-is-one-fenced-store-write).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from enum import Enum
from typing import Any

from adapters.sse import PRIMING_SEQ, Event
from gateway.errors import SessionError
from gateway.session.store import StoreUnavailable, StreamAppend, StreamCopies
from gateway.session.streams import OutStream

log = logging.getLogger("gateway")
Spawn = Callable[[Coroutine[Any, Any, Any]], asyncio.Task[Any]]


class MirrorState(Enum):
    IDLE = "idle"  # not written as SSE yet: nothing copied
    COPYING = "copying"  # every event is copied before it is sent
    LOCAL = "local"  # the copy failed or the session's runtime ended: events go out uncopied


class Mirror:
    """Copies one stream's events to the store in order, one append at a time (events pushed meanwhile go in
    the next one), and says which events the store holds (:meth:`durable`)."""

    __slots__ = ("_ended", "_held", "_opened", "_session_id", "_spawn", "_store", "_task", "kept", "state", "stream")

    def __init__(self, stream: OutStream, store: StreamCopies, session_id: str, spawn: Spawn) -> None:
        self.stream, self._store, self._session_id, self._spawn = stream, store, session_id, spawn
        self.state = MirrorState.IDLE
        self.kept = PRIMING_SEQ  # the last event the store holds
        self._ended = False  # no end is to be copied: the store has it, or the copy was left open (leave_open)
        self._task: asyncio.Task[Any] | None = None
        self._opened: asyncio.Future[None] | None = None
        self._held = False  # the next append rides on another store write (hold): no copy of its own meanwhile

    async def start(self) -> None:
        """Copy from now on; returns once the copy exists (or could not be made), so an id the client is about
        to see (the priming event's included) can be resumed elsewhere."""
        if self.state is MirrorState.IDLE:
            self._open()
            self.kick()
        if self._opened is not None and self.state is MirrorState.COPYING:
            await asyncio.shield(self._opened)

    def continuing(self, kept: int) -> None:
        """Append to the copy another replica made of this stream, which holds up to event ``kept`` (a takeover,
        docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds)."""
        self.state, self.kept = MirrorState.COPYING, kept
        self._opened = asyncio.get_running_loop().create_future()
        self._opened.set_result(None)

    def leave_open(self) -> None:
        """The stream ends here but its copy does not: a round handed over
        (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds,
        docs/design/takeover.md#sigterm-hands-the-rounds-over) goes on in the same copy on the replica that continues
        it, and an end written here would end every resumption of it elsewhere. The events pushed before are still
        copied."""
        self._ended = True

    def kick(self) -> None:
        """Something was pushed, or the stream ended: copy it (unless a copy is already under way, or the store
        already holds everything: a save that carried the events leaves nothing, and a task made for nothing
        costs a loop turn)."""
        if self.state is MirrorState.COPYING and not self._held and not self._copying() and self._uncopied():
            self._task = self._spawn(self._copy())

    def _uncopied(self) -> bool:
        """Whether the copy lacks something: its opening, an event (or a hole where one was evicted), the end."""
        stream = self.stream
        return (not self._opened_done() or stream.buffer.next_seq - 1 > self.kept
                or (stream.closed and not self._ended))

    def hold(self) -> bool:
        """Take the copy's next append for a store write of the caller's (a round's save,
        docs/design/takeover.md#a-bridged-step-is-one-fenced-store-write): True when no append is under way; events
        pushed from now on wait, unsent, for :meth:`released`. A stream not copied yet is opened by that write: a
        writer starting meanwhile waits for it as for a copy's."""
        if self.state is MirrorState.LOCAL or self._held or self._copying():
            return False
        if self.state is MirrorState.IDLE:
            self._open()
        self._held = True
        return True

    def held_events(self) -> StreamAppend | None:
        """What the held append writes: the events not copied yet, and the stream's end once it is closed (None:
        some were evicted first, and the copy is dropped once :meth:`released`)."""
        stream, opening = self.stream, self._opening()
        events = stream.buffer.after(self.kept)
        if events is None:
            return None
        ended = stream.buffer.next_seq - 1 if stream.closed and not self._ended else None
        return StreamAppend(self._session_id, stream.name, tuple(events), stream.buffer.capacity, opening, ended)

    def released(self, copy: StreamAppend | None, written: bool, *, forget: bool = True) -> None:
        """The holding write is done: ``written``, the copy holds ``copy`` and its events may go out. Else the
        write failed or was fenced: with ``forget``, those events, which nobody was sent, are forgotten (a
        replica that continues the round writes its own); without, they must still go out (a round's result):
        the copy is dropped and the stream goes on here only. Anything pushed meanwhile is copied as usual."""
        self._held = False
        if not written and not forget:
            self._go_local()
            self._task = self._spawn(self._drop())
            return
        if not written:
            self.stream.buffer.drop_after(self.kept)
        elif copy is not None:
            self.kept = copy.events[-1].seq if copy.events else self.kept
            self._ended = self._ended or copy.ended_after is not None
            self._open_done()
            self.stream.wake()
        # Copies what came meanwhile (or opens a copy this write did not make); with events evicted before the
        # copy had them, it finds the hole and drops the copy, and they go out uncopied.
        self.kick()

    def durable(self, items: list[Event]) -> list[Event]:
        """The prefix of ``items`` the store holds (all of them when not copying)."""
        if self.state is not MirrorState.COPYING or items[-1].seq <= self.kept:
            return items
        return [e for e in items if e.seq <= self.kept]

    def stop(self) -> None:
        """The session's runtime ends here: no more copies; writers send what they have."""
        self._go_local()

    async def _copy(self) -> None:
        stream, opening = self.stream, self._opening()
        try:
            while self.state is MirrorState.COPYING:
                events = stream.buffer.after(self.kept)
                if events is None:  # evicted before it was copied: the copy would have a hole
                    raise _Hole
                end = stream.closed and not self._ended
                if not events and not end and not opening:
                    return
                last = events[-1].seq if events else stream.buffer.next_seq - 1
                await self._store.append_events(self._session_id, stream.name, events,
                                                capacity=stream.buffer.capacity, opening=opening,
                                                ended_after=last if end else None)
                self.kept, self._ended, opening = last, self._ended or end, False
                self._open_done()
                stream.wake()
        except (StoreUnavailable, _Hole) as exc:
            log.warning("stream %s: its copy in the store is dropped (%s); it resumes on this replica only",
                        stream.name, exc or "events evicted before they were copied")
            self._go_local()
            await self._drop()
        except Exception:  # a bug must not hold the stream's events back: they go out uncopied
            log.exception("stream %s: copying it failed; it resumes on this replica only", stream.name)
            self._go_local()
            await self._drop()

    async def _drop(self) -> None:
        try:
            await self._store.drop_stream(self._session_id, self.stream.name)
        except StoreUnavailable:  # it expires with the session; a follower of it elsewhere ends then
            pass

    def _go_local(self) -> None:
        self.state = MirrorState.LOCAL
        self._open_done()
        self.stream.wake()

    def _open(self) -> None:
        """The copy is to be made: writers wait for its opening (``_opened``)."""
        self.state = MirrorState.COPYING
        self._opened = asyncio.get_running_loop().create_future()

    def _opening(self) -> bool:
        """Whether the next append makes the copy; it then starts from the oldest event still buffered (all of
        them, unless the stream waited long for a writer)."""
        opening = not self._opened_done()
        if opening:
            self.kept = max(self.kept, self.stream.buffer.oldest - 1)
        return opening

    def _copying(self) -> bool:
        return self._task is not None and not self._task.done()

    def _opened_done(self) -> bool:
        return self._opened is not None and self._opened.done()

    def _open_done(self) -> None:
        if self._opened is not None and not self._opened.done():
            self._opened.set_result(None)


class _Hole(SessionError):
    pass


class Follower:
    """A local copy of another replica's stream for the ``GET`` requests resuming it here: filled from the store
    from the resumed position on, then fed by a task that follows the store's copy until the stream ends, the
    copy is gone, or no request here resumes it any more."""

    __slots__ = ("stream", "task", "users")

    def __init__(self, stream: OutStream) -> None:
        self.stream, self.users = stream, 0
        self.task: asyncio.Task[Any] | None = None


async def open_follower(store: StreamCopies, session_id: str, name: str, after: int, capacity: int) -> Follower | None:
    """A follower of ``name`` from ``after`` on, or None when the store cannot resume it there."""
    stored = await store.read_events(session_id, name, after)
    if stored is None:
        return None
    follower = Follower(OutStream(name, capacity, first_seq=after + 1))
    _copy_in(follower.stream, stored.events)
    if stored.ended:
        follower.stream.finish()
    return follower


async def follow(store: StreamCopies, session_id: str, follower: Follower, wait_seconds: float) -> None:
    """Feed ``follower`` from the store until its stream ends; it is finished whatever happens, so a resumed
    request never hangs on a copy that stopped (the client resumes again, and is told why)."""
    stream = follower.stream
    try:
        while not stream.closed:
            got = await store.follow_events(session_id, stream.name, stream.buffer.next_seq - 1, wait_seconds)
            if got is None or not _copy_in(stream, got.events) or got.ended:
                return
    except StoreUnavailable as exc:
        log.warning("stream %s: following its copy failed: %s", stream.name, exc)
    finally:
        stream.finish()


def _copy_in(stream: OutStream, events: tuple[Event, ...]) -> bool:
    """Push ``events`` in order; False at a hole (events evicted before they were read here)."""
    for event in events:
        if event.seq != stream.buffer.next_seq:
            return False
        stream.push(event.message)
    return True
