"""Taking over a dead replica's bridged rounds (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds):
this replica's leases, renewed while it lives, and the continuation of a stored round whose holder's lease lapsed, when
a client's answer, cancel or stream resumption for it reaches this replica, or when this replica's periodic sweep finds
it with nobody holding it.

The rules (which round, who continues it, what it repeats upstream) and their order (``adapters.takeover.Takeover``
and ``Keeping``) are ``adapters.takeover``'s; this module performs their actions: it looks rounds and leases up in
the store, claims, waits, relays, and rebuilds the round's :class:`~gateway.session.exchange.Exchange` from its
record. Only replicas on a shared store take rounds over (``Gateway.relay`` is set).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, assert_never

from adapters import local
from adapters import takeover as T
from adapters.classify import session_expired
from adapters.records import PendingRound, SessionRecord
from adapters.sse import PRIMING_SEQ
from gateway.session.exchange import Exchange, HandedOver, bridge_context
from gateway.session.replay import Mirror
from gateway.session.runtime import Gateway, SessionRuntime, log
from gateway.session.store import StoreUnavailable
from gateway.session.streams import OutStream

Pick = Callable[[list[PendingRound]], PendingRound | None]
End = T.PassOn | T.Deliver | T.Refuse | T.Settle  # how a Takeover ends


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
    """Keep a relayed message until its owner acted on it, as :class:`adapters.takeover.Keeping` orders: wait (the
    store's timeout at most each time: the owner's step is one save) for the owner's word (``acked``; None when no
    live owner took it); without it, ``deliver`` it by the stored round; relay it ``again`` to a holder that
    still lives. A holder that stays alive without ever acting on it leaves the message undelivered: the client is
    told (``StoreUnavailable``), not acknowledged."""
    store = gw.config.store
    keeping = T.Keeping(T.keep_attempts(store.lease_seconds, store.timeout_seconds))
    actions = keeping.start(acked is not None)
    while actions:
        event: T.KeepEvent | None = None
        for action in actions:
            match action:
                case T.AwaitAck():
                    assert acked is not None
                    try:
                        event = T.AckWord(await asyncio.wait_for(acked, store.timeout_seconds))
                    except TimeoutError:
                        log.info("session %s: no acknowledgement for a relayed message; delivering it by its stored "
                                 "round", session_id)
                        event = T.AckWord(None)
                case T.DeliverByRound():
                    event = T.Delivered(await deliver())
                case T.RelayAgain(holder):
                    acked = await again(holder)
                    event = T.RelayedAgain(acked is not None)
                case T.Kept():
                    return
                case T.NotKept(holder):
                    log.warning("session %s: replica %s holds the round of a client's message but never acted on it",
                                session_id, holder)
                    raise StoreUnavailable(f"the replica running the round ({holder}) did not act on the message")
                case _:
                    assert_never(action)
        actions = keeping.handle(event) if event is not None else []
    raise AssertionError("keeping a relayed message ended without an end")  # every path ends Kept or NotKept


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
    """Take a client's message to the stored round ``pick`` chooses, as :class:`adapters.takeover.Takeover` orders,
    until it is delivered (``act`` on the exchange here) or there is nothing to deliver it to: None then, else the
    round's live holder (the caller relays the message to it)."""
    machine = T.Takeover(T.TakeoverContext(gw.replica, end, after))
    outcome = await _perform(gw, machine, machine.start(), session, authorization, pick)
    match outcome:
        case T.PassOn(holder):
            return holder
        case T.Deliver(record):
            await act(record)
        case T.Refuse(bridge_id):  # the rounds a stopping replica handed over are the others' to take
            raise HandedOver(bridge_id)  # refused (503): the client sends it again elsewhere
        case T.Settle():
            pass
        case _:
            assert_never(outcome)
    return None


async def _perform(gw: Gateway, machine: T.Takeover, actions: list[T.TakeoverAction], session: SessionRecord,
                   authorization: str | None, pick: Pick | None = None) -> End:
    """Perform ``machine``'s actions until it ends; a claim registered here (``Gateway.taking``, which other
    messages for the round join) is released however this ends."""
    claims: dict[str, asyncio.Future[None]] = {}
    try:
        while actions:
            event: T.TakeoverEvent | None = None
            for action in actions:
                match action:
                    case T.LookUpRound():
                        assert pick is not None
                        event = T.RoundFound(pick(await gw.store.rounds_of(session.session_id)))
                    case T.ReadLease(bridge_id):
                        lease = await gw.store.lease_of(bridge_id)
                        event = T.LeaseRead(lease, bridge_id in gw.taking, gw.closing)
                    case T.AskListens(holder):
                        event = T.HolderListens(gw.relay is not None and await gw.relay.listens(holder))
                    case T.JoinClaim(bridge_id):
                        claim = gw.taking.get(bridge_id)
                        if claim is not None:
                            await claim
                        event = T.ClaimJoined(bridge_id in gw.leases)
                    case T.Claim(bridge_id):
                        claims[bridge_id] = gw.taking[bridge_id] = asyncio.get_running_loop().create_future()
                        event = T.Claimed(await gw.store.take_lease(bridge_id, gw.replica,
                                                                    gw.config.store.lease_seconds))
                    case T.LoadRound(bridge_id):
                        event = T.Loaded(await gw.store.get_round(bridge_id))  # the holder's last save before it died
                    case T.EndRound(record):
                        await gw.store.end_round(record.bridge_id, gw.replica)
                        log.warning("session %s: request %r of a replica that stopped is ended here",
                                    session.session_id, record.downstream_id)
                    case T.RunHere(record, after):
                        await _run_here(gw, record, session, authorization, after)
                    case T.Release(bridge_id):
                        _release(gw, claims, bridge_id)
                    case T.WaitLapse(seconds):
                        await asyncio.sleep(seconds)
                        event = T.Waited()
                    case T.PassOn() | T.Deliver() | T.Refuse() | T.Settle():
                        return action
                    case _:
                        assert_never(action)
            actions = machine.handle(event) if event is not None else []
        raise AssertionError("a takeover ended without an end")  # every path of the machine ends
    finally:
        for bridge_id in list(claims):
            _release(gw, claims, bridge_id)


def _release(gw: Gateway, claims: dict[str, asyncio.Future[None]], bridge_id: str) -> None:
    """This replica's claim of ``bridge_id`` is over: the messages that joined it go on."""
    claim = claims.pop(bridge_id, None)
    if claim is not None:
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
                machine = T.Takeover(T.TakeoverContext(gw.replica, lookups=0))
                claiming = record.bridge_id in gw.taking  # a client's message began taking it over meanwhile
                if isinstance(await _perform(gw, machine, machine.claim(record, claiming), session, None), T.Deliver):
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
