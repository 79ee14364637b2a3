"""``create_app`` and the handlers of the MCP endpoint (``POST/GET/DELETE /mcp``).

Each handler decodes, asks ``adapters`` what to do, and performs it. Classification (every HTTP status the
legacy side can see) happens once in :func:`handle_mcp`; exceptions become responses in one middleware.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from adapters import local
from adapters.admission import SessionCounts, admit_session, initialize_size_error, subscription_error
from adapters.bridge import BridgeContext, admit
from adapters.capabilities import client_caps_to_modern
from adapters.classify import SINGLE_HEADERS, Accepted, HttpView, classify, request_id
from adapters.errors import (
    INVALID_REQUEST,
    ErrorValue,
    Rejection,
    passthrough_ended,
    reject,
    store_unavailable,
    translate_upstream_error,
)
from adapters.handshake import build_initialize_result, cache_policy, check_discover, discover_cache_keys
from adapters.jsonwire import ENCODED_DEPTH, loads
from adapters.peers import (
    admit_initialize,
    admit_modern,
    legacy_answer_version,
    mask_capabilities,
    match_peer,
    peer_limits,
    peer_record,
    pick_upstream,
    sunset_error,
    sunset_passed,
    with_notice,
)
from adapters.protocol import CLIENT_INFO_META_KEY, MODERN_VERSION, PROTOCOL_VERSION_META_KEY
from adapters.records import PendingRound, SessionRecord
from adapters.results import Invalid, classify_result, response
from adapters.sse import PRIMING_SEQ, parse_event_id
from adapters.subscriptions import apply_subscribes, gateway_warning, listen_filter, subscribe_uri
from adapters.upstream import SessionView, build_discover
from gateway.config.settings import GatewayConfig
from gateway.http.passthrough import Passthroughs, Relay
from gateway.http.telemetry import install_usage
from gateway.session.backends import store_lifetime
from gateway.session.exchange import Exchange
from gateway.session.listen import ListenHub, own_listener
from gateway.session.runtime import Gateway, PinState, SessionRuntime, log, new_id, random_id, session_view
from gateway.session.store import SessionStore, StoreUnavailable
from gateway.session.streams import OutStream, Tap, json_response, write_stream
from gateway.telemetry.usage import exchange_observer, observe_response, stamp_arrival
from gateway.upstream.client import FAILURES, UpstreamClient, UpstreamFailure, UpstreamSizes
from gateway.upstream.h1 import BrokenResponse

GATEWAY = web.AppKey("gateway", Gateway)
CORE_URL = web.AppKey("core_url", str)  # the embedded core, when one runs (reloads may route to it)
# Entries in Gateway.discover_cache: private results are kept per principal, and any bearer token is one, so the
# cache is bounded; past the bound the oldest entry goes (a refetch, never a wrong answer).
DISCOVER_CACHE_MAX = 1024
PASSTHROUGHS = web.AppKey("passthroughs", Passthroughs)  # the open modern passthroughs (shutdown ends them)
_MODERN_HEADERS = ("accept", "content-type", "mcp-protocol-version", "mcp-method", "mcp-name", "authorization",
                   "traceparent", "tracestate", "baggage")


def _rejection(rejection: Rejection) -> web.Response:
    return json_response(rejection.body(), rejection.status)


def _error_answer(ident: Any, error: ErrorValue) -> web.Response:
    """A JSON-RPC error as a JSON answer: HTTP 200, or the status and challenge of an upstream's refusal of the
    client's own token (adapters.errors.AuthChallenge), so the client authorizes again."""
    status, headers = error.challenge.answer() if error.challenge else (200, None)
    return json_response(response(ident, error=error), status, headers)


