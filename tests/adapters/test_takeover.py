"""The takeover rules (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds): who continues a stored
round, which round a message is for, what a continued round sends upstream again, and where a continued stream's
numbering goes on."""

from __future__ import annotations

from adapters import bridge as B
from adapters import takeover as T
from adapters.records import PendingRound, Phase
from adapters.relay import RelayTo

SAMPLING = {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}


def machine(**limits: float) -> B.BridgeMachine:
    record = PendingRound("b1", "s1", 7, "tools/call", {"name": "t", "arguments": {}})
    ids = iter(f"g{n}" for n in range(100))
    return B.BridgeMachine(record, B.BridgeContext(B.BridgeLimits(**limits), {"sampling": {}}, lambda: next(ids)))


def asked(m: B.BridgeMachine) -> B.BridgeMachine:
    """A machine whose upstream asked two inputs: the client is being asked (as the record is stored)."""
    m.start()
    m.handle(B.UpstreamResult({"resultType": "input_required", "requestState": "opaque-state",
                               "inputRequests": {"a": SAMPLING, "b": SAMPLING}}))
    return m


def test_decide() -> None:
    assert T.decide(None, "me", False) == T.NoRound()
    assert T.decide(T.Lease(None), "me", False) == T.TakeOver()
    assert T.decide(T.Lease("me", 900), "me", False) == T.HeldHere()
    assert T.decide(T.Lease("other", 900), "me", True) == RelayTo("other")
    # A holder that does not listen (killed, or cut off from the store) is waited for until its lease lapses.
    assert T.decide(T.Lease("other", 900), "me", False) == T.WaitFor(0.9 + T.LAPSE_MARGIN_SECONDS)
    assert T.decide(T.Lease("other", -5), "me", False) == T.WaitFor(T.LAPSE_MARGIN_SECONDS)
    assert T.renew_interval(9.0) == 3.0


def test_which_round_a_message_is_for() -> None:
    waiting = asked(machine()).record
    waiting.stream = "s9"
    other = PendingRound("b2", "s1", "7", "tools/call", {}, phase=Phase.UPSTREAM, stream="s8")
    rounds = [other, waiting]
    assert T.round_for_answer(rounds, "g0") is waiting and T.round_for_answer(rounds, "g9") is None
    assert T.round_for_answer(rounds, 0) is None  # the gateway's ids are strings
    assert T.round_for_request(rounds, 7) is waiting and T.round_for_request(rounds, "7") is other
    assert T.round_for_request(rounds, 8) is None
    assert T.round_for_stream(rounds, "s8") is other and T.round_for_stream(rounds, "nope") is None
    other.phase = Phase.DONE
    assert T.round_for_stream(rounds, "s8") is None and T.round_for_request(rounds, "7") is None


def test_what_the_sweep_does_with_a_round_nobody_holds() -> None:
    """docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds: a round whose lease ran out is
    continued by a sweeping replica, in whatever phase it was; one whose request had a credential waits for its
    client (the credential is never stored); one whose session is gone, or that was done, is ended."""
    table = [
        (Phase.UPSTREAM, None, True, T.Sweep.CONTINUE),  # in flight: sent again, completing what was confirmed
        (Phase.AWAITING_CLIENT, None, True, T.Sweep.CONTINUE),  # its timers run again
        (Phase.BACKOFF, None, True, T.Sweep.CONTINUE),
        (Phase.UPSTREAM, True, True, T.Sweep.LEAVE),
        (Phase.AWAITING_CLIENT, True, True, T.Sweep.LEAVE),
        (Phase.UPSTREAM, None, False, T.Sweep.END),
        (Phase.UPSTREAM, True, False, T.Sweep.END),
        (Phase.DONE, None, True, T.Sweep.END),
    ]
    for phase, authorized, live, expected in table:
        record = PendingRound("b1", "s1", 7, "tools/call", {}, phase=phase, authorized=authorized)
        assert T.swept(record, live) is expected, (phase, authorized, live)
    assert T.sweep_interval(10.0) == 10.0


