"""Shell-test fixtures: a scripted fake 2026-07-28 upstream (an aiohttp app on loopback) and a raw legacy client.

Every message the gateway sends the legacy client is validated against the 2025-11-25 schema, and every request
the fake upstream receives against the 2026-07-28 schema (when ``../shared/spec`` exists).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gateway.config.settings import load_config
from gateway.http.app import create_app
from gateway.session.store import InMemoryStore
from tests import schema
from tests.waiting import until_hung_up

ROOT = Path(__file__).resolve().parents[2]  # the checkout: subprocesses import the gateway from here

MODERN = "2026-07-28"
DISCOVER = {"resultType": "complete", "supportedVersions": [MODERN], "ttlMs": 60_000, "cacheScope": "public",
            "capabilities": {"tools": {"listChanged": True}, "resources": {"subscribe": True, "listChanged": True},
                             "prompts": {}, "logging": {}, "completions": {}},
            "instructions": "fake upstream", "_meta": {"io.modelcontextprotocol/serverInfo":
                                                        {"name": "fake", "version": "1"}}}
CAPS = {"sampling": {}, "elicitation": {"form": {}, "url": {}}, "roots": {"listChanged": True}}


async def hang_until_closed(request: web.Request, closed: asyncio.Event) -> None:
    """An upstream answer that never comes: wait until the gateway hangs up on ``request`` (the 2026 cancel), then
    set ``closed`` (also when the server cancels this handler on noticing the hang-up)."""
    try:
        await until_hung_up(request)
    finally:
        closed.set()


async def gateway_cli(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    """``python -m gateway ARGS`` in a subprocess run in ``tmp_path``: (exit status, stdout, stderr)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "gateway", *args, cwd=tmp_path, env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


def text(value: str) -> dict[str, Any]:
    return {"resultType": "complete", "content": [{"type": "text", "text": value}]}


@dataclass
class FakeUpstream:
    """``script[method](body, request)`` returns a result dict, an ``("error", {...})`` tuple, a list of
    messages to stream as SSE (the last one the response), or a ready ``web.StreamResponse``."""

    script: dict[str, Callable[..., Any]] = field(default_factory=dict)
    received: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    requests: list[web.Request] = field(default_factory=list)
    url: str = ""
    server: Any = None  # the aiohttp TestServer (a test may stop it)

    def calls(self, method: str) -> list[dict[str, Any]]:
        return [b for b in self.received if b.get("method") == method]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.received.append(body)
        self.headers.append(dict(request.headers))
        self.requests.append(request)
        if schema.available(MODERN):
            schema.check(MODERN, body)
        handler = self.script.get(body["method"])
        if handler is None:
            if body["method"] == "server/discover":
                return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": DISCOVER})
            return web.json_response({"jsonrpc": "2.0", "id": body["id"],
                                      "error": {"code": -32601, "message": "nope"}}, status=404)
        out = handler(body, request)
        if hasattr(out, "__await__"):
            out = await out
        if isinstance(out, web.StreamResponse):
            return out
        if isinstance(out, tuple):
            return web.json_response({"jsonrpc": "2.0", "id": body["id"], "error": out[1]},
                                     status=out[2] if len(out) > 2 else 200)
        if isinstance(out, list):
            return await self._sse(request, body, out)
        return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": out})

    async def _sse(self, request: web.Request, body: dict[str, Any], messages: list[Any]) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for item in messages:
            if callable(item):
                item = await item()
                if item is None:
                    continue
            if "method" not in item:
                item = {"jsonrpc": "2.0", "id": body["id"], "result": item}
            await resp.write(f"data: {json.dumps(item)}\n\n".encode())
        return resp


GEO_SCHEMA = {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}


def geo_upstream(upstream: FakeUpstream) -> None:
    """A tool ``geo`` whose ``region`` argument the upstream wants mirrored in ``Mcp-Param-Region``: a tools/call
    without it gets -32020 (2026-07-28 server/tools §x-mcp-header)."""
    upstream.script["tools/list"] = lambda b, r: {"resultType": "complete", "ttlMs": 0, "cacheScope": "public",
                                                  "tools": [{"name": "geo", "inputSchema": GEO_SCHEMA}]}

    def geo(body, request):
        if request.headers.get("Mcp-Param-Region") != body["params"]["arguments"]["region"]:
            return ("error", {"code": -32020, "message": "Mcp-Param-Region missing"}, 400)
        return text("ok " + request.headers["Mcp-Param-Region"])
    upstream.script["tools/call"] = geo