@web.middleware
async def error_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """The one exception-to-response place: a gateway bug never leaks a traceback or kills the session."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except StoreUnavailable as exc:  # a failing dependency, not a bug: 503, retry later
        log.warning("%s %s: %s", request.method, request.path, exc)
        body = await request.read()  # read before any store call, and kept by aiohttp: the request's id
        return _rejection(store_unavailable(request_id(HttpView(request.method, request.headers, body))))
    except Exception:
        log.exception("unhandled error for %s %s", request.method, request.path)
        error = ErrorValue(-32603, "internal gateway error")
        return json_response({"jsonrpc": "2.0", "id": None, "error": error.to_wire()}, 500)


async def handle_mcp(request: web.Request) -> web.StreamResponse:
    stamp_arrival(request)
    gw = request.app[GATEWAY]
    headers = request.headers  # case-insensitive already: the adapters read it as a plain mapping
    body = await read_body(request, gw) if request.method == "POST" else b""
    if isinstance(body, web.Response):
        return body
    session_id = headers.get("mcp-session-id")
    session = await gw.store.get_session(session_id) if session_id else None
    repeated = frozenset(n for n in SINGLE_HEADERS if len(headers.getall(n, ())) > 1)
    verdict = classify(HttpView(request.method, headers, body, repeated), session, gw.policy, gw.clock())
    if isinstance(verdict, Rejection):
        return _rejection(verdict)
    if verdict.session is not None:
        verdict.session.last_seen_ms = gw.clock()
        await gw.store.touch_session(verdict.session.session_id, verdict.session.last_seen_ms)
    answer = await _HANDLERS[verdict.kind](request, gw, verdict)
    observe_response(request, gw, verdict, answer)  # migration accounting (issue 4); never raises
    return answer


async def read_body(request: web.Request, gw: Gateway) -> bytes | web.Response:
    """The POST body, or the refusal of one too large (413) or too slow to arrive (408). The slow one's
    connection is closed: its unread rest would otherwise be taken as the next request's start."""
    limits = gw.config.connections
    try:
        async with asyncio.timeout(limits.request_body_timeout_seconds):
            return await request.read()
    except web.HTTPRequestEntityTooLarge:
        return _rejection(reject("body_too_large", f"request body exceeds max_request_bytes "
                                                   f"({limits.max_request_bytes} bytes)"))
    except TimeoutError:
        answer = _rejection(reject("body_timeout", f"request body not received within "
                                                   f"request_body_timeout_seconds ({limits.request_body_timeout_seconds})"))
        answer.force_close()
        return answer


# --- handshake ------------------------------------------------------------------------------------------
async def discover(gw: Gateway, principal: str, view: SessionView,
                   upstream: str = "default") -> dict[str, Any] | ErrorValue:
    """The upstream's discover result, cached per upstream and its ttlMs/cacheScope (private = per principal;
    stale results are not kept, and the cache is bounded)."""
    now = gw.clock()
    for key in discover_cache_keys(principal):
        cached = gw.discover_cache.get(f"{upstream}|{key}")
        if cached is not None and now < cached[0]:
            return cached[1]
    try:
        kind, payload = await gw.upstream_for(upstream).call(build_discover(new_id("d"), view), lambda _m: None)
    except UpstreamFailure as failure:
        return failure.error
    if kind == "error":
        return translate_upstream_error(payload)
    outcome = classify_result("server/discover", payload)
    if isinstance(outcome, Invalid):
        return outcome.error
    problem = check_discover(payload)
    if problem is not None:
        return problem
    policy = cache_policy(payload, principal, now, "server/discover")
    if policy.fresh(now):  # ttlMs 0 (or absent) is stale at once (DIGEST §1.11): nothing to keep
        _cache_discover(gw.discover_cache, f"{upstream}|{policy.key}", (policy.expires_ms, payload), now)
    return payload


def _cache_discover(cache: dict[str, tuple[int, dict[str, Any]]], key: str, entry: tuple[int, dict[str, Any]],
                    now: int) -> None:
    """Store ``entry``, first dropping every expired entry (a store follows an upstream round trip, so the walk
    is cheap beside it) and, at :data:`DISCOVER_CACHE_MAX`, the oldest ones (dicts keep insertion order)."""
    for stale in [k for k, (expires, _) in cache.items() if now >= expires or k == key]:
        del cache[stale]  # the entry's own key too: re-inserted last, as the newest
    while len(cache) >= DISCOVER_CACHE_MAX:
        del cache[next(iter(cache))]
    cache[key] = entry


