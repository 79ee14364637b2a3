"""An upstream's HTTP 401/403 (2025-11-25 basic/authorization §Error Handling;
docs/design/authorization.md#principal-and-token-passthrough): with the client's own token forwarded, the legacy
client gets the status and the upstream's ``WWW-Authenticate`` wherever its transport still allows a status, so it
can authorize again; with the gateway's own credential nothing leaks."""

from __future__ import annotations

from aiohttp import web

from adapters.credentials import Grant
from adapters.upstream import UpstreamCall
from gateway.auth.credentials import CredentialSettings, UpstreamCredentials
from gateway.upstream.client import UpstreamClient, UpstreamFailure
from tests.gateway.conftest import text
from tests.gateway.http.test_bridge_shell import SAMPLED, SAMPLING
from tests.gateway.http.test_passthrough import CALL, headers

CHALLENGE = 'Bearer resource_metadata="https://up.example/.well-known/oauth-protected-resource", scope="notes"'
EXPIRED = {"code": -32001, "message": "token expired"}


def refuse(status: int = 401, error: dict | None = None, challenge: str | None = CHALLENGE):
    extra = {"WWW-Authenticate": challenge} if challenge else {}
    if error is None:
        return lambda body, request: web.Response(status=status, headers=extra)
    return lambda body, request: web.json_response({"jsonrpc": "2.0", "id": body["id"], "error": error},
                                                   status=status, headers=extra)


async def test_an_initialize_whose_discover_is_refused_answers_401_with_the_challenge(legacy, upstream) -> None:
    upstream.script["server/discover"] = refuse()
    resp = await legacy.post("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                            "clientInfo": {"name": "raw", "version": "1"}})
    assert resp.status == 401 and resp.headers["WWW-Authenticate"] == CHALLENGE
    message = await resp.json()
    assert message["id"] == 1 and message["error"]["code"] == -32603
    assert message["error"]["data"] == {"upstream": "unauthorized", "upstreamStatus": 401,
                                        "wwwAuthenticate": CHALLENGE}
    assert "Mcp-Session-Id" not in resp.headers


async def test_a_translated_call_keeps_the_upstreams_error_and_answers_with_its_status(legacy, upstream) -> None:
    await legacy.initialize()
    upstream.script["tools/call"] = refuse(401, EXPIRED)
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {}})
    assert resp.status == 401 and resp.headers["WWW-Authenticate"] == CHALLENGE
    message = await resp.json()
    legacy.check(message)
    assert message["error"] == EXPIRED and message["id"] == legacy.next_id
    upstream.script["tools/call"] = refuse(403, challenge='Bearer error="insufficient_scope", scope="admin"')
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {}})
    assert resp.status == 403 and resp.headers["WWW-Authenticate"] == 'Bearer error="insufficient_scope", scope="admin"'
    # With a progress token the request runs in its own task and answers lazily: a lone response is still JSON.
    upstream.script["tools/call"] = refuse(401, EXPIRED)
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {}, "_meta": {"progressToken": "p1"}})
    assert resp.status == 401 and resp.headers["WWW-Authenticate"] == CHALLENGE
    assert (await resp.json())["error"] == EXPIRED
    upstream.script["tools/call"] = lambda body, request: text("fine")  # the session is unharmed
    assert (await legacy.call("tools/call", {"name": "t", "arguments": {}}))["result"]["content"][0]["text"] == "fine"


async def test_a_bridged_call_refused_mid_stream_ends_with_an_error_event(legacy, upstream) -> None:
    def rounds(body, request):
        if "requestState" not in body["params"]:
            return {"resultType": "input_required", "inputRequests": {"a": SAMPLING}, "requestState": "s1"}
        return web.Response(status=401, headers={"WWW-Authenticate": CHALLENGE})
    upstream.script["tools/call"] = rounds
    await legacy.initialize()
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {}})
    assert resp.status == 200 and resp.content_type == "text/event-stream"  # already streaming: no status now
    await legacy.next_event(resp)  # priming
    _, ask = await legacy.next_event(resp)
    assert await legacy.answer(ask["id"], SAMPLED) == 202
    _, final = await legacy.next_event(resp)
    assert final["error"]["data"] == {"upstream": "unauthorized", "upstreamStatus": 401, "wwwAuthenticate": CHALLENGE}


async def test_a_modern_passthrough_keeps_the_status_and_the_challenge(legacy, upstream) -> None:
    upstream.script["tools/call"] = refuse(401, EXPIRED)
    resp = await legacy.client.post("/mcp", json=CALL, headers=headers("tools/call"))
    assert resp.status == 401 and resp.headers["WWW-Authenticate"] == CHALLENGE
    assert (await resp.json())["error"] == EXPIRED


async def test_a_refusal_of_the_gateways_own_credential_shows_the_client_nothing_of_it(upstream) -> None:
    upstream.script["tools/call"] = refuse(401, EXPIRED)
    client = UpstreamClient(upstream.url, connect_timeout=5, read_timeout=5, auth="gateway", credential="ours")
    call = UpstreamCall({"jsonrpc": "2.0", "id": "u1", "method": "tools/call", "params": {"name": "t"}},
                        {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                         "Authorization": "Bearer the-clients"})
    try:
        await client.call(call, lambda _m: None)
        raise AssertionError("no failure")
    except UpstreamFailure as failure:
        error = failure.error
    finally:
        await client.close()
    assert error.challenge is None and error.data == {"upstream": "unauthorized"}
    assert "WWW-Authenticate" not in str(error.to_wire()) and CHALLENGE not in str(error.to_wire())
    assert upstream.headers[-1]["Authorization"] == "Bearer ours"  # the client's token never went there


async def test_a_modern_passthrough_refused_for_the_gateways_credential_is_a_502(legacy, upstream) -> None:
    from gateway.http.app import GATEWAY
    upstream.script["tools/call"] = refuse(401, EXPIRED)
    client = legacy.client.app[GATEWAY].upstream_for("default")
    # as a named upstream with auth = "gateway" (static) is built
    client.credentials = UpstreamCredentials(CredentialSettings(Grant.STATIC, client.url, static_token="ours"))
    resp = await legacy.client.post("/mcp", json=CALL, headers=headers("tools/call"))
    assert resp.status == 502 and "WWW-Authenticate" not in resp.headers
    message = await resp.json()
    assert message["id"] == CALL["id"] and message["error"]["data"] == {"upstream": "unauthorized"}
    assert upstream.headers[-1]["Authorization"] == "Bearer ours"
