"""The ``202 Accepted`` a client's answers and notifications get (``gateway.http.answers.Acknowledgement``): one
constant head on a kept-alive HTTP/1.1 connection, aiohttp's own response everywhere else, and a connection that
goes on serving after either."""

from __future__ import annotations

import asyncio
import email.utils
import json
import re

import pytest
from aiohttp import web

from gateway.http.answers import Acknowledgement
from gateway.http.app import GATEWAY
from tests.gateway.conftest import Legacy
from tests.gateway.session import test_redis_store as redis_tests

redis_url, prefix = redis_tests.redis_url, redis_tests.prefix  # its fixtures, shared

HEAD = re.compile(rb"HTTP/1\.1 202 Accepted\r\nContent-Length: 0\r\nDate: ([^\r]+)\r\nServer: [^\r]+\r\n"
                  rb"(?:X-Gateway-Replica: ([0-9a-f]+)\r\n)?\r\n")


@pytest.fixture
def slow(monkeypatch) -> list[int]:
    """Counts the 202s that went aiohttp's way (its header building) instead of being written whole."""
    counted: list[int] = []
    real = web.StreamResponse._start

    async def start(self, request):
        counted.append(self.status)
        return await real(self, request)
    monkeypatch.setattr(Acknowledgement, "_start", start)
    return counted


async def _acknowledging(aiohttp_server, hook=None):
    async def handler(request: web.Request) -> web.StreamResponse:
        return Acknowledgement()
    app = web.Application()
    app.router.add_post("/", handler)
    if hook is not None:
        app.on_response_prepare.append(hook)
    return await aiohttp_server(app)


async def _exchange(server, requests: bytes, answers: int, tail: bytes = b"") -> bytes:
    """``requests`` written at once on one connection; what came back once ``answers`` heads and ``tail`` arrived."""
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(requests)
    data = b""
    while data.count(b"\r\n\r\n") < answers or not data.endswith(tail):
        chunk = await asyncio.wait_for(reader.read(65536), 5)
        assert chunk, f"closed after {data!r}"
        data += chunk
    writer.close()
    return data


def _post(extra: str = "", version: str = "1.1") -> bytes:
    return f"POST / HTTP/{version}\r\nHost: x\r\nContent-Length: 2\r\n{extra}\r\n{{}}".encode()


async def test_a_kept_alive_202_is_one_exact_head_and_the_connection_serves_on(aiohttp_server, slow) -> None:
    server = await _acknowledging(aiohttp_server)
    data = await _exchange(server, _post() * 3, 3)  # pipelined: each head must end where the next begins
    heads = HEAD.findall(data)
    assert len(heads) == 3 and HEAD.sub(b"", data) == b"" and heads[0][1] == b""
    assert email.utils.parsedate_to_datetime(heads[0][0].decode()).tzname() == "UTC"
    assert slow == []


async def test_a_closing_or_http_1_0_request_gets_aiohttps_own_202(aiohttp_server, slow) -> None:
    server = await _acknowledging(aiohttp_server)
    closing = await _exchange(server, _post("Connection: close\r\n"), 1)
    assert closing.startswith(b"HTTP/1.1 202 Accepted\r\n") and b"Connection: close\r\n" in closing
    old = await _exchange(server, _post(version="1.0"), 1)
    assert old.startswith(b"HTTP/1.0 202 Accepted\r\n") and not HEAD.search(old)
    for answer in (closing, old):  # no body, said as aiohttp says it for web.Response(status=202)
        assert b"Content-Length: 0\r\n" in answer and answer.endswith(b"\r\n\r\n")
        assert b"Transfer-Encoding" not in answer and b"Content-Type" not in answer
    assert slow == [202, 202]


async def test_an_aiohttp_without_what_the_fast_path_sets_gets_its_own_202(aiohttp_server, slow,
                                                                          monkeypatch) -> None:
    """The fast path sets two of aiohttp's response attributes; an aiohttp lacking them (``_FAST`` false at
    import) answers every 202 its own way, with no body, and the connection serves on."""
    import gateway.http.answers as answers
    monkeypatch.setattr(answers, "_FAST", False)
    server = await _acknowledging(aiohttp_server)
    data = await _exchange(server, _post() * 2, 2)
    assert data.count(b"HTTP/1.1 202 Accepted\r\n") == 2 and data.count(b"Content-Length: 0\r\n") == 2
    assert b"Transfer-Encoding" not in data and slow == [202, 202]


async def test_a_response_hook_still_sees_every_202(aiohttp_server, slow) -> None:
    async def name_it(request: web.Request, response: web.StreamResponse) -> None:
        response.headers["X-Gateway-Replica"] = "r1"
    server = await _acknowledging(aiohttp_server, name_it)
    data = await _exchange(server, _post() * 2, 2)
    assert data.count(b"X-Gateway-Replica: r1\r\n") == 2 and data.count(b"HTTP/1.1 202 Accepted\r\n") == 2
    assert data.count(b"Content-Length: 0\r\n") == 2 and b"Transfer-Encoding" not in data
    assert slow == [202, 202]  # a hook that is not the replica's own: aiohttp's way


async def test_a_clients_answer_and_notification_get_the_constant_head(legacy: Legacy, slow) -> None:
    await legacy.initialize()
    assert len(HEAD.findall(await _answered(legacy))) == 2 and slow == []


async def test_a_replica_names_itself_in_the_constant_head(make_gateway, redis_url, prefix, slow) -> None:
    """Replicas name themselves on every answer (gateway.http.health): the 202 written whole says it too."""
    legacy = Legacy(await make_gateway(store={"url": redis_url, "prefix": prefix}))
    await legacy.initialize()
    heads = HEAD.findall(await _answered(legacy))
    replica = legacy.client.app[GATEWAY].replica.encode()
    assert [named for _date, named in heads] == [replica, replica] and slow == []


async def _answered(legacy: Legacy) -> bytes:
    """A late answer, a notification and a ping on one connection: the two 202 heads, then the ping's answer."""
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
    pong = b'{"jsonrpc":"2.0","id":9,"result":{}}'
    data = await _exchange(server, post(late_answer) + post(notification) + post(ping), 3, pong)
    assert data.count(pong) == 1
    return data
