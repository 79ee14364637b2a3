"""The core's aiohttp shell: decode the POST, run the ladder, dispatch, answer as JSON or SSE.

Protocol decisions live in ``wire``, ``methods`` and the tools; this module only moves bytes. Errors become
responses in one place (:func:`_error_response`) through the one status table in ``errors``. A response starts
as ``application/json`` and switches to ``text/event-stream`` the first time a handler emits a notification
(streamable-http §Responses). A client that closes the response stream has cancelled the request (2026
cancellation): the app runs with ``handler_cancellation`` so the handler task is cancelled with it.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from modern_server.auth import Unauthorized, principal_for
from modern_server.config import CoreConfig
from modern_server.errors import INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, McpError
from modern_server.framework import REGISTRY, SERVICES, TOKENS, Context, Registry, Services, finish
from modern_server.methods import METHODS, check_shape
from modern_server.oauth import Refused, Verifier, metadata_path
from modern_server.sealing import Sealer
from modern_server.storage import Store
from modern_server.taskrun import stop_runners
from modern_server.wire import Envelope, check_jsonrpc, validate

log = logging.getLogger("modern_server")


def _dumps(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _error_response(exc: McpError, ident: Any) -> web.Response:
    # basic/index: ids are never null; an error about a request whose id is unknown carries none.
    body: dict[str, Any] = {"jsonrpc": "2.0", "error": exc.to_error()}
    if isinstance(ident, (str, int)) and not isinstance(ident, bool):
        body["id"] = ident
    return web.Response(status=exc.http, body=_dumps(body), content_type="application/json")


class _Responder:
    """Holds the response until the first notification decides between JSON and SSE."""

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.stream: web.StreamResponse | None = None

    async def emit(self, method: str, params: dict[str, Any]) -> None:
        await self._event({"jsonrpc": "2.0", "method": method, "params": params})

    async def _event(self, message: dict[str, Any]) -> None:
        if self.stream is None:
            self.stream = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                                      "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
            await self.stream.prepare(self.request)
        await self.stream.write(b"event: message\ndata: " + _dumps(message) + b"\n\n")

    async def final(self, message: dict[str, Any], status: int = 200) -> web.StreamResponse:
        if self.stream is None:
            return web.Response(status=status, body=_dumps(message), content_type="application/json")
        await self._event(message)
        await self.stream.write_eof()
        return self.stream


LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


def _origin_of(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    default = {"http": 80, "https": 443}[parts.scheme]
    return f"{parts.scheme}://{parts.hostname}:{port or default}"


def origin_allowed(origin: str | None, config: CoreConfig) -> bool:
    """streamable-http §Security: a request that carries an ``Origin`` must come from one this server trusts.

    This is the DNS-rebinding defence: a page on ``evil.example`` whose name resolves to 127.0.0.1 still sends
    ``Origin: http://evil.example``. Trusted are loopback origins, the origin of ``public_url`` and
    ``allowed_origins``; requests without an ``Origin`` (non-browser clients) are not affected.
    """
    if origin is None:
        return True
    own = _origin_of(origin)
    if own is None:
        return False  # includes the opaque "null" origin
    if urlsplit(origin).hostname in LOOPBACK_HOSTS:
        return True
    return own in {_origin_of(url) for url in (config.public_url, *config.allowed_origins) if url}


def _check_http(request: web.Request) -> None:
    if request.content_type != "application/json":
        raise McpError(PARSE_ERROR, "Content-Type must be application/json", http=415)
    accept = request.headers.get("Accept", "")
    if "application/json" not in accept or "text/event-stream" not in accept:
        raise McpError(INVALID_REQUEST, "Accept must list application/json and text/event-stream", http=406)


async def _decode(request: web.Request) -> Any:
    try:
        return json.loads(await request.read())
    except (ValueError, UnicodeDecodeError):
        raise McpError(PARSE_ERROR, "the body is not valid JSON") from None


def _is_notification(body: Any) -> bool:
    return isinstance(body, dict) and isinstance(body.get("method"), str) and "id" not in body


async def handle_post(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    if not origin_allowed(request.headers.get("Origin"), services.config):
        return web.json_response({"error": "this Origin is not allowed"}, status=403)
    verifier = request.app.get(VERIFIER)
    try:
        if verifier is not None:
            principal = (await verifier.verify(request.headers.get("Authorization"))).sub
        else:
            principal = principal_for(request.headers.get("Authorization"), request.app[TOKENS],
                                      services.config.anonymous_principal)
    except Unauthorized as exc:
        return web.json_response({"error": str(exc)}, status=401, headers={"WWW-Authenticate": "Bearer"})
    except Refused as exc:
        assert verifier is not None
        challenge = {"WWW-Authenticate": verifier.challenge(exc)} if exc.status != 503 else {}
        return web.json_response({"error": str(exc)}, status=exc.status, headers=challenge)
    body: Any = None
    headers = {k.lower(): v for k, v in request.headers.items()}
    try:
        _check_http(request)
        body = await _decode(request)
        if _is_notification(body):
            return web.Response(status=202)  # streamable-http: a notification is never answered
        check_jsonrpc(body)
        env = validate(headers, body)
    except McpError as exc:
        return _error_response(exc, body.get("id") if isinstance(body, dict) else None)
    return await _run(request, env, principal, headers)


async def _run(request: web.Request, env: Envelope, principal: str, headers: dict[str, str]) -> web.StreamResponse:
    services, registry = request.app[SERVICES], request.app[REGISTRY]
    responder = _Responder(request)
    base = services.config.public_url or f"{request.scheme}://{request.host}"
    ctx = Context(env, principal, services, responder.emit, base_url=base, headers=headers)
    try:
        method = METHODS.get(env.method)
        check_shape(ctx)
        if method is None:
            raise McpError(METHOD_NOT_FOUND, f"method {env.method!r} is not served")
        result = finish(await method(ctx, registry), services)
        return await responder.final({"jsonrpc": "2.0", "id": env.id, "result": result})
    except McpError as exc:
        if responder.stream is None:
            return _error_response(exc, env.id)
        return await responder.final({"jsonrpc": "2.0", "id": env.id, "error": exc.to_error()})
    except (ConnectionResetError, OSError):
        # The client left (2026: that is a cancel); there is no one to answer, and nothing to log loudly.
        log.debug("client went away during %s", env.method)
        return responder.stream or web.Response(status=499)
    except Exception:
        log.exception("internal error in %s", env.method)
        error = McpError(INTERNAL_ERROR, "internal server error")
        return await responder.final({"jsonrpc": "2.0", "id": env.id, "error": error.to_error()}, status=500)


async def handle_not_allowed(request: web.Request) -> web.Response:
    # streamable-http §Earlier revisions: no GET stream and no sessions to DELETE in 2026-07-28.
    return web.Response(status=405, headers={"Allow": "POST"})


def build_services(config: CoreConfig, env: dict[str, str] | None = None,
                   clock: Callable[[], float] = time.time) -> Services:
    """Everything requests share; tests inject ``clock`` (and ``env`` for secrets)."""
    ring, active = config.key_ring(env if env is not None else dict(os.environ))
    sealer = Sealer(ring, active, config.state_ttl_seconds, clock=clock)
    store = Store(config.database_path(), seed=config.seed_notes)
    return Services(config, sealer, store, clock=clock, new_id=lambda: secrets.token_urlsafe(16))


def create_app(config: CoreConfig | None = None, *, services: Services | None = None,
               registry: Registry | None = None) -> web.Application:
    """The core as an aiohttp application serving ``/mcp`` (and the out-of-band ``/connect`` pages).

    ``registry`` replaces the default tools, prompts and resources (the conformance fixture uses it).
    """
    from modern_server.tools import build_registry
    from modern_server.tools import routes as tool_routes

    config = config or CoreConfig()
    app = web.Application(client_max_size=4 * 1024 * 1024)
    app[SERVICES] = services or build_services(config)
    app[TOKENS] = config.token_table(dict(os.environ))
    app[REGISTRY] = registry if registry is not None else build_registry()
    app.router.add_post("/mcp", handle_post)
    app.router.add_route("GET", "/mcp", handle_not_allowed)
    app.router.add_route("DELETE", "/mcp", handle_not_allowed)
    app.router.add_routes(tool_routes)
    if config.oauth is not None:
        _protect(app, Verifier(config.oauth, app[SERVICES].clock))
    app.on_shutdown.append(_end_listens)
    app.cleanup_ctx.append(_lifetime)
    return app


VERIFIER = web.AppKey("verifier", Verifier)


def _protect(app: web.Application, verifier: Verifier) -> None:
    """``[oauth]``: every POST needs a token issued for this core; its RFC 9728 metadata names the issuer."""
    app[VERIFIER] = verifier
    document = verifier.metadata()

    async def metadata(request: web.Request) -> web.Response:
        return web.json_response(document)

    app.router.add_get(metadata_path(verifier.config.resource), metadata)

    async def close(app: web.Application) -> None:
        await verifier.close()

    app.on_cleanup.append(close)


async def _end_listens(app: web.Application) -> None:
    app[SERVICES].bus.close()  # subscriptions §Endings: listen streams end gracefully with a result


async def _lifetime(app: web.Application):  # type: ignore[no-untyped-def]
    yield
    await stop_runners(app[SERVICES])  # before the store closes: their leases are released in it
    app[SERVICES].store.close()