async def on_initialize(request: web.Request, gw: Gateway, acc: Accepted) -> web.StreamResponse:
    message, params = acc.message, acc.message.get("params") or {}
    info = params.get("clientInfo") or {}
    peer = match_peer(gw.pins.peers, gw.pins.default, acc.principal, info)
    version = legacy_answer_version(peer, params.get("protocolVersion"))
    problem = (local.check_request("initialize", version, params) or admit_initialize(peer, version, gw.today())
               or initialize_size_error(params.get("capabilities"), params.get("clientInfo"),
                                        gw.config.sessions.session_limits))
    if problem is not None:
        if problem.log:
            log.warning("initialize refused: %s", problem.log)
        return json_response(response(message["id"], error=problem))
    caps = mask_capabilities(params.get("capabilities") or {}, peer)  # the peer's bridge policy (issue 3)
    session_id = secrets.token_urlsafe(32)
    upstream = pick_upstream(peer, session_id, gw.pins.seed)
    view = SessionView(client_caps_to_modern(caps), info, None, request.headers.get("Authorization"))
    found = await discover(gw, acc.principal, view, upstream)
    if isinstance(found, ErrorValue):
        if found.log:
            log.warning("initialize: %s", found.log)
        return _error_answer(message["id"], found)
    now = gw.clock()
    record = SessionRecord(session_id, acc.principal, version, dict(caps), dict(info), now, now,
                           server_capabilities=dict(found.get("capabilities") or {}), pins=peer_record(peer),
                           upstream=upstream)
    await gw.sweep_expired()  # each new session pays for ending the expired ones: no timer task needed
    # Counted after the last wait before the put, so concurrent initializes cannot all pass one free slot.
    full = admit_session(SessionCounts(*await gw.store.count_sessions(acc.principal)),
                         gw.config.sessions.session_limits, message["id"])
    if full is not None:
        log.warning("initialize refused: %s", full.error.message)
        return _rejection(full)
    await gw.store.put_session(record)
    result = with_notice(build_initialize_result(found, version, gw.config.features()), peer, gw.today())
    return json_response(response(message["id"], result), headers={"Mcp-Session-Id": record.session_id})


# --- legacy requests ------------------------------------------------------------------------------------
async def on_request(request: web.Request, gw: Gateway, acc: Accepted) -> web.StreamResponse:
    answer = await answer_request(request, gw, acc)
    return answer if isinstance(answer, web.StreamResponse) else await _write_post(request, gw, answer)


async def _write_post(request: web.Request, gw: Gateway, stream: OutStream) -> web.StreamResponse:
    return await write_stream(request, stream, mode="post", retry_ms=gw.config.sse_retry_ms,
                              keepalive=gw.config.sse_keepalive_seconds)


async def answer_request(request: web.Request, gw: Gateway, acc: Accepted) -> web.Response | OutStream:
    """A legacy request's answer: a JSON response, or the stream of its bridge exchange (not written yet)."""
    answer = await answer_locally(request, gw, acc)
    assert acc.session is not None
    return answer if answer is not None else await forward(request, gw, acc.session, acc.message)


async def answer_locally(request: web.Request, gw: Gateway, acc: Accepted) -> web.Response | None:
    """The answer to a request the gateway answers itself (ping, setLevel, subscribe, refusals), or None."""
    message, session = acc.message, acc.session
    assert session is not None
    method, params, ident = message["method"], message.get("params") or {}, message["id"]
    peer = gw.peer_of(session)
    if sunset_passed(peer, gw.today()):  # a session opened before the sunset does not outlive it
        return json_response(response(ident, error=sunset_error(peer, session.protocol_version)))
    route = local.route_request(method)
    if route == "ping":
        return json_response(response(ident, {}))  # 2026 removed ping; answered here (DIGEST §3)
    if route in ("not_found", "initialize"):
        error = local.not_found(method) if route == "not_found" else ErrorValue(
            INVALID_REQUEST, "the session is already initialized")
        return json_response(response(ident, error=error))
    problem = local.check_request(method, session.protocol_version, params)
    if problem is not None:
        return json_response(response(ident, error=problem))
    if route == "set_level":
        level = local.set_level(params)
        if isinstance(level, ErrorValue):
            return json_response(response(ident, error=level))
        session.log_level = level
        await gw.store.put_session(session)
        return json_response(response(ident, {}))
    if route in ("subscribe", "unsubscribe"):
        return await on_subscribe(request, gw, session, ident, params, route == "subscribe")
    return None