def test_a_round_keeps_that_it_needs_its_clients_token_only_when_that_token_goes_upstream() -> None:
    """docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds: the token is never stored, so a round
    waits for its client's next message only when its upstream calls carry that token; the gateway's own credential,
    or none, any replica sends alike."""
    assert T.token_goes_upstream("Bearer t", forwards_token=True) is True
    assert T.token_goes_upstream("Bearer t", forwards_token=False) is None
    assert T.token_goes_upstream(None, forwards_token=True) is None
    assert T.token_goes_upstream("", forwards_token=True) is None
    assert T.token_goes_upstream(None, forwards_token=False) is None


def test_what_a_continued_round_repeats_upstream() -> None:
    m = asked(machine())
    assert T.repeats(m.record) is T.Repeat.NOTHING
    m.handle(B.ClientAnswered("g0", {"role": "assistant"}))
    m.handle(B.ClientAnswered("g1", {"role": "assistant"}))
    assert m.record.phase is Phase.UPSTREAM and T.repeats(m.record) is T.Repeat.ROUND
    m.record.phase = Phase.BACKOFF
    assert T.repeats(m.record) is T.Repeat.WAITING_RETRY


def test_resume_waiting_for_the_client_rearms_its_timers_and_sends_nothing() -> None:
    m = asked(machine(total_timeout_seconds=100, client_answer_timeout_seconds=30))
    m.handle(B.ClientAnswered("g0", {"role": "assistant"}))  # one of two answered before the crash
    stored = PendingRound.from_dict(m.record.to_dict())
    again = B.BridgeMachine(stored, m.ctx)
    assert again.resume(40.0) == [B.ArmTimer(B.Timer.TOTAL, 60.0, 0), B.ArmTimer(B.Timer.CLIENT_ANSWER, 30, 1)]
    actions = again.handle(B.ClientAnswered("g1", {"role": "assistant", "n": 2}))
    call = next(a for a in actions if isinstance(a, B.CallUpstream))
    assert call.extra == {"inputResponses": {"a": {"role": "assistant"}, "b": {"role": "assistant", "n": 2}},
                          "requestState": "opaque-state"}


def test_resume_in_flight_or_backing_off_sends_the_stored_round_again_byte_for_byte() -> None:
    m = asked(machine())
    m.handle(B.ClientAnswered("g0", {"role": "assistant"}))
    sent = m.handle(B.ClientAnswered("g1", {"role": "assistant"}))
    first = next(a for a in sent if isinstance(a, B.CallUpstream))
    again = B.BridgeMachine(PendingRound.from_dict(m.record.to_dict()), m.ctx)
    resumed = again.resume(1.0)
    assert resumed[1] == first and resumed[1].extra["requestState"] == "opaque-state"
    backing = B.BridgeMachine(PendingRound.from_dict({**m.record.to_dict(), "phase": "backoff"}), m.ctx)
    assert isinstance(backing.resume(1.0)[1], B.CallUpstream) and backing.record.phase is Phase.UPSTREAM


def test_resume_past_the_total_limit_ends_the_request() -> None:
    m = asked(machine(total_timeout_seconds=10))
    actions = B.BridgeMachine(m.record, m.ctx).resume(10.5)
    assert len(actions) == 1 and isinstance(actions[0], B.Finish)
    assert actions[0].message["error"]["data"] == {"limit": "total_timeout_seconds", "value": 10}
    assert B.BridgeMachine(m.record, m.ctx).resume(0) == []  # ended: nothing more


def test_resume_asks_again_only_what_the_client_never_received() -> None:
    m = asked(machine(client_answer_timeout_seconds=30))
    again = B.BridgeMachine(PendingRound.from_dict(m.record.to_dict()), m.ctx)
    actions = again.resume(1.0, unsent={"g1"})
    asks = [a.message for a in actions if isinstance(a, B.SendToClient)]
    assert asks == [{"jsonrpc": "2.0", "id": "g1", "method": "sampling/createMessage", "params": SAMPLING["params"]}]
    assert again.record.outstanding == {"g0": "a", "g1": "b"}  # the same ids: an answer to either still counts


