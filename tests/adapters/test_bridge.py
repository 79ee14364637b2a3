"""The MRTR bridge machine, driven event by event with no event loop (2026-07-28 basic/patterns
§Multi Round-Trip Requests; docs/design/errors.md#bridge-limits-have-a-code-of-their-own,
docs/design/bridge.md#a-missing-capability-is-refused-before-anything-is-sent,
docs/design/bridge.md#a-clients-error-answer-ends-the-bridge,
docs/design/bridge.md#url-elicitation-and-waiting-rounds)."""

from __future__ import annotations

import itertools

import pytest

from adapters import bridge as B
from adapters.records import PendingRound
from tests import schema

ALL_CAPS = {"sampling": {"tools": {}}, "elicitation": {"form": {}, "url": {}}, "roots": {"listChanged": True}}
SAMPLING = {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}
FORM = {"method": "elicitation/create", "params": {"mode": "form", "message": "ok?", "requestedSchema": {
    "type": "object", "properties": {"confirm": {"type": "boolean"}}}}}
URL = {"method": "elicitation/create", "params": {"mode": "url", "message": "open", "url": "https://x/connect/1"}}
ROOTS = {"method": "roots/list", "params": {}}
DONE = {"resultType": "complete", "content": [{"type": "text", "text": "done"}]}
SAMPLED = {"role": "assistant", "content": {"type": "text", "text": "t"}, "model": "m"}


def ir(requests=None, state=None):
    out = {"resultType": "input_required"}
    if requests is not None:
        out["inputRequests"] = requests
    if state is not None:
        out["requestState"] = state
    return out


def machine(caps=ALL_CAPS, limits=B.BridgeLimits(), method="tools/call", **ctx):
    counter = itertools.count(1)
    record = PendingRound("b1", "s1", 42, method, {"name": "t", "arguments": {"a": 1}})
    m = B.BridgeMachine(record, B.BridgeContext(limits, caps, lambda: f"g{next(counter)}", **ctx))
    assert m.start() == [B.ArmTimer(B.Timer.TOTAL, limits.total_timeout_seconds, 0), B.CallUpstream({})]
    return m


def only(actions, kind):
    return [a for a in actions if isinstance(a, kind)]


def final(actions):
    (finish,) = only(actions, B.Finish)
    return finish.message


def test_complete_on_first_answer() -> None:
    m = machine()
    message = final(m.handle(B.UpstreamResult(DONE)))
    assert message == {"jsonrpc": "2.0", "id": 42, "result": {"content": DONE["content"]}} and m.done
    assert m.handle(B.UpstreamResult(DONE)) == []  # nothing after the end


def test_two_sampling_rounds_each_retry_carries_this_rounds_answers_and_the_state() -> None:
    m = machine()
    state1, state2 = "st\u00e9\u00e0te-1==", "state-2"
    actions = m.handle(B.UpstreamResult(ir({"pick_files": SAMPLING}, state1)))
    (send,) = only(actions, B.SendToClient)
    assert send.message == {"jsonrpc": "2.0", "id": "g1", "method": "sampling/createMessage",
                            "params": SAMPLING["params"]}
    schema.check("2025-11-25", send.message)
    assert only(actions, B.ArmTimer) == [B.ArmTimer(B.Timer.CLIENT_ANSWER, 300.0, 1)]
    (retry,) = m.handle(B.ClientAnswered("g1", SAMPLED))
    assert retry == B.CallUpstream({"inputResponses": {"pick_files": SAMPLED}, "requestState": state1})
    assert retry.extra["requestState"] is state1
    actions = m.handle(B.UpstreamResult(ir({"summary": SAMPLING}, state2)))
    (send,) = only(actions, B.SendToClient)
    assert send.message["id"] == "g2"
    (retry,) = m.handle(B.ClientAnswered("g2", SAMPLED))
    assert retry.extra == {"inputResponses": {"summary": SAMPLED}, "requestState": state2}  # not round 1's
    assert final(m.handle(B.UpstreamResult(DONE)))["result"]["content"] == DONE["content"]


def test_all_input_requests_are_sent_at_once_and_retry_waits_for_every_answer() -> None:
    m = machine()
    actions = m.handle(B.UpstreamResult(ir({"a": SAMPLING, "b": FORM, "c": ROOTS})))
    sends = only(actions, B.SendToClient)
    assert [s.message["method"] for s in sends] == ["sampling/createMessage", "elicitation/create", "roots/list"]
    assert len({s.message["id"] for s in sends}) == 3
    assert m.handle(B.ClientAnswered("g2", {"action": "accept", "content": {"confirm": True}, "_meta": {"x": 1}})) == []
    assert m.handle(B.ClientAnswered("g9", SAMPLED)) == []  # unknown id: ignored
    assert only(m.handle(B.ClientAnswered("g3", {"roots": []})), B.StoreRoots) == [B.StoreRoots({"roots": []})]
    (retry,) = m.handle(B.ClientAnswered("g1", SAMPLED))
    assert retry.extra == {"inputResponses": {"a": SAMPLED, "b": {"action": "accept", "content": {"confirm": True}},
                                              "c": {"roots": []}}}  # no requestState: none was sent
    assert m.handle(B.ClientAnswered("g1", SAMPLED)) == []  # duplicate answer


