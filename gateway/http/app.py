"""``create_app`` and the handlers of the MCP endpoint (``POST/GET/DELETE /mcp``).

Each handler decodes, asks ``adapters`` what to do, and performs it. Classification (every HTTP status the
legacy side can see) happens once in :func:`handle_mcp`; exceptions become responses in one middleware.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

from aiohttp import web

from adapters.authz import Principal
from adapters.classify import (
    SINGLE_HEADERS,
    Accepted,
    HttpView,
    Policy,
    check_origin_host,
    classify,
    kept_while_answering,
    request_id,
    stands_on_held_record,
    touch_due,
)
from adapters.doors import Transport
from adapters.errors import INTERNAL_ERROR, ErrorValue, Reason, Rejection, answer_not_taken, reject, store_unavailable
from adapters.jsonwire import loads
from adapters.reverse_wire import relayed_as_is
from gateway.auth.credentials import UpstreamCredentials, credentials_for
from gateway.auth.resource import auth_settings
from gateway.auth.validator import TokenValidator
from gateway.config.settings import GatewayConfig
from gateway.http import perform
from gateway.http.answers import rejection_response
from gateway.http.authorization import add_auth_routes, authorized
from gateway.http.health import add_health_routes
from gateway.http.keys import AUTHZ, CORE_URL, GATEWAY, PASSTHROUGHS, REVERSE, REVERSES
from gateway.http.legacy import write_post
from gateway.http.pages import add_page_routes
from gateway.http.passthrough import Passthroughs
from gateway.http.reverse_bridges import ReverseBridges
from gateway.http.sse_door import add_sse_door
from gateway.http.streams import json_response
from gateway.http.telemetry import install_usage
from gateway.http.tracing import trace_answer, trace_request
from gateway.http.ws_door import add_ws_door
from gateway.session.backends import store_lifetime
from gateway.session.exchange import HandedOver
from gateway.session.listen import ListenHub
from gateway.session.observer import Observer, Observers
from gateway.session.relay import relay_lifetime
from gateway.session.runtime import DRAIN_FRACTION, Gateway, PinState, log
from gateway.session.store import SessionStore, StoreUnavailable
from gateway.session.streams import OutStream, Tap
from gateway.session.takeover import lease_lifetime
from gateway.telemetry.usage import USAGE, UsageObserver, UsageRecorder
from gateway.upstream.client import UpstreamClient, UpstreamSizes
from gateway.upstream.embedded import needs_embedded_core


@web.middleware
async def error_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """The one exception-to-response place: a gateway bug never leaks a traceback or kills the session."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except StoreUnavailable as exc:  # a failing dependency, not a bug: 503, retry later
        log.warning("%s %s: %s", request.method, request.path, exc)
        return rejection_response(store_unavailable(await _request_id(request)))
    except HandedOver:  # the message's round went to another replica first: 503, send it again
        log.info("%s %s: a client's answer or cancel reached its round as it was handed over", request.method,
                 request.path)
        return rejection_response(answer_not_taken(await _request_id(request)))
    except Exception:
        log.exception("unhandled error for %s %s", request.method, request.path)
        error = ErrorValue(INTERNAL_ERROR, "internal gateway error")
        return json_response({"jsonrpc": "2.0", "id": None, "error": error.to_wire()}, 500)


async def _request_id(request: web.Request) -> object:
    body = await request.read()  # read before anything could fail, and kept by aiohttp: the request's id
    return request_id(HttpView(request.method, request.headers, body))


async def handle_mcp(request: web.Request) -> web.StreamResponse:
    gw = request.app[GATEWAY]
    gw.observer.arrived(request)
    headers = request.headers  # case-insensitive already: the adapters read it as a plain mapping
    body = await read_body(request, gw) if request.method == "POST" else b""
    if isinstance(body, web.Response):
        return body
    repeated = frozenset(n for n in SINGLE_HEADERS if len(headers.getall(n, ())) > 1)
    now = gw.clock()
    checked = gw.transport(headers) is not Transport.STREAMABLE_HTTP  # its Host was checked at the door (§35)
    principal = await _verified_principal(request, headers, body, None if checked else gw.policy)
    if isinstance(principal, web.StreamResponse):
        return principal
    checked = checked or principal is not None  # a verified token's request had its Origin/Host checked first
    key = principal.key if principal is not None else None  # the verified claims ride along as the view's grant
    bridges = request.app.get(REVERSES)
    if bridges is not None and bridges.by_name and relayed_as_is(request.method, headers, parsed := _parsed(body)):
        # docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge
        refused = None if checked else check_origin_host(headers, gw.policy)
        if refused is not None:
            return rejection_response(refused)
        relayed = await bridges.relay(request, body, parsed, principal)
        if relayed is not None:
            return relayed
    verdict = await classified(gw, HttpView(request.method, headers, body, repeated, checked, key, principal), now)
    if isinstance(verdict, Rejection):
        return rejection_response(verdict)
    if verdict.session is not None and touch_due(verdict.session, now, gw.policy.session_idle_ms):
        verdict.session.last_seen_ms = now
        await gw.store.touch_session(verdict.session.session_id, now)
    if gw.trace is not None:
        trace_request(gw, verdict)
    pending = perform.answer(request, gw, verdict)  # adapters.session decides, the shell performs
    verdict = kept_while_answering(verdict)  # a GET stream lives as long as its session: keep little meanwhile
    answer = await pending
    if isinstance(answer, OutStream):  # a bridge exchange's stream: the POST's answer is its SSE
        answer = await write_post(request, gw, answer)
    if gw.trace is not None:
        trace_answer(gw, answer)
    gw.observer.answered(request, verdict, answer)  # migration accounting; never raises
    return answer