def resent_round() -> B.BridgeMachine:
    """A round answered by its client and in flight upstream when its replica died, continued by another."""
    m = asked(machine())
    m.handle(B.ClientAnswered("g0", {"role": "assistant"}))
    m.handle(B.ClientAnswered("g1", {"role": "assistant"}))
    again = B.BridgeMachine(PendingRound.from_dict(m.record.to_dict()), m.ctx)
    again.resume(1.0)
    return again


def test_an_error_answering_a_resent_round_reports_its_outcome_unknown() -> None:
    """The upstream may have acted on the round's first send (issue #38, 5): an error answering the resend, such
    as a used confirmation refused, does not tell the client the round failed."""
    m = resent_round()
    assert m.record.resent is True and PendingRound.from_dict(m.record.to_dict()).resent is True  # stored
    refused = {"code": -32602, "message": "this confirmation was already used"}
    [finish] = m.handle(B.UpstreamError(refused))
    assert isinstance(finish, B.Finish) and finish.message is not None
    error = finish.message["error"]
    assert error["code"] == -32603 and "outcome of the resent round is unknown" in error["message"]
    assert error["data"] == {"outcome": "unknown", "upstreamError": refused}


def test_only_a_resent_rounds_error_is_reported_unknown() -> None:
    """A round asked of the client, a waiting retry, or the round after a resend answered normally: an upstream
    error there is the upstream's word on a round it saw once, passed on as it is."""
    refused = {"code": -32602, "message": "bad"}
    fresh = asked(machine())
    fresh.handle(B.ClientAnswered("g0", {"role": "assistant"}))
    fresh.handle(B.ClientAnswered("g1", {"role": "assistant"}))
    assert fresh.handle(B.UpstreamError(refused))[0].message["error"] == refused  # type: ignore[union-attr]
    backing = asked(machine())
    backing.record.phase = Phase.BACKOFF
    waiting = B.BridgeMachine(PendingRound.from_dict(backing.record.to_dict()), backing.ctx)
    waiting.resume(1.0)
    assert waiting.record.resent is None
    assert waiting.handle(B.UpstreamError(refused))[0].message["error"] == refused  # type: ignore[union-attr]
    m = resent_round()
    m.handle(B.UpstreamResult({"resultType": "input_required", "requestState": "s2", "inputRequests": {}}))
    assert m.record.resent is None and m.record.phase is Phase.BACKOFF
    m.handle(B.TimerFired(B.Timer.BACKOFF, m.record.round))
    assert m.handle(B.UpstreamError(refused))[0].message["error"] == refused  # type: ignore[union-attr]


# --- the order of a takeover (adapters.takeover.Takeover), event by event, with no event loop -----------------------
ROUND = PendingRound("b1", "s1", 7, "tools/call", {"name": "t", "arguments": {}}, phase=Phase.AWAITING_CLIENT)
FRESH = PendingRound("b1", "s1", 7, "tools/call", {"name": "t", "arguments": {}}, phase=Phase.AWAITING_CLIENT,
                     round=1)
ENDED = PendingRound("b1", "s1", 7, "tools/call", {"name": "t", "arguments": {}}, phase=Phase.DONE)


def pursuing(**ctx) -> T.Takeover:
    """A client's message whose round was found: its lease is being read."""
    m = T.Takeover(T.TakeoverContext("me", **ctx))
    assert m.start() == [T.LookUpRound()] and m.stage is T.Stage.LOOK
    assert m.handle(T.RoundFound(ROUND)) == [T.ReadLease("b1")] and m.stage is T.Stage.LEASE
    return m


def claiming(**ctx) -> T.Takeover:
    """Nobody holds the lease: it is being claimed."""
    m = pursuing(**ctx)
    assert m.handle(T.LeaseRead(T.Lease(None))) == [T.Claim("b1")] and m.stage is T.Stage.CLAIM
    return m


def test_no_round_waits_for_the_message() -> None:
    m = T.Takeover(T.TakeoverContext("me"))
    m.start()
    assert m.handle(T.RoundFound(None)) == [T.Settle()] and m.done


def test_a_live_holder_is_passed_the_message() -> None:
    m = pursuing()
    assert m.handle(T.LeaseRead(T.Lease("other", 900))) == [T.AskListens("other")] and m.stage is T.Stage.LISTENS
    assert m.handle(T.HolderListens(True)) == [T.PassOn("other")] and m.done


