"""The pure rules of taking over a dead replica's bridged rounds
(docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds): which stored round a client's message is for,
who continues it, and what continuing it may send upstream a second time.

A replica that saves a round (``adapters.records.PendingRound``) holds a *lease* on it: an ownership record with a
short TTL that it renews while it lives. When a client's answer, cancel or stream resumption reaches a replica that
does not run the round, :func:`decide` says what to do from the lease as the store reports it: pass the message
to the live holder, wait for a dead holder's lease to lapse, or claim the round (atomically in the store, so one
replica wins) and continue it from its record (``adapters.bridge.BridgeMachine.resume``). A round no client
message reaches is found by a replica's periodic sweep, and :func:`swept` says whether to continue it.

The order of those steps is two ``handle(event) -> actions`` machines the shell (``gateway.session.takeover``)
performs, owning the store calls, the relay, the timers and the local claim futures:

- :class:`Takeover`: a client's message for a round that does not run here (or the sweep's orphan) is taken to
  its round: ``LookUpRound``, ``ReadLease``, ``AskListens``, then one end: ``PassOn`` (the live holder),
  ``Deliver`` (the round runs here), ``Refuse`` (this replica is stopping), ``Settle`` (nothing needs it); or
  ``WaitLapse`` for a dead holder's lease and look again, or ``Claim`` the lease (``JoinClaim`` when a claim of
  this replica's is under way), ``LoadRound`` once won, then ``RunHere`` or ``EndRound``, and ``Release``.
- :class:`Keeping`: a relayed answer or cancel kept until its round's owner acted on it: ``AwaitAck``,
  ``DeliverByRound`` (the :class:`Takeover` above), ``RelayAgain`` to a holder that still lives, and the ends
  ``Kept`` and ``NotKept``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeAlias, assert_never

from adapters.errors import INTERNAL_ERROR, ErrorValue
from adapters.records import PendingRound, Phase
from adapters.relay import RelayTo

__all__ = ["LAPSE_MARGIN_SECONDS", "MAX_LOOKUPS", "SWEEP_BATCH", "AckWord", "AskListens", "AwaitAck", "Claim",
           "ClaimJoined", "Claimed", "Deliver", "DeliverByRound", "Delivered", "EndRound", "HeldHere",
           "HolderListens", "JoinClaim", "KeepStep", "Keeping", "Kept", "Lease", "LeaseRead", "LoadRound", "Loaded",
           "LookUpRound", "NoRound", "NotKept", "PassOn", "Refuse", "RelayAgain", "RelayedAgain", "Release",
           "Repeat", "RoundFound", "RunHere", "Settle", "Stage", "Sweep", "TakeOver", "Takeover", "TakeoverContext",
           "WaitFor", "WaitLapse", "Waited", "decide", "keep_attempts", "outcome_unknown", "renew_interval",
           "repeats", "resent", "round_for_answer", "round_for_request", "round_for_stream", "sweep_interval",
           "swept", "token_goes_upstream"]

# A wait for a lease to lapse ends this much after the store's remaining time, so the claim does not race the
# expiry itself (Redis expires a key within a millisecond of its deadline).
LAPSE_MARGIN_SECONDS = 0.05


@dataclass(frozen=True, slots=True)
class Lease:
    """A stored round's lease as the store reports it: its holder (None once it lapsed or was released) and how
    long it has left."""

    holder: str | None
    remaining_ms: int = 0


@dataclass(frozen=True, slots=True)
class TakeOver:
    """Nobody holds the round: claim it, and continue it here once the claim is won."""


@dataclass(frozen=True, slots=True)
class HeldHere:
    """This replica holds the lease: the round runs here (or is being taken over here right now)."""


@dataclass(frozen=True, slots=True)
class WaitFor:
    """The holder does not listen (it died, or lost the store) but its lease has not lapsed: ask again then."""

    seconds: float


@dataclass(frozen=True, slots=True)
class NoRound:
    """No stored round is waiting for this message: answered, ended, or never asked (a late message, dropped
    as one gateway drops it: 2025-11-25 basic/utilities §Cancellation)."""


Decision = TakeOver | HeldHere | WaitFor | NoRound | RelayTo


def decide(lease: Lease | None, me: str, holder_listens: bool) -> Decision:
    """What a replica does with a client's message for a round it does not run: ``lease`` is None when no stored
    round is waiting for the message; ``holder_listens`` whether the holder is subscribed to its relay channel."""
    if lease is None:
        return NoRound()
    if lease.holder is None:
        return TakeOver()
    if lease.holder == me:
        return HeldHere()
    if holder_listens:
        return RelayTo(lease.holder)
    return WaitFor(max(0, lease.remaining_ms) / 1000 + LAPSE_MARGIN_SECONDS)


class Sweep(StrEnum):
    """What a replica's sweep does with a stored round whose lease ran out and nobody took (its replica died, or
    handed it over at shutdown), when no client message brought it here."""

    CONTINUE = "continue"  # take it over and continue it from its record, as a client's message would have
    LEAVE = "leave"  # its request came with a credential, which is never stored: left to its client's next message
    END = "end"  # its session is gone or idle past the limit: nobody is left to answer, so it is ended


SWEEP_BATCH = 50  # orphaned rounds taken over by one sweep; the next sweep takes the rest


def token_goes_upstream(authorization: str | None, forwards_token: bool) -> bool | None:
    """What a round's record keeps of its request's credential (``PendingRound.authorized``): True when its
    upstream calls carry the client's own token, the request having come with one to an upstream that is passed
    the client's token (``auth = "forward"``); else None. The token is never stored, so only such a round needs its
    client's next message to go on (:func:`swept`). An upstream sent the gateway's own credential, or none, gets
    the same retry from whichever replica continues the round."""
    return True if authorization and forwards_token else None


def swept(record: PendingRound, session_live: bool) -> Sweep:
    """The sweep's rule (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds). A round in flight
    upstream when its replica died is sent again by whoever continues it (:func:`repeats`), so continuing it without
    waiting for its client completes what the client confirmed; a round waiting for its client is continued the same
    way, so its timers run again and end it if the client never answers. A round whose upstream calls carry its
    client's token (:func:`token_goes_upstream`) waits for its client instead: the retry would go upstream without
    it."""
    if not session_live or record.phase is Phase.DONE:
        return Sweep.END
    if record.authorized:
        return Sweep.LEAVE
    return Sweep.CONTINUE


def sweep_interval(lease_seconds: float) -> float:
    """How often a replica looks for orphaned rounds: once per lease time, so a dead replica's round waits at
    most about two lease times for a survivor."""
    return lease_seconds


def renew_interval(lease_seconds: float) -> float:
    """How often a replica renews its leases: three chances before one lapses, so one slow store call or a
    loop stall shorter than two intervals does not hand a live round over."""
    return lease_seconds / 3


class Repeat(StrEnum):
    """What continuing a round from its record may send upstream that the upstream already saw."""

    NOTHING = "nothing"  # the client was being asked: the next upstream call carries answers not yet sent
    WAITING_RETRY = "waiting_retry"  # a waiting round's retry (requestState only): re-sending it is what a backoff does
    ROUND = "round"  # the round in flight: its inputResponses and requestState may already have been acted on


def repeats(record: PendingRound) -> Repeat:
    if record.phase is Phase.AWAITING_CLIENT:
        return Repeat.NOTHING
    if record.phase in (Phase.BACKOFF, Phase.TASK_WAIT, Phase.TASK_POLL, Phase.TASK_UPDATE):
        # A task's call again is a tasks/get, or a tasks/update whose keys the server already has are ignored
        # (ext-tasks §Task Update Requests): nothing the task acts on twice.
        return Repeat.WAITING_RETRY
    return Repeat.ROUND


def resent(record: PendingRound) -> bool | None:
    """What a continued round's record keeps while its resend is in flight (``PendingRound.resent``): True when
    the round goes upstream again after the upstream may already have acted on it (:data:`Repeat.ROUND`)."""
    return True if repeats(record) is Repeat.ROUND else None


def outcome_unknown(error: ErrorValue) -> ErrorValue:
    """The error a client gets when the upstream answers a resent round (:func:`resent`) with an error. That error
    may be the upstream refusing a step it already carried out on the first send (a used confirmation), or a
    real failure: the gateway cannot tell which, so it says the outcome is unknown rather than failed, and hands
    the upstream's error on in ``data.upstreamError`` (2026-07-28 basic/patterns §Multi Round-Trip Requests leaves
    a repeated round to the server; docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds)."""
    return ErrorValue(INTERNAL_ERROR, "the outcome of the resent round is unknown: another replica took the request "
                      "over and sent its last round again, which the upstream may already have acted on, and the "
                      f"upstream answered it with an error ({error.code} {error.message})",
                      {"outcome": "unknown", "upstreamError": error.to_wire()},
                      log=f"a resent round was answered with an error: {error.code} {error.message}")


def round_for_answer(rounds: Iterable[PendingRound], gateway_id: object) -> PendingRound | None:
    """The stored round still waiting for the client's answer under ``gateway_id``."""
    return next((r for r in rounds if r.phase is Phase.AWAITING_CLIENT and isinstance(gateway_id, str)
                 and gateway_id in r.outstanding), None)