async def forward(request: web.Request, gw: Gateway, session: SessionRecord,
                  message: dict[str, Any]) -> web.Response | OutStream:
    runtime = gw.runtime(session.session_id)
    ident = message["id"]
    refused = admit(len(runtime.exchanges), gw.config.limits.to_limits())
    if ident in runtime.exchanges:
        refused = ErrorValue(INVALID_REQUEST, f"request id {ident!r} is already in flight in this session")
    if refused is not None:
        return json_response(response(ident, error=refused))
    record = PendingRound(new_id("b"), session.session_id, ident, message["method"], message.get("params") or {})
    limits = peer_limits(gw.config.limits.to_limits(), gw.peer_of(session))
    ctx = BridgeContext(limits, session.client_capabilities, random_id, cached_roots=session.cached_roots)
    exchange = Exchange(runtime, record, ctx, request.headers.get("Authorization"), session)
    exchange.observer = exchange_observer(request, gw, session, message)  # issue 4 accounting
    runtime.exchanges[ident] = exchange
    if exchange.can_begin_inline(session):
        finish = await exchange.begin()
        if finish is not None:  # a lone response (most requests): plain JSON, no stream or task was made
            if finish.log:
                log.warning("request %r: %s", ident, finish.log)
            if finish.message is None:
                return web.Response(status=202)
            status, headers = finish.challenge.answer() if finish.challenge else (200, None)
            return json_response(finish.message, status, headers)
    return exchange.stream or exchange.spawn()


async def on_subscribe(request: web.Request, gw: Gateway, session: SessionRecord, ident: Any,
                       params: dict[str, Any], subscribe: bool) -> web.StreamResponse:
    uri = subscribe_uri(params)
    if isinstance(uri, ErrorValue):
        return json_response(response(ident, error=uri))
    full = subscription_error(session.subscriptions, uri, gw.config.sessions.session_limits) if subscribe else None
    if full is not None:
        return json_response(response(ident, error=full))
    outcome = await change_listen(gw, session.session_id, request.headers.get("Authorization"), (uri, subscribe))
    if isinstance(outcome, Rejection):
        return _rejection(outcome)
    if outcome is not None:  # the upstream did not take it: the client is not subscribed
        return _error_answer(ident, outcome)
    return json_response(response(ident, {}))


async def change_listen(gw: Gateway, session_id: str, authorization: str | None,
                        change: tuple[str, bool] | None = None) -> ErrorValue | Rejection | None:
    """Apply ``change`` (uri, subscribe?) to the session's subscriptions and make its listen match them.

    One change at a time per session, each reading the record inside the lock: two subscribes that each built
    their filter from the set read before either saved would leave the last acknowledged listen without the
    other's URI (DIGEST §1.9: a filter cannot be edited, each change replaces the listen). Changes that queue
    meanwhile are applied together by the next turn, with one listen and one acknowledgement wait for all of
    them, and each gets that outcome: k queued subscribes behind a slow upstream wait one ack, not k."""
    listener = own_listener(gw.runtime(session_id))
    mine: asyncio.Future = asyncio.get_running_loop().create_future()
    listener.queued.append((change, mine))
    try:
        async with listener.changing:
            if not mine.done():  # nobody took it yet: this turn applies everything queued so far
                batch, listener.queued = listener.queued, []
                try:
                    batch = await _within_limits(gw, session_id, batch)
                    outcome = await _apply_changes(gw, session_id, authorization,
                                                   [c for c, _ in batch if c]) if batch else None
                except BaseException:  # cancelled (shutdown): the next turn takes the others' changes
                    listener.queued[:0] = [item for item in batch if item[1] is not mine]
                    raise
                for _change, waiter in batch:
                    waiter.set_result(outcome)
    except BaseException:
        # Gone before a turn took its change: nobody is left to tell, so it is not applied.
        listener.queued = [item for item in listener.queued if item[1] is not mine]
        raise
    return mine.result()


