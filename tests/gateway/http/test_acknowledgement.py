"""The ``202 Accepted`` a client's answers and notifications get (``gateway.http.answers.Acknowledgement``): one
constant head on a kept-alive HTTP/1.1 connection, aiohttp's own response everywhere else, and a connection that
goes on serving after either."""

from __future__ import annotations

import asyncio
import email.utils
import json
import re

from aiohttp import web

from gateway.http.answers import Acknowledgement
from tests.gateway.conftest import Legacy

HEAD = re.compile(rb"HTTP/1\.1 202 Accepted\r\nContent-Length: 0\r\nDate: ([^\r]+)\r\nServer: [^\r]+\r\n\r\n")


async def _acknowledging(aiohttp_server, hook=None):
    async def handler(request: web.Request) -> web.StreamResponse:
        return Acknowledgement()
    app = web.Application()
    app.router.add_post("/", handler)
    if hook is not None:
        app.on_response_prepare.append(hook)
    return await aiohttp_server(app)


async def _exchange(server, requests: bytes, answers: int) -> bytes:
    """``requests`` written at once on one connection; what came back once ``answers`` heads arrived."""
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(requests)
    data = b""
    while data.count(b"\r\n\r\n") < answers:
        chunk = await asyncio.wait_for(reader.read(65536), 5)
        assert chunk, f"closed after {data!r}"
        data += chunk
    writer.close()
    return data


def _post(extra: str = "", version: str = "1.1") -> bytes:
    return f"POST / HTTP/{version}\r\nHost: x\r\nContent-Length: 2\r\n{extra}\r\n{{}}".encode()


async def test_a_kept_alive_202_is_one_exact_head_and_the_connection_serves_on(aiohttp_server) -> None:
    server = await _acknowledging(aiohttp_server)
    data = await _exchange(server, _post() * 3, 3)  # pipelined: each head must end where the next begins
    heads = HEAD.findall(data)
    assert len(heads) == 3 and HEAD.sub(b"", data) == b""
    assert email.utils.parsedate_to_datetime(heads[0].decode()).tzname() == "UTC"


async def test_a_closing_or_http_1_0_request_gets_aiohttps_own_202(aiohttp_server) -> None:
    server = await _acknowledging(aiohttp_server)
    closing = await _exchange(server, _post("Connection: close\r\n"), 1)
    assert closing.startswith(b"HTTP/1.1 202 Accepted\r\n") and b"Connection: close\r\n" in closing
    old = await _exchange(server, _post(version="1.0"), 1)
    assert old.startswith(b"HTTP/1.0 202 Accepted\r\n") and not HEAD.search(old)
    for answer in (closing, old):  # no body, said as aiohttp says it for web.Response(status=202)
        assert b"Content-Length: 0\r\n" in answer and answer.endswith(b"\r\n\r\n")
        assert b"Transfer-Encoding" not in answer and b"Content-Type" not in answer


async def test_a_response_hook_still_sees_every_202(aiohttp_server) -> None:
    async def name_it(request: web.Request, response: web.StreamResponse) -> None:
        response.headers["X-Gateway-Replica"] = "r1"
    server = await _acknowledging(aiohttp_server, name_it)
    data = await _exchange(server, _post() * 2, 2)
    assert data.count(b"X-Gateway-Replica: r1\r\n") == 2 and data.count(b"HTTP/1.1 202 Accepted\r\n") == 2
    assert data.count(b"Content-Length: 0\r\n") == 2 and b"Transfer-Encoding" not in data


async def test_a_clients_answer_and_notification_get_the_constant_head(legacy: Legacy) -> None:
    await legacy.initialize()
    server = legacy.client.server
    head = (f"POST /mcp HTTP/1.1\r\nHost: {server.host}:{server.port}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\nMcp-Session-Id: {legacy.session_id}\r\n"
            f"MCP-Protocol-Version: 2025-11-25\r\n")

    def post(message: dict) -> bytes:
        body = json.dumps(message).encode()
        return head.encode() + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
    late_answer = {"jsonrpc": "2.0", "id": "g-unknown", "result": {}}  # ignored, still acknowledged
    notification = {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}
    ping = {"jsonrpc": "2.0", "id": 9, "method": "ping"}
    data = await _exchange(server, post(late_answer) + post(notification) + post(ping), 3)
    assert len(HEAD.findall(data)) == 2
    assert data.endswith(b'{"jsonrpc":"2.0","id":9,"result":{}}')