def round_for_request(rounds: Iterable[PendingRound], request_id: str | int) -> PendingRound | None:
    """The stored round bridging the client's request ``request_id`` (``1`` and ``"1"`` are different ids)."""
    return next((r for r in rounds if r.phase is not Phase.DONE and type(r.downstream_id) is type(request_id)
                 and r.downstream_id == request_id), None)


def round_for_stream(rounds: Iterable[PendingRound], stream: str) -> PendingRound | None:
    """The stored round writing on the SSE stream named ``stream`` (a ``Last-Event-ID`` names it)."""
    return next((r for r in rounds if r.phase is not Phase.DONE and r.stream == stream), None)


# --- a client's message taken to its round (Takeover) ---------------------------------------------------------------
# Lookups of a message's round: a dead holder's lease lapse waited for, or a claim lost, is followed by another;
# a holder that keeps renewing its lease without listening is alive, and the message is left.
MAX_LOOKUPS = 5


class Stage(StrEnum):
    START = "start"
    LOOK = "look"  # the stored round the message is for is looked up
    LEASE = "lease"  # its lease is read
    LISTENS = "listens"  # whether its holder (another replica) listens on the relay is asked
    JOIN_HELD = "join_held"  # this replica holds the lease, and its claim (for another message) is completing
    JOIN = "join"  # nobody holds the lease, and a claim of this replica's is under way: its end is awaited
    CLAIM = "claim"  # the lease is being claimed in the store
    LOAD = "load"  # the claim is won: the holder's last save is read
    WAIT = "wait"  # waiting for a dead holder's lease to lapse
    DONE = "done"


