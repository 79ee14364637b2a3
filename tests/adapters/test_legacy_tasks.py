"""2025-11-25 tasks for legacy clients (adapters.legacy_tasks), backed by the tasks extension: the translation, the
session's registry, what each ``tasks/*`` request becomes, and the bridge machine driving ``tools/call`` with
``params.task``, ``tasks/get``, ``tasks/cancel`` and the blocking ``tasks/result``; event by event, no loop.
Every 2025 message produced here is checked with the ``mcp-types`` 2025-11-25 models."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import pytest
from mcp_types import _v2025_11_25 as v2025

from adapters import bridge as B
from adapters import legacy_tasks as LT
from adapters import session as S
from adapters.capabilities import BridgedFeatures
from adapters.classify import Accepted, Kind
from adapters.errors import GATEWAY_LIMIT_EXCEEDED, INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND
from adapters.handshake import build_initialize_result
from adapters.peers import Peer
from adapters.protocol import LATEST_LEGACY
from adapters.records import PendingRound, Phase, SessionRecord
from adapters.task_poll import TaskOutcome
from adapters.usage import legacy_request_features
from tests.adapters.test_bridge_tasks import FORM, RESULT, created, final, only, task

EXT = {"extensions": {LT.EXTENSION: {}}}
CAPS = {"elicitation": {"form": {}}, "tasks": {"list": {}}}
LIMITS = B.BridgeLimits(task_total_seconds=600.0)
T1 = LT.to_legacy(task())
RELATED = {LT.RELATED_TASK: {"taskId": "t-1"}}


# --- translation ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("extension,legacy", [
    (created(), {"taskId": "t-1", "status": "working", "statusMessage": "queued", "ttl": 60000,
                 "createdAt": "2026-12-07T10:00:00.000Z", "lastUpdatedAt": "2026-12-07T10:00:00.000Z",
                 "pollInterval": 1000}),
    ({**task("completed", result=RESULT), "ttlMs": None, "pollIntervalMs": None},
     {"taskId": "t-1", "status": "completed", "statusMessage": "working", "ttl": None,
      "createdAt": "2026-12-07T10:00:00.000Z", "lastUpdatedAt": "2026-12-07T10:00:00.000Z"}),
    (task("input_required", message=None, inputRequests={"publish": FORM}),
     {"taskId": "t-1", "status": "input_required", "ttl": 60000, "pollInterval": 1000,
      "createdAt": "2026-12-07T10:00:00.000Z", "lastUpdatedAt": "2026-12-07T10:00:00.000Z"}),
])
def test_an_extension_task_becomes_a_2025_task(extension, legacy) -> None:
    assert LT.to_legacy(extension) == legacy
    v2025.GetTaskResult.model_validate(legacy)
    v2025.CreateTaskResult.model_validate(LT.created_result(extension))
    v2025.TaskStatusNotification.model_validate(LT.status_notification(legacy))


@pytest.mark.parametrize("client,server,version,on", [
    ({"tasks": {}}, EXT, "2025-11-25", True),
    ({"tasks": {"list": {}}}, EXT, "2025-11-25", True),
    ({}, EXT, "2025-11-25", False),  # the client speaks no 2025 tasks
    ({"tasks": {}}, {}, "2025-11-25", False),  # nothing upstream backs them
    ({"tasks": True}, EXT, "2025-11-25", False),
    ({"tasks": {}}, EXT, "2025-06-18", False),  # a revision without tasks
])
def test_2025_tasks_need_the_revision_the_clients_declaration_and_the_upstreams_extension(
        client, server, version, on) -> None:
    assert LT.enabled(client, server, version) is on
    result = build_initialize_result({"capabilities": server}, version, BridgedFeatures(), (version,), client)
    assert result["capabilities"].get("tasks") == (LT.capability() if on else None)
    assert LT.EXTENSION not in str(result["capabilities"])  # the extension itself stays the gateway's


def test_related_task_metadata_keeps_what_meta_held() -> None:
    result = LT.with_related({**RESULT, "_meta": {"k": 1}}, "t-1")
    assert result["_meta"] == {"k": 1, **RELATED} and result["content"] == RESULT["content"]
    v2025.GetTaskPayloadResult.model_validate(result)


# --- the registry ------------------------------------------------------------------------------------------------
def held(*statuses: str) -> dict[str, Any]:
    return {f"t-{i}": {**T1, "taskId": f"t-{i}", "status": s} for i, s in enumerate(statuses, 1)}


@pytest.mark.parametrize("tasks,seen,created,expected", [
    (None, T1, True, {"t-1": T1}),
    ({"t-1": T1}, T1, False, None),  # unchanged: nothing to write
    (None, T1, False, None),  # not the session's: never added by a poll
    ({"t-1": T1}, {**T1, "status": "completed"}, False, {"t-1": {**T1, "status": "completed"}}),
])
def test_the_registry_keeps_the_sessions_tasks_as_last_seen(tasks, seen, created, expected) -> None:
    assert LT.remember(tasks, seen, created) == expected


def test_the_registry_forgets_the_oldest_terminal_tasks_first() -> None:
    tasks = held(*(["completed"] * LT.KEPT_TERMINAL), "working")
    new = {**T1, "taskId": "t-new", "status": "failed"}
    kept = LT.remember(tasks, new, True)
    assert kept is not None and "t-1" not in kept and {"t-2", "t-new", f"t-{LT.KEPT_TERMINAL + 1}"} <= kept.keys()


@pytest.mark.parametrize("statuses,refused", [
    ((), False), (("working",) * 7, False), (("working",) * 8, True),
    (("working",) * 7 + ("completed", "cancelled"), False), (("input_required",) * 8, True)])
def test_live_tasks_are_bounded_per_session(statuses, refused) -> None:
    error = LT.admit(held(*statuses), 8)
    assert (error is not None and error.code == GATEWAY_LIMIT_EXCEEDED) is refused


# T1 was created at 10:00:00 with a ttl of 60 s: it expires at 10:01:00 (epoch ms below).
CREATED_MS = int(datetime(2026, 12, 7, 10, 0, tzinfo=UTC).timestamp() * 1000)
BEFORE, AT = CREATED_MS + 59_999, CREATED_MS + 60_000


@pytest.mark.parametrize("task,now,gone", [
    (T1, None, False),  # no clock given: nothing expires
    (T1, BEFORE, False),
    (T1, AT, True),  # 2025-11-25 §TTL and Resource Management: forgotten once the ttl from creation passed
    ({**T1, "status": "completed"}, AT, True),  # whatever its status
    ({**T1, "ttl": None}, AT + 10**9, False),  # null: unlimited
    ({**T1, "createdAt": "2026-12-07T10:00:00"}, AT, True),  # no offset: read as UTC
    ({**T1, "createdAt": "yesterday"}, AT, False),  # unreadable: kept (the other bounds still hold)
    ({**T1, "ttl": True}, AT, False),
])
def test_a_task_past_its_ttl_is_expired(task, now, gone) -> None:
    assert LT.expired(task, now) is gone


@pytest.mark.parametrize("text", ["2026-12-07T10:00:00.000Z", "2026-12-07T10:00:00Z", "2026-12-07T11:30:00+01:30",
                                  "2026-12-07T04:00:00-06:00", "2026-12-07t10:00:00.5z", "2024-02-29T23:59:59.999999Z",
                                  "1969-12-31T23:59:59Z", "2000-03-01T00:00:00+00:00"])
def test_rfc3339_timestamps_are_read_as_datetime_reads_them(text) -> None:
    assert LT.epoch_ms(text) == int(datetime.fromisoformat(text.upper()).timestamp() * 1000)


@pytest.mark.parametrize("text", ["yesterday", "2026-13-01T00:00:00Z", "2026-02-29T00:00:00Z", "2026-12-07",
                                  "2026-12-07T24:00:00Z", "2026-12-07T10:00:00+0100", ""])
def test_what_is_not_an_rfc3339_timestamp_is_none(text) -> None:
    assert LT.epoch_ms(text) is None


def test_a_task_past_its_ttl_no_longer_counts_against_the_bound() -> None:
    tasks = held(*("working",) * 8)
    assert LT.admit(tasks, 8, BEFORE) is not None
    assert LT.admit(tasks, 8, AT) is None
    assert LT.admit({**tasks, "t-9": {**T1, "taskId": "t-9", "ttl": None}}, 8, AT) is None


def test_a_registry_write_drops_the_other_tasks_past_their_ttl() -> None:
    old = {**T1, "taskId": "t-old"}
    new = {**T1, "taskId": "t-new", "createdAt": "2026-12-07T10:05:00.000Z"}
    assert LT.remember({"t-old": old}, new, True, AT) == {"t-new": new}
    assert LT.remember({"t-old": old}, new, True, BEFORE) == {"t-old": old, "t-new": new}
    seen = {**old, "status": "completed"}  # the task just seen is kept, even past its ttl: it still exists
    assert LT.remember({"t-old": old}, seen, False, AT) == {"t-old": seen}
    assert LT.remember({"t-old": old}, old, False, AT) is None  # nothing new: nothing written


@pytest.mark.parametrize("before,seen,outcome", [
    ("working", "completed", TaskOutcome.COMPLETED),
    ("input_required", "failed", TaskOutcome.FAILED),
    ("working", "cancelled", TaskOutcome.CANCELLED),  # whoever cancelled it (the server, the client, a dismissal)
    ("completed", "completed", None),  # already counted by whoever saw it end first
    ("working", "input_required", None),
    (None, "completed", TaskOutcome.COMPLETED),  # created over already
    (None, "working", None),
])
def test_a_2025_task_is_counted_once_when_the_registry_first_sees_it_over(before, seen, outcome) -> None:
    tasks = held(before) if before is not None else None
    assert LT.ended(tasks, {**T1, "status": seen}) == outcome


# --- status notifications outside a tasks/result -------------------------------------------------------------------
@pytest.mark.parametrize("statuses,now,ids", [
    ((), None, []),
    (("working", "completed", "input_required", "cancelled"), None, ["t-1", "t-3"]),
    (("working", "input_required"), AT, []),  # past their ttl: nothing to listen for
])
def test_the_task_listen_follows_the_live_tasks(statuses, now, ids) -> None:
    assert LT.watched(held(*statuses), now) == ids
    assert LT.listen_filter(held(*statuses), now) == ({"taskIds": ids} if ids else {})


SUB = {"io.modelcontextprotocol/subscriptionId": "l-1"}


@pytest.mark.parametrize("message,legacy", [
    ({"jsonrpc": "2.0", "method": "notifications/tasks", "params": {**task("completed", result=RESULT), "_meta": SUB}},
     LT.to_legacy(task("completed"))),  # the result stays upstream: tasks/result fetches it
    ({"jsonrpc": "2.0", "method": "notifications/tasks",
      "params": task("input_required", inputRequests={"publish": FORM})}, LT.to_legacy(task("input_required"))),
    ({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
      "params": {"notifications": {"taskIds": ["t-1"]}}}, None),
    ({"jsonrpc": "2.0", "method": "notifications/tasks", "params": {"taskId": "t-1", "status": "done"}}, None),
    ({"jsonrpc": "2.0", "method": "notifications/tasks", "params": [1]}, None),
    ({"jsonrpc": "2.0", "id": 3, "method": "notifications/tasks", "params": task()}, None),
])
def test_an_upstream_task_notification_becomes_a_2025_task(message, legacy) -> None:
    assert LT.from_listen(message) == legacy
    if legacy is not None:
        v2025.TaskStatusNotification.model_validate(LT.status_notification(legacy))
        assert "_meta" not in LT.status_notification(legacy)["params"]  # no related-task: §Task Notifications


def test_an_upstream_task_notification_is_news_only_for_a_task_the_session_holds() -> None:
    seen = LT.from_listen({"jsonrpc": "2.0", "method": "notifications/tasks", "params": task("completed")})
    assert seen is not None
    assert LT.remember(held("working"), seen, False) == {"t-1": seen}
    assert LT.remember(held("working"), {**seen, "taskId": "t-9"}, False) is None  # another session's
    assert LT.remember({"t-1": seen}, seen, False) is None  # already known (a poll saw it): not sent again


# --- what a tasks/* request becomes -------------------------------------------------------------------------------
@pytest.mark.parametrize("method,params,tasks,on,expected", [
    ("tasks/get", {"taskId": "t-1"}, held("working"), False, METHOD_NOT_FOUND),
    ("tasks/list", {}, None, False, METHOD_NOT_FOUND),
    ("tasks/get", {"taskId": "t-1"}, held("working"), True, "drive"),
    ("tasks/result", {"taskId": "t-1"}, held("completed"), True, "drive"),
    ("tasks/cancel", {"taskId": "t-1"}, held("input_required"), True, "drive"),
    ("tasks/cancel", {"taskId": "t-1"}, held("completed"), True, INVALID_PARAMS),  # §Cancelling Tasks: MUST
    ("tasks/get", {"taskId": "t-9"}, held("working"), True, INVALID_PARAMS),  # not the session's
    ("tasks/result", {"taskId": 1}, held("working"), True, INVALID_PARAMS),
    ("tasks/get", None, None, True, INVALID_PARAMS),
])
def test_a_task_request_is_answered_here_or_driven(method, params, tasks, on, expected) -> None:
    decided = LT.decide(method, params, tasks, on)
    if expected == "drive":
        assert isinstance(decided, LT.Drive)
    else:
        assert isinstance(decided, LT.Answer) and decided.error is not None and decided.error.code == expected


def test_a_task_past_its_ttl_is_forgotten_by_task_requests() -> None:
    tasks = {**held("working"), "t-2": {**T1, "taskId": "t-2", "ttl": None}}
    listed = LT.decide("tasks/list", {}, tasks, True, AT)
    assert isinstance(listed, LT.Answer) and [t["taskId"] for t in listed.result["tasks"]] == ["t-2"]
    gone = LT.decide("tasks/get", {"taskId": "t-1"}, tasks, True, AT)
    assert isinstance(gone, LT.Answer) and gone.error is not None and gone.error.code == INVALID_PARAMS
    assert isinstance(LT.decide("tasks/get", {"taskId": "t-1"}, tasks, True, BEFORE), LT.Drive)


def test_tasks_list_answers_from_the_registry() -> None:
    decided = LT.decide("tasks/list", {}, held("working", "completed"), True)
    assert isinstance(decided, LT.Answer) and [t["status"] for t in decided.result["tasks"]] == ["working",
                                                                                                  "completed"]
    v2025.ListTasksResult.model_validate(decided.result)


# --- the session core ----------------------------------------------------------------------------------------------
def on_session(method: str, params: Any, tasks: dict[str, Any] | None, caps=CAPS, server=EXT,
               now: int | None = None) -> tuple[Any, ...]:
    record = SessionRecord("s1", "anonymous", LATEST_LEGACY, dict(caps), {"name": "c", "version": "1"}, 0, 0,
                           server_capabilities=server, legacy_tasks=tasks)
    message = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    return S.handle(Accepted(Kind.REQUEST, "anonymous", message, record),
                    S.Context("2026-12-07", B.BridgeLimits(), S.SessionLimits(), Peer("default"), now_ms=now))


CALL = {"name": "build_project", "arguments": {"project": "demo"}, "task": {"ttl": 60000}}


def test_the_session_core_forgets_tasks_past_their_ttl_with_the_time_it_is_given() -> None:
    full = held(*("working",) * 8)
    assert isinstance(on_session("tools/call", CALL, full, now=BEFORE)[-1], S.Reply)  # the bound holds
    assert isinstance(on_session("tools/call", CALL, full, now=AT)[-1], S.Forward)  # past their ttl: room again
    (reply,) = on_session("tasks/get", {"taskId": "t-1"}, full, now=AT)
    assert reply.message["error"]["code"] == INVALID_PARAMS


@pytest.mark.parametrize("method,params,tasks,caps,forwarded,code", [
    ("tasks/get", {"taskId": "t-1"}, held("working"), CAPS, True, None),
    ("tasks/get", {"taskId": "t-1"}, held("working"), {}, False, METHOD_NOT_FOUND),  # tasks not declared
    ("tasks/list", {}, held("working"), CAPS, False, None),
    ("tools/call", CALL, held(*("working",) * 8), CAPS, False, GATEWAY_LIMIT_EXCEEDED),
    ("tools/call", CALL, held(*("completed",) * 8), CAPS, True, None),
    ("tools/call", CALL, held(*("working",) * 8), {}, True, None),  # no 2025 tasks: params.task is ignored
])
def test_the_session_core_routes_2025_task_requests(method, params, tasks, caps, forwarded, code) -> None:
    actions = on_session(method, params, tasks, caps)
    assert isinstance(actions[-1], S.Forward) is forwarded
    if not forwarded:
        (reply,) = actions
        assert (reply.message.get("error") or {}).get("code") == code


@pytest.mark.parametrize("method,params,features", [
    ("tools/call", CALL, ("legacy handshake", "2025 tasks")),
    ("tools/call", {"name": "x"}, ("legacy handshake",)),
    ("tasks/result", {"taskId": "t"}, ("legacy handshake", "2025 tasks")),
    ("tasks/list", None, ("legacy handshake", "2025 tasks")),
])
def test_2025_tasks_count_as_a_deprecated_feature(method, params, features) -> None:
    assert legacy_request_features(method, params) == features


# --- the bridge machine -----------------------------------------------------------------------------------------
def machine(method: str, params: dict[str, Any]) -> tuple[B.BridgeMachine, list[B.Action]]:
    counter = itertools.count(1)
    ctx = B.BridgeContext(LIMITS, CAPS, lambda: f"g{next(counter)}", legacy_tasks=True)
    m = B.BridgeMachine(PendingRound("b1", "s1", 7, method, params), ctx)
    return m, m.start()


def test_a_task_augmented_call_answers_its_create_task_result_at_once() -> None:
    m, _ = machine("tools/call", CALL)
    actions = m.handle(B.UpstreamResult(created()))
    assert actions[0] == B.RememberTask(LT.to_legacy(created()), True) and m.done
    v2025.CreateTaskResult.model_validate(final(actions)["result"])
    assert final(actions)["result"]["task"]["taskId"] == "t-1" and not only(actions, B.CancelTask)


def test_a_task_augmented_call_answered_inline_is_answered_as_it_is() -> None:
    m, _ = machine("tools/call", CALL)  # 2025-11-25 tasks: a receiver not running it as a task processes it
    assert final(m.handle(B.UpstreamResult(RESULT)))["result"] == RESULT


@pytest.mark.parametrize("upstream,status", [(task("working"), "working"),
                                             (task("completed", result=RESULT), "completed"),
                                             (task("input_required", inputRequests={"publish": FORM}),
                                              "input_required")])
def test_tasks_get_translates_the_upstream_task(upstream, status) -> None:
    m, start = machine("tasks/get", {"taskId": "t-1"})
    assert only(start, B.CallUpstream)  # the request's own round: tasks/get upstream
    actions = m.handle(B.UpstreamResult(upstream))
    result = final(actions)["result"]
    assert result["status"] == status and "inputRequests" not in result and "result" not in result
    assert actions[0] == B.RememberTask(result)
    v2025.GetTaskResult.model_validate(result)


def test_tasks_cancel_acknowledged_upstream_answers_the_task_as_it_now_is() -> None:
    m, _ = machine("tasks/cancel", {"taskId": "t-1"})
    assert m.handle(B.UpstreamResult({})) == [B.PollTask("t-1")]
    actions = m.handle(B.UpstreamResult(task("cancelled", message="cancelled at the client's request")))
    assert final(actions)["result"]["status"] == "cancelled" and not only(actions, B.CancelTask)
    v2025.CancelTaskResult.model_validate(final(actions)["result"])


def test_tasks_result_polls_asks_with_related_task_and_answers_with_it() -> None:
    m, start = machine("tasks/result", {"taskId": "t-1"})
    assert start == [B.ArmTimer(B.Timer.TASK, 600.0, 0), B.PollTask("t-1")]
    asked = m.handle(B.UpstreamResult(task("input_required", message="confirm?", inputRequests={"publish": FORM})))
    (note,) = [a.message for a in only(asked, B.SendToClient) if "id" not in a.message]
    (ask,) = [a.message for a in only(asked, B.SendToClient) if "id" in a.message]
    assert note["method"] == "notifications/tasks/status" and note["params"]["status"] == "input_required"
    assert ask["method"] == "elicitation/create" and ask["params"]["_meta"] == RELATED
    assert only(asked, B.RememberTask) and m.record.phase is Phase.AWAITING_CLIENT
    answer = {"action": "accept", "content": {"confirm": True}, "_meta": RELATED}
    assert m.handle(B.ClientAnswered(ask["id"], answer)) == [
        B.UpdateTask("t-1", {"publish": {"action": "accept", "content": {"confirm": True}}})]
    assert m.handle(B.UpstreamResult({})) == [B.PollTask("t-1")]
    done = m.handle(B.UpstreamResult(task("completed", message="published", result=RESULT)))
    result = final(done)["result"]
    assert result["_meta"] == RELATED and result["structuredContent"] == RESULT["structuredContent"]
    assert not only(done, B.TaskEnded) and not only(done, B.CancelTask)
    v2025.CallToolResult.model_validate(result)


@pytest.mark.parametrize("upstream,code", [
    (task("failed", error={"code": -32603, "message": "the build worker crashed"}), INTERNAL_ERROR),
    (task("cancelled", message="dismissed"), INTERNAL_ERROR)])
def test_tasks_result_of_a_task_that_ended_badly_is_its_error(upstream, code) -> None:
    m, _ = machine("tasks/result", {"taskId": "t-1"})
    assert final(m.handle(B.UpstreamResult(upstream)))["error"]["code"] == code


def test_a_cancelled_tasks_result_leaves_the_task_running() -> None:
    m, _ = machine("tasks/result", {"taskId": "t-1"})
    actions = m.handle(B.Cancelled("the client stopped waiting"))
    assert m.done and not only(actions, B.CancelTask) and not only(actions, B.TaskEnded)


@pytest.mark.parametrize("unsent", [set(), {"g1"}])
def test_a_tasks_result_taken_over_by_another_replica_goes_on_from_its_record(unsent) -> None:
    m, _ = machine("tasks/result", {"taskId": "t-1"})
    m.handle(B.UpstreamResult(task("input_required", inputRequests={"publish": FORM})))
    ctx = B.BridgeContext(LIMITS, CAPS, lambda: "g9", legacy_tasks=True)
    taken = B.BridgeMachine(PendingRound.from_dict(m.record.to_dict()), ctx)
    actions = taken.resume(10.0, unsent)
    asks = [a.message for a in only(actions, B.SendToClient)]
    assert [a["id"] for a in asks] == sorted(unsent) and all(a["params"]["_meta"] == RELATED for a in asks)
    assert only(actions, B.ArmTimer)[0] == B.ArmTimer(B.Timer.TASK, 590.0, 0)


def test_a_working_tasks_result_taken_over_polls_its_task_again() -> None:
    m, _ = machine("tasks/result", {"taskId": "t-1"})
    m.handle(B.UpstreamResult(task("working")))
    taken = B.BridgeMachine(PendingRound.from_dict(m.record.to_dict()), m.ctx)
    assert taken.resume(10.0) == [B.ArmTimer(B.Timer.TASK, 590.0, 0), B.PollTask("t-1")]
