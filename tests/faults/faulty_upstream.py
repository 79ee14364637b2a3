"""A faulty 2026-07-28 upstream for the fault suite: a raw asyncio server that writes HTTP bytes itself, so it
can misbehave below the HTTP library level (1xx heads, short bodies, garbage, byte-at-a-time writes).

``python tests/faults/faulty_upstream.py --port N``. ``server/discover`` is always answered correctly (so
``initialize`` works); a ``tools/call`` picks its misbehaviour from ``params.name`` (see ``TOOLS``) and echoes
``arguments.nonce`` when it answers, so the client can tell its answer from anyone else's. ``tools/list`` lists
one tool. ``faults/stats`` (not counted itself) answers how many requests of each method arrived so far, and
under ``hanging`` how many ``hang`` calls it holds right now.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from typing import Any

MODERN = "2026-07-28"
DISCOVER = {"resultType": "complete", "supportedVersions": [MODERN], "ttlMs": 60_000, "cacheScope": "public",
            "capabilities": {"tools": {}, "logging": {}},
            "instructions": "faulty upstream", "_meta": {"io.modelcontextprotocol/serverInfo":
                                                          {"name": "faulty", "version": "1"}}}
HUGE_BYTES = 40 * 1024 * 1024
BIG_BYTES = 256 * 1024  # a large answer that every limit lets through
TOOL_LIST = {"resultType": "complete", "tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
COUNTS: Counter[str] = Counter()  # requests received, by method
Writer = asyncio.StreamWriter


def text(value: str) -> dict[str, Any]:
    return {"resultType": "complete", "content": [{"type": "text", "text": value}]}


def head(status: str, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def json_answer(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    return head("200 OK", {"Content-Type": "application/json", "Content-Length": str(len(body))}) + body


def reply(body: dict[str, Any], result: dict[str, Any]) -> bytes:
    return json_answer({"jsonrpc": "2.0", "id": body["id"], "result": result})


async def read_request(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """The next request's JSON body on this connection; None when the peer closed it."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    length = 0
    for line in raw.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    return json.loads(await reader.readexactly(length))


# --- misbehaviours: each gets (request body, reader, writer) and returns True to keep the connection ---------

async def echo(body: dict[str, Any], _r: Any, w: Writer) -> bool:
    w.write(reply(body, text(body["params"]["arguments"]["nonce"])))
    return True


async def refuse(_b: Any, _r: Any, w: Writer) -> bool:
    return False  # closed at once, nothing written


async def hang(_b: Any, reader: asyncio.StreamReader, _w: Writer) -> bool:
    COUNTS["hanging"] += 1  # calls held right now (faults/stats)
    try:
        await reader.read()  # never answers; waits until the gateway gives up and closes
    finally:
        COUNTS["hanging"] -= 1
    return False


async def trickle(body: dict[str, Any], _r: Any, w: Writer) -> bool:
    for byte in reply(body, text(body["params"]["arguments"]["nonce"])):
        w.write(bytes([byte]))
        await w.drain()
        await asyncio.sleep(0.001)  # sleep: a trickle, byte by byte
    return True


async def truncate(body: dict[str, Any], _r: Any, w: Writer) -> bool:
    data = json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": text(body["params"]["arguments"]["nonce"])})
    w.write(head("200 OK", {"Content-Type": "application/json", "Content-Length": str(len(data) + 100)}))
    w.write(data.encode())
    return False


async def early_hints(body: dict[str, Any], _r: Any, w: Writer) -> bool:
    w.write(head("103 Early Hints", {"Link": "</style.css>; rel=preload"}))
    await w.drain()
    await asyncio.sleep(0.05)  # sleep: a separate packet: the 1xx head arrives alone
    w.write(reply(body, text(body["params"]["arguments"]["nonce"])))
    return True


async def dup_length(body: dict[str, Any], _r: Any, w: Writer) -> bool:
    """Two different Content-Length values: invalid framing, which RFC 9112 §6.3 says a client must treat as
    an unrecoverable error (close the connection, discard the response), whichever value it would pick."""
    data = json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": text(body["params"]["arguments"]["nonce"])})
    w.write(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
            f"Content-Length: {len(data) + 40}\r\n\r\n{data}".encode())
    return True


async def garbage(_b: Any, _r: Any, w: Writer) -> bool:
    w.write(b"\x00\xff\xfeNOT HTTP AT ALL \x1b[31m" * 64)
    return False


