"""Writing a legacy client's stream as the HTTP answer: :func:`write_stream` answers a POST lazily as JSON (when the
response is the only message) or SSE (whenever requests/notifications precede it), as
docs/design/streams.md#sse-streams-and-resumption says, a GET as SSE from now on, a resume as SSE after the client's
``Last-Event-ID``; :func:`json_response` is the one JSON answer. The streams themselves, as data, are
``gateway.session.streams``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Any

from aiohttp import web

from adapters.jsonwire import dumps
from adapters.sse import KEEPALIVE, PRIMING_SEQ, encode_event, event_id
from gateway.session.streams import OutStream, Sink, StreamGone

# Response headers: a mapping, or (name, value) pairs where a name repeats (one WWW-Authenticate per challenge).
Headers = Mapping[str, str] | Iterable[tuple[str, str]]


class EventStreamResponse(web.StreamResponse):
    """An SSE answer whose status line and headers wait for the first body write and go out in the same send: on
    loopback one send costs more than the Python around it (the benchmark's profile), and every stream writes at
    once anyway (the priming event, or the first batch). aiohttp >= 3.11 reads this class attribute (its
    ``Response`` sets it the same way); an older one sends the headers at ``prepare()``, which is only slower."""

    _send_headers_immediately = False


def json_response(message: Any, status: int = 200, headers: Headers | None = None) -> web.Response:
    """A JSON-RPC message as a plain JSON answer (the project's one encoder, ``adapters.jsonwire.dumps``);
    ``headers`` may repeat a name (aiohttp keeps each pair: a multidict)."""
    return web.Response(body=dumps(message), status=status, headers=headers or None,
                        content_type="application/json")


class StreamMode(Enum):
    """How a stream answers an HTTP request (2025-11-25 basic/transports §Streamable HTTP)."""

    POST = "post"  # a request's answer: JSON when the response is the only message, else SSE
    GET = "get"  # the standalone stream: only events from now on
    RESUME = "resume"  # GET with Last-Event-ID: replay after that event, then follow


async def write_stream(request: web.Request, stream: OutStream, *, mode: StreamMode, retry_ms: int,
                       keepalive: float,
                       after: int = PRIMING_SEQ, headers: dict[str, str] | None = None) -> web.StreamResponse:
    """Answer with ``stream`` as ``mode`` says (``after``: the event a resume replays after)."""
    if mode is StreamMode.POST:
        await stream.wait_first()
        only = stream.single_response()
        if only is not None:
            status, extra = stream.status
            return json_response(only, status, [*(headers or {}).items(), *extra] if extra else headers)
        if stream.closed and len(stream.buffer) == 0:
            return web.Response(status=202, headers=headers)  # cancelled before anything was sent
    elif mode is StreamMode.GET:
        after = stream.buffer.next_seq - 1
    if stream.mirror is not None:
        await stream.mirror.start()  # SSE is resumable: on a shared store, from any replica
    response = EventStreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                          "X-Accel-Buffering": "no", **(headers or {})})
    await response.prepare(request)
    writer = stream.claim()
    # Priming event: an id to resume from before the first message, and the retry delay (2025-11-25
    # basic/transports); it goes out in the same write as the first batch.
    head = encode_event(event_id(stream.name, after), None, retry_ms) if mode is not StreamMode.RESUME else b""
    try:
        async for batch in stream.batches_after(after, keepalive, writer, Sink(response, after, writer)):
            data = head + b"".join([e.encode(stream.name) for e in batch]) if batch else head or KEEPALIVE
            head = b""
            if batch and stream.closed and batch[-1].seq == stream.buffer.next_seq - 1:
                await response.write_eof(data)  # the last event and the end of the body in one send
            else:
                await response.write(data)
    except ConnectionResetError:
        return response  # the client went away; the stream lives on for resumption
    except StreamGone:
        pass
    return response
