"""Family 4: arbitrary stdin for the stdio door (``gateway.ops.stdio``): JSON-RPC-ish lines, garbage, and lines
over ``max_request_bytes``, cut into arbitrary reads, through the door's own line splitter and delivery into one
in-process gateway. The property: every line the door writes is a JSON-RPC message, a line too large is refused
under the id its first bytes carry (issue #38, 10), and the door's session still answers a ping afterwards (and
the harness's property: no ERROR log, no case past its time)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.doors import Transport
from gateway.http.door import DoorClient
from gateway.http.keys import GATEWAY
from gateway.ops.stdio import Lines, deliver
from tests.fuzz.conftest import FUZZ_CAPS, Harness, check_message, fuzz_settings
from tests.fuzz.strategies import encode, messages
from tests.waiting import until

LIMIT = 1024  # the smallest max_request_bytes: lines over it are cheap to make
request_ids = st.integers(min_value=-(2**53), max_value=2**53) | st.text(max_size=10)


@st.composite
def oversized(draw: st.DrawFn) -> tuple[bytes, Any]:
    """A line over the limit and the id its refusal must carry (None: not readable in its first bytes)."""
    ident, pad = draw(request_ids), "x" * (LIMIT + draw(st.sampled_from([1, 300, 5000, 70_000])))
    where = draw(st.sampled_from(["first", "after_params", "none"]))
    params = {"name": "echo", "arguments": {"text": pad}}
    if where == "first":
        return encode({"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params}), ident
    if where == "after_params":
        return encode({"jsonrpc": "2.0", "method": "tools/call", "params": params, "id": ident}), None
    return encode({"jsonrpc": "2.0", "method": "notifications/progress", "params": params}), None


LINES = st.lists(messages().map(encode) | st.binary(max_size=40) | oversized(), min_size=1, max_size=5)


class Out:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data

    def flush(self) -> None:
        return None

    def messages(self) -> list[Any]:
        return [json.loads(line) for line in bytes(self.data).split(b"\n") if line.strip()]


@pytest.fixture
async def door(make_gateway, upstream):
    made = await Harness(lambda: make_gateway(connections={"max_request_bytes": LIMIT}), upstream).start()
    out, client = Out(), made.client
    door = DoorClient(client.session, None, out, str(client.make_url("/mcp")),
                      door=client.server.app[GATEWAY].door_headers(Transport.STDIO))
    await door.handle_line(encode({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": FUZZ_CAPS, "clientInfo": {"name": "fuzz", "version": "1"}}}))
    await door.handle_line(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    yield made, door, out
    await door.close()
    made.stop()


TOO_LARGE = {"limit": "max_request_bytes", "value": LIMIT}


async def answered(out: Out, ident: Any, data: Any = None) -> dict[str, Any]:
    """The door's answer under ``ident`` (with ``data`` in its error, when given: another line may share the id)."""
    def found() -> list[dict[str, Any]]:
        return [m for m in out.messages() if "method" not in m and m.get("id") == ident
                and (data is None or (m.get("error") or {}).get("data") == data)]
    return (await until(found, f"the answer to {ident!r}"))[-1]


@fuzz_settings(0.02)
@given(lines=LINES, cuts=st.lists(st.integers(min_value=1, max_value=4096), max_size=6))
async def test_any_stdin_leaves_the_stdio_door_serving(door: Any, lines: list[Any], cuts: list[int]) -> None:
    harness, client, out = door
    expected = [line[1] for line in lines if isinstance(line, tuple) and line[1] is not None]
    data = b"".join((line[0] if isinstance(line, tuple) else line) + b"\n" for line in lines)
    splitter, at = Lines(LIMIT), 0

    async def case() -> None:
        nonlocal at
        out.data.clear()
        for size in [*cuts, len(data)]:  # the reads stdin happens to deliver
            for line in splitter.feed(data[at : at + size]):
                await deliver(client, line, LIMIT)
            at += size
        for ident in expected:  # a refusal under its id, or the case runs past its time
            assert (await answered(out, ident, TOO_LARGE))["error"]["code"] == -32600
        await client.handle_line(b'{"jsonrpc":"2.0","id":"after-case","method":"ping"}')
        assert (await answered(out, "after-case")).get("result") == {}
        for message in out.messages():
            check_message(message)
    await harness.run(case)
