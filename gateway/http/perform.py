"""The shell's half of the session core: the :class:`adapters.session.Context` a decision needs, and performing
the actions ``adapters.session.handle`` returns for one message, in order. The answer is the last action's (a
response, or a bridge exchange's stream for the caller to write); no protocol decision is made here."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import assert_never

from aiohttp import web

from adapters.classify import Accepted, Kind
from adapters.session import (
    Acknowledge,
    Action,
    Cancel,
    ChangeSubscription,
    Context,
    Deliver,
    FanOut,
    Forward,
    OpenSession,
    PassThrough,
    Refuse,
    Reply,
    Stream,
    UpdateSession,
    handle,
)
from gateway.http.answers import Acknowledgement, ready, rejection_response
from gateway.http.batch import on_batch
from gateway.http.handshake import open_session
from gateway.http.keys import AUTHZ, PASSTHROUGHS, REVERSES
from gateway.http.legacy import cancel, deliver, forward, update_session
from gateway.http.modern import on_modern
from gateway.http.sse import on_delete, on_open_stream, on_resume
from gateway.http.streams import json_response
from gateway.http.subscriptions import on_subscribe
from gateway.session.runtime import Gateway, log
from gateway.session.streams import OutStream
from gateway.telemetry.reverse import reverse_watch

Answer = web.StreamResponse | OutStream


def context(gw: Gateway, acc: Accepted, request: web.Request) -> Context:
    session, limits, today = acc.session, gw.config.limits.bridge_limits, gw.today()
    validator = request.app.get(AUTHZ)  # [gateway.auth]: a tool's scope is stepped up to with its challenge
    resource = validator.server if validator is not None else None
    if session is None:  # initialize or a modern request: decided with the configured peers
        offered = gw.offered_versions(request.headers)  # the client's door: 2024-11-05 on HTTP+SSE, stdio, WebSocket
        return Context(today, limits, gw.config.sessions.session_limits, None, gw.pins.peers, gw.pins.default,
                       (), offered, resource)
    if acc.kind is Kind.BATCH:  # a call in it may need a step-up, challenged for the whole request
        return Context(today, limits, gw.config.sessions.session_limits, gw.peer_of(session), resource=resource)
    if acc.kind is not Kind.REQUEST:  # no peer or runtime is looked up (made) for what does not need one
        return Context(today, limits, gw.config.sessions.session_limits)
    return Context(today, limits, gw.config.sessions.session_limits, gw.peer_of(session), (), None,
                   gw.runtime(session.session_id).exchanges.keys(), resource=resource, now_ms=gw.clock())


def perform(request: web.Request, gw: Gateway, acc: Accepted, actions: tuple[Action, ...]) -> Awaitable[Answer]:
    """The actions performed in order; the answer is the last answering one's. Most messages have one action:
    its performer's own coroutine is returned, so no frame of ours stays alive under a long-lived answer (a GET
    stream is held for as long as its session: every frame held costs each idle session)."""
    if len(actions) == 1:
        return _perform(request, gw, acc, actions[0])  # type: ignore[return-value]  # one action answers
    return _perform_all(request, gw, acc, actions)


async def _perform_all(request: web.Request, gw: Gateway, acc: Accepted, actions: tuple[Action, ...]) -> Answer:
    answer: Answer | None = None
    for action in actions:
        answer = await _perform(request, gw, acc, action) or answer
    assert answer is not None, "every message's actions end with an answer"
    return answer


def _perform(request: web.Request, gw: Gateway, acc: Accepted, action: Action) -> Awaitable[Answer | None]:
    """One action's performer, not awaited here: the caller awaits what it returns."""
    session = acc.session
    match action:  # the most frequent first: a class pattern is an isinstance check, tried in order
        case Forward(_, limits):
            assert session is not None
            return forward(request, gw, session, acc.message, limits)
        case PassThrough(upstream, tools):
            bridges = request.app.get(REVERSES)
            reverse = bridges.get(upstream) if bridges is not None else None
            # a 2025-era upstream: answered as a 2026-07-28 server
            # (docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge)
            if reverse is not None:
                watch = reverse_watch(request, gw, acc.principal, acc.message, acc.grant, upstream)
                return reverse.handle(request, acc.principal, acc.message, request.app[PASSTHROUGHS], watch)
            return on_modern(request, gw, acc, upstream, tools)
        case Reply(message, warning):
            if warning:
                log.warning("%s refused: %s", acc.message.get("method"), warning)
            return ready(json_response(message))
        case Acknowledge():
            return ready(Acknowledgement())
        case Deliver(message):
            assert session is not None
            return deliver(gw, session, message, request.headers.get("Authorization"))
        case UpdateSession():
            assert session is not None
            return update_session(gw, session, action)
        case Cancel(request_id, reason):
            assert session is not None
            return cancel(gw, session, request_id, reason, acc.message)
        case OpenSession():
            return open_session(request, gw, acc, action)
        case ChangeSubscription(ident, params, subscribe):
            assert session is not None
            return on_subscribe(request, gw, session, ident, dict(params), subscribe)
        case Stream(kind):
            return _STREAMS[kind](request, gw, acc)
        case FanOut():
            return on_batch(request, gw, acc, lambda element: _element(request, gw, element))
        case Refuse(rejection):
            return ready(rejection_response(rejection))
        case _:
            assert_never(action)


def answer(request: web.Request, gw: Gateway, acc: Accepted) -> Awaitable[Answer]:
    """The answer to one accepted message: the session core's actions, performed."""
    return perform(request, gw, acc, handle(acc, context(gw, acc, request)))


async def _element(request: web.Request, gw: Gateway, element: Accepted) -> Answer:
    """A batch element, as if posted alone. A request answered here is counted here; a forwarded one is
    counted by its exchange's observer."""
    actions = handle(element, context(gw, element, request))
    result = await perform(request, gw, element, actions)
    if element.kind is Kind.REQUEST and not any(isinstance(a, Forward) for a in actions):
        assert isinstance(result, web.StreamResponse), "an answer given here is never a stream"
        gw.observer.answered(request, element, result, bridged=False)
    return result


_STREAMS = {Kind.OPEN_STREAM: on_open_stream, Kind.RESUME: on_resume, Kind.DELETE: on_delete}
