"""``resources/subscribe`` and the session's upstream ``subscriptions/listen``: one change at a time per session,
queued changes applied together, the listen shared by idle sessions or the session's own."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from adapters.admission import admit_changes, subscription_error
from adapters.errors import ErrorValue, Reason, Rejection, reject
from adapters.records import SessionRecord
from adapters.results import response
from adapters.subscriptions import apply_subscribes, gateway_warning, listen_filter, subscribe_uri
from gateway.http.answers import error_answer, rejection_response
from gateway.http.streams import json_response
from gateway.session.listen import own_listener
from gateway.session.runtime import Gateway, log, session_view


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
    """Apply ``change`` (uri, subscribe?) to the session's subscriptions and make its listen match them, in the
    session's turn (gateway.session.listen.Turns): each turn reads the record inside the lock, since a filter
    cannot be edited and each change replaces the listen (2026-07-28 basic/patterns §Subscriptions)."""
    listener = own_listener(gw.runtime(session_id))
    return await listener.turns.submit(change, lambda changes: _turn(gw, session_id, authorization, changes))


async def _turn(gw: Gateway, session_id: str, authorization: str | None,
                changes: list[tuple[str, bool] | None]) -> list[ErrorValue | Rejection | None]:
    """One turn: the changes within the session's bounds (adapters.admission.admit_changes) applied with one
    listen and one acknowledgement wait, each answered with that outcome; the others with their limit error."""
    session = await gw.store.get_session(session_id)
    held = session.subscriptions if session is not None else []
    refusals = admit_changes(held, changes, gw.config.sessions.session_limits)
    if all(refusal is not None for refusal in refusals):
        return list(refusals)
    kept = [change for change, refusal in zip(changes, refusals, strict=True) if refusal is None and change]
    outcome = await _apply_changes(gw, session_id, authorization, kept)
    return [refusal if refusal is not None else outcome for refusal in refusals]


async def _apply_changes(gw: Gateway, session_id: str, authorization: str | None,
                         changes: list[tuple[str, bool]]) -> ErrorValue | Rejection | None:
    session = await gw.store.get_session(session_id)
    if session is None:
        return reject(Reason.UNKNOWN_SESSION, "session not found")
    session.subscriptions = apply_subscribes(session.subscriptions, changes)
    error = await ensure_listen(gw, session, authorization)
    if error is not None or not changes:
        return error
    # Made on the stored record, not the one read before the wait for the ack: a concurrent request (setLevel) may
    # have changed it meanwhile, and writing our copy back would undo that; a DELETE meanwhile stands.
    def subscribe(record: SessionRecord) -> None:
        record.subscriptions = apply_subscribes(record.subscriptions, changes)
    if await gw.store.change_session(session_id, subscribe) is None:
        return reject(Reason.UNKNOWN_SESSION, "session not found")
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
