"""Runs one forwarded legacy request through the adapters' bridge machine and performs its actions.

Every forwarded request (plain or MRTR-capable) is an exchange: the machine decides, this module only does the
I/O — upstream calls, writes on the request's :class:`~gateway.session.streams.OutStream`, timers.

Two ways to run one (the machine and its decisions are the same in both):

- :class:`FirstRound` runs the *first* upstream round in the handler's own task when nothing can be streamed
  while it runs (no progress token, no log level). If the machine then finishes with a lone response — a plain
  request, most traffic — the handler answers it as JSON: no task, no stream, no saved round (the benchmark's
  profile: that machinery was a fifth of the gateway's CPU per translated request). Anything else — an
  ``input_required`` round, a notification — escalates to the full exchange below, with nothing lost.
- :meth:`Exchange.run` is a session task: upstream calls in their own tasks, client answers and timers as events
  on a queue, every message on the request's stream. On a store other processes read, the pending-round record
  is saved whenever it waits for the client or a backoff (what another process would need to continue it) and
  deleted at the end.

One step at a time, in the task that has its event when the exchange's task waits idle (:meth:`Exchange.offer`,
docs/design/takeover.md#a-step-runs-in-the-task-of-its-event): a client's answer in its handler, an upstream outcome
in its round's task; what arrives meanwhile is queued for the exchange's task, which is also where every failure is
answered."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, assert_never

from adapters import bridge as B
from adapters import exchange as X
from adapters import legacy_tasks
from adapters.errors import ErrorValue
from adapters.peers import peer_limits
from adapters.records import PendingRound, SessionRecord
from adapters.relay import request_key
from adapters.results import response
from adapters.task_poll import offered
from gateway.errors import SessionError
from gateway.session.keeping import LeaseLost, StoreKeeping, Tell
from gateway.session.observer import ExchangeWatcher
from gateway.session.rounds import Rounds, failure
from gateway.session.runtime import SessionRuntime, log, random_id
from gateway.session.store import Hold
from gateway.session.streams import Mirror, OutStream

_TOTAL_TIMEOUT = B.TimerFired(B.Timer.TOTAL, 0)
# adapters.exchange's plans, as module names (a lookup through an Enum class is slow on Python 3.11).
_NO_HOLD, _ON_SAVE = X.HoldAt.NONE, X.HoldAt.SAVE
_BEFORE, _WITH_COPY, _AFTER = X.SaveAt.BEFORE, X.SaveAt.WITH_COPY, X.SaveAt.AFTER
_END_ROUND, _LEAVE_COPY_OPEN, _CLOSE_STREAM, _FORGET = (X.Ending.END_ROUND, X.Ending.LEAVE_COPY_OPEN,
                                                        X.Ending.CLOSE_STREAM, X.Ending.FORGET)
_STEP, _QUEUE, _REFUSE, _INTERRUPT = X.Take.STEP, X.Take.QUEUE, X.Take.REFUSE, X.Take.INTERRUPT
_ANSWER, _CANCEL = X.Given.ANSWER, X.Given.CANCEL
_SENDS = (B.SendToClient, B.Finish)  # the actions that put messages on the request's stream
_HAND_OVER = object()  # the event that stops an exchange without an answer (Exchange.hand_over)
_WAKE = object()  # another task's step finished the machine: the exchange's task ends the exchange


class _Inbox:
    """An exchange's events in arrival order, awaited by its one task: what ``asyncio.Queue`` did here without
    its bookkeeping (task counts, putters, three deques and an event per exchange), which was a share of every
    bridged round's cost. While another task steps the machine (:meth:`Exchange.offer`) the inbox is *held*:
    what arrives meanwhile waits, and wakes the exchange's task only once that step is over."""

    __slots__ = ("_items", "_stepping", "_waiter", "acted")

    def __init__(self) -> None:
        self._items: list[Any] = []
        self._waiter: asyncio.Future[None] | None = None
        self._stepping: asyncio.Task[Any] | None = None  # the other task stepping the machine now (held)
        # Answers (and relayed cancels) queued with a waiter (a handler, or a relay's acknowledgement), not yet
        # acted on.
        self.acted: list[asyncio.Future[bool]] = []

    def put_waited(self, event: B.ClientAnswered | B.Cancelled, tell: Tell | None = None) -> asyncio.Future[bool]:
        """Queue ``event`` with the future its waiter awaits: set by :meth:`settle`; ``tell``: a relayed answer's
        acknowledgement, for its step's save to send."""
        acted = asyncio.get_running_loop().create_future()
        self.acted.append(acted)
        self.put_nowait(_Queued(event, acted, tell))
        return acted

    def settle(self, only: asyncio.Future[bool] | None, acted: bool) -> None:
        """Tell the waiter of one queued event (``only``) whether it was ``acted`` on, or, the exchange ending,
        every waiter still waiting that its event was not."""
        settled = [only] if only is not None else self.acted
        self.acted = [w for w in self.acted if w is not only] if only is not None else []
        for waiter in settled:
            if not waiter.done():
                waiter.set_result(acted)

    def put_nowait(self, item: Any) -> None:
        self._items.append(item)
        if self._stepping is None:
            self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def idle(self) -> bool:
        """Whether the exchange's task waits here with nothing to do and no other task is stepping."""
        return self._waiter is not None and not self._items and self._stepping is None

    def hold(self) -> None:
        self._stepping = asyncio.current_task()

    def release(self) -> None:
        self._stepping = None
        if self._items:
            self._wake()

    async def get(self) -> Any:
        while not self._items or self._stepping is not None:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.pop(0)


