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
import contextlib
import json
import logging
import sys
import tempfile
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web

from adapters.jsonwire import dumps, loads
from gateway.config.settings import GatewayConfig
from gateway.http.app import create_app

log = logging.getLogger("gateway.stdio")
ENDPOINT = "http://localhost/mcp"  # a loopback name: the endpoint's Host check admits it
_ACCEPT = "application/json, text/event-stream"


class StdioDoor:
    """Moves one client's messages between stdin/stdout and the in-process endpoint."""

    def __init__(self, http: aiohttp.ClientSession, authorization: str | None, out: Any) -> None:
        self.http, self.authorization, self.out = http, authorization, out
        self.session_id: str | None = None
        self.version: str | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    def headers(self) -> dict[str, str]:
        out = {"Accept": _ACCEPT, "Content-Type": "application/json"}
        if self.session_id:
            out["Mcp-Session-Id"] = self.session_id
        if self.version:
            out["MCP-Protocol-Version"] = self.version
        if self.authorization:
            out["Authorization"] = self.authorization
        return out

    def write(self, message: Any) -> None:
        self.out.write(dumps(message) + b"\n")
        self.out.flush()

    async def handle_line(self, line: bytes) -> None:
        try:
            message = loads(line)
        except ValueError:
            self.write({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "not JSON"}})
            return
        if isinstance(message, dict) and message.get("method") == "initialize":
            await self.post(message)  # nothing else may be sent before the handshake's answer
            return
        self.spawn(self.post(message))
        if isinstance(message, dict) and message.get("method") == "notifications/initialized":
            self.spawn(self.follow_get_stream())

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def post(self, message: Any) -> None:
        async with self.http.post(ENDPOINT, data=dumps(message), headers=self.headers()) as resp:
            if isinstance(message, dict) and message.get("method") == "initialize":
                self.remember_session(resp)
            if resp.content_type == "text/event-stream":
                async for event in _sse_messages(resp):
                    self.write(event)
            elif resp.content_type == "application/json":
                answer = await resp.json(loads=loads)
                self.note_version(message, answer)
                self.write(answer)

    def remember_session(self, resp: aiohttp.ClientResponse) -> None:
        self.session_id = resp.headers.get("Mcp-Session-Id") or self.session_id

    def note_version(self, message: Any, answer: Any) -> None:
        if isinstance(message, dict) and message.get("method") == "initialize" and isinstance(answer, dict):
            self.version = (answer.get("result") or {}).get("protocolVersion")

    async def follow_get_stream(self) -> None:
        """The session's standalone stream: notifications not tied to a request (list_changed, updates)."""
        headers = {**self.headers(), "Accept": "text/event-stream"}
        with contextlib.suppress(aiohttp.ClientError):
            async with self.http.get(ENDPOINT, headers=headers) as resp:
                async for event in _sse_messages(resp):
                    self.write(event)

    async def close(self) -> None:
        """stdin closed: end the session (its rounds are cancelled upstream), then everything still running."""
        if self.session_id:
            with contextlib.suppress(aiohttp.ClientError):
                async with self.http.delete(ENDPOINT, headers=self.headers()):
                    pass
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def _sse_messages(resp: aiohttp.ClientResponse) -> AsyncIterator[Any]:
    data: list[str] = []
    async for raw in resp.content:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
        elif not line and data:
            text, data = "\n".join(data), []
            if text:
                yield json.loads(text)


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
                door = StdioDoor(http, authorization, sys.stdout.buffer)
                try:
                    async for line in _stdin_lines():
                        await door.handle_line(line)
                finally:
                    await door.close()
    finally:
        await runner.cleanup()
