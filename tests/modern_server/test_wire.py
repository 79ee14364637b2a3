"""The 2026-07-28 wire: the validation ladder's order, HTTP statuses, headers, notifications
(2026-07-28 basic §Error Codes, basic/transports §Streamable HTTP)."""

from __future__ import annotations

import base64
import json

import pytest

from tests.modern_server.conftest import ALICE, V

PV, CAPS = "io.modelcontextprotocol/protocolVersion", "io.modelcontextprotocol/clientCapabilities"


def b64(text: str) -> str:
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


async def test_missing_version_header_is_32020_before_anything_else(client):
    # The body is broken too (no _meta): the missing header still wins (ladder step 1).
    reply = await client.call("tools/list", {"_meta": {}}, headers={"MCP-Protocol-Version": ""})
    assert reply.status == 400 and reply.error["code"] == -32602  # an empty header is present; see next test
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}}
    headers = client.headers("tools/list", {})
    del headers["MCP-Protocol-Version"]
    reply = await client.post(body, headers)
    assert reply.status == 400 and reply.error["code"] == -32020 and reply.final["id"] == 7


@pytest.mark.parametrize("meta, why", [
    (None, "no _meta"),
    ({CAPS: {}}, "no protocolVersion"),
    ({PV: 20260728, CAPS: {}}, "non-string protocolVersion"),
    ({PV: V}, "no clientCapabilities"),
    ({PV: V, CAPS: []}, "non-object clientCapabilities"),
])
async def test_malformed_meta_is_32602(client, meta, why):
    params = {} if meta is None else {"_meta": meta}
    body = {"jsonrpc": "2.0", "id": "m", "method": "tools/list", "params": params}
    reply = await client.post(body, client.headers("tools/list", {}))
    assert (reply.status, reply.error["code"], reply.final["id"]) == (400, -32602, "m"), why


async def test_header_body_mismatch_is_checked_before_support(client):
    meta = client.meta()
    meta[PV] = "v999.0.0"
    reply = await client.call("tools/list", meta=meta)  # header says 2026-07-28
    assert reply.status == 400 and reply.error["code"] == -32020


async def test_unsupported_version_exact_data(client):
    meta = client.meta()
    meta[PV] = "2025-11-25"
    reply = await client.call("tools/list", meta=meta, headers={"MCP-Protocol-Version": "2025-11-25"})
    assert reply.status == 400
    assert reply.error["code"] == -32022
    assert reply.error["data"] == {"supported": ["2026-07-28"], "requested": "2025-11-25"}


@pytest.mark.parametrize("method", ["initialize", "ping", "logging/setLevel", "resources/subscribe",
                                    "resources/unsubscribe", "tasks/result", "tasks/list", "no/such"])
async def test_removed_and_unknown_methods_are_404(client, method):
    reply = await client.call(method, {"level": "info", "uri": "x"} if method != "initialize" else {})
    assert reply.status == 404 and reply.error["code"] == -32601 and reply.final["id"] is not None


async def test_mcp_method_header_must_match(client):
    reply = await client.call("tools/list", headers={"Mcp-Method": "prompts/list"})
    assert reply.status == 400 and reply.error["code"] == -32020
    params = {"_meta": client.meta()}
    headers = client.headers("tools/list", params)
    del headers["Mcp-Method"]
    reply = await client.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params}, headers)
    assert reply.status == 400 and reply.error["code"] == -32020


async def test_mcp_name_header_mismatch_and_base64_form(client):
    reply = await client.tool("echo", {"text": "hi"}, headers={"Mcp-Name": "summarize_repo"})
    assert reply.status == 400 and reply.error["code"] == -32020
    reply = await client.tool("echo", {"text": "hi"}, headers={"Mcp-Name": b64("echo")})
    assert reply.status == 200 and reply.result["content"][0]["text"] == "hi"
    reply = await client.tool("echo", {"text": "hi"}, headers={"Mcp-Name": "=?base64?not*base64?="})
    assert reply.status == 400 and reply.error["code"] == -32020


async def test_non_ascii_uri_needs_the_base64_sentinel(client):
    uri = "file:///work/notes/café.md"
    reply = await client.call("resources/read", {"uri": uri}, headers={"Mcp-Name": b64(uri)})
    assert reply.status == 400 and reply.error["code"] == -32602  # passes the header rung, then not found
    assert "not found" in reply.error["message"]


async def test_notification_gets_202_and_empty_body(client):
    for headers in (client.headers("notifications/cancelled", {}), {"Content-Type": "application/json",
                                                                     "Accept": "application/json, text/event-stream"}):
        body = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
        reply = await client.post(body, headers)
        assert reply.status == 202 and reply.raw == ""


