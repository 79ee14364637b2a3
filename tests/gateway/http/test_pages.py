"""The embedded core's out-of-band page (connect_service's URL elicitation) is named from, and served on, the
gateway's own address: the official SDK client's user opens it there, never at the core's loopback port."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import aiohttp
import mcp_types as types
import pytest
from aiohttp import web
from mcp import Client

from gateway.config.settings import load_config
from gateway.http.app import create_app


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_the_connect_page_is_on_the_gateways_port(tmp_path: Path) -> None:
    port = _free_port()
    config = load_config(port=port, usage={"db": str(tmp_path / "usage.sqlite3")})
    runner = web.AppRunner(create_app(config))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    opened: list[str] = []

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        opened.append(params.url)
        async with aiohttp.ClientSession() as http:  # the user opens the page, then completes the step
            async with http.get(params.url) as page:
                assert page.status == 200 and "Connect" in await page.text()
            async with http.post(params.url + "/complete") as done:
                assert done.status == 200
        return types.ElicitResult(action="accept")
    try:
        async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy", elicitation_callback=elicit) as client:
            result = await client.call_tool("connect_service", {"service": "calendar"})
    finally:
        await runner.cleanup()
    assert result.content[0].text == "Connected calendar."
    (url,) = opened
    assert url.startswith(f"http://127.0.0.1:{port}/connect/")


def test_the_public_base_is_the_configured_url_or_the_listen_address() -> None:
    assert load_config(port=8808).public_base() == "http://127.0.0.1:8808"
    assert load_config(host="0.0.0.0", port=9000).public_base() == "http://127.0.0.1:9000"
    assert load_config(public_url="https://gw.example/", port=1).public_base() == "https://gw.example"
    assert load_config(port=0).public_base() is None  # an ephemeral port: not known before it listens


@pytest.fixture
async def gateway_port(tmp_path: Path) -> Any:
    """A gateway with the embedded core, listening on a loopback port."""
    port = _free_port()
    config = load_config(port=port, usage={"db": str(tmp_path / "usage.sqlite3")})
    runner = web.AppRunner(create_app(config))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield port
    finally:
        await runner.cleanup()


async def raw(port: int, method: str, path: str, *headers: str, body: bytes = b"") -> tuple[int, bytes]:
    """One HTTP/1.1 request written byte for byte (no client normalizes or re-encodes its path): status, body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = [f"{method} {path} HTTP/1.1", *(headers or (f"Host: 127.0.0.1:{port}",)),
            f"Content-Length: {len(body)}", "Connection: close", "", ""]
    writer.write("\r\n".join(head).encode() + body)
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


MCP_BODY = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}).encode()


@pytest.mark.parametrize("path", ["/connect/..%2Fmcp", "/connect/%2e%2e%2Fmcp", "/connect/%2E%2E%2fmcp",
                                  "/connect/x%252F..%252F..%252Fmcp", "/connect/..%2F..%2Fmcp/complete",
                                  "/connect/%2e%2e", "/connect/ok%3Fx/complete"])
async def test_the_connect_relay_cannot_be_steered_to_another_core_path(gateway_port: int, path: str) -> None:
    """Issue #38, 11: an encoded ``/`` or ``..`` in the connection id once reached the core's other paths
    (``/mcp`` above all, past every gateway check); only the two page paths with a plain id are relayed."""
    for method in ("GET", "POST"):
        status, body = await raw(gateway_port, method, path, f"Host: 127.0.0.1:{gateway_port}",
                                 "Content-Type: application/json", "Accept: application/json, text/event-stream",
                                 body=MCP_BODY)
        assert status in (404, 405), (method, path, status, body)
        assert b"jsonrpc" not in body and b"Connect" not in body


async def test_the_connect_relay_serves_its_own_pages(gateway_port: int) -> None:
    status, body = await raw(gateway_port, "GET", "/connect/Ab-c_9")
    assert status == 200 and b"/connect/Ab-c_9/complete" in body
    status, _ = await raw(gateway_port, "POST", "/connect/Ab-c_9/complete")
    assert status == 404  # relayed: the core knows no such pending connection


@pytest.mark.parametrize("header", ["Host: evil.example", "Host: evil.example:80",
                                    "Origin: http://evil.example", "Origin: null"])
async def test_the_connect_relay_checks_host_and_origin_as_mcp_does(gateway_port: int, header: str) -> None:
    """2025-11-25 basic/transports §Security Warning (DNS rebinding): the pages are on the gateway's address."""
    headers = [header] if header.startswith("Host") else [f"Host: 127.0.0.1:{gateway_port}", header]
    for method, path in (("GET", "/connect/Ab-c_9"), ("POST", "/connect/Ab-c_9/complete")):
        status, body = await raw(gateway_port, method, path, *headers)
        assert status == 403 and json.loads(body)["error"]["code"] == -32600, (method, header, body)
    own = [f"Host: 127.0.0.1:{gateway_port}", f"Origin: http://127.0.0.1:{gateway_port}"]
    assert (await raw(gateway_port, "GET", "/connect/Ab-c_9", *own))[0] == 200
