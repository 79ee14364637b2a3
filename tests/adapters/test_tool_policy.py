"""Per-peer tool policy, pure: which tools a peer sees, which calls it may make, which need a scope, and the
configuration checks of its globs and scopes."""

from __future__ import annotations

import pytest

from adapters.errors import INVALID_PARAMS
from adapters.tool_policy import (
    OPEN,
    CallDecision,
    ToolPolicy,
    Verdict,
    decide_call,
    filter_answer,
    filter_list,
    glob_problem,
    policy_from_record,
    policy_record,
    scope_problem,
    unknown_tool,
)

READ_ONLY = ToolPolicy(allowed=("read_*", "search"), denied=("read_secrets",))
NO_ADMIN = ToolPolicy(denied=("admin.*",))
SCOPED = ToolPolicy(scopes=(("deploy*", "deploy"), ("deploy_prod", "prod"), ("*", "mcp")))
NOTHING = ToolPolicy(allowed=())


@pytest.mark.parametrize("policy, name, scopes, expected", [
    (OPEN, "anything", None, CallDecision(Verdict.ALLOW)),
    (READ_ONLY, "read_file", None, CallDecision(Verdict.ALLOW)),
    (READ_ONLY, "search", None, CallDecision(Verdict.ALLOW)),
    (READ_ONLY, "write_file", None, CallDecision(Verdict.HIDDEN)),  # not allowed
    (READ_ONLY, "read_secrets", None, CallDecision(Verdict.HIDDEN)),  # denied wins over allowed
    (READ_ONLY, "Read_file", None, CallDecision(Verdict.HIDDEN)),  # globs are case-sensitive, like tool names
    (NO_ADMIN, "admin.reset", None, CallDecision(Verdict.HIDDEN)),
    (NO_ADMIN, "administer", None, CallDecision(Verdict.ALLOW)),
    (NOTHING, "read_file", None, CallDecision(Verdict.HIDDEN)),  # an empty allow-list allows nothing
    # every matching tool_scopes glob adds its scope; all must be held
    (SCOPED, "echo", frozenset({"mcp"}), CallDecision(Verdict.ALLOW)),
    (SCOPED, "deploy_prod", frozenset({"mcp", "deploy"}), CallDecision(Verdict.STEP_UP, ("deploy", "mcp", "prod"))),
    (SCOPED, "deploy_prod", frozenset({"mcp", "deploy", "prod"}), CallDecision(Verdict.ALLOW)),
    (SCOPED, "deploy_dev", frozenset(), CallDecision(Verdict.STEP_UP, ("deploy", "mcp"))),
    (SCOPED, "echo", None, CallDecision(Verdict.HIDDEN)),  # no verified token: no scope can be shown, fail closed
])
def test_decide_call(policy, name, scopes, expected):
    assert decide_call(policy, name, scopes) == expected


def tools_page(*names, cursor="opaque+/=cursor", **extra):
    return {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in names], "nextCursor": cursor, **extra}


@pytest.mark.parametrize("policy, scoped, names, kept", [
    (OPEN, True, ("a", "b"), ("a", "b")),
    (READ_ONLY, True, ("read_file", "write_file", "read_secrets", "search"), ("read_file", "search")),
    (NOTHING, True, ("a", "b"), ()),  # a page may come out empty: the cursor still leads on
    (SCOPED, True, ("echo", "deploy_prod"), ("echo", "deploy_prod")),  # listed: the call steps up
    (SCOPED, False, ("echo", "deploy_prod"), ()),  # without [gateway.auth], never callable, so never listed
])
def test_filter_list_keeps_the_cursor_and_every_other_key(policy, scoped, names, kept):
    page = tools_page(*names, ttlMs=5, _meta={"k": "v"})
    out = filter_list(policy, page, scoped)
    assert [t["name"] for t in out["tools"]] == list(kept)
    assert out["nextCursor"] == "opaque+/=cursor" and out["ttlMs"] == 5 and out["_meta"] == {"k": "v"}
    assert page == tools_page(*names, ttlMs=5, _meta={"k": "v"})  # the upstream's value is not changed


def test_filter_list_leaves_what_is_not_a_named_tool_to_the_schema_checks():
    page = {"tools": [{"name": 3}, "junk", {"name": "write"}]}
    assert filter_list(READ_ONLY, page, True)["tools"] == [{"name": 3}, "junk"]
    assert filter_list(READ_ONLY, {"tools": "nope"}, True) == {"tools": "nope"}
    unchanged = tools_page("read_file")
    assert filter_list(READ_ONLY, unchanged, True) is unchanged  # nothing hidden: the same value, no copy


@pytest.mark.parametrize("message, names", [
    ({"jsonrpc": "2.0", "id": 1, "result": tools_page("read_file", "write_file")}, ["read_file"]),
    ({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "x"}}, None),
    ({"jsonrpc": "2.0", "method": "notifications/message", "params": {}}, None),
])
def test_filter_answer_edits_only_a_result(message, names):
    out = filter_answer(READ_ONLY, message, True)
    if names is None:
        assert out is message
    else:
        assert [t["name"] for t in out["result"]["tools"]] == names and out["id"] == 1


def test_unknown_tool_reads_like_an_unknown_tool_and_names_the_peer_only_in_the_log():
    error = unknown_tool("write_file", "ide")
    assert error.code == INVALID_PARAMS and error.message == "Unknown tool: write_file"
    assert "ide" not in str(error.to_wire()) and "ide" in (error.log or "")


@pytest.mark.parametrize("glob, bad", [
    ("read_*", False), ("tool[0-9]", False), ("[!x]*", False), ("a.b-c_d", False), ("*", False),
    ("", True), ("read *", True), ("tab\there", True), ("tool[0-9", True), ("x" * 257, True), ("bell\x07", True),
])
def test_glob_problems(glob, bad):
    assert (glob_problem(glob) is not None) is bad


@pytest.mark.parametrize("scope, bad", [
    ("mcp", False), ("tools:deploy", False), ("https://api.example.com/deploy", False), ("a!#[]", False),
    ("", True), ("two scopes", True), ('quo"te', True), ("back\\slash", True), ("é", True),
])
def test_scope_problems(scope, bad):
    assert (scope_problem(scope) is not None) is bad


@pytest.mark.parametrize("policy", [OPEN, READ_ONLY, NO_ADMIN, SCOPED, NOTHING])
def test_the_record_form_reads_back_the_same(policy):
    assert policy_from_record(policy_record(policy)) == policy


def test_an_open_policy_keeps_nothing_in_the_record_and_an_old_record_reads_open():
    assert policy_record(OPEN) is None
    assert policy_from_record(None) == OPEN
