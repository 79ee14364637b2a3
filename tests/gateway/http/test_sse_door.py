"""The HTTP+SSE door (2024-11-05), driven by the official Python SDK's ``sse_client``: GET /sse names the POST
URL, every message comes on the stream, and the bridge works as on /mcp (live sampling, roots, elicitation)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import aiohttp
import mcp.client.session
import pytest
from aiohttp import web
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client

from adapters.doors import DOOR_HEADER
from gateway.config.settings import load_config
from gateway.http.app import create_app
from tests.gateway.http.test_e2e_sdk import elicitation_answering, roots, sampling


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _served(tmp_path: Path, **settings: Any) -> tuple[web.AppRunner, int]:
    port = _free_port()
    config = load_config(port=port, usage={"db": str(tmp_path / "usage.sqlite3")}, **settings)
    runner = web.AppRunner(create_app(config))
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


async def test_a_2024_11_05_client_keeps_its_revision_on_the_sse_door(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # The official SDK offers its newest handshake revision; pinned here to what a 2024-11-05 client sends.
    monkeypatch.setattr(mcp.client.session, "LATEST_HANDSHAKE_VERSION", "2024-11-05")
    runner, port = await _served(tmp_path)
    try:
        async with sse_client(f"http://127.0.0.1:{port}/sse") as (read, write), ClientSession(
                read, write, sampling_callback=sampling) as session:
            init = await session.initialize()
            summary = await session.call_tool("summarize_repo", {})  # live sampling, on a 2024-11-05 session
            echo = await session.call_tool("echo", {"text": "old"})
    finally:
        await runner.cleanup()
    assert init.protocol_version == "2024-11-05" and session.protocol_version == "2024-11-05"
    assert not summary.is_error and "parser" in summary.content[0].text
    assert not echo.is_error


INIT_2024 = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "old", "version": "1"}}}
_POST = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def _initialize_on_mcp(port: int, headers: dict[str, str]) -> str:
    async with aiohttp.ClientSession() as http, http.post(
            f"http://127.0.0.1:{port}/mcp", json=INIT_2024, headers={**_POST, **headers}) as resp:
        version: str = (await resp.json())["result"]["protocolVersion"]
        return version


async def test_2024_11_05_is_not_negotiated_on_mcp_unless_configured(tmp_path: Path) -> None:
    runner, port = await _served(tmp_path)
    try:
        plain = await _initialize_on_mcp(port, {})
        forged = await _initialize_on_mcp(port, {DOOR_HEADER: "http_sse guessed-key"})  # not this process's key
    finally:
        await runner.cleanup()
    runner, port = await _served(tmp_path, streamable_http_2024_11_05=True)
    try:
        allowed = await _initialize_on_mcp(port, {})
    finally:
        await runner.cleanup()
    assert (plain, forged, allowed) == ("2025-11-25", "2025-11-25", "2024-11-05")
