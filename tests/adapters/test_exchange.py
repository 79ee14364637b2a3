"""The exchange's keeping (adapters.exchange): holds, saves, claims, fencing, the end and the handover of a
bridged round, driven with no event loop and no store (docs/design/replicas.md#replicas-relay-through-the-store,
docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds,
docs/design/takeover.md#sigterm-hands-the-rounds-over,
docs/design/takeover.md#a-bridged-step-is-one-fenced-store-write)."""

from __future__ import annotations

import pytest

from adapters import bridge as B
from adapters import exchange as X
from adapters.records import SessionRecord

REQUEST = "oq:s1:42"
ASK = B.SendToClient({"jsonrpc": "2.0", "id": "g1", "method": "roots/list"})
NOTE = B.SendToClient({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}})
ANSWER_TIMER = B.ArmTimer(B.Timer.CLIENT_ANSWER, 300, 1)
BACKOFF = B.ArmTimer(B.Timer.BACKOFF, 0.05, 1)
POLL = B.ArmTimer(B.Timer.POLL, 0.25, 1)
CALL = B.CallUpstream({})
ROOTS = B.StoreRoots({"roots": []})

RELAYED = X.Store(shares_rounds=True, relayed=True, replica="r1", lease_seconds=10, claim_seconds=300)
SHARED_ONLY = X.Store(shares_rounds=True, relayed=False, replica="r1", lease_seconds=10, claim_seconds=300)
ONE_PROCESS = X.Store(shares_rounds=False, relayed=False, replica="r1", lease_seconds=10, claim_seconds=300)


def keeper(store: X.Store = RELAYED) -> X.Keeper:
    return X.Keeper(store, REQUEST)


def saved(store: X.Store = RELAYED) -> X.Keeper:
    """A keeper whose round asked the client once and was saved."""
    k = keeper(store)
    k.plan([ASK, ANSWER_TIMER], waiting=True, done=False, mirrored=False)
    save = k.save(waiting=True, done=False)
    assert save is not None
    k.written(save.owners)
    return k


@pytest.mark.parametrize(("store", "actions", "waiting", "done", "mirrored", "plan"), [
    # One process: nobody could continue a round, so nothing is saved; a waiting round is still counted.
    (ONE_PROCESS, [ASK, ANSWER_TIMER], True, False, True, X.StepPlan(X.HoldAt.STORE, X.SaveAt.NONE)),
    (ONE_PROCESS, [CALL], False, False, False, X.StepPlan(X.HoldAt.NONE, X.SaveAt.NONE)),
    # A step that only asks and arms timers: its count and its events ride on its save.
    (RELAYED, [ASK, ANSWER_TIMER], True, False, True, X.StepPlan(X.HoldAt.SAVE, X.SaveAt.WITH_COPY)),
    (RELAYED, [ASK, ANSWER_TIMER], True, False, False, X.StepPlan(X.HoldAt.SAVE, X.SaveAt.BEFORE)),
    # Roots stored before the ask: the save goes first, the step's count with it (a refusal undoes all).
    (RELAYED, [ROOTS, ASK, ANSWER_TIMER], True, False, True, X.StepPlan(X.HoldAt.SAVE, X.SaveAt.BEFORE)),
    # A backoff sends nothing: saved after its actions, its count rides on that save (timers only).
    (RELAYED, [BACKOFF], True, False, True, X.StepPlan(X.HoldAt.SAVE, X.SaveAt.AFTER)),
    # A waiting round whose step does more than push and arm first: counted on its own, before the step.
    (RELAYED, [ROOTS, BACKOFF], True, False, True, X.StepPlan(X.HoldAt.STORE, X.SaveAt.AFTER)),
    # Not waiting and never saved: nothing to keep.
    (RELAYED, [CALL], False, False, True, X.StepPlan(X.HoldAt.NONE, X.SaveAt.NONE)),
    # Done: nothing is saved (the answer's step ends the records instead).
    (RELAYED, [B.Finish(None)], False, True, True, X.StepPlan(X.HoldAt.NONE, X.SaveAt.NONE)),
])
def test_a_fresh_rounds_step_is_counted_and_saved_where_the_table_says(store, actions, waiting, done, mirrored,
                                                                         plan) -> None:
    assert keeper(store).plan(actions, waiting=waiting, done=done, mirrored=mirrored) == plan


