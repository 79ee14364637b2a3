"""The session store contract (``gateway.session.store``'s protocols), one suite run against every backend: the
in-process store, Redis, and the shared memory backend (``SharedMemory``: replicas in one process), then the
shared backend as two replicas: what one replica's store writes, the other's reads, and a client's answer posted
to one replica reaches the round held by the other through the in-process bus.

Time: the memory backends run on a fake clock the tests move (``Backend.elapse``), so a lease lapses without
waiting; Redis times leases by its own clock (``TIME`` in its scripts), so there the test waits for the lapse.
Redis is found as in ``test_redis_store`` (skipped without one); each test writes under its own key prefix.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("redis")
from adapters import relay as R
from adapters.admission import WaitingLoad
from adapters.reverse_tasks import Holder
from adapters.sse import FINISHED_STREAMS_KEPT, Event, StoredEvents
from adapters.takeover import Lease
from gateway.http.app import GATEWAY
from gateway.session.redis_store import RedisStore
from gateway.session.store import Hold, InMemoryStore, Owners, SessionStore, SharedMemory, StreamAppend, WaitingFull
from tests.gateway.conftest import CAPS, Legacy
from tests.gateway.http.test_bridge_shell import SAMPLED, two_rounds
from tests.gateway.session import test_redis_store as redis_tests
from tests.waiting import until, within

redis_url, prefix = redis_tests.redis_url, redis_tests.prefix  # its fixtures, shared
NOW, IDLE = redis_tests.NOW, redis_tests.IDLE
record, pending, _set = redis_tests.record, redis_tests.pending, redis_tests._set  # the records under contract


class FakeClock:
    """Monotonic seconds that pass only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Backend:
    """A store under contract, and how time passes for it."""

    store: Any
    clock: FakeClock | None  # None: the backend keeps its own time (Redis)

    async def elapse(self, seconds: float) -> None:
        """``seconds`` pass: on the fake clock at once; Redis's own clock is waited for."""
        if self.clock is not None:
            self.clock.now += seconds
        else:
            await asyncio.sleep(seconds)  # sleep: Redis times leases by its own clock, which no test can move

    async def lapses(self, condition: Callable[[], Awaitable[bool]], what: str, seconds: float) -> None:
        """Time passes until ``condition`` holds: ``seconds`` on the fake clock (it must hold then), or as long
        as it takes on Redis's."""
        if self.clock is not None:
            self.clock.now += seconds
            assert await condition(), what
        else:
            await until(condition, what)


@pytest.fixture(params=["memory", "redis", "shared"])
async def backend(request: Any) -> AsyncIterator[Backend]:
    """Every backend: the in-process store, Redis, and one replica's store on the shared memory backend."""
    if request.param == "memory":
        clock = FakeClock()
        yield Backend(InMemoryStore(clock=clock), clock)
    elif request.param == "shared":
        clock = FakeClock()
        shared = SharedMemory(clock)
        shared.replica()  # another replica's store on the same state: none of it is this one's own
        yield Backend(shared.replica(), clock)
    else:
        url, name = request.getfixturevalue("redis_url"), request.getfixturevalue("prefix")
        redis_store = RedisStore(url, idle_seconds=IDLE, prefix=name, clock=redis_tests.Clock())
        try:
            yield Backend(redis_store, None)
        finally:
            await redis_store.close()


@pytest.fixture
def store(backend: Backend) -> Any:
    return backend.store


def test_every_backend_is_a_session_store() -> None:
    """The protocols are checked statically (mypy --strict); this names the backends the suite runs on."""
    stores: list[SessionStore] = [InMemoryStore(), SharedMemory().replica()]
    assert [s.shares_rounds for s in stores] == [False, True] and stores[0].bus is None
    assert stores[1].bus is not None and RedisStore.shares_rounds


async def test_records_round_trip_and_are_never_aliased(store) -> None:
    original = record("s1")
    await store.put_session(original)
    assert await store.get_session("s1") == original and await store.get_session("nope") is None
    read = await store.get_session("s1")
    read.subscriptions.append("file:///x")
    assert (await store.get_session("s1")).subscriptions == []


async def test_a_change_is_made_on_the_stored_record_and_never_recreates_one(store) -> None:
    await store.put_session(record("s1"))
    await store.touch_session("s1", NOW + 50)
    changed = await store.change_session("s1", _set(log_level="debug"))
    assert changed.log_level == "debug" and changed.last_seen_ms == NOW + 50
    assert await store.get_session("s1") == changed
    await store.delete_session("s1")
    assert await store.change_session("s1", _set(log_level="info")) is None  # a DELETE stands
    assert await store.get_session("s1") is None and await store.last_seen(["s1"]) == {}
    assert await store.count_sessions("alice") == (0, 0)


