"""The stdio door: ``python -m gateway stdio`` for desktop clients that launch their MCP servers as subprocesses.

Newline-delimited JSON-RPC comes in on stdin and goes out on stdout (logs only on stderr, 2025-11-25
basic/transports §stdio); one legacy session lives as long as the process. The door decides nothing: it is a
client of the gateway's own Streamable HTTP endpoint, served in this process on a Unix socket in a private
temporary folder, so every session rule, limit, pin, bridge round and telemetry record is the one the HTTP door
has. Each message is POSTed as it arrives (a bridged request's SSE stream stays open while the client answers
the sampling, elicitation or roots request it carries on stdin), every message of every answer is written as
one line, and the session's GET stream carries what is not tied to a request. When stdin closes the session is
deleted, which cancels its rounds upstream, and the process exits.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

from adapters.doors import Transport
from gateway.config.settings import GatewayConfig
from gateway.http.app import create_app
from gateway.http.door import DoorClient
from gateway.http.keys import GATEWAY


async def _stdin_lines() -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        if line.strip():
            yield line


async def serve_stdio(config: GatewayConfig, authorization: str | None) -> None:
    runner = web.AppRunner(create_app(config), access_log=None)
    await runner.setup()
    try:
        with tempfile.TemporaryDirectory(prefix="mcp-gateway-stdio-") as folder:
            path = f"{folder}/gateway.sock"
            await web.UnixSite(runner, path).start()
            async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=path)) as http:
                door = DoorClient(http, authorization, sys.stdout.buffer,
                                  door=runner.app[GATEWAY].door_headers(Transport.STDIO))
                try:
                    async for line in _stdin_lines():
                        await door.handle_line(line)
                finally:
                    await door.close()
    finally:
        await runner.cleanup()
