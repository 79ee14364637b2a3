"""Taking over a dead replica's bridged rounds (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds):
this replica's leases, renewed while it lives, and the continuation of a stored round whose holder's lease lapsed, when
a client's answer, cancel or stream resumption for it reaches this replica, or when this replica's periodic sweep finds
it with nobody holding it.

The rules (which round, who continues it, what it repeats upstream) are ``adapters.takeover``'s; this module looks
rounds and leases up in the store, claims, and rebuilds the round's :class:`~gateway.session.exchange.Exchange`
from its record. Only replicas on a shared store take rounds over (``Gateway.relay`` is set).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from adapters import local
from adapters import relay as R
from adapters import takeover as T
from adapters.classify import session_expired
from adapters.records import PendingRound, Phase, SessionRecord
from adapters.sse import PRIMING_SEQ
from gateway.session.exchange import Exchange, HandedOver, bridge_context
from gateway.session.replay import Mirror
from gateway.session.runtime import Gateway, SessionRuntime, log
from gateway.session.store import StoreUnavailable
from gateway.session.streams import OutStream

Pick = Callable[[list[PendingRound]], PendingRound | None]
MAX_WAITS = 4  # lease lapses waited for one message: a holder that keeps renewing without listening is alive


async def answer(gw: Gateway, session: SessionRecord, message: dict[str, Any], authorization: str | None) -> None:
    """A client's answer that no exchange here awaits, returning once the round it is for has acted on it (its step
    saved) wherever that round runs, or once nothing needs it: relayed to the round's live owner and kept until the
    owner says so; when the round's holder is gone, given to the round once this replica has taken it over (after its
    lease lapses). So the client's ``202`` means what it means for an answer to a round running here
    (docs/design/bridge.md#a-clients-answer-is-acted-on-before-it-is-acknowledged,
    docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds): a replica that dies before then leaves
    the POST unanswered, for the client to send again, never an acknowledged answer that only a dead replica knew."""
    assert gw.relay is not None
    relay, sid = gw.relay, session.session_id
    await _kept(gw, sid, await relay.answer(sid, message),
                lambda: _deliver_answer(gw, session, message, authorization),
                lambda holder: relay.answer_to(holder, sid, message))


async def cancel(gw: Gateway, session: SessionRecord, request_id: str | int, message: dict[str, Any]) -> None:
    """A cancel for a request no exchange here runs, returning once the request ended wherever it ran: relayed to its
    owner (or to every replica, for a plain request answered inline,
    docs/design/takeover.md#a-cancel-for-a-plain-request-goes-to-every-replica) and kept until the owner says the
    request ended; a saved round whose holder is gone is claimed and ended without being continued (nothing is sent
    upstream for it again)."""
    assert gw.relay is not None
    relay, sid = gw.relay, session.session_id
    await _kept(gw, sid, await relay.cancel(sid, request_id, message),
                lambda: _deliver_cancel(gw, session, request_id, message),
                lambda holder: relay.cancel_to(holder, sid, message))


Deliver = Callable[[], Awaitable[str | None]]  # by the stored round: None once delivered, else the live holder
Again = Callable[[str], Awaitable[asyncio.Future[bool] | None]]  # relay to that holder, asking for its word


async def _kept(gw: Gateway, session_id: str, acked: asyncio.Future[bool] | None, deliver: Deliver,
                again: Again) -> None:
    """Wait (the store's timeout at most each time: the owner's step is one save) for the owner's word on a
    relayed message (``acked``; None when no live owner took it); without it, ``deliver`` it by the stored round,
    which then needs it or not (an owner that acted on it and died before saying so has moved the round past it:
    nothing is delivered twice). While the round's holder still counts as alive (it listens, and holds the lease)
    the message is relayed to it ``again``, asking again for its word: a holder frozen past its lease loses the
    round, and the message goes where it is taken over, rather than into the frozen replica's subscription. A
    holder that stays alive without ever acting on it leaves the message undelivered: the client is told
    (``StoreUnavailable``), not acknowledged."""
    store = gw.config.store
    for _ in range(math.ceil(store.lease_seconds / store.timeout_seconds) + 2):
        try:
            if acked is not None and await asyncio.wait_for(acked, store.timeout_seconds):
                return
        except TimeoutError:
            log.info("session %s: no acknowledgement for a relayed message; delivering it by its stored round",
                     session_id)
        holder = await deliver()
        if holder is None:  # delivered here, or nothing needs it any more
            return
        acked = await again(holder)
    log.warning("session %s: replica %s holds the round of a client's message but never acted on it", session_id,
                holder)
    raise StoreUnavailable(f"the replica running the round ({holder}) did not act on the message")


async def _deliver_answer(gw: Gateway, session: SessionRecord, message: dict[str, Any],
                          authorization: str | None) -> str | None:
    """Deliver an answer by its stored round: None once acted on here (or when nothing awaits it any more), else the
    round's live holder, for the caller to relay it to."""
    gid = message["id"]

    async def act(_record: PendingRound) -> None:
        exchange = gw.runtime(session.session_id).awaiting.pop(gid, None)
        if exchange is not None:
            await exchange.door.answer_now(gid, message)
    return await _continue(gw, session, authorization, lambda rounds: T.round_for_answer(rounds, gid), act)


async def _deliver_cancel(gw: Gateway, session: SessionRecord, request_id: str | int,
                          message: dict[str, Any]) -> str | None:
    """Deliver a cancel by its request's stored round (ended, never continued, when taken over): as
    :func:`_deliver_answer`."""
    reason = (local.cancel_request(message.get("params")) or local.CancelRequest(request_id, None)).reason

    async def act(record: PendingRound) -> None:
        exchange = gw.runtime(session.session_id).exchanges.get(record.downstream_id)
        if exchange is not None:
            await exchange.door.cancel_now(reason)
    return await _continue(gw, session, None, lambda rounds: T.round_for_request(rounds, request_id), act, end=True)


async def resume(gw: Gateway, session: SessionRecord, stream: str, seq: int, authorization: str | None) -> None:
    """A ``Last-Event-ID`` naming a stream no exchange here writes: when the round writing it lost its holder,
    take it over (waiting for the lease to lapse), so the stream goes on here from ``seq``."""
    async def act(_record: PendingRound) -> None:
        return None
    await _continue(gw, session, authorization, lambda rounds: T.round_for_stream(rounds, stream), act, after=seq)


async def _continue(gw: Gateway, session: SessionRecord, authorization: str | None, pick: Pick,
                    act: Callable[[PendingRound], Any], *, end: bool = False, after: int = 0) -> str | None:
    """Find the stored round ``pick`` chooses and do what :func:`adapters.takeover.decide` says, waiting for a dead
    holder's lease to lapse, until the message is delivered (``act`` on the exchange here) or there is nothing to
    deliver it to: None then, else the round's live holder (the caller relays the message to it)."""
    for _ in range(MAX_WAITS + 1):
        record = pick(await gw.store.rounds_of(session.session_id))
        decision = await _decide(gw, record)
        match decision:
            case T.NoRound():
                return None
            case R.RelayTo(owner):
                return owner
            case T.HeldHere():
                assert record is not None
                claim = gw.taking.get(record.bridge_id)
                if claim is not None:  # being taken over here by another message: deliver once it runs
                    await claim
                await act(record)
                return None
            case T.WaitFor(seconds):
                await asyncio.sleep(seconds)
            case T.TakeOver():
                assert record is not None
                if gw.closing:  # the rounds a stopping replica handed over are the others' to take (§42)
                    raise HandedOver(record.bridge_id)  # refused (503): the client sends it again elsewhere
                if await take_over(gw, record, session, authorization, after=after, end=end):
                    await act(record)
                    return None
    return None


async def _decide(gw: Gateway, record: PendingRound | None) -> T.Decision:
    if record is None:
        return T.decide(None, gw.replica, False)
    lease = await gw.store.lease_of(record.bridge_id)
    other = lease.holder is not None and lease.holder != gw.replica
    listens = other and gw.relay is not None and await gw.relay.listens(lease.holder or "")
    return T.decide(lease, gw.replica, bool(listens))


async def take_over(gw: Gateway, record: PendingRound, session: SessionRecord, authorization: str | None, *,
                    after: int = 0, end: bool = False) -> bool:
    """Claim ``record``'s lease and continue the round here from the stored record (``end``: end it instead, a
    cancelled request); False when another replica won the claim or the round is gone."""
    bridge_id = record.bridge_id
    claim = gw.taking.get(bridge_id)
    if claim is not None:
        await claim
        return bridge_id in gw.leases
    claim = gw.taking[bridge_id] = asyncio.get_running_loop().create_future()
    try:
        if not await gw.store.take_lease(bridge_id, gw.replica, gw.config.store.lease_seconds):
            return False
        fresh = await gw.store.get_round(bridge_id)  # the holder's last save before it died
        if fresh is None or fresh.phase is Phase.DONE or end:
            await gw.store.end_round(bridge_id, gw.replica)
            log.warning("session %s: request %r of a replica that stopped is ended here", session.session_id,
                        record.downstream_id)
            return False
        await _run_here(gw, fresh, session, authorization, after)
        return True
    finally:
        del gw.taking[bridge_id]
        claim.set_result(None)


async def _run_here(gw: Gateway, record: PendingRound, session: SessionRecord, authorization: str | None,
                    after: int) -> None:
    runtime = gw.runtime(session.session_id)
    stream, sent = await _continued_stream(gw, runtime, record, after)
    exchange = Exchange(runtime, record, bridge_context(runtime, session), authorization, session)
    log.warning("session %s: request %r taken over from a replica that stopped (round %d, %s; repeated upstream: "
                "%s)", session.session_id, record.downstream_id, record.round, record.phase.value,
                T.repeats(record).value)
    unsent = set(record.outstanding) - sent if sent is not None else set()
    runtime.exchanges[record.downstream_id] = gw.leases[record.bridge_id] = exchange
    for gid in record.outstanding:
        runtime.awaiting[gid] = exchange
    await exchange.take_over(stream, max(0, gw.clock() - record.started_ms) / 1000, unsent)


async def _continued_stream(gw: Gateway, runtime: SessionRuntime, record: PendingRound,
                            after: int) -> tuple[OutStream, set[str] | None]:
    """The round's stream, continued here: with every event the store's copy holds (so a resumption from any of them
    works here too, and new events go on with the next number into the same copy), and the ids of the requests the
    client was sent (the copy has every event the client could have seen:
    docs/design/replicas.md#sse-replay-across-replicas). Without a readable copy (evicted, or never made) it goes on
    after the last event the record or the client's ``Last-Event-ID`` names, and what the client saw is unknown
    (None)."""
    name, capacity = record.stream or secrets.token_hex(6), gw.config.replay_buffer_events
    stored = await gw.store.read_events(record.session_id, name, PRIMING_SEQ) if gw.store.shares_streams else None
    if stored is None:
        stream = OutStream(name, capacity, gw.tap, first_seq=max(after, record.stream_seq) + 1)
        if gw.store.shares_streams:
            stream.mirror = Mirror(stream, gw.store, record.session_id, runtime.spawn)
        runtime.streams[name] = stream
        return stream, None
    events = stored.events
    stream = OutStream(name, capacity, gw.tap, first_seq=events[0].seq if events else PRIMING_SEQ + 1)
    stream.preload(events)  # not traced again: the trace has them from the replica that wrote them
    mirror = stream.mirror = Mirror(stream, gw.store, record.session_id, runtime.spawn)
    mirror.continuing(events[-1].seq if events else PRIMING_SEQ)
    runtime.streams[name] = stream
    return stream, {e.message["id"] for e in events if isinstance(e.message, dict) and "method" in e.message
                    and isinstance(e.message.get("id"), str)}


async def renew_forever(gw: Gateway) -> None:
    """Renew every lease this replica holds, every third of the lease time. A lease found lost (this replica
    stalled past it and another took the round over) stops the local exchange: the round is the other's now."""
    lease = gw.config.store.lease_seconds
    while True:
        await asyncio.sleep(T.renew_interval(lease))
        try:
            lost = await gw.store.renew_leases(list(gw.leases), gw.replica, lease)
        except StoreUnavailable as exc:
            log.warning("leases of replica %s not renewed: %s", gw.replica, exc)
            continue
        for bridge_id in lost:
            exchange = gw.leases.pop(bridge_id, None)
            if exchange is not None:
                log.warning("replica %s lost the lease of round %s; another replica continues it", gw.replica,
                            bridge_id)
                exchange.door.hand_over(lost=True)


async def sweep(gw: Gateway) -> int:
    """One sweep: the stored rounds whose lease ran out with nobody holding it, each ended or continued here as
    :func:`adapters.takeover.swept` says (a replica racing this one for a round wins or loses its claim in the
    store). How many were continued here."""
    if gw.closing:  # the rounds it just handed over are the other replicas' to take
        return 0
    continued, lease = 0, gw.config.store.lease_seconds
    for record in await gw.store.orphaned_rounds(T.SWEEP_BATCH):
        if gw.closing:
            break
        if record.bridge_id in gw.taking or record.bridge_id in gw.leases:
            continue  # a client's message is taking it over here right now
        session = await gw.store.get_session(record.session_id)
        live = session is not None and not session_expired(session, gw.clock(), gw.policy.session_idle_ms)
        match T.swept(record, live):
            case T.Sweep.LEAVE:
                continue
            case T.Sweep.END:
                if await gw.store.take_lease(record.bridge_id, gw.replica, lease):
                    await gw.store.end_round(record.bridge_id, gw.replica)
            case T.Sweep.CONTINUE:
                assert session is not None
                if await take_over(gw, record, session, None):
                    continued += 1
    return continued


async def sweep_forever(gw: Gateway) -> None:
    """:func:`sweep` once per lease time, for as long as the replica lives."""
    while True:
        await asyncio.sleep(T.sweep_interval(gw.config.store.lease_seconds))
        try:
            await sweep(gw)
        except StoreUnavailable as exc:
            log.warning("replica %s: the sweep for orphaned rounds failed: %s", gw.replica, exc)


@asynccontextmanager
async def lease_lifetime(gw: Gateway) -> AsyncIterator[None]:
    """Lease renewal and the sweep for the app's lifetime, on a shared store only (where the relay runs)."""
    if gw.relay is None:
        yield
        return
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(renew_forever(gw)), loop.create_task(sweep_forever(gw))]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
