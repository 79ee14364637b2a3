"""The upstream hop against an adversarial upstream, end to end through ``create_app``: interim (1xx) responses
never desynchronise the pool (one session never reads another's answer), repeated ``WWW-Authenticate``
challenges reach the legacy and modern clients one header each, and oversized answers fail as ``too_large``
without harming the session."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from gateway.http.app import GATEWAY
from tests.gateway.conftest import DISCOVER, Legacy, text
from tests.gateway.http.test_passthrough import CALL, headers

Answer = Callable[[dict[str, Any], asyncio.StreamWriter], Awaitable[None]]


def http(status: int, body: bytes, content_type: bytes = b"application/json") -> bytes:
    return (b"HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n" % (status, content_type, len(body))
            + body)


def result(ident: Any, value: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": ident, "result": value}).encode()


@contextlib.asynccontextmanager
async def raw_upstream(answer: Answer) -> AsyncIterator[str]:
    """A keep-alive upstream written in raw bytes: discover is answered normally, everything else by ``answer``."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                found = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
                body = json.loads(await reader.readexactly(int(found.group(1)) if found else 0))
                if body["method"] == "server/discover":
                    writer.write(http(200, result(body["id"], DISCOVER)))
                else:
                    await answer(body, writer)
                await writer.drain()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/mcp"
    finally:
        server.close()


NOTE = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "A's secret"}}


async def early_hints_then_answer(body: dict[str, Any], writer: asyncio.StreamWriter) -> None:
    """Session A's call: a 103 alone, then (later) its real answer, an SSE body carrying A's notification."""
    who = body["params"].get("arguments", {}).get("who")
    if who == "B":
        writer.write(http(200, result(body["id"], text("for B"))))
        return
    writer.write(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
    await writer.drain()
    await asyncio.sleep(0.3)  # sleep: long enough for another request to take a connection wrongly pooled after the 103
    if who == "A":
        events = b"data: %s\n\ndata: %s\n\n" % (json.dumps(NOTE).encode(), result(body["id"], text("for A")))
        writer.write(http(200, events, b"text/event-stream"))
    else:
        writer.write(http(200, result(body["id"], text("modern"))))


async def messages_of(legacy: Legacy, resp: Any) -> list[dict[str, Any]]:
    assert resp.status == 200
    return [await resp.json()] if resp.content_type == "application/json" else await legacy.events(resp)


async def test_an_interim_response_never_hands_one_sessions_answer_to_another(make_gateway) -> None:
    async with raw_upstream(early_hints_then_answer) as url:
        client = await make_gateway(upstream_url=url)
        a, b = Legacy(client), Legacy(client)
        await a.initialize()
        await b.initialize()
        got_a = await messages_of(a, await a.post("tools/call", {"name": "t", "arguments": {"who": "A"}}))
        got_b = await messages_of(b, await b.post("tools/call", {"name": "t", "arguments": {"who": "B"}}))
    assert [m.get("method") for m in got_a] == ["notifications/message", None]
    assert got_a[-1]["result"]["content"][0]["text"] == "for A"
    assert "A's secret" not in json.dumps(got_b)
    assert [m["result"]["content"][0]["text"] for m in got_b] == ["for B"]


async def test_a_modern_passthrough_gets_the_final_status_and_body_after_an_interim_one(make_gateway) -> None:
    async with raw_upstream(early_hints_then_answer) as url:
        client = await make_gateway(upstream_url=url)
        resp = await client.post("/mcp", json=CALL, headers=headers("tools/call"))
        assert resp.status == 200 and "Link" not in resp.headers
        assert (await resp.json())["result"] == text("modern")


async def test_a_json_answer_for_another_request_fails_the_call_and_its_connection_is_dropped(make_gateway) -> None:
    async def answer(body: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        ident = "someone-else" if body["params"]["arguments"].get("stray") else body["id"]
        writer.write(http(200, result(ident, text("ok"))))

    async with raw_upstream(answer) as url:
        client = await make_gateway(upstream_url=url)
        legacy = Legacy(client)
        await legacy.initialize()
        pool = client.app[GATEWAY].upstream_for("default").pool
        message = await legacy.call("tools/call", {"name": "t", "arguments": {"stray": True}})
        assert message["id"] == legacy.next_id and message["error"]["code"] == -32603
        assert message["error"]["data"] == {"upstream": "invalid_response"}
        assert "another request" in message["error"]["message"]
        assert pool.connections == 0  # not pooled: the next answer on it could be anyone's
        ok = await legacy.call("tools/call", {"name": "t", "arguments": {}})
        assert ok["result"]["content"][0]["text"] == "ok"


# --- repeated WWW-Authenticate ----------------------------------------------------------------------------
CHALLENGES = ['Bearer realm="a", scope="notes"', 'DPoP algs="ES256"']


def refuse_twice(body: dict[str, Any], request: web.Request) -> web.Response:
    return web.Response(status=401, headers=[("WWW-Authenticate", value) for value in CHALLENGES])


async def test_every_challenge_reaches_an_initialize_a_json_answer_and_a_passthrough(legacy, upstream) -> None:
    upstream.script["server/discover"] = refuse_twice
    resp = await legacy.post("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                            "clientInfo": {"name": "raw", "version": "1"}})
    assert resp.status == 401 and resp.headers.getall("WWW-Authenticate") == CHALLENGES
    assert (await resp.json())["error"]["data"]["wwwAuthenticate"] == CHALLENGES
    del upstream.script["server/discover"]
    await legacy.initialize()
    upstream.script["tools/call"] = refuse_twice
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {}})
    assert resp.status == 401 and resp.headers.getall("WWW-Authenticate") == CHALLENGES
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {}, "_meta": {"progressToken": "p"}})
    assert resp.status == 401 and resp.headers.getall("WWW-Authenticate") == CHALLENGES  # the lazy answer
    resp = await legacy.client.post("/mcp", json=CALL, headers=headers("tools/call"))
    assert resp.status == 401 and resp.headers.getall("WWW-Authenticate") == CHALLENGES


