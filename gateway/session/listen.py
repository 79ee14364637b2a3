"""The per-session upstream ``subscriptions/listen`` that feeds the legacy GET stream (2026-07-28
basic/patterns §Subscriptions; docs/design/streams.md#subscriptions-over-subscriptionslisten).

A filter cannot be changed in place: :meth:`Listener.ensure` opens a new listen, waits for its acknowledgement,
then closes the old one, so no notification falls into a gap. An abrupt end of the listen (upstream restart) is
retried with a capped backoff while the session lives (the server keeps no subscription state);
a re-open is checked like the first open: URIs its acknowledgement leaves out are unsubscribed, and a re-open
the upstream refuses ends the listen instead of retrying (``adapters.subscriptions.worth_retrying``).
A listen the upstream answers with a JSON-RPC error before its acknowledgement fails the change with that error,
translated for the legacy client (``adapters.subscriptions.listen_refusal``); so does one whose acknowledgement
leaves out a subscribed URI, and the old listen stays.

A session with 2025 tasks also has a task listen (:class:`TaskWatch`, adapters.legacy_tasks,
docs/design/bridge.md#tasks-the-gateway-drives-them-or-maps-them-onto-2025-tasks): the upstream's
``notifications/tasks`` for its live tasks, kept in its registry and sent on its GET stream as
``notifications/tasks/status``."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar, cast

from adapters import legacy_tasks
from adapters.errors import ErrorValue, UpstreamFault, upstream_failure
from adapters.records import SessionRecord
from adapters.subscriptions import (
    gateway_warning,
    is_ack,
    legacy_notification,
    listen_refusal,
    unhonoured,
    unhonoured_error,
    without_uris,
    worth_retrying,
)
from adapters.task_poll import TaskOutcome, declare
from adapters.upstream import SessionView, build_listen
from gateway.session.runtime import Gateway, SessionRuntime, log, new_id, session_view
from gateway.session.store import StoreUnavailable
from gateway.upstream.client import UpstreamFailure

ACK_TIMEOUT_SECONDS = 10.0



C = TypeVar("C")  # a change
R = TypeVar("R")  # its outcome
T = TypeVar("T")  # what a spawned task returns


class Turns(Generic[C, R]):
    """Changes applied one turn at a time. The changes that queue while a turn runs are applied together by the
    next one, with one outcome each: k changes behind a slow turn (a listen waiting for its acknowledgement)
    wait one more turn, not k. A change whose submitter is cancelled before its turn is dropped (nobody is left
    to tell); a turn cancelled while it runs hands the others' changes to the next."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.queued: list[tuple[C, asyncio.Future[R]]] = []

    async def submit(self, change: C, apply: Callable[[list[C]], Awaitable[list[R]]]) -> R:
        mine: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self.queued.append((change, mine))
        try:
            async with self.lock:
                if not mine.done():  # nobody took it yet: this turn applies everything queued so far
                    await self._turn(mine, apply)
        except BaseException:
            self.queued = [item for item in self.queued if item[1] is not mine]
            raise
        return mine.result()

    async def _turn(self, mine: asyncio.Future[R], apply: Callable[[list[C]], Awaitable[list[R]]]) -> None:
        batch, self.queued = self.queued, []
        try:
            outcomes = await apply([change for change, _ in batch])
        except BaseException:  # cancelled (shutdown): the next turn takes the others' changes
            self.queued[:0] = [item for item in batch if item[1] is not mine]
            raise
        for (_change, waiter), outcome in zip(batch, outcomes, strict=True):
            waiter.set_result(outcome)