def test_the_first_save_takes_the_lease_and_carries_the_claims_later_saves_are_fenced() -> None:
    k = keeper()
    k.plan([ASK, ANSWER_TIMER], waiting=True, done=False, mirrored=False)
    first = k.save(waiting=True, done=False)
    claimed = frozenset({"oa:g1", REQUEST})
    assert first == X.SaveRound(("r1", 10), None, X.Ownership("r1", 300, claimed, frozenset()))
    assert k.saved and k.claims == set(claimed)  # claimed once written, not before
    k.written(first.owners)
    assert k.owned == set(claimed) and not k.claims
    # The client answers: its claim is released with the next save, which is fenced on this replica's lease.
    k.answered("g1")
    plan = k.plan([CALL], waiting=False, done=False, mirrored=True)
    assert plan == X.StepPlan(X.HoldAt.NONE, X.SaveAt.AFTER)  # saved after every step once saved (relayed)
    later = k.save(waiting=False, done=False)
    assert later == X.SaveRound(None, "r1", X.Ownership("r1", 300, frozenset(), frozenset({"oa:g1"})))
    k.written(later.owners)
    assert k.owned == {REQUEST}


def test_a_store_other_processes_read_without_relay_saves_only_waiting_rounds_unfenced_and_unclaimed() -> None:
    k = saved(SHARED_ONLY)
    assert k.owned == set()  # one replica owns everything: nobody asks who owns an id
    assert k.plan([CALL], waiting=False, done=False, mirrored=False).save is X.SaveAt.NONE
    assert k.save(waiting=True, done=False) == X.SaveRound(None, None, None)


@pytest.mark.parametrize(("actions", "claims"), [
    ([ASK, ANSWER_TIMER], {"oa:g1", REQUEST}),
    ([POLL], {REQUEST}),  # a task's wait claims the request from its first poll
    ([BACKOFF], set()),  # a backoff renews only a claim the request already has
    ([NOTE], set()),
    ([B.SendToClient({"jsonrpc": "2.0", "id": 7, "method": "ping"})], set()),  # not a gateway id: no key
])
def test_what_a_step_claims(actions, claims) -> None:
    k = keeper()
    k.plan(actions, waiting=True, done=False, mirrored=False)
    assert k.claims == claims


def test_a_waiting_round_renews_the_requests_claim_and_a_new_ask_takes_back_a_release() -> None:
    k = saved()
    k.answered("g1")
    k.plan([BACKOFF], waiting=True, done=False, mirrored=False)
    assert k.claims == {REQUEST} and k.releases == {"oa:g1"}
    k.plan([B.SendToClient({"jsonrpc": "2.0", "id": "g1", "method": "roots/list"})], waiting=True, done=False,
           mirrored=False)
    assert k.releases == set()


def test_an_answer_to_an_id_never_claimed_releases_nothing() -> None:
    k = saved()
    k.answered("g9")
    assert k.releases == set()


def test_a_refused_first_save_leaves_nothing_kept() -> None:
    k = keeper()
    k.plan([ASK], waiting=True, done=False, mirrored=False)
    assert k.save(waiting=True, done=False) is not None
    k.refused()
    assert k.kept is X.Kept.NOTHING and not k.saved
    assert k.end_round(copying=False) == X.EndRound(frozenset(), False, False)  # nothing was written


def test_a_counted_round_ends_with_its_count_and_claims() -> None:
    k = keeper(ONE_PROCESS)
    k.plan([ASK], waiting=True, done=False, mirrored=False)
    k.held()
    assert k.end_round(copying=False) == X.EndRound(frozenset(), True, True)
    assert k.end_round(copying=False) is None  # once


def test_the_answer_ends_a_saved_round_with_its_copy_unless_handed_over() -> None:
    k = saved()
    assert k.carries_answer()
    k.hand_over()
    assert not k.carries_answer()
    end = k.end_round(copying=False)
    assert end == X.EndRound(frozenset({"oa:g1", REQUEST}), False, True)  # the record stays for the next holder
    assert not k.carries_answer() and k.owned == set()


def test_a_lost_lease_leaves_the_ownership_records_to_the_new_holder() -> None:
    k = saved()
    k.hand_over(lost=True)
    assert k.end_round(copying=False) == X.EndRound(frozenset(), False, True)


@pytest.mark.parametrize(("calls", "stage"), [
    (["stop"], X.Stage.STOPPED),
    (["hand_over"], X.Stage.HANDING_OVER),
    (["hand_over", "stop"], X.Stage.HANDED_OVER),
    (["stop", "hand_over"], X.Stage.HANDED_OVER),
])
def test_the_stages(calls, stage) -> None:
    k = keeper()
    for call in calls:
        getattr(k, call)()
    assert k.stage is stage
    assert k.handed_over is ("hand_over" in calls) and k.stopped is ("stop" in calls)


def test_a_takeover_claims_what_the_client_is_still_to_answer_then_saves_fenced() -> None:
    k = keeper()
    owners = k.take_over({"g2": "key", 5: "other"})
    assert owners == X.Ownership("r1", 300, frozenset({"oa:g2", REQUEST}), frozenset())
    k.written(owners)
    assert k.saved and k.save(waiting=True, done=False) == X.SaveRound(None, "r1", None)