def _parsed(body: bytes) -> object:
    try:
        return loads(body) if body else None
    except ValueError:
        return None  # the legacy server answers it


async def _verified_principal(request: web.Request, headers: Any, body: bytes,
                              policy: Policy | None) -> Principal | web.StreamResponse | None:
    """With ``[gateway.auth]`` on: the principal the request's access token was verified for, or its refusal
    (401/403/503 with the gateway's own challenge). Off: None, and classification reads the header as before."""
    validator = request.app.get(AUTHZ)
    if validator is None:
        return None
    return await authorized(request, validator, policy, lambda: request_id(HttpView(request.method, headers, body)))


async def classified(gw: Gateway, view: HttpView, now: int) -> Accepted | Rejection:
    """The request's verdict on its session's record: the one a round waiting here for the session's client holds,
    or on a shared store the one this replica read last, when that verdict stands on it (an answer:
    adapters.classify.stands_on_held_record,
    docs/design/takeover.md#a-clients-answer-is-checked-on-its-requests-session-record,
    docs/design/replicas.md#replicas-relay-through-the-store), else the stored one."""
    session_id = view.headers.get("mcp-session-id")
    if not session_id:
        return classify(view, None, gw.policy, now)
    held = gw.held_record(session_id)
    if held is None and view.method == "POST" and b'"method"' not in view.body:
        # Maybe a client's answer (a request or notification names its method): the record last read here, on a
        # shared store. Only a filter: whatever it lets through is classified, and any other verdict than an
        # accepted answer is reached again on the stored record below, so requests never classify twice.
        held = gw.answer_records.get(session_id)
    if held is not None:
        verdict = classify(view, held, gw.policy, now)
        if stands_on_held_record(verdict):
            return verdict
    stored = await gw.store.get_session(session_id)
    if stored is not None:
        gw.remember_record(stored)
    return classify(view, stored, gw.policy, now)


async def read_body(request: web.Request, gw: Gateway) -> bytes | web.Response:
    """The POST body, or the refusal of one too large (413) or too slow to arrive (408). The slow one's
    connection is closed: its unread rest would otherwise be taken as the next request's start."""
    limits = gw.config.connections
    try:
        if request.content.is_eof():  # the whole body came with the head (most requests): nothing to wait for
            return await request.read()
        async with asyncio.timeout(limits.request_body_timeout_seconds):
            return await request.read()
    except web.HTTPRequestEntityTooLarge:
        return rejection_response(reject(Reason.BODY_TOO_LARGE, f"request body exceeds max_request_bytes "
                                                   f"({limits.max_request_bytes} bytes)"))
    except TimeoutError:
        answer = rejection_response(reject(Reason.BODY_TIMEOUT,
                                           f"request body not received within request_body_timeout_seconds "
                                           f"({limits.request_body_timeout_seconds})"))
        answer.force_close()
        return answer


async def _end_sessions(app: web.Application) -> None:
    """Shutdown runs before aiohttp waits for open handlers: ending every session's streams and tasks, and every
    modern passthrough, here lets long-lived SSE writers return at once instead of holding shutdown for its
    timeout. Both drain first, side by side (docs/design/takeover.md#shutdown): what waits on the upstream may be
    answered."""
    gw = app.get(GATEWAY)
    drain = gw.config.shutdown_timeout_seconds * DRAIN_FRACTION if gw is not None else 0.0
    await asyncio.gather(app[PASSTHROUGHS].drain(drain), gw.close() if gw is not None else asyncio.sleep(0))



def named_upstreams(config: GatewayConfig, core_url: str | None, tap: Tap | None) -> dict[str, UpstreamClient]:
    clients = {}
    for name, up in config.pins.upstreams.items():
        url = core_url if up.url == "embedded" else up.url
        if url is None:  # the embedded core runs only when the config at start had an embedded upstream
            raise ValueError(f"upstream {name!r} is embedded, but no embedded core is running")
        clients[name] = UpstreamClient(url, tap=tap, credentials=credentials_for(up, url, config, os.environ),
                                       connect_timeout=up.connect_timeout_seconds,
                                       read_timeout=up.read_timeout_seconds, max_connections=up.max_connections,
                                       max_stream_connections=up.max_stream_connections,
                                       sizes=upstream_sizes(config))
    return clients


