"""``connect_service``: URL-mode elicitation (client/elicitation §URL mode, 2026-07-28).

Round 1 records a pending connection (an unguessable id bound to the principal) and asks the user to open the core's own
``/connect/<id>`` page. ``accept`` only means consent: on retry the core checks its own record of the out-of-band step.
Done -> complete. Not yet -> a ``requestState``-only result (the client retries after a backoff) rather than the same
URL again, so the user is not re-prompted (2026-07-28 client §Elicitation, URL mode). The page completes the step with
``POST /connect/<id>/complete``, which must carry the same principal's credentials.
"""

from __future__ import annotations

import html
from typing import Any

from aiohttp import web

from modern_server.auth import Unauthorized, principal_for
from modern_server.errors import McpError
from modern_server.framework import (
    SERVICES,
    TOKENS,
    Context,
    Tool,
    arguments,
    bound_call,
    input_required,
    next_round,
    text_result,
)

KEY = "connect"
SERVICES_OFFERED = ("calendar", "issue-tracker", "storage")


def _url(ctx: Context, conn_id: str) -> str:
    return f"{ctx.base_url}/connect/{conn_id}"


async def connect_service(ctx: Context) -> dict[str, Any]:
    ctx.require(ctx.declares("elicitation", "url"), {"elicitation": {"url": {}}},
                "connect_service sends the user to a URL (URL-mode elicitation)")
    service = arguments(ctx).get("service")
    if service not in SERVICES_OFFERED:
        raise McpError.invalid_params(f"service must be one of {list(SERVICES_OFFERED)}")
    opened = ctx.open_state(bound_call(ctx))
    if opened is None:
        return _ask(ctx, service)
    conn_id = opened.values["conn"]
    answer = ctx.input_responses().get(KEY)
    if isinstance(answer, dict) and answer.get("action") in ("decline", "cancel"):
        return text_result(f"Not connected: the user chose {answer['action']}.", {"connected": False}, error=True)
    record = ctx.services.store.connection(conn_id)
    if record is not None and record[0] == ctx.principal and record[2]:
        return text_result(f"Connected {service}.", {"connected": True, "service": service})
    if ctx.services.clock() >= opened.values.get("until", 0):
        return text_result(f"Not connected: the page was not completed within {ctx.services.config.state_ttl_seconds:g}"
                           " seconds; call the tool again for a new link.", {"connected": False}, error=True)
    # A waiting round asks nothing, so it keeps the round number: only rounds that ask count against max_rounds
    # (the gateway's bridge counts the same way). Its bound is the deadline fixed at the first round instead.
    return input_required(None, ctx.seal(bound_call(ctx), "wait", opened.values))


def _ask(ctx: Context, service: str) -> dict[str, Any]:
    """Round 1: record the pending connection and send the user to its page. The whole wait for the page is
    bounded by ``until`` (the first round's time + ``state_ttl_seconds``), however often the client retries."""
    conn_id = ctx.services.new_id()
    ctx.services.store.open_connection(conn_id, ctx.principal, service)
    request = {"method": "elicitation/create", "params": {
        "mode": "url", "url": _url(ctx, conn_id), "message": f"Open this page to connect {service} to your account."}}
    values = {"round": next_round(ctx, None), "conn": conn_id,
              "until": ctx.services.clock() + ctx.services.config.state_ttl_seconds}
    return input_required({KEY: request}, ctx.seal(bound_call(ctx), "wait", values))

def add_routes(routes: web.RouteTableDef) -> None:
    @routes.get("/connect/{conn_id}")
    async def page(request: web.Request) -> web.Response:
        conn_id = html.escape(request.match_info["conn_id"])
        body = (f"<!doctype html><title>Connect</title><form method=post action='/connect/{conn_id}/complete'>"
                "<button>Connect</button></form>")
        return web.Response(text=body, content_type="text/html")

    @routes.post("/connect/{conn_id}/complete")
    async def complete(request: web.Request) -> web.Response:
        services = request.app[SERVICES]
        try:
            principal = principal_for(request.headers.get("Authorization"), request.app[TOKENS],
                                      services.config.anonymous_principal)
        except Unauthorized as exc:
            raise web.HTTPUnauthorized(text=str(exc)) from None
        if not services.store.complete_connection(request.match_info["conn_id"], principal):
            raise web.HTTPNotFound(text="no pending connection of yours with that id")
        return web.Response(text="connected")


TOOLS = (
    Tool("connect_service", "Connect an external service to your account through a page the user opens.", {
        "type": "object", "properties": {"service": {"type": "string", "enum": list(SERVICES_OFFERED)}},
        "required": ["service"]}, connect_service, title="Connect a service"),
)