async def test_last_seen_only_moves_forward(store) -> None:
    await store.put_session(record("s1", seen=NOW - 500))
    await store.touch_session("s1", NOW - 100)
    assert (await store.get_session("s1")).last_seen_ms == NOW - 100
    stale = record("s1", seen=NOW - 500)  # read before the touch, written after it
    await store.put_session(stale)
    assert stale.last_seen_ms == NOW - 100 and (await store.get_session("s1")).last_seen_ms == NOW - 100
    await store.touch_session("gone", NOW)  # no record: nothing is created
    assert await store.get_session("gone") is None and await store.last_seen(["gone"]) == {}


async def test_counts_follow_puts_deletes_and_expiry(store) -> None:
    after = [await store.put_session(record(session_id, principal, NOW - 1000))
             for session_id, principal in [("a1", "alice"), ("a2", "alice"), ("b1", "bob")]]
    assert after == [(1, 1), (2, 2), (3, 1)]  # each write's own count: in all, and of its principal
    assert await store.put_session(record("a1", "alice", NOW - 900)) == (3, 2)  # a rewrite is not a new session
    assert await store.count_sessions("alice") == (3, 2) and await store.count_sessions("carol") == (3, 0)
    await store.delete_session("a2")
    assert await store.count_sessions("alice") == (2, 1)
    await store.touch_session("b1", NOW)
    assert await store.expire_sessions(NOW - 100) == ["a1"]
    assert await store.count_sessions("alice") == (1, 0) and await store.count_sessions("bob") == (1, 1)


async def test_a_write_counts_its_own_session_whatever_its_last_seen_time(store) -> None:
    await store.put_session(record("live", "alice", NOW))
    assert await store.put_session(record("old", "carol", NOW - int(IDLE * 1000) - 1)) == (2, 1)


async def test_last_seen_of_many_and_expiry_keeps_what_it_is_told(store) -> None:
    await store.put_session(record("old", seen=NOW - 5000))
    await store.put_session(record("busy", seen=NOW - 5000))
    await store.put_session(record("new", seen=NOW - 10))
    assert await store.last_seen(["old", "new", "never"]) == {"old": NOW - 5000, "new": NOW - 10}
    assert await store.last_seen([]) == {}
    await store.put_round(pending("b-old", "old"))
    assert await store.expire_sessions(NOW - 100, keep={"busy"}) == ["old"]
    assert await store.get_session("old") is None and await store.get_round("b-old") is None
    assert await store.get_session("busy") is not None and await store.rounds_of("old") == []


async def test_rounds(store) -> None:
    await store.put_session(record("s1"))
    first, second = pending("b1", "s1"), pending("b2", "s1")
    await store.put_round(first)
    await store.put_round(second)
    second.answers = {"a": {"ok": True}}
    await store.put_round(second)  # saved again after a step
    assert await store.get_round("b2") == second and await store.get_round("zz") is None
    assert sorted(r.bridge_id for r in await store.rounds_of("s1")) == ["b1", "b2"]
    await store.end_round("b1", "A")
    await store.end_round("b1", "A")  # twice is harmless
    assert [r.bridge_id for r in await store.rounds_of("s1")] == ["b2"]
    await store.delete_session("s1")
    assert await store.get_round("b2") is None and await store.rounds_of("s1") == []


async def test_a_first_waiting_save_holds_its_round_within_the_ceilings_or_writes_nothing(store) -> None:
    """docs/design/limits.md#waiting-rounds-are-counted-in-the-store: a round's first waiting save counts it as
    hold_round does, in the same step; past a ceiling it writes nothing of its step (record, lease, claim, events)
    and answers the load it would have made."""
    await store.put_session(record("s1"))
    most = WaitingLoad(2, 250, 1000)
    assert await store.put_round(pending("b1", "s1"), ("A", 5), hold=Hold("alice", 100, most))
    assert await store.hold_round("b1", "s1", "alice", 100) == (1, 100, 100)  # held once, by the save
    opening = StreamAppend("s1", "x", (Event(1, {"n": 1}),), capacity=8, opening=True)
    with pytest.raises(WaitingFull) as full:
        await store.put_round(pending("b2", "s1"), ("A", 5), Owners("A", 5, frozenset({"oa:g2"})),
                              copy=opening, hold=Hold("alice", 200, most))
    assert full.value.load == WaitingLoad(2, 300, 300)  # the principal's bytes past 250
    assert await store.get_round("b2") is None and (await store.lease_of("b2")).holder is None
    assert await store.owner_of("oa:g2") is None and await store.read_events("s1", "x", 0) is None
    assert await store.hold_round("b1", "s1", "alice", 100) == (1, 100, 100)  # the refused one was never counted
    assert await store.put_round(pending("b3", "s1"), ("A", 5), hold=Hold("alice", 150, most))  # exactly full
    assert await store.hold_round("b3", "s1", "alice", 150) == (2, 250, 250)
    await store.end_round("b1", "A")  # gives its bytes back
    assert await store.hold_round("b3", "s1", "alice", 150) == (1, 150, 150)