async def wrong_id(body: dict[str, Any], _r: Any, w: Writer) -> bool:
    other = f"{body['id']}-other" if isinstance(body["id"], str) else body["id"] + 100_000
    nonce = body["params"]["arguments"]["nonce"]
    w.write(json_answer({"jsonrpc": "2.0", "id": other, "result": text(f"WRONG-{nonce}")}))
    return True


async def huge(body: dict[str, Any], _r: Any, w: Writer) -> bool:
    nonce = body["params"]["arguments"]["nonce"]
    # Everything up to the opening quote of the text ('..."text": "'), then padding, then the nonce and the rest.
    prefix = json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": text("")})[:-len('"}]}}')].encode()
    suffix = f'{nonce}"}}]}}}}'.encode()
    w.write(head("200 OK", {"Content-Type": "application/json",
                            "Content-Length": str(len(prefix) + HUGE_BYTES + len(suffix))}) + prefix)
    chunk = b"A" * (1024 * 1024)
    for _ in range(HUGE_BYTES // len(chunk)):
        w.write(chunk)
        await w.drain()
    w.write(suffix)
    return True


async def big(body: dict[str, Any], _r: Any, w: Writer) -> bool:
    w.write(reply(body, text("B" * BIG_BYTES + body["params"]["arguments"]["nonce"])))
    return True


async def sse_forever(body: dict[str, Any], _r: Any, w: Writer) -> bool:
    """A stream whose events never include the response (only notifications, often enough to beat the read
    timeout), until the gateway closes it."""
    w.write(head("200 OK", {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked"}))
    note = {"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "info", "logger": "faulty", "data": "still working"}}
    event = f"data: {json.dumps(note)}\n\n".encode()
    while True:
        w.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
        await w.drain()
        await asyncio.sleep(0.3)  # sleep: the notifications' pace


async def sample(body: dict[str, Any], _r: Any, w: Writer) -> bool:
    """A bridged round: input_required asking for one sampling answer, then the nonce plus the answer's text."""
    params = body["params"]
    nonce = params["arguments"]["nonce"]
    if "requestState" not in params:
        ask = {"method": "sampling/createMessage", "params": {"maxTokens": 10, "messages": [
            {"role": "user", "content": {"type": "text", "text": f"nonce {nonce}"}}]}}
        w.write(reply(body, {"resultType": "input_required", "inputRequests": {"q": ask},
                             "requestState": f"state-{nonce}"}))
        return True
    answer = (params.get("inputResponses") or {}).get("q")
    content = answer.get("content") if isinstance(answer, dict) else None
    if params["requestState"] != f"state-{nonce}" or not isinstance(content, dict) or "text" not in content:
        w.write(json_answer({"jsonrpc": "2.0", "id": body["id"], "error": {
            "code": -32602, "message": "invalid inputResponses.q: not a sampling result for this request"}}))
        return True
    w.write(reply(body, text(f"{nonce}|{content['text']}")))
    return True


TOOLS = {f.__name__: f for f in (echo, refuse, hang, trickle, truncate, early_hints, dup_length, garbage, wrong_id,
                                 huge, big, sse_forever, sample)}


async def answer(body: dict[str, Any], reader: asyncio.StreamReader, w: Writer) -> bool:
    if body.get("method") == "faults/stats":
        w.write(reply(body, dict(COUNTS)))
        return True
    COUNTS[str(body.get("method"))] += 1
    if body.get("method") == "server/discover":
        w.write(reply(body, DISCOVER))
        return True
    if body.get("method") == "tools/list":
        w.write(reply(body, TOOL_LIST))
        return True
    if body.get("method") == "tools/call":
        tool = TOOLS.get(body["params"]["name"], echo)  # an unknown name is ordinary traffic
        return await tool(body, reader, w)
    w.write(json_answer({"jsonrpc": "2.0", "id": body.get("id"), "error": {"code": -32601, "message": "nope"}}))
    return True


async def serve_connection(reader: asyncio.StreamReader, writer: Writer) -> None:
    try:
        while (body := await read_request(reader)) is not None and await answer(body, reader, writer):
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass  # the gateway hung up (its timeout, or the request was cancelled): nothing to answer
    finally:
        writer.close()


async def main(port: int) -> None:
    server = await asyncio.start_server(serve_connection, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    asyncio.run(main(parser.parse_args().port))
