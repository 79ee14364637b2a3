"""Per-peer tool policy through the gateway (no [gateway.auth]): tools a peer may not use are hidden from
``tools/list`` (the upstream's cursor passed on untouched) and refused on ``tools/call`` without reaching the
upstream, on a legacy session, a 2026-07-28 passthrough and the WebSocket door; ``check-config`` names the peer
whose glob or scope is bad."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.config.settings import ConfigError, load_config
from gateway.ops.cli import check_config
from tests.gateway.conftest import Legacy, text

TOOLS = ("read_file", "write_file", "write_log", "search")
PINS = {"peers": [{"name": "ide", "client_name": "raw", "tools_allowed": ["read_*", "write_*", "search"],
                   "tools_denied": ["write_*"]}]}
CURSOR = "opaque/+=page-2"
MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {},
               "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}}


def script_tools(upstream: Any, *, sse: bool = False) -> None:
    def tools_list(body: dict[str, Any], request: Any) -> Any:
        result = {"resultType": "complete", "ttlMs": 0, "cacheScope": "public", "nextCursor": CURSOR,
                  "tools": [{"name": n, "inputSchema": {"type": "object"}} for n in TOOLS]}
        return [{"jsonrpc": "2.0", "method": "notifications/message",
                 "params": {"level": "info", "data": "listing"}}, result] if sse else result
    upstream.script["tools/list"] = tools_list
    upstream.script["tools/call"] = lambda body, request: text("called " + body["params"]["name"])


async def test_hidden_tools_are_not_listed_and_the_cursor_is_the_upstreams(make_gateway, upstream) -> None:
    script_tools(upstream)
    client = Legacy(await make_gateway(pins=PINS))
    await client.initialize()
    listed = await client.call("tools/list", {})
    assert [t["name"] for t in listed["result"]["tools"]] == ["read_file", "search"]
    assert listed["result"]["nextCursor"] == CURSOR


@pytest.mark.parametrize("name", ["write_file", "no_such_tool"])
async def test_a_hidden_tool_is_refused_as_unknown_and_never_reaches_the_upstream(make_gateway, upstream,
                                                                                  name) -> None:
    script_tools(upstream)
    client = Legacy(await make_gateway(pins=PINS))
    await client.initialize()
    answer = await client.call("tools/call", {"name": name, "arguments": {}})
    # The same answer for a tool that exists upstream and one that does not: nothing tells them apart.
    assert answer["error"] == {"code": -32602, "message": f"Unknown tool: {name}"}
    assert upstream.calls("tools/call") == []
    allowed = await client.call("tools/call", {"name": "read_file", "arguments": {}})
    assert allowed["result"]["content"][0]["text"] == "called read_file"


async def test_another_peer_sees_every_tool(make_gateway, upstream) -> None:
    script_tools(upstream)
    pins = {"peers": [{**PINS["peers"][0], "client_name": "someone-else"}]}
    client = Legacy(await make_gateway(pins=pins))
    await client.initialize()
    assert [t["name"] for t in (await client.call("tools/list", {}))["result"]["tools"]] == list(TOOLS)


def modern(method: str, params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    body = {"jsonrpc": "2.0", "id": 5, "method": method, "params": {**params, "_meta": MODERN_META}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
    return body, headers


async def sse_messages(resp: Any) -> list[dict[str, Any]]:
    text_ = await resp.text()
    return [json.loads(line[6:]) for line in text_.splitlines() if line.startswith("data: ")]


@pytest.mark.parametrize("sse", [False, True])
async def test_a_modern_passthrough_gets_the_same_policy(make_gateway, upstream, sse) -> None:
    script_tools(upstream, sse=sse)
    gateway = await make_gateway(pins=PINS)
    body, headers = modern("tools/list", {})
    resp = await gateway.post("/mcp", json=body, headers=headers)
    assert resp.status == 200
    if sse:
        note, answer = await sse_messages(resp)
        assert note["method"] == "notifications/message"  # the stream's other events pass as they came
    else:
        answer = await resp.json()
    assert [t["name"] for t in answer["result"]["tools"]] == ["read_file", "search"]
    assert answer["result"]["nextCursor"] == CURSOR and answer["id"] == 5
    body, headers = modern("tools/call", {"name": "write_log", "arguments": {}})
    resp = await gateway.post("/mcp", json=body, headers={**headers, "Mcp-Name": "write_log"})
    assert resp.status == 200
    assert (await resp.json())["error"] == {"code": -32602, "message": "Unknown tool: write_log"}
    assert upstream.calls("tools/call") == []


async def test_the_websocket_door_gets_the_same_policy(make_gateway, upstream) -> None:
    script_tools(upstream)
    gateway = await make_gateway(pins=PINS)
    async with gateway.ws_connect("/ws", protocols=("mcp",)) as ws:
        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
        await ws.send_json({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
        assert "result" in await ws.receive_json()
        await ws.send_json({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await ws.send_json({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})
        assert [t["name"] for t in (await ws.receive_json())["result"]["tools"]] == ["read_file", "search"]
        await ws.send_json({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                            "params": {"name": "write_file", "arguments": {}}})
        assert (await ws.receive_json())["error"]["message"] == "Unknown tool: write_file"
    assert upstream.calls("tools/call") == []


PEER_TOML = '''
[gateway]
public_url = "http://127.0.0.1:8808"
{auth}
[[peers]]
name = "ide"
client_name = "acme*"
{keys}
'''
AUTH = '[gateway.auth]\nauthorization_servers = ["https://as.example"]\n'


@pytest.mark.parametrize("keys, said", [
    ('tools_denied = ["write[_*"]', "peer 'ide': tools_denied: glob 'write[_*' opens a '[' it never closes"),
    ('tools_allowed = ["read file"]', "peer 'ide': tools_allowed: glob 'read file' holds whitespace"),
    ('tool_scopes = { "deploy*" = "two scopes" }', "peer 'ide': tool_scopes: scope 'two scopes' is not one OAuth"),
    ('client_ids = [""]', "peer 'ide': client_ids: an empty glob matches nothing"),
    ('scopes = ["a\\"b"]', "peer 'ide': scopes: scope"),
])
def test_check_config_names_the_peer_and_the_key(tmp_path: Path, capsys: Any, keys: str, said: str) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(PEER_TOML.format(auth=AUTH, keys=keys))
    assert check_config(str(path)) == 2
    assert said in capsys.readouterr().err


def test_check_config_takes_a_good_policy(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(PEER_TOML.format(auth=AUTH, keys='client_ids = ["ide-*"]\nscopes = ["mcp:tools"]\n'
                                     'tools_allowed = ["read_*", "deploy*"]\ntools_denied = ["read_secrets"]\n'
                                     'tool_scopes = { "deploy*" = "mcp:admin" }'))
    assert check_config(str(path)) == 0, capsys.readouterr().err
    peer = load_config(path).pins.peers[0].to_peer()
    assert peer.client_ids == ("ide-*",) and peer.tools.scopes == (("deploy*", "mcp:admin"),)


@pytest.mark.parametrize("keys", ['tool_scopes = { "deploy*" = "mcp:admin" }', 'client_ids = ["ide-*"]'])
def test_claims_and_tool_scopes_need_gateway_auth(tmp_path: Path, keys: str) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(PEER_TOML.format(auth="", keys=keys))
    with pytest.raises(ConfigError, match=r"peer\(s\) ide: .*need \[gateway.auth\]"):
        load_config(path)


def test_the_default_peer_matches_on_nothing(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(PEER_TOML.format(auth=AUTH, keys="") + '[default_peer]\nname = "rest"\nsubjects = ["x"]\n')
    with pytest.raises(ConfigError, match="default_peer: client_ids, subjects and scopes are for"):
        load_config(path)
