"""The per-session upstream ``subscriptions/listen`` that feeds the legacy GET stream (DIGEST §1.9, §3).

A filter cannot be changed in place: :meth:`Listener.ensure` opens a new listen, waits for its acknowledgement,
then closes the old one, so no notification falls into a gap. An abrupt end of the listen (upstream restart) is
retried with a capped backoff while the session lives (DIGEST §1.8: the server keeps no subscription state).
"""

from __future__ import annotations

import asyncio
from typing import Any

from adapters.errors import ErrorValue, upstream_failure
from adapters.subscriptions import is_ack, legacy_notification
from adapters.upstream import SessionView, build_listen
from gateway.runtime import SessionRuntime, log, new_id
from gateway.upstream import UpstreamFailure

ACK_TIMEOUT_SECONDS = 10.0


class Listener:
    def __init__(self, runtime: SessionRuntime) -> None:
        self.upstream = "default"  # the session's upstream name (issue 3 routing)
        self.runtime = runtime
        self.filter: dict[str, Any] | None = None
        self.task: asyncio.Task | None = None

    async def ensure(self, wanted: dict[str, Any], view: SessionView) -> ErrorValue | None:
        if wanted == self.filter and self.task is not None and not self.task.done():
            return None
        if not wanted:
            old, self.filter, self.task = self.task, None, None
        else:
            acked: asyncio.Future = asyncio.get_running_loop().create_future()
            task = self.runtime.spawn(self._run(wanted, view, acked))
            try:
                await asyncio.wait_for(asyncio.shield(acked), ACK_TIMEOUT_SECONDS)
            except (asyncio.TimeoutError, UpstreamFailure) as exc:
                task.cancel()
                error = exc.error if isinstance(exc, UpstreamFailure) else None
                return error or upstream_failure("timeout", "subscriptions/listen was not acknowledged")
            # Read the old listen only now: a concurrent ensure() may have replaced it while we waited.
            old, self.filter, self.task = self.task, wanted, task
        if old is not None:
            old.cancel()
        return None

    async def _run(self, wanted: dict[str, Any], view: SessionView, acked: asyncio.Future) -> None:
        delay = 0.5
        while True:
            try:
                await self._listen_once(wanted, view, acked)
            except UpstreamFailure as failure:
                if not acked.done():
                    acked.set_exception(failure)
                    return
                log.warning("listen stream for session %s ended: %s", self.runtime.session_id, failure)
            if not acked.done():
                acked.set_exception(UpstreamFailure(upstream_failure("stream_broken", "listen ended before ack")))
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)

    async def _listen_once(self, wanted: dict[str, Any], view: SessionView, acked: asyncio.Future) -> None:
        call = build_listen(new_id("l"), view, wanted)
        async for message in self.runtime.gateway.upstream_for(self.upstream).messages(call):
            if is_ack(message):
                if not acked.done():
                    acked.set_result(message)
                continue
            legacy = legacy_notification(message)
            if legacy is not None:
                self.runtime.standalone_stream().push(legacy)
