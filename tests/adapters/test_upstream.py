"""The one upstream request builder: _meta, headers, Mcp-Name sentinel, x-mcp-header mirroring (2026-07-28
basic/transports, server/tools §x-mcp-header)."""

from __future__ import annotations

import base64

import orjson
import pytest

from adapters.upstream import (
    SessionView,
    build_listen,
    build_request,
    encode_header_value,
    header_map_of,
    learned_header_maps,
    x_mcp_header_map,
)
from tests import schema

VIEW = SessionView({"sampling": {}, "roots": {}}, {"name": "client", "version": "9"}, "debug", "Bearer t")


def test_full_meta_and_headers_on_a_tools_call() -> None:
    # Opaque: must travel as the very same object (built at run time, so `is` cannot hold by interning). A
    # progress token is a string or an integer (2025-11-25 basic/utilities §Progress).
    token = "".join(["opaque-", "tøken-", str(len("x" * 7))])
    params = {"name": "echo", "arguments": {"text": "hi"}, "task": {"ttl": 5},
              "_meta": {"progressToken": token, "traceparent": "00-x", "io.modelcontextprotocol/logLevel": "error"}}
    call = build_request("tools/call", params, request_id="u1", view=VIEW)
    body, meta = call.body, call.body["params"]["_meta"]
    assert body["id"] == "u1" and body["method"] == "tools/call"
    assert "task" not in body["params"]  # 2025-11-25: ignore task augmentation we did not declare
    assert meta["progressToken"] is token and meta["traceparent"] == "00-x"
    assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
    assert meta["io.modelcontextprotocol/clientCapabilities"] == {"sampling": {}, "roots": {}}
    assert meta["io.modelcontextprotocol/clientInfo"] == {"name": "client", "version": "9"}
    assert meta["io.modelcontextprotocol/logLevel"] == "debug"  # the session's level, not the client's key
    assert call.headers == {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
                            "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo",
                            "Authorization": "Bearer t"}
    assert "Mcp-Session-Id" not in call.headers and "Last-Event-ID" not in call.headers
    assert params["_meta"]["io.modelcontextprotocol/logLevel"] == "error"  # the client's dict is not mutated
    schema.check("2026-07-28", body)


def test_no_log_level_no_client_info_when_unset() -> None:
    call = build_request("tools/list", None, request_id=7, view=SessionView({}))
    meta = call.body["params"]["_meta"]
    assert set(meta) == {"io.modelcontextprotocol/protocolVersion", "io.modelcontextprotocol/clientCapabilities"}
    assert "Mcp-Name" not in call.headers and "Authorization" not in call.headers


def test_bridge_fields_are_added_only_through_extra() -> None:
    params = {"name": "t", "arguments": {}, "inputResponses": {"x": 1}, "requestState": "forged"}
    call = build_request("tools/call", params, request_id=1, view=VIEW)
    assert "inputResponses" not in call.body["params"] and "requestState" not in call.body["params"]
    state = "opaque\u00e9state=="
    call = build_request("tools/call", params, request_id=2, view=VIEW, extra={"requestState": state})
    assert call.body["params"]["requestState"] is state


@pytest.mark.parametrize("method,params,name", [
    ("resources/read", {"uri": "ui://notes/timeline.html"}, "ui://notes/timeline.html"),
    ("prompts/get", {"name": "draft_note"}, "draft_note"),
    ("tools/call", {"name": "caf\u00e9"}, "=?base64?" + base64.b64encode("caf\u00e9".encode()).decode() + "?="),
])
def test_mcp_name_header(method, params, name) -> None:
    assert build_request(method, params, request_id=1, view=VIEW).headers["Mcp-Name"] == name


@pytest.mark.parametrize("value,plain", [
    ("plain", True), ("with space", True), (" lead", False), ("trail ", False), ("tab\there", False),
    ("\u00fcber", False), ("=?base64?abc?=", False), ("", True),
])
def test_header_value_encoding(value, plain) -> None:
    encoded = encode_header_value(value)
    assert (encoded == value) == plain
    if not plain:
        assert base64.b64decode(encoded[len("=?base64?"):-2]).decode() == value