async def _within_limits(gw: Gateway, session_id: str, batch: list[tuple[Any, asyncio.Future]]) -> list[Any]:
    """The queued changes that keep the session within its subscription bounds, in order; each other one is
    answered with its limit error now. Checked here, on the record as of this turn, since subscribes that ran
    at once (a batch) each passed on_subscribe's check against the same record."""
    session = await gw.store.get_session(session_id)
    if session is None:
        return batch  # _apply_changes answers them all: the session is gone
    held, kept, limits = list(session.subscriptions), [], gw.config.sessions.session_limits
    for change, waiter in batch:
        error = subscription_error(held, change[0], limits) if change and change[1] else None
        if error is not None:
            waiter.set_result(error)
            continue
        if change:
            held = apply_subscribes(held, [change])
        kept.append((change, waiter))
    return kept


async def _apply_changes(gw: Gateway, session_id: str, authorization: str | None,
                         changes: list[tuple[str, bool]]) -> ErrorValue | Rejection | None:
    session = await gw.store.get_session(session_id)
    if session is None:
        return reject("unknown_session", "session not found")
    session.subscriptions = apply_subscribes(session.subscriptions, changes)
    error = await ensure_listen(gw, session, authorization)
    if error is not None or not changes:
        return error
    # Re-read after the wait for the ack: a concurrent request (setLevel) may have saved the record meanwhile,
    # and writing our copy back would undo it.
    fresh = await gw.store.get_session(session_id)
    if fresh is None:
        return reject("unknown_session", "session not found")
    fresh.subscriptions = apply_subscribes(fresh.subscriptions, changes)
    await gw.store.put_session(fresh)
    return None


async def ensure_listen(gw: Gateway, session: SessionRecord, authorization: str | None) -> ErrorValue | None:
    """The session's listen: shared with like sessions while it has no subscriptions, else its own. The new
    listen is acknowledged before the old one closes, so no notification falls into the gap."""
    runtime = gw.runtime(session.session_id)
    wanted = listen_filter(session.server_capabilities, session.subscriptions, gw.config.features())
    view = session_view(session, authorization)
    if not session.subscriptions and gw.hub is not None:
        error = await gw.hub.join(runtime, session.upstream, wanted, view) if wanted else None
        if error is None and runtime.listen is not None:
            await runtime.listen.ensure({}, view)  # leave the session's own listen
        return error
    listener = own_listener(runtime)
    listener.upstream = session.upstream
    error = await listener.ensure(wanted, view)
    if error is None and gw.hub is not None:
        gw.hub.leave(runtime)
    return error


async def on_notification(request: web.Request, gw: Gateway, acc: Accepted) -> web.StreamResponse:
    session, method = acc.session, acc.message["method"]
    assert session is not None
    route = local.route_notification(method)
    if route == "initialized":
        session.initialized = True
        await gw.store.put_session(session)
    elif route == "cancelled":
        # A cancel stops the bridge, closes the upstream request and cancels our requests to the client; one
        # naming no valid request id is ignored (adapters.local.cancel_request).
        cancel = local.cancel_request(acc.message.get("params"))
        exchange = gw.runtime(session.session_id).exchanges.get(cancel.request_id) if cancel else None
        if exchange is not None and cancel is not None:
            exchange.cancel(cancel.reason)
    elif route == "roots_changed":
        session.cached_roots = None  # nothing goes upstream (2026 removed it, DIGEST §3)
        await gw.store.put_session(session)
    return web.Response(status=202)