def test_state_only_rounds_back_off_then_retry_with_only_the_state() -> None:
    m = machine()
    delays = []
    for _ in range(3):
        actions = m.handle(B.UpstreamResult(ir(state="s")))
        (timer,) = actions
        assert timer.name == "backoff"
        delays.append(timer.seconds)
        assert m.handle(B.TimerFired(B.Timer.BACKOFF, timer.round - 1)) == []  # stale round
        assert m.handle(B.TimerFired(B.Timer.BACKOFF, timer.round)) == [B.CallUpstream({"requestState": "s"})]
    assert delays == [0.05, 0.1, 0.2]


@pytest.mark.parametrize("limits,result,limit", [
    (B.BridgeLimits(max_rounds=1), None, "max_rounds"),
    (B.BridgeLimits(max_input_requests_per_round=1), ir({"a": SAMPLING, "b": SAMPLING}),
     "max_input_requests_per_round"),
])
def test_limits_end_the_bridge_with_an_error_naming_the_limit(limits, result, limit) -> None:
    m = machine(limits=limits)
    if result is None:
        m.handle(B.UpstreamResult(ir({"a": SAMPLING}, "s")))
        m.handle(B.ClientAnswered("g1", SAMPLED))
        result = ir({"b": SAMPLING}, "s")
    message = final(m.handle(B.UpstreamResult(result)))
    assert message["error"]["data"]["limit"] == limit and limit in message["error"]["message"]
    schema.check("2025-11-25", message)


def test_client_answer_timeout_cancels_outstanding_requests() -> None:
    m = machine(limits=B.BridgeLimits(client_answer_timeout_seconds=7))
    m.handle(B.UpstreamResult(ir({"a": SAMPLING, "b": ROOTS})))
    m.handle(B.ClientAnswered("g1", SAMPLED))
    actions = m.handle(B.TimerFired(B.Timer.CLIENT_ANSWER, 1))
    cancels = [a.message for a in only(actions, B.SendToClient)]
    assert cancels == [{"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": "g2", "reason": "the original request ended"}}]
    assert final(actions)["error"]["data"] == {"limit": "client_answer_timeout_seconds", "value": 7}


def test_total_timeout_aborts_upstream() -> None:
    m = machine()
    actions = m.handle(B.TimerFired(B.Timer.TOTAL, 0))
    assert only(actions, B.AbortUpstream) and final(actions)["error"]["data"]["limit"] == "total_timeout_seconds"


@pytest.mark.parametrize("caps,request_,missing", [
    ({}, SAMPLING, "sampling"),
    ({"sampling": {}}, {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 1, "tools": []}},
     "sampling.tools"),
    ({"sampling": {}}, FORM, "elicitation"),
    ({"elicitation": {}}, URL, "elicitation.url"),
    ({"elicitation": {"url": {}}}, FORM, "elicitation.form"),
    ({"sampling": {}}, ROOTS, "roots"),
])
def test_capability_gating_never_sends_undeclared_requests(caps, request_, missing) -> None:
    m = machine(caps=caps)
    actions = m.handle(B.UpstreamResult(ir({"k": request_, "other": ROOTS if missing != "roots" else SAMPLING})))
    assert not only(actions, B.SendToClient)
    error = final(actions)["error"]
    assert error["code"] == -32021 and f"'{missing}'" in error["message"]


@pytest.mark.parametrize("caps,request_", [({"elicitation": {}}, FORM), ({"sampling": {"tools": {}}}, SAMPLING)])
def test_declared_capabilities_pass_the_gate(caps, request_) -> None:
    assert only(machine(caps=caps).handle(B.UpstreamResult(ir({"k": request_}))), B.SendToClient)


def test_a_client_error_answer_ends_the_bridge_and_cancels_the_rest() -> None:
    m = machine()
    m.handle(B.UpstreamResult(ir({"a": SAMPLING, "b": SAMPLING})))
    actions = m.handle(B.ClientAnswered("g1", error={"code": -1, "message": "User rejected sampling"}))
    assert [a.message["params"]["requestId"] for a in only(actions, B.SendToClient)] == ["g2"]
    error = final(actions)["error"]
    assert error["code"] == -1 and "User rejected sampling" in error["message"] and error["data"]["inputKey"] == "a"
    assert not only(actions, B.CallUpstream)