@pytest.fixture
async def upstream(aiohttp_server):
    fake = FakeUpstream()
    app = web.Application()
    app.router.add_post("/mcp", fake.handle)
    server = await aiohttp_server(app)
    fake.url, fake.server = str(server.make_url("/mcp")), server
    return fake


class Legacy:
    """A raw 2025-11-25 client over the aiohttp test client; checks every message it receives."""

    def __init__(self, client: Any, version: str = "2025-11-25") -> None:
        self.client, self.version, self.session_id = client, version, None
        self.next_id = 0
        self.methods: dict[Any, str] = {}

    def headers(self, **extra: str) -> dict[str, str]:
        out = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        if self.session_id:
            out["Mcp-Session-Id"] = self.session_id
            out["MCP-Protocol-Version"] = self.version
        out.update(extra)
        return out

    async def initialize(self, caps: dict[str, Any] | None = None, **headers: str) -> dict[str, Any]:
        resp = await self.post("initialize", {"protocolVersion": self.version, "capabilities": CAPS if caps is None
                                              else caps, "clientInfo": {"name": "raw", "version": "1"}}, **headers)
        assert resp.status == 200
        self.session_id = resp.headers["Mcp-Session-Id"]
        message = await resp.json()
        self.check(message)
        await self.notify("notifications/initialized")
        return message["result"]

    async def post(self, method: str, params: dict[str, Any] | None = None, **headers: str):
        self.next_id += 1
        self.methods[self.next_id] = method
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            body["params"] = params
        return await self.client.post("/mcp", json=body, headers=self.headers(**headers))

    async def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        resp = await self.post(method, params)
        assert resp.status == 200, await resp.text()
        if resp.content_type == "application/json":
            message = await resp.json()
        else:
            message = [m for m in await self.events(resp) if "id" in m and ("result" in m or "error" in m)][-1]
        self.check(message)
        return message

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> int:
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            body["params"] = params
        resp = await self.client.post("/mcp", json=body, headers=self.headers())
        return resp.status

    async def resume(self, last_event_id: str, **headers: str) -> Any:
        """``GET`` with ``Last-Event-ID``: the stream's later events (2025-11-25 basic/transports §Resumability)."""
        return await self.client.get("/mcp", headers={**self.headers(**headers), "Accept": "text/event-stream",
                                                      "Last-Event-ID": last_event_id})

    async def answer(self, ident: Any, result: Any = None, error: Any = None, **headers: str) -> int:
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": ident}
        body.update({"error": error} if error is not None else {"result": result})
        resp = await self.client.post("/mcp", json=body, headers=self.headers(**headers))
        return resp.status

    def check(self, message: dict[str, Any]) -> None:
        schema.check("2025-11-25", message, self.methods.get(message.get("id")))

    async def next_event(self, resp: Any) -> tuple[str | None, dict[str, Any] | None]:
        """(event id, message) of the next SSE event; message None for a priming event; (None, None) at EOF."""
        eid, data = None, []
        while True:
            line = await resp.content.readline()
            if not line:
                return None, None
            line = line.decode().rstrip("\n")
            if line.startswith("id: "):
                eid = line[4:]
            elif line.startswith("data: "):
                data.append(line[6:])
            elif line == "" and (eid or data):
                message = json.loads("".join(data)) if "".join(data) else None
                if message is not None:
                    self.check(message)
                return eid, message

    async def events(self, resp: Any) -> list[dict[str, Any]]:
        out = []
        while True:
            eid, message = await self.next_event(resp)
            if eid is None and message is None:
                return out
            if message is not None:
                out.append(message)


class SharedMemoryStore(InMemoryStore):
    """The in-process store standing in for one other processes read
    (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds): bridged rounds are saved on it as on
    Redis, so the save path runs, and can be made to fail, without a Redis."""

    shares_rounds = True


@pytest.fixture
def make_gateway(upstream, aiohttp_client):  # this order: the gateway is torn down before its upstream
    # session_store is a store instance; a ``store=`` override is the config's [gateway.store] section.
    async def make(session_store: InMemoryStore | None = None, **overrides: Any):
        config = load_config(upstream_url=overrides.pop("upstream_url", upstream.url), **overrides)
        return await aiohttp_client(create_app(config, store=session_store))
    return make


@pytest.fixture
async def legacy(make_gateway):
    return Legacy(await make_gateway())
