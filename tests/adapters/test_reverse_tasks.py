"""Tasks in reverse: the rules mapping the tasks extension onto a 2025 server's tasks, table by table with no
event loop (docs/design/eras.md#tasks-in-reverse). Every 2026 shape is checked with tests.task_wire."""

from __future__ import annotations

from typing import Any

import pytest

from adapters import reverse_tasks as RT
from adapters.errors import ErrorValue
from adapters.task_poll import EXTENSION
from tests import task_wire

TASKS_2025 = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
DECLARED = {"elicitation": {}, "extensions": {EXTENSION: {}}}
T0 = "2026-12-07T10:00:00.000Z"


def task(status: str, ident: str = "opaque/ID+1==", **extra: Any) -> dict[str, Any]:
    return {"taskId": ident, "status": status, "createdAt": T0, "lastUpdatedAt": T0, "ttl": 60000,
            "pollInterval": 100, **extra}


def state(**changes: Any) -> RT.TaskState:
    base = RT.start("opaque/ID+1==", "alice", DECLARED)
    return RT.TaskState(**{**{f: getattr(base, f) for f in base.__slots__}, **changes})


ELICIT = {"mode": "form", "message": "Delete?", "requestedSchema": {"type": "object", "properties": {}},
          "_meta": {"io.modelcontextprotocol/related-task": {"taskId": "opaque/ID+1=="}}}


@pytest.mark.parametrize(("caps", "offered"), [
    ({"tools": {}, "tasks": TASKS_2025}, True),
    ({"tools": {}, "tasks": {"list": {}, "requests": {"tools": {"call": {}}}}}, True),
    ({"tools": {}, "tasks": {"requests": {"sampling": {"createMessage": {}}}}}, False),  # client-side tasks only
    ({"tools": {}, "tasks": {}}, False),
    ({"tools": {}}, False),
    (None, False),
])
def test_the_extension_is_advertised_only_for_a_server_with_tool_tasks(caps: Any, offered: bool) -> None:
    assert RT.offered(caps) is offered
    discover = {"resultType": "complete", "capabilities": {"tools": {}, "extensions": {"x/y": {}}}}
    out = RT.discover(discover, caps)
    assert (EXTENSION in out["capabilities"]["extensions"]) is offered
    assert out["capabilities"]["extensions"]["x/y"] == {} and "tasks" not in out["capabilities"]


def test_task_support_is_learned_from_tools_list_pages() -> None:
    page1 = {"tools": [{"name": "a", "execution": {"taskSupport": "optional"}}, {"name": "b"}]}
    page2 = {"tools": [{"name": "c", "execution": {"taskSupport": "required"}},
                       {"name": "d", "execution": {"taskSupport": "forbidden"}}, {"name": 3}, "junk"]}
    known = RT.learned_support(RT.learned_support({}, page1), page2)
    assert known == {"a": RT.Support.OPTIONAL, "b": RT.Support.FORBIDDEN, "c": RT.Support.REQUIRED,
                     "d": RT.Support.FORBIDDEN}
    assert RT.support_of(known, "unknown") is RT.support_of(None, "a") is RT.Support.FORBIDDEN


@pytest.mark.parametrize(("offers", "declared", "support", "runs"), [
    (True, True, RT.Support.OPTIONAL, RT.Dispatch.TASK),
    (True, True, RT.Support.REQUIRED, RT.Dispatch.TASK),
    (True, True, RT.Support.FORBIDDEN, RT.Dispatch.INLINE),  # a sync tool never becomes a task
    (True, False, RT.Support.OPTIONAL, RT.Dispatch.INLINE),  # no task to a client that did not declare
    (True, False, RT.Support.REQUIRED, RT.Dispatch.REFUSE),
    (True, False, RT.Support.FORBIDDEN, RT.Dispatch.INLINE),
    (False, True, RT.Support.REQUIRED, RT.Dispatch.INLINE),  # the server has no tasks: its own error
])
def test_the_gateway_decides_whether_a_call_is_a_task(offers: bool, declared: bool, support: RT.Support,
                                                      runs: RT.Dispatch) -> None:
    assert RT.dispatch(offers, declared, support) is runs