class Listener:
    """One upstream listen at a time, delivering to ``deliver``; by default a session's own GET stream."""

    def __init__(self, runtime: SessionRuntime | None = None, *, gateway: Gateway | None = None,
                 spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task[Any]] | None = None,
                 deliver: Callable[[dict[str, Any]], None] | None = None, label: str = "") -> None:
        self.upstream = "default"  # the session's upstream name (per-peer routing)
        self.runtime = runtime  # None for a shared listen (ListenHub)
        self.on_end: Callable[[ErrorValue], None] | None = None  # a refused re-open ended the listen
        # Takes every listen message but the acknowledgement and a refusal instead of the list_changed delivery
        # (a task listen: TaskWatch).
        self.on_message: Callable[[dict[str, Any]], Awaitable[None]] | None = None
        self.gateway = gateway if gateway is not None else runtime.gateway  # type: ignore[union-attr]
        self.spawn = spawn if spawn is not None else runtime.spawn  # type: ignore[union-attr]
        self.deliver = deliver if deliver is not None else (lambda m: runtime.standalone_stream().push(m))  # type: ignore[union-attr]
        self.label = label or (runtime.session_id if runtime is not None else "shared")
        self.filter: dict[str, Any] | None = None
        self.task: asyncio.Task[Any] | None = None
        # A session's listen changes, one turn at a time (gateway.http.subscriptions.change_listen): each builds
        # its filter from the record it reads, so two at once would each leave out the other's URI.
        self.turns: Turns[Any, Any] = Turns()

    async def ensure(self, wanted: dict[str, Any], view: SessionView) -> ErrorValue | None:
        if wanted == self.filter and self.task is not None and not self.task.done():
            return None
        task = None
        if wanted:
            task, error = await self._open(wanted, view)
            if error is not None:
                return error
        # Read the old listen only now: a concurrent ensure() may have replaced it while we waited.
        old, self.filter, self.task = self.task, wanted or None, task
        if old is not None:
            old.cancel()
        return None

    async def _open(self, wanted: dict[str, Any],
                    view: SessionView) -> tuple[asyncio.Task[Any] | None, ErrorValue | None]:
        """A new listen once acknowledged, or the error; a listen that is not taken is cancelled."""
        acked: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        # The refusal may come after whoever waited is gone (the session ended while the listen opened): the
        # future's exception is then nobody's, and is read here so it is not reported as never retrieved.
        acked.add_done_callback(lambda done: done.cancelled() or done.exception())
        task = self.spawn(self._run(wanted, view, acked))
        try:
            ack = await asyncio.wait_for(asyncio.shield(acked), ACK_TIMEOUT_SECONDS)
            missing = unhonoured(ack, wanted)
            if missing:  # the acknowledged filter is what the server will honour (2026-07-28 §Subscriptions)
                raise UpstreamFailure(unhonoured_error(missing))
        except BaseException as exc:
            # Also when we are cancelled (whoever asked is gone): with a hub's spawn nothing else would end it.
            task.cancel()
            if isinstance(exc, UpstreamFailure):
                return None, exc.error
            if isinstance(exc, asyncio.TimeoutError):
                return None, upstream_failure(UpstreamFault.TIMEOUT, "subscriptions/listen was not acknowledged")
            raise
        return task, None

    async def _run(self, wanted: dict[str, Any], view: SessionView, acked: asyncio.Future[dict[str, Any]]) -> None:
        delay = 0.5
        while True:
            try:
                await self._listen_once(wanted, view, acked)
            except UpstreamFailure as failure:
                if not acked.done():
                    acked.set_exception(failure)
                    return
                if not worth_retrying(failure.error):  # a re-open the upstream refused: it would refuse again
                    await self._refused(failure.error)
                    return
                log.warning("listen stream for %s ended: %s", self.label, failure)
            if not acked.done():
                acked.set_exception(UpstreamFailure(upstream_failure(UpstreamFault.STREAM_BROKEN,
                                                                     "listen ended before ack")))
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
            wanted = self.filter if self.task is asyncio.current_task() and self.filter else wanted

    async def _listen_once(self, wanted: dict[str, Any], view: SessionView,
                           acked: asyncio.Future[dict[str, Any]]) -> None:
        call = build_listen(new_id("l"), view, wanted)
        # aclosing: leaving the loop by a raise closes the upstream response now, not when the generator is collected
        async with contextlib.aclosing(self.gateway.upstream_for(self.upstream).messages(call)) as messages:
            async for message in messages:
                if is_ack(message):
                    if not acked.done():
                        acked.set_result(message)
                    elif missing := unhonoured(message, wanted):  # a re-open: the server may honour less now
                        await self._unhonoured(wanted, missing)
                    continue
                refused = listen_refusal(message, call.body["id"])
                if refused is not None:  # before the ack: the subscribe gets this error, not "ended before ack"
                    raise UpstreamFailure(refused)
                if self.on_message is not None:
                    await self.on_message(message)
                    continue
                legacy = legacy_notification(message)
                if legacy is not None:
                    self.deliver(legacy)

    async def _unhonoured(self, wanted: dict[str, Any], missing: list[str]) -> None:
        """A re-opened listen's acknowledgement left out subscribed URIs: the session is no longer
        subscribed to them (its record says so, so a new subscribe asks again), and the client is told."""
        runtime = self.runtime
        if runtime is None or self.task is not asyncio.current_task():  # shared, or superseded meanwhile
            return
        def unsubscribe(stored: SessionRecord) -> None:
            stored.subscriptions = [u for u in stored.subscriptions if u not in missing]
        async with self.turns.lock:  # the record's subscriptions change only in the session's turn
            record = await self.gateway.store.change_session(runtime.session_id, unsubscribe)
            if record is None:
                return
            self.filter = without_uris(wanted, missing)
        log.warning("re-opened listen for %s no longer honours %s", self.label, ", ".join(missing))
        self._tell(record.log_level, "the server no longer honours these resource subscriptions",
                   {"unhonouredUris": missing})

    async def _refused(self, error: ErrorValue) -> None:
        log.warning("listen for %s refused on re-open, not retried: %s", self.label, error.message)
        if self.on_end is not None:
            self.on_end(error)
        if self.runtime is None or self.task is not asyncio.current_task():
            return
        record = await self.gateway.store.get_session(self.runtime.session_id)
        self._tell(record.log_level if record else None, "the server refused to keep notifying this session; "
                   "subscribe again to retry", {"error": error.to_wire()})

    def _tell(self, log_level: str | None, text: str, data: dict[str, Any]) -> None:
        """The client's own GET stream carries the gateway's warning, when its log level admits one."""
        note = gateway_warning(log_level, text, data)
        if note is not None:
            self.deliver(note)