def watchers(gateway: Gateway, recorder: UsageRecorder | None = None) -> Observer:
    """Who watches the traffic: migration accounting, and OpenTelemetry spans when ``[gateway.otel]`` is on (the
    optional ``otel`` extra is imported only then)."""
    usage = UsageObserver(gateway, recorder)
    if not gateway.config.otel.enabled:
        return usage
    from gateway.telemetry.otel import OtelObserver

    return Observers(usage, OtelObserver(gateway))


def upstream_sizes(config: GatewayConfig) -> UpstreamSizes:
    """The gateway-wide bounds on upstream answers (named upstreams use them too)."""
    return UpstreamSizes(config.max_upstream_response_bytes, config.max_sse_event_bytes,
                         config.max_upstream_header_bytes)


def install_authorization(app: web.Application, config: GatewayConfig) -> None:
    """The gateway as a protected resource ([gateway.auth]): its token validator and metadata routes."""
    validator = TokenValidator(auth_settings(config, os.environ))
    app[AUTHZ] = validator

    async def close(app: web.Application) -> None:
        await validator.close()

    app.on_cleanup.append(close)
    add_auth_routes(app, config)


def create_app(config: GatewayConfig, *, store: SessionStore | None = None, tap: Tap | None = None,
               credentials: UpstreamCredentials | None = None,
               upstream_headers: Mapping[str, str] | None = None) -> web.Application:
    """The gateway app. With ``config.upstream_url`` unset, the embedded core is started in this event loop on
    a loopback ephemeral port for the app's lifetime. ``credentials`` and ``upstream_headers``: what the main
    upstream is sent instead of ``[gateway.upstream_auth]``'s credential, and besides it (the stdio door's user
    login and ``--header``s, gateway.auth.login)."""
    # aiohttp refuses a body of client_max_size bytes or more; max_request_bytes itself is allowed.
    app = web.Application(middlewares=[error_middleware], client_max_size=config.connections.max_request_bytes + 1)

    async def lifetime(app: web.Application) -> AsyncIterator[None]:
        from gateway.upstream.embedded import embedded_core

        async with embedded_core(config) as core_url, store_lifetime(config, store) as session_store:
            url = config.upstream_url or core_url
            assert url is not None
            # With [gateway.auth] the client's token was issued for the gateway: it is never passed on (2026-07-28
            # basic/authorization, "Access Token Privilege Restriction"); the upstream gets [gateway.upstream_auth].
            own = credentials or credentials_for(config.main_upstream_auth(), url, config, os.environ)
            upstream = UpstreamClient(url, credentials=own, headers=upstream_headers,
                                      connect_timeout=config.upstream_connect_timeout_seconds,
                                      read_timeout=config.upstream_read_timeout_seconds, tap=tap,
                                      max_connections=config.upstream_max_connections,
                                      max_stream_connections=config.upstream_max_stream_connections,
                                      sizes=upstream_sizes(config))
            named = named_upstreams(config, core_url, tap)
            gateway = Gateway(config, session_store, upstream, tap, upstreams=named,
                              pins=PinState.from_config(config, dict(os.environ)))
            gateway.hub = ListenHub(gateway)
            gateway.observer = watchers(gateway, app.get(USAGE))
            app[GATEWAY] = gateway
            # The 2025-era upstreams (``upstream_era``, ``[upstreams.NAME] era``; serve's probe decided "auto"): served
            # to 2026 clients in reverse, their 2025 clients relayed
            # (docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge).
            bridges = app[REVERSES] = ReverseBridges(config, url, gateway)
            await bridges.start()
            if (reverse := bridges.get("default")) is not None:
                app[REVERSE] = reverse
            if core_url is not None:
                app[CORE_URL] = core_url
            try:
                # Replicas on a shared store: the relay (docs/design/replicas.md#replicas-relay-through-the-store) and
                # round leases (§40).
                async with relay_lifetime(gateway), lease_lifetime(gateway):
                    bridges.attach()  # retries of calls parked here, relayed from other replicas
                    yield
            finally:
                await gateway.close()
                await bridges.close()
                for client in (upstream, *named.values()):
                    await client.close()

    if config.auth.enabled:
        install_authorization(app, config)
    app[PASSTHROUGHS] = Passthroughs()
    app.cleanup_ctx.append(lifetime)
    app.on_shutdown.append(_end_sessions)
    app.router.add_route("*", "/mcp", handle_mcp)
    add_sse_door(app)  # HTTP+SSE (2024-11-05): GET /sse, POST /messages, through /mcp
    add_ws_door(app)  # WebSocket: /ws, subprotocol mcp, through /mcp
    # /healthz, /readyz for load balancers; on a shared store every answer names its replica
    add_health_routes(app, replicated=config.store.url is not None or bool(store and store.shares_streams))
    if needs_embedded_core(config):
        add_page_routes(app)  # its out-of-band pages, on the gateway's own address
    install_usage(app, config)  # /metrics, /migration, the usage store's lifetime
    return app
