"""Performing what a legacy session's messages become (``adapters.session`` decides): a session change kept in
the record, a request forwarded through a bridge exchange, a cancellation, and the client's answers to the
bridge, each reaching the exchange wherever it runs (this replica, or another one through the relay)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from adapters import exchange as X
from adapters.bridge import BridgeLimits
from adapters.records import PendingRound, SessionRecord
from adapters.session import SessionChange, UpdateSession
from adapters.takeover import token_goes_upstream
from gateway.http.answers import Acknowledgement
from gateway.http.streams import StreamMode, json_response, write_stream
from gateway.session import takeover
from gateway.session.exchange import Exchange, FirstRound, HandedOver, bridge_context
from gateway.session.runtime import Gateway, log, new_id
from gateway.session.streams import OutStream


async def write_post(request: web.Request, gw: Gateway, stream: OutStream) -> web.StreamResponse:
    return await write_stream(request, stream, mode=StreamMode.POST, retry_ms=gw.config.sse_retry_ms,
                              keepalive=gw.config.sse_keepalive_seconds)


async def update_session(gw: Gateway, session: SessionRecord, update: UpdateSession) -> None:
    """The change made to the stored record (what other requests wrote meanwhile is kept; a session deleted
    meanwhile stays deleted, and the request, moot, is still answered) and to ``session``, which the request
    goes on with."""
    def apply(record: SessionRecord) -> None:
        match update.change:
            case SessionChange.LOG_LEVEL:
                record.log_level = update.value if isinstance(update.value, str) else None
            case SessionChange.INITIALIZED:
                record.initialized = True
            case SessionChange.ROOTS_STALE:
                record.cached_roots = None
    apply(session)
    await gw.store.change_session(session.session_id, apply)


async def forward(request: web.Request, gw: Gateway, session: SessionRecord, message: dict[str, Any],
                  limits: BridgeLimits) -> web.StreamResponse | OutStream:
    """Start the request's bridge exchange: its lone answer as JSON when it came at once (most requests: no
    stream or task is made), else the exchange's stream (not written yet)."""
    runtime = gw.runtime(session.session_id)
    ident, authorization = message["id"], request.headers.get("Authorization")
    carried = token_goes_upstream(authorization, gw.upstream_for(session.upstream).needs_client_token)
    record = PendingRound(new_id("b"), session.session_id, ident, message["method"], message.get("params") or {},
                          started_ms=gw.clock(), authorized=carried)
    exchange = Exchange(runtime, record, bridge_context(runtime, session, limits), authorization, session)
    exchange.observer = gw.observer.exchange(request, session, message)
    runtime.exchanges[ident] = exchange
    if X.begins_inline(exchange.rounds.progress_token, session.log_level, record.method):
        finish = await FirstRound(exchange).run()
        if finish is not None:
            if finish.log:
                log.warning("request %r: %s", ident, finish.log)
            if finish.message is None:
                return Acknowledgement()
            status, headers = finish.challenge.answer() if finish.challenge else (200, None)
            return json_response(finish.message, status, headers)
    return exchange.stream or exchange.spawn()


async def cancel(gw: Gateway, session: SessionRecord, request_id: str | int, reason: str | None,
                 message: dict[str, Any]) -> None:
    """Stop the bridge, close the upstream request and cancel our requests to the client."""
    exchange = gw.runtime(session.session_id).exchanges.get(request_id)
    if exchange is not None and gw.relay is None:  # one process: a round never moves, so nothing is waited for
        exchange.door.cancel(reason)
        return
    if exchange is not None:
        try:
            await exchange.door.cancel_now(reason)
            return
        # its round went on elsewhere first: the cancel follows it there
        # (docs/design/takeover.md#sigterm-hands-the-rounds-over)
        except HandedOver:
            pass
    # maybe run by another replica (docs/design/replicas.md#replicas-relay-through-the-store,
    # docs/design/takeover.md#a-cancel-for-a-plain-request-goes-to-every-replica)
    if gw.relay is not None:
        await takeover.cancel(gw, session, request_id, message)


async def deliver(gw: Gateway, session: SessionRecord, message: dict[str, Any], authorization: str | None) -> None:
    exchange = gw.runtime(session.session_id).awaiting.pop(message["id"], None)
    if exchange is not None:
        await exchange.door.answer_now(message["id"], message)  # acted on first: the next round leaves before the 202
    elif gw.relay is not None:  # maybe asked by another replica's exchange, alive (§34) or not (§40)
        await takeover.answer(gw, session, message, authorization)
    # Late or unknown answers are ignored (2025-11-25 basic/utilities §Cancellation: races).