def test_a_dead_holders_lease_is_waited_for_then_the_round_looked_up_again() -> None:
    m = pursuing()
    m.handle(T.LeaseRead(T.Lease("other", 900)))
    assert m.handle(T.HolderListens(False)) == [T.WaitLapse(0.9 + T.LAPSE_MARGIN_SECONDS)] and m.stage is T.Stage.WAIT
    assert m.handle(T.Waited()) == [T.LookUpRound()] and m.stage is T.Stage.LOOK


def test_a_holder_alive_but_never_listening_leaves_the_message_after_the_last_lookup() -> None:
    m = T.Takeover(T.TakeoverContext("me"))
    actions = m.start()
    for _ in range(T.MAX_LOOKUPS):
        assert actions == [T.LookUpRound()]
        m.handle(T.RoundFound(ROUND))
        m.handle(T.LeaseRead(T.Lease("other", 900)))  # it renews its lease...
        m.handle(T.HolderListens(False))  # ...without listening
        actions = m.handle(T.Waited())
    assert actions == [T.Settle()] and m.done


def test_the_lease_held_here_delivers_here_or_once_the_claim_under_way_ends() -> None:
    m = pursuing()
    assert m.handle(T.LeaseRead(T.Lease("me", 900))) == [T.Deliver(ROUND)] and m.done
    for runs_here in (True, False):  # held here: delivered to whatever runs it once its claim settled
        m = pursuing()
        assert m.handle(T.LeaseRead(T.Lease("me", 900), claiming_here=True)) == [T.JoinClaim("b1")]
        assert m.stage is T.Stage.JOIN_HELD and m.handle(T.ClaimJoined(runs_here)) == [T.Deliver(ROUND)]


def test_a_lapsed_lease_is_claimed_loaded_and_the_round_run_here() -> None:
    m = claiming(after=12)
    assert m.handle(T.Claimed(True)) == [T.LoadRound("b1")] and m.stage is T.Stage.LOAD
    assert m.handle(T.Loaded(FRESH)) == [T.RunHere(FRESH, 12), T.Release("b1"), T.Deliver(ROUND)] and m.done


def test_a_lost_claim_is_released_and_the_round_looked_up_again() -> None:
    m = claiming()
    assert m.handle(T.Claimed(False)) == [T.Release("b1"), T.LookUpRound()] and m.stage is T.Stage.LOOK
    assert m.handle(T.RoundFound(ROUND)) == [T.ReadLease("b1")]
    m.handle(T.LeaseRead(T.Lease("winner", 900)))
    assert m.handle(T.HolderListens(True)) == [T.PassOn("winner")]  # the winner runs it now


def test_a_claimed_round_that_ended_or_is_cancelled_is_ended_never_continued() -> None:
    for fresh, ctx in ((None, {}), (ENDED, {}), (FRESH, {"end": True})):
        m = claiming(**ctx)
        m.handle(T.Claimed(True))
        assert m.handle(T.Loaded(fresh)) == [T.EndRound(ROUND), T.Release("b1"), T.LookUpRound()]
        assert m.handle(T.RoundFound(None)) == [T.Settle()]


def test_a_claim_under_way_here_is_joined() -> None:
    m = pursuing()
    assert m.handle(T.LeaseRead(T.Lease(None), claiming_here=True)) == [T.JoinClaim("b1")] and m.stage is T.Stage.JOIN
    assert m.handle(T.ClaimJoined(True)) == [T.Deliver(ROUND)]
    m = pursuing()
    m.handle(T.LeaseRead(T.Lease(None), claiming_here=True))
    assert m.handle(T.ClaimJoined(False)) == [T.LookUpRound()]  # it ended without running the round here


def test_a_stopping_replica_refuses_to_take_a_round_over() -> None:
    m = pursuing()
    assert m.handle(T.LeaseRead(T.Lease(None), closing=True)) == [T.Refuse("b1")] and m.done


