"""The bridge machine's task states (io.modelcontextprotocol/tasks driven for a legacy client; adapters.task_poll),
event by event with no event loop."""

from __future__ import annotations

import itertools

import pytest

from adapters import bridge as B
from adapters import errors as E
from adapters import takeover as T
from adapters import task_poll as TP
from adapters.records import PendingRound, Phase
from adapters.task_poll import TaskOutcome

CAPS = {"elicitation": {"form": {}}, "sampling": {}}
LIMITS = B.BridgeLimits(task_poll_floor_seconds=0.25, task_poll_max_seconds=4.0, task_total_seconds=600.0)
FORM = {"method": "elicitation/create", "params": {"mode": "form", "message": "publish?", "requestedSchema": {
    "type": "object", "properties": {"confirm": {"type": "boolean"}}}}}
RESULT = {"content": [{"type": "text", "text": "built"}], "structuredContent": {"outcome": "published"}}
TOKEN = {"opaque": ["token", 1]}  # an object: forwarded as the very same value, never re-encoded


def created(status="working", poll=1000, task_id="t-1", message="queued"):
    out = {"resultType": "task", "taskId": task_id, "status": status, "createdAt": "2026-12-07T10:00:00.000Z",
           "lastUpdatedAt": "2026-12-07T10:00:00.000Z", "ttlMs": 60000, "pollIntervalMs": poll}
    if message:
        out["statusMessage"] = message
    return out


def task(status="working", message="working", task_id="t-1", **payload):
    out = {k: v for k, v in created(status, task_id=task_id, message=message).items() if k != "resultType"}
    return {**out, **payload}


def machine(caps=CAPS, limits=LIMITS, token=None, running=0, declared=True):
    counter = itertools.count(1)
    params = {"name": "build_project", "arguments": {"project": "demo"}}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    record = PendingRound("b1", "s1", 7, "tools/call", params)
    ctx = B.BridgeContext(limits, caps, lambda: f"g{next(counter)}", tasks_running=lambda: running,
                          tasks_declared=declared)
    m = B.BridgeMachine(record, ctx)
    m.start()
    return m


def only(actions, kind):
    return [a for a in actions if isinstance(a, kind)]


def final(actions):
    (finish,) = only(actions, B.Finish)
    return finish.message


def waiting(m, **kw):
    """A machine whose call came back as a working task, now waiting for its first poll."""
    m.handle(B.UpstreamResult(created(**kw)))
    assert m.record.phase is Phase.TASK_WAIT
    return m


def polled(m):
    (timer,) = only(m.handle(B.TimerFired(B.Timer.POLL, m.record.round)), B.PollTask) or [None]
    assert m.record.phase is Phase.TASK_POLL
    return timer


def test_a_task_result_keeps_the_call_open_and_polls_at_the_servers_interval() -> None:
    m = machine()
    actions = m.handle(B.UpstreamResult(created(poll=1500)))
    assert actions == [B.ArmTimer(B.Timer.TASK, 600.0, 0), B.ArmTimer(B.Timer.POLL, 1.5, m.record.round)]
    assert m.record.task_id == "t-1" and not m.done
    assert m.handle(B.TimerFired(B.Timer.POLL, m.record.round - 1)) == []  # a stale timer
    assert m.handle(B.TimerFired(B.Timer.POLL, m.record.round)) == [B.PollTask("t-1")]
    assert B.PollTask("t-1").request() == ("tasks/get", {"taskId": "t-1"})


def test_a_non_working_created_task_is_fetched_at_once() -> None:
    m = machine()
    actions = m.handle(B.UpstreamResult(created(status="input_required")))
    assert actions[-1] == B.PollTask("t-1") and m.record.phase is Phase.TASK_POLL


@pytest.mark.parametrize("poll_ms,unchanged,delay", [
    (1000, 0, 1.0), (1000, 1, 2.0), (1000, 2, 4.0), (1000, 3, 4.0),  # doubled while unchanged, up to the ceiling
    (50, 0, 0.25), (50, 1, 0.5),  # never below the floor
    (None, 0, 0.25),  # the server gave none
    (10_000, 0, 10.0), (10_000, 5, 10.0),  # a server asking for more than the ceiling is polled as it asks
])
def test_poll_delay_floor_backoff_ceiling(poll_ms, unchanged, delay) -> None:
    assert TP.poll_delay(poll_ms, unchanged, 0.25, 4.0) == delay


