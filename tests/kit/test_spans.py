"""What the OpenTelemetry spans say (kit.spans): names, attributes, and which spans an action batch of the
bridge machine opens and closes."""

from __future__ import annotations

from adapters import bridge as B
from adapters.records import PendingRound
from kit import spans as S


def _record(**changes: object) -> PendingRound:
    record = PendingRound("b1", "s1", 7, "tools/call", {"name": "t", "arguments": {"secret": "x"}})
    for key, value in changes.items():
        setattr(record, key, value)
    return record


def test_names_carry_the_target_of_a_tool_or_prompt() -> None:
    assert S.span_name("tools/call", {"name": "echo"}) == "tools/call echo"
    assert S.span_name("prompts/get", {"name": "greet"}) == "prompts/get greet"
    assert S.span_name("resources/read", {"name": "not a target"}) == "resources/read"
    assert S.span_name("tools/call", {}) == "tools/call"


def test_arguments_are_an_attribute_only_with_content() -> None:
    params = {"name": "t", "arguments": {"secret": "x"}}
    plain = S.request_attributes("tools/call", params, "2025-11-25", S.RequestKind.BRIDGED, "p", content=False)
    assert plain == {"mcp.method.name": "tools/call", "mcp_gateway.kind": "bridged",
                     "mcp.protocol.version": "2025-11-25", "mcp_gateway.peer": "p", "gen_ai.tool.name": "t"}
    kept = S.request_attributes("tools/call", params, None, S.RequestKind.BRIDGED, None, content=True)
    assert kept["mcp_gateway.arguments"] == '{"secret":"x"}' and "mcp.protocol.version" not in kept


def test_a_batch_opens_a_round_and_a_span_per_client_request() -> None:
    ask = {"jsonrpc": "2.0", "id": "g1", "method": "elicitation/create", "params": {"mode": "url", "url": "u"}}
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "g0"}}
    round_, asks = S.opened(_record(round=2, request_state="s"), [B.SendToClient(ask), B.SendToClient(note),
                                                                  B.CallUpstream({})])
    assert round_ == S.OpenRound(2, True)
    assert [(a.gateway_id, a.kind) for a in asks] == [("g1", "elicitation.url")]  # notifications are no request
    assert S.ask_attributes(asks[0], content=False) == {"mcp.method.name": "elicitation/create",
                                                        "jsonrpc.request.id": "g1",
                                                        "mcp_gateway.input_kind": "elicitation.url"}


def test_a_round_outcome_is_what_the_next_batch_did() -> None:
    ask = B.SendToClient({"jsonrpc": "2.0", "id": "g1", "method": "roots/list"})
    assert S.round_outcome([ask, B.ArmTimer(B.Timer.CLIENT_ANSWER, 1, 1)]) is S.RoundOutcome.INPUT_REQUIRED
    assert S.round_outcome([B.ArmTimer(B.Timer.BACKOFF, 0.05, 1)]) is S.RoundOutcome.WAITING
    assert S.round_outcome([B.Finish({"jsonrpc": "2.0", "id": 7, "result": {}})]) is S.RoundOutcome.FINISHED
    assert S.round_outcome([B.CallUpstream({})]) is S.RoundOutcome.RETRY


def test_answered_client_requests_are_those_no_longer_outstanding() -> None:
    assert S.answered_asks(["g1", "g2"], _record(outstanding={"g2": "k"})) == ["g1"]


def test_the_end_says_rounds_kinds_and_the_error() -> None:
    error = {"jsonrpc": "2.0", "id": 7, "error": {"code": -32000, "message": "gateway limit max_rounds"}}
    attrs, description = S.finished_attributes(error, 2, 3, ["sampling"])
    assert attrs == {"mcp_gateway.rounds": 2, "mcp_gateway.upstream_calls": 3, "mcp_gateway.input_kinds": ["sampling"],
                     "rpc.jsonrpc.error_code": -32000}
    assert description == "-32000 gateway limit max_rounds"
    cancelled, none = S.finished_attributes(None, 0, 1, [])
    assert cancelled["mcp_gateway.cancelled"] is True and none is None
    tool_error = {"jsonrpc": "2.0", "id": 7, "result": {"isError": True, "content": []}}
    assert S.finished_attributes(tool_error, 0, 1, [])[0]["mcp_gateway.tool_error"] is True
