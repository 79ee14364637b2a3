"""The HTTP+SSE door (2024-11-05), driven by the official Python SDK's ``sse_client``: GET /sse names the POST
URL, every message comes on the stream, and the bridge works as on /mcp (live sampling, roots, elicitation)."""

from __future__ import annotations

import socket
from pathlib import Path

import aiohttp
from aiohttp import web
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client

from gateway.config.settings import load_config
from gateway.http.app import create_app
from tests.gateway.http.test_e2e_sdk import elicitation_answering, roots, sampling


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _served(tmp_path: Path) -> tuple[web.AppRunner, int]:
    port = _free_port()
    runner = web.AppRunner(create_app(load_config(port=port, usage={"db": str(tmp_path / "usage.sqlite3")})))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, port


async def test_bridged_flows_over_http_and_sse(tmp_path: Path) -> None:
    runner, port = await _served(tmp_path)
    confirm = elicitation_answering(content=lambda params: {
        "note_id": params.requested_schema["properties"]["note_id"]["enum"][0], "confirm": True})
    try:
        async with sse_client(f"http://127.0.0.1:{port}/sse") as (read, write), ClientSession(
                read, write, sampling_callback=sampling, list_roots_callback=roots,
                elicitation_callback=confirm) as session:
            await session.initialize()
            deleted = await session.call_tool("notes_delete", {"workspaceUri": "file:///work/notes",
                                                               "title": "Roadmap"})
            summary = await session.call_tool("summarize_repo", {})
            scan = await session.call_tool("workspace_scan", {})
            # The deletion's list_changed notifications come on the same stream: a last round trip lets them
            # arrive before the session closes (the SDK's reader refuses messages after its session ended).
            await session.send_ping()
    finally:
        await runner.cleanup()
    assert not summary.is_error and "parser" in summary.content[0].text
    assert scan.structured_content["scanned"] == ["file:///work/notes"]
    assert not deleted.is_error and len(confirm.seen) == 1


async def test_bad_input_on_the_sse_door_gets_its_error(tmp_path: Path) -> None:
    runner, port = await _served(tmp_path)
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            unknown = await http.post(f"{base}/messages?session_id=nope", data=b"{}")
            assert unknown.status == 404 and (await unknown.json())["error"]["code"] == -32600
            foreign = await http.get(f"{base}/sse", headers={"Origin": "http://evil.example"})
            assert foreign.status == 403
            async with http.get(f"{base}/sse") as stream:
                assert (await stream.content.readline()).startswith(b"event: endpoint")
                path = (await stream.content.readline()).decode().removeprefix("data: ").strip()
                broken = await http.post(base + path, data=b"{not json")
                assert broken.status == 400 and (await broken.json())["error"]["code"] == -32700
                other = await http.post(base + path, data=b"{}", headers={"Authorization": "Bearer someone"})
                assert other.status == 404  # another caller's session, as on /mcp
    finally:
        await runner.cleanup()