def test_unchanged_polls_back_off_and_a_change_resets_the_backoff() -> None:
    m = waiting(machine())
    delays = []
    for message in ("working", "working", "working", "step 2", "step 2"):
        polled(m)
        (timer,) = only(m.handle(B.UpstreamResult(task(message=message))), B.ArmTimer)
        delays.append(timer.seconds)
    assert delays == [1.0, 2.0, 4.0, 1.0, 2.0]


def test_status_messages_become_progress_with_the_clients_own_token() -> None:
    m = machine(token=TOKEN)
    sent = only(m.handle(B.UpstreamResult(created(message="queued"))), B.SendToClient)
    for message in ("step 1", "step 1", "step 2"):
        polled(m)
        sent += only(m.handle(B.UpstreamResult(task(message=message))), B.SendToClient)
    params = [s.message["params"] for s in sent]
    assert [(p["progress"], p["message"]) for p in params] == [(1, "queued"), (2, "step 1"), (3, "step 2")]
    assert all(p["progressToken"] is TOKEN for p in params)
    assert all(s.message["method"] == "notifications/progress" and "id" not in s.message for s in sent)


def test_no_progress_without_a_token() -> None:
    m = machine()
    assert not only(m.handle(B.UpstreamResult(created(message="queued"))), B.SendToClient)


def test_input_required_asks_the_client_updates_the_task_then_completes() -> None:
    m = waiting(machine())
    polled(m)
    actions = m.handle(B.UpstreamResult(task("input_required", "confirm?", inputRequests={"publish": FORM})))
    (ask,) = only(actions, B.SendToClient)
    assert ask.message["method"] == "elicitation/create" and m.record.phase is Phase.AWAITING_CLIENT
    assert ask.message["params"]["requestedSchema"] == FORM["params"]["requestedSchema"]
    answer = {"action": "accept", "content": {"confirm": True}}
    assert m.handle(B.ClientAnswered(ask.message["id"], answer)) == [B.UpdateTask("t-1", {"publish": answer})]
    assert B.UpdateTask("t-1", {"publish": answer}).request() == (
        "tasks/update", {"taskId": "t-1", "inputResponses": {"publish": answer}})
    assert m.handle(B.UpstreamResult({})) == [B.PollTask("t-1")]  # the update acknowledged: polled at once
    actions = m.handle(B.UpstreamResult(task("completed", "done", result=RESULT)))
    assert final(actions) == {"jsonrpc": "2.0", "id": 7, "result": RESULT}
    assert only(actions, B.TaskEnded) == [B.TaskEnded(TaskOutcome.COMPLETED)] and not only(actions, B.CancelTask)
    assert m.done


def test_a_tool_error_result_completes_the_call_as_it_is() -> None:
    m = waiting(machine())
    polled(m)
    broken = {"content": [{"type": "text", "text": "failed to compile"}], "isError": True}
    assert final(m.handle(B.UpstreamResult(task("completed", result=broken))))["result"] == broken


def test_a_failed_task_answers_with_its_error() -> None:
    m = waiting(machine())
    polled(m)
    actions = m.handle(B.UpstreamResult(task("failed", error={"code": -32603, "message": "worker crashed"})))
    assert final(actions)["error"] == {"code": -32603, "message": "worker crashed"}
    assert only(actions, B.TaskEnded) == [B.TaskEnded(TaskOutcome.FAILED)] and not only(actions, B.CancelTask)


def test_a_task_cancelled_upstream_answers_with_an_error_naming_it() -> None:
    m = waiting(machine())
    polled(m)
    actions = m.handle(B.UpstreamResult(task("cancelled", "dismissed at its confirmation")))
    error = final(actions)["error"]
    assert error["code"] == -32603 and "cancelled" in error["message"]
    assert error["data"] == {"taskId": "t-1", "taskStatus": "cancelled", "statusMessage": "dismissed at its "
                                                                                           "confirmation"}
    assert only(actions, B.TaskEnded) == [B.TaskEnded(TaskOutcome.CANCELLED)] and not only(actions, B.CancelTask)


def test_the_clients_cancel_cancels_the_task_upstream() -> None:
    m = waiting(machine())
    actions = m.handle(B.Cancelled("user"))
    assert actions[:2] == [B.CancelTask("t-1"), B.TaskEnded(TaskOutcome.CLIENT_CANCELLED)]
    assert final(actions) is None and m.done
    assert B.CancelTask("t-1").request() == ("tasks/cancel", {"taskId": "t-1"})


