"""Family 4: the WebSocket and HTTP+SSE doors under arbitrary frames and messages (issue #38).

Each case opens one door connection, maybe initializes, and sends random text frames (JSON-RPC-ish messages,
any text) and binary frames, or POSTs random bodies to ``/messages``. The property: the gateway never logs an
ERROR or fails a task; every request with a valid id is answered with that id (unless the case cancelled it),
or the WebSocket is closed with a proper code; a POST is never answered 5xx; ``/healthz`` and a session's ping
still answer afterwards (the harness).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from hypothesis import given
from hypothesis import strategies as st

from adapters.jsonwire import loads
from tests.fuzz.conftest import DOCUMENTED_4XX, Harness, check_message, fuzz_settings, valid_id
from tests.fuzz.strategies import KNOWN_METHODS, bodies, encode, messages, objects

INIT = {"jsonrpc": "2.0", "id": "fuzz-init", "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}}
END = "fuzz-end"  # a last ping's id: once it is answered, every earlier message was read
ANSWER_SECONDS = 4.0
# Closes a client may see: normal, going away, policy (an outbox over its bound), too big (aiohttp's frame cap).
PROPER_CLOSES = frozenset({1000, 1001, 1008, 1009})

# The methods served most often first: hypothesis leans towards a list's first entries.
METHODS = ("tools/call", "ping", "tools/list", *[m for m in KNOWN_METHODS if m not in ("tools/call", "ping",
                                                                                      "tools/list")])
# Requests the endpoint serves (valid ids, known methods, params maybe mutated), beside anything at all.
REQUESTS = st.fixed_dictionaries({"jsonrpc": st.just("2.0"), "id": st.integers(-5, 10**6) | st.text(max_size=8),
                                  "method": st.sampled_from(METHODS)},
                                 optional={"params": objects}).map(encode)
FRAMES = st.lists(st.one_of(REQUESTS, REQUESTS, REQUESTS, messages().map(encode), bodies,
                            st.text(max_size=40).map(str.encode))
                  .map(lambda b: ("text", b)) | st.binary(max_size=64).map(lambda b: ("binary", b)),
                  min_size=2, max_size=12)


def expected_ids(payloads: list[bytes]) -> tuple[list[Any], set[str]]:
    """The ids a request among ``payloads`` must be answered with, and those a cancel there may have excused
    (2025-11-25 basic/utilities §Cancellation: a cancelled request need not be answered)."""
    ids, excused = [], set()
    for payload in payloads:
        message = _parsed(payload)
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            continue
        params = message.get("params")
        if message["method"] == "notifications/cancelled" and isinstance(params, dict):
            excused.add(json.dumps(params.get("requestId"), sort_keys=True, default=str))
        if "id" in message and valid_id(message["id"]):
            ids.append(message["id"])
    return ids, excused


def _parsed(payload: bytes) -> Any:
    """The message as the door reads it: text it cannot parse (not JSON, nested too deep) is answered -32700
    with a null id, which the id of a request it cannot read could not be (2025-11-25 basic §Responses)."""
    try:
        return loads(payload.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return None


def missing(ids: list[Any], excused: set[str], answered: set[str]) -> list[Any]:
    return [i for i in ids if json.dumps(i) not in answered and json.dumps(i, sort_keys=True) not in excused]


async def _ws_case(harness: Harness, init: bool, frames: list[tuple[str, bytes]]) -> None:
    answered: set[str] = set()
    texts = [data for kind, data in frames if kind == "text"]
    async with harness.client.session.ws_connect(harness.client.make_url("/ws"), protocols=("mcp",)) as ws:
        if init:
            await ws.send_str(json.dumps(INIT))
        for kind, data in frames:
            if kind == "text":
                await ws.send_str(data.decode("utf-8", "replace"))
            else:
                await ws.send_bytes(data)
        await ws.send_str(json.dumps({"jsonrpc": "2.0", "id": END, "method": "ping"}))
        try:
            async with asyncio.timeout(ANSWER_SECONDS):
                async for frame in ws:
                    assert frame.type == aiohttp.WSMsgType.TEXT, f"a {frame.type!r} frame from the door"
                    message = json.loads(frame.data)
                    check_message(message)
                    if "method" not in message:
                        answered.add(json.dumps(message["id"]))
                    if json.dumps(END) in answered and not missing(*expected_ids(texts), answered):
                        return
        except TimeoutError:
            pass
        if ws.closed:
            assert ws.close_code in PROPER_CLOSES, f"closed with {ws.close_code}"
            return
    ids, excused = expected_ids([*texts, json.dumps({"id": END, "method": "ping"}).encode()])
    assert not missing(ids, excused, answered), f"unanswered ids {missing(ids, excused, answered)!r}"


async def _sse_case(harness: Harness, init: bool, posts: list[bytes]) -> None:
    client, answered = harness.client, set()
    async with client.get("/sse") as stream:
        assert stream.status == 200
        endpoint = await _next_data(stream, event="endpoint")
        end = json.dumps({"jsonrpc": "2.0", "id": END, "method": "ping"}).encode()
        forwarded = []  # a POST refused on its own answer (not JSON) has nothing coming on the stream
        for body in [*([json.dumps(INIT).encode()] if init else []), *posts, end]:
            async with client.post(endpoint, data=body, headers={"Content-Type": "application/json"}) as ack:
                assert ack.status == 202 or ack.status in DOCUMENTED_4XX, f"POST /messages: HTTP {ack.status}"
                if ack.status == 202:
                    forwarded.append(body)
        ids, excused = expected_ids(forwarded)
        try:
            async with asyncio.timeout(ANSWER_SECONDS):
                while missing(ids, excused, answered):
                    message = json.loads(await _next_data(stream))
                    check_message(message)
                    if "method" not in message:
                        answered.add(json.dumps(message["id"]))
        except TimeoutError:
            pass
    assert not missing(ids, excused, answered), f"unanswered ids {missing(ids, excused, answered)!r}"


async def _next_data(stream: aiohttp.ClientResponse, event: str = "message") -> str:
    name, data = "message", []
    async for raw in stream.content:
        line = raw.decode().rstrip("\r\n")
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
        elif not line and data:
            if name == event:
                return "\n".join(data)
            name, data = "message", []
    raise AssertionError("the SSE stream ended")


async def _healthy(harness: Harness) -> None:
    async with harness.client.get("/healthz") as health:
        assert health.status == 200


@fuzz_settings(0.003)
@given(init=st.booleans(), frames=FRAMES)
async def test_any_websocket_frames_get_their_answers(harness: Harness, init: bool,
                                                      frames: list[tuple[str, bytes]]) -> None:
    async def case() -> None:
        await _ws_case(harness, init, frames)
        await _healthy(harness)
    await harness.run(case)


@fuzz_settings(0.003)
@given(init=st.booleans(), posts=st.lists(REQUESTS | bodies, min_size=1, max_size=6))
async def test_any_sse_door_messages_get_their_answers(harness: Harness, init: bool, posts: list[bytes]) -> None:
    async def case() -> None:
        await _sse_case(harness, init, posts)
        await _healthy(harness)
    await harness.run(case)