def test_a_required_tool_without_the_extension_is_minus_32021_naming_it() -> None:
    error = RT.required_error("failing_job")
    assert error.code == -32021 and error.data == {"requiredCapabilities": {"extensions": {EXTENSION: {}}}}


@pytest.mark.parametrize(("declared", "offers", "code"), [(True, True, None), (False, True, -32021),
                                                          (True, False, -32601), (False, False, -32601)])
def test_task_methods_are_gated_on_the_server_and_the_extension(declared: bool, offers: bool,
                                                                code: int | None) -> None:
    error = RT.gate("tasks/get", declared, offers)
    assert (error.code if error else None) == code
    assert RT.declared(DECLARED) and not RT.declared({"extensions": {EXTENSION: True}}) and not RT.declared({})


def test_the_2025_call_carries_the_gateways_task_and_no_2026_keys() -> None:
    params = {"name": "slow", "arguments": {"x": 1}, "task": {"ttl": 5, "pollInterval": 9},
              "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "progressToken": "p"}}
    assert RT.task_request(params) == {"name": "slow", "arguments": {"x": 1}, "task": {},
                                       "_meta": {"progressToken": "p"}}


@pytest.mark.parametrize(("ttl", "ttl_ms"), [(60000, 60000), (None, None)])
def test_a_2025_create_task_result_becomes_a_flat_one(ttl: int | None, ttl_ms: int | None) -> None:
    made = RT.created({"task": task("working", ttl=ttl), "_meta": {"x": 1}})
    assert isinstance(made, dict)
    task_wire.check_created(made)
    assert (made["taskId"], made["ttlMs"], made["pollIntervalMs"]) == ("opaque/ID+1==", ttl_ms, 100)


@pytest.mark.parametrize("result", [{"task": {"status": "working"}}, {"task": task("sleeping")}, {"task": []}])
def test_a_malformed_2025_task_is_an_upstream_failure(result: Any) -> None:
    made = RT.created(result)
    assert isinstance(made, ErrorValue) and made.data == {"upstream": "invalid_result"}


def test_a_call_answered_at_once_is_no_task() -> None:
    assert RT.created({"content": [{"type": "text", "text": "done"}]}) is None


def test_questions_streamed_on_tasks_result_are_pending_under_minted_keys() -> None:
    s, reply = RT.asked(state(), 7, "elicitation/create", ELICIT)
    assert reply is None
    s, reply = RT.asked(s, 8, "ping", {})
    assert reply == RT.Reply(8, {})
    s, reply = RT.asked(s, 9, "elicitation/create", ELICIT)
    assert [a.key for a in s.pending] == ["in1", "in2"]
    s, out = RT.detailed(s, task("input_required"))
    assert isinstance(out, dict)
    task_wire.check_detailed(out)
    assert list(out["inputRequests"]) == ["in1", "in2"]
    assert "_meta" not in out["inputRequests"]["in1"]["params"]  # said in 2025 terms: related-task dropped


@pytest.mark.parametrize(("method", "params", "code"), [
    ("sampling/createMessage", {"messages": [], "maxTokens": 5}, -32021),  # the client declared no sampling
    ("tools/call", {}, -32601),  # not a question a 2026 client answers
])
def test_a_question_the_client_cannot_answer_is_refused_to_the_server(method: str, params: dict[str, Any],
                                                                      code: int) -> None:
    s, reply = RT.asked(state(), 7, method, params)
    assert not s.pending and reply is not None and reply.error is not None and reply.error.code == code


def test_an_update_answers_pending_keys_and_leaves_the_rest() -> None:
    s, _ = RT.asked(state(), 7, "elicitation/create", ELICIT)
    s, _ = RT.asked(s, 8, "elicitation/create", ELICIT)
    step = RT.answered(s, {"in1": {"action": "accept", "content": {"confirm": True}}, "nope": {}, "in2": "junk"})
    assert not isinstance(step, ErrorValue)
    s, replies = step
    assert replies == (RT.Reply(7, {"action": "accept", "content": {"confirm": True}}),)
    assert [a.key for a in s.pending] == ["in2"]
    s, out = RT.detailed(s, task("working"))  # the fixture already says working: the question says otherwise
    assert isinstance(out, dict) and out["status"] == "input_required" and list(out["inputRequests"]) == ["in2"]
    step = RT.answered(s, {"in2": {"action": "decline"}})
    assert not isinstance(step, ErrorValue)
    s, _ = step
    s, out = RT.detailed(s, task("input_required"))  # answered, the server has not moved yet: working
    assert isinstance(out, dict) and out["status"] == "working" and "inputRequests" not in out
    assert isinstance(RT.answered(s, None), ErrorValue) and isinstance(RT.answered(s, [1]), ErrorValue)


TOOL_RESULT = {"content": [{"type": "text", "text": "done"}],
               "_meta": {"io.modelcontextprotocol/related-task": {"taskId": "opaque/ID+1=="}, "keep": 1}}
TOOL_ERROR = {"content": [{"type": "text", "text": "bad"}], "isError": True}


@pytest.mark.parametrize(("status", "outcome", "shown", "payload"), [
    ("working", None, "working", None),
    ("completed", None, "working", None),  # its result is not read yet: a completed task must inline it
    ("failed", None, "working", None),
    ("completed", RT.Outcome(TOOL_RESULT), "completed",
     {"content": TOOL_RESULT["content"], "_meta": {"keep": 1}, "resultType": "complete"}),
    # a 2025 task failed by its tool's error is completed + isError in 2026
    ("failed", RT.Outcome(TOOL_ERROR), "completed", {**TOOL_ERROR, "resultType": "complete"}),
    ("failed", RT.Outcome({"content": []}), "failed", {"code": -32603, "message": "boom"}),
    ("failed", RT.Outcome(error={"code": -32602, "message": "bad"}), "failed", {"code": -32602, "message": "bad"}),
    ("completed", RT.Outcome(error={"code": -32002, "message": "gone"}), "failed",
     {"code": -32602, "message": "gone"}),  # 2025 resource-not-found is INVALID_PARAMS in 2026
    ("cancelled", None, "cancelled", None),
    ("cancelled", RT.Outcome(error={"code": -32603, "message": "no result"}), "cancelled", None),
])
def test_tasks_get_combines_the_servers_status_with_the_drivers_outcome(
        status: str, outcome: RT.Outcome | None, shown: str, payload: Any) -> None:
    s = state(outcome=outcome)
    s, out = RT.detailed(s, task(status, statusMessage="boom"))
    assert isinstance(out, dict)
    task_wire.check_detailed(out)
    assert out["status"] == shown
    key = task_wire.PAYLOADS.get(shown)
    assert (out.get(key) if key else None) == payload
    assert (s.final is not None) is (shown in RT.TERMINAL)
    if s.final is not None:  # kept: answered from here on, whatever the server says later
        assert RT.detailed(s, None)[1] == out


@pytest.mark.parametrize("upstream", [None, {"taskId": "x"}, task("working", ident="another")])
def test_a_malformed_or_foreign_2025_task_is_an_upstream_failure(upstream: Any) -> None:
    _, out = RT.detailed(state(), upstream)
    assert isinstance(out, ErrorValue) and out.data == {"upstream": "invalid_result"}


def test_a_settled_or_cancelled_task_withdraws_its_questions() -> None:
    s, _ = RT.asked(state(), 7, "elicitation/create", ELICIT)
    assert not RT.cancelled(s).pending and not RT.settled(s, RT.Outcome({})).pending
    assert RT.terminal(task("cancelled")) and not RT.terminal(task("input_required")) and not RT.terminal(None)
    task_wire.check_ack(RT.ack())


def test_an_unknown_task_is_one_answer_whoever_asks() -> None:
    error = RT.unknown_task()
    assert error.code == -32602 and "alice" not in error.message
    assert RT.task_id_of({"taskId": "t"}) == "t" and RT.task_id_of({"taskId": 1}) is None


@pytest.mark.parametrize(("order", "limit", "room"), [
    ((("a", True), ("b", False)), 3, ()),
    ((("a", False), ("b", True), ("c", True)), 3, ("b",)),  # the oldest terminal one goes
    ((("a", True), ("b", True), ("c", False)), 2, ("a", "b")),
    ((("a", False), ("b", False)), 2, None),  # live ones are never forgotten: refused
])
def test_the_registry_makes_room_from_terminal_tasks_only(order: tuple[tuple[str, bool], ...], limit: int,
                                                          room: tuple[str, ...] | None) -> None:
    out = RT.make_room(order, RT.TaskLimits(max_tasks=limit))
    if room is None:
        assert isinstance(out, ErrorValue) and out.data == {"limit": "reverse.max_tasks", "value": limit}
    else:
        assert out == room


@pytest.mark.parametrize(("ids", "declared", "out"), [
    (["mine", "theirs", "mine"], True, ["mine"]),  # each once; another's (or nobody's) left out, unsaid why
    ([], True, []),
    (["mine"], False, -32021),
    ("mine", True, -32602),
    ([1], True, -32602),
])
def test_a_listen_watches_only_its_principals_tasks(ids: Any, declared: bool, out: Any) -> None:
    got = RT.listened(ids, declared, frozenset({"mine"}))
    assert (got.code if isinstance(got, ErrorValue) else got) == out


def test_a_2025_status_notification_becomes_the_extensions_on_a_watching_listen() -> None:
    assert RT.status_of({"method": "notifications/tasks/status", "params": task("working")}) == task("working")
    assert RT.status_of({"method": "notifications/tasks/status", "params": {"taskId": "x"}}) is None
    assert RT.status_of({"method": "notifications/message", "params": task("working")}) is None
    s, _ = RT.asked(state(), 7, "elicitation/create", ELICIT)
    _, shown = RT.detailed(s, task("input_required"))
    assert isinstance(shown, dict)
    message = RT.notification(shown)
    task_wire.check_detailed(message["params"], notification=True)
    assert "resultType" not in message["params"]
    out = RT.delivered(["opaque/ID+1=="], "l1", message)
    assert out is not None and out["params"]["_meta"] == {"io.modelcontextprotocol/subscriptionId": "l1"}
    assert RT.delivered(["other"], "l1", message) is None
    assert RT.delivered(["opaque/ID+1=="], "l1", {"method": "notifications/tools/list_changed"}) is None
    _, working = RT.detailed(state(), task("input_required"))
    assert isinstance(working, dict) and RT.seen(working) != RT.seen(shown)  # a new question is news
    assert RT.seen(shown) == RT.seen({**shown, "lastUpdatedAt": "later"})  # a timestamp alone is not


def test_a_task_the_server_forgot_or_whose_session_ended_is_gone() -> None:
    assert RT.vanished(ErrorValue(-32602, "Task not found")) and not RT.vanished(ErrorValue(-32603, "boom"))
    lost = RT.task_lost()
    assert lost.code == -32603 and lost.data == {"upstream": "session"}


def test_a_tasks_holder_key_is_a_digest_of_its_upstream_and_id() -> None:
    """docs/design/eras.md#tasks-in-reverse: the store keeps no task id, and one upstream's task never names
    another's."""
    key = RT.holder_key("default", "opaque/ID+1==")
    assert key == RT.holder_key("default", "opaque/ID+1==") and "opaque" not in key and "ID" not in key
    assert key != RT.holder_key("other", "opaque/ID+1==") and key != RT.holder_key("default", "opaque/ID+1=")
    assert RT.holder_key("a b", "c") != RT.holder_key("a", "b c")  # no two pairs spell one key


@pytest.mark.parametrize(("holder", "principal", "out"), [
    (RT.Holder("alice", "B"), "alice", RT.Elsewhere("B")),  # the caller's, held elsewhere: relayed there
    (RT.Holder("alice", "B"), "bob", -32602),  # another principal's: unknown, never relayed
    (RT.Holder("alice", "A"), "alice", -32602),  # names this replica, which forgot it: a stale record
    (None, "alice", -32602),  # nobody holds it (never made, or its holder's lease ran out)
])
def test_a_task_kept_elsewhere_is_relayed_only_for_its_principal(holder: Any, principal: str, out: Any) -> None:
    got = RT.route(holder, principal, "A")
    assert (got.code if isinstance(got, ErrorValue) else got) == out
    if isinstance(got, ErrorValue):
        assert got == RT.unknown_task()  # one answer, whoever made it


def test_a_task_whose_holder_is_gone_is_lost_and_says_so() -> None:
    gone = RT.holder_gone()
    assert gone.code == -32602 and gone.data == {"taskId": "lost"}
    assert "replica holding this task is gone" in gone.message and "call the tool again" in gone.message
