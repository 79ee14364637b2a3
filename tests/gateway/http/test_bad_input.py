"""Malformed client and upstream input through the real endpoint: each gets its documented 4xx or JSON-RPC
error (with the request's id where one is known), never the error middleware's 500, and the session goes on."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from tests.gateway.conftest import Legacy, text
from tests.gateway.http.test_batch import old_session, post_batch
from tests.gateway.http.test_bridge_shell import SAMPLING, two_requests_sent


def nested(depth: int, leaf: Any = 1) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def deep_text(depth: int) -> str:
    """A JSON array nested ``depth`` deep, as text: json.dumps itself fails near 1000 levels."""
    return "[" * depth + "1" + "]" * depth


def call_text(ident: int, argument: str) -> str:
    return ('{"jsonrpc": "2.0", "id": ' + str(ident) + ', "method": "tools/call", "params": {"name": "t", '
            '"arguments": {"x": ' + argument + '}}}')


async def raw_http(legacy: Legacy, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """One HTTP/1.1 exchange over a plain socket: header bytes no HTTP client would send as they are."""
    server = legacy.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(head + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    answer = await reader.read()
    writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


async def still_works(legacy: Legacy, upstream) -> None:
    upstream.script["tools/call"] = lambda body, request: text("fine")
    answer = await legacy.call("tools/call", {"name": "t", "arguments": {}})
    assert answer["result"]["content"][0]["text"] == "fine"


# --- 1. notifications/cancelled with an id that is no id ---------------------------------------------------
BAD_CANCELS = [[1], {"a": 1}, None, True, 1.5]


async def test_a_cancel_naming_no_valid_request_id_is_ignored(legacy, upstream) -> None:
    await legacy.initialize()
    for bad in BAD_CANCELS:
        assert await legacy.notify("notifications/cancelled", {"requestId": bad}) == 202
    assert await legacy.notify("notifications/cancelled", {"requestId": 1, "reason": {"not": "text"}}) == 202
    assert await legacy.notify("notifications/cancelled", {"reason": []}) == 202
    await still_works(legacy, upstream)


async def test_a_cancel_with_an_unhashable_id_inside_a_batch_is_ignored(make_gateway, upstream) -> None:
    legacy = await old_session(make_gateway)
    cancels = [{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": bad}}
               for bad in ([1], {"a": 1})]
    resp = await post_batch(legacy, cancels)
    assert resp.status == 202
    await still_works(legacy, upstream)


async def test_a_cancel_with_a_non_text_reason_still_cancels(legacy, upstream) -> None:
    upstream.script["tools/call"] = lambda body, request: {"resultType": "input_required",
                                                           "inputRequests": {"a": SAMPLING}, "requestState": "s"}
    await legacy.initialize()
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {}})
    await legacy.next_event(resp)  # priming
    await legacy.next_event(resp)  # the sampling request
    ident = legacy.next_id
    assert await legacy.notify("notifications/cancelled", {"requestId": ident, "reason": ["x"]}) == 202
    rest = await legacy.events(resp)
    assert not any(m.get("id") == ident for m in rest)  # cancelled: no response for it


# --- 2. an Authorization header with no UTF-8 form ---------------------------------------------------------
async def test_an_authorization_header_that_is_not_utf8_is_refused_with_400(legacy, upstream) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
    head = (b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json, text/event-stream\r\n"
            b"Content-Type: application/json\r\nAuthorization: Bearer \xff\xfe\r\n")
    status, answer = await raw_http(legacy, head, body.encode())
    assert status == 400
    message = json.loads(answer)
    assert message["id"] == 7 and message["error"]["code"] == -32602
    assert "Authorization" in message["error"]["message"]
    assert upstream.calls("server/discover") == []  # refused before anything went upstream
    head = b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nAuthorization: \xff\r\n"
    status, answer = await raw_http(legacy, head)
    assert status == 400 and json.loads(answer)["id"] is None


# --- 3. a Last-Event-ID whose sequence number is too long to read -------------------------------------------
async def test_a_last_event_id_with_thousands_of_digits_is_400(legacy, upstream) -> None:
    await legacy.initialize()
    for bad in ("a." + "1" * 5000, "a.\u00b2", "a.\u0663"):  # too long; digits int() refuses or no ASCII digit
        resp = await legacy.client.get("/mcp", headers=legacy.headers(
            Accept="text/event-stream", **{"Last-Event-ID": bad}))
        assert resp.status == 400, bad[:20]
        assert "no resumable stream position" in (await resp.json())["error"]["message"]
    await still_works(legacy, upstream)


# --- 4. a rejected message whose id is no valid id -----------------------------------------------------------
async def test_a_rejected_message_never_echoes_an_invalid_id(legacy, upstream) -> None:
    await legacy.initialize()
    for ident in ("[" * 1000 + "]" * 1000, json.dumps(nested(3)), '{"a": 1}', "true"):
        body = '{"jsonrpc": "2.0", "id": ' + ident + ', "method": "tools/call", "params": 5}'
        resp = await legacy.client.post("/mcp", data=body, headers=legacy.headers())
        assert resp.status == 400
        message = await resp.json()
        assert message["id"] is None and message["error"]["code"] == -32600
    resp = await legacy.client.post("/mcp", data=json.dumps({"jsonrpc": "2.0", "id": "ok", "params": 5,
                                                             "method": "x"}), headers=legacy.headers())
    assert (await resp.json())["id"] == "ok"  # a valid id is still echoed


# --- 5. arguments nested deeper than the codec's one limit ---------------------------------------------------
async def test_arguments_nested_past_the_depth_limit_are_refused_at_parse_time(legacy, upstream) -> None:
    await legacy.initialize()
    for depth in (300, 990, 1020, 5000):  # encodable by neither encoder, or by none; parsed by orjson or not
        body = call_text(7, deep_text(depth))
        resp = await legacy.client.post("/mcp", data=body, headers=legacy.headers())
        assert resp.status == 400
        message = await resp.json()
        assert message["error"]["code"] == -32600 and "nested" in message["error"]["message"]
    assert upstream.calls("tools/call") == []
    await still_works(legacy, upstream)


async def test_arguments_and_results_at_the_depth_limit_cross_the_gateway(legacy, upstream) -> None:
    from adapters.jsonwire import MAX_DEPTH  # (here: the other tests run against a codec without it)
    deep = nested(MAX_DEPTH - 3)  # inside the message, params and arguments (or result and _meta): the limit
    upstream.script["tools/call"] = lambda body, request: {**text("deep"), "_meta": {"x": deep}}
    await legacy.initialize()
    answer = await legacy.call("tools/call", {"name": "t", "arguments": {"x": deep}})
    assert answer["result"]["content"][0]["text"] == "deep" and answer["result"]["_meta"]["x"] == deep
    assert upstream.calls("tools/call")[0]["params"]["arguments"]["x"] == deep
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {"x": [deep]}})  # one level more
    assert resp.status == 400 and (await resp.json())["error"]["code"] == -32600
    assert len(upstream.calls("tools/call")) == 1


async def test_deep_arguments_in_a_batch_refuse_the_batch(make_gateway, upstream) -> None:
    legacy = await old_session(make_gateway)
    resp = await legacy.client.post("/mcp", data="[" + call_text(1, deep_text(995)) + "]",
                                    headers=legacy.headers())
    assert resp.status == 400 and (await resp.json())["error"]["code"] == -32600
    await still_works(legacy, upstream)


# --- 6. a client answering a bridged request with an error that is no error object -------------------------
async def test_a_malformed_client_error_answer_ends_the_bridge_like_an_invalid_answer(legacy, upstream) -> None:
    def asks(body, request):
        return {"resultType": "input_required", "inputRequests": {"a": SAMPLING, "b": SAMPLING},
                "requestState": "s1"}
    upstream.script["tools/call"] = asks
    await legacy.initialize()
    for bad in ("no", [1, 2], 3):
        resp, first, second = await two_requests_sent(legacy)
        ident = legacy.next_id
        assert await legacy.answer(first["id"], error=bad) == 202
        rest = await legacy.events(resp)
        assert rest[0]["method"] == "notifications/cancelled" and rest[0]["params"]["requestId"] == second["id"]
        final = rest[-1]
        assert final["id"] == ident and final["error"]["code"] == -32600
        assert final["error"]["data"]["inputKey"] in ("a", "b")
    await still_works(legacy, upstream)


# --- 7. an upstream result nested past the limit -------------------------------------------------------------
async def test_an_upstream_result_nested_too_deep_is_an_upstream_failure_of_the_request(legacy, upstream) -> None:
    deep = '{"resultType": "complete", "content": [], "_meta": {"x": ' + deep_text(1000) + '}}'

    def answer(body, request):
        raw = '{"jsonrpc": "2.0", "id": ' + json.dumps(body["id"]) + ', "result": ' + deep + '}'
        return web.Response(body=raw.encode(), content_type="application/json")

    async def stream(body, request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "p",
                                                                                     "progress": 1}}
        await resp.write(f"data: {json.dumps(progress)}\n\n".encode())
        raw = '{"jsonrpc": "2.0", "id": ' + json.dumps(body["id"]) + ', "result": ' + deep + '}'
        await resp.write(f"data: {raw}\n\n".encode())
        return resp
    upstream.script["tools/call"] = answer
    await legacy.initialize()
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {}})
    assert resp.status == 200
    message = await resp.json()
    assert message["id"] == legacy.next_id and message["error"]["code"] == -32603
    assert message["error"]["data"]["upstream"] in ("invalid_response", "non_json")
    upstream.script["tools/call"] = stream  # the same result as an SSE event
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {}})
    message = await resp.json() if resp.content_type == "application/json" else (await legacy.events(resp))[-1]
    assert message["id"] == legacy.next_id and message["error"]["data"]["upstream"] in ("invalid_response",
                                                                                        "non_json")
    await still_works(legacy, upstream)


async def test_other_headers_with_no_utf8_form_never_get_a_500(legacy, upstream) -> None:
    await legacy.initialize()
    sid = legacy.session_id.encode()
    call = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "t"}}).encode()
    modern = json.dumps({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "t"}}).encode()
    base = b"Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
    cases = [
        (b"POST", b"Host: 127.0.0.1\r\n" + base + b"Mcp-Session-Id: \xff\xfe\r\n", call),
        (b"POST", b"Host: 127.0.0.1\r\n" + base + b"Mcp-Session-Id: " + sid + b"\r\nMCP-Protocol-Version: \xff\r\n",
         call),
        (b"POST", b"Host: \xff\r\n" + base, call),
        (b"POST", b"Host: 127.0.0.1\r\nOrigin: http://\xff\r\n" + base, call),
        (b"GET", b"Host: 127.0.0.1\r\nAccept: text/event-stream\r\nMcp-Session-Id: " + sid
         + b"\r\nLast-Event-ID: a.\xff\r\n", b""),
        (b"POST", b"Host: 127.0.0.1\r\n" + base + b"MCP-Protocol-Version: 2026-07-28\r\nMcp-Param-X: \xff\r\n",
         modern),
    ]
    for method, head, body in cases:
        status, answer = await raw_http(legacy, method + b" /mcp HTTP/1.1\r\n" + head, body)
        assert status != 500 and b"internal gateway error" not in answer, head
