"""The reverse bridge's tasks (docs/design/eras.md#tasks-in-reverse): a 2026-07-28 client's task-augmented
``tools/call``, ``tasks/get``, ``tasks/update`` and ``tasks/cancel`` performed on a 2025-11-25 server's tasks.

Owns the registry of the tasks created through this replica (by principal and the upstream's opaque task id), the
pooled session each was created on (a 2025 server binds a task to its session: every request about it rides
that one, which stays open while the task lives), and each task's *driver*: the upstream ``tasks/result`` read
from creation until it answers, whose streamed requests become the task's ``inputRequests``. The rules are
``adapters.reverse_tasks``'s; this module only performs them.

On a store replicas share it also records this replica as the holder of each task it keeps (a lease renewed while
the task is kept, ``gateway.session.store.TaskHolders``), and finds the holder of a task kept elsewhere: the bridge
relays the request there (gateway.http.reverse). A listen here watching tasks held elsewhere registers its watch
with each holder, which pushes it every change of the task as it happens (``adapters.reverse_watch`` decides who
is told what): this module pushes the changes of the tasks kept here and delivers those pushed here.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from adapters import reverse_tasks as RT
from adapters import reverse_watch as RW
from adapters.errors import ErrorValue, UpstreamFault, upstream_failure
from adapters.jsonwire import JsonObject, JsonView, members
from adapters.relay import ReplyTo
from adapters.reverse_wire import Request, complete_result, modern_error
from gateway.session.runtime import log
from gateway.session.store import StoreUnavailable, TaskHolders
from gateway.upstream.legacy_session import BROKE, GONE, LegacyFailure, LegacySession, SessionGone

_FAILURES = (LegacyFailure, SessionGone, aiohttp.ClientError, TimeoutError, ValueError)
Answer = tuple[JsonObject | None, ErrorValue | None]


class Holding(Protocol):
    """What a task needs of its pooled session (gateway.http.reverse.Pooled): the session, and the count that
    keeps the pool from closing it."""

    session: LegacySession
    busy: int


@dataclass(eq=False)
class Entry:
    pooled: Holding
    state: RT.TaskState
    driver: asyncio.Task[None] | None = None
    held: bool = True  # counted in pooled.busy until the task is terminal here
    last: JsonView | None = None  # the server's 2025 Task as last seen (tasks/get, notifications/tasks/status)
    seen: str = ""  # what listens were last told of it (adapters.reverse_tasks.seen)


Listen = asyncio.Queue[Any]  # a subscriptions/listen stream's queue (gateway.http.reverse)
# Relays a payload to a replica as a retry is, its answer (None: that replica is gone): gateway.http.reverse.
Forward = Callable[[str, dict[str, Any]], Awaitable[Mapping[str, Any] | None]]
# Asks a task's holder for its state by a relayed tasks/get registering a watch (holder, task id, watch).
Ask = Callable[[str, str, ReplyTo], Awaitable[Mapping[str, Any] | None]]


@dataclass(eq=False)
class Following:
    """A listen here watching tasks held on other replicas: what it was told, and when nothing more can be."""

    watch: RW.Watch
    listen: Listen
    done: asyncio.Event = field(default_factory=asyncio.Event)


class ReverseTasks:
    """The tasks of one reverse-bridged upstream."""

    def __init__(self, limits: RT.TaskLimits | None = None, upstream: str = "default", replica: str = "") -> None:
        self.limits = limits or RT.TaskLimits()
        self.upstream, self.replica = upstream, replica
        self.entries: dict[tuple[str, str], Entry] = {}  # (principal, task id), oldest first
        self.watchers: dict[Listen, tuple[str, frozenset[str]]] = {}  # listen -> its principal, the tasks it watches
        # Where the holder of each task is recorded (gateway.http.reverse_bridges); None: no store replicas share.
        self.holders: Callable[[], TaskHolders | None] = lambda: None
        self.renewer: asyncio.Task[None] | None = None
        self.releasing: set[asyncio.Task[None]] = set()
        # Other replicas' watches of the tasks kept here, and the pushes of their changes, one queue per replica
        # (docs/design/eras.md#tasks-in-reverse); the listens here watching tasks held elsewhere, by watch token.
        self.forward: Forward | None = None
        self.remote: RW.Watchers = {}
        self.outboxes: dict[str, asyncio.Queue[tuple[ReplyTo, JsonObject]]] = {}
        self.pushers: dict[str, asyncio.Task[None]] = {}
        self.following: dict[str, Following] = {}

    async def close(self) -> None:
        if self.renewer is not None:
            self.renewer.cancel()
        for pusher in self.pushers.values():
            pusher.cancel()
        for (_, task_id), entry in self.entries.items():
            if entry.driver is not None:
                entry.driver.cancel()
            self._release(entry)
            self._unhold(task_id)
        self.entries.clear()
        await asyncio.gather(*self.releasing, return_exceptions=True)

    # --- replicas -----------------------------------------------------------------------------------------
    def _key(self, task_id: str) -> str:
        return RT.holder_key(self.upstream, task_id)

    async def _hold(self, principal: str, task_id: str) -> None:
        """Record this replica as the task's holder, and keep renewing the records of the tasks kept here. A store
        that fails is logged: the task then works through this replica only (until the next renewal)."""
        store = self.holders()
        if store is None:
            return
        try:
            await store.hold_tasks({self._key(task_id): principal}, self.replica, RT.HOLD_SECONDS)
        except StoreUnavailable as exc:
            log.warning("reverse bridge: a task's holder was not recorded: %s", exc)
        if self.renewer is None or self.renewer.done():
            self.renewer = asyncio.create_task(self._renew(store))

    async def _renew(self, store: TaskHolders) -> None:
        while self.entries:
            await asyncio.sleep(RT.HOLD_SECONDS / 3)
            held = {self._key(task_id): principal for principal, task_id in self.entries}
            try:
                await store.hold_tasks(held, self.replica, RT.HOLD_SECONDS)
            except StoreUnavailable as exc:
                log.warning("reverse bridge: the holder records of tasks were not renewed: %s", exc)

    def _unhold(self, task_id: str) -> None:
        store = self.holders()
        if store is None:
            return

        async def release() -> None:
            try:
                await store.release_task(self._key(task_id), self.replica)
            except StoreUnavailable as exc:  # it runs out by itself
                log.warning("reverse bridge: a task's holder record was not released: %s", exc)
        task = asyncio.create_task(release())
        self.releasing.add(task)
        task.add_done_callback(self.releasing.discard)

    async def _held_elsewhere(self, task_id: str, principal: str) -> RT.Elsewhere | ErrorValue:
        store = self.holders()
        holder = await store.task_holder(self._key(task_id)) if store is not None else None
        return RT.route(holder, principal, self.replica)

    async def elsewhere(self, task_ids: object, principal: str) -> dict[str, str]:
        """A listen's ``taskIds`` that are the caller's and held on other replicas, with their holders."""
        store, owned = self.holders(), self.owned(principal)
        if store is None or not isinstance(task_ids, list):
            return {}
        wanted = [t for t in dict.fromkeys(task_ids) if isinstance(t, str) and t not in owned]
        found = await asyncio.gather(*(store.task_holder(self._key(t)) for t in wanted))
        return {t: route.replica for t, holder in zip(wanted, found, strict=True)
                if isinstance(route := RT.route(holder, principal, self.replica), RT.Elsewhere)}

    # --- creation -----------------------------------------------------------------------------------------
    async def create(self, pooled: Holding, req: Request, principal: str) -> Answer:
        """A task-augmented ``tools/call`` on the session; its CreateTaskResult, registered and driven."""
        room = RT.make_room(tuple((key[1], self._terminal(e)) for key, e in self.entries.items()), self.limits)
        if isinstance(room, ErrorValue):
            return None, room
        try:
            said = await pooled.session.call("tools/call", RT.task_request(req.params))
        except _FAILURES as exc:
            return None, upstream_failure(UpstreamFault.SESSION, str(exc) or type(exc).__name__)
        if "error" in said:
            return None, modern_error(said["error"])
        result = said.get("result")
        made = RT.created(result)
        if made is None:  # the server answered at once: a plain result
            return complete_result("tools/call", result), None
        if isinstance(made, ErrorValue):
            return None, made
        for key in [k for k in self.entries if k[1] in room]:
            self._forget(key)
        task_id = str(made["taskId"])
        entry = Entry(pooled, RT.start(task_id, principal, req.capabilities))
        pooled.busy += 1
        self.entries[(principal, task_id)] = entry
        self._drive(entry)
        await self._hold(principal, task_id)  # before the client hears of it: any replica finds it from then on
        return made, None

    # --- the task methods ---------------------------------------------------------------------------------
    async def handle(self, req: Request, principal: str, offers: bool, relay: bool = True) -> Answer | RT.Elsewhere:
        """A task method's answer, or where the task is held when that is another replica (``relay``: a request
        relayed here is never relayed on)."""
        gate = RT.gate(req.method, RT.declared(req.capabilities), offers)
        if gate is not None:
            return None, gate
        task_id = RT.task_id_of(req.params)
        entry = self.entries.get((principal, task_id)) if task_id is not None else None
        if entry is None and task_id is not None and relay:  # another replica's, if this principal's
            found = await self._held_elsewhere(task_id, principal)
            return (None, found) if isinstance(found, ErrorValue) else found
        if entry is None:  # never created by this principal here: unknown, whoever created it upstream
            return None, RT.unknown_task()
        if req.method == "tasks/get":
            return await self._get(entry)
        if req.method == "tasks/update":
            return await self._update(entry, req.params.get("inputResponses"))
        return await self._cancel(entry)

    async def _get(self, entry: Entry) -> Answer:
        if entry.state.final is not None:
            return entry.state.final, None
        said = await self._upstream(entry, "tasks/get")
        if isinstance(said, ErrorValue):
            if RT.vanished(said):  # the server forgot it (its ttl): so does the gateway
                self._forget((entry.state.principal, entry.state.task_id))
                return None, RT.unknown_task()
            return None, said
        entry.last = said
        out = self._view(entry)
        if entry.state.final is None and (entry.driver is None or entry.driver.done()):
            self._drive(entry)  # its tasks/result broke: read it again (a terminal task answers at once)
        return (None, out) if isinstance(out, ErrorValue) else (out, None)

    # --- status notifications -----------------------------------------------------------------------------
    def owned(self, principal: str) -> frozenset[str]:
        return frozenset(task_id for who, task_id in self.entries if who == principal)

    async def watch(self, listen: Listen, principal: str, task_ids: list[str]) -> None:
        """A listen of ``principal`` watches its tasks ``task_ids``: each one's current state goes to it first (a
        change between the client's last poll and its listen is not missed), then every change."""
        self.watchers[listen] = (principal, frozenset(task_ids))
        for task_id in task_ids:
            entry = self.entries.get((principal, task_id))
            if entry is None:
                continue
            before = entry.seen
            if entry.state.final is None:
                await self._get(entry)  # a change it found went to every watcher, this one included
            if entry.seen == before and (entry.state.final is not None or entry.last is not None):
                out = self._view(entry, tell=False)
                if not isinstance(out, ErrorValue):
                    listen.put_nowait(RT.notification(out))

    def unwatch(self, listen: Listen) -> None:
        self.watchers.pop(listen, None)

    def heard(self, pooled: Holding, message: Mapping[str, Any]) -> None:
        """A message of a pooled session's GET stream: the server's ``notifications/tasks/status`` of a task
        created on that session updates what its watchers are told."""
        task = RT.status_of(message)
        if task is None:
            return
        for (_, task_id), entry in list(self.entries.items()):
            if entry.pooled is pooled and task_id == task.get("taskId") and entry.state.final is None:
                entry.last = task
                self._view(entry)

    def _view(self, entry: Entry, tell: bool = True) -> JsonObject | ErrorValue:
        """The task as ``tasks/get`` shows it now; a change is told to the watching listens of its principal, here
        and on other replicas."""
        if entry.state.final is None and entry.last is None:
            return upstream_failure(UpstreamFault.INVALID_RESULT, "the task was not seen yet")
        entry.state, out = RT.detailed(entry.state, entry.last)
        if entry.state.final is not None:
            self._release(entry)
        if isinstance(out, ErrorValue) or not tell:
            return out
        seen = RT.seen(out)
        if seen != entry.seen:
            entry.seen = seen
            message = RT.notification(out)
            for listen, (who, task_ids) in self.watchers.items():
                if who == entry.state.principal and entry.state.task_id in task_ids:
                    listen.put_nowait(message)
            for to in RW.recipients(self.remote, entry.state.principal, entry.state.task_id):
                self._push(to, message)
        if entry.state.final is not None:
            self.remote = RW.dropped(self.remote, entry.state.principal, entry.state.task_id)
        return out

    def _changed(self, entry: Entry) -> None:
        if entry.last is not None or entry.state.final is not None:
            self._view(entry)

    async def _update(self, entry: Entry, responses: Any) -> Answer:
        step = RT.answered(entry.state, responses)
        if isinstance(step, ErrorValue):
            return None, step
        entry.state, replies = step
        for reply in replies:
            await self._reply(entry, reply)
        self._changed(entry)
        return RT.ack(), None

    async def _cancel(self, entry: Entry) -> Answer:
        """``tasks/cancel``: an ack, also for a task already terminal (2026 makes it idempotent; a 2025 server
        refuses a terminal task's cancel, so its refusal is checked against the task's status)."""
        if entry.state.final is not None:
            return RT.ack(), None
        said = await self._upstream(entry, "tasks/cancel")
        if isinstance(said, ErrorValue):
            now = await self._upstream(entry, "tasks/get")
            if isinstance(now, ErrorValue) or not RT.terminal(now):
                return None, said
        entry.state = RT.cancelled(entry.state)
        self._changed(entry)
        return RT.ack(), None

    # --- listens on other replicas (docs/design/eras.md#tasks-in-reverse) ----------------------------------
    async def relayed(self, req: Request, principal: str, watch: ReplyTo | None) -> JsonObject:
        """A task request another replica relayed here, answered whole (never relayed on). A ``tasks/get`` naming a
        listen's watch registers it: the state it answers is pushed to that listen, then every change after."""
        handled = await self.handle(req, principal, True, relay=False)
        assert not isinstance(handled, RT.Elsewhere), "a relayed request is not relayed on"
        result, error = handled
        if error is not None or result is None:
            return {"jsonrpc": "2.0", "id": req.ident, "error": (error or RT.unknown_task()).to_wire()}
        task_id = RT.task_id_of(req.params)
        entry = self.entries.get((principal, task_id)) if task_id is not None else None
        if watch is None or req.method != "tasks/get" or entry is None or self.forward is None:
            return {"jsonrpc": "2.0", "id": req.ident, "result": result}
        # No await since the state was read: no change can fall between the answer and the watch.
        self.remote = RW.watched(self.remote, principal, entry.state.task_id, watch, entry.state.final is not None)
        self._push(watch, RT.notification(result))
        return {"jsonrpc": "2.0", "id": req.ident, "result": result, RW.PUSHED: True}

    def _push(self, to: ReplyTo, message: JsonObject) -> None:
        """A change for a watch on another replica, pushed in order: one at a time to each replica, so a listen is
        never told an older state after a newer one."""
        outbox = self.outboxes.setdefault(to.replica, asyncio.Queue())
        outbox.put_nowait((to, message))
        pusher = self.pushers.get(to.replica)
        if pusher is None or pusher.done():
            self.pushers[to.replica] = asyncio.create_task(self._pushing(to.replica, outbox))

    async def _pushing(self, replica: str, outbox: asyncio.Queue[tuple[ReplyTo, JsonObject]]) -> None:
        while not outbox.empty() and self.forward is not None:
            to, message = outbox.get_nowait()
            try:
                reply = await self.forward(replica, RW.push(self.upstream, to, message))
            except StoreUnavailable as exc:  # its listen's safety check tells it later
                log.warning("reverse bridge: a task's change was not pushed to replica %s: %s", replica, exc)
                continue
            if not RW.still_watched(reply):  # its listen ended, or its replica is gone
                self.remote = RW.unwatched(self.remote, to)
        if self.outboxes.get(replica) is outbox and outbox.empty():
            del self.outboxes[replica]

    def notified(self, payload: Mapping[str, Any]) -> JsonObject:
        """A change another replica pushed for a listen here: delivered at once; the answer says whether that
        listen still watches (else the holder pushes it nothing more)."""
        pushed = RW.notified(payload)
        following = self.following.get(pushed[0]) if pushed is not None else None
        if pushed is None or following is None:
            return RW.ack(False)
        following.watch, out = RW.pushed(following.watch, pushed[1])
        if out is not None:
            following.listen.put_nowait(out)
        if RW.over(following.watch):
            following.done.set()
        return RW.ack(True)

    async def follow(self, listen: Listen, elsewhere: Mapping[str, str], ask: Ask, recheck_seconds: float) -> None:
        """A listen's watch of tasks held elsewhere (``elsewhere``: by holder), until nothing more can be told or
        the listen ends: each holder is asked once (registering the watch, whose state and changes it pushes);
        asked again only every ``recheck_seconds``, the safety net for a holder that died or a push that was lost
        (docs/design/eras.md#tasks-in-reverse)."""
        to = ReplyTo(self.replica, secrets.token_hex(8))
        following = self.following[to.token] = Following(RW.start(elsewhere), listen)
        try:
            while True:
                await asyncio.gather(*[self._check(following, ask, to, task_id, holder)
                                       for task_id, holder in following.watch.live.items()])
                if RW.over(following.watch):
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(following.done.wait(), recheck_seconds)
        finally:
            del self.following[to.token]

    @staticmethod
    async def _check(following: Following, ask: Ask, to: ReplyTo, task_id: str, holder: str) -> None:
        try:
            said = await ask(holder, task_id, to)
        except StoreUnavailable as exc:  # asked again at the next safety check
            log.warning("reverse bridge: a listen's task kept elsewhere was not asked for: %s", exc)
            return
        following.watch, out = RW.answered(following.watch, task_id, said)
        if out is not None:
            following.listen.put_nowait(out)

    # --- upstream -----------------------------------------------------------------------------------------
    async def _upstream(self, entry: Entry, method: str) -> JsonObject | ErrorValue:
        try:
            said = await entry.pooled.session.call(method, {"taskId": entry.state.task_id})
        except SessionGone:  # a 2025 task lives in its session: gone with it
            self._forget((entry.state.principal, entry.state.task_id))
            return RT.task_lost()
        except _FAILURES as exc:
            return upstream_failure(UpstreamFault.SESSION, str(exc) or type(exc).__name__)
        if "error" in said:
            return modern_error(said["error"])
        result = said.get("result")
        return dict(result) if isinstance(result, Mapping) else {}

    async def _reply(self, entry: Entry, reply: RT.Reply) -> None:
        error = reply.error.to_wire() if reply.error is not None else None
        result = dict(reply.result) if reply.result is not None and error is None else None
        with contextlib.suppress(*_FAILURES):
            await entry.pooled.session.respond(reply.upstream_id, result, error)

    def _drive(self, entry: Entry) -> None:
        entry.driver = asyncio.create_task(self._read_result(entry))

    async def _read_result(self, entry: Entry) -> None:
        """The task's ``tasks/result``: its requests become pending questions, its answer the outcome. A broken
        stream ends the driver without an outcome (the next tasks/get starts another)."""
        session = entry.pooled.session
        ident = session.new_id()
        queue, reader = session.request({"jsonrpc": "2.0", "id": ident, "method": "tasks/result",
                                         "params": {"taskId": entry.state.task_id}})
        try:
            while True:
                message = await queue.get()
                if BROKE in message or GONE in message:
                    log.info("reverse bridge: the tasks/result of a task ended without its answer")
                    return
                method = message.get("method")
                if isinstance(method, str) and "id" in message:
                    entry.state, reply = RT.asked(entry.state, message["id"], method, members(message.get("params")))
                    if reply is not None:
                        await self._reply(entry, reply)
                    self._changed(entry)
                elif method is None and message.get("id") == ident:
                    entry.state = RT.settled(entry.state, RT.Outcome(members(message.get("result")) if
                                                                     "result" in message else None,
                                                                     members(message.get("error")) if
                                                                     "error" in message else None))
                    self._changed(entry)
                    if entry.state.final is None:  # the task is over: its status makes it final, session released
                        said = await self._upstream(entry, "tasks/get")
                        if not isinstance(said, ErrorValue):
                            entry.last = said
                            self._changed(entry)
                    return
        finally:
            reader.cancel()

    # --- the registry -------------------------------------------------------------------------------------
    @staticmethod
    def _terminal(entry: Entry) -> bool:
        return entry.state.final is not None

    def _release(self, entry: Entry) -> None:
        if entry.held:
            entry.held = False
            entry.pooled.busy -= 1

    def _forget(self, key: tuple[str, str]) -> None:
        entry = self.entries.pop(key, None)
        self.remote = RW.dropped(self.remote, *key)
        if entry is not None:
            if entry.driver is not None:
                entry.driver.cancel()
            self._release(entry)
            self._unhold(key[1])
