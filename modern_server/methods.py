"""The 2026-07-28 method table: one coroutine per method, looked up by name.

A method absent from :data:`METHODS` (including the removed ``initialize``, ``ping``, ``logging/setLevel``,
``resources/subscribe`` ...) is -32601 (2026-07-28 basic §Error Codes, HTTP 404). Request shapes are checked with the
official ``mcp_types`` validators on the client's own dict; the dict itself is what handlers read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from mcp_types import methods as wire_methods
from pydantic import ValidationError

from modern_server import SUPPORTED_VERSIONS, taskrun
from modern_server.errors import METHOD_NOT_FOUND, McpError
from modern_server.framework import UI_EXTENSION, Context, Registry
from modern_server.tasks import EXTENSION as TASKS_EXTENSION
from modern_server.wire import check_param_headers

# server/utilities/caching: every cacheable result carries ttlMs and cacheScope. Discover, prompts and
# templates do not vary by caller; the tool list varies with the request's declared extensions and the
# resource list with the principal's notes, so those two are private.
CACHE = {
    "server/discover": (300_000, "public"),
    "tools/list": (60_000, "private"),
    "prompts/list": (300_000, "public"),
    "resources/list": (30_000, "private"),
    "resources/templates/list": (300_000, "public"),
}
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"

Method = Callable[[Context, Registry], Awaitable[dict[str, Any]]]


def check_shape(ctx: Context) -> None:
    if ctx.env.method in taskrun.TASK_METHODS:
        taskrun.check_params(ctx)
        return
    try:
        wire_methods.validate_client_request(ctx.env.method, ctx.env.version, ctx.params)
    except KeyError:
        raise McpError(METHOD_NOT_FOUND, f"method {ctx.env.method!r} is not served") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise McpError.invalid_params(f"invalid params: {where}: {first['msg']}") from None


def _cached(method: str, result: dict[str, Any]) -> dict[str, Any]:
    ttl, scope = CACHE[method]
    result.update(ttlMs=ttl, cacheScope=scope)
    return result


def _no_cursor(ctx: Context) -> None:
    # The core never issues a cursor (every list fits one page), so any cursor is one it did not mint.
    if ctx.params.get("cursor") is not None:
        raise McpError.invalid_params("unknown cursor: this server returns every list in one page")


async def discover(ctx: Context, reg: Registry) -> dict[str, Any]:
    caps = {
        "tools": {"listChanged": True},
        "prompts": {"listChanged": True},
        "resources": {"subscribe": True, "listChanged": True},
        "completions": {},
        "logging": {},
        # ext-tasks §Capability Negotiation: no settings are defined, so an empty object. Offered to every
        # caller, so the answer stays the same for all (a public cache entry); a task is still only ever
        # returned to a request that declares the extension itself.
        "extensions": {UI_EXTENSION: {"mimeTypes": ["text/html;profile=mcp-app"]}, TASKS_EXTENSION: {}},
    }
    result = {"supportedVersions": list(SUPPORTED_VERSIONS), "capabilities": caps,
              "instructions": ctx.services.config.instructions}
    return _cached("server/discover", result)


async def tools_list(ctx: Context, reg: Registry) -> dict[str, Any]:
    _no_cursor(ctx)
    tools = [reg.tools[name].describe(ctx) for name in sorted(reg.tools)]
    return _cached("tools/list", {"tools": tools})


async def tools_call(ctx: Context, reg: Registry) -> dict[str, Any]:
    tool = reg.tools.get(ctx.params["name"])
    if tool is None:
        raise McpError.invalid_params(f"unknown tool {ctx.params['name']!r}")
    if not isinstance(ctx.params.get("arguments", {}), dict):
        raise McpError.invalid_params("arguments must be an object")
    check_param_headers(tool.input_schema, ctx.params.get("arguments") or {}, ctx.headers)
    return await tool.handler(ctx)


async def prompts_list(ctx: Context, reg: Registry) -> dict[str, Any]:
    _no_cursor(ctx)
    return _cached("prompts/list", {"prompts": [reg.prompts[n].describe() for n in sorted(reg.prompts)]})


async def prompts_get(ctx: Context, reg: Registry) -> dict[str, Any]:
    prompt = reg.prompts.get(ctx.params["name"])
    if prompt is None:
        raise McpError.invalid_params(f"unknown prompt {ctx.params['name']!r}")
    return await prompt.handler(ctx)


async def resources_list(ctx: Context, reg: Registry) -> dict[str, Any]:
    _no_cursor(ctx)
    listed = [entry for family in reg.resources for entry in family.listing(ctx)]
    return _cached("resources/list", {"resources": sorted(listed, key=lambda r: r["uri"])})


async def templates_list(ctx: Context, reg: Registry) -> dict[str, Any]:
    _no_cursor(ctx)
    templates = sorted((t for f in reg.resources for t in f.templates), key=lambda t: t["uriTemplate"])
    return _cached("resources/templates/list", {"resourceTemplates": templates})


async def resources_read(ctx: Context, reg: Registry) -> dict[str, Any]:
    uri = ctx.params["uri"]
    for family in reg.resources:
        result = await family.read(ctx, uri)
        if result is not None:
            return result
    # resources §Error Handling (2026): not found is -32602; the retired -32002 is never emitted.
    raise McpError.invalid_params(f"resource not found: {uri}", {"uri": uri})


async def complete(ctx: Context, reg: Registry) -> dict[str, Any]:
    ref, argument = ctx.params["ref"], ctx.params["argument"]
    prompt = reg.prompts.get(ref.get("name", "")) if ref.get("type") == "ref/prompt" else None
    if prompt is None or prompt.complete is None:
        raise McpError.invalid_params(f"nothing to complete for {ref!r}")
    values = prompt.complete(ctx, argument["name"], argument.get("value", ""))
    return {"completion": {"values": values[:100], "total": len(values), "hasMore": len(values) > 100}}


async def listen(ctx: Context, reg: Registry) -> dict[str, Any]:
    """subscriptions/listen: ack first, then only the opted-in notifications, until the client leaves."""
    wanted = dict(ctx.params["notifications"])
    honoured = {k: v for k, v in wanted.items()
                if k in ("toolsListChanged", "promptsListChanged", "resourcesListChanged", "resourceSubscriptions")}
    if "taskIds" in wanted:  # the tasks extension's filter (ext-tasks §Task Status Notifications)
        honoured["taskIds"] = taskrun.subscribable(ctx, wanted["taskIds"])
    meta = {SUBSCRIPTION_ID: ctx.env.id}
    queue = ctx.services.bus.subscribe()
    try:
        await ctx.emit("notifications/subscriptions/acknowledged", {"notifications": honoured, "_meta": meta})
        for task in taskrun.snapshots(ctx, honoured.get("taskIds", ())):
            await ctx.emit("notifications/tasks", {**task, "_meta": meta})
        while (event := await queue.get()) is not None:
            method, params, audience = event
            if (audience is None or audience == ctx.principal) and _wanted(honoured, method, params):
                await ctx.emit(method, {**params, "_meta": meta})
    finally:
        ctx.services.bus.unsubscribe(queue)
    # subscriptions §Endings: a graceful end answers the listen request itself.
    return {"_meta": dict(meta)}


def _wanted(filt: dict[str, Any], method: str, params: dict[str, Any]) -> bool:
    flags = {"notifications/tools/list_changed": "toolsListChanged",
             "notifications/prompts/list_changed": "promptsListChanged",
             "notifications/resources/list_changed": "resourcesListChanged"}
    if method in flags:
        return bool(filt.get(flags[method]))
    if method == "notifications/tasks":
        return params.get("taskId") in filt.get("taskIds", ())
    if method == "notifications/resources/updated":
        uri = params.get("uri", "")
        return any(uri == w or uri.startswith(w.rstrip("/") + "/") for w in filt.get("resourceSubscriptions", []))
    return False


METHODS: dict[str, Method] = {
    "server/discover": discover,
    "tools/list": tools_list,
    "tools/call": tools_call,
    "prompts/list": prompts_list,
    "prompts/get": prompts_get,
    "resources/list": resources_list,
    "resources/templates/list": templates_list,
    "resources/read": resources_read,
    "completion/complete": complete,
    "subscriptions/listen": listen,
    **taskrun.METHODS,
}

__all__ = ["METHODS", "check_shape"]