async def lapsed(store: Any, bridge_id: str) -> bool:
    """Whether the round's lease ran out (nobody holds it)."""
    return await store.lease_of(bridge_id) == Lease(None)


async def test_leases(backend: Backend) -> None:
    """docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds: one holder per round, renewed while it
    lives; a lapsed lease is claimed by exactly one of the replicas racing for it, and only while the round exists."""
    store = backend.store
    await store.put_session(record("s1"))
    await store.put_round(pending("b1", "s1"), ("A", 0.3))  # its first save takes the lease with it
    assert (await store.lease_of("b1")).holder == "A" and 0 < (await store.lease_of("b1")).remaining_ms <= 300
    assert not await store.take_lease("b1", "B", 5)  # held
    assert await store.renew_leases(["b1", "b-never"], "A", 0.3) == ["b-never"]
    assert await store.renew_leases(["b1"], "B", 5) == ["b1"]  # not B's
    await store.end_round("b1", "B", delete=False)  # not B's: stays
    assert (await store.lease_of("b1")).holder == "A"
    await backend.lapses(lambda: lapsed(store, "b1"), "A stopped renewing: its lease lapses by itself", 0.31)
    won = await asyncio.gather(*(store.take_lease("b1", name, 5) for name in ("B", "C", "D")))
    assert sorted(won) == [False, False, True]
    winner = ("B", "C", "D")[won.index(True)]
    assert (await store.lease_of("b1")).holder == winner and await store.renew_leases(["b1"], "A", 5) == ["b1"]
    await store.end_round("b1", winner, delete=False)
    assert await store.lease_of("b1") == Lease(None)
    assert not await store.take_lease("b-gone", "B", 5)  # no round, no lease


async def test_orphaned_rounds_are_the_leased_ones_nobody_holds(backend: Backend) -> None:
    """docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds, the sweep: a round is orphaned once its
    lease ran out with nobody holding it (its replica died) or was released with the round kept (handed over); a
    renewed, taken or ended round is not, nor one never leased (saved where nobody continues rounds), nor one whose
    session is gone."""
    store = backend.store
    await store.put_session(record("s1"))
    await store.put_round(pending("b1", "s1"), ("A", 0.3))
    await store.put_round(pending("b2", "s1"), ("A", 0.3))
    await store.put_round(pending("b3", "s1"))  # never leased
    assert await store.orphaned_rounds(10) == []
    await backend.elapse(0.2)  # part of b1's and b2's leases pass before only b2's replica renews
    assert await store.renew_leases(["b2"], "A", 5) == []  # b2's replica lives on
    await backend.lapses(lambda: lapsed(store, "b1"), "b1's replica stopped renewing: its lease runs out", 0.15)
    assert [r.bridge_id for r in await store.orphaned_rounds(10)] == ["b1"]
    assert (await store.orphaned_rounds(10))[0] == pending("b1", "s1")
    assert await store.take_lease("b1", "B", 5)  # a sweep or a client's message took it over
    assert await store.orphaned_rounds(10) == []
    await store.end_round("b1", "B", delete=False)  # handed over at shutdown: orphaned at once
    assert [r.bridge_id for r in await store.orphaned_rounds(10)] == ["b1"]
    assert await store.take_lease("b1", "C", 5)
    await store.end_round("b1", "C")  # ended: gone for good
    await store.end_round("b2", "A", delete=False)
    assert [r.bridge_id for r in await store.orphaned_rounds(10)] == ["b2"]
    await store.put_round(pending("b4", "s1"), ("A", 0.01))
    await backend.lapses(lambda: lapsed(store, "b4"), "b4's lease runs out", 0.02)
    assert len(await store.orphaned_rounds(1)) == 1  # at most what was asked for
    await store.delete_session("s1")
    assert await store.orphaned_rounds(10) == []


