"""Peers matched on a verified token's claims, and tools needing a scope, end to end with the real authorization
server (node oidc-provider): a client_id-matched peer gets its tool policy, another client does not; a tool
needing a scope the token lacks is a 403 ``insufficient_scope`` step-up naming it, and the same client's token
with that scope calls it on the same session."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.gateway.auth.oidc import AuthorizationServer, authorization_server
from tests.gateway.auth.test_gateway_oauth import METADATA, PUBLIC, RESOURCE, Holder
from tests.gateway.conftest import text

TOOLS = ("read_file", "write_file", "deploy_prod")
PINS = {"peers": [{"name": "upstream-client", "client_ids": ["gateway-upst*"], "tools_denied": ["write_*"],
                   "tool_scopes": {"deploy*": "mcp:admin"}}]}


@pytest.fixture
async def issuer() -> AsyncIterator[AuthorizationServer]:
    async with authorization_server() as server:
        yield server


def script_tools(upstream: Any) -> None:
    upstream.script["tools/list"] = lambda body, request: {
        "resultType": "complete", "ttlMs": 0, "cacheScope": "public",
        "tools": [{"name": n, "inputSchema": {"type": "object"}} for n in TOOLS]}
    upstream.script["tools/call"] = lambda body, request: text("called " + body["params"]["name"])


async def policed(make_gateway: Any, issuer: AuthorizationServer) -> Any:
    return await make_gateway(public_url=PUBLIC, pins=PINS, auth={
        "authorization_servers": [issuer.issuer], "scopes_supported": ["mcp:tools", "mcp:admin"]})


async def test_a_client_id_matched_peer_gets_its_policy(make_gateway: Any, issuer: AuthorizationServer,
                                                        upstream: Any) -> None:
    script_tools(upstream)
    gateway = await policed(make_gateway, issuer)
    holder = Holder(gateway, await issuer.client_token(RESOURCE, client="gateway-upstream"))
    await holder.initialize()
    listed = await holder.call("tools/list", {})
    assert [t["name"] for t in listed["result"]["tools"]] == ["read_file", "deploy_prod"]  # deploy: steps up
    refused = await holder.call("tools/call", {"name": "write_file", "arguments": {}})
    assert refused["error"] == {"code": -32602, "message": "Unknown tool: write_file"}
    other = Holder(gateway, await issuer.client_token(RESOURCE, client="gateway-tests"))  # the default peer
    await other.initialize()
    assert [t["name"] for t in (await other.call("tools/list", {}))["result"]["tools"]] == list(TOOLS)
    called = await other.call("tools/call", {"name": "write_file", "arguments": {}})
    assert called["result"]["content"][0]["text"] == "called write_file"
    assert [c["params"]["name"] for c in upstream.calls("tools/call")] == ["write_file"]  # the other client's


async def test_a_tool_needing_a_scope_steps_up_then_succeeds_on_the_same_session(
        make_gateway: Any, issuer: AuthorizationServer, upstream: Any) -> None:
    script_tools(upstream)
    gateway = await policed(make_gateway, issuer)
    holder = Holder(gateway, await issuer.client_token(RESOURCE, client="gateway-upstream"))
    await holder.initialize()
    resp = await holder.post("tools/call", {"name": "deploy_prod", "arguments": {}})
    assert resp.status == 403
    assert resp.headers.getall("WWW-Authenticate") == [
        f'Bearer resource_metadata="{METADATA}", scope="mcp:admin mcp:tools", error="insufficient_scope"']
    body = await resp.json()
    assert body["id"] == holder.next_id and body["error"]["data"] == {"authorization": "insufficient_scope"}
    assert upstream.calls("tools/call") == []
    # The client re-authorizes with the scope asked for (2025-11-25 basic/authorization, Step-Up Authorization
    # Flow): the same client, so the same principal and session.
    holder.token = await issuer.client_token(RESOURCE, scope="mcp:tools mcp:admin", client="gateway-upstream")
    called = await holder.call("tools/call", {"name": "deploy_prod", "arguments": {}})
    assert called["result"]["content"][0]["text"] == "called deploy_prod"


async def test_the_store_keeps_the_policy_not_the_token(make_gateway: Any, issuer: AuthorizationServer,
                                                        upstream: Any) -> None:
    from gateway.session.store import InMemoryStore

    store = InMemoryStore()
    gateway = await make_gateway(store, public_url=PUBLIC, pins=PINS, auth={
        "authorization_servers": [issuer.issuer]})
    token = await issuer.client_token(RESOURCE, client="gateway-upstream")
    holder = Holder(gateway, token)
    await holder.initialize()
    record = await store.get_session(holder.session_id)
    assert record is not None and record.pins["name"] == "upstream-client"
    assert record.pins["tools"]["denied"] == ["write_*"]
    assert token not in repr(record.to_dict()) and "gateway-upstream" not in repr(record.pins)


def tool_call(ident: int, name: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": {"name": name, "arguments": {}}}


async def test_a_batch_with_a_call_needing_a_scope_is_refused_whole_before_anything_runs(
        make_gateway: Any, issuer: AuthorizationServer, upstream: Any) -> None:
    """A 2025-03-26 batch (docs/design/authorization.md#the-gateway-is-a-protected-resource-and-tokens-stop-at-it):
    the step-up challenge is an HTTP answer, and a client that steps up resends the whole request, so the whole batch
    is the 403 and none of it runs; then all of it does."""
    script_tools(upstream)
    gateway = await policed(make_gateway, issuer)
    holder = Holder(gateway, await issuer.client_token(RESOURCE, client="gateway-upstream"))
    holder.version = "2025-03-26"
    await holder.initialize()
    batch = json.dumps([tool_call(1, "read_file"), tool_call(2, "deploy_prod"),
                        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}])
    resp = await holder.client.post("/mcp", data=batch, headers=holder.headers())
    assert resp.status == 403
    assert resp.headers.getall("WWW-Authenticate") == [
        f'Bearer resource_metadata="{METADATA}", scope="mcp:admin mcp:tools", error="insufficient_scope"']
    body = await resp.json()
    assert body["id"] is None and body["error"]["data"] == {"authorization": "insufficient_scope"}
    assert "deploy_prod" in body["error"]["message"] and "no element of the batch ran" in body["error"]["message"]
    assert upstream.calls("tools/call") == []
    holder.token = await issuer.client_token(RESOURCE, scope="mcp:tools mcp:admin", client="gateway-upstream")
    resp = await holder.client.post("/mcp", data=batch, headers=holder.headers())
    assert resp.status == 200
    answers = {a["id"]: a["result"]["content"][0]["text"] for a in await resp.json()}
    assert answers == {1: "called read_file", 2: "called deploy_prod"}
    assert sorted(c["params"]["name"] for c in upstream.calls("tools/call")) == ["deploy_prod", "read_file"]
