"""OutStream batching: what is buffered at a wake-up goes out as one batch (one write); the first batch comes at
once; an idle stream ticks with empty batches; a new writer supersedes the old one."""

from __future__ import annotations

import asyncio

import pytest

from gateway.session.replay import Mirror
from gateway.session.streams import OutStream, Sink
from tests.waiting import until


async def _next(batches) -> list:
    return await asyncio.wait_for(batches.__anext__(), 5)


async def test_messages_buffered_together_come_as_one_batch() -> None:
    stream = OutStream("s", 16)
    batches = stream.batches_after(0, keepalive=60, writer=stream.claim())
    assert await _next(batches) == []  # the first batch at once: the priming event goes out with it
    stream.push({"n": 1})
    stream.push({"n": 2})
    assert [e.message for e in await _next(batches)] == [{"n": 1}, {"n": 2}]
    stream.finish({"n": 3})
    assert [(e.seq, e.message) for e in await _next(batches)] == [(3, {"n": 3})]
    assert [b async for b in batches] == []  # closed and drained: the iteration ends


async def test_an_idle_stream_ticks_with_empty_batches() -> None:
    stream = OutStream("s", 16)
    stream.push({"n": 1})
    batches = stream.batches_after(0, keepalive=0.05)
    assert [e.message for e in await _next(batches)] == [{"n": 1}]
    assert await _next(batches) == []  # keep-alive
    assert await _next(batches) == []


async def test_one_waiters_keepalive_timeout_leaves_the_others_wait_whole() -> None:
    """Each waiter waits on a future of its own (OutStream._changed): a writer's keep-alive tick, which cancels
    its wait, must not wake or break another one's (here a POST answer waiting for its first event)."""
    stream = OutStream("s", 16)
    batches = stream.batches_after(0, keepalive=0.05, writer=stream.claim())
    assert await _next(batches) == []
    first = asyncio.ensure_future(stream.wait_first())
    assert await _next(batches) == []  # a keep-alive tick: the writer's own wait timed out
    await asyncio.sleep(0.01)  # sleep: a quiet window: the other wait must not end with the writer's
    assert not first.done()  # still waiting, not cancelled with the writer's wait
    stream.push({"n": 1})
    await asyncio.wait_for(first, 5)
    assert [e.message for e in await _next(batches)] == [{"n": 1}]
    assert stream._waiters is None  # nothing left waiting: an idle stream holds no waiter list


async def test_a_change_while_a_batch_is_written_is_not_missed() -> None:
    stream = OutStream("s", 16)
    batches = stream.batches_after(0, keepalive=60, writer=stream.claim())
    assert await _next(batches) == []  # the writer now "writes" the priming event; meanwhile:
    stream.push({"n": 1})
    assert [e.message for e in await _next(batches)] == [{"n": 1}]


async def test_a_new_writer_supersedes_the_old_one() -> None:
    stream = OutStream("s", 16)
    old = stream.batches_after(0, keepalive=60, writer=stream.claim())
    assert await _next(old) == []
    waiting = asyncio.ensure_future(_next(old))
    await asyncio.sleep(0)
    stream.claim()
    with pytest.raises(StopAsyncIteration):  # the old writer ends instead of getting the next batch
        await waiting


