"""OutStream batching: what is buffered at a wake-up goes out as one batch (one write); the first batch comes at
once; an idle stream ticks with empty batches; a new writer supersedes the old one."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from gateway.session.streams import OutStream, write_stream


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
    await asyncio.sleep(0.01)
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


@pytest.mark.parametrize("mode", ["post", "get"])
async def test_the_sse_head_goes_out_with_the_first_events(aiohttp_client, mode: str) -> None:
    """One send for the status line, the headers, the priming event and the first batch (a send is the dearest
    thing on this path); the body is still a well-formed SSE stream."""
    sends: list[bytes] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        transport = request.transport
        write, writelines = transport.write, transport.writelines
        transport.write = lambda data: (sends.append(bytes(data)), write(data))[1]
        transport.writelines = lambda parts: (sends.append(b"".join(parts)), writelines(parts))[1]
        stream = OutStream("s", 16)
        if mode == "post":
            stream.push({"jsonrpc": "2.0", "id": "g1", "method": "sampling/createMessage", "params": {}})
        stream.finish({"jsonrpc": "2.0", "id": 1, "result": {}})
        return await write_stream(request, stream, mode=mode, retry_ms=1000, keepalive=60)

    app = web.Application()
    app.router.add_post("/", handler)
    client = await aiohttp_client(app)
    resp = await client.post("/")
    body = await resp.text()
    assert resp.status == 200 and resp.headers["Content-Type"] == "text/event-stream"
    assert "retry: 1000" in body
    assert sends[0].startswith(b"HTTP/1.1 200") and b"retry: 1000" in sends[0]
    if mode == "post":  # both events and the end of the body: all in that one send
        assert len(sends) == 1 and body.count("event: message") == 3 and '"id":1' in body