async def test_relayed_sessions_are_counted_by_lease(backend: Backend) -> None:
    """docs/design/eras.md#relayed-sessions-count-against-the-gateways-session-limits: a hold counts a key (once,
    however often held) and answers the counts after it; a renewal moves only a held lease; a release, or a lease
    nobody renews (its replica died), stops the count; counts are apart from the session records'."""
    store = backend.store
    assert await store.hold_relayed("k1", "alice", 0.3) == (1, 1, 1)  # and the unverified ones (nobody verified)
    assert await store.hold_relayed("k2", "alice", 5) == (2, 2, 2)
    assert await store.hold_relayed("k3", "bob", 5) == (3, 1, 3)
    assert await store.hold_relayed("k2", "alice", 5) == (3, 2, 3)  # held again: renewed, not counted twice
    assert await store.count_relayed("alice") == (3, 2) and await store.count_relayed("carol") == (3, 0)
    assert await store.count_sessions("alice") == (0, 0)  # not session records
    await store.release_relayed("k3", "bob")
    assert await store.count_relayed("bob") == (2, 0)
    await store.renew_relayed("k3", "bob", 5)  # released: a renewal does not bring it back
    assert await store.count_relayed("bob") == (2, 0)

    async def k1_lapsed() -> bool:
        return await store.count_relayed("alice") == (1, 1)
    await backend.lapses(k1_lapsed, "k1 was never renewed: its lease runs out", 0.31)
    await store.renew_relayed("k1", "alice", 5)  # lapsed: not counted again
    assert await store.count_relayed("alice") == (1, 1)
    await store.renew_relayed("k2", "alice", 0.3)  # a renewal sets the lease anew
    await backend.lapses(lambda: _relayed_none(store), "k2 not renewed again: nothing is counted", 0.31)


async def _relayed_none(store: Any) -> bool:
    return bool(await store.count_relayed("alice") == (0, 0))


async def test_relayed_sessions_of_unverified_principals_share_their_allowance(backend: Backend) -> None:
    """docs/design/eras.md#relayed-sessions-count-against-the-gateways-session-limits: a lease held while its
    principal is not verified counts with the unverified session records (``count_unverified``, and the hold's own
    step answers that count) until its principal is verified; a verified principal's lease never joins them; a
    release, or a lease nobody renews, leaves the count."""
    store = backend.store
    await store.put_session(record("s1", "bearer:x"))
    assert await store.hold_relayed("k1", "bearer:x", 0.3) == (1, 1, 2)  # its session record and this lease
    assert await store.hold_relayed("k2", "bearer:y", 5) == (2, 1, 3)
    assert await store.hold_relayed("k3", "bearer:y", 5) == (3, 2, 4)
    assert await store.count_unverified("bearer:z") == 4 and await store.count_sessions("bearer:z") == (1, 0)
    await store.mark_verified("bearer:y", NOW)
    assert await store.count_unverified("bearer:y") is None
    assert await store.count_unverified("bearer:z") == 2  # y's two leases left the count, still counted as relayed
    assert await store.count_relayed("bearer:y") == (3, 2)
    assert await store.hold_relayed("k4", "bearer:y", 5) == (4, 3, None)  # verified: its new lease never joins
    await store.renew_relayed("k2", "bearer:y", 5)
    assert await store.count_unverified("bearer:z") == 2
    await store.release_relayed("k2", "bearer:y")  # (as a release of an unverified one does, below)
    await store.delete_session("s1")
    assert await store.count_unverified("bearer:z") == 1  # k1 alone

    async def k1_lapsed() -> bool:
        return await store.count_unverified("bearer:z") == 0
    await backend.lapses(k1_lapsed, "k1 was never renewed: it leaves the unverified count", 0.31)
    assert await store.hold_relayed("k5", "bearer:x", 5) == (3, 1, 1)
    await store.release_relayed("k5", "bearer:x")
    assert await store.count_unverified("bearer:z") == 0


async def test_a_task_holder_is_recorded_by_lease_and_released_only_by_its_holder(backend: Backend) -> None:
    """docs/design/eras.md#tasks-in-reverse: a holder record names the task's principal and replica while its lease
    lasts; holding again renews it (several in one step); only its own replica releases it; one nobody renews (its
    replica died) runs out."""
    store = backend.store
    assert await store.task_holder("t1") is None
    await store.hold_tasks({"t1": "alice", "t2": "bearer:ab cd"}, "A", 0.3)
    await store.hold_tasks({"t3": "bob"}, "B", 5)
    await store.hold_tasks({}, "A", 5)  # nothing to hold: nothing happens
    assert await store.task_holder("t1") == Holder("alice", "A")
    assert await store.task_holder("t2") == Holder("bearer:ab cd", "A")  # a principal as it is, spaces too
    await store.release_task("t3", "A")  # B's: not A's to release
    assert await store.task_holder("t3") == Holder("bob", "B")
    await store.release_task("t3", "B")
    assert await store.task_holder("t3") is None
    await store.hold_tasks({"t2": "bearer:ab cd"}, "A", 5)  # renewed; t1 is not

    async def t1_lapsed() -> bool:
        return await store.task_holder("t1") is None
    await backend.lapses(t1_lapsed, "t1 was never renewed: its lease runs out", 0.31)
    assert await store.task_holder("t2") == Holder("bearer:ab cd", "A")
    assert await store.count_relayed("alice") == (0, 0) and await store.count_sessions("alice") == (0, 0)


