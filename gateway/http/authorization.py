"""The doors' OAuth 2.1 side: protected-resource metadata routes and the token check before classification.

With ``[gateway.auth]`` on, every request to ``/mcp`` (and so every door's relayed message) carries an access
token the gateway verifies itself (2025-11-25 basic/authorization "Access Token Usage"); the session is bound to
the token's principal (``adapters.authz.Principal.key``), never to the header, and the token goes no further:
the upstream gets the gateway's own credential, never the client's (2026-07-28 basic/authorization, Security
Considerations, "Access Token Privilege Restriction").
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from adapters import authz
from adapters.classify import Policy, check_origin_host
from gateway.auth.resource import door_servers
from gateway.auth.validator import TokenValidator
from gateway.config.settings import GatewayConfig
from gateway.http.answers import rejection_response
from gateway.http.keys import AUTHZ
from gateway.http.streams import json_response
from gateway.telemetry.usage import USAGE

log = logging.getLogger("gateway.auth")


DOOR_SERVERS = web.AppKey("door_servers", dict[str, authz.ResourceServer])  # door path -> its description


def add_auth_routes(app: web.Application, config: GatewayConfig) -> None:
    """RFC 9728 §3: each door's metadata at its path-suffixed well-known URL; the bare well-known URL describes
    ``/mcp`` (clients that strip the path find the main door)."""
    servers = app[DOOR_SERVERS] = door_servers(config)
    for server in servers.values():
        app.router.add_get(authz.metadata_path(server.resource), _metadata_handler(server))
        app.router.add_route("OPTIONS", authz.metadata_path(server.resource), _metadata_preflight)
    app.router.add_get(authz.WELL_KNOWN, _metadata_handler(servers["/mcp"]))
    app.router.add_route("OPTIONS", authz.WELL_KNOWN, _metadata_preflight)


def _metadata_handler(server: authz.ResourceServer) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    document = authz.metadata(server)

    async def metadata(request: web.Request) -> web.StreamResponse:
        # Public and cacheable: browser-based clients read it cross-origin (RFC 9728 §3.1).
        return json_response(document, 200, (("Cache-Control", "max-age=300"),
                                              ("Access-Control-Allow-Origin", "*")))

    return metadata


async def _metadata_preflight(request: web.Request) -> web.StreamResponse:
    """The CORS preflight a browser sends before reading the metadata with a non-safelisted header (the
    TypeScript SDK sends ``MCP-Protocol-Version``): the document is public and read without credentials, so any
    origin may read it with the headers it asks for. Without this answer the browser's first read fails."""
    asked = request.headers.get("Access-Control-Request-Headers", "")
    return web.Response(status=204, headers={"Access-Control-Allow-Origin": "*",
                                             "Access-Control-Allow-Methods": "GET, HEAD",
                                             "Access-Control-Allow-Headers": asked or "MCP-Protocol-Version",
                                             "Access-Control-Max-Age": "3600"})


async def authorized(request: web.Request, validator: TokenValidator, policy: Policy | None,
                     ident: Callable[[], object] = lambda: None) -> authz.Principal | web.Response:
    """The verified principal (its ``key`` binds the session; its claims match peers and tool scopes), or the
    refusal to send: the Host/Origin check first (a rebinding page learns nothing of the token rules), then the
    token."""
    if policy is not None:
        refused = check_origin_host(request.headers, policy)
        if refused is not None:
            return rejection_response(refused)
    outcome = await validator.authenticate(request.headers.get("authorization"))
    if isinstance(outcome, authz.Failure):
        return _refuse(request.app, validator.server, outcome, "/mcp", ident())
    return outcome


async def door_principal(request: web.Request, door: str) -> str | web.StreamResponse | None:
    """At a door's entry (``/sse``, ``/ws``, ``/messages``): with ``[gateway.auth]`` on, the verified principal
    of the request's token, or the refusal naming that door's own metadata (so a client that connected to
    ``/sse`` is sent to ``/sse``'s, whose ``resource`` is the URL it connected to); off, None. The Origin and
    Host were checked by the door already."""
    validator = request.app.get(AUTHZ)
    if validator is None:
        return None
    outcome = await validator.authenticate(request.headers.get("authorization"))
    if isinstance(outcome, authz.Failure):
        return _refuse(request.app, request.app[DOOR_SERVERS][door], outcome, door, None)
    return outcome.key


def _refuse(app: web.Application, server: authz.ResourceServer, failure: authz.Failure, door: str,
            ident: object) -> web.Response:
    """The one place a refused token becomes an answer: logged when it is an outage (the operator's to fix),
    counted by cause and door in ``/metrics``, answered with the door's challenge."""
    if failure.cause is authz.Cause.UNAVAILABLE:
        log.warning("token not checked: %s", failure.detail)
    recorder = app.get(USAGE)
    if recorder is not None and recorder.metrics is not None:
        recorder.metrics.authorization_refused(failure.cause.value, door)
    return rejection_response(authz.refusal(server, failure, ident))
