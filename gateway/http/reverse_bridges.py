"""The gateway's reverse bridges (docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge): one
per upstream served in its 2025 era, the main one (``upstream_era``) and each named one (``[upstreams.NAME] era``),
found by the upstream a peer routes to.

Owns which bridge a 2025 client's relayed request goes to (``adapters.reverse.relay_upstream`` decides; the
gateway's ``Mcp-Session-Id`` of a relayed session is sealed over ``adapters.reverse.RelayedSession``, so any
replica knows where it goes, with nothing stored), and the retries of parked calls relayed between replicas
through the store's bus (gateway.session.relay): sent from the replica the client reached, answered here by the
bridge holding the call; requests about a task kept on another replica go the same way. And the relayed sessions,
counted against the gateway's own session limits by every replica on one store
(``gateway.session.store.RelayedLeases``: an opaque key per session, leased), and the principals their answers
verify (docs/design/eras.md#relayed-sessions-count-against-the-gateways-session-limits).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from adapters import reverse as R
from adapters.admission import SessionCounts, admit_session, answer_verifies, gateway_verified
from adapters.authz import Principal
from adapters.classify import principal_of
from adapters.errors import Rejection
from adapters.peers import client_info_of, match_peer, pick_upstream
from adapters.reverse_wire import Era, era_of
from adapters.usage import RelayedAnswer
from gateway.auth.credentials import UpstreamCredentials
from gateway.config.settings import GatewayConfig
from gateway.http.reverse import ReverseBridge, ReverseSettings, Sealer
from gateway.http.streams import json_response
from gateway.session.relay import BusRelay
from gateway.session.runtime import Gateway, log
from gateway.session.store import StoreUnavailable, TaskHolders
from gateway.telemetry.reverse import relayed_watch

_SESSION_AAD = b"mcp-legacy-gateway relayed 2025 session v1"
# The upstream a 2025 client's new session was split to (a peer's canary), picked once when its initialize reached
# the relay: the gateway's own session takes it when it is not 2025-era (gateway.http.handshake), so one
# initialize is never split twice (docs/design/eras.md#canary-splits-across-eras).
CANARY_PICK = web.RequestKey("canary_pick", str)


def reverse_settings(config: GatewayConfig, name: str, url: str, replica: str) -> ReverseSettings:
    """A bridge's settings: ``[gateway.reverse]``, with the connection bounds of its upstream."""
    rev, key = config.reverse, _state_key(config)
    up = config.pins.upstreams.get(name)
    connect = up.connect_timeout_seconds if up else config.upstream_connect_timeout_seconds
    short = up.max_connections if up else config.upstream_max_connections
    lasting = up.max_stream_connections if up else config.upstream_max_stream_connections
    return ReverseSettings(url, R.PoolLimits(rev.max_sessions, rev.session_idle_seconds),
                           R.CallLimits(rev.max_rounds, rev.max_input_requests_per_round), rev.answer_timeout_seconds,
                           config.max_sse_event_bytes, connect, key, short, lasting, name, replica,
                           watch_recheck_seconds=rev.task_watch_recheck_seconds)


def _state_key(config: GatewayConfig) -> bytes | None:
    env = config.reverse.state_key_env
    value = os.environ.get(env) if env else None
    return value.encode() if value else None


def legacy_upstreams(config: GatewayConfig, url: str) -> dict[str, str]:
    """The upstreams served in their 2025 era, by name ("default": the main one), with their URLs; "auto" here
    is what ``serve``'s probe did not find to be 2025-era (it writes its verdicts in before: gateway.ops.cli)."""
    found = {"default": url} if era_of(config.upstream_era, None) is Era.LEGACY else {}
    for name, up in config.pins.upstreams.items():
        if era_of(up.era, None) is Era.LEGACY:
            found[name] = up.url
    return found