async def test_a_step_writes_its_ownership_with_its_save_and_a_round_ends_in_one_step(store) -> None:
    """docs/design/takeover.md#a-bridged-step-is-one-fenced-store-write: the claims and releases of a step ride on
    its save; the end of a round drops its record, its holder's lease (never another's) and its ownership records
    together; a handover keeps the record."""
    await store.put_session(record("s1"))
    await store.claim_owner(["oa:old"], "A", 5, "b1")  # A's once the save below takes b1's lease
    await store.put_round(pending("b1", "s1"), ("A", 5), Owners("A", 5, frozenset({"oa:g1", "oq:s1:1"}),
                                                                 frozenset({"oa:old"})))
    assert [await store.owner_of(k) for k in ("oa:g1", "oq:s1:1", "oa:old")] == ["A", "A", None]
    await store.claim_owner(["oa:g3"], "A", 5, "b1")
    assert await store.owner_of("oa:g3") == "A"
    assert await store.put_round(pending("b1", "s1"), owners=Owners("A", 5, release=frozenset({"oa:g1"})),
                                 holder="A")
    assert await store.owner_of("oa:g1") is None and (await store.lease_of("b1")).holder == "A"
    stale = pending("b1", "s1")
    stale.answers = {"late": {}}
    # Fenced: a save by a replica not holding the lease writes nothing of its step.
    assert not await store.put_round(stale, owners=Owners("B", 5, frozenset({"oa:g2"})), holder="B")
    assert (await store.get_round("b1")).answers == {} and await store.owner_of("oa:g2") is None
    await store.end_round("b1", "B", release=["oq:s1:1"], delete=False)  # a handover by B: A's lease stays
    assert await store.get_round("b1") is not None and (await store.lease_of("b1")).holder == "A"
    assert await store.owner_of("oq:s1:1") is None
    await store.end_round("b1", "A", delete=False)
    assert await store.get_round("b1") is not None and await store.lease_of("b1") == Lease(None)
    assert not await store.put_round(pending("b1", "s1"), holder="A")  # its lease is gone: not A's to save
    assert await store.owner_of("oa:g3") is None  # nor does A own its round's ids any more: not relayed to A
    assert await store.take_lease("b1", "C", 5)  # the kept record is for the next holder
    await store.end_round("b1", "C")
    assert await store.get_round("b1") is None and await store.rounds_of("s1") == []
    assert await store.lease_of("b1") == Lease(None)
    await store.end_round("b1", "C", release=["oa:never"])  # twice, or with nothing held, is harmless


async def test_a_relayed_message_is_looked_up_and_sent_in_one_step_and_a_save_tells_its_acknowledgement(
        store) -> None:
    """docs/design/replicas.md#replicas-relay-through-the-store: ``relay_to_owner`` finds the owner as ``owner_of``
    does and sends the message to it on the store's bus (never to the sender itself, nor to an owner that lost its
    lease); a save or end given an acknowledgement sends it once written, and a fenced save sends nothing."""
    if store.bus is None:  # one process: nothing is relayed
        assert await store.relay_to_owner("oa:g1", "B", R.End("s1")) == (None, False)
        return
    await store.put_session(record("s1"))
    answer = R.Answer("s1", {"jsonrpc": "2.0", "id": "g1", "result": {}}, R.ReplyTo("B", "t1"))
    at_a, at_b = await store.bus.subscribe("A"), await store.bus.subscribe("B")
    got_a, got_b = at_a.messages(), at_b.messages()
    try:
        assert await store.relay_to_owner("oa:g1", "B", answer) == (None, False)  # unclaimed: sent to nobody
        await store.put_round(pending("b1", "s1"), ("A", 5), Owners("A", 5, frozenset({"oa:g1", "oa:g2"})))
        assert await store.relay_to_owner("oa:g1", "A", answer) == ("A", False)  # its own: not sent
        assert await store.relay_to_owner("oa:g1", "B", answer) == ("A", True)
        assert await within(anext(got_a)) == answer
        ack = R.Ack("s1", R.ReplyTo("B", "t1"), True)
        fenced = R.Ack("s1", R.ReplyTo("B", "t0"), True)
        assert not await store.put_round(pending("b1", "s1"), holder="C", tell=fenced)  # fenced: nothing told
        assert await store.put_round(pending("b1", "s1"), owners=Owners("A", 5, release=frozenset({"oa:g1"})),
                                     holder="A", tell=ack)
        assert await within(anext(got_b)) == ack  # the fenced save's would have come first
        done = R.Ack("s1", R.ReplyTo("B", "t2"), True)
        await store.end_round("b1", "A", release=["oa:g2"], tell=done)
        assert await within(anext(got_b)) == done
        assert await store.relay_to_owner("oa:g2", "B", answer) == (None, False)  # released with the end
    finally:
        await at_a.close()
        await at_b.close()