def test_the_header_refresh_is_used_once() -> None:
    k = keeper()
    assert not k.refreshes(False)
    assert k.refreshes(True)
    assert not k.refreshes(True)


def test_a_timers_retry_stops_on_an_ended_or_expired_session() -> None:
    record = SessionRecord("s1", "p", "2025-11-25", {}, {}, 0, 0)
    assert X.retry_refused(None, False) == B.Cancelled("session ended")
    assert X.retry_refused(record, True) == B.Cancelled("session expired")
    assert X.retry_refused(record, False) is None


@pytest.mark.parametrize(("token", "level", "method", "inline"), [
    (None, None, "tools/call", True),
    ("p1", None, "tools/call", False),  # progress may stream meanwhile
    (None, "info", "tools/call", False),  # so may request logs
    (None, None, "tasks/result", False),  # it starts by polling its task
])
def test_which_first_rounds_run_in_the_handler(token, level, method, inline) -> None:
    assert X.begins_inline(token, level, method) is inline


ANSWER = B.Finish({"jsonrpc": "2.0", "id": 42, "result": {}})


@pytest.mark.parametrize(("actions", "notified", "answered"), [
    ([ANSWER], False, ANSWER),
    ([B.AbortUpstream(), B.RememberTask({"taskId": "t"}), ANSWER], False, ANSWER),
    ([ANSWER], True, None),  # a notification came first: it goes out before the answer, on a stream
    ([ASK, ANSWER_TIMER], False, None),  # the round asks the client: the exchange goes on
    ([BACKOFF], False, None),
    ([B.SendToClient({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}}), ANSWER], False, None),
])
def test_what_the_handler_answers_after_the_first_round(actions, notified, answered) -> None:
    assert X.answered_inline(actions, notified) == answered


E = X.Ending


@pytest.mark.parametrize(("handed_over", "ending"), [
    # Answered (or failed): the stream ends first; the round's records end after it, off the answer's path.
    (False, (E.CLOSE_STREAM, E.FORGET, E.END_ROUND)),
    # Handed over: the round is let go before the stream ends (the client's reconnection finds no holder here),
    # and the copy of the stream is left open for the replica that continues it.
    (True, (E.END_ROUND, E.LEAVE_COPY_OPEN, E.CLOSE_STREAM, E.FORGET)),
])
def test_the_end_of_an_exchange_in_order(handed_over, ending) -> None:
    k = saved()
    if handed_over:
        k.hand_over()
    assert k.stop() == ending


S, G, T = X.Stage, X.Given, X.Take


@pytest.mark.parametrize(("given", "stage", "first_round", "idle", "done", "taken"), [
    (G.ANSWER, S.RUNNING, False, True, False, T.STEP),  # the exchange's task waits: the handler steps it
    (G.ANSWER, S.RUNNING, False, False, False, T.QUEUE),  # a step is under way: the exchange's task takes it
    (G.ANSWER, S.RUNNING, False, True, True, T.QUEUE),  # the machine is done: its task ends it, not acting on it
    (G.ANSWER, S.HANDING_OVER, False, False, False, T.QUEUE),  # told once the exchange let the round go
    (G.ANSWER, S.HANDED_OVER, False, False, False, T.REFUSE),  # it goes on elsewhere: sent again there
    (G.ANSWER, S.STOPPED, False, False, False, T.IGNORE),  # late
    (G.CANCEL, S.RUNNING, True, False, False, T.INTERRUPT),  # the first round's wait in the handler
    (G.CANCEL, S.RUNNING, False, True, False, T.QUEUE),  # a cancel is the exchange's task's to step
    (G.CANCEL, S.HANDING_OVER, False, False, False, T.QUEUE),
    (G.CANCEL, S.HANDED_OVER, False, False, False, T.REFUSE),  # it follows the round
    (G.CANCEL, S.STOPPED, False, False, False, T.IGNORE),  # the request is over
])
def test_what_an_exchange_does_with_a_clients_answer_or_cancel(given, stage, first_round, idle, done, taken) -> None:
    assert X.take(given, stage, first_round=first_round, idle=idle, done=done) is taken


@pytest.mark.parametrize(("stage", "taken"), [
    (S.RUNNING, T.IGNORE), (S.STOPPED, T.IGNORE), (S.HANDING_OVER, T.REFUSE), (S.HANDED_OVER, T.REFUSE)])
def test_a_message_not_acted_on_is_refused_only_when_its_round_was_handed_over(stage, taken) -> None:
    assert X.not_taken(stage) is taken
