"""Writing a stream as the HTTP answer (write_stream): the SSE head goes out with the first events."""

from __future__ import annotations

import pytest
from aiohttp import web

from gateway.http.streams import StreamMode, write_stream
from gateway.session.streams import OutStream


@pytest.mark.parametrize("mode", [StreamMode.POST, StreamMode.GET])
async def test_the_sse_head_goes_out_with_the_first_events(aiohttp_client, mode: StreamMode) -> None:
    """One send for the status line, the headers, the priming event and the first batch (a send is the dearest
    thing on this path); the body is still a well-formed SSE stream."""
    sends: list[bytes] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        transport = request.transport
        write, writelines = transport.write, transport.writelines
        transport.write = lambda data: (sends.append(bytes(data)), write(data))[1]
        transport.writelines = lambda parts: (sends.append(b"".join(parts)), writelines(parts))[1]
        stream = OutStream("s", 16)
        if mode is StreamMode.POST:
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
    if mode is StreamMode.POST:  # both events and the end of the body: all in that one send
        assert len(sends) == 1 and body.count("event: message") == 3 and '"id":1' in body
