"""Runs one forwarded legacy request through the adapters' bridge machine and performs its actions.

Every forwarded request (plain or MRTR-capable) is an exchange: the machine decides, this module only does the
I/O — upstream calls, writes on the request's :class:`~gateway.streams.OutStream`, timers. The pending-round
record is saved to the store after every step and deleted at the end.
"""

from __future__ import annotations

import asyncio
from typing import Any

from adapters import bridge as B
from adapters.records import PendingRound
from adapters.errors import ErrorValue
from adapters.results import progress_advances, request_notification, response
from adapters.upstream import build_request, needs_header_refresh, x_mcp_header_map
from gateway.runtime import SessionRuntime, log, new_id, session_view
from gateway.streams import OutStream
from gateway.upstream import UpstreamFailure

REFRESH_PAGE_CAP = 20


class Exchange:
    observer: Any = None  # gateway.usage.ExchangeObserver: sees every action batch (issue 4 accounting)

    def __init__(self, runtime: SessionRuntime, record: PendingRound, stream: OutStream,
                 ctx: B.BridgeContext, authorization: str | None) -> None:
        self.runtime, self.stream, self.authorization = runtime, stream, authorization
        self.machine = B.BridgeMachine(record, ctx)
        self.events: asyncio.Queue[Any] = asyncio.Queue()
        self._upstream: asyncio.Task | None = None
        self._timers: list[asyncio.TimerHandle] = []
        self._last_progress: float | None = None
        self._refreshed = False
        meta = record.params.get("_meta")
        self.progress_token = meta.get("progressToken") if isinstance(meta, dict) else None

    @property
    def record(self) -> PendingRound:
        return self.machine.record

    async def run(self) -> None:
        store = self.runtime.gateway.store
        try:
            await self._perform(self.machine.start())
            while not self.machine.done:
                await store.put_round(self.record)
                await self._perform(self.machine.handle(await self.events.get()))
        except Exception:  # a gateway bug must still answer the original request, not leave it hanging
            log.exception("exchange for request %r failed", self.record.downstream_id)
            self.stream.finish(response(self.record.downstream_id, error=ErrorValue(-32603, "internal gateway error")))
        finally:
            for handle in self._timers:
                handle.cancel()
            if self._upstream is not None:
                self._upstream.cancel()
            for gid in [g for g, ex in self.runtime.awaiting.items() if ex is self]:
                del self.runtime.awaiting[gid]
            self.runtime.exchanges.pop(self.record.downstream_id, None)
            if not self.stream.closed:
                self.stream.finish()
            await store.delete_round(self.record.bridge_id)

    async def _perform(self, actions: list[Any]) -> None:
        if self.observer is not None:
            self.observer(self.record, actions)
        for action in actions:
            if isinstance(action, B.CallUpstream):
                self._upstream = self.runtime.spawn(self._call_upstream(action.extra))
            elif isinstance(action, B.SendToClient):
                if "id" in action.message:
                    self.runtime.awaiting[action.message["id"]] = self
                self.stream.push(action.message)
            elif isinstance(action, B.ArmTimer):
                event = B.TimerFired(action.name, action.round)
                loop = asyncio.get_running_loop()
                self._timers.append(loop.call_later(action.seconds, self.events.put_nowait, event))
            elif isinstance(action, B.AbortUpstream) and self._upstream is not None:
                self._upstream.cancel()  # closing the upstream response is the 2026 cancel
            elif isinstance(action, B.StoreRoots):
                await self._store_roots(action.result)
            elif isinstance(action, B.Finish):
                if action.log:
                    log.warning("request %r: %s", self.record.downstream_id, action.log)
                self.stream.finish(action.message)

    async def _call_upstream(self, extra: dict[str, Any]) -> None:
        gateway, rec = self.runtime.gateway, self.record
        session = await gateway.store.get_session(rec.session_id)
        if session is None:
            self.events.put_nowait(B.Cancelled("session ended"))
            return
        try:
            kind, payload = await self._send(session, extra)
            if kind == "error" and needs_header_refresh(rec.method, payload) and not self._refreshed:
                # DIGEST §4.13: a -32020 on tools/call may mean our x-mcp-header map is stale or missing:
                # refresh it from tools/list once, then resend the same round with a new id.
                self._refreshed = True
                await self._refresh_header_maps(session)
                kind, payload = await self._send(session, extra)
        except UpstreamFailure as failure:
            self.events.put_nowait(B.UpstreamFailed(failure.error))
            return
        if kind == "result" and rec.method == "tools/list":
            self._learn_header_maps(payload)
        self.events.put_nowait(B.UpstreamResult(payload) if kind == "result" else B.UpstreamError(payload))

    async def _send(self, session: Any, extra: dict[str, Any]) -> tuple[str, Any]:
        rec = self.record
        header_map = self.runtime.header_maps.get(rec.params.get("name")) if rec.method == "tools/call" else None
        call = build_request(rec.method, rec.params, request_id=new_id("u"), extra=extra,
                             view=session_view(session, self.authorization), header_map=header_map)
        return await self.runtime.gateway.upstream_for(session.upstream).call(call, self._on_notification)

    async def _refresh_header_maps(self, session: Any) -> None:
        upstream, cursor = self.runtime.gateway.upstream_for(session.upstream), None
        for _page in range(REFRESH_PAGE_CAP):  # a paginator that never ends cannot hang the request
            call = build_request("tools/list", {"cursor": cursor} if cursor else {}, request_id=new_id("u"),
                                 view=session_view(session, self.authorization))
            kind, payload = await upstream.call(call, lambda _m: None)
            if kind != "result":
                return
            self._learn_header_maps(payload)
            cursor = payload.get("nextCursor") if isinstance(payload, dict) else None
            if not isinstance(cursor, str):
                return

    def _learn_header_maps(self, result: Any) -> None:
        """Cache each tool's x-mcp-header map so tools/call can mirror Mcp-Param-* (DIGEST §4.13)."""
        for tool in (result.get("tools") if isinstance(result, dict) else None) or []:
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                mapping = x_mcp_header_map(tool.get("inputSchema"))
                if mapping:
                    self.runtime.header_maps[tool["name"]] = mapping

    def _on_notification(self, message: dict[str, Any]) -> None:
        legacy = request_notification(message, self.progress_token)
        if legacy is not None:
            keep, self._last_progress = progress_advances(self._last_progress, legacy)
            if keep:
                self.stream.push(legacy)

    async def _store_roots(self, result: dict[str, Any]) -> None:
        store = self.runtime.gateway.store
        session = await store.get_session(self.record.session_id)
        if session is not None:
            session.cached_roots = result
            await store.put_session(session)

    def answer(self, gateway_id: str, message: dict[str, Any]) -> None:
        self.events.put_nowait(B.ClientAnswered(gateway_id, message.get("result"), message.get("error")))

    def cancel(self, reason: str | None) -> None:
        self.events.put_nowait(B.Cancelled(reason))
