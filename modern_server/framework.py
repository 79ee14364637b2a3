"""The core's request context, MRTR helpers and registries of tools, prompts and resources.

A handler receives a :class:`Context` and returns a result dict; :func:`finish` stamps ``resultType`` and
``_meta["io.modelcontextprotocol/serverInfo"]`` on every success (basic/index §ResultType). Handlers raise
:class:`~modern_server.errors.McpError` for failures. Everything a handler may depend on (principal, clock,
store, sealer, the request's own declared capabilities) arrives through the context: the core derives nothing
from earlier requests (basic/index §Statelessness).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from mcp_types import SERVER_INFO_META_KEY

from modern_server.config import CoreConfig
from modern_server.errors import McpError
from modern_server.sealing import Opened, Sealer
from modern_server.storage import Store
from modern_server.wire import LOG_LEVELS, Envelope

UI_EXTENSION = "io.modelcontextprotocol/ui"
UI_MIME = "text/html;profile=mcp-app"
# basic/patterns/mrtr: only these three methods may answer input_required.
MRTR_METHODS = frozenset({"tools/call", "prompts/get", "resources/read"})

Emit = Callable[[str, dict[str, Any]], Awaitable[None]]


Event = tuple[str, dict[str, Any], str | None]  # method, params, the only principal it may reach (None: anyone)


class Bus:
    """Change notifications for ``subscriptions/listen`` streams in this process (None ends a stream)."""

    def __init__(self) -> None:
        self._queues: set[asyncio.Queue[Event | None]] = set()

    def subscribe(self) -> asyncio.Queue[Event | None]:
        queue: asyncio.Queue[Event | None] = asyncio.Queue(maxsize=1000)
        self._queues.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[Any]) -> None:
        self._queues.discard(queue)

    def publish(self, method: str, params: dict[str, Any], principal: str | None = None) -> None:
        for queue in list(self._queues):
            if not queue.full():  # a listener that stopped reading loses events rather than memory
                queue.put_nowait((method, params, principal))

    def close(self) -> None:
        for queue in list(self._queues):
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(None)


@dataclass
class Services:
    """Process-wide collaborators, built once by the app and shared by every request."""

    config: CoreConfig
    sealer: Sealer
    store: Store
    clock: Callable[[], float]
    new_id: Callable[[], str]
    bus: Bus = field(default_factory=Bus)
    # Tasks this process is running (task id -> its runner) and this process's name on the leases it holds.
    running: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    instance: str = field(default_factory=lambda: secrets.token_hex(8))


@dataclass
class Context:
    """One request: its validated envelope, its principal, and a way to stream notifications."""

    env: Envelope
    principal: str
    services: Services
    emit: Emit
    base_url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)  # lower-cased; only for header mirroring checks

    @property
    def params(self) -> Mapping[str, Any]:
        return self.env.params

    @property
    def caps(self) -> Mapping[str, Any]:
        return self.env.capabilities

    def declares(self, *path: str) -> bool:
        """True when the request's own clientCapabilities contain ``path`` (e.g. "elicitation", "url")."""
        node: Any = self.caps
        for key in path:
            if not isinstance(node, Mapping) or key not in node:
                return False
            node = node[key]
        return True

    def declares_extension(self, name: str) -> bool:
        exts = self.caps.get("extensions")
        return isinstance(exts, Mapping) and name in exts

    def declares_form_elicitation(self) -> bool:
        # client/elicitation §Capabilities: an empty object means form support.
        elicitation = self.caps.get("elicitation")
        return isinstance(elicitation, Mapping) and ("form" in elicitation or "url" not in elicitation)

    def require(self, ok: bool, required: dict[str, Any], why: str) -> None:
        if not ok:
            raise McpError.missing_capability(required, why)

    def input_responses(self) -> Mapping[str, Any]:
        responses = self.params.get("inputResponses")
        if responses is None:
            return {}
        if not isinstance(responses, Mapping):
            raise McpError.invalid_params("inputResponses must be an object")
        return responses

    def open_state(self, bound: Any) -> Opened | None:
        """The verified state of this retry, or None on a first round (mrtr §Retry)."""
        state = self.params.get("requestState")
        if state is None:
            return None
        return self.services.sealer.open(state, principal=self.principal, method=self.env.method, bound=bound)

    def seal(self, bound: Any, phase: str, values: Mapping[str, Any] | None = None, nonce: str | None = None) -> str:
        return self.services.sealer.seal(principal=self.principal, method=self.env.method, bound=bound,
                                         phase=phase, values=values, nonce=nonce)

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        if self.env.progress_token is None:  # progress §: opt-in by progressToken only
            return
        params: dict[str, Any] = {"progressToken": self.env.progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self.emit("notifications/progress", params)

    async def log(self, level: str, data: Any, logger: str = "core") -> None:
        # logging §: only when this request opted in, and only at or above its level.
        wanted = self.env.log_level
        if wanted is None or LOG_LEVELS.index(level) < LOG_LEVELS.index(wanted):
            return
        await self.emit("notifications/message", {"level": level, "logger": logger, "data": data})


def arguments(ctx: Context) -> Mapping[str, Any]:
    return ctx.params.get("arguments") or {}


def bound_call(ctx: Context) -> dict[str, Any]:
    """What a tools/call state is bound to: the tool name and the original arguments (mrtr §Security)."""
    return {"name": ctx.params["name"], "arguments": dict(arguments(ctx))}


def next_round(ctx: Context, opened: Opened | None) -> int:
    """The round this request starts; the flow's round limit bounds how often a server may ask."""
    current = 1 if opened is None else int(opened.values.get("round", 1)) + 1
    if current > ctx.services.config.max_rounds:
        raise McpError.invalid_params(f"round limit reached ({ctx.services.config.max_rounds} rounds); start over")
    return current


def text_result(text: str, structured: Any = None, *, error: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if structured is not None:
        result["structuredContent"] = structured
    if error:
        result["isError"] = True
    return result


def input_required(requests: Mapping[str, Any] | None, state: str | None) -> dict[str, Any]:
    """An InputRequiredResult; at least one of the two fields is present (mrtr §InputRequiredResult)."""
    result: dict[str, Any] = {"resultType": "input_required"}
    if requests:
        result["inputRequests"] = dict(requests)
    if state is not None:
        result["requestState"] = state
    return result


def finish(result: dict[str, Any], services: Services) -> dict[str, Any]:
    result.setdefault("resultType", "complete")
    meta = result.setdefault("_meta", {})
    meta[SERVER_INFO_META_KEY] = {"name": services.config.server_name, "version": services.config.server_version}
    return result


Handler = Callable[[Context], Awaitable[dict[str, Any]]]
# A task's body (modern_server.taskrun.Run -> CallToolResult); typed loosely here to keep this module first.
Job = Callable[[Any], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]
    handler: Handler
    title: str | None = None
    output_schema: dict[str, Any] | None = None
    ui_resource: str | None = None
    annotations: dict[str, Any] | None = None
    job: Job | None = None  # set: the tool can run as a task (the tasks extension); its body, found on resume

    def describe(self, ctx: Context) -> dict[str, Any]:
        tool: dict[str, Any] = {"name": self.name, "description": self.description, "inputSchema": self.input_schema}
        for key, value in (("title", self.title), ("outputSchema", self.output_schema),
                           ("annotations", self.annotations)):
            if value is not None:
                tool[key] = value
        # MCP Apps §Tool linkage: only a client that declared the extension is shown the UI link.
        if self.ui_resource and ctx.declares_extension(UI_EXTENSION):
            tool["_meta"] = {"ui": {"resourceUri": self.ui_resource}}
        return tool


@dataclass(frozen=True)
class Prompt:
    name: str
    description: str
    arguments: tuple[dict[str, Any], ...]
    handler: Handler
    complete: Callable[[Context, str, str], list[str]] | None = None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "arguments": list(self.arguments)}


@dataclass(frozen=True)
class ResourceFamily:
    """A set of resources: what ``resources/list`` shows, and a reader that claims the URIs it owns."""

    listing: Callable[[Context], list[dict[str, Any]]]
    read: Callable[[Context, str], Awaitable[dict[str, Any] | None]]
    templates: tuple[dict[str, Any], ...] = ()


@dataclass
class Registry:
    tools: dict[str, Tool] = field(default_factory=dict)
    prompts: dict[str, Prompt] = field(default_factory=dict)
    resources: list[ResourceFamily] = field(default_factory=list)


# The app keys the core's handlers (and the tools' own pages) read their services through.
SERVICES = web.AppKey("services", Services)
REGISTRY = web.AppKey("registry", Registry)
TOKENS: web.AppKey[Mapping[str, str]] = web.AppKey("tokens", dict)  # bearer token -> principal