async def on_response(request: web.Request, gw: Gateway, acc: Accepted) -> web.StreamResponse:
    assert acc.session is not None
    runtime = gw.runtime(acc.session.session_id)
    exchange = runtime.awaiting.pop(acc.message["id"], None)
    if exchange is not None:
        # Acted on first: the next round leaves before the 202, and uses the session record read for this POST.
        await exchange.answer(acc.message["id"], acc.message, acc.session)
    return web.Response(status=202)  # late or unknown answers are ignored (S25 cancellation races)


# --- streams and session end ----------------------------------------------------------------------------
async def on_open_stream(request: web.Request, gw: Gateway, acc: Accepted) -> web.StreamResponse:
    assert acc.session is not None
    runtime = gw.runtime(acc.session.session_id)
    stream = runtime.standalone_stream()
    if gw.config.bridge_list_changed:
        runtime.spawn(_listen_in_background(gw, acc.session.session_id, request.headers.get("Authorization")))
    return await write_stream(request, stream, mode="get", retry_ms=gw.config.sse_retry_ms,
                              keepalive=gw.config.sse_keepalive_seconds)


async def _listen_in_background(gw: Gateway, session_id: str, authorization: str | None) -> None:
    error = await change_listen(gw, session_id, authorization)  # the record as of now, not of the GET
    if isinstance(error, ErrorValue):  # (a Rejection: the session ended meanwhile, nothing to report)
        log.warning("session %s: list_changed listen unavailable: %s", session_id, error.message)
        # The GET was answered before the listen was refused: its stream is the only place left to say so.
        record, runtime = await gw.store.get_session(session_id), gw.runtimes.get(session_id)
        note = gateway_warning(record.log_level if record else None, "the server refused to send this session "
                               "list_changed notifications", {"error": error.to_wire()})
        if note is not None and runtime is not None:
            runtime.standalone_stream().push(note)


async def on_resume(request: web.Request, gw: Gateway, acc: Accepted) -> web.StreamResponse:
    """``GET`` + ``Last-Event-ID``: replay only that stream's later events, then follow it (S25 §Resumability)."""
    assert acc.session is not None
    runtime: SessionRuntime = gw.runtime(acc.session.session_id)
    parsed = parse_event_id(acc.last_event_id)
    stream = runtime.streams.get(parsed[0]) if parsed else None
    if stream is None or parsed is None or stream.buffer.after(parsed[1]) is None:
        # Not a 404: that would tell the client its whole session is gone.
        return _rejection(reject("invalid_request", "Last-Event-ID names no resumable stream position"))
    return await write_stream(request, stream, mode="resume", after=parsed[1], retry_ms=gw.config.sse_retry_ms,
                              keepalive=gw.config.sse_keepalive_seconds)


async def on_delete(request: web.Request, gw: Gateway, acc: Accepted) -> web.StreamResponse:
    assert acc.session is not None
    await gw.end_session(acc.session.session_id)  # cancels every exchange, listen and stream of the session
    return web.Response(status=204)


async def on_modern(request: web.Request, gw: Gateway, acc: Accepted) -> web.StreamResponse:
    """A 2026-07-28 request is passed through as is and streamed back (no session, no translation)."""
    meta = (acc.message.get("params") or {}).get("_meta") or {}
    peer = match_peer(gw.pins.peers, gw.pins.default, acc.principal, meta.get(CLIENT_INFO_META_KEY))
    refused = admit_modern(peer, str(meta.get(PROTOCOL_VERSION_META_KEY, MODERN_VERSION)))
    if refused is not None:  # a legacy-pinned peer's probe: steer it to initialize (adapters.peers)
        return json_response(response(acc.message.get("id"), error=refused), 400)
    headers = {k: v for k, v in request.headers.items()
               if k.lower() in _MODERN_HEADERS or k.lower().startswith("mcp-param-")}
    relay, ident = request.app[PASSTHROUGHS].relay(request), acc.message.get("id")
    with relay:  # a hang-up (the 2026 cancel, DIGEST §4.10) or shutdown ends it: the upstream is closed
        return await _pass_through(request, relay, gw.upstream_for(peer.upstream), headers, ident)
    return relay.response or json_response(response(ident, error=passthrough_ended()), 503)


