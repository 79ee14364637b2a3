"""Upstream results/errors/notifications -> the legacy client (2026-07-28 basic §ResultType, basic/patterns
§Multi Round-Trip Requests; docs/design/eras.md#resulttype-ttlms-and-cachescope-are-consumed-not-forwarded,
docs/design/eras.md#schema-widening)."""

from __future__ import annotations

import pytest

from adapters.errors import REJECTIONS, translate_upstream_error
from adapters.results import Complete, InputRequired, Invalid, classify_result, request_notification
from tests import schema

TEXT = [{"type": "text", "text": "hi"}]


@pytest.mark.parametrize("method,result,kind", [
    ("tools/call", {"resultType": "complete", "content": TEXT}, Complete),
    ("tools/call", {"content": TEXT}, Complete),  # absent resultType = complete
    ("tools/call", {"resultType": "task", "taskId": "t"}, Invalid),  # undeclared extension value
    ("tools/call", {"resultType": "input_required", "requestState": "s"}, InputRequired),
    ("tools/call", {"resultType": "input_required",
                    "inputRequests": {"k": {"method": "roots/list", "params": {}}}}, InputRequired),
    ("prompts/get", {"resultType": "input_required", "requestState": "s"}, InputRequired),
    ("resources/read", {"resultType": "input_required", "requestState": "s"}, InputRequired),
    ("tools/list", {"resultType": "input_required", "requestState": "s"}, Invalid),  # not an MRTR method
    ("completion/complete", {"resultType": "input_required", "requestState": "s"}, Invalid),
    ("tools/call", {"resultType": "input_required"}, Invalid),  # neither field
    ("tools/call", {"resultType": "input_required", "requestState": 5}, Invalid),
    ("tools/call", {"resultType": "input_required", "inputRequests": {"k": {"method": "ping"}}}, Invalid),
    ("tools/call", {"resultType": "complete", "content": "not a list"}, Invalid),  # schema-breaking
    ("tools/call", ["not", "an", "object"], Invalid),
    ("tools/list", {"resultType": "complete", "tools": []}, Complete),  # absent ttl/scope tolerated
])
def test_classify_result(method, result, kind) -> None:
    assert isinstance(classify_result(method, result), kind)


