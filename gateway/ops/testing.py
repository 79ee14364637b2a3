"""The pytest plugin for server authors: test a 2026-07-28 server as a 2025-11-25 client sees it through the
gateway (registered as the ``pytest11`` entry point ``gateway.ops.testing``; docs/howto/testing.md).

Owns three fixtures: ``legacy_upstream`` (the author overrides it: a URL, or an aiohttp ``web.Application``
served here on loopback at ``legacy_upstream_path``), ``legacy_gateway`` (an in-process gateway in front of it)
and ``legacy_client`` (the legacy client of :mod:`gateway.ops.legacy_client`, whose live requests are answered
by plain functions the test sets). Only pytest loads this module: nothing the gateway runs imports it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from adapters.client_answers import roots_result, sampling_result
from gateway.errors import OpsError
from gateway.ops.legacy_client import LegacyClient, LiveRequest, Rounds, served_gateway
from kit import check as C

SamplingCallback = Callable[[Mapping[str, Any]], "str | Mapping[str, Any]"]
ElicitationCallback = Callable[[Mapping[str, Any]], Mapping[str, Any]]
RootsCallback = Callable[[], "list[str] | list[Mapping[str, Any]]"]


class LegacyCallError(OpsError):
    """The gateway answered a JSON-RPC error; ``code``, ``message`` and ``data`` are that error's."""

    def __init__(self, method: str, error: Mapping[str, Any]) -> None:
        self.error = dict(error)
        self.code, self.message, self.data = error.get("code"), str(error.get("message", "")), error.get("data")
        super().__init__(f"{method}: JSON-RPC error {self.code}: {self.message}")


@dataclass(frozen=True, slots=True)
class LegacyGateway:
    url: str  # the gateway's /mcp, for a client of your own
    upstream: str
    rounds: Rounds  # upstream requests of the method last asked for: one per MRTR round


@dataclass
class LegacyTestClient:
    """A 2025-11-25 session through ``legacy_gateway``. Live requests with no callback set are refused
    (METHOD_NOT_FOUND), which the gateway reports as an error: an unexpected question fails the test loudly."""

    gateway: LegacyGateway
    http: aiohttp.ClientSession
    _on: dict[str, Callable[..., Any]] = field(default_factory=dict)
    _client: LegacyClient | None = None

    def on_sampling(self, callback: SamplingCallback) -> None:
        """``callback(params)`` returns the model's text or a full ``CreateMessageResult``."""
        self._on["sampling"] = callback

    def on_elicitation(self, callback: ElicitationCallback) -> None:
        """``callback(params)`` returns the ``ElicitResult``, e.g. ``{"action": "accept", "content": {...}}``."""
        self._on["elicitation"] = callback

    def on_roots(self, callback: RootsCallback) -> None:
        """``callback()`` returns root URIs (or full root objects)."""
        self._on["roots"] = callback

    @property
    def requests(self) -> list[LiveRequest]:
        """Every live request the bridge sent this client, in order."""
        return self.session.requests

    @property
    def rounds(self) -> int:
        """The upstream rounds of the last request (``tools/call``, ``prompts/get`` or ``resources/read``)."""
        return self.gateway.rounds.count

    @property
    def session(self) -> LegacyClient:
        if self._client is None:
            raise RuntimeError("the legacy client is not initialized")
        return self._client

    async def initialize(self) -> dict[str, Any]:
        self._client = LegacyClient(self.http, self.gateway.url, self._answer)
        return await self._client.initialize()

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return await self._call("tools/call", {"name": name, "arguments": dict(arguments or {})})

    async def get_prompt(self, name: str, arguments: Mapping[str, str] | None = None) -> dict[str, Any]:
        return await self._call("prompts/get", {"name": name, "arguments": dict(arguments or {})})

    async def read_resource(self, uri: str) -> dict[str, Any]:
        return await self._call("resources/read", {"uri": uri})

    async def list_tools(self) -> list[dict[str, Any]]:
        return await self.session.list_all("tools/list", "tools")

    async def _call(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        self.gateway.rounds.method, self.gateway.rounds.count = method, 0
        message = await self.session.request(method, params)
        if "error" in message:
            raise LegacyCallError(method, message["error"])
        return dict(message["result"])

    def _answer(self, method: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
        kind = C.input_kind(method, params)
        if kind is C.InputKind.SAMPLING and "sampling" in self._on:
            return sampling_result(self._on["sampling"](params))
        if kind in (C.InputKind.ELICITATION_FORM, C.InputKind.ELICITATION_URL) and "elicitation" in self._on:
            return dict(self._on["elicitation"](params))
        if kind is C.InputKind.ROOTS and "roots" in self._on:
            return roots_result(self._on["roots"]())
        return None


# --- the fixtures -------------------------------------------------------------------------------------------
@pytest.fixture
def legacy_upstream() -> str | web.Application:
    """Override it: your 2026-07-28 server's URL, or its aiohttp ``web.Application`` (served on loopback)."""
    pytest.fail("override the legacy_upstream fixture: return your 2026-07-28 server's URL or its aiohttp "
                "web.Application", pytrace=False)


@pytest.fixture
def legacy_upstream_path() -> str:
    """Where the MCP endpoint is in a ``web.Application`` given as ``legacy_upstream``."""
    return "/mcp"


@asynccontextmanager
async def _serve(upstream: str | web.Application, path: str) -> AsyncIterator[str]:
    if isinstance(upstream, str):
        yield upstream
        return
    runner = web.AppRunner(upstream, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}{path}"
    finally:
        await runner.cleanup()


@pytest_asyncio.fixture
async def legacy_gateway(legacy_upstream: str | web.Application,
                         legacy_upstream_path: str) -> AsyncIterator[LegacyGateway]:
    """An in-process gateway (usage recording off) on an ephemeral loopback port, in front of the upstream."""
    rounds = Rounds()
    async with _serve(legacy_upstream, legacy_upstream_path) as upstream, served_gateway(upstream, rounds) as url:
        yield LegacyGateway(url, upstream, rounds)


@pytest_asyncio.fixture
async def legacy_client(legacy_gateway: LegacyGateway) -> AsyncIterator[LegacyTestClient]:
    """An initialized 2025-11-25 session through ``legacy_gateway``, declaring sampling, elicitation and roots."""
    async with aiohttp.ClientSession() as http:
        client = LegacyTestClient(legacy_gateway, http)
        await client.initialize()
        try:
            yield client
        finally:
            await client.session.close()
