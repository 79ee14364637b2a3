"""Fixtures for the core's tests: a real core on loopback and a small raw-HTTP 2026-07-28 client.

Every response the client receives (JSON or each SSE event) is validated against the official 2026-07-28
schema when ``../shared/spec`` exists.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest

from modern_server.app import build_services, create_app
from modern_server.config import CoreConfig, StateKey, TokenEntry
from tests import schema

V = "2026-07-28"
ALICE, BOB = "alice-token", "bob-token"
ALL_CAPS = {"sampling": {}, "elicitation": {"form": {}, "url": {}}, "roots": {}}
NAME_PARAM = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri",
              "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def core_config(tmp_path: Any, **overrides: Any) -> CoreConfig:
    base: dict[str, Any] = dict(
        tokens=(TokenEntry(principal="alice", token_sha256=sha(ALICE)),
                TokenEntry(principal="bob", token_sha256=sha(BOB))),
        state_keys=(StateKey(id="k2", secret="second-secret"), StateKey(id="k1", secret="first-secret")),
        database=str(tmp_path / "core.sqlite3"),
        workspaces={"anonymous": ("file:///work/notes",), "alice": ("file:///work/notes",),
                    "bob": ("file:///work/notes/ideas",)},
    )
    base.update(overrides)
    return CoreConfig(**base)


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class Reply:
    status: int
    headers: Any
    raw: str
    messages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def final(self) -> dict[str, Any]:
        return self.messages[-1]

    @property
    def result(self) -> dict[str, Any]:
        assert "result" in self.final, self.final
        return self.final["result"]

    @property
    def error(self) -> dict[str, Any]:
        assert "error" in self.final, self.final
        return self.final["error"]


def parse_sse(text: str) -> list[dict[str, Any]]:
    events = []
    for block in text.split("\n\n"):
        data = [line[5:].lstrip() for line in block.splitlines() if line.startswith("data:")]
        if data:
            events.append(json.loads("\n".join(data)))
    return events


class CoreClient:
    """Speaks 2026-07-28 to the core: every request carries its own _meta and mirrored headers."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session, self.url, self._next = session, url, 0

    def meta(self, caps: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
        meta = {"io.modelcontextprotocol/protocolVersion": V,
                "io.modelcontextprotocol/clientCapabilities": ALL_CAPS if caps is None else caps,
                "io.modelcontextprotocol/clientInfo": {"name": "core-tests", "version": "1"}}
        meta.update(extra)
        return meta

    def headers(self, method: str, params: dict[str, Any], token: str | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
                   "MCP-Protocol-Version": V, "Mcp-Method": method}
        if method in NAME_PARAM and isinstance(params.get(NAME_PARAM[method]), str):
            headers["Mcp-Name"] = params[NAME_PARAM[method]]
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    async def post(self, body: Any, headers: dict[str, str], method: str | None = None) -> Reply:
        raw = body if isinstance(body, (bytes, str)) else json.dumps(body)
        async with self.session.post(self.url, data=raw, headers=headers) as resp:
            text = await resp.text()
            reply = Reply(resp.status, resp.headers, text)
        if reply.headers.get("Content-Type", "").startswith("text/event-stream"):
            reply.messages = parse_sse(text)
        elif text and reply.headers.get("Content-Type", "").startswith("application/json"):
            reply.messages = [json.loads(text)]
        for message in reply.messages:
            if "jsonrpc" in message:
                schema.check(V, message, method)
        return reply

    async def call(self, method: str, params: dict[str, Any] | None = None, *, caps: dict[str, Any] | None = None,
                   token: str | None = None, headers: dict[str, str] | None = None, ident: Any = None,
                   meta: dict[str, Any] | None = None) -> Reply:
        params = dict(params or {})
        params.setdefault("_meta", meta if meta is not None else self.meta(caps))
        self._next += 1
        body = {"jsonrpc": "2.0", "id": self._next if ident is None else ident, "method": method, "params": params}
        all_headers = self.headers(method, params, token)
        all_headers.update(headers or {})
        return await self.post(body, all_headers, method)

    async def tool(self, name: str, arguments: dict[str, Any] | None = None, **kw: Any) -> Reply:
        params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
        for key in ("inputResponses", "requestState"):
            if key in kw:
                params[key] = kw.pop(key)
        return await self.call("tools/call", params, **kw)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def config(tmp_path: Any) -> CoreConfig:
    return core_config(tmp_path)


@pytest.fixture
async def core(aiohttp_server: Any, config: CoreConfig, clock: Clock) -> Any:
    services = build_services(config, env={}, clock=clock)
    server = await aiohttp_server(create_app(config, services=services))  # TestServer cancels handlers on disconnect
    server.services = services
    return server


@pytest.fixture
async def client(core: Any) -> Any:
    async with aiohttp.ClientSession() as session:
        yield CoreClient(session, str(core.make_url("/mcp")))