class _Queued:
    """A client's answer (or a relayed cancel) queued with the future its waiter awaits (set once its step is
    done: saved, for an answer)."""

    __slots__ = ("acted", "event", "tell")

    def __init__(self, event: B.ClientAnswered | B.Cancelled, acted: asyncio.Future[bool],
                 tell: Tell | None = None) -> None:
        self.event, self.acted, self.tell = event, acted, tell


class _Failed:
    """A step another task ran raised: the exchange's task raises it again, inside its one error boundary."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _told(acted: bool) -> asyncio.Future[bool]:
    """A queued answer's or cancel's future, already settled (nothing will be queued to act on it)."""
    told: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    told.set_result(acted)
    return told


class FirstRound:
    """A request's first upstream round, run in its handler's task when nothing can be streamed while it runs
    (``adapters.exchange.begins_inline``): the handler's task while it waits, the event that interrupted that wait
    (a cancel, shutdown's abort, or the total limit: the first one wins), and the request's notifications
    meanwhile. It escalates to the full exchange (:meth:`Exchange.escalate`) when there is more than the answer."""

    __slots__ = ("early", "event", "exchange", "task")

    def __init__(self, exchange: Exchange) -> None:
        self.exchange, self.task, self.event = exchange, asyncio.current_task(), None
        self.early: list[dict[str, Any]] = []  # the request's notifications meanwhile: sent first if it escalates

    def interrupt(self, event: Any) -> None:
        if self.event is None and self.task is not None:
            self.event = event
            self.task.cancel()

    async def until(self, round_: Coroutine[Any, Any, Any], timer: asyncio.TimerHandle) -> Any:
        """The round's event, or the interrupting one (the round is then cancelled: the 2026 cancel); a
        cancellation of the handler itself is raised. The total limit's ``timer`` is cancelled either way."""
        try:
            return await round_
        except asyncio.CancelledError:
            if self.event is None or self.task is None:
                raise
            self.task.uncancel()
            return self.event
        finally:
            timer.cancel()

    async def run(self) -> B.Finish | None:
        """The machine's ``Finish`` when the handler answers it alone (``adapters.exchange.answered_inline``;
        its message is None when cancelled: nothing is sent), else None once escalated (the caller then answers
        with the exchange's stream)."""
        ex = self.exchange
        try:
            return await self._run(ex)
        except Exception as exc:  # as in Exchange.run: a failure still answers the request and frees its id
            ex.forget()
            return B.Finish(response(ex.record.downstream_id, error=failure(exc, ex.record.downstream_id)))

    async def _run(self, ex: Exchange) -> B.Finish | None:
        ex.observe(ex.machine.start())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ex.machine.ctx.limits.total_timeout_seconds
        session, ex._session = ex._session, None  # a later round reads it again, or takes its own
        ex._inline = self
        try:
            event = await self.until(ex.rounds.event(self.early.append, {}, session), loop.call_at(
                deadline, self.interrupt, _TOTAL_TIMEOUT))
        except asyncio.CancelledError:
            ex.forget()
            raise  # the handler itself is being cancelled (shutdown), not this request
        finally:
            ex._inline = None
        actions = ex.machine.handle(event)
        finish = X.answered_inline(actions, bool(self.early))
        if finish is None:  # escalate: the total limit still counts from the request's arrival
            stream = ex.runtime.new_stream()
            for message in self.early:
                stream.push(message)
            await ex.escalate(stream, actions, deadline)
            return None
        ex.observe(actions)
        for action in actions:
            if isinstance(action, B.RememberTask):
                await ex.rounds.remember(action)
        ex.forget()
        return finish


class HandedOver(SessionError):
    """A client's answer (or cancel) cannot be taken here: it reached an exchange that handed its round over
    (shutdown, or a lost lease) before acting on it, or a replica shutting down that takes no round on. The round
    goes on elsewhere, so the POST is refused (``adapters.errors.answer_not_taken``, 503), for the client to send
    it again there, rather than acknowledged
    (docs/design/bridge.md#a-clients-answer-is-acted-on-before-it-is-acknowledged,
    docs/design/takeover.md#sigterm-hands-the-rounds-over)."""


def bridge_context(runtime: SessionRuntime, session: SessionRecord,
                   limits: B.BridgeLimits | None = None) -> B.BridgeContext:
    """The bridge's context for a request of ``session``: ``limits`` (the session core's ``Forward`` carries
    them), else the configured limits under its peer's pins (a round taken over from another replica)."""
    gateway = runtime.gateway
    peer = gateway.peer_of(session)
    if limits is None:
        limits = peer_limits(gateway.config.limits.to_limits(), peer)
    # The peer's tool policy filters a tools/list result (adapters.tool_policy); scopes exist with [gateway.auth].
    return B.BridgeContext(limits, session.client_capabilities, random_id, cached_roots=session.cached_roots,
                           tools=peer.tools, scoped=gateway.config.auth.enabled,
                           tasks_running=lambda: _tasks_running(runtime),
                           tasks_declared=offered(session.server_capabilities),
                           legacy_tasks=legacy_tasks.enabled(session.client_capabilities,
                                                             session.server_capabilities, session.protocol_version))


def _tasks_running(runtime: SessionRuntime) -> int:
    """The session's requests driving an upstream task on this replica (max_tasks_per_session)."""
    return sum(exchange.record.task_id is not None and not exchange.machine.done
               for exchange in runtime.exchanges.values())


class Exchange:
    observer: ExchangeWatcher | None = None  # sees every action batch and the end (gateway.session.observer)

    def __init__(self, runtime: SessionRuntime, record: PendingRound, ctx: B.BridgeContext,
                 authorization: str | None, session: SessionRecord | None = None) -> None:
        self.runtime, self.authorization, self.record = runtime, authorization, record
        self.machine = B.BridgeMachine(record, ctx)  # its record is ``record``, stepped in place
        self.stream: OutStream | None = None  # made when the answer is more than one lone response
        self.events = _Inbox()
        self._session = session  # the record a handler just read, for the round it starts (none: read it again)
        self._upstream: asyncio.Task[Any] | None = None
        self._began: asyncio.Task[Any] | None = None  # the upstream task that ran its first step (its request left)
        self._timers: list[asyncio.TimerHandle] = []
        self._inline: FirstRound | None = None  # while the first round waits in the handler's task
        self._task: asyncio.Task[Any] | None = None  # run(), once spawned
        gateway = runtime.gateway  # what the round keeps in the store, and when (adapters.exchange)
        relayed = gateway.relay is not None  # only then does anybody ask who owns the request
        self.keeper = X.Keeper(X.Store(gateway.store.shares_rounds, relayed, gateway.replica,
                                       gateway.config.store.lease_seconds, ctx.limits.client_answer_timeout_seconds),
                               request_key(record.session_id, record.downstream_id) if relayed else "")
        self.rounds = Rounds(runtime, record, authorization, self.keeper, session)
        self.keeping = StoreKeeping(gateway, record, ctx.limits, self.keeper)

    @property
    def door(self) -> Door:
        return Door(self)

    def notify(self, message: dict[str, Any]) -> None:
        if self.stream is not None:
            self.stream.push(message)

    def spawn(self) -> OutStream:
        """Run the exchange as a session task from the start; its stream, which the caller answers with."""
        self.stream = stream = self.runtime.new_stream()
        self._task = self.runtime.spawn(self.run(None))
        return stream

    async def escalate(self, stream: OutStream, actions: list[Any], deadline: float) -> None:
        """Go on as a session task on ``stream`` after a first round in the handler (:class:`FirstRound`), with
        what it left to perform, performed here first, in the handler's task
        (docs/design/takeover.md#a-step-runs-in-the-task-of-its-event): the stream the handler then answers with
        already holds what they send, and neither the exchange's task nor the handler wakes for it. A failure is
        the exchange's task's to answer, as any step's. The total limit ends at ``deadline``."""
        self.stream = stream
        self._timers.append(asyncio.get_running_loop().call_at(deadline, self.events.put_nowait, _TOTAL_TIMEOUT))
        try:
            await self._perform(actions)
        except BaseException as exc:
            self.events.put_nowait(_Failed(exc))
            if not isinstance(exc, Exception):
                raise
        finally:
            self._task = self.runtime.spawn(self.run(None, performed=True))

    async def take_over(self, stream: OutStream, elapsed_seconds: float, unsent: set[str]) -> None:
        """Continue a round another replica saved, whose lease this replica just won, on ``stream`` (the request's,
        continued here); ``unsent``: the outstanding requests the client never received, asked again
        (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds)."""
        self.stream = stream
        await self.keeping.take_over()
        self._task = self.runtime.spawn(self.run(self.machine.resume(elapsed_seconds, unsent)))

    async def run(self, first: list[Any] | None, *, performed: bool = False) -> None:
        """The exchange's task: ``first`` (else the machine's start) performed unless ``performed`` already,
        then every event as it comes, until the request is answered or handed over."""
        assert self.stream is not None
        try:
            if not performed:
                await self._perform(self.machine.start() if first is None else first)
            while not self.machine.done:
                event = await self.events.get()
                if event is _HAND_OVER:
                    break
                if isinstance(event, _Failed):
                    raise event.error
                if isinstance(event, _Queued):
                    # Acknowledged once its own step is saved (a replica taking over then has it), not before; a
                    # relayed answer's acknowledgement goes with that save
                    # (docs/design/replicas.md#replicas-relay-through-the-store).
                    self.keeping.telling = event.tell
                    try:
                        await self._step(event.event)
                    finally:
                        self.keeping.telling = None
                    self._settle(event.acted, True)
                elif event is not _WAKE:
                    await self._step(event)
        except LeaseLost:
            log.warning("request %r: its round's lease was lost before a save; another replica continues it",
                        self.record.downstream_id)
            self.keeper.hand_over(lost=True)
        except Exception as exc:  # a failure must still answer the original request, not leave it hanging
            self.stream.finish(response(self.record.downstream_id, error=failure(exc, self.record.downstream_id)))
        finally:
            ending = self.keeper.stop()
            self._settle()  # the exchange ends: an answer still queued was not acted on (and never will be here)
            for handle in self._timers:
                handle.cancel()
            if self._upstream is not None:
                self._upstream.cancel()
            for gid in [g for g, ex in self.runtime.awaiting.items() if ex is self]:
                del self.runtime.awaiting[gid]
            for step in ending:
                await self._wind_up(step)

    async def _wind_up(self, step: X.Ending) -> None:
        assert self.stream is not None
        if step is _END_ROUND:
            await self.keeping.end(self)
        elif step is _LEAVE_COPY_OPEN and self.stream.mirror is not None:
            self.stream.mirror.leave_open()
        elif step is _CLOSE_STREAM and not self.stream.closed:
            self.stream.finish()
        elif step is _FORGET:
            self.forget()

    async def _step(self, event: Any) -> None:
        """The machine's step on one event, performed."""
        answered = isinstance(event, B.ClientAnswered)
        if answered:
            self.keeper.answered(event.gateway_id)  # its claim goes with the step's save, or at the end
        # A round an answer starts uses the request's record; a timer's retry reads it again.
        self._session = self.rounds.request_session if answered else None
        try:
            await self._perform(self.machine.handle(event))
        finally:
            self._session = None

    async def offer(self, event: Any) -> bool:
        """Step the machine on ``event`` in the caller's task when the exchange's own task waits with nothing queued
        (docs/design/takeover.md#a-step-runs-in-the-task-of-its-event): an answer's handler and an upstream round's
        task then perform their step themselves, instead of waking the exchange's task for it (two task switches per
        bridged round). False when the exchange is busy or done: the caller queues the event instead. One step at a
        time still: the inbox is held meanwhile, and a step that raises is raised again by the exchange's task, where
        every failure is answered."""
        if self.machine.done or not self.events.idle():
            return False
        self.events.hold()
        try:
            await self._step(event)
        except BaseException as exc:
            self.events.put_nowait(_Failed(exc))
            if not isinstance(exc, Exception):
                raise  # this task is being cancelled: so is the step, which the exchange's task now ends
        finally:
            if self.machine.done:
                self.events.put_nowait(_WAKE)
            self.events.release()
        return True

    async def _finish(self, message: dict[str, Any] | None) -> None:
        """The request's answer ends the stream, and a saved round with it in one store step that also copies the
        answer (docs/design/takeover.md#a-bridged-step-is-one-fenced-store-write: round or answer, never both)."""
        assert self.stream is not None
        mirror = self.stream.mirror
        held = mirror is not None and self.keeper.carries_answer() and mirror.hold()
        self.stream.finish(message)
        if held:
            await self.keeping.end(self, mirror)

    def forget(self) -> None:
        self.runtime.exchanges.pop(self.record.downstream_id, None)
        if self.observer is not None:
            self.observer.done()

    def observe(self, actions: list[Any]) -> None:
        if self.observer is not None:
            self.observer(self.record, actions)

    async def _perform(self, actions: list[Any]) -> None:
        stream, rec = self.stream, self.record
        assert stream is not None
        sends = sum(isinstance(a, B.SendToClient) for a in actions)
        plan = self.keeper.plan(actions, waiting=rec.waiting, done=self.machine.done,
                                mirrored=stream.mirror is not None)
        hold = await self.keeping.hold(plan.hold, self.rounds.request_session) if plan.hold is not _NO_HOLD else None
        if hold is None:  # else once its save admitted it: a refused step is not observed
            self.observe(actions)
        mirror = stream.mirror if plan.save is _WITH_COPY else None
        if mirror is not None and not mirror.hold():
            mirror, plan = None, plan.uncarried()
        if plan.save is _BEFORE:  # a replica taking over must find what the client is asked
            await self._save(sends, None, hold, actions)
        # The step writes what it sends to a waiting writer itself
        # (docs/design/takeover.md#a-step-runs-in-the-task-of-its-event), once the copy for other replicas (if any)
        # holds it: after the save that carries it.
        hushed = any(isinstance(a, _SENDS) for a in actions)
        if hushed:
            stream.hush()
        try:
            for action in actions:
                await self._act(action)
            if mirror is not None:  # pushed, held back until this save has written them too
                await self._save(0, mirror, hold, actions)
        finally:
            if hushed:
                await stream.flush()
        if plan.save is _AFTER:  # after the upstream round left: saved before the step is
            await self._save(0, None, hold, actions)  # acknowledged, off its path

    async def _save(self, sends: int, mirror: Mirror | None, hold: Hold | None, actions: list[Any]) -> None:
        assert self.stream is not None
        await self.keeping.save(self, self.stream, sends, mirror, hold, done=self.machine.done)
        if hold is not None:  # admitted: observed now (a refused step is not)
            self.observe(actions)

    async def _act(self, action: B.Action) -> None:
        """One action of a step (its save is :meth:`_perform`'s)."""
        assert self.stream is not None
        match action:
            case B.SendToClient(message=message):
                if isinstance(ident := message.get("id"), str):  # a request of ours (ids we mint are str)
                    self.runtime.awaiting[ident] = self
                self.stream.push(message)
            case B.ArmTimer(name=name, seconds=seconds, round=round_):
                fired = B.TimerFired(name, round_)
                self._timers.append(asyncio.get_running_loop().call_later(seconds, self.events.put_nowait, fired))
            case B.CallUpstream() | B.PollTask() | B.UpdateTask():
                self._upstream = self.runtime.spawn(self._call_upstream(action, self._session), leaves=True)
            case B.Finish(message=message, log=said, challenge=challenge):
                if said:
                    log.warning("request %r: %s", self.record.downstream_id, said)
                if challenge is not None:
                    self.stream.status = challenge.answer()
                await self._finish(message)
            case B.AbortUpstream():
                if self._upstream is not None:
                    self._upstream.cancel()  # closing the upstream response is the 2026 cancel
            case B.CancelTask():
                self.runtime.spawn(self.rounds.cancel_task(action, self.notify))
            case B.StoreRoots(result=result):
                await self.rounds.store_roots(result)
            case B.RememberTask():
                await self.rounds.remember(action)
            case B.TaskEnded():
                pass  # counted by the observer, which sees every action
            case _:
                assert_never(action)

    async def _call_upstream(self, call: B.CallUpstream | B.PollTask | B.UpdateTask,
                             session: SessionRecord | None) -> None:
        """One upstream round's task, or a task call's (spawned with ``leaves``: nothing here raises but its
        cancellation)."""
        self._began = asyncio.current_task()
        try:
            extra, task = (call.extra, None) if isinstance(call, B.CallUpstream) else ({}, call)
            event = await self.rounds.event(self.notify, extra, session, task)
            if not await self.offer(event):
                self.events.put_nowait(event)
        finally:
            self.runtime.left()

    def _settle(self, only: asyncio.Future[bool] | None = None, acted: bool = False) -> None:
        self.events.settle(only, acted)


class Door:
    """The handlers' and the relay's way into an exchange (:attr:`Exchange.door`): a client's answer or cancel
    (``adapters.exchange.take`` decides what is done with it), shutdown's abort, and the handover of its round. It
    keeps nothing of its own and is made per call: no exchange holds one, so an exchange is freed as soon as it
    ends."""

    __slots__ = ("exchange",)

    def __init__(self, exchange: Exchange) -> None:
        self.exchange = exchange

    def hand_over(self, *, lost: bool = False) -> asyncio.Task[Any] | None:
        """Stop without answering, leaving the saved round to another replica (shutdown, or ``lost``: its lease
        was taken, and the ownership records are the new holder's): once the step under way is saved, the
        lease is released and the client's stream ends; its reconnection with Last-Event-ID reaches the replica
        that continues. The exchange's task, which ends by itself."""
        ex = self.exchange
        ex.keeper.hand_over(lost=lost)
        ex.events.put_nowait(_HAND_OVER)
        return ex._task

    def _take(self, given: X.Given) -> X.Take:
        ex = self.exchange
        return X.take(given, ex.keeper.stage, first_round=ex._inline is not None, idle=ex.events.idle(),
                      done=ex.machine.done)

    async def answer_now(self, gateway_id: str, message: dict[str, Any]) -> None:
        """The client's answer, acted on before this returns (its handler then acknowledges the POST): stepped
        in the caller's task when the exchange is idle (:meth:`Exchange.offer`), else queued and waited for
        (``adapters.exchange.take``). Either way a next upstream round is sent before the 202: the handler yields
        once after its step, behind the upstream task the step spawned, so the acknowledgement's send is off the
        round's critical path (unless the step's save already waited on the store, during which that task began).
        :class:`HandedOver` when the round was handed over first: it goes on elsewhere without this answer. One
        the exchange ended without (finished or failed first) is a late answer, ignored as on one gateway."""
        ex = self.exchange
        event = B.ClientAnswered(gateway_id, message.get("result"), message.get("error"))
        taken = self._take(_ANSWER)
        if taken is _STEP and await ex.offer(event):
            if ex._upstream is not ex._began:  # the step's save, if any, waited
                await asyncio.sleep(0)  # without letting it start: it sends now, then the 202 goes
        elif not await self._queue_waited(event) and X.not_taken(ex.keeper.stage) is _REFUSE:
            raise HandedOver(gateway_id)

    def answer(self, gateway_id: str, message: dict[str, Any], tell: Tell | None = None) -> asyncio.Future[bool]:
        """Queue the client's answer (one relayed from another replica). The future is True once the exchange
        has acted on it (its step saved), False when the exchange ended without doing so (finished, failed or
        handed over first). ``tell``: its acknowledgement, sent by the store write that saves its step when the
        step writes (``tell.sent``)."""
        return self._queue_waited(B.ClientAnswered(gateway_id, message.get("result"), message.get("error")), tell)

    def _queue_waited(self, event: B.ClientAnswered | B.Cancelled, tell: Tell | None = None) -> asyncio.Future[bool]:
        ex = self.exchange
        # Once stopped, its waiters were told already: one queued now would wait for ever.
        taken = self._take(_CANCEL if isinstance(event, B.Cancelled) else _ANSWER)
        return ex.events.put_waited(event, tell) if taken is _QUEUE or taken is _STEP else _told(False)

    def abort(self, error: ErrorValue) -> None:
        """End the request with ``error`` now (shutdown): the machine decides what is sent; a running exchange's
        task is about to be cancelled, so its stream gets the machine's final answer here, at once."""
        ex = self.exchange
        if ex._inline is not None:  # the first round answers it when its wait is interrupted
            ex._inline.interrupt(B.Aborted(error))
            return
        if ex.stream is not None and not ex.stream.closed:
            self._finish_now(ex.machine.handle(B.Aborted(error)))

    def _finish_now(self, actions: list[B.Action]) -> None:
        ex = self.exchange
        assert ex.stream is not None
        for action in actions:
            if isinstance(action, B.SendToClient):
                ex.stream.push(action.message)  # notifications/cancelled for the client's open requests
            elif isinstance(action, B.Finish):
                ex.stream.finish(action.message)

    def cancel(self, reason: str | None) -> None:
        ex = self.exchange
        taken, inline = self._take(_CANCEL), ex._inline
        if inline is not None and taken is _INTERRUPT:  # the first round's wait stops (the 2026 cancel)
            inline.interrupt(B.Cancelled(reason))
        elif taken is _QUEUE:
            ex.events.put_nowait(B.Cancelled(reason))

    async def cancel_now(self, reason: str | None) -> None:
        """:meth:`cancel`, acted on before this returns (on a shared store, where a round can move: its handler then
        acknowledges the POST). :class:`HandedOver` when the round was handed over first, raised once this exchange
        has let the round go (its lease and ownership records released), so the caller can pass the cancel on to
        where the round goes on (docs/design/takeover.md#sigterm-hands-the-rounds-over). One the exchange ended
        without (it finished first) needs nothing more: the request is over."""
        ex = self.exchange
        if not await self.cancel_acted(reason) and X.not_taken(ex.keeper.stage) is _REFUSE:
            if ex._task is not None:
                await asyncio.wait([ex._task])  # not cancelled with the caller: it ends by itself
            raise HandedOver(ex.record.downstream_id)

    def cancel_acted(self, reason: str | None) -> asyncio.Future[bool]:
        """:meth:`cancel` (one relayed from another replica): the future is True once its step is done, False
        when the exchange ended first without it. A request in its first, inline round (never saved, so no other
        replica could continue it) is told at once."""
        if self._take(_CANCEL) is _INTERRUPT:
            self.cancel(reason)
            return _told(True)
        return self._queue_waited(B.Cancelled(reason))
