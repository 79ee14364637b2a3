"""The stdio door, driven by the official Python SDK's stdio client in legacy mode: it launches
``python -m gateway stdio`` (embedded core) and runs the bridged flows with live sampling, elicitation and
roots over stdin/stdout; closing stdin ends the session."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.gateway.http.test_e2e_sdk import elicitation_answering, roots, sampling
from tests.waiting import until_hung_up

ROOT = Path(__file__).resolve().parents[3]


def door(tmp_path: Path, *args: str) -> StdioServerParameters:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return StdioServerParameters(command=sys.executable, args=["-m", "gateway", "stdio", *args], env=env,
                                 cwd=str(tmp_path))


def client(tmp_path: Path, **callbacks: object) -> Client:
    return Client(door(tmp_path), mode="legacy", sampling_callback=sampling, list_roots_callback=roots,
                  **callbacks)  # type: ignore[arg-type]


async def test_bridged_flows_over_stdio(tmp_path: Path) -> None:
    confirm = elicitation_answering(content=lambda params: {
        "note_id": params.requested_schema["properties"]["note_id"]["enum"][0], "confirm": True})
    async with client(tmp_path, elicitation_callback=confirm) as session:
        summary = await session.call_tool("summarize_repo", {})
        scan = await session.call_tool("workspace_scan", {})
        deleted = await session.call_tool("notes_delete", {"workspaceUri": "file:///work/notes",
                                                           "title": "Roadmap"})
    assert not summary.is_error and "parser" in summary.content[0].text
    assert scan.structured_content["scanned"] == ["file:///work/notes"]
    assert not deleted.is_error and len(confirm.seen) == 1


async def test_a_prompt_that_elicits_over_stdio(tmp_path: Path) -> None:
    tone = elicitation_answering(content={"tone": "formal"})
    async with client(tmp_path, elicitation_callback=tone) as session:
        prompt = await session.get_prompt("draft_note", {"topic": "release"})
    assert len(tone.seen) == 1 and isinstance(prompt.messages[0].content, types.TextContent)


async def test_closing_stdin_ends_the_session_and_closes_the_upstream_request(tmp_path: Path) -> None:
    import asyncio
    import json

    from aiohttp import web

    from tests.gateway.conftest import DISCOVER

    closed = asyncio.Event()

    async def upstream(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body["method"] == "server/discover":
            return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": DISCOVER})
        if body["method"] == "tools/call":  # never answered: only its close (the 2026 cancel) ends it
            await until_hung_up(request)
            closed.set()
            return web.Response()
        return web.json_response({"jsonrpc": "2.0", "id": body["id"], "error": {"code": -32601, "message": "no"}},
                                 status=404)
    app = web.Application()
    app.router.add_post("/mcp", upstream)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/mcp"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "stdio", "--upstream", url, cwd=str(tmp_path),
        env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None

    def send(message: dict[str, object]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(message).encode() + b"\n")
    try:
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
        assert json.loads(await proc.stdout.readline())["result"]["protocolVersion"] == "2025-11-25"
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "t", "arguments": {}}})
        send({"jsonrpc": "2.0", "id": 3, "method": "bogus"})  # answered while the call hangs
        assert json.loads(await proc.stdout.readline())["error"]["code"] == -32601
        proc.stdin.close()  # the desktop client is gone
        await asyncio.wait_for(closed.wait(), 30)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
        await runner.cleanup()


async def test_a_2024_11_05_client_keeps_its_revision_over_stdio(tmp_path: Path) -> None:
    import asyncio
    import json

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "stdio", cwd=str(tmp_path), env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "old-desktop", "version": "1"}}},
             {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
              "params": {"name": "echo", "arguments": {"text": "hi"}}}]
    try:
        proc.stdin.write(json.dumps(lines[0]).encode() + b"\n")
        init = json.loads(await asyncio.wait_for(proc.stdout.readline(), 60))
        proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in lines[1:]))
        answer = json.loads(await asyncio.wait_for(proc.stdout.readline(), 60))
        while answer.get("id") != 2:  # anything not tied to the call (a notification) comes first
            answer = json.loads(await asyncio.wait_for(proc.stdout.readline(), 60))
        proc.stdin.close()
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
    assert init["result"]["protocolVersion"] == "2024-11-05"
    assert answer["id"] == 2 and answer["result"]["content"][0]["text"] == "hi"


def test_lines_over_the_limit_are_reported_once_and_dropped_to_their_newline() -> None:
    from gateway.ops.stdio import Lines, Oversized

    lines = Lines(limit=10)
    assert lines.feed(b'{"id":1}\n{"i') == [b'{"id":1}']
    assert lines.feed(b'd":2,"x":"') == [Oversized(b'{"id":2,"x":"')]  # reported as soon as it passes 10 bytes
    assert lines.feed(b"y" * 100_000) == [] and len(lines.buffer) == 0  # the rest is never kept
    assert lines.feed(b'yy"}\n\n  \n{"id":3}\n[1') == [b'{"id":3}']
    assert lines.finish() == [b"[1"]  # a last line without its newline, at the end of stdin


def test_the_refusal_of_a_line_too_large_carries_the_id_its_first_bytes_show() -> None:
    from adapters.doors import ID_SCAN_BYTES, scan_id, too_large

    refused = too_large(b'{"jsonrpc":"2.0","method":"tools/call","id":"req-9","params":{"x":"' + b"a" * 10, 1024)
    assert refused["id"] == "req-9" and refused["error"]["code"] == -32600
    assert refused["error"]["data"] == {"limit": "max_request_bytes", "value": 1024}
    assert scan_id(b'{"params":{"id":5,"s":"\\"id\\":6"},"id":7}') == 7  # nested and quoted ids are not its
    assert scan_id(b'{"method":"id","id":12') is None  # the number may go on past the prefix
    assert scan_id(b'{"id":null}') is None and scan_id(b'{"id":true}') is None and scan_id(b'[{"id":1}]') is None
    assert too_large(b'{"params":{"p":"' + b"a" * ID_SCAN_BYTES + b'"},"id":1}', 1024)["id"] is None  # too far


async def test_a_line_too_large_is_refused_under_its_id_and_the_session_goes_on(tmp_path: Path) -> None:
    """Issue #38, 10: a line over 16 MiB ended the process (StreamReader's limit), and one over max_request_bytes
    was refused with id null although its id was readable."""
    import asyncio
    import json

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "stdio", cwd=str(tmp_path), env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None

    async def send(message: dict[str, object], pad: int = 0) -> None:
        assert proc.stdin is not None
        if pad:
            message = {**message, "params": {"name": "echo", "arguments": {"text": "x" * pad}}}
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        await proc.stdin.drain()

    async def answer(ident: object) -> dict[str, object]:
        assert proc.stdout is not None
        while True:
            message = json.loads(await asyncio.wait_for(proc.stdout.readline(), 60))
            if message.get("id") == ident or "method" not in message:
                return message
    try:
        await send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
        assert "result" in await answer(1)
        await send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await send({"jsonrpc": "2.0", "id": "two-mb", "method": "tools/call"}, pad=2 << 20)
        refused = await answer("two-mb")
        assert refused["id"] == "two-mb" and refused["error"]["code"] == -32600  # type: ignore[index]
        await send({"jsonrpc": "2.0", "id": 17, "method": "tools/call"}, pad=17 << 20)
        assert (await answer(17))["error"]["data"]["limit"] == "max_request_bytes"  # type: ignore[index]
        await send({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"text": "still here"}}})
        assert (await answer(3))["result"]["content"][0]["text"] == "still here"  # type: ignore[index]
        proc.stdin.close()
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        assert b"Traceback" not in await proc.stderr.read()  # type: ignore[union-attr]
    finally:
        if proc.returncode is None:
            proc.kill()
