"""adapters.check: argument synthesis from schemas, canned answers, and the judging of observations."""

from __future__ import annotations

from adapters import check as C
from adapters.errors import GATEWAY_FAULT_MESSAGE


def test_arguments_take_required_properties_only_and_prefer_declared_values() -> None:
    schema = {"type": "object", "required": ["a", "b", "c", "d", "e", "n"], "properties": {
        "a": {"type": "string", "const": "fixed"}, "b": {"type": "string", "default": "dflt", "enum": ["x"]},
        "c": {"type": "string", "enum": ["first", "second"]}, "d": {"type": "integer", "examples": [7]},
        "e": {"type": "number", "minimum": 2.5}, "n": {"type": "integer", "exclusiveMinimum": 3},
        "optional": {"type": "string"}}}
    assert C.synthesize_arguments(schema) == {"a": "fixed", "b": "dflt", "c": "first", "d": 7, "e": 2.5, "n": 4}


def test_arguments_fall_back_to_type_minima() -> None:
    schema = {"type": "object", "required": ["s", "i", "b", "arr", "obj", "u", "neg", "any"], "properties": {
        "s": {"type": "string", "minLength": 3}, "i": {"type": "integer"}, "b": {"type": "boolean"},
        "arr": {"type": "array", "items": {"type": "string"}, "minItems": 2},
        "obj": {"type": "object", "required": ["k"], "properties": {"k": {"type": ["null", "integer"]}}},
        "u": {"type": "string", "format": "uri"}, "neg": {"type": "integer", "maximum": -5}, "any": True}}
    assert C.synthesize_arguments(schema) == {"s": "xxx", "i": 0, "b": False, "arr": ["", ""], "obj": {"k": 0},
                                              "u": "file:///", "neg": -5, "any": None}


def test_arguments_try_simple_strings_against_a_pattern_and_the_first_satisfiable_arm() -> None:
    schema = {"type": "object", "required": ["p", "o"], "properties": {
        "p": {"type": "string", "pattern": "^[0-9]+$"},
        "o": {"anyOf": [{"$ref": "#/$defs/x"}, {"type": "integer"}]}}}
    assert C.synthesize_arguments(schema) == {"p": "0", "o": 0}


def test_unsatisfiable_schemas_are_skipped_with_the_reason() -> None:
    for prop, words in (({"$ref": "#/$defs/x"}, "$ref"), ({"type": "string", "pattern": "^[A-Z]{4}$"}, "pattern"),
                        ({"type": "frobnicate"}, "unknown type")):
        skip = C.synthesize_arguments({"type": "object", "required": ["x"], "properties": {"x": prop}})
        assert isinstance(skip, C.Skip) and "x:" in skip.reason and words in skip.reason


def test_canned_answers_are_valid_2025_results() -> None:
    from mcp_types.methods import validate_client_result

    form = {"mode": "form", "message": "m", "requestedSchema": {"type": "object", "properties": {
        "id": {"type": "string", "enum": ["n1", "n2"]}, "confirm": {"type": "boolean"}}}}
    cases = {"sampling/createMessage": {"messages": [], "maxTokens": 5}, "elicitation/create": form,
             "roots/list": {}}
    for method, params in cases.items():
        answer = C.canned_answer(method, params, ("file:///tmp",))
        validate_client_result(method, C.LEGACY, answer)
    assert C.canned_answer("elicitation/create", form, ())["content"] == {"id": "n1", "confirm": True}
    assert C.canned_answer("elicitation/create", {"mode": "url", "url": "https://x", "message": "m",
                                                  "elicitationId": "e"}, ()) == {"action": "accept"}
    assert C.input_kind("elicitation/create", {"mode": "url"}) is C.InputKind.ELICITATION_URL


def test_listing_problems_name_dropped_tools_and_removed_output_schemas() -> None:
    bad = {"name": "bad", "inputSchema": {"type": "object", "properties": {
        "xs": {"type": "array", "items": {"type": "string", "x-mcp-header": "X"}}}}}
    arr = {"name": "arr", "inputSchema": {"type": "object"}, "outputSchema": {"type": "array"}}
    fine = {"name": "fine", "inputSchema": {"type": "object"}}
    legacy = [{"name": "arr", "inputSchema": {"type": "object"}}, fine]
    found = C.listing_problems([bad, arr, fine], legacy)
    assert [p.kind for p in found["bad"]] == [C.ProblemKind.DROPPED] and "x-mcp-header" in found["bad"][0].detail
    assert [p.kind for p in found["arr"]] == [C.ProblemKind.OUTPUT_SCHEMA_REMOVED] and "fine" not in found


