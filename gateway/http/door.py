"""A door's client of the gateway's own Streamable HTTP endpoint.

Doors other than Streamable HTTP (stdio, HTTP+SSE) decide nothing of their own: each is a small client of the
endpoint, served in the same process, through which every message of its one session passes. So classification,
session rules, limits, pins, the bridge and telemetry are the endpoint's, with no second copy of any decision
(docs/design/doors.md#the-stdio-httpsse-and-websocket-doors-are-clients-of-the-streamable-http-door). A door gives
:class:`DoorClient` each line it receives and an ``out`` that carries every message the session answers (a line on
stdout, an SSE event)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any, Protocol

import aiohttp

from adapters.errors import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR
from adapters.jsonwire import dumps, loads
from adapters.protocol import is_request_id

log = logging.getLogger("gateway.door")
ENDPOINT = "http://localhost/mcp"  # a loopback name: the endpoint's Host check admits it
_ACCEPT = "application/json, text/event-stream"


class Out(Protocol):
    def write(self, data: bytes) -> Any: ...
    def flush(self) -> Any: ...


class DoorClient:
    """Moves one client's messages between stdin/stdout and the in-process endpoint."""

    def __init__(self, http: aiohttp.ClientSession, authorization: str | None, out: Out,
                 endpoint: str = ENDPOINT, host: str | None = None, door: dict[str, str] | None = None,
                 in_flight: int = 0) -> None:
        self.http, self.authorization, self.out, self.endpoint = http, authorization, out, endpoint
        self.host = host  # the Host the endpoint's rebinding check sees (a loopback name) when not the URL's
        self.door = door or {}  # names this door's transport to the endpoint (Gateway.door_headers)
        self.session_id: str | None = None
        self.version: str | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        # Messages served at once (0: unbounded): the door reads its client's next message only when one ends.
        self.slots = asyncio.Semaphore(in_flight) if in_flight else None
        self.closed = False

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
            self.write({"jsonrpc": "2.0", "id": None, "error": {"code": PARSE_ERROR, "message": "not JSON"}})
            return
        if isinstance(message, dict) and message.get("method") == "initialize":
            if self.session_id is None:
                await self.post(message)  # nothing else may be sent before the handshake's answer
            else:
                self.refuse(message, INVALID_REQUEST, "this connection already has a session: one per connection")
            return
        slot = await self.take_slot()
        if self.closed:  # the client left while this message waited for its turn
            slot.release()
            return
        self.spawn(self.post(message, slot))
        if isinstance(message, dict) and message.get("method") == "notifications/initialized":
            self.spawn(self.follow_get_stream())

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def take_slot(self) -> Slot:
        if self.slots is not None:
            await self.slots.acquire()
        return Slot(self.slots)

    def refuse(self, message: Any, code: int, text: str) -> None:
        """Answer a request the door could not pass on (a notification or answer has nobody to tell)."""
        ident = message.get("id") if isinstance(message, dict) else None
        if isinstance(message, dict) and "method" in message and is_request_id(ident):
            self.write({"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": text}})

    async def post(self, message: Any, slot: Slot | None = None) -> None:
        try:
            await self.exchange(message, slot or Slot(None))
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:  # the loopback request failed: still answered
            log.warning("door request failed: %s", exc)
            self.refuse(message, INTERNAL_ERROR, "the gateway could not serve this message: send it again")
        finally:
            if slot is not None:
                slot.release()

    async def exchange(self, message: Any, slot: Slot) -> None:
        async with self.http.post(self.endpoint, data=dumps(message), headers=self.headers()) as resp:
            if isinstance(message, dict) and message.get("method") == "initialize":
                self.remember_session(resp)
            if resp.content_type == "text/event-stream":
                async for event in sse_messages(resp):
                    if isinstance(event, dict) and "method" in event and "id" in event:
                        slot.release()  # a request to the client: this call now waits on it, so read on
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
        """stdin closed: end everything still running here (so none of it takes a connection the ending needs),
        then the session, whose rounds are cancelled upstream."""
        self.closed = True
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.session_id:
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with self.http.delete(self.endpoint, headers=self.headers()):
                    pass


class Slot:
    """One message's place among those a door serves at once; released once, when its answer is complete or it
    waits on the client."""

    def __init__(self, slots: asyncio.Semaphore | None) -> None:
        self.slots = slots

    def release(self) -> None:
        if self.slots is not None:
            self.slots.release()
            self.slots = None


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


