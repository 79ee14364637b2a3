"""OutStream batching: what is buffered at a wake-up goes out as one batch (one write); the first batch comes at
once; an idle stream ticks with empty batches; a new writer supersedes the old one."""

from __future__ import annotations

import asyncio

import pytest

from gateway.streams import OutStream


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


async def test_a_new_writer_supersedes_the_old_one() -> None:
    stream = OutStream("s", 16)
    old = stream.batches_after(0, keepalive=60, writer=stream.claim())
    assert await _next(old) == []
    waiting = asyncio.ensure_future(_next(old))
    await asyncio.sleep(0)
    stream.claim()
    with pytest.raises(StopAsyncIteration):  # the old writer ends instead of getting the next batch
        await waiting