class TaskWatch:
    """A session's task listen (ext-tasks §Task Status Notifications): ``subscriptions/listen`` with the
    ``taskIds`` of its registry's live tasks (adapters.legacy_tasks.listen_filter), the extension declared. Each
    ``notifications/tasks`` that is news to the registry is kept there and goes on the session's GET stream as
    ``notifications/tasks/status`` (2025-11-25 basic/utilities/tasks §Task Status Notification: receivers MAY send
    one), so a client learns of a change without a waiting tasks/result. The listen is this replica's: it follows
    the tasks created or seen ending here."""

    def __init__(self, runtime: SessionRuntime) -> None:
        self.runtime = runtime
        self.authorization: str | None = None  # the credential of the request that last changed the tasks
        self.listener = Listener(runtime, label=f"{runtime.session_id} (2025 tasks)")
        self.listener.on_message = self.status

    async def follow(self, authorization: str | None) -> None:
        """Make the listen follow the registry as stored now, one change at a time (the last one read wins). A
        listen the upstream refuses costs only the notifications: requestors poll (§Task Status Notification)."""
        if authorization is not None:
            self.authorization = authorization
        gateway, listener = self.runtime.gateway, self.listener
        async with listener.turns.lock:
            session = await gateway.store.get_session(self.runtime.session_id)
            if session is None:
                return
            view = session_view(session, self.authorization)
            # The task listen declares the extension (ext-tasks: refused as a missing capability without it); the
            # session's other listens do not.
            view = replace(view, capabilities=declare(view.capabilities, session.server_capabilities,
                                                      "subscriptions/listen"))
            listener.upstream = session.upstream
            error = await listener.ensure(legacy_tasks.listen_filter(session.legacy_tasks, gateway.clock()), view)
        if error is not None:
            log.info("session %s: no task status notifications: %s", self.runtime.session_id, error.message)

    async def status(self, message: dict[str, Any]) -> None:
        task = legacy_tasks.from_listen(message)
        if task is None:
            return
        try:
            seen = await remember_task(self.runtime, task, False)
        except StoreUnavailable as exc:  # the notification is lost; the client's next poll still sees the task
            log.warning("session %s: task status not kept: %s", self.runtime.session_id, exc)
            return
        if seen.news:
            self.runtime.standalone_stream().push(legacy_tasks.status_notification(task))
        if seen.refollow:  # it ended: the listen no longer needs it
            self.runtime.spawn(self.follow(None))


@dataclass
class Remembered:
    """What writing a task to the registry did: ``news`` it changed it; ``outcome`` the task ended and this write
    is the first to know (adapters.legacy_tasks.ended); ``refollow`` the tasks to listen to changed."""

    news: bool = False
    outcome: TaskOutcome | None = None
    refollow: bool = False


async def remember_task(runtime: SessionRuntime, task: dict[str, Any], created: bool) -> Remembered:
    """A 2025 task as just seen, written to the session's registry; a task seen ending for the first time is
    counted here, once (``mcp_gateway_tasks``). A shared store may run the change again on a newer record: what
    its last run saw is what counts."""
    gateway, now = runtime.gateway, runtime.gateway.clock()
    seen = Remembered()

    def apply(stored: SessionRecord) -> None:
        nonlocal seen
        before, changed = stored.legacy_tasks, legacy_tasks.remember(stored.legacy_tasks, task, created, now)
        seen = Remembered()
        if changed is None:
            return
        seen = Remembered(True, legacy_tasks.ended(before, task),
                          legacy_tasks.watched(before, now) != legacy_tasks.watched(changed, now))
        stored.legacy_tasks = changed
    if await gateway.store.change_session(runtime.session_id, apply) is None:
        return Remembered()
    if seen.outcome is not None:
        gateway.observer.task_ended(seen.outcome)
    return seen


