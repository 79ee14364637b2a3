"""One exchange's upstream calls and the session-record writes its steps ask for (the I/O of the bridge
machine's ``CallUpstream``, ``PollTask``, ``UpdateTask``, ``CancelTask``, ``StoreRoots`` and ``RememberTask``;
``adapters.bridge``): each round built from the session record it is given, the HEADER_MISMATCH ``tools/list`` refresh
and resend the keeper allows (``adapters.exchange.Keeper.refreshes``), learned x-mcp-header maps kept, and
the request's progress and log notifications passed on. :class:`gateway.session.exchange.Exchange` owns the
tasks these run in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, cast

from adapters import bridge as B
from adapters import exchange as X
from adapters import legacy_tasks
from adapters.admission import answer_verifies, header_maps_storable, roots_cacheable
from adapters.classify import session_expired
from adapters.errors import INTERNAL_ERROR, ErrorValue, store_unavailable
from adapters.records import PendingRound, SessionRecord
from adapters.results import progress_advances, request_notification
from adapters.task_poll import declare
from adapters.upstream import UnencodableHeader, build_request, header_map_of, learned_header_maps, needs_header_refresh
from gateway.errors import SessionError
from gateway.session.listen import remember_task, task_watch
from gateway.session.runtime import SessionRuntime, log, new_id, session_view
from gateway.session.store import StoreUnavailable
from gateway.upstream.client import Answer, UpstreamFailure

REFRESH_PAGE_CAP = 20
Notify = Callable[[dict[str, Any]], None]
_INTERNAL = ErrorValue(INTERNAL_ERROR, "internal gateway error")  # a gateway bug: nothing more for the client


class Refused(SessionError):
    """A round about to wait was past a bound the store counts (adapters.admission.admit_waiting): the request
    ends with that limit error, before the client is asked anything."""

    def __init__(self, error: ErrorValue) -> None:
        super().__init__(error.message)
        self.error = error


def failure(exc: Exception, downstream_id: Any) -> ErrorValue:
    """What the client is told when the exchange itself fails: the store's unavailability (a dependency, said as
    such), a bound the store counts, or a gateway bug (logged with its traceback)."""
    if isinstance(exc, StoreUnavailable):
        log.warning("request %r: %s", downstream_id, exc)
        return store_unavailable().error
    if isinstance(exc, Refused):
        log.warning("request %r refused: %s", downstream_id, exc)
        return exc.error
    log.exception("exchange for request %r failed", downstream_id, exc_info=exc)
    return _INTERNAL


class Rounds:
    """``request_session``: the record the request was accepted with
    (docs/design/takeover.md#a-clients-answer-is-checked-on-its-requests-session-record). Each call is given
    ``notify``, where the request's notifications go (its stream, or kept until there is one): never kept here,
    so nothing here refers back to the exchange, which is freed (by reference counting) as soon as it ends."""

    __slots__ = ("_last_progress", "authorization", "keeper", "progress_token", "record", "request_session",
                 "runtime")

    def __init__(self, runtime: SessionRuntime, record: PendingRound, authorization: str | None,
                 keeper: X.Keeper, request_session: SessionRecord | None) -> None:
        self.runtime, self.record, self.authorization, self.keeper = runtime, record, authorization, keeper
        self.request_session = request_session
        self._last_progress: float | None = None
        meta = record.params.get("_meta")
        self.progress_token = meta.get("progressToken") if isinstance(meta, dict) else None

    def _passed_on(self, notify: Notify) -> Notify:
        """The upstream call's notification callback: the request's own notifications, progress only forward."""
        def on_notification(message: dict[str, Any]) -> None:
            legacy = request_notification(message, self.progress_token)
            if legacy is not None:
                keep, self._last_progress = progress_advances(self._last_progress, legacy)
                if keep:
                    notify(legacy)
        return on_notification

    async def event(self, notify: Notify, extra: dict[str, Any], session: SessionRecord | None,
                              task: B.PollTask | B.UpdateTask | None = None) -> Any:
        """One upstream round -> the machine's event for its outcome. Always an event, whatever goes wrong: the
        exchange waits for it, so a round that raised would hold the request (and its pending slot) until the
        total limit and then blame the wrong thing."""
        try:
            return await self._round(notify, extra, session, task)
        except UpstreamFailure as failed:
            return B.UpstreamFailed(failed.error)
        except UnencodableHeader as bad:  # raised while building, so nothing was sent (header value encoding)
            return B.UpstreamFailed(bad.error(self.record.method))
        except Exception as exc:  # answered at once, like a failure of the exchange itself
            return B.UpstreamFailed(failure(exc, self.record.downstream_id))

    async def _round(self, notify: Notify, extra: dict[str, Any], session: SessionRecord | None,
                     task: B.PollTask | B.UpdateTask | None = None) -> Any:
        """``session``: the record read by the handler whose request or answer starts this round; None (a
        timer's retry) reads it again, since the session may have ended or changed meanwhile."""
        rec = self.record
        if session is None:  # a timer's retry: on a session that ended or expired meanwhile it stops
            session = await self.runtime.gateway.store.get_session(rec.session_id)
            stop = X.retry_refused(session, session is not None and self._expired(session))
            if stop is not None:
                return stop
        assert session is not None
        if task is not None:
            return await self._send(notify, session, extra, task)
        answer = await self._send(notify, session, extra)
        mismatch = isinstance(answer, B.UpstreamError) and needs_header_refresh(rec.method, answer.error)
        if self.keeper.refreshes(mismatch):  # the x-mcp-header map refreshed once, the round resent
            await self._refresh_header_maps(session)
            answer = await self._send(notify, session, extra)
        if isinstance(answer, B.UpstreamResult) and rec.method == "tools/list":
            maps = learned_header_maps(self._header_maps(session), answer.result)
            if maps is not None:
                await self._keep_header_maps(session, maps)
        return answer

    def _expired(self, session: SessionRecord) -> bool:
        gateway = self.runtime.gateway
        return session_expired(session, gateway.clock(), gateway.policy.session_idle_ms)

    async def _send(self, notify: Notify, session: Any, extra: dict[str, Any],
                    task: B.PollTask | B.UpdateTask | B.CancelTask | None = None) -> Answer:
        rec = self.record
        method, params = task.request() if task is not None else (rec.method, rec.params)
        if task is not None and "inputResponses" in params:  # the bridge's own field: build_request adds it as such
            params, extra = {**params}, {**extra, "inputResponses": params["inputResponses"]}
            del params["inputResponses"]
        # A tools/call's name is a str: adapters.local.check_request validated the params.
        header_map = (header_map_of(self._header_maps(session), cast(str, rec.params.get("name")))
                      if method == "tools/call" else None)
        view = session_view(session, self.authorization)
        # The tasks extension is declared where the upstream offers it and the bridge drives tasks (task_poll).
        view = replace(view, capabilities=declare(view.capabilities, session.server_capabilities, method))
        call = build_request(method, params, request_id=new_id("u"), extra=extra, view=view, header_map=header_map)
        gateway = self.runtime.gateway
        answer = await gateway.upstream_for(session.upstream).call(call, self._passed_on(notify))
        # An answer at all (a 401/403 raised UpstreamFailure): the upstream took the credential it was given.
        if answer_verifies(self.authorization is not None, rec.authorized is True):
            await gateway.verify(session.principal)
        return answer

    async def cancel_task(self, action: B.CancelTask, notify: Notify) -> None:
        """``tasks/cancel`` for a task the call gave up on; its answer changes nothing (the call is over), a
        failure is logged (the task then ends at its own TTL upstream: ext-tasks §Task Lifetime)."""
        try:
            session = await self.runtime.gateway.store.get_session(self.record.session_id)
            if session is None:
                session = self.request_session
            if session is not None:
                answer = await self._send(notify, session, {}, action)
                if isinstance(answer, B.UpstreamError):
                    log.info("request %r: tasks/cancel answered %s", self.record.downstream_id, answer.error)
        except Exception as exc:  # UpstreamFailure, StoreUnavailable, ...: nothing more to do for a finished call
            log.warning("request %r: task %s was not cancelled upstream: %s", self.record.downstream_id,
                        action.task_id, exc)

    async def _refresh_header_maps(self, session: Any) -> None:
        """Every page of tools/list learned, then kept once (one record write for the whole refresh)."""
        upstream, cursor = self.runtime.gateway.upstream_for(session.upstream), None
        maps, changed = self._header_maps(session), False
        for _page in range(REFRESH_PAGE_CAP):  # a paginator that never ends cannot hang the request
            call = build_request("tools/list", {"cursor": cursor} if cursor else {}, request_id=new_id("u"),
                                 view=session_view(session, self.authorization))
            answer = await upstream.call(call, lambda _m: None)
            if not isinstance(answer, B.UpstreamResult):
                break
            learned = learned_header_maps(maps, answer.result)
            if learned is not None:
                maps, changed = learned, True
            cursor = answer.result.get("nextCursor") if isinstance(answer.result, dict) else None
            if not isinstance(cursor, str):
                break
        if changed:
            await self._keep_header_maps(session, maps)

    def _header_maps(self, session: SessionRecord) -> dict[str, Any]:
        """The session's x-mcp-header maps: its record's, else (none learned, or too large for the record) those
        this process keeps for it."""
        return session.header_maps if session.header_maps is not None else self.runtime.header_maps

    async def _keep_header_maps(self, session: SessionRecord, maps: dict[str, Any]) -> None:
        """Keep learned x-mcp-header maps so tools/call can mirror Mcp-Param-*
        (docs/design/upstream.md#mcp-param--headers): in the session's record, where every replica serving it finds
        them, when they fit there; else in this process. ``session`` (the record this request was read with) sees
        them at once, for the resend a HEADER_MISMATCH asks for."""
        gateway = self.runtime.gateway
        kept = maps if header_maps_storable(maps, gateway.config.sessions.session_limits) else None
        self.runtime.header_maps = {} if kept is not None else maps
        if kept == session.header_maps:
            return
        session.header_maps = kept
        try:
            await self._update_session(header_maps=kept)
        except StoreUnavailable as exc:  # the request still gets its answer; the next HEADER_MISMATCH learns them again
            log.warning("request %r: the session's header maps were not saved: %s", self.record.downstream_id, exc)

    async def _update_session(self, **changes: Any) -> None:
        """``changes`` made to the session's stored record, read again here: what changed since this request read
        it is kept (a session ended meanwhile stays ended)."""
        def apply(stored: SessionRecord) -> None:
            for name, value in changes.items():
                setattr(stored, name, value)
        await self.runtime.gateway.store.change_session(self.record.session_id, apply)

    async def remember(self, action: B.RememberTask) -> None:
        """A 2025 task as last seen, kept in the session's registry (adapters.legacy_tasks): written only when it
        changed there, so tasks/list and tasks/cancel on any replica see it; when the tasks that may still move
        changed, the session's task listen follows them (gateway.session.listen.TaskWatch)."""
        known = self.request_session.legacy_tasks if self.request_session is not None else None
        now = self.runtime.gateway.clock()
        if legacy_tasks.remember(known, action.task, action.created, now) is None and known is not None:
            return  # the record this request read already holds it
        seen = await remember_task(self.runtime, action.task, action.created)
        if seen.refollow:
            self.runtime.spawn(task_watch(self.runtime).follow(self.authorization))
        if self.request_session is not None:  # this request's later steps see it too
            self.request_session.legacy_tasks = legacy_tasks.remember(known, action.task, action.created, now) or known

    async def store_roots(self, result: dict[str, Any]) -> None:
        gateway = self.runtime.gateway
        if not roots_cacheable(result, gateway.config.sessions.session_limits):
            return  # too large to keep for the session's life: asked again next time
        await self._update_session(cached_roots=result)
