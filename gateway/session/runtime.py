"""The in-process half of a session (streams, exchanges, tasks) and the app-wide :class:`Gateway` state.

Records live in the store; this module only holds what cannot be serialized. Every task is created through
:meth:`SessionRuntime.spawn` (tracked, cancelled and awaited when the session ends or the app shuts down).
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from adapters.capabilities import client_caps_to_modern
from adapters.classify import Accepted, Kind
from adapters.doors import DOOR_HEADER, Transport, door_header, offered_versions, transport_of
from adapters.errors import ErrorValue, shutting_down
from adapters.peers import Peer, client_info_of, match_peer, peer_from_record
from adapters.records import Phase, SessionRecord
from adapters.sse import FINISHED_STREAMS_KEPT
from adapters.trace import every_kind
from adapters.upstream import SessionView
from gateway.config.settings import GatewayConfig
from gateway.session.observer import Observer, Unobserved
from gateway.session.replay import Follower, Mirror, follow, open_follower
from gateway.session.store import SessionStore, StoreUnavailable
from gateway.session.streams import OutStream, Tap
from gateway.upstream.client import UpstreamClient

log = logging.getLogger("gateway")
KEEP_FINISHED_STREAMS = FINISHED_STREAMS_KEPT
VERIFIED_KEPT = 4096  # principals remembered as marked (Gateway.verified); past it the oldest is marked again
ANSWER_RECORDS_KEPT = 1024  # session records kept for client answers relayed from here (Gateway.answer_records)


_PROCESS_TAG = secrets.token_hex(6)
_serial = itertools.count(1)


def new_id(prefix: str = "g") -> str:
    """Ids that stay inside the gateway and its upstream hop (bridge records, upstream JSON-RPC ids): a random
    per-process tag plus a counter, so ids minted by different replicas never collide, at no syscall per id."""
    return f"{prefix}{_PROCESS_TAG}{next(_serial):x}"


def random_id(prefix: str = "g") -> str:
    """Ids the legacy client sees (its requests' ids, URL elicitationIds): unguessable as well as unique."""
    return prefix + secrets.token_hex(8)


def now_ms() -> int:
    return int(time.time() * 1000)


class SessionRuntime:
    __slots__ = (
        "__dict__",
        "awaiting",
        "exchanges",
        "followers",
        "gateway",
        "header_maps",
        "hub_key",
        "listen",
        "peer",
        "session_id",
        "standalone",
        "streams",
        "task_watch",
        "tasks",
    )

    def __init__(self, session_id: str, gateway: Gateway) -> None:
        self.session_id = session_id
        self.gateway = gateway
        self.exchanges: dict[Any, Any] = {}  # downstream request id -> Exchange
        self.awaiting: dict[str, Any] = {}  # gateway request id -> Exchange waiting for the client's answer
        self.streams: dict[str, OutStream] = {}
        # another replica's streams resumed here (docs/design/replicas.md#sse-replay-across-replicas)
        self.followers: dict[str, Follower] = {}
        self.standalone: OutStream | None = None
        self.listen: Any = None  # this session's own Listener (when it has resource subscriptions)
        self.hub_key: Any = None  # the shared listen it is a member of (gateway.session.listen.ListenHub)
        self.task_watch: Any = None  # its 2025 tasks' listen (gateway.session.listen.TaskWatch), made on first use
        self.header_maps: dict[str, Any] = {}  # tool name -> x-mcp-header map (from tools/list)
        self.tasks: set[asyncio.Task[Any]] = set()
        self.peer: Peer | None = None  # the session's pins as a Peer (its record's snapshot never changes)

    def spawn(self, coro: Coroutine[Any, Any, Any], *, leaves: bool = False) -> asyncio.Task[Any]:
        """A session task, cancelled and waited for when the session's work ends (:meth:`close`). ``leaves``: the
        coroutine calls :meth:`left` as its last step and never raises, so no done callback is needed: each costs
        a loop turn of its own, and a bridged round spawns a task for its upstream call."""
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        if not leaves:
            task.add_done_callback(self._done)
        return task

    def left(self) -> None:
        """The running task (spawned with ``leaves``) is ending. One cancelled before its first step never gets
        here: it stays in :attr:`tasks`, done, until the session's work ends, which is harmless."""
        task = asyncio.current_task()
        if task is not None:
            self.tasks.discard(task)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("session task failed", exc_info=task.exception())

    def held_record(self) -> SessionRecord | None:
        """The record a round waiting here for this session's client was accepted with (any of them: what an
        answer is checked against is the same in each), or None."""
        for exchange in self.awaiting.values():
            return exchange.rounds.request_session  # type: ignore[no-any-return]
        return None

    def new_stream(self) -> OutStream:
        self._prune_streams()
        stream = OutStream(secrets.token_hex(6), self.gateway.config.replay_buffer_events, self.gateway.tap)
        if self.gateway.store.shares_streams:
            stream.mirror = Mirror(stream, self.gateway.store, self.session_id, self.spawn)
        self.streams[stream.name] = stream
        return stream

    async def follow(self, name: str, after: int) -> OutStream | None:
        """Another replica's stream ``name`` from ``after`` on, for one more request resuming it here (give it
        back with :meth:`unfollow`); None when the store cannot resume it there."""
        follower = self.followers.get(name)
        if follower is None:
            gateway = self.gateway
            made = await open_follower(gateway.store, self.session_id, name, after, gateway.config.replay_buffer_events)
            follower = self.followers.setdefault(name, made) if made is not None else None  # another resume won
            if follower is None:
                return None
            if follower is made and not made.stream.closed:
                made.task = self.spawn(follow(gateway.store, self.session_id, made,
                                              gateway.config.sse_keepalive_seconds))
        elif follower.stream.buffer.after(after) is None:
            return None
        follower.users += 1
        return follower.stream

    def unfollow(self, name: str) -> None:
        """A resuming request ended: the last one stops following (a later resume starts again from the store)."""
        follower = self.followers.get(name)
        if follower is None:
            return
        follower.users -= 1
        if follower.users <= 0:
            del self.followers[name]
            if follower.task is not None:
                follower.task.cancel()

    def _prune_streams(self) -> None:
        """Finished request streams stay resumable, but only the most recent ones: memory per session is bounded
        (a client resumes a stream right after it broke, not hours later)."""
        finished = [name for name, s in self.streams.items() if s.closed and s is not self.standalone]
        for name in finished[:max(0, len(finished) - KEEP_FINISHED_STREAMS)]:
            del self.streams[name]

    def standalone_stream(self) -> OutStream:
        if self.standalone is None:
            self.standalone = self.new_stream()
        return self.standalone

    async def close(self, error: ErrorValue | None = None, *, hand_over: bool = False) -> None:
        """End the session's work: its requests in flight are cancelled (DELETE, expiry), or answered with
        ``error`` (shutdown: the client stops waiting instead of hanging on a stream that just closes), or, with
        ``hand_over`` (shutdown on a shared store), a saved round is left to another replica
        (docs/design/takeover.md#sigterm-hands-the-rounds-over)."""
        if self.gateway.hub is not None:
            self.gateway.hub.leave(self)
        handed = set()
        for exchange in list(self.exchanges.values()):
            # One still in its first round runs in a handler, not a task here: both reach it.
            if hand_over and exchange.keeper.saved:
                handed.add(exchange.door.hand_over())  # it ends by itself, its lease released, once its step is saved
            elif error is not None:
                exchange.door.abort(error)
            else:
                exchange.door.cancel("session ended")
        for task in list(self.tasks):
            if task not in handed:
                task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for stream in self.streams.values():
            if stream.mirror is not None:
                stream.mirror.stop()
            stream.finish()
        for follower in self.followers.values():
            follower.stream.finish()


SWEEP_FRACTION = 0.1  # of session_idle_seconds: how often expired sessions are swept
# Shutdown: the part of shutdown_timeout_seconds given to requests waiting on their upstream (the rest is aiohttp's
# wait for the handlers), and how often it looks whether any is left: a shutdown is rare, a poll costs nothing.
DRAIN_FRACTION = 0.5
DRAIN_POLL_SECONDS = 0.01


async def wait_while(busy: Callable[[], int], seconds: float) -> int:
    """Wait up to ``seconds`` while ``busy()`` counts something; what it counts at the end (0: nothing left).
    A poll, not an event: what it counts (a step's phase, inside the pure bridge machine; a passthrough's end)
    tells nobody, and a shutdown is too rare for every request to pay for a signal."""
    loop = asyncio.get_running_loop()
    deadline, left = loop.time() + seconds, busy()
    while left and loop.time() < deadline:
        await asyncio.sleep(DRAIN_POLL_SECONDS)
        left = busy()
    return left


_today: tuple[int | None, str] = (None, "")  # (minute, ISO date): sunsets are checked on every request


def today_iso() -> str:
    """Today's local date, recomputed once a minute (local midnight always falls on a minute boundary)."""
    global _today
    minute = int(time.time() // 60)
    if minute != _today[0]:
        _today = (minute, datetime.date.today().isoformat())
    return _today[1]


@dataclass(frozen=True)
class PinState:
    """The pins new sessions are opened under; replaced whole on a config reload."""

    peers: tuple[Peer, ...] = ()
    default: Peer = Peer("default")
    tokens: dict[str, str] = field(default_factory=dict)
    seed: str = "canary"

    @classmethod
    def from_config(cls, config: GatewayConfig, env: dict[str, str]) -> PinState:
        peers, default = config.pins.peer_values()
        return cls(peers, default, config.pins.token_table(env), config.pins.canary_seed)


class Relay(Protocol):
    """How a replica passes on what belongs to an exchange held by another replica (``gateway.session.relay``;
    none on the in-memory store, where every exchange is local)."""

    async def answer(self, session_id: str, message: dict[str, Any]) -> asyncio.Future[bool] | None: ...
    async def answer_to(self, replica: str, session_id: str,
                        message: dict[str, Any]) -> asyncio.Future[bool] | None: ...
    async def cancel(self, session_id: str, request_id: str | int,
                     message: dict[str, Any]) -> asyncio.Future[bool] | None: ...
    async def cancel_to(self, replica: str, session_id: str,
                        message: dict[str, Any]) -> asyncio.Future[bool] | None: ...
    async def ended(self, session_id: str) -> None: ...
    async def listens(self, replica: str) -> bool: ...


def replica_id() -> str:
    return secrets.token_hex(6)


@dataclass
class Gateway:
    config: GatewayConfig
    store: SessionStore
    upstream: UpstreamClient  # the default upstream (--upstream, or the embedded core)
    tap: Tap | None = None
    runtimes: dict[str, SessionRuntime] = field(default_factory=dict)
    discover_cache: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    clock: Callable[[], int] = now_ms
    upstreams: dict[str, UpstreamClient] = field(default_factory=dict)  # named upstreams from the config
    pins: PinState = field(default_factory=PinState)
    today: Callable[[], str] = today_iso  # ISO date, injected by tests (sunsets)
    hub: Any = None  # gateway.session.listen.ListenHub, set by the app
    observer: Observer = field(default_factory=Unobserved)  # who watches the traffic (the app: telemetry)
    replica: str = field(default_factory=replica_id)  # this process's name among replicas on one store (§34)
    relay: Relay | None = None  # set for the app's lifetime on a shared store (gateway.session.backends)
    # The secret by which this process's own doors (stdio, HTTP+SSE, WebSocket) name their transport to /mcp.
    door_key: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    leases: dict[str, Any] = field(default_factory=dict)  # bridge id -> Exchange: the saved rounds run here (§40)
    taking: dict[str, asyncio.Future[None]] = field(default_factory=dict)  # bridge id -> a takeover under way here
    closing: bool = False  # shutting down: rounds are handed over, and none is taken on (the sweep, §40)
    # Principals this process marked verified in the store, and when (ms): a mark is written again only after half
    # the idle time, so a request of a verified principal costs the store nothing more (adapters.admission).
    verified: dict[str, int] = field(default_factory=dict)
    # On a shared store: the session records this replica read last (oldest first), on which a client's answer for
    # a round another replica runs is accepted as on a held record, without reading the store again
    # (docs/design/replicas.md#replicas-relay-through-the-store). A session's goes when it ends here or anywhere
    # (the relay's END), and every one when the bus was lost (an END may have been missed meanwhile).
    answer_records: OrderedDict[str, SessionRecord] = field(default_factory=OrderedDict)

    def __post_init__(self) -> None:
        self.policy = self.config.policy(self.pins.tokens)
        # The tap again when it is a trace (adapters.trace.every_kind): the handler traces client messages
        # only then, so without a trace the request path pays one None check.
        self.trace: Tap | None = self.tap if every_kind(self.tap) else None
        self._last_sweep_ms = -(10**18)

    def set_pins(self, config: GatewayConfig, pins: PinState) -> None:
        """A reload: new sessions use the new pins; live sessions keep the snapshot in their records."""
        self.config, self.pins = config, pins
        self.policy = config.policy(pins.tokens)

    def door_headers(self, transport: Transport) -> dict[str, str]:
        """What a door adds to each request it makes to this gateway's /mcp."""
        return {DOOR_HEADER: door_header(transport, self.door_key)}

    def transport(self, headers: Any) -> Transport:
        """The door a request to /mcp came through (Streamable HTTP unless one of ours says otherwise)."""
        return transport_of(headers.get(DOOR_HEADER), self.door_key)

    def offered_versions(self, headers: Any) -> tuple[str, ...]:
        return offered_versions(self.transport(headers), self.config.streamable_http_2024_11_05)

    def upstream_for(self, name: str) -> UpstreamClient:
        return self.upstreams.get(name, self.upstream)

    def held_record(self, session_id: str) -> SessionRecord | None:
        """The session's record as a round waiting here for its client was accepted with, if one is (what an
        answer to it is classified on:
        docs/design/takeover.md#a-clients-answer-is-checked-on-its-requests-session-record)."""
        runtime = self.runtimes.get(session_id)
        return runtime.held_record() if runtime is not None else None

    def remember_record(self, record: SessionRecord) -> None:
        """Keep a record just read from a shared store in :attr:`answer_records`, for the client's answers (only
        an accepted answer stands on it:
        docs/design/takeover.md#a-clients-answer-is-checked-on-its-requests-session-record); the oldest goes past
        :data:`ANSWER_RECORDS_KEPT`."""
        if self.relay is None:
            return
        records = self.answer_records
        records[record.session_id] = record
        records.move_to_end(record.session_id)
        if len(records) > ANSWER_RECORDS_KEPT:
            records.popitem(last=False)

    def runtime(self, session_id: str) -> SessionRuntime:
        if session_id not in self.runtimes:
            self.runtimes[session_id] = SessionRuntime(session_id, self)
        return self.runtimes[session_id]

    def request_peer(self, acc: Accepted) -> Peer:
        """The peer a request is served for: its session's pinned one, else (a handshake, a 2026 request) the one
        its principal, token claims and clientInfo match now. Reads only: no runtime is made for it."""
        if acc.session is not None:
            return peer_from_record(acc.session.pins)
        params = acc.message.get("params")
        info = client_info_of(acc.kind is Kind.INITIALIZE, params if isinstance(params, dict) else {})
        return match_peer(self.pins.peers, self.pins.default, acc.principal, info, acc.grant)

    async def verify(self, principal: str) -> None:
        """Record that ``principal``'s credential was checked (the gateway's own token table or validator, or
        the upstream's answer: adapters.admission.answer_verifies), so its sessions leave the unverified
        allowance. A store failure only leaves it unverified until the next such answer."""
        now = self.clock()
        if now - self.verified.get(principal, -(10**18)) < self.policy.session_idle_ms // 2:
            return
        try:
            await self.store.mark_verified(principal, now)
        except StoreUnavailable as exc:
            log.warning("principal %s stays unverified for now: %s", principal, exc)
            return
        self.verified.pop(principal, None)  # re-inserted last: the oldest mark is the first to go
        while len(self.verified) >= VERIFIED_KEPT:
            del self.verified[next(iter(self.verified))]
        self.verified[principal] = now

    def peer_of(self, record: SessionRecord) -> Peer:
        runtime = self.runtime(record.session_id)
        if runtime.peer is None:
            runtime.peer = peer_from_record(record.pins)
        return runtime.peer

    async def end_session(self, session_id: str, *, announce: bool = True) -> None:
        """Delete the session and end its runtime here; ``announce`` (a DELETE) tells the other replicas to end
        theirs too (an expired session's runtimes are swept by each replica itself)."""
        await self.store.delete_session(session_id)
        await self.end_runtime(session_id)
        if announce and self.relay is not None:
            await self.relay.ended(session_id)

    async def end_runtime(self, session_id: str) -> None:
        """End this process's streams, exchanges and listen of a session (its record is already gone)."""
        self.answer_records.pop(session_id, None)
        runtime = self.runtimes.pop(session_id, None)
        if runtime is not None:
            await runtime.close()

    async def sweep_expired(self, *, force: bool = False) -> int:
        """End the sessions idle for longer than ``session_idle_seconds`` (their ids already answer 404).

        The store drops expired records itself, including those of sessions that never needed a runtime (an
        initialize, then nothing: only a record). Then every runtime whose record is gone is closed, so a sweep
        visits every live session: it runs at most once per ``SWEEP_FRACTION`` of the idle limit (unless forced),
        since with one per initialize opening n sessions would cost O(n^2) (the benchmark's 10,000 idle sessions
        took minutes). An expired session is ended at most that much late; it already answers 404. A session
        with a request in flight is kept until a sweep after that request ends.
        """
        limit, now = self.config.session_idle_seconds * 1000, self.clock()
        if not force and now - self._last_sweep_ms < limit * SWEEP_FRACTION:
            return 0
        self._last_sweep_ms = now
        busy = {session_id for session_id, runtime in self.runtimes.items() if runtime.exchanges}
        ended = set(await self.store.expire_sessions(now - limit, keep=busy))
        # One query for every live runtime's last-seen time, not a record read each: with many idle sessions,
        # reading every record would stall the loop for each sweep (the benchmark's idle scenario).
        asked = list(self.runtimes)
        seen = await self.store.last_seen(asked)
        # Only the runtimes asked about: one made while the store answered (a new session's first request) has no
        # time in ``seen``, and ending it would delete a live session (tests/faults/test_chaos_replicas.py).
        stale = [s for s in asked if s in ended or now - seen.get(s, now - limit - 1) > limit]
        for session_id in stale:
            runtime = self.runtimes.get(session_id)  # re-read after each wait on the store:
            if runtime is None or runtime.exchanges:  # a DELETE ended it meanwhile, or a request is in flight
                continue
            await self.end_session(session_id, announce=False)
            ended.add(session_id)
        return len(ended)

    async def close(self) -> None:
        """Shutdown: the requests waiting on their upstream get a part of the shutdown timeout to be answered
        (:meth:`drain`); then every session's requests still in flight are answered with the shutdown error, or
        on a shared store, a saved round is handed over."""
        self.closing = True
        await self.drain(self.config.shutdown_timeout_seconds * DRAIN_FRACTION)
        hand_over = self.relay is not None
        if hand_over and self.leases:
            log.warning("shutting down: %d saved rounds handed over to the other replicas", len(self.leases))
        for session_id in list(self.runtimes):
            runtime = self.runtimes.pop(session_id, None)
            if runtime is not None:  # not ended meanwhile (a DELETE relayed from another replica, while one closed)
                await runtime.close(shutting_down(), hand_over=hand_over)
        if self.hub is not None:
            await self.hub.close()

    async def drain(self, seconds: float) -> None:
        """Wait up to ``seconds`` while a request's step is upstream: its answer usually comes in milliseconds,
        and cutting it off answers the client an error for a call the upstream may have carried out (a plain
        request in its first round is saved nowhere, so no replica can finish it). A request waiting for its
        client (a human, maybe) is not waited for: it ends, or is handed over, at once after the drain."""
        waiting = self.upstream_steps()
        if waiting:
            log.info("shutting down: up to %g s for %d requests waiting on their upstream", seconds, waiting)
            waiting = await wait_while(self.upstream_steps, seconds)
        if waiting:
            log.warning("shutting down: %d requests still waiting on their upstream are answered shutting_down",
                        waiting)

    def upstream_steps(self) -> int:
        """The requests whose step is upstream now (:meth:`drain` waits for them)."""
        return sum(exchange.record.phase is Phase.UPSTREAM
                   for runtime in self.runtimes.values() for exchange in runtime.exchanges.values())


def session_view(record: SessionRecord, authorization: str | None) -> SessionView:
    return SessionView(client_caps_to_modern(record.client_capabilities), record.client_info or None,
                       record.log_level, authorization)
