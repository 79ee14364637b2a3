"""What a bridged request keeps in the store, decided without I/O: when its round is counted as waiting, when and how it
is saved, what rides on a save (the lease, the ownership claims and releases, the hold, the stream's copy), whether a
save is fenced, how its records end, and when it hands its round over
(docs/design/replicas.md#replicas-relay-through-the-store,
docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds,
docs/design/takeover.md#sigterm-hands-the-rounds-over,
docs/design/takeover.md#a-bridged-step-is-one-fenced-store-write). The bridge machine (``adapters.bridge``) decides the
protocol; this :class:`Keeper` decides the keeping, over a small state record of its own, and returns what to write; the
shell (``gateway.session.exchange``) performs it and tells the keeper what was written.

A round's keeping only moves forward: ``Kept`` NOTHING -> HELD (counted as a waiting round) -> SAVED (another
replica can continue it); ``Stage`` RUNNING -> HANDING_OVER (asked to let the round go) and, once the exchange's
task is over, STOPPED or HANDED_OVER; ``Records`` LIVE -> ENDED (its store records gone, or left to the next
holder).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import NamedTuple

from adapters import bridge as B
from adapters.records import SessionRecord
from adapters.relay import answer_key

__all__ = [
    "CARRIED",
    "EndRound",
    "Ending",
    "Given",
    "HoldAt",
    "Keeper",
    "Kept",
    "Ownership",
    "Records",
    "Refresh",
    "SaveAt",
    "SaveRound",
    "Stage",
    "StepPlan",
    "Store",
    "Take",
    "not_taken",
    "retry_refused",
    "take",
]

# The actions of a step whose events its save can carry (nothing else may start before that save).
CARRIED = (B.SendToClient, B.ArmTimer)


class Kept(Enum):
    NOTHING = auto()  # neither counted nor saved
    HELD = auto()  # counted in the store as a waiting round (adapters.admission.admit_waiting), not saved
    SAVED = auto()  # saved (and counted): another replica can continue it, so a shutdown hands it over


class Stage(Enum):
    RUNNING = auto()
    HANDING_OVER = auto()  # to stop without answering, leaving the saved round to another replica
    STOPPED = auto()  # the exchange's task is over: nothing queued from then on is ever acted on
    HANDED_OVER = auto()  # over, and the round goes on elsewhere


class Records(Enum):
    LIVE = auto()
    ENDED = auto()  # EndRound was given: the round's records are gone (or left to expire, or to the next holder)


class Ending(Enum):
    """A step of the exchange's end, once its task is over."""

    END_ROUND = auto()  # the round's records end (Keeper.end_round)
    LEAVE_COPY_OPEN = auto()  # the stream's copy in the store goes on where the round continues
    CLOSE_STREAM = auto()  # the request's stream ends (without an answer, if none was sent)
    FORGET = auto()  # the exchange leaves the session's table, and its watcher is told


class Refresh(Enum):
    """The ``tools/list`` refresh a HEADER_MISMATCH asks for, at most once per exchange (2026-07-28 server/tools
    §x-mcp-header)."""

    UNUSED = auto()
    USED = auto()


class HoldAt(Enum):
    """Where a round that starts waiting with this step is counted (adapters.admission.admit_waiting)."""

    NONE = auto()  # not starting to wait, or counted already
    STORE = auto()  # counted in the store on its own, before anything of the step is done
    SAVE = auto()  # counted by the step's save, which is refused whole past a bound


class SaveAt(Enum):
    """Where a step's save goes among its actions: a step that asks the client is saved before the client can
    see it (a replica taking over must find it)."""

    NONE = auto()
    BEFORE = auto()  # before the step's sends are pushed
    WITH_COPY = auto()  # after they are pushed into the stream's held copy, which the save carries
    AFTER = auto()  # after the step's actions (the upstream round left first), before it is acknowledged


class Given(Enum):
    """What a client gives a running exchange."""

    ANSWER = auto()  # its answer to one of the round's requests
    CANCEL = auto()  # notifications/cancelled for the request


class Take(Enum):
    """What an exchange does with a client's answer or cancel (:func:`take`)."""

    STEP = auto()  # step the machine in the caller's task: the exchange's task waits idle
    INTERRUPT = auto()  # the first round runs in the handler: its wait is interrupted (the 2026 cancel)
    QUEUE = auto()  # queued for the exchange's task; its waiter is told whether it was acted on
    REFUSE = auto()  # not acted on, the round handed over: it goes on elsewhere, for the client to send it again
    IGNORE = auto()  # not acted on, the exchange over otherwise: a late message