def test_a_cancel_while_the_client_is_asked_cancels_both() -> None:
    m = waiting(machine())
    polled(m)
    (ask,) = only(m.handle(B.UpstreamResult(task("input_required", inputRequests={"publish": FORM}))),
                  B.SendToClient)
    actions = m.handle(B.Cancelled(None))
    (note,) = only(actions, B.SendToClient)
    assert note.message["method"] == "notifications/cancelled"
    assert note.message["params"]["requestId"] == ask.message["id"]
    assert B.CancelTask("t-1") in actions and m.done


def test_the_request_total_limit_gives_way_to_the_task_limit() -> None:
    m = waiting(machine())
    assert m.handle(B.TimerFired(B.Timer.TOTAL, 0)) == [] and not m.done
    actions = m.handle(B.TimerFired(B.Timer.TASK, 0))
    assert final(actions)["error"]["data"] == {"limit": "task_total_seconds", "value": 600.0}
    assert B.CancelTask("t-1") in actions and B.TaskEnded(TaskOutcome.ABANDONED) in actions


def test_tasks_per_session_are_bounded() -> None:
    m = machine(running=LIMITS.max_tasks_per_session)
    actions = m.handle(B.UpstreamResult(created()))
    assert final(actions)["error"]["data"] == {"limit": "max_tasks_per_session", "value": 8}
    assert actions[0] == B.CancelTask("t-1") and m.record.task_id is None


@pytest.mark.parametrize("answer", [
    task(task_id="t-2"),  # another task
    task(status="paused"),
    task(status="completed"),  # no result
    task(status="input_required"),  # no inputRequests
    task(status="input_required", inputRequests={"k": {"method": "tools/call", "params": {}}}),
    {**task(), "pollIntervalMs": 0},
    {**task(), "statusMessage": 3},
    "not a task",
])
def test_a_bad_task_message_ends_the_call_and_cancels_the_task(answer) -> None:
    m = waiting(machine())
    polled(m)
    actions = m.handle(B.UpstreamResult(answer))
    assert final(actions)["error"]["code"] == -32603 and B.CancelTask("t-1") in actions


def test_a_malformed_created_task_is_an_upstream_failure() -> None:
    m = machine()
    actions = m.handle(B.UpstreamResult({**created(), "taskId": ""}))
    assert final(actions)["error"]["code"] == -32603 and not only(actions, B.CancelTask)


def test_an_error_answering_a_poll_ends_the_call_translated() -> None:
    m = waiting(machine())
    polled(m)
    actions = m.handle(B.UpstreamError({"code": -32602, "message": "Task not found"}))
    assert final(actions)["error"] == {"code": -32602, "message": "Task not found"}


def test_failed_polls_are_retried_with_backoff_then_given_up() -> None:
    m = waiting(machine())
    failure = B.UpstreamFailed(E.upstream_failure(E.UpstreamFault.UNREACHABLE, "connection refused"))
    delays = []
    for _ in range(TP.TASK_CALL_FAILURES - 1):
        polled(m)
        (timer,) = m.handle(failure)
        delays.append(timer.seconds)
    assert delays == sorted(delays) and delays[-1] == 4.0
    polled(m)
    assert final(m.handle(failure))["error"]["data"] == {"upstream": "unreachable"} and m.done


def test_a_failed_update_is_sent_again_with_the_same_answers() -> None:
    m = waiting(machine())
    polled(m)
    (ask,) = only(m.handle(B.UpstreamResult(task("input_required", inputRequests={"publish": FORM}))),
                  B.SendToClient)
    answer = {"action": "decline"}
    m.handle(B.ClientAnswered(ask.message["id"], answer))
    m.handle(B.UpstreamFailed(E.upstream_failure(E.UpstreamFault.TIMEOUT, "slow")))
    assert m.record.phase is Phase.TASK_WAIT
    assert m.handle(B.TimerFired(B.Timer.POLL, m.record.round)) == [B.UpdateTask("t-1", {"publish": answer})]


def test_an_input_the_client_cannot_answer_ends_the_call_and_the_task() -> None:
    m = waiting(machine(caps={}))
    polled(m)
    actions = m.handle(B.UpstreamResult(task("input_required", inputRequests={"publish": FORM})))
    assert final(actions)["error"]["code"] == -32021 and B.CancelTask("t-1") in actions


