"""The reverse bridge's listen and log-level rules, table by table with no event loop
(docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge)."""

from __future__ import annotations

from typing import Any

import pytest

from adapters import reverse as R
from adapters import reverse_listen as RL
from adapters.errors import ErrorValue

SID = "io.modelcontextprotocol/subscriptionId"
ALL_CAPS: dict[str, Any] = {"tools": {"listChanged": True}, "prompts": {"listChanged": True},
                            "resources": {"listChanged": True, "subscribe": True}}


@pytest.mark.parametrize(("params", "ok"), [
    ({"notifications": {}}, True),
    ({"notifications": {"toolsListChanged": True, "resourceSubscriptions": ["a://1"]}}, True),
    ({}, False),
    ({"notifications": []}, False),
    ({"notifications": {"resourceSubscriptions": "a://1"}}, False),
    ({"notifications": {"resourceSubscriptions": [1]}}, False),
])
def test_a_listen_filter_must_be_an_object_with_a_list_of_uris(params: dict[str, Any], ok: bool) -> None:
    verdict = RL.wanted(params)
    assert (not isinstance(verdict, ErrorValue)) is ok
    if not ok:
        assert isinstance(verdict, ErrorValue) and verdict.code == -32602


@pytest.mark.parametrize(("filt", "caps", "honoured"), [
    ({"toolsListChanged": True}, ALL_CAPS, {"toolsListChanged": True}),
    ({"toolsListChanged": True}, {"tools": {}}, {}),  # the server never said it sends list_changed
    ({"toolsListChanged": False, "promptsListChanged": True}, ALL_CAPS, {"promptsListChanged": True}),
    ({"resourcesListChanged": True}, {"resources": {"listChanged": True}}, {"resourcesListChanged": True}),
    ({"resourceSubscriptions": ["a://1", "a://1", "b://2"]}, ALL_CAPS, {"resourceSubscriptions": ["a://1", "b://2"]}),
    ({"resourceSubscriptions": ["a://1"]}, {"resources": {"listChanged": True}}, {}),  # no subscribe
    ({"resourceSubscriptions": []}, ALL_CAPS, {}),
    ({"taskIds": ["t1"]}, ALL_CAPS, {}),  # the tasks extension's filter: a legacy server has no such thing
    ({}, {}, {}),
])
def test_only_what_was_asked_and_the_legacy_server_offers_is_honoured(filt: dict[str, Any], caps: dict[str, Any],
                                                                      honoured: dict[str, Any]) -> None:
    assert RL.honoured(filt, caps) == honoured


def test_a_uri_the_server_refused_to_subscribe_is_not_acknowledged() -> None:
    honour = {"toolsListChanged": True, "resourceSubscriptions": ["a://1", "b://2"]}
    assert RL.acknowledged(honour, ["b://2"]) == {"toolsListChanged": True, "resourceSubscriptions": ["b://2"]}
    assert RL.acknowledged(honour, []) == {"toolsListChanged": True}
    assert RL.ack("L", {"toolsListChanged": True}) == {
        "jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
        "params": {"notifications": {"toolsListChanged": True}, "_meta": {SID: "L"}}}


HONOUR = {"toolsListChanged": True, "resourceSubscriptions": ["notes://dir/"]}


@pytest.mark.parametrize(("method", "params", "out"), [
    ("notifications/tools/list_changed", {}, {}),
    ("notifications/tools/list_changed", {"_meta": {"x": 1}}, {}),  # the legacy _meta does not leak
    ("notifications/prompts/list_changed", {}, None),  # not opted into
    ("notifications/resources/updated", {"uri": "notes://dir/a"}, {"uri": "notes://dir/a"}),  # a sub-resource
    ("notifications/resources/updated", {"uri": "notes://dir/"}, {"uri": "notes://dir/"}),
    ("notifications/resources/updated", {"uri": "notes://dirt"}, None),
    ("notifications/resources/updated", {}, None),
    ("notifications/message", {"level": "error", "data": "x"}, None),  # request-scoped, never on a listen
    ("notifications/progress", {"progressToken": 1, "progress": 1}, None),
])
def test_a_listen_gets_only_the_changes_it_opted_into(method: str, params: dict[str, Any],
                                                      out: dict[str, Any] | None) -> None:
    got = RL.delivered(HONOUR, 7, {"jsonrpc": "2.0", "method": method, "params": params})
    expected = None if out is None else {"jsonrpc": "2.0", "method": method, "params": {**out, "_meta": {SID: 7}}}
    assert got == expected


