"""Listens watching tasks held on other replicas: which listen is told which change, and when a watch ends, table
by table with no event loop (docs/design/eras.md#tasks-in-reverse)."""

from __future__ import annotations

from typing import Any

import pytest

from adapters import reverse_tasks as RT
from adapters import reverse_watch as RW
from adapters.relay import ReplyTo

TO, OTHER = ReplyTo("b", "w1"), ReplyTo("c", "w2")


def task(status: str, ident: str = "t1", **extra: Any) -> dict[str, Any]:
    return {"taskId": ident, "status": status, "ttlMs": None, "resultType": "complete", **extra}


def told(status: str, ident: str = "t1", **extra: Any) -> dict[str, Any]:
    return RT.notification(task(status, ident, **extra))


WATCHING = RW.start({"t1": "A", "t2": "B"})


# --- the listen's replica -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("said", "out", "live"), [
    (None, None, {"t2"}),  # the holder is gone: the watch of its task ends, nothing said
    ({"error": {"code": -32602, "message": "unknown taskId"}}, None, {"t2"}),  # forgotten or lost there
    ({"error": {"code": -32603, "message": "upstream hiccup"}}, None, {"t1", "t2"}),  # asked again later
    ({"result": task("working"), RW.PUSHED: True}, None, {"t1", "t2"}),  # the holder pushes it itself
    ({"result": task("completed"), RW.PUSHED: True}, None, {"t1", "t2"}),  # even the last: the push ends it
    ({"result": task("working")}, told("working"), {"t1", "t2"}),  # a previous version's holder: told from here
    ({"result": task("completed")}, told("completed"), {"t2"}),
    ({"result": "not a task"}, None, {"t1", "t2"}),
])
def test_a_holders_answer_says_whether_the_watch_goes_on(said: Any, out: Any, live: set[str]) -> None:
    after, message = RW.answered(WATCHING, "t1", said)
    assert message == out and set(after.live) == live


@pytest.mark.parametrize(("pushes", "outs", "live"), [
    ([told("working")], [told("working")], {"t1", "t2"}),
    ([told("working"), told("working")], [told("working"), None], {"t1", "t2"}),  # no news: not told twice
    ([told("working"), told("working", statusMessage="half")], [told("working"), told("working", statusMessage="half")],
     {"t1", "t2"}),
    ([told("input_required", inputRequests={"in1": {}}), told("input_required", inputRequests={"in2": {}})],
     [told("input_required", inputRequests={"in1": {}}), told("input_required", inputRequests={"in2": {}})],
     {"t1", "t2"}),
    ([told("completed"), told("working")], [told("completed"), None], {"t2"}),  # terminal: nothing after
    ([told("working", "t3")], [None], {"t1", "t2"}),  # a task the listen does not watch
    ([{"jsonrpc": "2.0", "method": "notifications/message", "params": {"taskId": "t1"}}], [None], {"t1", "t2"}),
])
def test_a_push_is_told_once_and_a_terminal_one_ends_its_watch(pushes: list[Any], outs: list[Any],
                                                               live: set[str]) -> None:
    watch, got = WATCHING, []
    for push in pushes:
        watch, out = RW.pushed(watch, push)
        got.append(out)
    assert got == outs and set(watch.live) == live


def test_a_watch_is_over_once_every_task_ended() -> None:
    watch, _ = RW.pushed(WATCHING, told("cancelled"))
    assert not RW.over(watch) and RW.holders(watch) == frozenset({"B"})
    watch, _ = RW.answered(watch, "t2", None)
    assert RW.over(watch) and RW.holders(watch) == frozenset()


def test_a_watch_asks_as_the_listens_client_would() -> None:
    headers, message = RW.asking("t/1", "2026-07-28", {"progressToken": 1}) or ({}, {})
    assert headers == {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tasks/get", "Mcp-Name": "t/1"}
    assert message["method"] == "tasks/get" and message["params"] == {"taskId": "t/1", "_meta": {"progressToken": 1}}
    assert RW.asking("lone \ud800", "2026-07-28", {}) is None  # no header carries it: never asked


def test_a_push_and_its_acknowledgement_round_trip() -> None:
    payload = RW.push("up", TO, told("working"))
    assert RW.notified(payload) == ("w1", told("working")) and RW.notified({"upstream": "up"}) is None
    assert RW.still_watched(RW.ack(True)) and not RW.still_watched(RW.ack(False))
    assert not RW.still_watched(None)  # the listen's replica is gone
    assert not RW.still_watched({"jsonrpc": "2.0", "id": None, "error": {"code": -32602, "message": "x"}})  # old
    assert RW.watch_of(RW.watch_member(TO)) == TO and RW.watch_of({"request": {}}) is None
    assert RW.watch_of({RW.WATCH: {"replica": "b", "token": 5}}) is None


# --- the holder ---------------------------------------------------------------------------------------------
def test_a_change_goes_to_the_watches_of_its_principal_and_task_only() -> None:
    watchers = RW.watched({}, "alice", "t1", TO, terminal=False)
    watchers = RW.watched(watchers, "alice", "t1", OTHER, terminal=False)
    watchers = RW.watched(watchers, "alice", "t1", TO, terminal=False)  # the safety check registers it again
    watchers = RW.watched(watchers, "alice", "t2", TO, terminal=False)
    assert RW.recipients(watchers, "alice", "t1") == frozenset({TO, OTHER})
    assert RW.recipients(watchers, "bob", "t1") == frozenset()  # another principal's task of that id
    assert RW.recipients(watchers, "alice", "t3") == frozenset()


@pytest.mark.parametrize(("step", "left"), [
    (lambda w: RW.dropped(w, "alice", "t1"), {("alice", "t2"): {TO}}),  # terminal or forgotten
    (lambda w: RW.unwatched(w, TO), {("alice", "t1"): {OTHER}}),  # its listen ended, or its replica is gone
    (lambda w: RW.unwatched(w, ReplyTo("b", "never")), {("alice", "t1"): {TO, OTHER}, ("alice", "t2"): {TO}}),
    (lambda w: RW.watched(w, "alice", "t9", OTHER, terminal=True),  # a terminal task's watch is not kept
     {("alice", "t1"): {TO, OTHER}, ("alice", "t2"): {TO}}),
])
def test_a_watch_is_dropped_when_nothing_more_is_pushed_to_it(step: Any, left: dict[Any, Any]) -> None:
    watchers = RW.watched(RW.watched(RW.watched({}, "alice", "t1", TO, terminal=False), "alice", "t1", OTHER,
                                     terminal=False), "alice", "t2", TO, terminal=False)
    assert {key: set(tos) for key, tos in step(watchers).items()} == left