class ReverseBridges:
    """The bridges by upstream name, the sealing of relayed sessions' ids, and the replica relay's retries."""

    def __init__(self, config: GatewayConfig, url: str, gateway: Gateway) -> None:
        self.gateway, self.url = gateway, url
        self.by_name = {name: self._bridge(config, name, at) for name, at in legacy_upstreams(config, url).items()}
        self.sealer = Sealer(_state_key(config))
        self.closing: set[asyncio.Task[None]] = set()  # bridges a reload replaced, closing

    def _bridge(self, config: GatewayConfig, name: str, url: str) -> ReverseBridge:
        bridge = ReverseBridge(reverse_settings(config, name, url, self.gateway.replica))
        bridge.forward = self._forward
        bridge.credentials = lambda: self._credentials(name)
        bridge.legacy_tasks.holders = self._task_holders
        return bridge

    def _task_holders(self) -> TaskHolders | None:
        """Where the holders of tasks are recorded: the store, when other replicas share it (its bus); else none
        (docs/design/eras.md#tasks-in-reverse)."""
        store = self.gateway.store
        return store if store.bus is not None else None

    def _credentials(self, name: str) -> UpstreamCredentials | None:
        """The credential the upstream's forward client sends (gateway.http.app), looked up when used: a reload
        replaces the clients. A named upstream without one gets none, never the main upstream's."""
        client = self.gateway.upstream if name == "default" else self.gateway.upstreams.get(name)
        return client.credentials if client is not None else None

    def get(self, name: str) -> ReverseBridge | None:
        return self.by_name.get(name)

    async def start(self) -> None:
        for bridge in self.by_name.values():
            await bridge.start()

    async def close(self) -> None:
        for bridge in self.by_name.values():
            await bridge.close()
        await asyncio.gather(*self.closing, return_exceptions=True)

    def reload(self, config: GatewayConfig) -> None:
        """A reloaded file's named upstreams (gateway.ops.reload): a bridge for each one now 2025-era, a new one
        where its URL changed, none for one no longer 2025-era; a replaced bridge is closed (its parked calls
        are cancelled upstream). The main upstream is fixed at start, its bridge too."""
        wanted = legacy_upstreams(config, self.url)
        for name in [n for n, b in self.by_name.items() if n != "default" and wanted.get(n) != b.settings.url]:
            self._retire(self.by_name.pop(name))
        for name, url in wanted.items():
            if name not in self.by_name:
                bridge = self.by_name[name] = self._bridge(config, name, url)
                bridge.begin()

    def _retire(self, bridge: ReverseBridge) -> None:
        task = asyncio.get_running_loop().create_task(bridge.close())
        self.closing.add(task)
        task.add_done_callback(self.closing.discard)

    def upstreams(self) -> dict[tuple[str, str], int]:
        """The pooled sessions of every bridge by legacy server name and revision (telemetry)."""
        out: dict[tuple[str, str], int] = {}
        for bridge in self.by_name.values():
            for key, count in bridge.upstreams().items():
                out[key] = out.get(key, 0) + count
        return out

    def attach(self) -> None:
        """On a shared store, answer the retries other replicas relay here (once the relay runs)."""
        relay = self.gateway.relay
        if isinstance(relay, BusRelay):
            relay.on_retry = self.answer_retry

    # --- 2025 clients ----------------------------------------------------------------------------------
    async def relay(self, request: web.Request, body: bytes, message: object,
                    grant: Principal | None) -> web.StreamResponse | None:
        """A 2025 client's request relayed to the 2025-era upstream its session or peer names; None when it is
        not one of those (the gateway's own sessions serve it). An ``initialize`` is admitted first as a forward
        session is (gateway.http.handshake)."""
        gw, headers = self.gateway, request.headers
        principal = grant.key if grant is not None else principal_of(headers.get("authorization"), gw.policy.tokens)
        sealed = headers.get("mcp-session-id")
        raw = self.sealer.open_bytes(sealed, _SESSION_AAD) if sealed else None
        session = R.decode_relayed_session(raw) if raw is not None else None
        routed = "" if sealed else self._routed(request, message, principal, grant)
        name = R.relay_upstream(bool(sealed), session, principal, routed, self.by_name)
        if name is None:
            return None
        watch = relayed_watch(request, gw, principal, grant, message, name,
                              session.client_info() if session is not None else None,
                              self.by_name[name].settings.max_event_bytes)
        scan = watch.scan if watch is not None else None
        if session is None and isinstance(message, Mapping) and message.get("method") == "initialize":
            pending = self._initialize(request, body, message, name, principal, scan)
        else:
            upstream_id = session.session_id if session is not None else None
            pending = self.by_name[name].relay_legacy(
                request, body, (upstream_id, lambda sid: self._seal(name, sid, principal)), scan)
            pending = self._renewed_while(session, principal, pending) if session is not None else pending
        answer = await (watch.watched(pending) if watch is not None else pending)
        if session is None:
            return answer
        await self._verified_by(name, request, principal, answer.status)
        if answer.status == 404 or (request.method == "DELETE" and answer.status < 300):
            # 2025-11-25 basic/transports §Session Management: the session is over
            await _answered(gw.store.release_relayed(session.lease_key(), principal))
        else:
            await _answered(gw.store.renew_relayed(session.lease_key(), principal, self._lease_seconds()))
        return answer

    async def _renewed_while(self, session: R.RelayedSession, principal: str,
                             pending: Awaitable[web.StreamResponse]) -> web.StreamResponse:
        """``pending``, a relayed request of ``session``, with the session's lease renewed every half lease while it
        lasts: a GET stream (or a long call) is use, and may outlast a lease."""

        async def renewing() -> None:
            ttl = self._lease_seconds()
            while True:
                await asyncio.sleep(ttl / 2)
                await _answered(self.gateway.store.renew_relayed(session.lease_key(), principal, ttl))

        task = asyncio.create_task(renewing())
        try:
            return await pending
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _initialize(self, request: web.Request, body: bytes, message: Mapping[str, Any], name: str,
                          principal: str, scan: Callable[[int, bool], RelayedAnswer] | None) -> web.StreamResponse:
        """An ``initialize`` without a session, admitted against the gateway's session limits: the sessions in the
        store and the relayed ones of every replica. It holds a lease of its own while in flight (so initializes
        at once, here or elsewhere, cannot all pass one free slot: the hold answers the count right after it),
        then the session's own lease once the server gave its id."""
        gw, opening = self.gateway, "o" + uuid.uuid4().hex
        given: list[str] = []
        if gateway_verified(principal, gw.policy.tokens.values()):
            await gw.verify(principal)  # as a forward session's handshake does, before it is counted
        try:
            full = await self._admit(opening, principal, message.get("id"))
            if full is not None:
                log.warning("relayed initialize refused: %s", full.error.message)
                return json_response(full.body(), full.status)  # a session limit has no challenge

            client = R.relayed_client(message.get("params"))

            def sealed(upstream_id: str) -> str:
                given.append(upstream_id)
                return self._seal(name, upstream_id, principal, client)

            answer = await self.by_name[name].relay_legacy(request, body, (None, sealed), scan)
            await self._verified_by(name, request, principal, answer.status)  # before the session's lease is held
            if given and answer.status < 300:
                await _answered(gw.store.hold_relayed(R.lease_key(name, given[-1]), principal, self._lease_seconds()))
            return answer
        finally:
            await _answered(gw.store.release_relayed(opening, principal))  # else it lapses by itself

    async def _admit(self, opening: str, principal: str, ident: Any) -> Rejection | None:
        """adapters.admission.admit_session over the store's sessions and the relayed ones, counted right after
        this initialize's own lease (``opening``) was taken, less that one; the unverified ones too (None: the
        principal is verified), counted in that same step."""
        gw = self.gateway
        (relayed, relayed_own, unverified), (total, own) = await asyncio.gather(
            gw.store.hold_relayed(opening, principal, self._lease_seconds()), gw.store.count_sessions(principal))
        return admit_session(SessionCounts(total + relayed - 1, own + relayed_own - 1,
                                           None if unverified is None else unverified - 1),
                             gw.config.sessions.session_limits, ident)

    async def _verified_by(self, name: str, request: web.Request, principal: str, status: int) -> None:
        """A relayed answer verifies the request's principal as a forward call's does
        (adapters.admission.answer_verifies): when the upstream was sent a credential made from the client's own
        token (``forward``, or exchanged) and took it, which a success status says (a 401/403 refuses it; any
        other error may come before the server judged it, or from the gateway's own relay)."""
        client = self.gateway.upstream if name == "default" else self.gateway.upstreams.get(name)
        went = client is not None and client.needs_client_token
        if status < 300 and answer_verifies(request.headers.get("authorization") is not None, went):
            await self.gateway.verify(principal)

    def _lease_seconds(self) -> float:
        """A relayed session's lease: the gateway's idle time, renewed by each of its requests on any replica, so
        one whose client left without DELETE, or whose replica died, stops counting after the idle time."""
        return self.gateway.policy.session_idle_ms / 1000

    def _routed(self, request: web.Request, message: object, principal: str, grant: Principal | None) -> str:
        """The upstream the request's peer routes to (an initialize's clientInfo counts: adapters.peers); for an
        initialize of a peer with a canary, the new session's share, whichever era the upstream picked is
        (docs/design/eras.md#canary-splits-across-eras)."""
        params = message.get("params") if isinstance(message, Mapping) else None
        initialize = isinstance(message, Mapping) and message.get("method") == "initialize"
        info = client_info_of(initialize, params) if isinstance(params, Mapping) else None
        pins = self.gateway.pins
        peer = match_peer(pins.peers, pins.default, principal, info, grant)
        if not (initialize and peer.canary):
            return peer.upstream
        # Keyed by a new random value, as the gateway's own sessions are by their new id: the server's session id
        # is not known yet. Kept on the request for the gateway's own session, if the pick is not 2025-era.
        picked = request[CANARY_PICK] = pick_upstream(peer, uuid.uuid4().hex, pins.seed)
        return picked

    def _seal(self, name: str, upstream_id: str, principal: str, client: tuple[str, str] = ("", "")) -> str:
        return self.sealer.seal_bytes(R.RelayedSession(name, upstream_id, principal, *client).encode(), _SESSION_AAD)

    # --- retries between replicas -----------------------------------------------------------------------
    async def _forward(self, replica: str, relayed: dict[str, Any]) -> Mapping[str, Any] | None:
        relay = self.gateway.relay
        return await relay.retry(replica, relayed) if isinstance(relay, BusRelay) else None

    async def answer_retry(self, relayed: Mapping[str, Any]) -> Mapping[str, Any]:
        """A retry another replica relayed: answered by the bridge of the upstream it names."""
        bridge = self.by_name.get(str(relayed.get("upstream", "")))
        if bridge is None:
            request = relayed.get("request")
            ident = request.get("id") if isinstance(request, Mapping) else None
            return {"jsonrpc": "2.0", "id": ident, "error": R.holder_gone().to_wire()}
        return await bridge.retry_relayed(relayed)


async def _answered(step: Awaitable[object]) -> None:
    """A lease step after the client's answer began: a store that fails then is logged, not raised (the answer is
    under way); the lease is put right by the session's next request, or runs out by itself."""
    try:
        await step
    except StoreUnavailable as exc:
        log.warning("a relayed session's lease was not written: %s", exc)