def test_a_graceful_end_answers_the_listen_with_its_id() -> None:
    assert RL.ended("L") == {"resultType": "complete", "_meta": {SID: "L"}}


@pytest.mark.parametrize(("steps", "sent", "left"), [
    ([("+", ["a"])], [("+", ("a",))], {"a": 1}),
    ([("+", ["a"]), ("+", ["a", "b"])], [("+", ("a",)), ("+", ("b",))], {"a": 2, "b": 1}),
    ([("+", ["a"]), ("+", ["a"]), ("-", ["a"])], [("+", ("a",)), ("+", ()), ("-", ())], {"a": 1}),
    ([("+", ["a"]), ("+", ["a"]), ("-", ["a"]), ("-", ["a"])], [("+", ("a",)), ("+", ()), ("-", ()), ("-", ("a",))],
     {}),
    ([("-", ["a"])], [("-", ())], {}),  # never subscribed: nothing to unsubscribe
])
def test_a_session_subscribes_a_uri_once_for_all_its_listens(steps: list[tuple[str, list[str]]],
                                                             sent: list[tuple[str, tuple[str, ...]]],
                                                             left: dict[str, int]) -> None:
    counts: dict[str, int] = {}
    said = []
    for sign, uris in steps:
        counts, changed = (RL.subscribe if sign == "+" else RL.unsubscribe)(counts, uris)
        said.append((sign, changed))
    assert (said, counts) == (sent, left)


@pytest.mark.parametrize(("current", "wanted", "to_set"), [
    (None, ["info"], "info"),
    ("info", ["info"], None),  # unchanged: nothing sent
    ("info", ["warning"], "warning"),
    ("warning", ["warning", "debug"], "debug"),  # the most verbose of the requests in progress
    ("debug", ["error", "debug"], None),
    ("info", [], None),
    ("info", ["loud"], None),
])
def test_the_session_level_changes_only_when_its_requests_want_another(current: str | None, wanted: list[str],
                                                                       to_set: str | None) -> None:
    assert RL.level_to_set(current, wanted) == to_set


@pytest.mark.parametrize(("message", "request_level", "sent"), [
    ("info", "info", True), ("error", "info", True), ("debug", "info", False),
    ("emergency", "debug", True), ("info", None, False), ("nonsense", "debug", False),
])
def test_a_log_message_reaches_a_request_at_or_above_its_level(message: str, request_level: str | None,
                                                               sent: bool) -> None:
    assert RL.log_wanted(message, request_level) is sent
    state = R.start("tools/call", {}, log_level=request_level)
    _, actions = R.handle(state, R.ServerNotified("notifications/message", {"level": message, "data": "d"}))
    assert bool(actions) is sent


def test_a_retry_says_its_own_log_level() -> None:
    state = R.start("tools/call", {"roots": {}}, log_level="debug")
    state, _ = R.handle(state, R.ServerAsked(1, "roots/list", {}))
    state, _ = R.handle(state, R.Drained())
    state, _ = R.handle(state, R.Retried({"in1": {"roots": []}}, None))  # this retry asked for no log messages
    _, actions = R.handle(state, R.ServerNotified("notifications/message", {"level": "error", "data": "d"}))
    assert actions == ()
    assert R.for_request({"method": "notifications/message", "params": {"level": "info"}}, None) == {
        "method": "notifications/message", "params": {"level": "info"}}