def task_watch(runtime: SessionRuntime) -> TaskWatch:
    if runtime.task_watch is None:
        runtime.task_watch = TaskWatch(runtime)
    return cast(TaskWatch, runtime.task_watch)  # runtime holds it untyped: runtime cannot import this module


def own_listener(runtime: SessionRuntime) -> Listener:
    """The session's own listener (made on first use, listening or not): it also holds the session's lock."""
    if runtime.listen is None:
        runtime.listen = Listener(runtime)
    return cast(Listener, runtime.listen)


class ListenHub:
    """Shared listens for sessions that need only list_changed (no resource subscriptions).

    Thousands of idle legacy sessions with a GET stream would otherwise hold one upstream listen each (an
    upstream connection, a task and the upstream's own state per session). Sessions on the same upstream, with
    the same credentials and the same filter, share one listen and each receives every notification on its own
    GET stream (2025-11-25: each message goes on exactly one stream *per session*). A session with subscriptions keeps
    its own listen, whose filter carries its URIs.
    """

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.shared: dict[tuple[str, str, str], _Shared] = {}
        self.tasks: set[asyncio.Task[Any]] = set()

    def _spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def join(self, runtime: SessionRuntime, upstream: str, wanted: dict[str, Any],
                   view: SessionView) -> ErrorValue | None:
        key = (upstream, view.authorization or "", json.dumps(wanted, sort_keys=True))
        if runtime.hub_key == key:
            return None
        entry = self.shared.get(key)
        if entry is None:  # the first joiner opens it; later ones wait for the same acknowledgement
            entry = self.shared[key] = _Shared(self, upstream)
            entry.ready = self._spawn(entry.listener.ensure(wanted, view))
        entry.waiting += 1
        try:
            error = await asyncio.shield(entry.ready)
        except BaseException:  # cancelled: the session ended while waiting (DELETE, idle sweep, shutdown)
            entry.waiting -= 1
            self._discard_unused(key, entry)
            raise
        entry.waiting -= 1
        if error is not None:
            self._discard_unused(key, entry)
            return error
        self.leave(runtime)
        entry.members[runtime.session_id] = runtime
        runtime.hub_key = key
        return None

    def leave(self, runtime: SessionRuntime) -> None:
        key, runtime.hub_key = runtime.hub_key, None
        entry = self.shared.get(key) if key is not None else None
        if entry is None:
            return
        entry.members.pop(runtime.session_id, None)
        self._discard_unused(key, entry)

    def _discard_unused(self, key: tuple[str, str, str], entry: _Shared) -> None:
        """No member holds ``entry`` and nobody waits for its acknowledgement: forget it and end its listen."""
        if entry.members or entry.waiting:
            return
        if self.shared.get(key) is entry:  # a failed entry may already have been replaced under the same key
            del self.shared[key]
        entry.ready.cancel()  # still waiting for the ack: Listener._open cancels the listen it opened
        if entry.listener.task is not None:
            entry.listener.task.cancel()  # closing the listen's response is the 2026 cancel

    def forget(self, entry: _Shared) -> None:
        """A shared listen ended for good (its re-open was refused): later joiners open a new one, and its
        members are no longer in it, so their next GET stream or subscribe joins or opens another."""
        for key in [k for k, e in self.shared.items() if e is entry]:
            del self.shared[key]
        for runtime in entry.members.values():
            runtime.hub_key = None
        entry.members.clear()

    async def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.shared.clear()


class _Shared:
    def __init__(self, hub: ListenHub, upstream: str) -> None:
        self.members: dict[str, SessionRuntime] = {}
        self.waiting = 0  # joiners waiting for the acknowledgement (not members yet)
        self.listener = Listener(gateway=hub.gateway, spawn=hub._spawn, deliver=self.deliver,
                                 label=f"shared listen on {upstream}")
        self.listener.upstream = upstream
        self.listener.on_end = lambda _error: hub.forget(self)
        self.ready: asyncio.Task[ErrorValue | None]

    def deliver(self, message: dict[str, Any]) -> None:
        for runtime in list(self.members.values()):
            runtime.standalone_stream().push(message)