async def _pass_through(request: web.Request, relay: Relay, upstream: UpstreamClient, headers: dict[str, str],
                        ident: Any) -> web.StreamResponse:
    try:
        async with FAILURES, await upstream.post(await request.read(), headers) as up:
            if up.status in (401, 403) and not upstream.forwards_token:  # our credential: not the client's to fix
                raise UpstreamFailure(await upstream.refused(up))
            if up.content_type != "text/event-stream":
                # A refusal of the client's own token keeps its challenge, so the client can authorize again.
                challenges = up.getall("www-authenticate") if up.status in (401, 403) else ()
                return web.Response(status=up.status, body=await up.read(), content_type=up.content_type,
                                    headers=[("WWW-Authenticate", value) for value in challenges] or None)
            relay.response = out = web.StreamResponse(status=up.status, headers={
                "Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await out.prepare(request)
            try:
                async for chunk in up.chunks():
                    await out.write(chunk)
            except ConnectionResetError:
                pass  # the modern client hung up: leaving this block closes upstream = 2026 cancel
            except (TimeoutError, BrokenResponse) as exc:  # the status is sent: the client sees the stream end
                log.warning("modern passthrough stream broke: %s", exc)
            return out
    except UpstreamFailure as failure:  # unreachable, or a JSON answer that broke, stalled or was too large
        return json_response(response(ident, error=failure.error), 502)


async def _end_sessions(app: web.Application) -> None:
    """Shutdown runs before aiohttp waits for open handlers: ending every session's streams and tasks, and every
    modern passthrough, here lets long-lived SSE writers return at once instead of holding shutdown for its
    timeout."""
    app[PASSTHROUGHS].end_all()
    if GATEWAY in app:
        await app[GATEWAY].close()


# --- 2025-03-26 batches ----------------------------------------------------------------------------------
async def on_batch(request: web.Request, gw: Gateway, acc: Accepted) -> web.StreamResponse:
    """A 2025-03-26 JSON-RPC batch (``adapters.classify._classify_batch``): every element goes its own way at
    once, as if posted alone. The answers come as one JSON array, or as one SSE stream as soon as any element
    streams (a bridged request asks the client on it); notifications and client responses alone get 202 (S25-03
    transports §Sending Messages)."""
    parts = await asyncio.gather(*[_batch_part(request, gw, element) for element in acc.batch])
    streams = [p for p in parts if isinstance(p, OutStream)]
    answers = [p for p in parts if isinstance(p, dict)]
    if not streams:
        if not answers:
            return web.Response(status=202)
        asked = any(isinstance(e, Accepted) and e.kind == "request" for e in acc.batch)
        return json_response(answers, 200 if asked else 400)  # only bad elements, no request: not accepted
    assert acc.session is not None
    runtime = gw.runtime(acc.session.session_id)
    merged = runtime.new_stream()
    for answer in answers:
        merged.push(answer)
    runtime.spawn(_merge(streams, merged))
    return await _write_post(request, gw, merged)


async def _batch_part(request: web.Request, gw: Gateway, element: Accepted | Rejection) -> Any:
    """One element's answer: a message, the stream of its exchange, or None (a notification or response)."""
    if isinstance(element, Rejection):
        return element.body()  # JSON-RPC 2.0 §6: a bad element is answered alone, the rest still run
    if element.kind == "request":
        answer: Any = await answer_locally(request, gw, element)
        if answer is not None:  # counted here: a forwarded one is counted by its exchange's observer
            observe_response(request, gw, element, answer, bridged=False)
        else:
            assert element.session is not None
            answer = await forward(request, gw, element.session, element.message)
    else:
        answer = await _HANDLERS[element.kind](request, gw, element)
    if isinstance(answer, OutStream):
        return answer
    # The gateway's own answer: it may nest a value read at MAX_DEPTH a few levels deeper (adapters.jsonwire).
    return loads(answer.body, ENCODED_DEPTH) if isinstance(answer, web.Response) and answer.body else None


async def _merge(sources: list[OutStream], merged: OutStream) -> None:
    """Copy every element stream's messages onto the batch's one stream, which ends when they all have."""
    async def pipe(source: OutStream) -> None:
        async for events in source.batches_after(PRIMING_SEQ, keepalive=60.0):
            for event in events:
                merged.push(event.message)
    try:  # every pipe runs to its end: one that fails (its events evicted unread) leaves the others going
        for failed in await asyncio.gather(*[pipe(source) for source in sources], return_exceptions=True):
            if isinstance(failed, Exception):
                log.warning("a batch element's stream broke: %r", failed)
    finally:
        merged.finish()


_HANDLERS = {
    "initialize": on_initialize,
    "request": on_request,
    "notification": on_notification,
    "response": on_response,
    "modern": on_modern,
    "open_stream": on_open_stream,
    "resume": on_resume,
    "delete": on_delete,
    "batch": on_batch,
}


# --- app ------------------------------------------------------------------------------------------------
def named_upstreams(config: GatewayConfig, core_url: str | None, tap: Tap | None) -> dict[str, UpstreamClient]:
    clients = {}
    for name, up in config.pins.upstreams.items():
        credential = os.environ.get(up.token_env) if up.token_env else None
        clients[name] = UpstreamClient(core_url if up.url == "embedded" else up.url, tap=tap, auth=up.auth,
                                       connect_timeout=up.connect_timeout_seconds, credential=credential,
                                       read_timeout=up.read_timeout_seconds, max_connections=up.max_connections,
                                       max_stream_connections=up.max_stream_connections,
                                       sizes=upstream_sizes(config))
    return clients


def upstream_sizes(config: GatewayConfig) -> UpstreamSizes:
    """The gateway-wide bounds on upstream answers (named upstreams use them too)."""
    return UpstreamSizes(config.max_upstream_response_bytes, config.max_sse_event_bytes,
                         config.max_upstream_header_bytes)


def create_app(config: GatewayConfig, *, store: SessionStore | None = None, tap: Tap | None = None) -> web.Application:
    """The gateway app. With ``config.upstream_url`` unset, the embedded core is started in this event loop on
    a loopback ephemeral port for the app's lifetime."""
    # aiohttp refuses a body of client_max_size bytes or more; max_request_bytes itself is allowed.
    app = web.Application(middlewares=[error_middleware], client_max_size=config.connections.max_request_bytes + 1)

    async def lifetime(app: web.Application) -> AsyncIterator[None]:
        from gateway.upstream.embedded import embedded_core

        async with embedded_core(config) as core_url, store_lifetime(config, store) as session_store:
            url = config.upstream_url or core_url
            assert url is not None
            upstream = UpstreamClient(url, connect_timeout=config.upstream_connect_timeout_seconds,
                                      read_timeout=config.upstream_read_timeout_seconds, tap=tap,
                                      max_connections=config.upstream_max_connections,
                                      max_stream_connections=config.upstream_max_stream_connections,
                                      sizes=upstream_sizes(config))
            named = named_upstreams(config, core_url, tap)
            gateway = Gateway(config, session_store, upstream, tap, upstreams=named,
                              pins=PinState.from_config(config, dict(os.environ)))
            gateway.hub = ListenHub(gateway)
            app[GATEWAY] = gateway
            if core_url is not None:
                app[CORE_URL] = core_url
            try:
                yield
            finally:
                await gateway.close()
                for client in (upstream, *named.values()):
                    await client.close()

    app[PASSTHROUGHS] = Passthroughs()
    app.cleanup_ctx.append(lifetime)
    app.on_shutdown.append(_end_sessions)
    app.router.add_route("*", "/mcp", handle_mcp)
    install_usage(app, config)  # /metrics, /migration, the usage store's lifetime (issue 4)
    return app