@dataclass(frozen=True, slots=True)
class TakeoverContext:
    me: str  # this replica
    end: bool = False  # a cancel: a round claimed here is ended, never continued (nothing goes upstream again)
    after: int = 0  # a stream resumption's Last-Event-ID sequence: the continued stream goes on after it
    lookups: int = MAX_LOOKUPS  # the sweep's: none (it claims the orphan it found, once)


# Events
@dataclass(frozen=True, slots=True)
class RoundFound:
    record: PendingRound | None  # None: no stored round is waiting for the message


@dataclass(frozen=True, slots=True)
class LeaseRead:
    """The round's lease, with what the shell knows of itself right then: a claim of its own for the round is
    under way (for another message), and it is stopping."""

    lease: Lease
    claiming_here: bool = False
    closing: bool = False


@dataclass(frozen=True, slots=True)
class HolderListens:
    listens: bool


@dataclass(frozen=True, slots=True)
class ClaimJoined:
    runs_here: bool  # the claim under way ended with the round running here


@dataclass(frozen=True, slots=True)
class Claimed:
    won: bool


@dataclass(frozen=True, slots=True)
class Loaded:
    record: PendingRound | None  # the holder's last save (None: gone)


@dataclass(frozen=True, slots=True)
class Waited:
    pass


TakeoverEvent: TypeAlias = RoundFound | LeaseRead | HolderListens | ClaimJoined | Claimed | Loaded | Waited


# Actions
@dataclass(frozen=True, slots=True)
class LookUpRound:
    pass


@dataclass(frozen=True, slots=True)
class ReadLease:
    bridge_id: str


@dataclass(frozen=True, slots=True)
class AskListens:
    holder: str


@dataclass(frozen=True, slots=True)
class JoinClaim:
    bridge_id: str


@dataclass(frozen=True, slots=True)
class Claim:
    """Claim the lease in the store (atomically: one replica wins), registering the claim here until
    :class:`Release`, so other messages for the round join it."""

    bridge_id: str


@dataclass(frozen=True, slots=True)
class LoadRound:
    bridge_id: str


@dataclass(frozen=True, slots=True)
class EndRound:
    """End the claimed round without continuing it (``record``: the round as the message found it)."""

    record: PendingRound


@dataclass(frozen=True, slots=True)
class RunHere:
    """Continue ``record`` (the holder's last save) here, its stream going on after ``after``."""

    record: PendingRound
    after: int


@dataclass(frozen=True, slots=True)
class Release:
    bridge_id: str


@dataclass(frozen=True, slots=True)
class WaitLapse:
    seconds: float


@dataclass(frozen=True, slots=True)
class PassOn:
    """The end: relay the message to the round's live holder."""

    holder: str


@dataclass(frozen=True, slots=True)
class Deliver:
    """The end: the round runs here; act on the message (``record``: the round as the message found it)."""

    record: PendingRound