# The members the per-step code compares with, as module names: on Python 3.11 every ``Kind.MEMBER`` lookup
# goes through ``EnumType.__getattr__``'s slot hook, a cost each bridged step would pay several times over.
_NOTHING, _HELD, _SAVED = Kept.NOTHING, Kept.HELD, Kept.SAVED
_RUNNING, _HANDING_OVER, _STOPPED, _HANDED_OVER = Stage.RUNNING, Stage.HANDING_OVER, Stage.STOPPED, Stage.HANDED_OVER
_LIVE, _ENDED = Records.LIVE, Records.ENDED
_UNUSED, _USED = Refresh.UNUSED, Refresh.USED
_HOLD_NONE, _HOLD_STORE, _HOLD_SAVE = HoldAt.NONE, HoldAt.STORE, HoldAt.SAVE
_SAVE_NONE, _BEFORE, _WITH_COPY, _AFTER = SaveAt.NONE, SaveAt.BEFORE, SaveAt.WITH_COPY, SaveAt.AFTER
_POLL, _BACKOFF = B.Timer.POLL, B.Timer.BACKOFF
# Handed over: the round is let go before the stream ends, so the client's reconnection finds no holder here.
# Answered: the stream ends first, the records after it, off the answer's path.
_LET_GO = (Ending.END_ROUND, Ending.LEAVE_COPY_OPEN, Ending.CLOSE_STREAM, Ending.FORGET)
_ANSWERED = (Ending.CLOSE_STREAM, Ending.FORGET, Ending.END_ROUND)


class Store(NamedTuple):
    """What the keeping needs to know of where it keeps: ``shares_rounds``: other processes read saved rounds;
    ``relayed``: replicas share it (leases, fencing, ownership records); ``claim_seconds``: how long a claim
    lasts (the client's answer timeout)."""

    shares_rounds: bool
    relayed: bool
    replica: str
    lease_seconds: float
    claim_seconds: float


class Ownership(NamedTuple):  # a tuple: cheap to make, on every save
    """Ownership records a write claims (``replica``'s, for ``ttl_seconds``) and releases."""

    replica: str
    ttl_seconds: float
    claim: frozenset[str]
    release: frozenset[str]


class StepPlan(NamedTuple):
    hold: HoldAt
    save: SaveAt

    def uncarried(self) -> StepPlan:
        """The stream's copy could not be held for the save: it goes before the sends instead."""
        return StepPlan(self.hold, _BEFORE) if self.save is _WITH_COPY else self


_UNKEPT = StepPlan(_HOLD_NONE, _SAVE_NONE)
_COUNTED = StepPlan(_HOLD_STORE, _SAVE_NONE)


class SaveRound(NamedTuple):  # a tuple: cheap to make, on every save
    """Write the round: ``lease`` (replica, seconds) taken by its first save; later saves are fenced on
    ``holder``: a replica that stalled past its lease must not overwrite the new holder's record."""

    lease: tuple[str, float] | None
    holder: str | None
    owners: Ownership | None


class EndRound(NamedTuple):  # a tuple: cheap to make, once per round
    """End the round's records in one store step: ``release`` its ownership records, ``delete`` its record and
    count (False: handed over, the record stays for the next holder); ``write``: anything to write at all."""

    release: frozenset[str]
    delete: bool
    write: bool


