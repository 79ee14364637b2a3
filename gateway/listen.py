"""The per-session upstream ``subscriptions/listen`` that feeds the legacy GET stream (DIGEST §1.9, §3).

A filter cannot be changed in place: :meth:`Listener.ensure` opens a new listen, waits for its acknowledgement,
then closes the old one, so no notification falls into a gap. An abrupt end of the listen (upstream restart) is
retried with a capped backoff while the session lives (DIGEST §1.8: the server keeps no subscription state).
A listen the upstream answers with a JSON-RPC error before its acknowledgement fails the change with that error,
translated for the legacy client (``adapters.subscriptions.listen_refusal``); so does one whose acknowledgement
leaves out a subscribed URI (DIGEST §4.15), and the old listen stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Coroutine
from typing import Any

from adapters.errors import ErrorValue, upstream_failure
from adapters.subscriptions import is_ack, legacy_notification, listen_refusal, unhonoured, unhonoured_error
from adapters.upstream import SessionView, build_listen
from gateway.runtime import Gateway, SessionRuntime, log, new_id
from gateway.upstream import UpstreamFailure

ACK_TIMEOUT_SECONDS = 10.0


class Listener:
    """One upstream listen at a time, delivering to ``deliver``; by default a session's own GET stream."""

    def __init__(self, runtime: SessionRuntime | None = None, *, gateway: Gateway | None = None,
                 spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task] | None = None,
                 deliver: Callable[[dict[str, Any]], None] | None = None, label: str = "") -> None:
        self.upstream = "default"  # the session's upstream name (issue 3 routing)
        self.gateway = gateway if gateway is not None else runtime.gateway  # type: ignore[union-attr]
        self.spawn = spawn if spawn is not None else runtime.spawn  # type: ignore[union-attr]
        self.deliver = deliver if deliver is not None else (lambda m: runtime.standalone_stream().push(m))  # type: ignore[union-attr]
        self.label = label or (runtime.session_id if runtime is not None else "shared")
        self.filter: dict[str, Any] | None = None
        self.task: asyncio.Task | None = None
        # A session's listen changes, one at a time (gateway.app.change_listen): each builds its filter from the
        # record it reads, so two at once would each leave out the other's URI.
        self.changing = asyncio.Lock()

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

    async def _open(self, wanted: dict[str, Any], view: SessionView) -> tuple[asyncio.Task | None, ErrorValue | None]:
        """A new listen once acknowledged, or the error; a listen that is not taken is cancelled."""
        acked: asyncio.Future = asyncio.get_running_loop().create_future()
        task = self.spawn(self._run(wanted, view, acked))
        try:
            ack = await asyncio.wait_for(asyncio.shield(acked), ACK_TIMEOUT_SECONDS)
            missing = unhonoured(ack, wanted)
            if missing:  # the acknowledged filter is what the server will honour (DIGEST §1.9, §4.15)
                raise UpstreamFailure(unhonoured_error(missing))
        except BaseException as exc:
            # Also when we are cancelled (whoever asked is gone): with a hub's spawn nothing else would end it.
            task.cancel()
            if isinstance(exc, UpstreamFailure):
                return None, exc.error
            if isinstance(exc, asyncio.TimeoutError):
                return None, upstream_failure("timeout", "subscriptions/listen was not acknowledged")
            raise
        return task, None

    async def _run(self, wanted: dict[str, Any], view: SessionView, acked: asyncio.Future) -> None:
        delay = 0.5
        while True:
            try:
                await self._listen_once(wanted, view, acked)
            except UpstreamFailure as failure:
                if not acked.done():
                    acked.set_exception(failure)
                    return
                log.warning("listen stream for %s ended: %s", self.label, failure)
            if not acked.done():
                acked.set_exception(UpstreamFailure(upstream_failure("stream_broken", "listen ended before ack")))
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)

    async def _listen_once(self, wanted: dict[str, Any], view: SessionView, acked: asyncio.Future) -> None:
        call = build_listen(new_id("l"), view, wanted)
        # aclosing: leaving the loop by a raise closes the upstream response now, not when the generator is collected
        async with contextlib.aclosing(self.gateway.upstream_for(self.upstream).messages(call)) as messages:
            async for message in messages:
                if is_ack(message):
                    if not acked.done():
                        acked.set_result(message)
                    continue
                refused = listen_refusal(message, call.body["id"])
                if refused is not None:  # before the ack: the subscribe gets this error, not "ended before ack"
                    raise UpstreamFailure(refused)
                legacy = legacy_notification(message)
                if legacy is not None:
                    self.deliver(legacy)


def own_listener(runtime: SessionRuntime) -> Listener:
    """The session's own listener (made on first use, listening or not): it also holds the session's lock."""
    if runtime.listen is None:
        runtime.listen = Listener(runtime)
    return runtime.listen


class ListenHub:
    """Shared listens for sessions that need only list_changed (no resource subscriptions).

    Thousands of idle legacy sessions with a GET stream would otherwise hold one upstream listen each (an
    upstream connection, a task and the upstream's own state per session). Sessions on the same upstream, with
    the same credentials and the same filter, share one listen and each receives every notification on its own
    GET stream (S25: each message goes on exactly one stream *per session*). A session with subscriptions keeps
    its own listen, whose filter carries its URIs.
    """

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.shared: dict[tuple[str, str, str], _Shared] = {}
        self.tasks: set[asyncio.Task] = set()

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task:
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
            entry.listener.task.cancel()  # closing the listen's response is the 2026 cancel (DIGEST §4.10)

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
        self.ready: asyncio.Task

    def deliver(self, message: dict[str, Any]) -> None:
        for runtime in list(self.members.values()):
            runtime.standalone_stream().push(message)
