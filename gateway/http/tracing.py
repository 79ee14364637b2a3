"""What a trace (``serve --trace``) needs from the HTTP handler: which legacy request each message belongs to,
the client's POSTed messages, and the answers written as plain JSON (stream messages are traced as they are
pushed, by :class:`~gateway.session.streams.OutStream`).

Called only when the app's tap is a trace (``Gateway.trace``): without one, the request path does not reach here.
"""

from __future__ import annotations

import itertools
from typing import Any

from aiohttp import web

from adapters.classify import Accepted, Kind
from adapters.jsonwire import loads
from adapters.peers import trace_policy
from adapters.trace import TapKind
from gateway.session.runtime import Gateway
from gateway.telemetry.trace import SCOPE, Scope

_handshakes = itertools.count(1)


def trace_request(gw: Gateway, acc: Accepted) -> None:
    """Open the request's scope (inherited by every task its exchange starts) and trace what the client sent."""
    assert gw.trace is not None
    session = acc.session.session_id if acc.session is not None else None
    if acc.kind is Kind.INITIALIZE:  # no session id yet: one of its own, so two handshakes never share a key
        session = f"initialize-{next(_handshakes)}"
    peer = gw.request_peer(acc)  # its [peers.trace] over [gateway.trace]; content unset: the trace's own
    traced = trace_policy(peer, gw.config.trace.enabled, False)[0]
    SCOPE.set(Scope(session, _legacy_request(gw, session, acc), gw.runtimes, traced=traced,
                    content=peer.trace_content))
    if not traced:  # this peer's traffic is not traced ([peers.trace] enabled = false)
        return
    if acc.kind is Kind.BATCH:
        for element in acc.batch:
            if isinstance(element, Accepted):
                gw.trace(TapKind.CLIENT, element.message)
    elif acc.message:
        gw.trace(TapKind.CLIENT, acc.message)


def _legacy_request(gw: Gateway, session: str | None, acc: Accepted) -> Any:
    """The downstream id a message belongs to: a request's own; for the client's answer to a gateway request
    (2025-11-25 client/sampling, client/elicitation), the request that bridge round serves; for a cancel, the one
    it names (2025-11-25 basic/utilities §Cancellation)."""
    message = acc.message
    if acc.kind is Kind.REQUEST:
        return message.get("id")
    if acc.kind is Kind.RESPONSE and session in gw.runtimes:
        ident = message["id"]  # an answer to a request of ours when it is one of the (str) ids we minted
        exchange = gw.runtimes[session].awaiting.get(ident) if isinstance(ident, str) else None
        return exchange.record.downstream_id if exchange is not None else None
    params = message.get("params")
    if message.get("method") == "notifications/cancelled" and isinstance(params, dict):
        return params.get("requestId")
    return message.get("id") if acc.kind is Kind.INITIALIZE else None


def trace_answer(gw: Gateway, answer: web.StreamResponse) -> None:
    """Trace a plain JSON answer, unless its message went through a stream (traced when pushed)."""
    assert gw.trace is not None
    if not isinstance(answer, web.Response) or answer.content_type != "application/json":
        return
    body = answer.body
    if not isinstance(body, bytes) or not body:
        return
    try:
        message = loads(body)
    except ValueError:
        return
    scope = SCOPE.get()
    for one in message if isinstance(message, list) else [message]:
        if scope is None or not scope.streamed(one):
            gw.trace(TapKind.DOWNSTREAM, one)
