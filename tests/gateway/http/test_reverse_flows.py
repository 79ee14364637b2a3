"""The flows every 2025-11-25 server must carry through the reverse bridge
(docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge), run once against each official SDK
1.x server: the Python one (FastMCP, tests/gateway/http/legacy_sdk1_server.py, in the 1.x venv of
test_doors_sdk1) and the TypeScript one (tests/conformance/legacy_notes_server.mjs). The official 2026 client
(Python ``mcp`` 2.3, pinned to 2026-07-28) reaches every tool, prompt and resource, including a decline and a
cancel, progress, and a 2025 client is relayed as it is. What only one server shows stays in test_reverse_e2e.py
and test_reverse_ts.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from mcp import Client

from gateway.http.keys import REVERSE
from tests.gateway.http.test_doors_sdk1 import sdk1_python  # noqa: F401  (a fixture, asked for by name below)
from tests.gateway.http.test_reverse_e2e import _gateway, _legacy_server, elicit, modern, roots, sampling, text_of
from tests.gateway.http.test_reverse_ts import _ts_server


@pytest.fixture(params=["python", "typescript"])
def legacy_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The URL of a running 2025-only server written with that SDK."""
    if request.param == "python":
        with _legacy_server(request.getfixturevalue("sdk1_python")) as (url, _):
            yield url
    else:
        with _ts_server() as url:
            yield url


@pytest.fixture
async def gateway(aiohttp_server: Any, legacy_url: str) -> Any:
    return await _gateway(aiohttp_server, legacy_url)


async def test_every_flow_of_a_legacy_server_reaches_a_2026_client(gateway: Any) -> None:
    async with modern(gateway, elicitation_callback=elicit("accept")) as client:
        assert client.protocol_version == "2026-07-28"
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"ask_model", "two_rounds", "delete_note", "open_link", "show_roots", "echo"} <= names
        assert text_of(await client.call_tool("echo", {"text": "plain"})) == "plain"
        assert text_of(await client.call_tool("ask_model", {"topic": "owls"})) == "model said: <about owls>"
        assert text_of(await client.call_tool("two_rounds", {})) == "<first> then <second after <first>>"
        assert text_of(await client.call_tool("delete_note", {"note": "n1"})) == "deleted n1"  # a form
        assert text_of(await client.call_tool("open_link", {"note": "n1"})) == "accept: link opened"  # a URL
        assert text_of(await client.call_tool("show_roots", {})) == "file:///work/a"
        prompt = await client.get_prompt("greet", {"name": "Ada"})
        assert "Ada" in str(prompt.messages[0].content)
        read = await client.read_resource("notes://readme")
        assert "the readme" in str(read.contents[0])
        assert [r.uri for r in (await client.list_resources()).resources] == ["notes://readme"]
    bridge = gateway.app[REVERSE]
    assert len(bridge.pool) == 1 and not bridge.parked  # one session for all, no call left parked


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_a_declined_or_cancelled_elicitation_reaches_the_legacy_tool(gateway: Any, action: str) -> None:
    async with modern(gateway, elicitation_callback=elicit(action)) as client:
        assert text_of(await client.call_tool("delete_note", {"note": "n1"})) == f"{action}: nothing deleted"
        assert text_of(await client.call_tool("open_link", {"note": "n1"})) == f"{action}: not shared"


async def test_progress_of_a_bridged_call_reaches_the_client(gateway: Any) -> None:
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with modern(gateway) as client:
        result = await client.call_tool("count", {"n": 2}, progress_callback=on_progress)
    assert text_of(result) == "counted 2, <go on>"
    assert seen == [1, 2, 3]  # before the round, and in the retry's answer after it


async def test_a_2025_client_is_relayed_to_the_legacy_server_as_it_is(gateway: Any) -> None:
    """Before the relay, its initialize got -32603 "...the answer was for another request (id 'server-error')"."""
    url = str(gateway.make_url("/mcp"))
    async with Client(url, mode="legacy", sampling_callback=sampling, list_roots_callback=roots,
                      elicitation_callback=elicit("accept", confirm=False)) as client:
        assert client.protocol_version == "2025-11-25"
        assert text_of(await client.call_tool("ask_model", {"topic": "owls"})) == "model said: <about owls>"
        assert text_of(await client.call_tool("delete_note", {"note": "n1"})) == "kept n1"
        assert text_of(await client.call_tool("show_roots", {})) == "file:///work/a"  # on the relayed GET stream
        assert "Ada" in str((await client.get_prompt("greet", {"name": "Ada"})).messages[0].content)
    assert not gateway.app[REVERSE].pool  # the server's own session: none of the bridge's
