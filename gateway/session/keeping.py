"""Writes what an exchange's :class:`adapters.exchange.Keeper` decides to the store: a waiting round's count, a
step's save (its lease, ownership changes, hold and stream copy in one fenced write), and the end of the round's
records (docs/design/takeover.md#a-bridged-step-is-one-fenced-store-write). The decisions are the keeper's; this
module only performs them and tells it what was written. ``owner`` is the exchange that the gateway's lease table
names while it holds the round (``gateway.session.takeover`` renews and revokes leases through it): given to each
call, never kept, so nothing here refers back to the exchange.
"""

from __future__ import annotations

from typing import Any

from adapters import bridge as B
from adapters import exchange as X
from adapters.admission import WaitingLoad, admit_waiting, waiting_ceilings
from adapters.jsonwire import dumps
from adapters.records import PendingRound, SessionRecord
from adapters.relay import Ack
from gateway.errors import SessionError
from gateway.session.rounds import Refused
from gateway.session.runtime import Gateway, log
from gateway.session.store import Hold, Owners, StoreUnavailable, WaitingFull
from gateway.session.streams import Mirror, OutStream

_ON_SAVE = X.HoldAt.SAVE  # a module name: a lookup through an Enum class is slow on Python 3.11


class LeaseLost(SessionError):
    """A fenced save found the round's lease lapsed or taken (this replica stalled past it,
    docs/design/takeover.md#a-bridged-step-is-one-fenced-store-write): the round is another replica's, and this
    exchange stops as a lost handover does."""


class Tell:
    """The acknowledgement a relayed answer asked for (``adapters.relay.Ack``, held), sent by the store write that
    saves the answer's step, in that write's round trip (docs/design/replicas.md#replicas-relay-through-the-store);
    ``sent`` once written. One left unsent (a step that wrote nothing) the relay sends itself once the step is
    done."""

    __slots__ = ("ack", "sent")

    def __init__(self, ack: Ack) -> None:
        self.ack, self.sent = ack, False


class StoreKeeping:
    __slots__ = ("gateway", "keeper", "limits", "record", "telling")

    def __init__(self, gateway: Gateway, record: PendingRound, limits: B.BridgeLimits, keeper: X.Keeper) -> None:
        self.gateway, self.record, self.limits, self.keeper = gateway, record, limits, keeper
        self.telling: Tell | None = None  # the relayed answer whose step is being taken, for its step's write to tell

    def _tell(self) -> Ack | None:
        telling = self.telling
        return telling.ack if telling is not None and not telling.sent else None

    def _told(self, tell: Ack | None) -> None:
        if tell is not None and self.telling is not None:
            self.telling.sent = True

    async def take_over(self) -> None:
        """The round, saved by another replica, continues here: the ids the client is still to answer, and the
        request, now route here (docs/design/replicas.md#replicas-relay-through-the-store), claimed on their own
        (its first step here may save nothing)."""
        rec = self.record
        owners = self.keeper.take_over(rec.outstanding)
        if owners is not None:
            await self.gateway.store.claim_owner(owners.claim, owners.replica, owners.ttl_seconds, rec.bridge_id)
            self.keeper.written(owners)

    async def hold(self, at: X.HoldAt, session: SessionRecord | None) -> Hold | None:
        """The round waits from this step on: counted in the store first, where every replica's waiting rounds
        are, and refused past a bound before anything of the step is seen (nothing was sent to the client); or
        counted by the step's save (the :class:`Hold` returned; a refused one writes nothing). ``session``: the
        record the request was accepted with, if the exchange has it."""
        rec, store = self.record, self.gateway.store
        if session is None:
            session = await store.get_session(rec.session_id)
        principal = session.principal if session is not None else ""
        size = len(dumps(rec.to_dict()))
        if at is _ON_SAVE:
            return Hold(principal, size, waiting_ceilings(self.limits))
        load = await store.hold_round(rec.bridge_id, rec.session_id, principal, size)
        self.keeper.held()
        refused = admit_waiting(WaitingLoad(*load), self.limits)
        if refused is not None:
            raise Refused(refused)
        return None

    async def save(self, owner: Any, stream: OutStream, sends: int, mirror: Mirror | None, hold: Hold | None,
                   *, done: bool) -> None:
        """A step's save, its last event numbered as it will be once its ``sends`` messages are pushed;
        ``mirror``: the stream's copy, held for it to carry; ``hold``: the round starts waiting with it.
        :class:`Refused` when the hold did not fit (nothing was written), :class:`LeaseLost` when fenced out."""
        rec, gateway = self.record, self.gateway
        save = self.keeper.save(waiting=rec.waiting, done=done)
        assert save is not None, "a step is saved only where the keeper planned a save"
        if save.lease is not None:  # renewed while this replica lives (gateway.session.takeover)
            gateway.leases[rec.bridge_id] = owner
        rec.stream, rec.stream_seq = stream.name, stream.buffer.next_seq - 1 + sends
        owned = save.owners
        owners = None if owned is None else Owners(owned.replica, owned.ttl_seconds, owned.claim, owned.release)
        copy, written, tell = mirror.held_events() if mirror is not None else None, False, self._tell()
        try:
            written = await gateway.store.put_round(rec, save.lease, owners, holder=save.holder, copy=copy, hold=hold,
                                                    tell=tell)
        except WaitingFull as full:
            raise self._refused(owner, full.load) from None
        finally:
            if mirror is not None:
                mirror.released(copy, written)
        if not written:
            raise LeaseLost
        self._told(tell)
        self.keeper.written(owned)

    def _refused(self, owner: Any, load: WaitingLoad) -> Refused:
        """A first save whose hold the store refused (``adapters.admission.waiting_ceilings``) wrote nothing: no
        round, lease or claim (the pushes it held are forgotten). Its limit error, named by admit_waiting."""
        self.keeper.refused()
        leases = self.gateway.leases
        if leases.get(self.record.bridge_id) is owner:
            del leases[self.record.bridge_id]
        refused = admit_waiting(load, self.limits)
        assert refused is not None, "a store refuses only what admit_waiting refuses"
        return Refused(refused)

    async def end(self, owner: Any, mirror: Mirror | None = None) -> None:
        """The exchange ended (or handed its round over): in one store step its ownership records go, and its
        round's record (kept for the next holder when handed over) and lease, with the stream's last events when
        ``mirror`` is held for them. A failure only leaves the records to their TTL (a relayed answer then finds
        nothing awaiting it and is ignored, as a late one is; the round's keys expire with the session's idle
        time); the answer still goes out, from this replica only."""
        gateway, bridge_id = self.gateway, self.record.bridge_id
        copy = mirror.held_events() if mirror is not None else None
        end = self.keeper.end_round(copy is not None)
        if end is not None and gateway.leases.get(bridge_id) is owner:
            del gateway.leases[bridge_id]
        written, tell = False, self._tell()
        try:
            if end is not None and end.write:
                await gateway.store.end_round(bridge_id, gateway.replica, release=end.release, delete=end.delete,
                                              copy=copy, tell=tell)
                self._told(tell)
            written = True
        except StoreUnavailable as exc:
            log.warning("request %r: its round's records stay until they expire: %s", self.record.downstream_id, exc)
        finally:
            if mirror is not None:
                mirror.released(copy, written, forget=False)