# --- bounds ------------------------------------------------------------------------------------------------
def huge(size: int) -> dict[str, Any]:
    return text("x" * size)


async def test_a_json_answer_over_the_bound_fails_too_large_and_the_session_goes_on(make_gateway, upstream) -> None:
    legacy = Legacy(await make_gateway(max_upstream_response_bytes=1 << 20))
    await legacy.initialize()
    upstream.script["tools/call"] = lambda body, request: huge(40 << 20)
    message = await legacy.call("tools/call", {"name": "t", "arguments": {}})
    assert message["id"] == legacy.next_id and message["error"]["code"] == -32603
    assert message["error"]["data"] == {"upstream": "too_large"}
    upstream.script["tools/call"] = lambda body, request: text("small")
    assert (await legacy.call("tools/call", {"name": "t", "arguments": {}}))["result"]["content"][0]["text"] == "small"


async def test_an_sse_event_over_the_bound_fails_too_large(make_gateway, upstream) -> None:
    legacy = Legacy(await make_gateway(max_sse_event_bytes=1 << 20))
    await legacy.initialize()
    upstream.script["tools/call"] = lambda body, request: [NOTE, huge(2 << 20)]  # a small event, then one too big
    message = await legacy.call("tools/call", {"name": "t", "arguments": {}})
    assert message["id"] == legacy.next_id and message["error"]["data"] == {"upstream": "too_large"}
    upstream.script["tools/call"] = lambda body, request: [huge(512 << 10)]  # under the bound: fine
    assert len((await legacy.call("tools/call", {"name": "t", "arguments": {}}))["result"]["content"][0]["text"]) \
        == 512 << 10


async def test_a_head_over_the_bound_fails_too_large(make_gateway, upstream) -> None:
    legacy = Legacy(await make_gateway(max_upstream_header_bytes=4096))
    await legacy.initialize()
    upstream.script["tools/call"] = lambda body, request: web.json_response(
        {"jsonrpc": "2.0", "id": body["id"], "result": text("x")}, headers={"X-Big": "b" * 8192})
    message = await legacy.call("tools/call", {"name": "t", "arguments": {}})
    assert message["id"] == legacy.next_id and message["error"]["data"] == {"upstream": "too_large"}


async def test_a_passthrough_answer_over_the_bound_is_a_502_too_large(make_gateway, upstream) -> None:
    client = await make_gateway(max_upstream_response_bytes=1 << 20)
    upstream.script["tools/call"] = lambda body, request: huge(4 << 20)
    resp = await client.post("/mcp", json=CALL, headers=headers("tools/call"))
    assert resp.status == 502
    message = await resp.json()
    assert message["id"] == CALL["id"] and message["error"]["data"] == {"upstream": "too_large"}
