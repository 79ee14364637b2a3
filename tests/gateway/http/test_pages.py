"""The embedded core's out-of-band page (connect_service's URL elicitation) is named from, and served on, the
gateway's own address: the official SDK client's user opens it there, never at the core's loopback port."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import aiohttp
import mcp_types as types
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