def test_a_value_with_no_utf8_form_is_the_clients_invalid_params() -> None:
    from adapters.upstream import UnencodableHeader
    with pytest.raises(UnencodableHeader) as name:
        build_request("tools/call", {"name": "bad\ud800"}, request_id=1, view=VIEW)
    error = name.value.error("tools/call")
    assert name.value.header == "Mcp-Name" and error.code == -32602 and "Mcp-Name" in error.message
    with pytest.raises(UnencodableHeader) as param:
        build_request("tools/call", {"name": "t", "arguments": {"r": "\udfff"}}, request_id=1, view=VIEW,
                      header_map={("r",): "Region"})
    assert param.value.header == "Mcp-Param-Region"


def test_x_mcp_header_mirroring() -> None:
    schema_ = {"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "opts": {"type": "object", "properties": {"dry": {"type": "boolean", "x-mcp-header": "Dry"}}}}}
    mapping = x_mcp_header_map(schema_)
    assert mapping == {("region",): "Region", ("opts", "dry"): "Dry"}
    call = build_request("tools/call", {"name": "t", "arguments": {"region": "eu west", "opts": {"dry": True}}},
                         request_id=1, view=VIEW, header_map=mapping)
    assert call.headers["Mcp-Param-Region"] == "eu west" and call.headers["Mcp-Param-Dry"] == "true"
    call = build_request("tools/call", {"name": "t", "arguments": {}}, request_id=1, view=VIEW, header_map=mapping)
    assert not [h for h in call.headers if h.startswith("Mcp-Param-")]


@pytest.mark.parametrize("bad", [
    {"properties": {"n": {"type": "number", "x-mcp-header": "N"}}},
    {"properties": {"a": {"type": "string", "x-mcp-header": "X"}, "b": {"type": "string", "x-mcp-header": "x"}}},
    {"properties": {"a": {"type": "string", "x-mcp-header": "bad header"}}},
    {"type": "string", "x-mcp-header": "Root"},
])
def test_invalid_x_mcp_header_is_detected(bad) -> None:
    assert x_mcp_header_map(bad) is None


STR_A = {"type": "string", "x-mcp-header": "A"}


@pytest.mark.parametrize("bad", [
    {"type": "object", "properties": {"tags": {"type": "array", "items": STR_A}}},
    {"type": "object", "properties": {"v": {"anyOf": [STR_A, {"type": "integer"}]}}},
    {"type": "object", "properties": {"v": {"allOf": [STR_A]}}},
    {"type": "object", "properties": {"v": {"oneOf": [STR_A]}}},
    {"type": "object", "properties": {"v": {"not": STR_A}}},
    {"type": "object", "properties": {"v": {"$ref": "#/$defs/a"}}, "$defs": {"a": STR_A}},
    {"type": "object", "properties": {"v": {"$ref": "#/definitions/a"}}, "definitions": {"a": STR_A}},
    {"type": "object", "if": {"properties": {"v": STR_A}}, "then": {"properties": {"w": STR_A}}},
    {"type": "object", "properties": {"o": {"type": "object", "if": {"type": "object"}, "else": {
        "properties": {"v": STR_A}}}}},
    {"type": "object", "additionalProperties": STR_A},
    {"type": "object", "patternProperties": {"^a": STR_A}},
    {"type": "object", "properties": {"o": {"type": "object", "items": {"properties": {"v": STR_A}}}}},
    {"type": "object", "properties": {"ok": {"type": "string", "x-mcp-header": "Ok"},
                                      "list": {"type": "array", "prefixItems": [STR_A]}}},
])
def test_x_mcp_header_off_a_pure_properties_chain_makes_the_tool_invalid(bad) -> None:
    # 2026-07-28 server/tools §x-mcp-header: the annotation must be reachable purely through
    # properties; under items, a composition keyword, $defs/$ref or anything else the tool is invalid.
    assert x_mcp_header_map(bad) is None


def test_x_mcp_header_names_and_data_that_only_look_like_the_annotation_are_not_annotations() -> None:
    schema_ = {"type": "object", "properties": {
        "x-mcp-header": {"type": "object", "properties": {"properties": {"type": "string", "x-mcp-header": "P"}}},
        "mode": {"type": "object", "default": {"x-mcp-header": "D"}, "enum": [{"x-mcp-header": "E"}],
                 "const": {"x-mcp-header": "C"}, "examples": [{"x-mcp-header": "X"}]},
        "deep": {"type": "object", "anyOf": [{"required": ["a"]}], "properties": {"a": {"type": "object",
                 "properties": {"b": {"type": "integer", "x-mcp-header": "B", "items": {"type": "string"}}}}}}}}
    assert x_mcp_header_map(schema_) == {("x-mcp-header", "properties"): "P", ("deep", "a", "b"): "B"}


def test_listen_request() -> None:
    call = build_listen("l1", VIEW, {"resourceSubscriptions": ["file:///a"]})
    assert call.body["params"]["notifications"] == {"resourceSubscriptions": ["file:///a"]}
    assert call.headers["Mcp-Method"] == "subscriptions/listen"
    schema.check("2026-07-28", call.body)


@pytest.mark.parametrize("method,error,refresh", [
    ("tools/call", {"code": -32020, "message": "m"}, True),
    ("tools/call", {"code": -32602, "message": "m"}, False),
    ("prompts/get", {"code": -32020, "message": "m"}, False),
])
def test_header_mismatch_triggers_one_tools_list_refresh(method, error, refresh) -> None:
    from adapters.upstream import needs_header_refresh
    assert needs_header_refresh(method, error) == refresh


def _tool(name: str, **props: object) -> dict[str, object]:
    return {"name": name, "inputSchema": {"type": "object", "properties": props}}


REGION = {"type": "string", "x-mcp-header": "Region"}
NESTED = {"type": "object", "properties": {"id": {"type": "integer", "x-mcp-header": "Tenant"}}}


def test_header_maps_are_learned_as_json_and_read_back_as_the_tools_maps() -> None:
    page = {"tools": [_tool("geo", region=REGION, tenant=NESTED), _tool("plain", text={"type": "string"})]}
    maps = learned_header_maps({}, page)
    assert maps is not None and maps.keys() == {"geo"}
    assert sorted(maps["geo"]) == [[["region"], "Region"], [["tenant", "id"], "Tenant"]]
    stored = orjson.loads(orjson.dumps(maps))  # what a session record holds, on any replica
    assert header_map_of(stored, "geo") == x_mcp_header_map(page["tools"][0]["inputSchema"])
    assert header_map_of(stored, "plain") is None and header_map_of(None, "geo") is None


def test_a_page_that_changes_nothing_needs_no_save_and_pages_add_up() -> None:
    maps = learned_header_maps({}, {"tools": [_tool("geo", region=REGION)]})
    assert maps is not None
    assert learned_header_maps(maps, {"tools": [_tool("geo", region=REGION), _tool("plain")]}) is None
    more = learned_header_maps(maps, {"tools": [_tool("zone", tenant=NESTED)]})  # the next page
    assert more is not None and set(more) == {"geo", "zone"} and maps.keys() == {"geo"}  # maps left as they were


def test_a_tool_that_lost_its_annotation_or_became_invalid_loses_its_map() -> None:
    maps = learned_header_maps({}, {"tools": [_tool("geo", region=REGION), _tool("zone", tenant=NESTED)]})
    assert maps is not None
    dropped = learned_header_maps(maps, {"tools": [_tool("geo", region={"type": "string"})]})
    assert dropped == {"zone": maps["zone"]}  # a stale map would repeat the -32020 it was re-fetched for
    invalid = {"type": "array", "items": {"type": "string", "x-mcp-header": "Zone"}}
    assert learned_header_maps(maps, {"tools": [_tool("zone", tenant=invalid)]}) == {"geo": maps["geo"]}


@pytest.mark.parametrize("result", [None, [], {"tools": "x"}, {"nextCursor": "c"}])
def test_a_malformed_tools_list_result_teaches_nothing(result: object) -> None:
    assert learned_header_maps({"geo": [[["region"], "Region"]]}, result) is None
