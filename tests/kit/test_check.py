"""kit.check: argument synthesis from schemas, canned answers, and the judging of observations."""

from __future__ import annotations

import re
import time

import pytest

from adapters.errors import translate_upstream_error
from kit import check as C


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


def test_arguments_take_a_patterned_strings_declared_value_and_the_first_satisfiable_arm() -> None:
    schema = {"type": "object", "required": ["p", "o"], "properties": {
        "p": {"type": "string", "pattern": "^[0-9]+$", "examples": ["42"]},
        "o": {"anyOf": [{"$ref": "#/$defs/x"}, {"type": "integer"}]}}}
    assert C.synthesize_arguments(schema) == {"p": "42", "o": 0}


def test_unsatisfiable_schemas_are_skipped_with_the_reason() -> None:
    for prop, words in (({"$ref": "#/$defs/x"}, "$ref"), ({"type": "string", "pattern": "^[0-9]+$"}, "pattern"),
                        ({"type": "frobnicate"}, "unknown type")):
        skip = C.synthesize_arguments({"type": "object", "required": ["x"], "properties": {"x": prop}})
        assert isinstance(skip, C.Skip) and "x:" in skip.reason and words in skip.reason


def test_a_pattern_is_never_run_so_a_catastrophic_one_costs_nothing() -> None:
    # Fed to `re` with the old candidates ("a" * 27 among them), this pattern backtracks 2**27 times.
    schema = {"type": "object", "required": ["x"], "properties": {
        "x": {"type": "string", "minLength": 27, "pattern": "^(a|a)+b$"}}}
    started = time.perf_counter()
    skip = C.synthesize_arguments(schema)
    assert time.perf_counter() - started < 0.5
    assert isinstance(skip, C.Skip) and "x: has a pattern" in skip.reason and "--args" in skip.reason


def test_argument_synthesis_is_bounded_in_size() -> None:
    def skip_reason(prop: dict) -> str:
        out = C.synthesize_arguments({"type": "object", "required": ["x"], "properties": {"x": prop}})
        assert isinstance(out, C.Skip), out
        return out.reason

    assert "larger than the check builds" in skip_reason({"type": "string", "minLength": 4_000_000_000})
    nested: dict = {"type": "string", "minLength": 8}
    for _ in range(8):  # 8 ** 8 strings of 8 characters if built
        nested = {"type": "array", "minItems": 8, "items": nested}
    assert "larger than the check builds" in skip_reason(nested)
    big = {"type": "array", "minItems": 10_000, "items": {"const": "y" * 1000}}  # 10 MB of one declared value
    assert "larger than the check builds" in skip_reason(big)
    wide = {"type": "object", "required": [f"p{i}" for i in range(100_000)], "properties": {}}
    assert "larger than the check builds" in skip_reason(wide)
    assert C.synthesize_arguments({"type": "object", "required": ["x"], "properties": {"x": {
        "type": "string", "minLength": C.MAX_ARGUMENT_UNITS - 10}}}) == {"x": "x" * (C.MAX_ARGUMENT_UNITS - 10)}


def test_malformed_schemas_are_skipped_not_raised() -> None:
    for prop in ({"type": "string", "minLength": "abc"}, {"type": "string", "minLength": -1},
                 {"type": "array", "minItems": 1e400}, {"type": "integer", "minimum": "0"},
                 {"type": "number", "minimum": float("inf")}, {"type": "object", "properties": [1],
                                                                "required": ["a"]},
                 {"type": "object", "required": "abc"}, {"type": "object", "required": [["a"]]}):
        out = C.synthesize_arguments({"type": "object", "required": ["x"], "properties": {"x": prop}})
        assert isinstance(out, C.Skip) and out.reason.startswith("cannot build arguments from inputSchema: x:"), prop
    assert C.form_content({"properties": [1, 2]}) == {}


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
    fault = judged(translate_upstream_error({"code": -32020, "message": "header mismatch"}).to_wire())
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


def test_tools_pages_are_read_or_refused_in_one_line() -> None:
    tool = {"name": "t", "inputSchema": {"type": "object"}}
    assert C.tools_page({"result": {"tools": [tool], "nextCursor": "c"}}) == ([tool], "c")
    assert C.tools_page({"result": {"tools": []}}) == ([], None)
    for message, said in (({"result": {"tools": [1, "x"]}}, "tools[0] is not an object"),
                          ({"result": {"tools": [{"name": ["t"]}]}}, "tools[0] is not an object with a string name"),
                          ({"result": {"tools": "abc"}}, "tools is not an array"),
                          ({"result": {"tools": [], "nextCursor": 5}}, "nextCursor is not a string"),
                          ({"result": []}, "no result object"), (None, "no result object"),
                          ({"error": {"code": -32603, "message": "boom"}}, "tools/list failed: -32603 boom")):
        with pytest.raises(C.Malformed, match=re.escape(said)):
            C.tools_page(message)


def test_a_malformed_discover_result_is_a_verdict_not_a_crash() -> None:
    for result in ({"supportedVersions": 5}, {"supportedVersions": [{}]}, {"supportedVersions": ["2026-07-28"],
                                                                            "_meta": []}):
        verdict = C.judge_server(200, {"result": result}, "", None)
        assert isinstance(verdict, C.ServerVerdict)
    assert not C.judge_server(200, {"result": {"supportedVersions": 5}}, "", None).modern
    assert C.judge_server(200, {"result": {"supportedVersions": ["2026-07-28"], "_meta": {
        "io.modelcontextprotocol/serverInfo": ["x"]}}}, "", None).modern