@dataclass(frozen=True, slots=True)
class Refuse:
    """The end: the round is nobody's, but this replica is stopping; the rounds it handed over are the others' to
    take (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds): the client sends it again."""

    bridge_id: str


@dataclass(frozen=True, slots=True)
class Settle:
    """The end: nothing is left to deliver the message to (no round waits for it, or the lookups ran out)."""


TakeoverAction: TypeAlias = (LookUpRound | ReadLease | AskListens | JoinClaim | Claim | LoadRound | EndRound | RunHere
                             | Release | WaitLapse | PassOn | Deliver | Refuse | Settle)


class Takeover:
    """One client message (or one orphan of the sweep) taken to its stored round. Events that do not fit the
    current stage are ignored."""

    def __init__(self, ctx: TakeoverContext) -> None:
        self.ctx = ctx
        self.stage = Stage.START
        self.record: PendingRound | None = None  # the round as the message found it
        self.lease: Lease | None = None
        self.looked = 0

    @property
    def done(self) -> bool:
        return self.stage is Stage.DONE

    def start(self) -> list[TakeoverAction]:
        """A client's message: look its round up."""
        return self._look() if self.stage is Stage.START else []

    def claim(self, record: PendingRound, claiming_here: bool) -> list[TakeoverAction]:
        """The sweep's orphan (its lease ran out with nobody holding it): claim it, or join the claim under way."""
        if self.stage is not Stage.START:
            return []
        self.record = record
        return self._claim(record, claiming_here)

    def handle(self, event: TakeoverEvent) -> list[TakeoverAction]:
        match event:
            case RoundFound(record):
                return self._found(record) if self.stage is Stage.LOOK else []
            case LeaseRead():
                return self._lease(event) if self.stage is Stage.LEASE else []
            case HolderListens(listens):
                return self._decided(listens, False) if self.stage is Stage.LISTENS else []
            case ClaimJoined(runs_here):
                return self._joined(runs_here) if self.stage in (Stage.JOIN, Stage.JOIN_HELD) else []
            case Claimed(won):
                return self._claimed(won) if self.stage is Stage.CLAIM else []
            case Loaded(record):
                return self._loaded(record) if self.stage is Stage.LOAD else []
            case Waited():
                return self._again() if self.stage is Stage.WAIT else []
            case _:
                assert_never(event)

    def _end(self, action: TakeoverAction) -> list[TakeoverAction]:
        self.stage = Stage.DONE
        return [action]

    def _look(self) -> list[TakeoverAction]:
        self.looked += 1
        self.stage, self.record, self.lease = Stage.LOOK, None, None
        return [LookUpRound()]

    def _again(self) -> list[TakeoverAction]:
        return self._look() if self.looked < self.ctx.lookups else self._end(Settle())

    def _found(self, record: PendingRound | None) -> list[TakeoverAction]:
        if record is None:
            return self._end(Settle())  # decide(None, ...): NoRound
        self.record, self.stage = record, Stage.LEASE
        return [ReadLease(record.bridge_id)]

    def _lease(self, event: LeaseRead) -> list[TakeoverAction]:
        self.lease = event.lease
        holder = event.lease.holder
        if holder is not None and holder != self.ctx.me:
            self.stage = Stage.LISTENS
            return [AskListens(holder)]
        return self._decided(False, event.claiming_here, event.closing)

    def _decided(self, listens: bool, claiming_here: bool, closing: bool = False) -> list[TakeoverAction]:
        record = self.record
        assert record is not None
        decision = decide(self.lease, self.ctx.me, listens)
        match decision:
            case NoRound():
                return self._end(Settle())
            case RelayTo(owner):
                return self._end(PassOn(owner))
            case HeldHere():
                if claiming_here:  # being taken over here for another message: deliver once it runs
                    self.stage = Stage.JOIN_HELD
                    return [JoinClaim(record.bridge_id)]
                return self._end(Deliver(record))
            case WaitFor(seconds):
                self.stage = Stage.WAIT
                return [WaitLapse(seconds)]
            case TakeOver():
                if closing:
                    return self._end(Refuse(record.bridge_id))
                return self._claim(record, claiming_here)
            case _:
                assert_never(decision)

    def _claim(self, record: PendingRound, claiming_here: bool) -> list[TakeoverAction]:
        if claiming_here:
            self.stage = Stage.JOIN
            return [JoinClaim(record.bridge_id)]
        self.stage = Stage.CLAIM
        return [Claim(record.bridge_id)]

    def _joined(self, runs_here: bool) -> list[TakeoverAction]:
        assert self.record is not None
        if self.stage is Stage.JOIN_HELD or runs_here:
            return self._end(Deliver(self.record))
        return self._again()

    def _claimed(self, won: bool) -> list[TakeoverAction]:
        assert self.record is not None
        if not won:  # another replica won it: look again (it now holds the lease, and listens)
            return [Release(self.record.bridge_id), *self._again()]
        self.stage = Stage.LOAD
        return [LoadRound(self.record.bridge_id)]

    def _loaded(self, fresh: PendingRound | None) -> list[TakeoverAction]:
        record = self.record
        assert record is not None
        if fresh is None or fresh.phase is Phase.DONE or self.ctx.end:
            return [EndRound(record), Release(record.bridge_id), *self._again()]
        return [RunHere(fresh, self.ctx.after), Release(record.bridge_id), *self._end(Deliver(record))]


