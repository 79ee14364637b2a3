"""End to end with a client we did not write: the official ``mcp`` SDK in ``mode="legacy"`` (2025-11-25 over
Streamable HTTP) -> the gateway -> the real core, all on loopback.

Every message the gateway sends the client is validated against the 2025-11-25 schema and every request it
sends upstream against the 2026-07-28 schema (when ``../shared/spec`` exists).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client import advertise
from mcp.shared.exceptions import MCPError

from gateway.config.settings import load_config
from gateway.http.app import GATEWAY, create_app
from tests import schema
from tests.proxy import pump
from tests.waiting import until

core_app = pytest.importorskip("modern_server.app")
core_config = pytest.importorskip("modern_server.config")

UI = "io.modelcontextprotocol/ui"
UI_MIME = "text/html;profile=mcp-app"


class Wire:
    """The gateway's wire tap: what it sent downstream and upstream, checked against the official schemas."""

    def __init__(self) -> None:
        self.downstream: list[dict[str, Any]] = []
        self.upstream: list[dict[str, Any]] = []

    def __call__(self, direction: str, message: Any) -> None:
        (self.downstream if direction == "downstream" else self.upstream).append(message)

    def check(self) -> None:
        for message in self.downstream:
            kind = "ServerRequest" if "id" in message and "method" in message else (
                "ServerNotification" if "method" in message else "JSONRPCMessage")
            problems = schema.errors("2025-11-25", kind, message) if schema.available("2025-11-25") else []
            assert not problems, (message, problems[:3])
        for body in self.upstream:
            schema.check("2026-07-28", body)
            if schema.available("2026-07-28"):
                assert not schema.errors("2026-07-28", "ClientRequest", body), body

    def sent(self, method: str) -> list[dict[str, Any]]:
        return [m for m in self.downstream if m.get("method") == method]


class DroppingProxy:
    """A loopback TCP proxy that can cut every open connection once (a flaky network, not a cancel)."""

    def __init__(self, target_port: int) -> None:
        self.target_port, self.pairs, self.drops, self.resumes = target_port, set(), 0, 0

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._pipe(reader, writer, self._count_resume, None)

    def _count_resume(self, data: bytes) -> None:
        self.resumes += b"last-event-id" in data.lower()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    up: Callable[[bytes], None] | None, down: Callable[[bytes], None] | None) -> None:
        """Both directions of one connection through the proxy, ``up`` and ``down`` reading what passes."""
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        pair = (writer, up_writer)
        self.pairs.add(pair)
        await asyncio.gather(pump(reader, up_writer, up), pump(up_reader, writer, down), return_exceptions=True)
        self.pairs.discard(pair)

    def drop(self) -> None:
        self.drops += 1
        for a, b in list(self.pairs):
            a.transport.abort()
            b.transport.abort()

    async def close(self) -> None:
        self.drop()
        self.server.close()
        await self.server.wait_closed()


@pytest.fixture
async def stack(aiohttp_server, tmp_path):
    core = await aiohttp_server(core_app.create_app(core_config.CoreConfig(database=str(tmp_path / "core.db"))))
    wire = Wire()
    config = load_config(upstream_url=str(core.make_url("/mcp")), sse_retry_ms=50)
    gateway = await aiohttp_server(create_app(config, tap=wire))
    yield gateway, wire
    wire.check()


def url_of(server) -> str:
    return str(server.make_url("/mcp"))


async def sampling(context, params: types.CreateMessageRequestParams):
    prompt = params.messages[0].content.text
    if "JSON array" in prompt:
        answer = json.dumps(prompt.splitlines()[1:4])
    else:
        answer = "A small repository with a parser and a gateway."
    return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text=answer),
                                     model="test-model", stop_reason="endTurn")


async def roots(context):
    return types.ListRootsResult(roots=[types.Root(uri="file:///work/notes", name="notes")])


def elicitation_answering(**content_or_action):
    seen: list[Any] = []

    async def elicit(context, params):
        seen.append(params)
        action = content_or_action.get("action", "accept")
        content = content_or_action.get("content")
        if callable(content):
            content = content(params)
        return types.ElicitResult(action=action, content=content if action == "accept" else None)
    elicit.seen = seen  # type: ignore[attr-defined]
    return elicit


def legacy(gateway, **kwargs) -> Client:
    return Client(url_of(gateway), mode="legacy", sampling_callback=sampling, list_roots_callback=roots, **kwargs)


async def test_summarize_repo_two_live_sampling_rounds(stack) -> None:
    gateway, wire = stack
    async with legacy(gateway) as client:
        assert client.protocol_version == "2025-11-25"
        assert client.server_info.name == "mcp-reference-core"
        assert "tasks" not in client.server_capabilities.model_dump(exclude_none=True)
        result = await client.call_tool("summarize_repo", {"repo": "demo"})
    assert not result.is_error
    assert result.structured_content["files"] == ["README.md", "pyproject.toml", "src/app/__init__.py"]
    assert len(wire.sent("sampling/createMessage")) == 2
    rounds = [b for b in wire.upstream if b.get("method") == "tools/call"]
    assert len(rounds) == 3 and len({b["id"] for b in rounds}) == 3
    assert [sorted(b["params"].get("inputResponses", {})) for b in rounds] == [[], ["pick_files"], ["summary"]]