def test_a_client_error_answer_ends_the_call_and_cancels_the_task() -> None:
    m = waiting(machine())
    polled(m)
    (ask,) = only(m.handle(B.UpstreamResult(task("input_required", inputRequests={"publish": FORM}))),
                  B.SendToClient)
    actions = m.handle(B.ClientAnswered(ask.message["id"], error={"code": -1, "message": "no"}))
    assert "error" in final(actions) and B.CancelTask("t-1") in actions


def stored(m) -> PendingRound:
    """The record as another replica reads it from the store."""
    return PendingRound.from_dict(dict(m.record.to_dict()))


def resumed(m, elapsed=10.0, unsent=()):
    other = B.BridgeMachine(stored(m), m.ctx)
    return other, other.resume(elapsed, unsent)


def test_a_replica_taking_a_waiting_task_over_polls_it_again() -> None:
    m = waiting(machine(token=TOKEN))
    other, actions = resumed(m)
    assert actions == [B.ArmTimer(B.Timer.TASK, 590.0, 0), B.PollTask("t-1")]
    assert other.record.task_seen == m.record.task_seen and other.record.task_progress == 1
    assert T.repeats(m.record) is T.Repeat.WAITING_RETRY


def test_a_takeover_with_an_update_in_flight_sends_the_same_answers_asking_nothing() -> None:
    m = waiting(machine())
    polled(m)
    (ask,) = only(m.handle(B.UpstreamResult(task("input_required", inputRequests={"publish": FORM}))),
                  B.SendToClient)
    answer = {"action": "accept", "content": {"confirm": True}}
    m.handle(B.ClientAnswered(ask.message["id"], answer))
    assert m.record.phase is Phase.TASK_UPDATE
    _other, actions = resumed(m)
    assert actions[1:] == [B.UpdateTask("t-1", {"publish": answer})] and not only(actions, B.SendToClient)


def test_a_takeover_while_the_client_is_asked_asks_only_what_it_never_received() -> None:
    m = waiting(machine())
    polled(m)
    (ask,) = only(m.handle(B.UpstreamResult(task("input_required", inputRequests={"publish": FORM}))),
                  B.SendToClient)
    _other, actions = resumed(m)
    assert not only(actions, B.SendToClient) and B.ArmTimer(B.Timer.TASK, 590.0, 0) in actions
    _other, actions = resumed(m, unsent={ask.message["id"]})
    assert only(actions, B.SendToClient) == [ask]


def test_a_takeover_past_the_task_limit_ends_the_call_and_the_task() -> None:
    m = waiting(machine())
    other, actions = resumed(m, elapsed=601.0)
    assert final(actions)["error"]["data"]["limit"] == "task_total_seconds"
    assert actions[0] == B.CancelTask("t-1") and other.done


def test_the_gateway_declares_the_extension_only_where_it_drives_tasks() -> None:
    offered = {"tools": {}, "extensions": {TP.EXTENSION: {}}}
    caps = {"elicitation": {}, "extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["x"]}}}
    declared = TP.declare(caps, offered, "tools/call")
    assert declared["extensions"] == {"io.modelcontextprotocol/ui": {"mimeTypes": ["x"]}, TP.EXTENSION: {}}
    assert TP.declare(caps, offered, "tasks/get")["extensions"][TP.EXTENSION] == {}
    assert TP.declare(caps, offered, "prompts/get") is caps
    assert TP.declare(caps, {"tools": {}}, "tools/call") is caps
    assert caps["extensions"] == {"io.modelcontextprotocol/ui": {"mimeTypes": ["x"]}}  # not changed in place


def test_a_task_is_not_accepted_for_methods_other_than_tools_call() -> None:
    counter = itertools.count(1)
    record = PendingRound("b1", "s1", 7, "prompts/get", {"name": "p"})
    m = B.BridgeMachine(record, B.BridgeContext(LIMITS, CAPS, lambda: f"g{next(counter)}"))
    m.start()
    assert final(m.handle(B.UpstreamResult(created())))["error"]["code"] == -32603


def test_a_task_for_a_call_that_did_not_declare_the_extension_is_the_upstreams_error() -> None:
    m = machine(declared=False)
    actions = m.handle(B.UpstreamResult(created()))
    assert not only(actions, B.PollTask) and not only(actions, B.ArmTimer)
    error = final(actions)["error"]
    assert error["code"] == E.INTERNAL_ERROR and error["data"] == {"upstream": "invalid_result"}
    assert "did not declare the tasks extension" in error["message"]
