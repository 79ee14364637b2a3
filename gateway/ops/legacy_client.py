"""A small raw HTTP/SSE 2025-11-25 client and an in-process gateway to drive it through, shared by
``python -m gateway check``, ``python -m gateway replay`` and the pytest plugin (``gateway.ops.testing``).

Owns the legacy session (``initialize``, ``Mcp-Session-Id``, requests answered as JSON or SSE, ``DELETE`` at the
end), the answering of the live requests the gateway's bridge sends on a request's stream (through an
``Answerer`` the caller gives: canned answers for ``check``, a scenario's for ``replay``, the test's callbacks
for the plugin), the log of those live requests, and the round counter fed by the gateway's tap.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from adapters.errors import METHOD_NOT_FOUND
from gateway.auth.credentials import UpstreamCredentials
from gateway.config.settings import TraceConfig, load_config
from gateway.errors import OpsError
from gateway.http.app import create_app
from gateway.http.door import sse_messages
from gateway.telemetry.trace import Tee, Tracer
from kit import check as C

ACCEPT = "application/json, text/event-stream"
MAX_PAGES = 100  # a server whose cursors never end must not hold a client forever

# (method, params) -> the JSON-RPC result for a live request, or None to answer METHOD_NOT_FOUND (not handled).
Answerer = Callable[[str, Mapping[str, Any]], "dict[str, Any] | None"]


class Unusable(OpsError):
    """The server cannot be driven (unreachable, not 2026-07-28, initialize refused): exit 2 with this message."""


@dataclass(frozen=True, slots=True)
class LiveRequest:
    """One request the gateway sent the client on a request's stream (sampling, elicitation, roots, ping)."""

    method: str
    params: Mapping[str, Any]


# --- the in-process gateway ---------------------------------------------------------------------------------
@dataclass
class Rounds:
    """Counts the upstream ``method`` requests the gateway sends (its tap): one per MRTR round."""

    count: int = 0
    method: str = "tools/call"

    def __call__(self, direction: str, message: Any) -> None:
        if direction == "upstream" and isinstance(message, Mapping) and message.get("method") == self.method:
            self.count += 1


@asynccontextmanager
async def served_gateway(upstream: str, tap: Rounds, trace: TraceConfig | None = None,
                         credentials: UpstreamCredentials | None = None,
                         headers: Mapping[str, str] | None = None) -> AsyncIterator[str]:
    """The gateway for ``upstream`` on 127.0.0.1:<ephemeral>; yields its /mcp URL. Usage recording is off: a
    check, a replay or a test is not traffic. With ``trace`` (a file), the run's translation trace is written
    there, as ``serve --trace`` writes it. ``credentials`` and ``headers``: what the upstream is sent (the user's
    login and extra headers, as the stdio door sends them)."""
    config = load_config(upstream_url=upstream, port=0, usage={"enabled": False})
    tracer = None if trace is None or trace.file is None else Tracer(trace.file, max_bytes=trace.max_bytes,
                                                                      content=trace.content)
    runner = web.AppRunner(create_app(config, tap=tap if tracer is None else Tee(tracer, tap), credentials=credentials,
                                      upstream_headers=headers), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}/mcp"
    finally:
        await runner.cleanup()
        if tracer is not None:
            tracer.close()  # after the app's end: its last answers are traced


# --- the 2025-11-25 client ----------------------------------------------------------------------------------
@dataclass
class LegacyClient:
    """One 2025-11-25 session over raw HTTP/SSE (2025-11-25 basic/transports §Streamable HTTP)."""

    http: aiohttp.ClientSession
    url: str
    answer: Answerer
    authorization: str | None = None
    session_id: str = ""
    next_id: int = 0
    requests: list[LiveRequest] = field(default_factory=list)

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
        if self.authorization:
            headers["Authorization"] = self.authorization
        if self.session_id:
            headers.update({"Mcp-Session-Id": self.session_id, "MCP-Protocol-Version": C.LEGACY})
        return headers

    async def _send(self, message: Mapping[str, Any]) -> None:
        async with self.http.post(self.url, data=json.dumps(message), headers=self._headers()) as resp:
            await resp.read()

    async def initialize(self) -> dict[str, Any]:
        params = {"protocolVersion": C.LEGACY, "capabilities": C.CLIENT_CAPABILITIES, "clientInfo": C.CLIENT_INFO}
        message = await self.request("initialize", params)
        if "result" not in message:
            raise Unusable(f"the gateway refused initialize: {message.get('error')}")
        await self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return message["result"]

    async def list_all(self, method: str, key: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        cursor = None
        for _page in range(MAX_PAGES):
            message = await self.request(method, {"cursor": cursor} if cursor else {})
            result = message.get("result") or {}
            items.extend(result.get(key) or [])
            if not (cursor := result.get("nextCursor")):
                break
        return items

    async def request(self, method: str, params: Mapping[str, Any],
                      inputs: list[C.InputKind] | None = None) -> dict[str, Any]:
        """The response to one request; ``inputs`` collects the input kinds the gateway asked for on its way
        (filled as they come, so a caller that gives up still knows them)."""
        self.next_id += 1
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": dict(params)}
        inputs = [] if inputs is None else inputs
        async with self.http.post(self.url, data=json.dumps(body), headers=self._headers()) as resp:
            if resp.headers.get("Mcp-Session-Id"):
                self.session_id = resp.headers["Mcp-Session-Id"]
            if resp.content_type != "text/event-stream":
                return dict(json.loads(await resp.read()))
            async for message in events(resp):
                if message.get("id") == self.next_id and ("result" in message or "error" in message):
                    return message
                if "method" in message and "id" in message:
                    await self._answer(message, inputs)
        raise ConnectionError(f"the stream for {method} ended without a response")

    async def _answer(self, message: Mapping[str, Any], inputs: list[C.InputKind]) -> None:
        method, params = message["method"], message.get("params") or {}
        self.requests.append(LiveRequest(method, params))
        kind = C.input_kind(method, params)
        if kind is not None and kind not in inputs:
            inputs.append(kind)
        result = {} if method == "ping" else self.answer(method, params)
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        reply.update({"result": result} if result is not None else
                     {"error": {"code": METHOD_NOT_FOUND, "message": f"the client does not answer {method}"}})
        await self._send(reply)

    async def cancel(self, reason: str) -> None:
        params = {"requestId": self.next_id, "reason": reason}
        await self._send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params})

    async def close(self) -> None:
        if self.session_id:
            async with self.http.delete(self.url, headers=self._headers()) as resp:
                await resp.read()


async def events(resp: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    """The JSON-RPC messages of an SSE body; priming events (an id and no data) are skipped."""
    async for message in sse_messages(resp):
        yield message