@pytest.mark.parametrize("verb", ["GET", "DELETE"])
async def test_get_and_delete_are_405(client, verb):
    async with client.session.request(verb, client.url, headers={"Accept": "text/event-stream"}) as resp:
        assert resp.status == 405
        assert "Mcp-Session-Id" not in resp.headers


async def test_never_mints_or_echoes_session_ids(client):
    reply = await client.call("server/discover", headers={"Mcp-Session-Id": "abc"})
    assert reply.status == 200 and "Mcp-Session-Id" not in reply.headers


async def test_http_level_rejections(client):
    headers = client.headers("tools/list", {})
    reply = await client.post("{not json", headers)
    assert reply.status == 400 and reply.error["code"] == -32700
    reply = await client.post([{"jsonrpc": "2.0"}], headers)
    assert reply.status == 400 and reply.error["code"] == -32600
    reply = await client.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                              {**headers, "Accept": "application/json"})
    assert reply.status == 406
    reply = await client.post(json.dumps({"jsonrpc": "2.0", "id": 1}), {**headers, "Content-Type": "text/plain"})
    assert reply.status == 415


async def test_bearer_tokens(client):
    assert (await client.call("server/discover", token=ALICE)).status == 200
    assert (await client.call("server/discover", token="wrong")).status == 401
    reply = await client.call("server/discover", headers={"Authorization": "Basic abc"})
    assert reply.status == 401


async def test_client_info_is_optional_and_never_decides(client):
    meta = client.meta()
    del meta["io.modelcontextprotocol/clientInfo"]
    plain = await client.call("tools/list", meta=meta)
    meta["io.modelcontextprotocol/clientInfo"] = {"name": "admin", "version": "9"}
    admin = await client.call("tools/list", meta=meta)
    assert plain.status == admin.status == 200
    assert plain.result["tools"] == admin.result["tools"]


async def test_invalid_log_level_is_32602(client):
    reply = await client.tool("echo", {"text": "x"}, meta=client.meta(**{"io.modelcontextprotocol/logLevel": "loud"}))
    assert reply.status == 400 and reply.error["code"] == -32602


async def test_bad_params_shape_is_32602(client):
    reply = await client.call("tools/call", {"arguments": {}}, headers={"Mcp-Name": "x"})
    assert reply.status == 400 and reply.error["code"] == -32602


def _custom_header_registry():
    from modern_server.framework import Registry, Tool, arguments, text_result

    async def region(ctx):
        return text_result(f"region={arguments(ctx).get('region')} n={arguments(ctx).get('opts', {}).get('n')}")

    schema = {"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "opts": {"type": "object", "properties": {"n": {"type": "integer", "x-mcp-header": "Count"}}}}}
    registry = Registry()
    registry.tools["regional"] = Tool("regional", "mirrors headers", schema, region)
    return registry


@pytest.fixture
async def header_client(aiohttp_server, config):
    import aiohttp

    from modern_server.app import create_app
    from tests.modern_server.conftest import CoreClient
    server = await aiohttp_server(create_app(config, registry=_custom_header_registry()))
    async with aiohttp.ClientSession() as session:
        yield CoreClient(session, str(server.make_url("/mcp")))


@pytest.mark.parametrize("arguments, headers, ok", [
    ({"region": "eu-west"}, {"Mcp-Param-Region": "eu-west"}, True),
    ({"region": "Zürich"}, {"Mcp-Param-Region": b64("Zürich")}, True),
    ({"region": "eu", "opts": {"n": 42}}, {"Mcp-Param-Region": "eu", "Mcp-Param-Count": "42"}, True),
    ({}, {}, True),
    ({"region": "eu-west"}, {}, False),                                    # missing mirror
    ({"region": "eu-west"}, {"Mcp-Param-Region": "us-east"}, False),       # mismatch
    ({"region": "eu-west"}, {"Mcp-Param-Region": "=?base64?%%%?="}, False),  # malformed sentinel
    ({}, {"Mcp-Param-Region": "eu-west"}, False),                          # header without an argument
    ({"region": "eu", "opts": {"n": 42}}, {"Mcp-Param-Region": "eu", "Mcp-Param-Count": "43"}, False),
])
async def test_mcp_param_headers_mirror_annotated_arguments(header_client, arguments, headers, ok):
    reply = await header_client.tool("regional", arguments, headers=headers)
    if ok:
        assert reply.status == 200 and reply.result["content"][0]["text"].startswith("region=")
    else:
        assert reply.status == 400 and reply.error["code"] == -32020