def pick_first(params):
    return {"note_id": params.requested_schema["properties"]["note_id"]["enum"][0], "confirm": True}


@pytest.mark.parametrize("action,expected,deleted", [
    ("accept", "Deleted 'Standup'", True),
    ("decline", "Declined: nothing was deleted.", False),
    ("cancel", "Cancelled: nothing was deleted.", False),
])
async def test_notes_delete_accept_decline_cancel(stack, action, expected, deleted) -> None:
    gateway, _wire = stack
    elicit = elicitation_answering(action=action, content=pick_first)
    async with legacy(gateway, elicitation_callback=elicit) as client:
        result = await client.call_tool("notes_delete", {"workspaceUri": "file:///work/notes", "title": "Standup"})
        assert result.content[0].text.startswith(expected), result.content[0].text
        scan = await client.call_tool("workspace_scan", {"workspaceUri": "file:///work/notes"})
    assert len(elicit.seen) == 1 and elicit.seen[0].mode in (None, "form")
    assert (scan.content[0].text.count("Standup") == 1) == deleted


async def test_workspace_scan_asks_for_live_roots(stack) -> None:
    gateway, wire = stack
    async with legacy(gateway) as client:
        result = await client.call_tool("workspace_scan", {})
    assert result.structured_content["scanned"] == ["file:///work/notes"]
    assert len(result.structured_content["notes"]) == 4
    assert len(wire.sent("roots/list")) == 1


async def test_connect_service_url_mode(stack) -> None:
    gateway, wire = stack
    completions: list[Any] = []

    async def elicit(context, params):
        assert params.mode == "url" and params.elicitation_id
        async with aiohttp.ClientSession() as http:  # the user completes the out-of-band step
            async with http.post(params.url + "/complete") as resp:
                assert resp.status == 200
        return types.ElicitResult(action="accept")

    async def on_message(message) -> None:
        completions.append(message)
    async with legacy(gateway, elicitation_callback=elicit, message_handler=on_message) as client:
        result = await client.call_tool("connect_service", {"service": "calendar"})
    assert result.content[0].text == "Connected calendar."
    (asked,) = wire.sent("elicitation/create")
    (done,) = wire.sent("notifications/elicitation/complete")
    assert done["params"]["elicitationId"] == asked["params"]["elicitationId"]
    assert [(m.method, m.params.elicitation_id) for m in completions
            if isinstance(m, types.ElicitCompleteNotification)] == [(done["method"], done["params"]["elicitationId"])]


async def test_notes_timeline_and_its_ui_resource(stack) -> None:
    gateway, _wire = stack
    ui = advertise(UI, {"mimeTypes": [UI_MIME]})
    async with legacy(gateway, extensions=[ui]) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        result = await client.call_tool("notes_timeline", {})
        page = await client.read_resource("ui://notes/timeline.html")
    assert tools["notes_timeline"].meta["ui"]["resourceUri"] == "ui://notes/timeline.html"
    assert [n["title"] for n in result.structured_content["notes"]]
    assert page.contents[0].mime_type == UI_MIME and "<html" in page.contents[0].text.lower()


async def test_ui_resource_without_the_extension_names_it(stack) -> None:
    gateway, _wire = stack
    async with legacy(gateway) as client:
        with pytest.raises(MCPError) as raised:
            await client.read_resource("ui://notes/timeline.html")
    assert raised.value.error.code == -32021 and UI in json.dumps(raised.value.error.data)


async def test_the_mrtr_prompt_and_its_completion(stack) -> None:
    gateway, _wire = stack
    elicit = elicitation_answering(content={"tone": "terse"})
    async with legacy(gateway, elicitation_callback=elicit) as client:
        prompt = await client.get_prompt("draft_note", {"topic": "standups"})
        done = await client.complete(types.PromptReference(type="ref/prompt", name="draft_note"),
                                     {"name": "topic", "value": "Sta"})
    assert prompt.messages[0].content.text == "Write a short terse note about standups."
    assert done.completion.values == ["Standup"]


async def test_logging_and_progress(stack) -> None:
    gateway, wire = stack
    logs: list[Any] = []
    progress: list[float] = []

    async def on_log(params) -> None:
        logs.append(params)

    async def on_progress(value, total, message) -> None:
        progress.append(value)
    async with legacy(gateway, logging_callback=on_log) as client:
        await client.set_logging_level("debug")
        result = await client.call_tool("slow_count", {"n": 3}, progress_callback=on_progress)
    assert not result.is_error
    assert progress == sorted(progress) and len(progress) >= 3
    assert logs and all(entry.level for entry in logs)
    meta = next(b for b in wire.upstream if b.get("method") == "tools/call")["params"]["_meta"]
    assert meta["io.modelcontextprotocol/logLevel"] == "debug" and "progressToken" in meta
    assert not [b for b in wire.upstream if b.get("method") == "logging/setLevel"]


