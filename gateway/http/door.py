"""A door's client of the gateway's own Streamable HTTP endpoint.

Doors other than Streamable HTTP (stdio, HTTP+SSE) decide nothing of their own: each is a small client of the
endpoint, served in the same process, through which every message of its one session passes. So
classification, session rules, limits, pins, the bridge and telemetry are the endpoint's, with no second copy
of any decision (docs/design.md §35). A door gives :class:`DoorClient` each line it receives and an ``out``
that carries every message the session answers (a line on stdout, an SSE event).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any, Protocol

import aiohttp

from adapters.jsonwire import dumps, loads

log = logging.getLogger("gateway.door")
ENDPOINT = "http://localhost/mcp"  # a loopback name: the endpoint's Host check admits it
_ACCEPT = "application/json, text/event-stream"


class Out(Protocol):
    def write(self, data: bytes) -> Any: ...
    def flush(self) -> Any: ...


class DoorClient:
    """Moves one client's messages between stdin/stdout and the in-process endpoint."""

    def __init__(self, http: aiohttp.ClientSession, authorization: str | None, out: Out,
                 endpoint: str = ENDPOINT, host: str | None = None, door: dict[str, str] | None = None) -> None:
        self.http, self.authorization, self.out, self.endpoint = http, authorization, out, endpoint
        self.host = host  # the Host the endpoint's rebinding check sees (a loopback name) when not the URL's
        self.door = door or {}  # names this door's transport to the endpoint (Gateway.door_headers)
        self.session_id: str | None = None
        self.version: str | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    def headers(self) -> dict[str, str]:
        out = {"Accept": _ACCEPT, "Content-Type": "application/json", **self.door}
        if self.session_id:
            out["Mcp-Session-Id"] = self.session_id
        if self.version:
            out["MCP-Protocol-Version"] = self.version
        if self.authorization:
            out["Authorization"] = self.authorization
        if self.host:
            out["Host"] = self.host
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
        async with self.http.post(self.endpoint, data=dumps(message), headers=self.headers()) as resp:
            if isinstance(message, dict) and message.get("method") == "initialize":
                self.remember_session(resp)
            if resp.content_type == "text/event-stream":
                async for event in sse_messages(resp):
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
            async with self.http.get(self.endpoint, headers=headers) as resp:
                async for event in sse_messages(resp):
                    self.write(event)

    async def close(self) -> None:
        """stdin closed: end the session (its rounds are cancelled upstream), then everything still running."""
        if self.session_id:
            with contextlib.suppress(aiohttp.ClientError):
                async with self.http.delete(self.endpoint, headers=self.headers()):
                    pass
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def sse_messages(resp: aiohttp.ClientResponse) -> AsyncIterator[Any]:
    """The JSON-RPC messages of an SSE body, as a client reads them; priming events (no data) are skipped."""
    data: list[str] = []
    async for raw in resp.content:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
        elif not line and data:
            text, data = "\n".join(data), []
            if text.strip():
                yield json.loads(text)