def test_complete_result_drops_2026_only_fields_and_keeps_the_rest() -> None:
    result = {"resultType": "complete", "ttlMs": 5, "cacheScope": "public", "content": TEXT,
              "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "s", "version": "1"}}, "extraField": {"a": 1}}
    out = classify_result("tools/call", result)
    assert isinstance(out, Complete)
    assert out.result == {"content": TEXT, "_meta": result["_meta"], "extraField": {"a": 1}}
    assert out.result["extraField"] is result["extraField"]  # unknown values are forwarded, not re-encoded
    schema.check("2025-11-25", {"jsonrpc": "2.0", "id": 1, "result": out.result}, "tools/call")


@pytest.mark.parametrize("structured,kept", [({"a": 1}, True), ([1, 2], False), ("text", False), (3, False)])
def test_non_object_structured_content_is_dropped(structured, kept) -> None:
    out = classify_result("tools/call", {"resultType": "complete", "content": TEXT, "structuredContent": structured})
    assert ("structuredContent" in out.result) == kept
    schema.check("2025-11-25", {"jsonrpc": "2.0", "id": 1, "result": out.result}, "tools/call")


def test_tools_list_drops_invalid_x_mcp_header_tools_and_non_object_output_schemas() -> None:
    tools = [
        {"name": "ok", "inputSchema": {"type": "object"}, "outputSchema": {"type": "object"}},
        {"name": "arr", "inputSchema": {"type": "object"}, "outputSchema": {"type": "array"}},
        {"name": "bad", "inputSchema": {"type": "object", "properties": {
            "n": {"type": "number", "x-mcp-header": "N"}}}},
        {"name": "under_items", "inputSchema": {"type": "object", "properties": {  # 2026 x-mcp-header: not
            "l": {"type": "array", "items": {"type": "string", "x-mcp-header": "L"}}}}},  # a properties chain
    ]
    out = classify_result("tools/list", {"resultType": "complete", "tools": tools, "ttlMs": 0, "cacheScope": "public"})
    assert [t["name"] for t in out.result["tools"]] == ["ok", "arr"]
    assert "outputSchema" not in out.result["tools"][1] and "ttlMs" not in out.result
    schema.check("2025-11-25", {"jsonrpc": "2.0", "id": 1, "result": out.result}, "tools/list")


@pytest.mark.parametrize("error,code,logged", [
    ({"code": -32021, "message": "needs elicitation", "data": {"requiredCapabilities": {"elicitation": {}}}},
     -32021, False),
    ({"code": -32020, "message": "header mismatch"}, -32603, True),
    ({"code": -32022, "message": "unsupported", "data": {"supported": ["x"], "requested": "y"}}, -32603, True),
    ({"code": -32042, "message": "url required"}, -32603, True),
    ({"code": -32050, "message": "undefined reserved"}, -32603, True),
    ({"code": -32602, "message": "resource not found"}, -32602, False),
    ({"code": -32002, "message": "old not found"}, -32002, False),
    ({"code": -32601, "message": "nope"}, -32601, False),
    ({"code": "x", "message": "bad"}, -32603, True),
])
def test_upstream_error_translation(error, code, logged) -> None:
    out = translate_upstream_error(error)
    assert out.code == code and bool(out.log) == logged
    if code == -32021:
        assert out.data == error["data"] and out.message == error["message"]


def test_the_status_table_never_uses_200_and_404_only_for_sessions() -> None:
    assert all(status >= 400 for status, _ in REJECTIONS.values())
    assert [r for r, (s, _) in REJECTIONS.items() if s == 404] == ["unknown_session"]


@pytest.mark.parametrize("message,token,expected", [
    ({"method": "notifications/progress", "params": {"progressToken": "up", "progress": 1}}, "mine",
     {"progressToken": "mine", "progress": 1}),
    ({"method": "notifications/progress", "params": {"progressToken": "up", "progress": 1}}, None, None),
    ({"method": "notifications/message", "params": {"level": "info", "data": "x"}}, None,
     {"level": "info", "data": "x"}),
    ({"method": "notifications/tools/list_changed", "params": {}}, None, None),
    ({"method": "notifications/message", "params": {"level": "info", "data": "x",
                                                    "_meta": {"io.modelcontextprotocol/subscriptionId": 1}}},
     None, {"level": "info", "data": "x"}),
])
def test_request_stream_notifications(message, token, expected) -> None:
    out = request_notification(message, token)
    assert (out["params"] if out else None) == expected
    if out:
        schema.check("2025-11-25", out)


def test_progress_only_moves_forward_across_rounds() -> None:
    from adapters.results import progress_advances
    last = None
    kept = []
    for value in (1, 2, 1, 2, 3, 0.5, 4):
        keep, last = progress_advances(last, {"method": "notifications/progress", "params": {"progress": value}})
        if keep:
            kept.append(value)
    assert kept == [1, 2, 3, 4]
    assert progress_advances(3, {"method": "notifications/message", "params": {}}) == (True, 3)


def test_an_upstream_refusal_of_the_clients_own_token_carries_its_status_and_challenge() -> None:
    from adapters.errors import token_refused
    challenge = 'Bearer resource_metadata="https://up.example/.well-known/oauth-protected-resource"'
    bare = token_refused(401, (challenge,), None, forwarded=True)
    assert bare.to_wire() == {"code": -32603, "message": "the upstream server refused the client's credentials "
                              "(HTTP 401)", "data": {"upstream": "unauthorized", "upstreamStatus": 401,
                                                     "wwwAuthenticate": challenge}}
    assert bare.challenge.answer() == (401, (("WWW-Authenticate", challenge),))
    with_body = token_refused(403, (), {"code": -32001, "message": "scope"}, forwarded=True)
    assert with_body.to_wire() == {"code": -32001, "message": "scope"}  # the upstream's own error, translated
    assert with_body.challenge.answer() == (403, ())
    assert REJECTIONS[with_body.challenge.reason][0] == 403


def test_several_challenges_are_each_kept_and_answered_one_header_each() -> None:
    from adapters.errors import token_refused
    challenges = ('Bearer realm="a", scope="x"', 'DPoP algs="ES256"')
    error = token_refused(401, challenges, None, forwarded=True)
    assert error.data["wwwAuthenticate"] == list(challenges)
    assert error.challenge.answer() == (401, (("WWW-Authenticate", challenges[0]), ("WWW-Authenticate",
                                                                                     challenges[1])))


def test_a_refusal_of_the_gateways_own_credential_is_a_plain_upstream_failure() -> None:
    from adapters.errors import token_refused
    error = token_refused(401, ("Bearer realm=x",), {"code": -32001, "message": "bad gateway token"}, forwarded=False)
    assert error.challenge is None and error.code == -32603 and error.data == {"upstream": "unauthorized"}
    assert "realm" not in str(error.to_wire()) and "bad gateway token" not in str(error.to_wire())
    assert error.log  # the operator is told