def test_url_elicitation_mints_an_id_and_completes_it_at_the_end() -> None:
    m = machine()
    (send, _timer) = m.handle(B.UpstreamResult(ir({"connect": URL}, "s1")))
    eid = send.message["params"]["elicitationId"]
    assert eid == "g1" and send.message["id"] == "g2"
    schema.check("2025-11-25", send.message)
    assert m.handle(B.ClientAnswered("g2", {"action": "accept"})) == [
        B.CallUpstream({"inputResponses": {"connect": {"action": "accept"}}, "requestState": "s1"})]
    # The upstream asks for the same URL again: the user is not re-prompted; the gateway backs off instead.
    (timer,) = m.handle(B.UpstreamResult(ir({"connect": URL}, "s2")))
    assert timer.name == "backoff"
    assert m.handle(B.TimerFired(B.Timer.BACKOFF, 2)) == [
        B.CallUpstream({"inputResponses": {"connect": {"action": "accept"}}, "requestState": "s2"})]
    actions = m.handle(B.UpstreamResult(DONE))
    notes = [a.message for a in only(actions, B.SendToClient)]
    assert notes == [{"jsonrpc": "2.0", "method": "notifications/elicitation/complete",
                      "params": {"elicitationId": eid}}]
    schema.check("2025-11-25", notes[0])
    assert actions.index(only(actions, B.SendToClient)[0]) < actions.index(only(actions, B.Finish)[0])


@pytest.mark.parametrize("waiting", [ir(state="s"), ir({"connect": URL}, "s")], ids=["state-only", "same-url"])
def test_waiting_for_an_accepted_url_is_bounded_by_the_total_timeout_not_max_rounds(waiting) -> None:
    # docs/design/bridge.md#url-elicitation-and-waiting-rounds: after a URL accept the server may keep answering with
    # requestState only (or the same URL) until the out-of-band step is done; those rounds ask nothing of the client, so
    # they must not exhaust max_rounds (10 rounds of capped backoff were ~5.5 s of user time).
    m = machine()
    m.handle(B.UpstreamResult(ir({"connect": URL}, "s1")))
    m.handle(B.ClientAnswered("g2", {"action": "accept"}))
    waited = 0.0
    for _ in range(20):
        actions = m.handle(B.UpstreamResult(waiting))
        assert not only(actions, B.Finish), actions
        (timer,) = actions
        assert timer.name == "backoff"
        waited += timer.seconds
        (retry,) = m.handle(B.TimerFired(B.Timer.BACKOFF, timer.round))
        assert retry.extra["requestState"] == "s" and not m.done
    assert waited > 10.0 and timer.seconds == B.BridgeLimits().state_only_backoff_max_seconds
    assert final(m.handle(B.TimerFired(B.Timer.TOTAL, 0)))["error"]["data"]["limit"] == "total_timeout_seconds"


def test_a_long_wait_keeps_the_capped_backoff() -> None:
    m = machine()
    m.record.state_only_rounds = 5000  # a server answering requestState only for a long time
    (timer,) = m.handle(B.UpstreamResult(ir(state="s")))
    assert timer.seconds == B.BridgeLimits().state_only_backoff_max_seconds


def test_input_rounds_after_waiting_rounds_still_count_against_max_rounds() -> None:
    m = machine(limits=B.BridgeLimits(max_rounds=2))
    for key in ("a", "b"):
        m.handle(B.UpstreamResult(ir({key: SAMPLING}, "s")))
        (_retry,) = m.handle(B.ClientAnswered(f"g{ord(key) - 96}", SAMPLED))
        (timer,) = m.handle(B.UpstreamResult(ir(state="s")))  # a waiting round in between: not counted
        m.handle(B.TimerFired(B.Timer.BACKOFF, timer.round))
    message = final(m.handle(B.UpstreamResult(ir({"c": SAMPLING}, "s"))))
    assert message["error"]["data"] == {"limit": "max_rounds", "value": 2}


def test_declined_url_elicitation_sends_no_completion() -> None:
    m = machine()
    m.handle(B.UpstreamResult(ir({"connect": URL}, "s1")))
    m.handle(B.ClientAnswered("g2", {"action": "decline"}))
    assert not only(m.handle(B.UpstreamResult(DONE)), B.SendToClient)


def test_cached_roots_answer_without_asking_the_client() -> None:
    m = machine(cached_roots={"roots": [{"uri": "file:///w"}]})
    assert m.handle(B.UpstreamResult(ir({"r": ROOTS}, "s"))) == [
        B.CallUpstream({"inputResponses": {"r": {"roots": [{"uri": "file:///w"}]}}, "requestState": "s"})]