# --- a relayed message kept until its round acted on it (Keeping) ---------------------------------------------------
def keep_attempts(lease_seconds: float, timeout_seconds: float) -> int:
    """How often a relayed message is waited for and delivered again: the waits (the store's timeout each: the
    owner's step is one save) outlast a lease, so a holder frozen past its lease loses the round to a takeover
    before the message is given up on."""
    return math.ceil(lease_seconds / timeout_seconds) + 2


class KeepStep(StrEnum):
    ACK = "ack"  # waiting for the owner's word
    DELIVER = "deliver"  # being delivered by its stored round
    RELAY = "relay"  # being relayed again to the round's live holder
    DONE = "done"


@dataclass(frozen=True, slots=True)
class AckWord:
    held: bool | None  # the owner's word: acted on (True), not held (False); None: none came in time


@dataclass(frozen=True, slots=True)
class Delivered:
    holder: str | None  # None: delivered here, or nothing needs it any more; else the round's live holder


@dataclass(frozen=True, slots=True)
class RelayedAgain:
    acked: bool  # a replica took it, and its word is awaited


KeepEvent: TypeAlias = AckWord | Delivered | RelayedAgain


@dataclass(frozen=True, slots=True)
class AwaitAck:
    pass


@dataclass(frozen=True, slots=True)
class DeliverByRound:
    pass


@dataclass(frozen=True, slots=True)
class RelayAgain:
    holder: str


@dataclass(frozen=True, slots=True)
class Kept:
    """The end: acted on (or nothing needs it)."""


@dataclass(frozen=True, slots=True)
class NotKept:
    """The end: ``holder`` holds the round but never acted on the message: the client is told, not
    acknowledged."""

    holder: str


KeepAction: TypeAlias = AwaitAck | DeliverByRound | RelayAgain | Kept | NotKept


class Keeping:
    """A relayed answer or cancel, kept until its round's owner acted on it
    (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds): the owner's word is awaited; without
    it, the message is delivered by its stored round, which then needs it or not (an owner that acted on it and
    died before saying so has moved the round past it: nothing is delivered twice). While the round's holder still
    counts as alive (it listens, and holds the lease) the message is relayed to it again, asking again for its
    word: a holder frozen past its lease loses the round, and the message goes where it is taken over."""

    def __init__(self, attempts: int) -> None:
        self.attempts, self.tried = attempts, 0
        self.step = KeepStep.ACK
        self.holder: str | None = None

    def start(self, acked: bool) -> list[KeepAction]:
        """``acked``: the first relay reached a replica whose word is awaited."""
        return self._try(acked)

    def handle(self, event: KeepEvent) -> list[KeepAction]:
        match event:
            case AckWord(held):
                if self.step is not KeepStep.ACK:
                    return []
                return self._end(Kept()) if held else self._deliver()
            case Delivered(holder):
                if self.step is not KeepStep.DELIVER:
                    return []
                if holder is None:
                    return self._end(Kept())
                self.step, self.holder = KeepStep.RELAY, holder
                return [RelayAgain(holder)]
            case RelayedAgain(acked):
                return self._try(acked) if self.step is KeepStep.RELAY else []
            case _:
                assert_never(event)

    def _end(self, action: KeepAction) -> list[KeepAction]:
        self.step = KeepStep.DONE
        return [action]

    def _try(self, acked: bool) -> list[KeepAction]:
        if self.tried >= self.attempts:
            assert self.holder is not None  # only a holder that took it again leaves it unkept
            return self._end(NotKept(self.holder))
        self.tried += 1
        if acked:
            self.step = KeepStep.ACK
            return [AwaitAck()]
        return self._deliver()

    def _deliver(self) -> list[KeepAction]:
        self.step = KeepStep.DELIVER
        return [DeliverByRound()]
