"""2025-03-26 JSON-RPC batches: every element runs as if posted alone, all at once; the answers come as one
JSON array, or one SSE stream once any element streams."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from adapters.classify import Accepted, batch_status
from adapters.errors import Rejection
from adapters.jsonwire import ENCODED_DEPTH, loads
from adapters.sse import PRIMING_SEQ
from gateway.http.legacy import write_post
from gateway.http.streams import json_response
from gateway.session.runtime import Gateway, log
from gateway.session.streams import OutStream

# One element's answer, as if it were posted alone (``gateway.http.perform`` runs the session core on it).
Run = Callable[[Accepted], Awaitable[web.StreamResponse | OutStream]]


async def on_batch(request: web.Request, gw: Gateway, acc: Accepted, run: Run) -> web.StreamResponse:
    """A 2025-03-26 JSON-RPC batch (``adapters.classify._classify_batch``): every element goes its own way at
    once, as if posted alone. The answers come as one JSON array, or as one SSE stream as soon as any element
    streams (a bridged request asks the client on it); notifications and client responses alone get 202 (2025-03-26
    transports §Sending Messages)."""
    parts = await asyncio.gather(*[_batch_part(element, run) for element in acc.batch])
    streams = [p for p in parts if isinstance(p, OutStream)]
    answers = [p for p in parts if isinstance(p, dict)]
    if not streams:
        status = batch_status(acc.batch, len(answers))
        return json_response(answers, status) if answers else web.Response(status=status)
    assert acc.session is not None
    runtime = gw.runtime(acc.session.session_id)
    merged = runtime.new_stream()
    for answer in answers:
        merged.push(answer)
    runtime.spawn(_merge(streams, merged))
    return await write_post(request, gw, merged)


async def _batch_part(element: Accepted | Rejection, run: Run) -> Any:
    """One element's answer: a message, the stream of its exchange, or None (a notification or response)."""
    if isinstance(element, Rejection):
        return element.body()  # JSON-RPC 2.0 §6: a bad element is answered alone, the rest still run
    answer = await run(element)
    if isinstance(answer, OutStream):
        return answer
    # The gateway's own answer: it may nest a value read at MAX_DEPTH a few levels deeper (adapters.jsonwire).
    body = answer.body if isinstance(answer, web.Response) else None
    return loads(body, ENCODED_DEPTH) if isinstance(body, bytes) and body else None


async def _merge(sources: list[OutStream], merged: OutStream) -> None:
    """Copy every element stream's messages onto the batch's one stream, which ends when they all have."""
    async def pipe(source: OutStream) -> None:
        async for events in source.batches_after(PRIMING_SEQ, keepalive=60.0):
            for event in events:
                merged.push(event.message)
    try:  # every pipe runs to its end: one that fails (its events evicted unread) leaves the others going
        for failed in await asyncio.gather(*[pipe(source) for source in sources], return_exceptions=True):
            if isinstance(failed, Exception):
                log.warning("a batch element's stream broke: %r", failed)
    finally:
        merged.finish()