async def test_cancellation_mid_bridge(stack) -> None:
    gateway, wire = stack
    asked = asyncio.Event()

    async def stuck(context, params):
        asked.set()
        await anyio.sleep_forever()

    async with Client(url_of(gateway), mode="legacy", sampling_callback=stuck) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "summarize_repo", {})
            await asked.wait()
            tg.cancel_scope.cancel()
        gw = gateway.app[GATEWAY]
        await until(lambda: not any(rt.exchanges for rt in gw.runtimes.values()))
        assert not any(rt.exchanges for rt in gw.runtimes.values())
        assert (await client.call_tool("echo", {"text": "still here"})).content[0].text == "still here"
    cancels = wire.sent("notifications/cancelled")
    assert [c["params"]["requestId"] for c in cancels] == [wire.sent("sampling/createMessage")[0]["id"]]


async def test_delete_on_close_and_unknown_session_then_reinitialize(stack) -> None:
    gateway, _wire = stack
    gw = gateway.app[GATEWAY]
    async with legacy(gateway) as client:
        await client.list_tools()
        (first,) = list(gw.runtimes)
        await gw.end_session(first)  # expired/deleted behind the client's back
        with pytest.raises(MCPError) as raised:
            await client.call_tool("echo", {"text": "x"})  # 404: the client learns the session is gone
        assert "session not found" in raised.value.error.message
    async with legacy(gateway) as client:  # a fresh initialize works
        assert (await client.call_tool("echo", {"text": "again"})).content[0].text == "again"
        (second,) = list(gw.runtimes)
        assert second != first and await gw.store.get_session(second) is not None
    assert await gw.store.get_session(second) is None and not gw.runtimes  # the SDK's DELETE ended it


async def test_resumption_after_a_dropped_stream(stack) -> None:
    gateway, wire = stack
    proxy = DroppingProxy(gateway.port)
    port = await proxy.start()
    calls = 0

    async def dropping_sampling(context, params):
        nonlocal calls
        calls += 1
        if calls == 1:
            proxy.drop()  # both the POST's SSE stream and the GET stream break mid-bridge
        return await sampling(context, params)
    try:
        client = Client(f"http://127.0.0.1:{port}/mcp", mode="legacy", sampling_callback=dropping_sampling)
        async with client:
            result = await client.call_tool("summarize_repo", {})
    finally:
        await proxy.close()
    assert not result.is_error and result.structured_content["summary"]
    assert proxy.drops >= 1 and proxy.resumes >= 1 and calls == 2
    assert len([b for b in wire.upstream if b.get("method") == "tools/call"]) == 3  # not re-run: resumed


async def test_subscribe_and_list_changed_arrive_on_the_get_stream(stack) -> None:
    gateway, wire = stack
    seen: list[Any] = []
    arrived = asyncio.Event()

    async def on_message(message) -> None:
        seen.append(message)
        methods = {getattr(m, "method", None) for m in seen}
        if {"notifications/resources/updated", "notifications/resources/list_changed"} <= methods:
            arrived.set()
    note = "file:///work/notes/2026/standup-a.md"
    elicit = elicitation_answering(content=pick_first)
    async with legacy(gateway, elicitation_callback=elicit, message_handler=on_message) as client:
        assert client.server_capabilities.resources.subscribe
        await client.subscribe_resource(note)
        result = await client.call_tool("notes_delete", {"workspaceUri": "file:///work/notes", "title": "Standup"})
        assert result.structured_content == {"deleted": "n-1001"}
        await asyncio.wait_for(arrived.wait(), 10)
        await client.unsubscribe_resource(note)
    updated = [m for m in seen if getattr(m, "method", None) == "notifications/resources/updated"]
    assert updated[0].params.uri == note
    listens = [b for b in wire.upstream if b.get("method") == "subscriptions/listen"]
    assert any(b["params"]["notifications"].get("resourceSubscriptions") == [note] for b in listens)


async def test_a_modern_client_on_the_same_url_is_passed_through(stack) -> None:
    gateway, wire = stack
    async with Client(url_of(gateway), mode="auto", sampling_callback=sampling) as client:
        assert client.protocol_version == "2026-07-28"
        assert (await client.call_tool("echo", {"text": "modern"})).content[0].text == "modern"
        result = await client.call_tool("summarize_repo", {})  # the client drives MRTR itself
    assert result.structured_content["files"]
    gw = gateway.app[GATEWAY]
    assert not gw.runtimes and not wire.sent("sampling/createMessage")  # no session, no translation
