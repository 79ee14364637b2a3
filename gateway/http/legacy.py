"""A legacy session's requests, notifications and answers: what the gateway answers itself (``adapters.local``
decides), what it forwards through a bridge exchange, cancellations, and the client's answers to the bridge."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from adapters import local
from adapters.bridge import admit
from adapters.classify import Accepted
from adapters.peers import sunset_error, sunset_passed
from adapters.records import PendingRound, SessionRecord
from adapters.results import response
from gateway.http.subscriptions import on_subscribe
from gateway.session import takeover
from gateway.session.exchange import Exchange, bridge_context
from gateway.session.runtime import Gateway, log, new_id
from gateway.session.streams import OutStream, StreamMode, json_response, write_stream


async def on_request(request: web.Request, gw: Gateway, acc: Accepted) -> web.StreamResponse:
    answer = await answer_request(request, gw, acc)
    return answer if isinstance(answer, web.StreamResponse) else await write_post(request, gw, answer)


async def write_post(request: web.Request, gw: Gateway, stream: OutStream) -> web.StreamResponse:
    return await write_stream(request, stream, mode=StreamMode.POST, retry_ms=gw.config.sse_retry_ms,
                              keepalive=gw.config.sse_keepalive_seconds)


async def answer_request(request: web.Request, gw: Gateway, acc: Accepted) -> web.Response | OutStream:
    """A legacy request's answer: a JSON response, or the stream of its bridge exchange (not written yet)."""
    answer = await answer_locally(request, gw, acc)
    assert acc.session is not None
    return answer if answer is not None else await forward(request, gw, acc.session, acc.message)


async def answer_locally(request: web.Request, gw: Gateway, acc: Accepted) -> web.Response | None:
    """The answer to a request the gateway answers itself (adapters.local.decide), or None to forward it."""
    message, session = acc.message, acc.session
    assert session is not None
    params, ident = message.get("params") or {}, message["id"]
    peer = gw.peer_of(session)
    if sunset_passed(peer, gw.today()):  # a session opened before the sunset does not outlive it
        return json_response(response(ident, error=sunset_error(peer, session.protocol_version)))
    match local.decide(message["method"], params, session.protocol_version):
        case local.Reply(result, None):
            return json_response(response(ident, result))
        case local.Reply(_, error):
            return json_response(response(ident, error=error))
        case local.SetLevel(level):
            session.log_level = level
            await gw.store.put_session(session)
            return json_response(response(ident, {}))
        case local.ChangeSubscription(params, subscribe):
            return await on_subscribe(request, gw, session, ident, dict(params), subscribe)
        case local.Forward():
            return None


async def forward(request: web.Request, gw: Gateway, session: SessionRecord,
                  message: dict[str, Any]) -> web.Response | OutStream:
    runtime = gw.runtime(session.session_id)
    ident = message["id"]
    refused = admit(runtime.exchanges.keys(), ident, gw.config.limits.to_limits())
    if refused is not None:
        return json_response(response(ident, error=refused))
    record = PendingRound(new_id("b"), session.session_id, ident, message["method"], message.get("params") or {},
                          started_ms=gw.clock())
    exchange = Exchange(runtime, record, bridge_context(runtime, session), request.headers.get("Authorization"),
                        session)
    exchange.observer = gw.observer.exchange(request, session, message)
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
        elif cancel is not None and gw.relay is not None:  # maybe run by another replica (design.md §34, §41)
            await takeover.cancel(gw, session, cancel.request_id, acc.message)
    elif route == "roots_changed":
        session.cached_roots = None  # nothing goes upstream (2026-07-28 removed it)
        await gw.store.put_session(session)
    return web.Response(status=202)


async def on_response(request: web.Request, gw: Gateway, acc: Accepted) -> web.StreamResponse:
    assert acc.session is not None
    runtime = gw.runtime(acc.session.session_id)
    exchange = runtime.awaiting.pop(acc.message["id"], None)
    if exchange is not None:
        # Acted on first: the next round leaves before the 202, and uses the session record read for this POST.
        await exchange.answer(acc.message["id"], acc.message, acc.session)
    elif gw.relay is not None:  # maybe asked by another replica's exchange, alive (§34) or not (§40)
        await takeover.answer(gw, acc.session, acc.message, request.headers.get("Authorization"))
    # Late or unknown answers are ignored (2025-11-25 basic/utilities §Cancellation: races).
    return web.Response(status=202)
