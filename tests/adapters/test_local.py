"""adapters.local.decide: what a request on a live legacy session becomes, table-driven."""

from __future__ import annotations

import pytest

from adapters import local

V = "2025-11-25"


@pytest.mark.parametrize("method, params, expected", [
    ("ping", {}, local.Reply({})),
    ("tasks/list", {}, local.Reply(error=local.not_found("tasks/list"))),
    ("no/such", {}, local.Reply(error=local.not_found("no/such"))),
    ("logging/setLevel", {"level": "warning"}, local.SetLevel("warning")),
    ("resources/subscribe", {"uri": "file:///a"}, local.ChangeSubscription({"uri": "file:///a"}, True)),
    ("resources/unsubscribe", {"uri": "file:///a"}, local.ChangeSubscription({"uri": "file:///a"}, False)),
    ("tools/call", {"name": "echo", "arguments": {}}, local.Forward()),
    ("tools/list", {}, local.Forward()),
])
def test_a_request_is_answered_here_or_forwarded(method, params, expected) -> None:
    assert local.decide(method, params, V) == expected


def test_a_second_initialize_and_invalid_params_are_refused_here() -> None:
    again = local.decide("initialize", {}, V)
    assert isinstance(again, local.Reply) and again.error is not None and "already initialized" in again.error.message
    bad = local.decide("tools/call", {"arguments": {}}, V)  # no name: breaks the revision's request type
    assert isinstance(bad, local.Reply) and bad.error is not None and bad.error.code == -32602
    level = local.decide("logging/setLevel", {"level": "loud"}, V)
    assert isinstance(level, local.Reply) and level.error is not None and level.error.code == -32602
