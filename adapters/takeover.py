"""The pure rules of taking over a dead replica's bridged rounds
(docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds): which stored round a client's message is for,
who continues it, and what continuing it may send upstream a second time.

A replica that saves a round (``adapters.records.PendingRound``) holds a *lease* on it: an ownership record with a
short TTL that it renews while it lives. When a client's answer, cancel or stream resumption reaches a replica that
does not run the round, :func:`decide` says what to do from the lease as the store reports it: pass the message
to the live holder, wait for a dead holder's lease to lapse, or claim the round (atomically in the store, so one
replica wins) and continue it from its record (``adapters.bridge.BridgeMachine.resume``). A round no client
message reaches is found by a replica's periodic sweep, and :func:`swept` says whether to continue it. The shell
(``gateway.session.takeover``) does the I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from adapters.errors import INTERNAL_ERROR, ErrorValue
from adapters.records import PendingRound, Phase
from adapters.relay import RelayTo

__all__ = ["LAPSE_MARGIN_SECONDS", "SWEEP_BATCH", "HeldHere", "Lease", "NoRound", "Repeat", "Sweep", "TakeOver",
           "WaitFor", "decide", "outcome_unknown", "renew_interval", "repeats", "resent", "round_for_answer",
           "round_for_request", "round_for_stream", "sweep_interval", "swept", "token_goes_upstream"]

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