def test_the_sweep_claims_its_orphan_once() -> None:
    sweep = T.TakeoverContext("me", lookups=0)
    m = T.Takeover(sweep)
    assert m.claim(ROUND, False) == [T.Claim("b1")]
    m.handle(T.Claimed(True))
    assert m.handle(T.Loaded(FRESH)) == [T.RunHere(FRESH, 0), T.Release("b1"), T.Deliver(ROUND)]
    m = T.Takeover(sweep)
    m.claim(ROUND, False)
    assert m.handle(T.Claimed(False)) == [T.Release("b1"), T.Settle()]  # another replica won: not looked up again
    m = T.Takeover(sweep)
    m.claim(ROUND, False)
    m.handle(T.Claimed(True))
    assert m.handle(T.Loaded(ENDED)) == [T.EndRound(ROUND), T.Release("b1"), T.Settle()]
    m = T.Takeover(sweep)
    assert m.claim(ROUND, True) == [T.JoinClaim("b1")]  # a client's message is taking it over here
    assert m.handle(T.ClaimJoined(True)) == [T.Deliver(ROUND)]
    m = T.Takeover(sweep)
    m.claim(ROUND, True)
    assert m.handle(T.ClaimJoined(False)) == [T.Settle()]


def test_takeover_events_out_of_stage_are_ignored() -> None:
    m = T.Takeover(T.TakeoverContext("me"))
    assert m.handle(T.RoundFound(ROUND)) == [] and m.handle(T.Claimed(True)) == []  # not started
    m = claiming()
    for event in (T.RoundFound(ROUND), T.LeaseRead(T.Lease(None)), T.HolderListens(True), T.ClaimJoined(True),
                  T.Loaded(FRESH), T.Waited()):
        assert m.handle(event) == []
    assert m.stage is T.Stage.CLAIM and m.start() == [] and m.claim(ROUND, False) == []
    m = pursuing()
    m.handle(T.RoundFound(None))  # ignored while reading the lease
    assert m.stage is T.Stage.LEASE


# --- a relayed message kept until its round acted on it (adapters.takeover.Keeping) ---------------------------------
def test_keep_attempts_outlast_a_lease() -> None:
    assert T.keep_attempts(9.0, 3.0) == 5 and T.keep_attempts(10.0, 3.0) == 6


def test_an_acknowledged_message_is_kept() -> None:
    k = T.Keeping(3)
    assert k.start(True) == [T.AwaitAck()]
    assert k.handle(T.AckWord(True)) == [T.Kept()] and k.step is T.KeepStep.DONE
    assert k.handle(T.AckWord(True)) == []


def test_without_the_owners_word_the_message_is_delivered_by_its_round() -> None:
    for word in (None, False):  # no word in time, or "not held here"
        k = T.Keeping(3)
        k.start(True)
        assert k.handle(T.AckWord(word)) == [T.DeliverByRound()]
        assert k.handle(T.Delivered(None)) == [T.Kept()]
    k = T.Keeping(3)
    assert k.start(False) == [T.DeliverByRound()]  # no live owner took it: straight to its round


def test_a_live_holder_is_relayed_to_again_until_the_attempts_run_out() -> None:
    k = T.Keeping(2)
    k.start(True)
    k.handle(T.AckWord(None))
    assert k.handle(T.Delivered("holder")) == [T.RelayAgain("holder")]
    assert k.handle(T.RelayedAgain(True)) == [T.AwaitAck()]
    k.handle(T.AckWord(None))
    assert k.handle(T.Delivered("holder")) == [T.RelayAgain("holder")]
    assert k.handle(T.RelayedAgain(True)) == [T.NotKept("holder")] and k.step is T.KeepStep.DONE
    k = T.Keeping(2)
    k.start(False)
    k.handle(T.Delivered("holder"))
    assert k.handle(T.RelayedAgain(False)) == [T.DeliverByRound()]  # it stopped listening: its round again
    assert k.handle(T.Delivered(None)) == [T.Kept()]


def test_keeping_events_out_of_step_are_ignored() -> None:
    k = T.Keeping(2)
    k.start(True)
    assert k.handle(T.Delivered(None)) == [] and k.handle(T.RelayedAgain(True)) == [] and k.step is T.KeepStep.ACK