class _Response:
    """What a writer's response is asked to do (``Sink``): every write recorded; ``gate`` holds the next one."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.eof = False
        self.gate: asyncio.Event | None = None
        self.broken = False

    async def write(self, data: bytes) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.broken:
            raise ConnectionResetError("the client went away")
        self.writes.append(data)

    async def write_eof(self, data: bytes = b"") -> None:
        await self.write(data)
        self.eof = True


async def _parked(stream: OutStream, response: _Response, keepalive: float = 60):
    """A writer that took its first batch and now waits, giving its sink."""
    writer = stream.claim()
    batches = stream.batches_after(0, keepalive=keepalive, writer=writer, sink=Sink(response, 0, writer))
    assert await _next(batches) == []
    waiting = asyncio.ensure_future(_next(batches))
    for _ in range(20):
        if stream._parked is not None:
            break
        await asyncio.sleep(0)
    assert stream._parked is not None
    return batches, waiting


async def _step(stream: OutStream, *messages: dict, final: dict | None = None) -> None:
    stream.hush()
    for message in messages:
        stream.push(message)
    if final is not None:
        stream.finish(final)
    await stream.flush()


async def test_a_step_writes_for_a_waiting_writer_without_waking_it() -> None:
    """docs/design/takeover.md#a-step-runs-in-the-task-of-its-event: what a step pushes goes out from the step's
    task, in one write; the writer sleeps on."""
    stream, response = OutStream("s", 16), _Response()
    _batches, waiting = await _parked(stream, response)
    await _step(stream, {"n": 1}, {"n": 2})
    assert response.writes == [b"".join(e.encode("s") for e in stream.buffer.after(0))]
    await asyncio.sleep(0.01)  # sleep: a quiet window: the writer must not be woken
    assert not waiting.done() and stream._parked is not None  # not woken
    await _step(stream, final={"n": 3})  # the end: written with the end of the body, and the writer returns
    assert response.eof and response.writes[-1] == stream.buffer.after(2)[0].encode("s")
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(waiting, 5)


async def test_without_a_step_or_with_two_waiting_the_writer_is_woken() -> None:
    stream, response = OutStream("s", 16), _Response()
    batches, waiting = await _parked(stream, response)
    stream.push({"n": 1})  # not in a step: the writer writes it
    assert [e.message for e in await asyncio.wait_for(waiting, 5)] == [{"n": 1}]
    waiting = asyncio.ensure_future(_next(batches))
    while stream._parked is None:
        await asyncio.sleep(0)
    other = stream.batches_after(1, keepalive=60)  # someone else waits too (a batch's reader): nothing is written
    assert await _next(other) == []                # past it, both are woken
    reading = asyncio.ensure_future(_next(other))
    await until(lambda: len(stream._waiters or ()) == 2, "the reader waits beside the writer")
    await _step(stream, {"n": 2})
    assert [e.message for e in await asyncio.wait_for(waiting, 5)] == [{"n": 2}] and response.writes == []
    assert [e.message for e in await asyncio.wait_for(reading, 5)] == [{"n": 2}]


async def test_a_writer_waking_during_a_steps_write_waits_for_it_and_repeats_nothing() -> None:
    stream, response = OutStream("s", 16), _Response()
    _batches, waiting = await _parked(stream, response, keepalive=0.02)
    response.gate = asyncio.Event()
    flushing = asyncio.ensure_future(_step(stream, {"n": 1}))
    await asyncio.sleep(0.1)  # sleep: the writer's keep-alive (0.02 s) falls while the step's write waits
    assert not waiting.done() and not flushing.done()
    stream.push({"n": 2})
    await asyncio.sleep(0.01)  # sleep: a quiet window: the writer must not write before the step's write ends
    assert not waiting.done()  # it waits for the step's write
    response.gate.set()
    await asyncio.wait_for(flushing, 5)
    assert [e.message for e in await asyncio.wait_for(waiting, 5)] == [{"n": 2}]  # only what is left
    assert len(response.writes) == 1 and b'"n":1' in response.writes[0]


async def test_a_failed_write_of_a_step_wakes_the_writer() -> None:
    stream, response = OutStream("s", 16), _Response()
    _batches, waiting = await _parked(stream, response)
    response.broken = True
    await _step(stream, {"n": 1})  # the step goes on: the client is gone, not the request
    # The writer takes the event again: its own write then fails and ends its request (write_stream).
    assert [e.message for e in await asyncio.wait_for(waiting, 5)] == [{"n": 1}]
    assert response.writes == [] and not stream.closed


class _CopyStore:
    """A shared store's copy of streams (``gateway.session.replay.Mirror``'s side of it): each append recorded,
    once ``gate`` (when set) lets it through."""

    shares_streams = True

    def __init__(self) -> None:
        self.appended: list[int] = []
        self.gate: asyncio.Event | None = None

    async def append_events(self, session_id: str, stream: str, events: list, **kwargs: object) -> None:
        if self.gate is not None:
            await self.gate.wait()
        self.appended += [e.seq for e in events]

    async def drop_stream(self, session_id: str, stream: str) -> None:
        raise AssertionError("nothing here drops a copy")


async def _mirrored(store: _CopyStore) -> tuple[OutStream, Mirror]:
    stream = OutStream("s", 16)
    stream.mirror = mirror = Mirror(stream, store, "s1", asyncio.ensure_future)  # type: ignore[arg-type]
    await asyncio.wait_for(mirror.start(), 5)  # the copy exists, as before an SSE answer's first write
    return stream, mirror


async def test_a_step_whose_save_carried_its_events_writes_them_itself() -> None:
    """docs/design/takeover.md#a-step-runs-in-the-task-of-its-event on a shared store: once the step's save holds the
    events in the copy (§50), the step writes them for the waiting writer as on one process; the writer sleeps on."""
    stream, mirror = await _mirrored(_CopyStore())
    response = _Response()
    _batches, waiting = await _parked(stream, response)
    stream.hush()
    assert mirror.hold()
    stream.push({"n": 1})
    copy = mirror.held_events()
    mirror.released(copy, True)  # the save wrote the record and the event
    await stream.flush()
    assert response.writes == [stream.buffer.after(0)[0].encode("s")]
    await asyncio.sleep(0.01)  # sleep: a quiet window: the writer must not be woken
    assert not waiting.done() and stream._parked is not None


async def test_a_step_never_writes_what_the_copy_does_not_hold_yet() -> None:
    """An event the copy does not hold yet must not reach the client (a client that saw it could not resume
    after it elsewhere): the step wakes the writer, which sends it once copied."""
    store = _CopyStore()
    stream, _mirror = await _mirrored(store)
    response = _Response()
    _batches, waiting = await _parked(stream, response)
    store.gate = asyncio.Event()
    stream.hush()
    stream.push({"n": 1})  # copied by the mirror's own append, held at the gate
    await stream.flush()
    await asyncio.sleep(0.01)  # sleep: a quiet window: nothing may be written before the copy holds it
    assert response.writes == [] and not waiting.done() and store.appended == []
    store.gate.set()
    assert [e.message for e in await asyncio.wait_for(waiting, 5)] == [{"n": 1}] and store.appended == [1]
    assert response.writes == []  # the writer itself sends it (write_stream), not the step


def test_only_a_response_alone_on_an_ended_stream_is_answered_as_json() -> None:
    """A POST's stream that ended with its final response alone is answered as plain JSON; one that ended holding
    only a request to the client (its round handed over to another replica as it was asked:
    docs/design/takeover.md#sigterm-hands-the-rounds-over) stays SSE, resumable there, instead of handing the client
    a request as if it were its answer."""
    answered = OutStream("a", 16)
    answered.finish({"jsonrpc": "2.0", "id": 1, "result": {}})
    assert answered.single_response() == {"jsonrpc": "2.0", "id": 1, "result": {}}
    failed = OutStream("f", 16)
    failed.finish({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "x"}})
    assert failed.single_response() is not None
    handed_over = OutStream("h", 16)
    handed_over.push({"jsonrpc": "2.0", "id": "g1", "method": "sampling/createMessage", "params": {}})
    handed_over.finish()  # ended without an answer
    assert handed_over.single_response() is None
    open_stream = OutStream("o", 16)
    open_stream.push({"jsonrpc": "2.0", "id": 1, "result": {}})
    assert open_stream.single_response() is None  # not ended: more may come