def following(store: Any) -> bool:
    """Whether a ``follow_events`` call is waiting: an in-memory copy has a waiter, a Redis follower holds its
    connection (XREAD from a position returns what follows it, sent before or after the read arrived)."""
    if isinstance(store, RedisStore):
        return bool(store._follower.connection_pool._in_use_connections)
    return any(copy._woken is not None for copy in store._copies.values())


def events(*pairs: tuple[int, Any]) -> list[Event]:
    return [Event(seq, message) for seq, message in pairs]


async def open_session(store: Any, session_id: str = "s1") -> None:
    await store.put_session(record(session_id, "p", NOW))


async def test_a_copy_replays_what_follows_a_position_and_says_when_it_ended(store) -> None:
    await open_session(store)
    await store.append_events("s1", "x", events((1, {"n": 1})), capacity=8, opening=True)
    await store.append_events("s1", "x", events((2, {"n": 2})), capacity=8)
    assert await store.read_events("s1", "x", 0) == StoredEvents(tuple(events((1, {"n": 1}), (2, {"n": 2}))), False)
    assert await store.read_events("s1", "x", 2) == StoredEvents((), False)
    assert await store.read_events("s1", "x", 3) is None  # never sent
    assert await store.read_events("s1", "y", 0) is None  # no such stream
    assert await store.read_events("s2", "x", 0) is None  # another session's
    await store.append_events("s1", "x", events((3, {"n": 3})), capacity=8, ended_after=3)
    assert await store.read_events("s1", "x", 1) == StoredEvents(tuple(events((2, {"n": 2}), (3, {"n": 3}))), True)


async def test_an_opened_copy_with_nothing_sent_resumes_from_the_priming_event(store) -> None:
    await open_session(store)
    await store.append_events("s1", "x", [], capacity=8, opening=True)
    assert await store.read_events("s1", "x", 0) == StoredEvents((), False)
    await store.append_events("s1", "x", [], capacity=8, ended_after=0)  # ended with nothing sent
    assert await store.read_events("s1", "x", 0) == StoredEvents((), True)


async def test_a_copy_keeps_the_last_capacity_events_as_a_replay_buffer_does(store) -> None:
    await open_session(store)
    await store.append_events("s1", "x", events(*[(n, n) for n in range(1, 6)]), capacity=3, opening=True)
    assert await store.read_events("s1", "x", 1) is None  # event 2 was evicted: resuming after 1 would lose it
    assert await store.read_events("s1", "x", 2) == StoredEvents(tuple(events((3, 3), (4, 4), (5, 5))), False)
    assert await store.follow_events("s1", "x", 0, 0.01) is None  # a follower that fell behind the window


async def test_a_copy_that_starts_after_evicted_events_refuses_positions_before_it(store) -> None:
    await open_session(store)
    await store.append_events("s1", "x", events((4, 4), (5, 5)), capacity=3, opening=True)
    assert await store.read_events("s1", "x", 2) is None
    assert await store.read_events("s1", "x", 3) == StoredEvents(tuple(events((4, 4), (5, 5))), False)


async def test_follow_waits_for_the_next_events(store) -> None:
    await open_session(store)
    await store.append_events("s1", "x", events((1, "a")), capacity=8, opening=True)
    assert await store.follow_events("s1", "x", 1, 0.05) == StoredEvents((), False)  # nothing within the wait
    waiting = asyncio.ensure_future(store.follow_events("s1", "x", 1, 5))
    await until(lambda: following(store), "the follower waits")
    await store.append_events("s1", "x", events((2, "b")), capacity=8, ended_after=2)
    assert await asyncio.wait_for(waiting, 10) == StoredEvents(tuple(events((2, "b"))), True)


async def test_a_dropped_copy_and_a_deleted_session_leave_nothing_to_resume(store) -> None:
    await open_session(store)
    await store.append_events("s1", "x", events((1, "a")), capacity=8, opening=True)
    await store.append_events("s1", "y", events((1, "a")), capacity=8, opening=True)
    await store.drop_stream("s1", "x")
    assert await store.read_events("s1", "x", 0) is None
    await store.append_events("s1", "x", events((2, "b")), capacity=8)  # a late append does not revive it
    assert await store.read_events("s1", "x", 1) is None
    await store.delete_session("s1")
    assert await store.read_events("s1", "y", 0) is None
    assert await store.follow_events("s1", "y", 1, 0.05) is None