@dataclass(slots=True)
class Keeper:
    """One exchange's keeping; ``request``: the ownership key of its request (adapters.relay.request_key)."""

    store: Store
    request: str
    kept: Kept = _NOTHING
    stage: Stage = _RUNNING
    records: Records = _LIVE
    refresh: Refresh = _UNUSED
    owned: set[str] = field(default_factory=set)  # ownership keys claimed in the store
    claims: set[str] = field(default_factory=set)  # not written yet: they ride on the step's save
    releases: set[str] = field(default_factory=set)  # a subset of ``owned`` until written

    @property
    def saved(self) -> bool:
        return self.kept is _SAVED

    @property
    def handed_over(self) -> bool:
        return self.stage is _HANDING_OVER or self.stage is _HANDED_OVER

    @property
    def stopped(self) -> bool:
        return self.stage is _STOPPED or self.stage is _HANDED_OVER

    def saves(self, waiting: bool, done: bool) -> bool:
        """Whether a step saves the record, on a store other processes read (on one process nobody could continue
        a round): once the round waits (what another process needs to continue it), and on a relayed store after
        every step from then on, so a replica taking over continues from the last one."""
        if not self.store.shares_rounds or done:
            return False
        return waiting or (self.kept is _SAVED and self.store.relayed)

    # --- a step ---------------------------------------------------------------------------------------------
    def plan(self, actions: Sequence[B.Action], *, waiting: bool, done: bool, mirrored: bool) -> StepPlan:
        """Where the step is counted and saved; its claims are noted to ride on that save. ``mirrored``: the
        stream has a copy other replicas read. A round's count rides on its save when nothing of the step is
        done before it that a refusal cannot take back: the save comes before the step's actions, or these only
        push (the held copy then forgets them) and arm timers."""
        if not self.store.shares_rounds:  # nothing is saved, nor claimed: a waiting round is only counted
            return _COUNTED if self.kept is _NOTHING and waiting and not done else _UNKEPT
        saves = self.saves(waiting, done)
        sends, carried = False, True
        for action in actions:
            sends = sends or isinstance(action, B.SendToClient)
            carried = carried and isinstance(action, CARRIED)
        hold = _HOLD_NONE
        if self.kept is _NOTHING and waiting and not done:
            hold = _HOLD_SAVE if saves and (sends or carried) else _HOLD_STORE
        save = _SAVE_NONE
        if saves:
            save = (_WITH_COPY if mirrored and carried else _BEFORE) if sends else _AFTER
        self._claim(actions)
        # A step that claims asks the client or backs off, so its round waits and is saved: no claim is left behind.
        assert saves or not self.claims or done
        return StepPlan(hold, save)

    def held(self) -> None:
        """The round was counted in the store on its own (``HoldAt.STORE``)."""
        self.kept = _HELD

    def answered(self, gateway_id: str) -> None:
        """A client's answer: its claim goes with the step's save, or at the end."""
        key = answer_key(gateway_id)
        if key in self.owned:
            self.releases.add(key)

    def _claim(self, actions: Sequence[B.Action]) -> None:
        """Before the client is asked: this replica owns every id it is asked under and the request, so a replica
        that gets its answer or cancel can pass it on here, for as long as the client may take to answer.
        A task's wait claims from its first poll (the task may run long before any question); a waiting round
        renews the request's claim (a cancel long after the client's last answer must still find it)."""
        if not self.store.relayed:  # one process holds every exchange: nobody asks who owns one
            return
        asks = {answer_key(a.message["id"]) for a in actions if isinstance(a, B.SendToClient) and "id" in a.message}
        keys = {key for key in asks if key is not None}
        timers = {a.name for a in actions if isinstance(a, B.ArmTimer)}
        if not keys and _POLL not in timers and not (_BACKOFF in timers and self.request in self.owned):
            return
        keys.add(self.request)
        self.claims |= keys
        self.releases -= keys

    def save(self, *, waiting: bool, done: bool) -> SaveRound | None:
        """The step's save, or None when the round is not saved. Its first save takes the lease."""
        if not self.saves(waiting, done):
            return None
        first, relayed = self.kept is not _SAVED, self.store.relayed
        self.kept = _SAVED  # saved from now on: a shutdown hands it over
        lease = (self.store.replica, self.store.lease_seconds) if first and relayed else None
        holder = self.store.replica if relayed and not first else None
        return SaveRound(lease, holder, self._ownership(releases=True))

    def refused(self) -> None:
        """A first save whose hold the store refused wrote nothing: no round, lease or claim."""
        self.kept = _NOTHING

    def written(self, owners: Ownership | None) -> None:
        if owners is not None:
            self.owned = (self.owned | owners.claim) - owners.release
            self.claims -= owners.claim
            self.releases -= owners.release

    def _ownership(self, releases: bool) -> Ownership | None:
        release = frozenset(self.releases) if releases else frozenset()
        if not (self.claims or release):
            return None
        return Ownership(self.store.replica, self.store.claim_seconds, frozenset(self.claims), release)

    # --- takeover, handover, the end ---------------------------------------------------------------------
    def take_over(self, outstanding: Iterable[str]) -> Ownership | None:
        """Continue a round another replica saved: saved and counted already, by the replica that began it; the
        ids the client is still to answer, and the request, now route here: the claims to write
        on their own (its first step may save nothing)."""
        self.kept = _SAVED
        self.claims |= {k for k in map(answer_key, outstanding) if k is not None} | {self.request}
        return self._ownership(releases=False)

    def hand_over(self, *, lost: bool = False) -> None:
        """Stop without answering (shutdown, or ``lost``: its lease was taken, and the ownership records are the
        new holder's)."""
        self.stage = _HANDED_OVER if self.stopped else _HANDING_OVER
        if lost:
            self.owned = set()

    def stop(self) -> tuple[Ending, ...]:
        """The exchange's task is over: the steps of its end, in order."""
        self.stage = _HANDED_OVER if self.handed_over else _STOPPED
        return _LET_GO if self.stage is _HANDED_OVER else _ANSWERED

    def carries_answer(self) -> bool:
        """Whether the answer's step ends the round's records, copying the answer in the same store step:
        the store then holds the round, for a replica to continue, or its answer, never both."""
        return self.kept is _SAVED and not self.handed_over and self.records is _LIVE

    def end_round(self, copying: bool) -> EndRound | None:
        """The round's records end (once): its ownership records go, its record and count unless handed over."""
        if self.records is _ENDED:
            return None
        self.records = _ENDED
        release, self.owned, self.claims, self.releases = frozenset(self.owned), set(), set(), set()
        counted = self.kept is not _NOTHING
        return EndRound(release, counted and not self.handed_over, counted or bool(release) or copying)

    # --- the upstream round ------------------------------------------------------------------------------
    def refreshes(self, mismatch: bool) -> bool:
        """A HEADER_MISMATCH on tools/call may mean the x-mcp-header map is stale or missing: refresh it from
        tools/list once, then resend the same round with a new id (2026-07-28 server/tools §x-mcp-header)."""
        if not mismatch or self.refresh is _USED:
            return False
        self.refresh = _USED
        return True


