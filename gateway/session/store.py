"""The session store's interface and its in-memory backends.

The interface is six small protocols, :class:`SessionRecords`, :class:`RoundStore` (rounds and their leases),
:class:`Ownership`, :class:`StreamCopies`, :class:`RelayedLeases` (relayed 2025 sessions, counted) and
:class:`TaskHolders` (the replica holding each task of the reverse bridge), and
:class:`SessionStore`, a backend that has all six, the bus its
replicas share (``gateway.session.bus``), and a lifetime. Only plain records (``adapters.records``) cross it,
serialized to dicts, so every backend keeps the same thing; sockets, streams and tasks stay in ``runtime``. Idle
sessions expire in the store itself (:meth:`SessionRecords.expire_sessions`), since a session may never have had
more than its record (an initialize, then nothing).

Backends: :class:`InMemoryStore` (one process, the default), ``gateway.session.redis_store.RedisStore`` (replicas
on one Redis), and :class:`SharedMemory`, whose :meth:`SharedMemory.replica` stores share one state and one
:class:`~gateway.session.bus.LocalBus`: replicas in one process, behaving as replicas on Redis do (for tests).
Time on the memory backends is a :data:`Clock` given to them (leases and ownership records), so tests can move it.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

from adapters.admission import WaitingLoad, past_ceilings
from adapters.jsonwire import ENCODED_DEPTH, dumps, loads
from adapters.records import PendingRound, SessionRecord
from adapters.relay import Ack, Relayed
from adapters.reverse_tasks import Holder
from adapters.sse import FINISHED_STREAMS_KEPT, PRIMING_SEQ, Event, StoredEvents, resumable
from adapters.takeover import Lease
from gateway.errors import StoreError
from gateway.session.bus import Bus, LocalBus

Clock = Callable[[], float]
"""Monotonic time in seconds (``time.monotonic``, or a test's clock): what the memory backends time leases by."""


class StoreUnavailable(StoreError):
    """The session store could not be reached or did not answer in time (a shared store's network or server):
    the one exception every :class:`SessionStore` method raises for it, whatever the backend, so the shell maps
    it to one answer (``adapters.errors.REJECTIONS[Reason.STORE_UNAVAILABLE]``) instead of a 500."""


@dataclass(frozen=True, slots=True)
class Owners:
    """Ownership records that change with a round's save, in the same store step
    (docs/design/replicas.md#replicas-relay-through-the-store,
    docs/design/takeover.md#a-bridged-step-is-one-fenced-store-write): ``claim`` recorded as ``replica``'s for
    ``ttl_seconds`` (a new claim renews it), ``release`` deleted."""

    replica: str
    ttl_seconds: float
    claim: frozenset[str] = frozenset()
    release: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class StreamAppend:
    """Events a round's save or end writes onto its stream's copy in the same store step
    (docs/design/takeover.md#a-bridged-step-is-one-fenced-store-write), as :meth:`SessionStore.append_events` would
    (``opening``: the copy's first append, which makes it)."""

    session_id: str
    stream: str
    events: tuple[Event, ...]
    capacity: int
    opening: bool = False
    ended_after: int | None = None  # the stream ended after this event (a round's end carries its result)


@dataclass(frozen=True, slots=True)
class Hold:
    """A round that starts waiting with this save: counted as :meth:`SessionStore.hold_round` counts it, in the
    save's own step (one round trip), and only while what waiting rounds then hold stays within ``ceilings``
    (``adapters.admission.waiting_ceilings``); past them, nothing of the step is written (:class:`WaitingFull`)."""

    principal: str
    size: int  # bytes of the round's record, as hold_round counts them
    ceilings: WaitingLoad


class WaitingFull(StoreError):
    """A save's :class:`Hold` did not fit: nothing of its step was written. ``load``: what waiting rounds would
    have held with it (``adapters.admission.admit_waiting`` names the bound)."""

    def __init__(self, load: WaitingLoad) -> None:
        super().__init__(f"waiting rounds would hold {load}")
        self.load = load


class SessionRecords(Protocol):
    """Sessions: their records, the counts admission reads, and idle expiry."""

    async def get_session(self, session_id: str) -> SessionRecord | None: ...
    async def put_session(self, record: SessionRecord) -> tuple[int, int]:
        """Write a new session's record (a change to a live one is :meth:`change_session`); the live sessions
        right after it, as :meth:`count_sessions` counts them, in the same atomic step: replicas admitting
        sessions at once learn which one took the last free slot."""
        ...
    async def change_session(self, session_id: str, change: Callable[[SessionRecord], None]) -> SessionRecord | None:
        """Apply ``change`` to the stored record as one atomic step, and return the record written; None when the
        session is gone. Every change to a live session is made so: neither undoes what another request (on any
        replica) wrote meanwhile, and a DELETE that came first stands (its id answers 404 from then on: 2025-11-25
        basic/transports §Session Management). A shared store reads, changes, then writes only over the text it
        read, and runs ``change`` again on a newer one: ``change`` must only set fields of the record it is given."""
        ...
    async def touch_session(self, session_id: str, last_seen_ms: int) -> None: ...
    async def delete_session(self, session_id: str) -> None: ...
    async def count_sessions(self, principal: str) -> tuple[int, int]:
        """Live sessions: (in total, of ``principal``). Asked on every initialize, so it must be cheap: counters
        kept as sessions are put and dropped (a shared store: two counter keys, or a per-principal set's size),
        never a scan."""
        ...
    # Verified principals (adapters.admission,
    # docs/design/limits.md#unverified-principals-share-an-allowance).
    async def count_unverified(self, principal: str) -> int | None:
        """None when ``principal`` is verified; else the live sessions of every unverified principal together
        (counted as :meth:`count_sessions` counts, as cheaply), the relayed ones among them
        (:meth:`RelayedLeases.hold_relayed`): what ``max_unverified_sessions`` bounds. A new session of an
        unverified principal joins that count when it is put."""
        ...
    async def mark_verified(self, principal: str, now_ms: int) -> None:
        """Something checked ``principal``'s credential: its live sessions (relayed ones too) leave the unverified
        count, and its sessions from now on never join it. The mark lasts while the principal has sessions and for
        the idle time after (a touch renews it), so a principal that comes back later is verified again the same
        way."""
        ...
    async def last_seen(self, session_ids: Collection[str]) -> dict[str, int]:
        """``last_seen_ms`` of each of ``session_ids`` that still has a record, without reading the records
        (a shared store: one round trip for all of them, e.g. one MGET or one SELECT ... IN)."""
        ...
    async def expire_sessions(self, seen_before_ms: float, keep: Collection[str] = ()) -> list[str]:
        """Delete the sessions (and their rounds) last seen before ``seen_before_ms``, except those in ``keep``;
        the ids deleted. A shared store would rather give session keys a TTL of the idle limit, renewed by
        ``touch_session`` (and for ``keep`` here), and return only what it deleted itself, possibly nothing: the
        gateway also ends a local runtime whose record is gone."""
        ...


class RoundStore(Protocol):
    """Bridged rounds saved for another replica to continue, the waiting rounds counted against their bounds,
    and the rounds' leases, for takeover after a replica dies
    (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds)."""

    async def put_round(self, record: PendingRound, lease: tuple[str, float] | None = None,
                        owners: Owners | None = None, *, holder: str | None = None,
                        copy: StreamAppend | None = None, hold: Hold | None = None, tell: Ack | None = None) -> bool:
        """Save a round; ``lease`` (replica, seconds): its first save, which takes the round's lease in the same step
        (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds), so no replica ever sees the round
        without its holder; ``owners``: the ownership records the step claims and releases, ``copy``: the step's
        events for its stream's copy, ``hold``: the round starts waiting (:class:`Hold`), and ``tell``: the
        acknowledgement of a relayed answer this step saves, sent on the bus once it is written, all in that same step
        (one round trip, docs/design/replicas.md#replicas-relay-through-the-store); ``holder``: save only while that
        replica holds the round's lease (a later save, fenced, §50). False when not saved (the lease lapsed or is
        another's), :class:`WaitingFull` when the hold did not fit: either way nothing of the step was written (nor
        told)."""
        ...
    async def end_round(self, bridge_id: str, replica: str, *, release: Collection[str] = (),
                        delete: bool = True, copy: StreamAppend | None = None, tell: Ack | None = None) -> None:
        """A round ended here, in one step: its record goes (``delete``; False: handed over, the record stays
        for the replica that continues it), the lease ``replica`` holds on it (never another's), and the
        ownership records ``release``; ``copy``: the last events of its stream (the result), written in that
        step, so the store holds either the round or its result; ``tell`` as for :meth:`put_round`."""
        ...
    async def hold_round(self, bridge_id: str, session_id: str, principal: str, size: int) -> tuple[int, int, int]:
        """Count a round waiting for its client (once per round: holding it again changes nothing), ``size``
        bytes of ``principal``'s, until :meth:`end_round` deletes it or its session goes; right after, in the
        same step, what waiting rounds hold (``adapters.admission.WaitingLoad``): rounds of the session, bytes
        of the principal, bytes in all. Kept for every store, shared or not: these bounds are the store's. A
        round that is saved (``shares_rounds``) is counted by its first waiting save instead (:class:`Hold`)."""
        ...
    async def get_round(self, bridge_id: str) -> PendingRound | None: ...
    async def rounds_of(self, session_id: str) -> list[PendingRound]: ...

    async def take_lease(self, bridge_id: str, replica: str, ttl_seconds: float) -> bool:
        """Claim the lease of a stored round nobody holds; atomic, so of replicas racing for it exactly one
        wins. False when it is held, or the round is gone."""
        ...
    async def lease_of(self, bridge_id: str) -> Lease: ...
    async def renew_leases(self, bridge_ids: Collection[str], replica: str, ttl_seconds: float) -> list[str]:
        """Renew the leases ``replica`` still holds; the ids of those it lost (they lapsed and were taken)."""
        ...
    async def orphaned_rounds(self, most: int) -> list[PendingRound]:
        """Up to ``most`` stored rounds that were leased and whose lease ran out with nobody holding it now: the
        rounds of a replica that died or handed them over, for another's sweep
        (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds)."""
        ...
    shares_rounds: ClassVar[bool]
    """Whether bridged rounds are saved here at all
    (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds): True for a store other processes read,
    where a round's record is what another replica continues; False for the in-process one, where no one else could
    ever read it."""


class Ownership(Protocol):
    """Which replica owns an exchange, for replicas on one store
    (docs/design/replicas.md#replicas-relay-through-the-store; keys from ``adapters.relay``)."""

    async def claim_owner(self, keys: Collection[str], replica: str, ttl_seconds: float, bridge_id: str) -> None:
        """Record ``replica`` as the owner of each key for ``ttl_seconds`` (a new claim renews it), for round
        ``bridge_id``, whose lease the claim then needs (:meth:`owner_of`). A round's save (``put_round`` with
        ``owners``) claims for its own round."""
        ...
    async def owner_of(self, key: str) -> str | None:
        """The key's owner; None when unclaimed, or when the claim's round is no longer leased to the owner (it
        stalled past its lease, docs/design/takeover.md#a-bridged-step-is-one-fenced-store-write): a message is then
        not relayed to it but taken over."""
        ...
    async def relay_to_owner(self, key: str, replica: str, message: Relayed) -> tuple[str | None, bool]:
        """The key's owner as :meth:`owner_of` finds it and, when that is another replica than ``replica``,
        ``message`` sent to it on the store's bus in the same step (one round trip,
        docs/design/replicas.md#replicas-relay-through-the-store): the owner, and whether it received the message."""
        ...


class StreamCopies(Protocol):
    """SSE replay across replicas (docs/design/replicas.md#sse-replay-across-replicas): a copy of each downstream
    stream a client may resume, kept with the session (expiring and deleted with it), capped like the process's own
    buffer."""

    shares_streams: ClassVar[bool]
    """Whether streams are copied here at all: True for a store replicas share, False for the in-process one
    (where the stream's own buffer is the only one and nothing is copied)."""
    async def append_events(self, session_id: str, stream: str, events: Sequence[Event], *, capacity: int,
                            opening: bool = False, ended_after: int | None = None) -> None:
        """Add ``events`` (consecutive, after those already kept) to the copy of ``stream``, keeping the last
        ``capacity``. ``opening``: the copy's first append, which creates it (with no events: an open stream
        with nothing sent yet); a later append to a copy that is gone (deleted, expired) is dropped.
        ``ended_after``: the stream ended with event ``ended_after`` (its final message, or the last one sent
        when it ended without one)."""
        ...
    async def read_events(self, session_id: str, stream: str, after: int) -> StoredEvents | None:
        """The kept events of ``stream`` after ``after``, or None when the copy does not exist or cannot resume
        there (``adapters.sse.resumable``: evicted, or never sent)."""
        ...
    async def follow_events(self, session_id: str, stream: str, after: int, wait_seconds: float) -> StoredEvents | None:
        """Like :meth:`read_events` once something follows ``after``, waiting up to ``wait_seconds`` for it (then
        nothing, not ended); None when the copy is gone or evicted past ``after``."""
        ...
    async def drop_stream(self, session_id: str, stream: str) -> None:
        """Forget the copy (its writer could not keep it whole): resuming it elsewhere is then refused."""
        ...


class RelayedLeases(Protocol):
    """The relayed 2025 sessions every replica counts against the session bounds
    (docs/design/eras.md#relayed-sessions-count-against-the-gateways-session-limits): each only as an opaque key
    (a digest the gateway makes; never the server's session id), its principal and a lease that runs out unless
    renewed, so a replica that dies leaks no count for longer than one lease."""

    async def hold_relayed(self, key: str, principal: str, ttl_seconds: float) -> tuple[int, int, int | None]:
        """Count ``key`` as ``principal``'s relayed session for ``ttl_seconds`` from now (holding it again renews
        it), one of the unverified ones while ``principal`` is not verified (as a session put then is); right
        after, in the same atomic step, the relayed sessions as :meth:`count_relayed` counts them and the
        unverified ones as :meth:`SessionRecords.count_unverified` does: replicas admitting at once learn which
        one took the last free slot."""
        ...
    async def renew_relayed(self, key: str, principal: str, ttl_seconds: float) -> None:
        """Move ``key``'s lease to ``ttl_seconds`` from now, only while it is held (a released or lapsed key is
        not counted again)."""
        ...
    async def release_relayed(self, key: str, principal: str) -> None:
        """Stop counting ``key`` (the session ended, or its initialize did not open one)."""
        ...
    async def count_relayed(self, principal: str) -> tuple[int, int]:
        """Relayed sessions whose lease has not run out: (in total, of ``principal``)."""
        ...


class TaskHolders(Protocol):
    """Which replica holds each task a 2026 client made through the reverse bridge
    (docs/design/eras.md#tasks-in-reverse): a record per task under an opaque key
    (``adapters.reverse_tasks.holder_key``, a digest), holding the principal that created it and the holder's
    replica id (``adapters.reverse_tasks.Holder``), with a lease the holder renews while it keeps the task, so a
    replica that dies leaves no record for longer than one lease. Nothing a request could be sent with is stored."""

    async def hold_tasks(self, tasks: Mapping[str, str], replica: str, ttl_seconds: float) -> None:
        """Record ``replica`` as the holder of each key of ``tasks`` (its principal the value) for ``ttl_seconds``
        from now; holding again renews. One round trip for all of them."""
        ...
    async def task_holder(self, key: str) -> Holder | None:
        """The key's record while its lease lasts, else None."""
        ...
    async def release_task(self, key: str, replica: str) -> None:
        """Forget the key's record, only while ``replica`` holds it (never another replica's)."""
        ...


class SessionStore(SessionRecords, RoundStore, Ownership, StreamCopies, RelayedLeases, TaskHolders, Protocol):
    """A session store backend: the six parts above, the bus its replicas share, and its lifetime."""

    @property
    def bus(self) -> Bus | None:
        """The bus replicas on this store send each other messages on (``gateway.session.relay``); None when no
        other replica shares the store (the in-process store alone), so nothing is ever relayed."""
        ...

    async def ping(self) -> None:
        """Reach the backend once (at start: a store that does not answer is logged, not fatal); raises
        :class:`StoreUnavailable`."""
        ...

    async def close(self) -> None:
        """Release the backend's connections (the app is stopping)."""
        ...


def _dump(record: SessionRecord | PendingRound) -> bytes:
    # A copy of the exact size: orjson's bytes keep the capacity of the buffer they were written into (4-8 KiB),
    # which a kept record would hold for its whole life (the benchmark: 23 -> 31 KiB per idle session).
    return bytes(memoryview(dumps(record.to_dict())))


class InMemoryStore:
    """Keeps records serialized as JSON text, exactly as a shared store would: callers can never alias the
    stored state, and anything that would not survive a real store fails here first. (JSON text is also about
    five times cheaper than deep copies of dicts, measured by the benchmark's profile.)

    ``last_seen_ms`` changes on every request, so it is kept beside the record text rather than in it: a touch
    is one dict write instead of re-serializing the whole record (the benchmark's profile: 3% of gateway CPU
    per translated request). A shared store would keep it the same way (a separate key, or a sorted set of
    expiry times). Every session has that entry, so expiring idle ones reads no record text."""

    def __init__(self, *, clock: Clock = time.monotonic, bus: Bus | None = None,
                 state: _MemoryState | None = None) -> None:
        """``clock``: what leases and ownership records are timed by; ``bus``: for replicas sharing ``state``
        (:class:`SharedMemory`), none for a store of one process."""
        self._s = state = _MemoryState() if state is None else state
        self._clock, self._bus = clock, bus
        # The state's tables, bound here: shared with the other replica stores of a SharedMemory, if any.
        self._sessions, self._seen, self._rounds = state.sessions, state.seen, state.rounds
        self._principal, self._per_principal = state.principal, state.per_principal
        self._held, self._held_rounds, self._held_bytes = state.held, state.held_rounds, state.held_bytes
        self._verified, self._unverified = state.verified, state.unverified
        self._owners, self._leases, self._leased, self._copies = state.owners, state.leases, state.leased, state.copies
        self._relayed, self._task_holders = state.relayed, state.task_holders
        self._relayed_unverified = state.relayed_unverified

    @property
    def bus(self) -> Bus | None:
        return self._bus

    async def ping(self) -> None:
        """Nothing to reach: the store is this process's memory."""

    async def close(self) -> None:
        """Nothing to release."""

    async def get_session(self, session_id: str) -> SessionRecord | None:
        data = self._sessions.get(session_id)
        if data is None:
            return None
        record = SessionRecord.from_dict(loads(data, ENCODED_DEPTH))
        record.last_seen_ms = max(record.last_seen_ms, self._seen.get(session_id, record.last_seen_ms))
        return record

    async def put_session(self, record: SessionRecord) -> tuple[int, int]:
        # A record read before a touch carries an older time: keep the newer one (time never goes back).
        seen = self._seen.get(record.session_id)
        if seen is not None and seen > record.last_seen_ms:
            record.last_seen_ms = seen
        self._seen[record.session_id] = record.last_seen_ms
        self._sessions[record.session_id] = _dump(record)
        if record.session_id not in self._principal:  # a new session (a session's principal never changes)
            self._principal[record.session_id] = record.principal
            self._per_principal[record.principal] = self._per_principal.get(record.principal, 0) + 1
            if record.principal not in self._verified:
                self._unverified.add(record.session_id)
        return len(self._sessions), self._per_principal[record.principal]

    async def change_session(self, session_id: str, change: Callable[[SessionRecord], None]) -> SessionRecord | None:
        record = await self.get_session(session_id)  # no wait between the read and the write: atomic here
        if record is None:
            return None
        change(record)
        await self.put_session(record)
        return record

    async def touch_session(self, session_id: str, last_seen_ms: int) -> None:
        if session_id in self._sessions:
            self._seen[session_id] = max(last_seen_ms, self._seen.get(session_id, last_seen_ms))

    async def delete_session(self, session_id: str) -> None:
        self._drop({session_id})

    async def count_sessions(self, principal: str) -> tuple[int, int]:
        return len(self._sessions), self._per_principal.get(principal, 0)

    async def count_unverified(self, principal: str) -> int | None:
        if principal in self._verified:
            return None
        await self.count_relayed(principal)  # lapsed leases go first
        return len(self._unverified) + len(self._relayed_unverified)

    async def mark_verified(self, principal: str, now_ms: int) -> None:
        self._verified[principal] = max(now_ms, self._verified.get(principal, now_ms))
        if self._per_principal.get(principal):
            self._unverified -= {s for s, p in self._principal.items() if p == principal}
        if self._relayed_unverified:
            self._relayed_unverified -= {k for k, (p, _) in self._relayed.items() if p == principal}

    async def last_seen(self, session_ids: Collection[str]) -> dict[str, int]:
        seen = self._seen
        return {s: seen[s] for s in session_ids if s in seen}

    async def expire_sessions(self, seen_before_ms: float, keep: Collection[str] = ()) -> list[str]:
        expired = [s for s, seen in self._seen.items() if seen < seen_before_ms and s not in keep]
        self._drop(set(expired))
        # A mark outlives its principal's last session by the idle time, then goes (any bearer token is one).
        alive = self._per_principal.keys() | {p for p, _ in self._relayed.values()}
        for principal in [p for p, ms in self._verified.items() if ms < seen_before_ms and p not in alive]:
            del self._verified[principal]
        return expired

    def _drop(self, session_ids: set[str]) -> None:
        """The sessions and their rounds, in one pass over the rounds however many sessions end."""
        for session_id in session_ids:
            self._sessions.pop(session_id, None)
            seen = self._seen.pop(session_id, None)
            self._unverified.discard(session_id)
            principal = self._principal.pop(session_id, None)
            if principal is not None and seen is not None and principal in self._verified:
                self._verified[principal] = max(self._verified[principal], seen)  # its last activity
            if principal is not None:
                left = self._per_principal[principal] - 1
                if left:
                    self._per_principal[principal] = left
                else:  # principals are bearer tokens: one with no session left must not stay a key forever
                    del self._per_principal[principal]
        for bridge_id in [b for b, (owner, _) in self._rounds.items() if owner in session_ids]:
            del self._rounds[bridge_id]
            self._leased.discard(bridge_id)
        if self._held:
            for bridge_id in [b for b, held in self._held.items() if held[0] in session_ids]:
                self._unhold(bridge_id)
        if self._copies:
            for key in [k for k in self._copies if k[0] in session_ids]:
                self._copies.pop(key).wake()

    async def put_round(self, record: PendingRound, lease: tuple[str, float] | None = None,
                        owners: Owners | None = None, *, holder: str | None = None,
                        copy: StreamAppend | None = None, hold: Hold | None = None, tell: Ack | None = None) -> bool:
        if holder is not None and lease is None and not self._holds(record.bridge_id, holder):
            return False
        if hold is not None:
            load = self._held_with(record.bridge_id, record.session_id, hold.principal, hold.size)
            if past_ceilings(load, hold.ceilings):
                raise WaitingFull(load)
            await self.hold_round(record.bridge_id, record.session_id, hold.principal, hold.size)
        self._rounds[record.bridge_id] = (record.session_id, _dump(record))
        if lease is not None:
            self._hold(record.bridge_id, *lease)
        if owners is not None:
            await self.claim_owner(owners.claim, owners.replica, owners.ttl_seconds, record.bridge_id)
            self._release(owners.release)
        if copy is not None:
            await self._append(copy)
        await self._tell(tell)
        return True

    async def end_round(self, bridge_id: str, replica: str, *, release: Collection[str] = (),
                        delete: bool = True, copy: StreamAppend | None = None, tell: Ack | None = None) -> None:
        if copy is not None:
            await self._append(copy)
        if delete:
            self._rounds.pop(bridge_id, None)
            self._leased.discard(bridge_id)
            self._unhold(bridge_id)
        if self._holds(bridge_id, replica):
            del self._leases[bridge_id]
        self._release(release)
        await self._tell(tell)

    async def _tell(self, tell: Ack | None) -> None:
        """A relayed answer's acknowledgement, sent once its step is written (a bus that only queues, as Redis's
        script publishes in the step)."""
        if tell is not None and self._bus is not None:
            await self._bus.send(tell.to.replica, tell)

    async def hold_round(self, bridge_id: str, session_id: str, principal: str, size: int) -> tuple[int, int, int]:
        if bridge_id not in self._held and session_id in self._sessions:
            self._held[bridge_id] = (session_id, principal, size)
            self._held_rounds[session_id] = self._held_rounds.get(session_id, 0) + 1
            self._held_bytes[principal] = self._held_bytes.get(principal, 0) + size
            self._s.held_total += size
        return self._held_rounds.get(session_id, 0), self._held_bytes.get(principal, 0), self._s.held_total

    def _held_with(self, bridge_id: str, session_id: str, principal: str, size: int) -> WaitingLoad:
        """What :meth:`hold_round` would answer for this round, holding nothing yet."""
        new = bridge_id not in self._held and session_id in self._sessions
        return WaitingLoad(self._held_rounds.get(session_id, 0) + new, self._held_bytes.get(principal, 0)
                           + size * new, self._s.held_total + size * new)

    def _unhold(self, bridge_id: str) -> None:
        held = self._held.pop(bridge_id, None)
        if held is None:
            return
        session_id, principal, size = held
        self._s.held_total -= size
        for sums, key, amount in ((self._held_rounds, session_id, 1), (self._held_bytes, principal, size)):
            left = sums[key] - amount
            if left:
                sums[key] = left
            else:  # no key kept for a session or principal holding nothing
                del sums[key]

    async def get_round(self, bridge_id: str) -> PendingRound | None:
        entry = self._rounds.get(bridge_id)
        return PendingRound.from_dict(loads(entry[1], ENCODED_DEPTH)) if entry is not None else None

    async def rounds_of(self, session_id: str) -> list[PendingRound]:
        return [PendingRound.from_dict(loads(data, ENCODED_DEPTH)) for owner, data in self._rounds.values()
                if owner == session_id]

    async def claim_owner(self, keys: Collection[str], replica: str, ttl_seconds: float, bridge_id: str) -> None:
        deadline = self._clock() + ttl_seconds
        for key in keys:
            self._owners[key] = (replica, deadline, bridge_id)

    async def relay_to_owner(self, key: str, replica: str, message: Relayed) -> tuple[str | None, bool]:
        owner = await self.owner_of(key)
        if owner is None or owner == replica or self._bus is None:
            return owner, False
        return owner, await self._bus.send(owner, message)

    async def owner_of(self, key: str) -> str | None:
        entry = self._owners.get(key)
        if entry is None or entry[1] <= self._clock():
            self._owners.pop(key, None)
            return None
        replica, _, bridge_id = entry
        if not self._holds(bridge_id, replica):
            return None
        return replica

    def _release(self, keys: Collection[str]) -> None:
        for key in keys:
            self._owners.pop(key, None)

    def _holder(self, bridge_id: str) -> tuple[str, float] | None:
        entry = self._leases.get(bridge_id)
        if entry is not None and entry[1] <= self._clock():
            del self._leases[bridge_id]
            return None
        return entry

    def _holds(self, bridge_id: str, replica: str) -> bool:
        entry = self._holder(bridge_id)
        return entry is not None and entry[0] == replica

    def _hold(self, bridge_id: str, replica: str, ttl_seconds: float) -> None:
        self._leases[bridge_id] = (replica, self._clock() + ttl_seconds)
        self._leased.add(bridge_id)

    async def take_lease(self, bridge_id: str, replica: str, ttl_seconds: float) -> bool:
        if bridge_id not in self._rounds or self._holder(bridge_id) is not None:
            return False
        self._hold(bridge_id, replica, ttl_seconds)
        return True

    async def lease_of(self, bridge_id: str) -> Lease:
        entry = self._holder(bridge_id)
        if entry is None:
            return Lease(None)
        return Lease(entry[0], int((entry[1] - self._clock()) * 1000))

    async def orphaned_rounds(self, most: int) -> list[PendingRound]:
        orphans = [bridge_id for bridge_id in self._leased if self._holder(bridge_id) is None]
        found: list[PendingRound] = []
        for bridge_id in orphans:
            if bridge_id not in self._rounds:
                self._leased.discard(bridge_id)
            elif len(found) < most:
                found.append(PendingRound.from_dict(loads(self._rounds[bridge_id][1], ENCODED_DEPTH)))
        return found

    async def renew_leases(self, bridge_ids: Collection[str], replica: str, ttl_seconds: float) -> list[str]:
        lost = []
        for bridge_id in bridge_ids:
            entry = self._holder(bridge_id)
            if entry is None or entry[0] != replica:
                lost.append(bridge_id)
            else:
                self._hold(bridge_id, replica, ttl_seconds)
        return lost

    async def hold_relayed(self, key: str, principal: str, ttl_seconds: float) -> tuple[int, int, int | None]:
        self._relayed[key] = (principal, self._clock() + ttl_seconds)
        if principal in self._verified:
            self._relayed_unverified.discard(key)
        else:
            self._relayed_unverified.add(key)
        return *await self.count_relayed(principal), await self.count_unverified(principal)

    async def renew_relayed(self, key: str, principal: str, ttl_seconds: float) -> None:
        await self.count_relayed(principal)  # a lapsed lease goes first: renewing never brings one back
        if key in self._relayed:
            self._relayed[key] = (principal, self._clock() + ttl_seconds)

    async def release_relayed(self, key: str, principal: str) -> None:
        self._relayed.pop(key, None)
        self._relayed_unverified.discard(key)

    async def count_relayed(self, principal: str) -> tuple[int, int]:
        now, held = self._clock(), self._relayed
        for key in [k for k, (_, deadline) in held.items() if deadline <= now]:
            del held[key]
            self._relayed_unverified.discard(key)
        return len(held), sum(1 for p, _ in held.values() if p == principal)

    async def hold_tasks(self, tasks: Mapping[str, str], replica: str, ttl_seconds: float) -> None:
        now = self._clock()
        for lapsed in [k for k, (_, deadline) in self._task_holders.items() if deadline <= now]:
            del self._task_holders[lapsed]  # nobody renews a dead replica's records: they go here
        deadline = now + ttl_seconds
        for key, principal in tasks.items():
            self._task_holders[key] = (Holder(principal, replica), deadline)

    async def task_holder(self, key: str) -> Holder | None:
        entry = self._task_holders.get(key)
        if entry is not None and entry[1] <= self._clock():
            del self._task_holders[key]
            return None
        return entry[0] if entry is not None else None

    async def release_task(self, key: str, replica: str) -> None:
        entry = self._task_holders.get(key)
        if entry is not None and entry[0].replica == replica:
            del self._task_holders[key]

    shares_rounds: ClassVar[bool] = False  # one process: nobody else could continue a round (a test may say True)
    shares_streams: ClassVar[bool] = False  # one process: a stream's own buffer is its only copy

    async def _append(self, copy: StreamAppend) -> None:
        await self.append_events(copy.session_id, copy.stream, copy.events, capacity=copy.capacity,
                                 opening=copy.opening, ended_after=copy.ended_after)

    async def append_events(self, session_id: str, stream: str, events: Sequence[Event], *, capacity: int,
                            opening: bool = False, ended_after: int | None = None) -> None:
        copy = self._copies.get((session_id, stream))
        if copy is None and opening and session_id in self._sessions:
            first = events[0].seq if events else PRIMING_SEQ + 1
            copy = self._copies[(session_id, stream)] = _Copy(capacity, first)
        if copy is None:
            return
        for event in events:
            copy.events.append((event.seq, dumps(event.message)))
        if events:
            copy.next = events[-1].seq + 1
        if ended_after is not None and not copy.ended:
            copy.ended, self._s.ended = True, self._s.ended + 1
            copy.order = self._s.ended
            self._keep_finished(session_id)
        copy.wake()

    def _keep_finished(self, session_id: str) -> None:
        ended = sorted((c.order, k) for k, c in self._copies.items() if k[0] == session_id and c.ended)
        for _, key in ended[:max(0, len(ended) - FINISHED_STREAMS_KEPT)]:
            self._copies.pop(key).wake()

    async def read_events(self, session_id: str, stream: str, after: int) -> StoredEvents | None:
        copy = self._copies.get((session_id, stream))
        if copy is None or not resumable(after, copy.oldest(), copy.next):
            return None
        return copy.after(after)

    async def follow_events(self, session_id: str, stream: str, after: int, wait_seconds: float) -> StoredEvents | None:
        copy = self._copies.get((session_id, stream))
        if copy is not None and copy.next == after + 1 and not copy.ended:
            woken = copy.waiter()
            try:
                await asyncio.wait_for(woken.wait(), wait_seconds)
            except TimeoutError:
                return StoredEvents((), False)
            copy = self._copies.get((session_id, stream))
        if copy is None or after < copy.oldest() - 1:
            return None
        return copy.after(after)

    async def drop_stream(self, session_id: str, stream: str) -> None:
        copy = self._copies.pop((session_id, stream), None)
        if copy is not None:
            copy.wake()


class SharedMemory:
    """The fake shared backend: what replicas on one Redis share (state, a bus, one clock) in one process, so two
    gateways in one test behave as replicas do, relaying, taking rounds over and resuming streams, with no Redis.
    Each gateway gets its own :meth:`replica` store."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self.clock, self.bus, self.state = clock, LocalBus(), _MemoryState()

    def replica(self) -> ReplicaStore:
        """A store for one replica: this backend's state, bus and clock."""
        return ReplicaStore(clock=self.clock, bus=self.bus, state=self.state)


class ReplicaStore(InMemoryStore):
    """One replica's view of a :class:`SharedMemory`: rounds are saved and streams copied, as on Redis."""

    shares_rounds: ClassVar[bool] = True
    shares_streams: ClassVar[bool] = True


class _MemoryState:
    """What an :class:`InMemoryStore` keeps: its own, or shared by the replica stores of a :class:`SharedMemory`."""

    def __init__(self) -> None:
        self.sessions: dict[str, bytes] = {}
        self.seen: dict[str, int] = {}  # session id -> last_seen_ms, newer than the record's own after a touch
        self.rounds: dict[str, tuple[str, bytes]] = {}  # bridge id -> (session id, record)
        # For count_sessions: each live session's principal, and the live sessions of each principal.
        self.principal: dict[str, str] = {}
        self.per_principal: dict[str, int] = {}
        # Waiting rounds held (hold_round): bridge id -> (session, principal, bytes), and the sums it keeps.
        self.held: dict[str, tuple[str, str, int]] = {}
        self.held_rounds: dict[str, int] = {}  # session id -> its rounds held
        self.held_bytes: dict[str, int] = {}  # principal -> its bytes held
        self.held_total = 0  # the bytes of every round held
        self.verified: dict[str, int] = {}  # principal -> when last marked or active (ms), while it counts
        self.unverified: set[str] = set()  # the live sessions of principals not verified when they were put
        # Ownership: for one process's store alone every exchange is local, and these only keep the contract; the
        # replica stores of a SharedMemory relay by them.
        self.owners: dict[str, tuple[str, float, str]] = {}  # key -> (replica, monotonic deadline, round)
        self.leases: dict[str, tuple[str, float]] = {}  # bridge id -> (replica, monotonic deadline)
        self.leased: set[str] = set()  # rounds ever leased and not ended: what orphaned_rounds looks through
        # Stream copies: made only by gateways on a SharedMemory's replica stores (shares_streams).
        self.copies: dict[tuple[str, str], _Copy] = {}
        self.ended = 0  # copies ended so far: their order, for keeping the last FINISHED_STREAMS_KEPT
        self.relayed: dict[str, tuple[str, float]] = {}  # relayed session key -> (principal, lease deadline)
        self.relayed_unverified: set[str] = set()  # the relayed keys of principals not verified when held
        self.task_holders: dict[str, tuple[Holder, float]] = {}  # task holder key -> (its record, lease deadline)


class _Copy:
    """InMemoryStore's copy of one stream: (seq, message text) pairs, as a shared store holds them."""

    def __init__(self, capacity: int, first: int) -> None:
        self.events: deque[tuple[int, bytes]] = deque(maxlen=max(1, capacity))
        self.next, self.ended, self.order = first, False, 0
        self._woken: asyncio.Event | None = None

    def oldest(self) -> int:
        return self.events[0][0] if self.events else self.next

    def after(self, seq: int) -> StoredEvents:
        kept = tuple(Event(s, loads(text, ENCODED_DEPTH)) for s, text in self.events if s > seq)
        return StoredEvents(kept, self.ended)

    def waiter(self) -> asyncio.Event:
        if self._woken is None:
            self._woken = asyncio.Event()
        return self._woken

    def wake(self) -> None:
        if self._woken is not None:
            self._woken.set()
            self._woken = None