async def test_a_copy_is_not_made_for_a_session_that_is_gone(store) -> None:
    await store.append_events("gone", "x", events((1, "a")), capacity=8, opening=True)
    assert await store.read_events("gone", "x", 0) is None


async def test_only_the_last_finished_streams_of_a_session_are_kept(store) -> None:
    await open_session(store)
    for n in range(FINISHED_STREAMS_KEPT + 1):
        await store.append_events("s1", f"x{n}", events((1, n)), capacity=8, opening=True, ended_after=1)
    await store.append_events("s1", "open", events((1, "a")), capacity=8, opening=True)  # not ended: kept
    assert await store.read_events("s1", "x0", 0) is None
    assert await store.read_events("s1", "x1", 0) == StoredEvents(tuple(events((1, 1))), True)
    assert await store.read_events("s1", "open", 1) == StoredEvents((), False)


async def test_an_opened_copy_follows_its_first_event(store) -> None:
    await open_session(store)
    await store.append_events("s1", "x", [], capacity=8, opening=True)
    assert await store.follow_events("s1", "x", 0, 0.05) == StoredEvents((), False)
    waiting = asyncio.ensure_future(store.follow_events("s1", "x", 0, 5))
    await until(lambda: following(store), "the follower waits")
    await store.append_events("s1", "x", events((1, "a")), capacity=8)
    assert await asyncio.wait_for(waiting, 10) == StoredEvents(tuple(events((1, "a"))), False)
    assert await store.read_events("s1", "x", 0) == StoredEvents(tuple(events((1, "a"))), False)


async def test_a_save_writes_its_steps_events_onto_the_copy_and_a_fenced_one_writes_none(store) -> None:
    """docs/design/takeover.md#a-bridged-step-is-one-fenced-store-write: a step's events ride on its round's save,
    the copy's opening included; a save by a replica that does not hold the round's lease writes neither the record
    nor the events; the round's end writes its result and drops the round in one step."""
    await open_session(store)
    first = StreamAppend("s1", "x", tuple(events((1, {"n": 1}))), capacity=8, opening=True)
    assert await store.put_round(pending("b1", "s1"), ("A", 5), copy=first)
    assert await store.read_events("s1", "x", 0) == StoredEvents(first.events, False)
    later = StreamAppend("s1", "x", tuple(events((2, {"n": 2}), (3, {"n": 3}))), capacity=8)
    assert await store.put_round(pending("b1", "s1"), holder="A", copy=later)
    assert await store.read_events("s1", "x", 1) == StoredEvents(later.events, False)
    fenced = StreamAppend("s1", "x", tuple(events((4, {"n": 4}))), capacity=8)
    assert not await store.put_round(pending("b1", "s1"), holder="B", copy=fenced)
    assert await store.read_events("s1", "x", 3) == StoredEvents((), False)
    assert await store.read_events("s1", "x", 4) is None  # never written: not a position to resume from
    # The copy goes on after a save's events as after an append's; the round's end carries its result.
    result = StreamAppend("s1", "x", tuple(events((4, {"n": 4}))), capacity=8, ended_after=4)
    await store.end_round("b1", "A", copy=result)
    assert await store.read_events("s1", "x", 3) == StoredEvents(result.events, True)
    assert await store.get_round("b1") is None and await store.lease_of("b1") == Lease(None)


# The shared memory backend as replicas ---------------------------------------------------------------------------


async def test_replica_stores_share_one_state_and_one_clock() -> None:
    """What one replica's store writes, another's reads at once: sessions, rounds, leases, ownership, copies."""
    clock = FakeClock()
    shared = SharedMemory(clock)
    here, there = shared.replica(), shared.replica()
    assert await here.put_session(record("s1")) == (1, 1)
    assert await there.get_session("s1") == record("s1") and await there.count_sessions("alice") == (1, 1)
    assert await here.put_round(pending("b1", "s1"), ("A", 1), Owners("A", 1, frozenset({"oa:g1"})))
    assert await there.get_round("b1") == pending("b1", "s1") and await there.owner_of("oa:g1") == "A"
    assert not await there.take_lease("b1", "B", 5)  # A's, as seen from there
    await here.append_events("s1", "x", [Event(1, {"n": 1})], capacity=8, opening=True)
    assert await there.read_events("s1", "x", 0) == StoredEvents((Event(1, {"n": 1}),), False)
    await here.hold_tasks({"t1": "alice"}, "A", 1)
    assert await there.task_holder("t1") == Holder("alice", "A")
    clock.now += 1  # A stops renewing: its lease lapses for every replica at once
    assert await there.owner_of("oa:g1") is None and await there.take_lease("b1", "B", 5)
    assert await there.task_holder("t1") is None
    await there.delete_session("s1")
    assert await here.get_session("s1") is None and await here.get_round("b1") is None