def test_roots_are_not_cached_for_clients_without_list_changed() -> None:
    m = machine(caps={"roots": {}}, cached_roots={"roots": []})
    assert only(m.handle(B.UpstreamResult(ir({"r": ROOTS}))), B.SendToClient)


def test_cancel_mid_bridge() -> None:
    m = machine()
    m.handle(B.UpstreamResult(ir({"a": SAMPLING})))
    actions = m.handle(B.Cancelled("user"))
    assert only(actions, B.AbortUpstream) and final(actions) is None
    assert only(actions, B.SendToClient)[0].message["method"] == "notifications/cancelled"
    assert m.handle(B.ClientAnswered("g1", SAMPLED)) == []


@pytest.mark.parametrize("event,code", [
    (B.UpstreamError({"code": -32602, "message": "bad"}), -32602),
    (B.UpstreamError({"code": -32020, "message": "header"}), -32603),
    (B.UpstreamResult({"resultType": "input_required", "requestState": "s"}), -32603),  # on tools/list
])
def test_upstream_errors_and_invalid_answers(event, code) -> None:
    m = machine(method="tools/list")
    assert final(m.handle(event))["error"]["code"] == code


def test_pending_limit_per_session() -> None:
    limits = B.BridgeLimits(max_pending_per_session=2)
    assert B.admit({"a"}, "b", limits) is None
    assert B.admit({"a", "b"}, "c", limits).data == {"limit": "max_pending_per_session", "value": 2}
    duplicate = B.admit({"a"}, "a", limits)
    assert duplicate.code == -32600 and "already in flight" in duplicate.message


def test_the_record_round_trips_mid_round_and_another_machine_continues() -> None:
    m = machine()
    m.handle(B.UpstreamResult(ir({"a": SAMPLING, "b": SAMPLING}, "s")))
    m.handle(B.ClientAnswered("g1", SAMPLED))
    data = m.record.to_dict()
    other = B.BridgeMachine(PendingRound.from_dict(data), m.ctx)
    assert other.handle(B.ClientAnswered("g2", SAMPLED)) == [
        B.CallUpstream({"inputResponses": {"a": SAMPLED, "b": SAMPLED}, "requestState": "s"})]


@pytest.mark.parametrize("error", ["no", [1, 2], 3, True])
def test_an_error_answer_that_is_no_error_object_ends_the_bridge_as_an_invalid_answer(error) -> None:
    m = machine()
    m.handle(B.UpstreamResult(ir({"a": SAMPLING, "b": SAMPLING})))
    actions = m.handle(B.ClientAnswered("g1", None, error))
    assert only(actions, B.SendToClient)[0].message["params"]["requestId"] == "g2"
    answer = final(actions)["error"]
    assert answer["code"] == -32600 and answer["data"]["inputKey"] == "a"


def test_an_abort_withdraws_the_clients_requests_and_answers_with_the_error() -> None:
    from adapters.errors import shutting_down

    m = machine()
    m.handle(B.UpstreamResult(ir({"a": SAMPLING})))
    actions = m.handle(B.Aborted(shutting_down()))
    assert [type(a) for a in actions] == [B.SendToClient, B.AbortUpstream, B.Finish]
    assert actions[0].message["method"] == "notifications/cancelled"
    assert actions[-1].message["error"]["data"] == {"gateway": "shutting_down"} and m.done


def test_a_tools_list_result_loses_the_tools_the_peers_policy_hides_and_keeps_its_cursor() -> None:
    from adapters.tool_policy import ToolPolicy
    page = {"resultType": "complete", "nextCursor": "c/2=", "tools": [
        {"name": n, "inputSchema": {"type": "object"}} for n in ("read_file", "write_file", "deploy")]}
    policy = ToolPolicy(denied=("write_*",), scopes=(("deploy", "deploy"),))
    listed = final(machine(method="tools/list", tools=policy, scoped=True).handle(B.UpstreamResult(page)))
    assert [t["name"] for t in listed["result"]["tools"]] == ["read_file", "deploy"]
    assert listed["result"]["nextCursor"] == "c/2="
    unscoped = final(machine(method="tools/list", tools=policy).handle(B.UpstreamResult(page)))
    assert [t["name"] for t in unscoped["result"]["tools"]] == ["read_file"]  # deploy could never be called
    other = final(machine(method="prompts/list", tools=policy).handle(B.UpstreamResult(
        {"resultType": "complete", "prompts": [{"name": "write_x"}]})))
    assert other["result"]["prompts"] == [{"name": "write_x"}]  # only tools/list is a tool list
