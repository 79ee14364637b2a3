"""``resources/subscribe`` and the session's upstream ``subscriptions/listen``: one change at a time per session,
queued changes applied together, the listen shared by idle sessions or the session's own."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from adapters.admission import subscription_error
from adapters.errors import ErrorValue, Rejection, reject
from adapters.records import SessionRecord
from adapters.results import response
from adapters.subscriptions import apply_subscribes, gateway_warning, listen_filter, subscribe_uri
from gateway.http.answers import error_answer, rejection_response
from gateway.session.listen import own_listener
from gateway.session.runtime import Gateway, log, session_view
from gateway.session.streams import json_response


async def on_subscribe(request: web.Request, gw: Gateway, session: SessionRecord, ident: Any,
                       params: dict[str, Any], subscribe: bool) -> web.Response:
    uri = subscribe_uri(params)
    if isinstance(uri, ErrorValue):
        return json_response(response(ident, error=uri))
    full = subscription_error(session.subscriptions, uri, gw.config.sessions.session_limits) if subscribe else None
    if full is not None:
        return json_response(response(ident, error=full))
    outcome = await change_listen(gw, session.session_id, request.headers.get("Authorization"), (uri, subscribe))
    if isinstance(outcome, Rejection):
        return rejection_response(outcome)
    if outcome is not None:  # the upstream did not take it: the client is not subscribed
        return error_answer(ident, outcome)
    return json_response(response(ident, {}))


async def change_listen(gw: Gateway, session_id: str, authorization: str | None,
                        change: tuple[str, bool] | None = None) -> ErrorValue | Rejection | None:
    """Apply ``change`` (uri, subscribe?) to the session's subscriptions and make its listen match them.

    One change at a time per session, each reading the record inside the lock: two subscribes that each built
    their filter from the set read before either saved would leave the last acknowledged listen without the
    other's URI (2026-07-28 basic/patterns §Subscriptions: a filter cannot be edited, each change replaces the
    listen). Changes that queue meanwhile are applied together by the next turn, with one listen and one
    acknowledgement wait for all of them, and each gets that outcome: k queued subscribes behind a slow upstream
    wait one ack, not k."""
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


async def listen_in_background(gw: Gateway, session_id: str, authorization: str | None) -> None:
    error = await change_listen(gw, session_id, authorization)  # the record as of now, not of the GET
    if isinstance(error, ErrorValue):  # (a Rejection: the session ended meanwhile, nothing to report)
        log.warning("session %s: list_changed listen unavailable: %s", session_id, error.message)
        # The GET was answered before the listen was refused: its stream is the only place left to say so.
        record, runtime = await gw.store.get_session(session_id), gw.runtimes.get(session_id)
        note = gateway_warning(record.log_level if record else None, "the server refused to send this session "
                               "list_changed notifications", {"error": error.to_wire()})
        if note is not None and runtime is not None:
            runtime.standalone_stream().push(note)