def test_judging_results() -> None:
    ok = C.judge(C.Observation("t", (), 1, {"content": [{"type": "text", "text": "hi"}]}))
    assert ok.status is C.Status.OK and ok.problems == ()
    removed = (C.Problem(C.ProblemKind.OUTPUT_SCHEMA_REMOVED, "x"),)
    assert C.judge(C.Observation("t", (), 1, {"content": []}), removed).status is C.Status.OK
    broken = C.judge(C.Observation("t", (), 1, {"content": [{"type": "text"}]}))
    assert broken.status is C.Status.FAILED and broken.problems[0].kind is C.ProblemKind.RESULT_SCHEMA


def test_judging_errors() -> None:
    def judged(error, inputs=()):
        return C.judge(C.Observation("t", inputs, 10, error=error))

    limit = judged({"code": -32000, "message": "gateway limit max_rounds (10) exceeded",
                    "data": {"limit": "max_rounds", "value": 10}})
    assert limit.status is C.Status.FAILED and limit.problems[0].kind is C.ProblemKind.ROUND_LIMIT
    fault = judged({"code": -32603, "message": GATEWAY_FAULT_MESSAGE})
    assert fault.problems[0].kind is C.ProblemKind.MAPPING_FAULT
    refused = judged({"code": -32603, "message": "bad", "data": {"upstream": "invalid_result"}})
    assert refused.problems[0].kind is C.ProblemKind.UPSTREAM_ANSWER_REFUSED
    args = judged({"code": -32602, "message": "no"})
    assert args.status is C.Status.SKIPPED and "--args" in (args.error or "")
    answers = judged({"code": -32602, "message": "no"}, (C.InputKind.SAMPLING,))
    assert answers.status is C.Status.SKIPPED and "canned answers" in (answers.error or "")
    other = judged({"code": -32601, "message": "unknown tool"})
    assert other.status is C.Status.FAILED and other.problems == () and other.error == "-32601 unknown tool"


def test_timeouts() -> None:
    url = C.judge(C.Observation("t", (C.InputKind.ELICITATION_URL,), 3, timed_out=True))
    assert url.status is C.Status.SKIPPED and "out-of-band" in (url.error or "")
    plain = C.judge(C.Observation("t", (), 3, timed_out=True))
    assert plain.status is C.Status.FAILED and plain.problems[0].kind is C.ProblemKind.TIMEOUT


def test_server_verdicts() -> None:
    modern = {"result": {"supportedVersions": ["2026-07-28"],
                         "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "s", "version": "2"}}}}
    assert C.judge_server(200, modern, "", None) == C.ServerVerdict(True, "s 2", {"name": "s", "version": "2"})
    other = C.judge_server(200, {"result": {"supportedVersions": ["2027-01-01"]}}, "", None)
    assert not other.modern and "2027-01-01" in other.description
    legacy = C.judge_server(400, {"error": {"code": -32000, "message": "Missing session ID"}}, "", "2025-11-25")
    assert legacy.description == "a 2025-era server: it answered 400 Missing session ID"
    assert C.judge_server(404, None, "Not Found", None).description.endswith("it answered 404 Not Found")


def test_outputs() -> None:
    reports = [C.ToolReport("a", C.Status.OK, (C.InputKind.ROOTS,), 2),
               C.ToolReport("b", C.Status.SKIPPED, error="why")]
    assert C.summary(reports) == {"ok": 1, "failed": 0, "skipped": 1} and C.exit_code(reports) == 0
    assert C.exit_code([C.ToolReport("c", C.Status.FAILED)]) == 1
    table = C.render_table(reports).splitlines()
    assert table[0].split() == ["tool", "status", "inputs", "rounds", "problems"]
    assert table[1].split() == ["a", "ok", "roots", "2", "-"] and table[2].endswith("why")
    assert table[-1] == "2 tools: 1 ok, 0 failed, 1 skipped"
    assert reports[0].to_json() == {"name": "a", "status": "ok", "inputs": ["roots"], "rounds": 2, "problems": [],
                                    "error": None}