async def test_the_local_bus_reaches_one_replica_or_every_replica() -> None:
    bus = SharedMemory().bus
    end = R.End("s1")
    assert not await bus.send("A", end) and not await bus.listens("A")  # nobody listens: lost, as on pub/sub
    a, b = await bus.subscribe("A"), await bus.subscribe("B")
    got_a, got_b = a.messages(), b.messages()
    assert await bus.listens("A") and await bus.send("A", end)
    assert await within(anext(got_a)) == end
    assert await bus.send(None, R.End("s2"))  # to every replica
    assert (await within(anext(got_a))).session_id == (await within(anext(got_b))).session_id == "s2"
    await a.close()
    assert not await bus.listens("A") and await bus.listens("B")
    await b.close()


async def replicas_in_one_process(make_gateway: Any) -> tuple[SharedMemory, Legacy, Legacy]:
    """Two gateways on one SharedMemory, each its own replica with its relay: a client initialized on A, and
    the same session's client on B."""
    shared = SharedMemory()
    a, b = Legacy(await make_gateway(shared.replica())), Legacy(await make_gateway(shared.replica()))
    gw_a, gw_b = a.client.app[GATEWAY], b.client.app[GATEWAY]
    assert gw_a.replica != gw_b.replica and gw_a.relay is not None and gw_b.relay is not None
    await a.initialize(CAPS)
    b.session_id = a.session_id
    return shared, a, b


async def test_an_answer_posted_to_one_replica_reaches_the_round_held_by_the_other(make_gateway, upstream) -> None:
    """docs/design/replicas.md#replicas-relay-through-the-store with both replicas in this process: A's exchange asks
    the client; the answers posted to B reach it through the shared backend's bus, and the round ends with both,
    leaving no ownership behind."""
    upstream.script["tools/call"] = two_rounds
    shared, a, b = await replicas_in_one_process(make_gateway)
    gw_a = a.client.app[GATEWAY]
    resp = await a.post("tools/call", {"name": "t", "arguments": {}})
    await within(a.next_event(resp))  # priming
    _, first = await within(a.next_event(resp))
    _, second = await within(a.next_event(resp))
    keys = [f"oa:{first['id']}", f"oa:{second['id']}", f"oq:{a.session_id}:{a.next_id}"]
    view = shared.replica()
    assert [await view.owner_of(key) for key in keys] == [gw_a.replica] * 3
    assert await b.answer(first["id"], SAMPLED) == 202
    assert await b.answer(second["id"], SAMPLED) == 202
    _, third = await within(a.next_event(resp))
    assert await b.answer(third["id"], SAMPLED) == 202
    _, final = await within(a.next_event(resp))
    assert final["id"] == a.next_id and final["result"]["content"][0]["text"] == "bridged"
    assert upstream.calls("tools/call")[1]["params"]["inputResponses"] == {"a": SAMPLED, "b": SAMPLED}

    async def released() -> bool:
        return [await view.owner_of(key) for key in keys] == [None] * 3 and await view.rounds_of(a.session_id) == []
    await until(released, "answered and ended: no ownership record or round is left")


async def test_a_delete_on_one_replica_ends_the_session_on_the_other(make_gateway, upstream) -> None:
    """docs/design/replicas.md#replicas-relay-through-the-store in one process: B's DELETE goes to every replica
    on the bus; A ends its runtime (its GET stream, the exchange waiting on the client) and answers 404 from then
    on."""
    upstream.script["tools/call"] = two_rounds
    shared, a, b = await replicas_in_one_process(make_gateway)
    listening = await a.client.get("/mcp", headers={**a.headers(), "Accept": "text/event-stream"})
    assert listening.status == 200
    resp = await a.post("tools/call", {"name": "t", "arguments": {}})
    await within(a.next_event(resp))
    await within(a.next_event(resp))  # the client is asked: the exchange waits on A
    assert (await b.client.delete("/mcp", headers=b.headers())).status == 204
    await within(a.events(listening))  # A's standalone stream ends
    assert [m for m in await within(a.events(resp)) if "result" in m] == []  # the request ends without a result
    assert (await a.post("tools/list", {})).status == 404
    assert a.session_id not in a.client.app[GATEWAY].runtimes
    assert await shared.replica().rounds_of(a.session_id) == []