# --- a client's answer or cancel ---------------------------------------------------------------------------
def take(given: Given, stage: Stage, *, first_round: bool, idle: bool, done: bool) -> Take:
    """What to do with ``given`` now (docs/design/takeover.md#a-step-runs-in-the-task-of-its-event,
    docs/design/bridge.md#a-clients-answer-is-acted-on-before-it-is-acknowledged): an answer is stepped in its
    handler's task when the exchange's task waits ``idle`` with the machine not ``done``; a cancel interrupts a
    ``first_round`` running in the handler; anything else is queued for the exchange's task, unless that task is
    over (:func:`not_taken`)."""
    if stage is _STOPPED or stage is _HANDED_OVER:
        return not_taken(stage)
    if given is Given.CANCEL:
        return Take.INTERRUPT if first_round else Take.QUEUE
    return Take.STEP if idle and not done else Take.QUEUE


def not_taken(stage: Stage) -> Take:
    """A message the exchange did not act on: refused when its round was handed over (it goes on elsewhere,
    docs/design/takeover.md#sigterm-hands-the-rounds-over), else late and ignored (2025-11-25
    basic/utilities §Cancellation: races)."""
    return Take.REFUSE if stage is _HANDING_OVER or stage is _HANDED_OVER else Take.IGNORE


def retry_refused(session: SessionRecord | None, expired: bool) -> B.Cancelled | None:
    """A retry no client action started (a timer's) on a session that ended, or idle past the limit: its client
    is gone and can reach none of this (its next request gets 404), so polling the upstream for it would only go
    on until the total limit."""
    if session is None:
        return B.Cancelled("session ended")
    return B.Cancelled("session expired") if expired else None


# --- the first round, in the request's handler ------------------------------------------------------------
# What may follow the first round's answer there: no upstream task is left to abort, and a task to remember is
# remembered before the answer.
_SILENT = (B.Finish, B.AbortUpstream, B.RememberTask)


def begins_inline(progress_token: object, log_level: str | None, method: str) -> bool:
    """Whether the first upstream round may run in the request's handler, answered as JSON when that is all
    there is: only when the upstream has nothing to stream meanwhile (progress needs a token and request logs a
    level: 2026-07-28 basic/transports §Streamable HTTP; a notification that comes anyway is kept and sent first,
    after the escalation). tasks/result starts by polling its task, not with the request's own round."""
    return progress_token is None and log_level is None and method != "tasks/result"


def answered_inline(actions: Sequence[B.Action], notified: bool) -> B.Finish | None:
    """The first round's ``Finish`` when the handler can answer with it alone (a plain request, most traffic);
    None when the exchange must go on as a stream: the round asked for more, or a notification came
    (``notified``) that must be sent before the answer."""
    if notified:
        return None
    finish = None
    for action in actions:
        if not isinstance(action, _SILENT):
            return None
        if isinstance(action, B.Finish):
            finish = action
    return finish
