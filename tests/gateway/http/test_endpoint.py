"""The legacy endpoint against a scripted fake upstream: handshake, sessions, forwarding, failures."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web

from gateway.http.app import GATEWAY
from tests.gateway.conftest import DISCOVER, GEO_SCHEMA, Legacy, geo_upstream, text
from tests.waiting import until, within


async def test_initialize_is_local_and_cached_from_discover(legacy, upstream) -> None:
    result = await legacy.initialize()
    assert result["protocolVersion"] == "2025-11-25"
    assert result["serverInfo"] == {"name": "fake", "version": "1"} and result["instructions"] == "fake upstream"
    assert result["capabilities"]["resources"] == {"subscribe": True, "listChanged": True}
    assert "tasks" not in result["capabilities"]
    assert upstream.calls("initialize") == [] and len(upstream.calls("server/discover")) == 1
    discover = upstream.calls("server/discover")[0]["params"]["_meta"]
    assert discover["io.modelcontextprotocol/clientCapabilities"] == {
        "sampling": {}, "elicitation": {"form": {}, "url": {}}, "roots": {}}
    second = Legacy(legacy.client, "2025-06-18")
    assert (await second.initialize())["protocolVersion"] == "2025-06-18"
    assert len(upstream.calls("server/discover")) == 1  # ttlMs 60000, public: reused
    assert second.session_id != legacy.session_id and len(legacy.session_id) >= 32


async def test_discover_with_zero_ttl_is_fetched_again(legacy, upstream) -> None:
    upstream.script["server/discover"] = lambda body, h: {**DISCOVER, "ttlMs": 0}
    await legacy.initialize()
    await Legacy(legacy.client).initialize()
    assert len(upstream.calls("server/discover")) == 2


async def test_unknown_version_gets_the_latest_legacy_one(legacy) -> None:
    legacy.version = "2024-01-01"
    resp = await legacy.post("initialize", {"protocolVersion": "2024-01-01", "capabilities": {},
                                            "clientInfo": {"name": "x", "version": "1"}})
    assert (await resp.json())["result"]["protocolVersion"] == "2025-11-25"


async def test_initialize_fails_cleanly_when_upstream_is_down(make_gateway, unused_tcp_port) -> None:
    client = Legacy(await make_gateway(upstream_url=f"http://127.0.0.1:{unused_tcp_port}/mcp"))
    resp = await client.post("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                            "clientInfo": {"name": "x", "version": "1"}})
    message = await resp.json()
    assert resp.status == 200 and "Mcp-Session-Id" not in resp.headers
    assert message["error"]["code"] == -32603 and "unreachable" in message["error"]["message"]


async def test_local_methods_never_go_upstream(legacy, upstream) -> None:
    await legacy.initialize()
    assert (await legacy.call("ping"))["result"] == {}
    assert (await legacy.call("logging/setLevel", {"level": "warning"}))["result"] == {}
    assert (await legacy.call("logging/setLevel", {"level": "loud"}))["error"]["code"] == -32602
    assert (await legacy.call("tasks/list"))["error"]["code"] == -32601
    assert await legacy.notify("notifications/roots/list_changed") == 202
    assert await legacy.notify("notifications/progress", {"progressToken": 1, "progress": 1}) == 202
    assert {b["method"] for b in upstream.received} == {"server/discover"}


async def test_session_rules(legacy) -> None:
    await legacy.initialize()
    sid = legacy.session_id
    assert (await legacy.client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                     headers={"Accept": "application/json, text/event-stream"})).status == 400
    assert (await legacy.post("ping", **{"Mcp-Session-Id": "nope"})).status == 404
    assert (await legacy.post("ping", Authorization="Bearer someone-else")).status == 404
    assert (await legacy.post("ping", **{"MCP-Protocol-Version": "1999-01-01"})).status == 400
    assert (await legacy.post("ping", Origin="https://evil.example")).status == 403
    assert (await legacy.post("ping")).status == 200 and legacy.session_id == sid


async def test_forwarded_request_carries_full_meta_and_headers(legacy, upstream) -> None:
    upstream.script["tools/list"] = lambda body, h: {"resultType": "complete", "ttlMs": 0, "cacheScope": "public",
                                                     "tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
    await legacy.initialize()
    await legacy.call("logging/setLevel", {"level": "info"})
    message = await legacy.call("tools/list", {"_meta": {"progressToken": "tok"}})
    assert message["result"] == {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
    body, headers = upstream.calls("tools/list")[0], upstream.headers[-1]
    meta = body["params"]["_meta"]
    assert meta == {"progressToken": "tok", "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {"sampling": {}, "elicitation": {"form": {},
                                                                   "url": {}}, "roots": {}},
                    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
                    "io.modelcontextprotocol/logLevel": "info"}
    assert body["id"] != message["id"]
    assert headers["MCP-Protocol-Version"] == "2026-07-28" and headers["Mcp-Method"] == "tools/list"
    assert "Mcp-Session-Id" not in headers and "application/json" in headers["Accept"]


def _raise_500(body, headers):
    return web.Response(status=500, text="boom")


def _not_json(body, headers):
    return web.Response(status=200, text="<html>", content_type="text/html")


@pytest.mark.parametrize("reply,code,needle", [
    (_raise_500, -32603, "http_5xx"),
    (_not_json, -32603, "non_json"),
    (lambda b, h: {"resultType": "complete", "content": "not-a-list"}, -32603, "invalid_result"),
    (lambda b, h: ("error", {"code": -32602, "message": "no such tool"}, 400), -32602, "no such tool"),
    (lambda b, h: ("error", {"code": -32601, "message": "gone"}, 404), -32601, "gone"),
    (lambda b, h: ("error", {"code": -32020, "message": "header"}, 400), -32603, "could not talk"),
    (lambda b, h: {"resultType": "task", "taskId": "t"}, -32603, "resultType"),
])
async def test_upstream_failures_become_errors_and_the_session_survives(legacy, upstream, reply, code, needle) -> None:
    upstream.script["tools/call"] = reply
    await legacy.initialize()
    resp = await legacy.post("tools/call", {"name": "echo", "arguments": {}})
    assert resp.status == 200  # an upstream 400/404 is never relayed as a status
    message = await resp.json()
    legacy.check(message)
    assert message["error"]["code"] == code and needle in message["error"]["message"]
    assert (await legacy.call("ping"))["result"] == {}


async def test_upstream_refused_mid_session(make_gateway, upstream) -> None:
    client = Legacy(await make_gateway())
    await client.initialize()
    await upstream.server.close()  # the gateway keeps its session when the upstream disappears
    message = await client.call("tools/list")
    assert message["error"]["code"] == -32603 and "unreachable" in message["error"]["message"]
    assert (await client.call("ping"))["result"] == {}


async def test_progress_and_log_notifications_reach_the_right_stream_with_the_clients_token(legacy, upstream) -> None:
    def slow(body, headers):
        token = body["params"]["_meta"]["progressToken"]
        return [{"jsonrpc": "2.0", "method": "notifications/progress",
                 "params": {"progressToken": token, "progress": 1}},
                {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "hi"}},
                text("done")]
    upstream.script["tools/call"] = slow
    await legacy.initialize()
    resp = await legacy.post("tools/call", {"name": "slow", "arguments": {}, "_meta": {"progressToken": "mine-7"}})
    assert resp.content_type == "text/event-stream"
    events = await legacy.events(resp)
    assert [e.get("method", "response") for e in events] == ["notifications/progress", "notifications/message",
                                                              "response"]
    assert events[0]["params"]["progressToken"] == "mine-7"
    assert events[2]["result"]["content"][0]["text"] == "done"


async def test_plain_result_is_answered_as_json(legacy, upstream) -> None:
    upstream.script["tools/call"] = lambda b, h: text("fast")
    await legacy.initialize()
    resp = await legacy.post("tools/call", {"name": "echo", "arguments": {}})
    assert resp.content_type == "application/json"


async def test_delete_ends_the_session(legacy) -> None:
    await legacy.initialize()
    resp = await legacy.client.delete("/mcp", headers=legacy.headers())
    assert resp.status == 204
    assert (await legacy.post("ping")).status == 404
    assert (await legacy.client.delete("/mcp", headers=legacy.headers())).status == 404


async def test_the_get_stream_ends_with_its_session_and_carries_nothing_after(legacy) -> None:
    """What an SDK reads on its GET stream after it ended the session: nothing but the end (issue #37: the
    Python SDKs' 'Error parsing SSE message ... ClosedResourceError' at close comes from notifications that
    reach them before their own DELETE, never from the gateway writing after it)."""
    await legacy.initialize()
    stream = await legacy.client.get("/mcp", headers={**legacy.headers(), "Accept": "text/event-stream"})
    assert stream.status == 200
    assert (await legacy.client.delete("/mcp", headers=legacy.headers())).status == 204
    async with asyncio.timeout(5):  # ends with the session, not at a keep-alive or a timeout
        events = await legacy.events(stream)
    assert events == []  # only the priming event (no data) was ever written on it
    assert stream.content.at_eof()


@pytest.mark.parametrize("method, params", [("logging/setLevel", {"level": "debug"}),
                                            ("notifications/initialized", None)])
async def test_a_delete_between_a_changes_read_and_its_write_stands(legacy, method, params) -> None:
    """A request that changes its session was accepted on a record read before; a DELETE (another replica's) can
    come before its change is written. The change must not bring the session back: its id answers 404 from the
    DELETE on (2025-11-25 basic/transports §Session Management). The store's change is atomic
    (test_redis_store.py races one on Redis); here the handler must make its change through it."""
    await legacy.initialize()
    store = legacy.client.app[GATEWAY].store
    real_change, changes = store.change_session, []

    async def deleted_first(session_id, change):
        changes.append(session_id)
        await store.delete_session(session_id)  # the DELETE, handled elsewhere since this request read the record
        return await real_change(session_id, change)
    store.change_session = deleted_first
    if params is not None:
        status = (await legacy.post(method, params)).status
    else:
        status = await legacy.notify(method)
    store.change_session = real_change
    assert changes == [legacy.session_id]  # the change was made (and raced)
    assert status == (200 if params is not None else 202)  # moot, and answered
    assert await store.get_session(legacy.session_id) is None
    assert (await legacy.post("ping")).status == 404


async def test_modern_requests_pass_through_untouched(legacy, upstream) -> None:
    upstream.script["tools/list"] = lambda b, h: ("error", {"code": -32022, "message": "x", "data": {
        "supported": ["2026-07-28"], "requested": "2026-07-28"}}, 400)
    body = {"jsonrpc": "2.0", "id": "m1", "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}
    resp = await legacy.client.post("/mcp", json=body, headers={
        "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/list"})
    assert resp.status == 400 and (await resp.json())["error"]["code"] == -32022  # modern clients get statuses
    assert upstream.calls("tools/list")[0] == body
    assert upstream.headers[-1]["Mcp-Method"] == "tools/list"


@pytest.mark.parametrize("meta,headers", [
    ("x", {}),  # server/discover is modern without the header
    (["x"], {"MCP-Protocol-Version": "2026-07-28"}),
])
async def test_a_modern_request_with_a_non_object_meta_is_400_invalid_params(legacy, upstream, meta, headers) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}}
    resp = await legacy.client.post("/mcp", json=body, headers={
        "Accept": "application/json, text/event-stream", **headers})
    answer = await resp.json()
    assert resp.status == 400 and answer["id"] == 1 and answer["error"]["code"] == -32602  # 2026 §Error Codes
    assert not upstream.calls("server/discover")


MODERN_LIST = {"jsonrpc": "2.0", "id": "m2", "method": "tools/list", "params": {"_meta": {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}
MODERN_HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
                  "Mcp-Method": "tools/list"}


async def test_modern_passthrough_failures_are_502_with_the_cause(legacy, upstream) -> None:
    async def stalled(body, request):  # a JSON head, then a body that never comes
        resp = web.StreamResponse(headers={"Content-Type": "application/json", "Content-Length": "100"})
        await resp.prepare(request)
        await resp.write(b'{"jsonrpc"')
        await asyncio.sleep(5)  # sleep: the rest of the body never comes
        return resp

    upstream.script["tools/list"] = stalled
    legacy.client.app[GATEWAY].upstream.pool.read_timeout = 0.3
    resp = await legacy.client.post("/mcp", json=MODERN_LIST, headers=MODERN_HEADERS)
    error = (await resp.json())["error"]
    assert resp.status == 502 and error["code"] == -32603 and "timeout" in error["message"]
    await upstream.server.close()
    resp = await legacy.client.post("/mcp", json=MODERN_LIST, headers=MODERN_HEADERS)
    error = (await resp.json())["error"]
    assert resp.status == 502 and "unreachable" in error["message"] and (await resp.json())["id"] == "m2"


async def test_pending_requests_per_session_limit(make_gateway, upstream) -> None:
    gate = asyncio.Event()

    async def blocked(body, headers):
        await gate.wait()
        return text("late")
    upstream.script["tools/call"] = blocked
    client = Legacy(await make_gateway(limits={"max_pending_per_session": 1}))
    await client.initialize()
    first = asyncio.ensure_future(client.post("tools/call", {"name": "a", "arguments": {}}))
    await until(lambda: upstream.calls("tools/call"))
    message = await client.call("tools/list")
    assert message["error"]["data"] == {"limit": "max_pending_per_session", "value": 1}
    gate.set()
    assert (await (await first).json())["result"]["content"][0]["text"] == "late"


async def test_expired_sessions_answer_404_and_are_swept(make_gateway) -> None:
    client = Legacy(await make_gateway(session_idle_seconds=60))
    await client.initialize()
    gw = client.client.app[GATEWAY]
    await client.call("ping")
    gw.runtime(client.session_id)
    real_clock = gw.clock
    gw.clock = lambda: real_clock() + 61_000  # an injected clock: no sleeping
    assert (await client.post("ping")).status == 404
    old = client.session_id
    client.session_id = None
    await client.initialize()
    assert old not in gw.runtimes and await gw.store.get_session(old) is None


async def test_finished_request_streams_are_bounded(legacy, upstream) -> None:
    from gateway.session.runtime import KEEP_FINISHED_STREAMS
    upstream.script["tools/call"] = lambda b, r: text("x")
    await legacy.initialize()
    for _ in range(KEEP_FINISHED_STREAMS + 5):
        await legacy.call("tools/call", {"name": "echo", "arguments": {}})
    runtime = legacy.client.app[GATEWAY].runtimes[legacy.session_id]
    assert len(runtime.streams) <= KEEP_FINISHED_STREAMS + 1


async def test_a_gateway_bug_in_an_exchange_still_answers_the_request(legacy, upstream, monkeypatch) -> None:
    from adapters import bridge
    upstream.script["tools/call"] = lambda b, r: text("x")
    await legacy.initialize()

    def broken(self, event):
        raise RuntimeError("bug")
    monkeypatch.setattr(bridge.BridgeMachine, "handle", broken)
    message = await legacy.call("tools/call", {"name": "echo", "arguments": {}})
    assert message["error"] == {"code": -32603, "message": "internal gateway error"}
    monkeypatch.undo()
    assert (await legacy.call("tools/call", {"name": "echo", "arguments": {}}))["result"]["content"][0]["text"] == "x"


async def test_mcp_param_headers_are_learned_from_tools_list_on_a_header_mismatch(legacy, upstream) -> None:
    geo_upstream(upstream)
    await legacy.initialize()
    message = await legacy.call("tools/call", {"name": "geo", "arguments": {"region": "eu"}})
    assert message["result"]["content"][0]["text"] == "ok eu"
    assert [b["method"] for b in upstream.received[-3:]] == ["tools/call", "tools/list", "tools/call"]
    await legacy.call("tools/call", {"name": "geo", "arguments": {"region": "us"}})
    assert [b["method"] for b in upstream.received[-1:]] == ["tools/call"]  # the map is cached now


async def test_a_paged_refresh_saves_the_header_maps_once(legacy, upstream) -> None:
    geo_upstream(upstream)
    pages = {None: ({"name": "geo", "inputSchema": GEO_SCHEMA}, "p2"),
             "p2": ({"name": "zone", "inputSchema": GEO_SCHEMA}, None)}

    def paged(body, request):
        tool, after = pages[body["params"].get("cursor")]
        return {"resultType": "complete", "ttlMs": 0, "cacheScope": "public", "tools": [tool]} | (
            {"nextCursor": after} if after else {})
    upstream.script["tools/list"] = paged
    await legacy.initialize()
    store = legacy.client.app[GATEWAY].store
    real_change, puts = store.change_session, []

    async def counted(session_id, change):
        record = await real_change(session_id, change)
        puts.append(record.header_maps)
        return record
    store.change_session = counted
    message = await legacy.call("tools/call", {"name": "geo", "arguments": {"region": "eu"}})
    assert message["result"]["content"][0]["text"] == "ok eu"
    assert len(upstream.calls("tools/list")) == 2
    assert [set(maps) for maps in puts] == [{"geo", "zone"}]  # both pages, one record write


async def test_header_maps_the_store_could_not_save_are_learned_again_on_the_next_mismatch(legacy, upstream,
                                                                                           caplog) -> None:
    from gateway.session.store import StoreUnavailable
    geo_upstream(upstream)
    await legacy.initialize()
    store = legacy.client.app[GATEWAY].store
    real_change = store.change_session

    async def failing_change(session_id, change):
        raise StoreUnavailable("the session store failed: test")
    store.change_session = failing_change
    assert "tools" in (await legacy.call("tools/list"))["result"]  # answered though the maps were not saved
    assert "header maps were not saved" in caplog.text
    store.change_session = real_change
    message = await legacy.call("tools/call", {"name": "geo", "arguments": {"region": "eu"}})
    assert message["result"]["content"][0]["text"] == "ok eu"  # learned again from its -32020, and saved now
    assert [b["method"] for b in upstream.received if b["method"].startswith("tools/")] == [
        "tools/list", "tools/call", "tools/list", "tools/call"]
    assert (await store.get_session(legacy.session_id)).header_maps == {"geo": [[["region"], "Region"]]}


async def test_sweeps_are_rate_limited_so_opening_sessions_stays_linear(make_gateway) -> None:
    client = Legacy(await make_gateway(session_idle_seconds=60))
    gw = client.client.app[GATEWAY]
    for _ in range(5):
        client.session_id = None
        await client.initialize()
        await client.call("tools/list")  # gives the session a runtime, which a sweep would visit
    queries, reads = [], []
    real_seen, real_get = gw.store.last_seen, gw.store.get_session

    async def counting_seen(session_ids):
        queries.append(len(session_ids))
        return await real_seen(session_ids)

    async def counting_get(session_id):
        reads.append(session_id)
        return await real_get(session_id)
    gw.store.last_seen, gw.store.get_session = counting_seen, counting_get
    assert await gw.sweep_expired() == 0 and queries == []  # within 10% of the idle limit: no walk
    # Forced: one last-seen query for every runtime, and no record read (10,000 of those stalled the loop).
    assert await gw.sweep_expired(force=True) == 0 and queries == [len(gw.runtimes)] and len(gw.runtimes) >= 5
    assert reads == []


async def test_a_cookie_the_upstream_sets_is_never_sent_for_anyone(make_gateway, upstream) -> None:
    from aiohttp import web

    def set_cookie(body, request):
        resp = web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": text("c")})
        resp.set_cookie("upstream-session", "alice-secret")
        return resp
    upstream.script["tools/call"] = set_cookie
    # By host name: aiohttp's default jar would silently refuse cookies from an IP address.
    alice = Legacy(await make_gateway(upstream_url=upstream.url.replace("127.0.0.1", "localhost")))
    await alice.initialize()
    await alice.call("tools/call", {"name": "echo", "arguments": {}})
    bob = Legacy(alice.client)
    await bob.initialize()
    await bob.call("tools/call", {"name": "echo", "arguments": {}})
    assert len(upstream.calls("tools/call")) == 2
    assert all("Cookie" not in h for h in upstream.headers)  # one upstream client serves every principal


async def test_big_integers_lone_surrogates_and_non_ascii_cross_the_gateway_unchanged(legacy, upstream) -> None:
    # adapters.jsonwire: orjson would read a 65-bit integer as a float and cannot write a lone surrogate.
    # Separate requests: a lone surrogate anywhere sends the whole message down the stdlib path.
    upstream.script["tools/call"] = lambda b, h: {**text("ok"), "structuredContent": b["params"]["arguments"]}
    await legacy.initialize()
    for odd in ({"big": 2 ** 70 + 1, "neg": -(2 ** 64) - 1, "edge": -(2 ** 63) - 1, "id": "1234567890123456789012"},
                {"lone": "a\ud800b"}, {"accent": "é\u2028", "n": 12345678901234567}):
        resp = await legacy.post("tools/call", {"name": "echo", "arguments": odd})
        assert resp.content_type == "application/json"
        answer = json.loads(await resp.read())
        assert upstream.calls("tools/call")[-1]["params"]["arguments"] == odd
        got = answer["result"]["structuredContent"]
        assert got == odd and all(type(got[k]) is type(odd[k]) for k in odd)


async def test_a_request_with_a_non_json_number_is_a_parse_error(legacy, upstream) -> None:
    await legacy.initialize()
    for number in (b"NaN", b"Infinity", b"1e400"):
        body = b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":{"x":%s}}}' % number
        resp = await legacy.client.post("/mcp", data=body, headers=legacy.headers())
        assert resp.status == 400
        assert (await resp.json())["error"]["code"] == -32700
    assert upstream.calls("tools/call") == []  # nothing reached the upstream


def _pending(legacy: Legacy) -> dict:
    runtime = legacy.client.app[GATEWAY].runtimes.get(legacy.session_id)
    return runtime.exchanges if runtime is not None else {}


@pytest.mark.parametrize("opt_in", [None, "log_level", "progress_token"])
async def test_a_name_that_cannot_be_a_header_is_invalid_params_at_once(make_gateway, upstream, opt_in) -> None:
    # A lone surrogate has no UTF-8 form, so no Mcp-Name value (2026-07-28 basic/transports value encoding) can carry
    # it. With a log level or a progress token the round runs in a task, which used to die and hold the request to the
    # limit.
    upstream.script["tools/call"] = lambda b, r: text("ok")
    legacy = Legacy(await make_gateway(limits={"total_timeout_seconds": 5}))
    await legacy.initialize()
    params: dict = {"name": "bad\ud800", "arguments": {}}
    if opt_in == "log_level":
        assert (await legacy.call("logging/setLevel", {"level": "error"}))["result"] == {}
    elif opt_in == "progress_token":
        params["_meta"] = {"progressToken": "p1"}
    message = await asyncio.wait_for(legacy.call("tools/call", params), 2)
    assert message["error"]["code"] == -32602 and "Mcp-Name" in message["error"]["message"]
    assert upstream.calls("tools/call") == [] and _pending(legacy) == {}


async def test_an_argument_that_cannot_be_a_param_header_is_invalid_params(legacy, upstream) -> None:
    schema_ = {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}
    upstream.script["tools/list"] = lambda b, r: {"resultType": "complete", "ttlMs": 0, "cacheScope": "public",
                                                  "tools": [{"name": "geo", "inputSchema": schema_}]}
    upstream.script["tools/call"] = lambda b, r: text("ok")
    await legacy.initialize()
    await legacy.call("tools/list")  # the gateway learns the Region map
    assert (await legacy.call("logging/setLevel", {"level": "error"}))["result"] == {}
    message = await asyncio.wait_for(legacy.call("tools/call", {"name": "geo", "arguments": {"region": "\udc00"}}), 2)
    assert message["error"]["code"] == -32602 and "Mcp-Param-Region" in message["error"]["message"]
    assert upstream.calls("tools/call") == [] and _pending(legacy) == {}


async def test_a_gateway_bug_in_the_upstream_task_answers_at_once(make_gateway, upstream, monkeypatch) -> None:
    from gateway.session.rounds import Rounds
    upstream.script["tools/call"] = lambda b, r: text("x")
    legacy = Legacy(await make_gateway(limits={"total_timeout_seconds": 5}))
    await legacy.initialize()
    assert (await legacy.call("logging/setLevel", {"level": "error"}))["result"] == {}  # the round runs in a task

    async def broken(self, notify, session, extra):
        raise RuntimeError("bug")
    monkeypatch.setattr(Rounds, "_send", broken)
    message = await asyncio.wait_for(legacy.call("tools/call", {"name": "echo", "arguments": {}}), 2)
    assert message["error"] == {"code": -32603, "message": "internal gateway error"} and _pending(legacy) == {}
    monkeypatch.undo()
    assert (await legacy.call("tools/call", {"name": "echo", "arguments": {}}))["result"]["content"][0]["text"] == "x"


@pytest.mark.parametrize("tools", [5, "x", {"name": "t"}, None])
async def test_a_malformed_tools_list_is_an_upstream_failure_not_a_stuck_request(make_gateway, upstream,
                                                                                   tools) -> None:
    upstream.script["tools/list"] = lambda b, r: {"resultType": "complete", "ttlMs": 0, "cacheScope": "public",
                                                  "tools": tools}
    legacy = Legacy(await make_gateway(limits={"total_timeout_seconds": 5}))
    await legacy.initialize()
    for level in (None, "error"):  # the first round in the handler, then in a task
        if level:
            assert (await legacy.call("logging/setLevel", {"level": level}))["result"] == {}
        message = await asyncio.wait_for(legacy.call("tools/list"), 2)
        assert message["error"]["code"] == -32603 and "invalid_result" in message["error"]["message"]
        assert _pending(legacy) == {}


async def test_a_session_with_no_runtime_is_swept_from_the_store(make_gateway) -> None:
    # initialize + notifications/initialized, then abandoned: no runtime, only a record in the store.
    client = await make_gateway(session_idle_seconds=60)
    gw = client.app[GATEWAY]
    abandoned, busy = Legacy(client), Legacy(client)
    await abandoned.initialize()
    await busy.initialize()
    assert abandoned.session_id not in gw.runtimes and busy.session_id not in gw.runtimes
    real, offset = gw.clock, [30_000]
    gw.clock = lambda: real() + offset[0]
    assert await busy.notify("notifications/roots/list_changed") == 202  # seen later: stays
    offset[0] = 61_000
    assert await gw.sweep_expired(force=True) == 1
    assert await gw.store.get_session(abandoned.session_id) is None
    assert abandoned.session_id not in gw.store._seen and abandoned.session_id not in gw.store._sessions
    assert await gw.store.get_session(busy.session_id) is not None
    assert (await abandoned.post("ping")).status == 404 and (await busy.post("ping")).status == 200


async def test_a_delete_while_a_sweep_waits_on_the_store_does_not_break_initialize(make_gateway) -> None:
    client = await make_gateway(session_idle_seconds=60)
    gw = client.app[GATEWAY]
    real, offset = gw.clock, [0]
    gw.clock = lambda: real() + offset[0]
    a, b, c = Legacy(client), Legacy(client), Legacy(client)
    await a.initialize()
    await a.call("tools/list")  # runtimes: the sweep walks them
    offset[0] = 50_000
    await b.initialize()
    await b.call("tools/list")
    offset[0] = 65_000  # a is expired, b is not
    store_seen = gw.store.last_seen

    asked = asyncio.Event()

    async def networked_seen(session_ids):  # a shared store yields on every call
        asked.set()
        await asyncio.sleep(0.05)  # sleep: a shared store's round trip, during which the DELETE comes
        return await store_seen(session_ids)
    gw.store.last_seen = networked_seen
    init = asyncio.ensure_future(c.post("initialize", {"protocolVersion": c.version, "capabilities": {},
                                                       "clientInfo": {"name": "c", "version": "1"}}))
    await within(asked.wait())
    assert (await client.delete("/mcp", headers=b.headers())).status == 204
    resp = await init
    assert resp.status == 200 and "result" in await resp.json()
    assert a.session_id not in gw.runtimes and b.session_id not in gw.runtimes


async def test_a_sweep_spares_a_session_whose_runtime_is_made_while_it_asks_the_store(make_gateway) -> None:
    """A sweep asks the store for the last-seen times of the runtimes it has; a runtime made while that answer is
    awaited (a new session's first request, on a replica just started) is not among them and must not count as
    expired: it was, and its live session was deleted (tests/faults/test_chaos_replicas.py, heavy runs)."""
    old, new = Legacy(await make_gateway(session_idle_seconds=60)), None
    gw = old.client.app[GATEWAY]
    await old.initialize()
    await old.call("tools/list")  # a runtime the sweep asks about
    new = Legacy(old.client)
    await new.initialize()
    real_seen = gw.store.last_seen

    async def new_session_arrives(session_ids):
        seen = await real_seen(session_ids)
        gw.runtime(new.session_id)  # its first request, served while the sweep awaited the store
        return seen
    gw.store.last_seen = new_session_arrives
    assert await gw.sweep_expired(force=True) == 0
    assert await gw.store.get_session(new.session_id) is not None
    assert new.session_id in gw.runtimes
    assert (await new.post("tools/list")).status == 200  # still served (a deleted session gets 404)


async def test_a_shutdown_skips_a_runtime_another_replica_ended_meanwhile(make_gateway) -> None:
    """Shutdown closes the runtimes one by one; a DELETE relayed from another replica may end one of those still
    to close while an earlier one closes. It is skipped, not a KeyError that stopped the shutdown halfway."""
    first = Legacy(await make_gateway())
    gw = first.client.app[GATEWAY]
    second = Legacy(first.client)
    for client in (first, second):
        await client.initialize()
        await client.call("tools/list")
    runtimes = list(gw.runtimes.values())
    assert len(runtimes) == 2
    real_close = runtimes[0].close

    async def close_while_the_other_ends(*args, **kwargs):
        await gw.end_runtime(runtimes[1].session_id)  # the relayed DELETE, handled during this close
        return await real_close(*args, **kwargs)
    runtimes[0].close = close_while_the_other_ends
    await gw.close()
    assert gw.runtimes == {}


async def test_a_sweep_spares_a_session_with_a_request_in_flight(make_gateway, upstream) -> None:
    gate = asyncio.Event()

    async def slow(body, request):
        await gate.wait()
        return text("late")
    upstream.script["tools/call"] = slow
    client = await make_gateway(session_idle_seconds=60)
    gw = client.app[GATEWAY]
    legacy = Legacy(client)
    await legacy.initialize()
    call = asyncio.ensure_future(legacy.post("tools/call", {"name": "t", "arguments": {}}))
    await until(lambda: upstream.calls("tools/call"))
    real = gw.clock
    gw.clock = lambda: real() + 61_000
    assert await gw.sweep_expired(force=True) == 0
    assert await gw.store.get_session(legacy.session_id) is not None
    gate.set()
    assert (await (await call).json())["result"]["content"][0]["text"] == "late"
    assert await gw.sweep_expired(force=True) == 1 and legacy.session_id not in gw.runtimes


async def test_the_in_memory_store_expires_idle_records_and_their_rounds() -> None:
    from adapters.records import PendingRound, SessionRecord
    from gateway.session.store import InMemoryStore
    store = InMemoryStore()
    for session_id in ("old", "touched", "kept"):
        await store.put_session(SessionRecord(session_id, "p", "2025-11-25", {}, {}, 0, 1_000))
        await store.put_round(PendingRound("b-" + session_id, session_id, 1, "tools/call", {}))
    await store.touch_session("touched", 5_000)  # the touch, not the record's own time, counts
    # last_seen: the touched time, only for sessions that still have a record (no record is read for it).
    assert await store.last_seen(["old", "touched", "nobody"]) == {"old": 1_000, "touched": 5_000}
    assert await store.expire_sessions(2_000, keep=["kept"]) == ["old"]
    assert await store.last_seen(["old", "touched"]) == {"touched": 5_000}
    assert await store.get_session("old") is None and await store.get_round("b-old") is None
    assert await store.get_session("touched") is not None and await store.get_round("b-touched") is not None
    assert sorted(await store.expire_sessions(6_000)) == ["kept", "touched"]
    assert store._sessions == store._seen == store._rounds == {}


async def test_a_discover_result_that_is_already_stale_is_not_cached(make_gateway, upstream) -> None:
    upstream.script["server/discover"] = lambda b, r: {**DISCOVER, "ttlMs": 0, "cacheScope": "private"}
    client = await make_gateway()
    for i in range(5):
        await Legacy(client).initialize(Authorization=f"Bearer rotating-{i}")
    assert client.app[GATEWAY].discover_cache == {} and len(upstream.calls("server/discover")) == 5


async def test_expired_discover_entries_are_evicted_when_another_is_stored(make_gateway, upstream) -> None:
    upstream.script["server/discover"] = lambda b, r: {**DISCOVER, "ttlMs": 1_000, "cacheScope": "private"}
    client = await make_gateway()
    gw = client.app[GATEWAY]
    real, offset = gw.clock, [0]
    gw.clock = lambda: real() + offset[0]
    for i in range(3):
        await Legacy(client).initialize(Authorization=f"Bearer old-{i}")
    assert len(gw.discover_cache) == 3
    offset[0] = 5_000
    await Legacy(client).initialize(Authorization="Bearer new")
    assert len(gw.discover_cache) == 1 and len(upstream.calls("server/discover")) == 4
    await Legacy(client).initialize(Authorization="Bearer new")  # the fresh entry is still served
    assert len(upstream.calls("server/discover")) == 4


async def test_the_discover_cache_is_bounded(make_gateway, upstream, monkeypatch) -> None:
    import gateway.http.handshake
    monkeypatch.setattr(gateway.http.handshake, "DISCOVER_CACHE_MAX", 4)
    upstream.script["server/discover"] = lambda b, r: {**DISCOVER, "ttlMs": 60_000, "cacheScope": "private"}
    client = await make_gateway()
    gw = client.app[GATEWAY]
    for i in range(10):
        await Legacy(client).initialize(Authorization=f"Bearer rotating-{i}")
        assert len(gw.discover_cache) <= 4
    fetched = len(upstream.calls("server/discover"))
    await Legacy(client).initialize(Authorization="Bearer rotating-9")  # the newest entries are still served
    assert len(upstream.calls("server/discover")) == fetched == 10


async def test_a_stored_session_record_holds_only_its_own_bytes() -> None:
    # orjson's output keeps its buffer's capacity (4-8 KiB); a record kept for a session's life must not (the
    # benchmark's idle-session memory: 23 -> 31 KiB per session before the store copied it).
    import tracemalloc

    from adapters.records import SessionRecord
    from gateway.session.store import InMemoryStore

    store = InMemoryStore()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(200):
            await store.put_session(SessionRecord(f"s{n:04d}", "anonymous", "2025-11-25", {"sampling": {}},
                                                  {"name": "c", "version": "1"}, 1, 2))
        per_record = (tracemalloc.get_traced_memory()[0] - before) / 200
    finally:
        tracemalloc.stop()
    size = len(next(iter(store._sessions.values())))
    assert per_record < size + 400, (per_record, size)  # the bytes, its dict slot and last-seen entry


async def test_an_open_get_stream_keeps_no_parsed_session_record(legacy) -> None:
    """An idle session's GET stream is open for the session's life: once its listen is set up, nothing under
    it may hold the record its request was classified with (adapters.classify.kept_while_answering;
    docs/benchmarks.md, idle memory)."""
    import gc

    from adapters.records import SessionRecord

    await legacy.initialize()
    stream = await legacy.client.get("/mcp", headers=legacy.headers(Accept="text/event-stream"))
    assert stream.status == 200
    await legacy.next_event(stream)  # the priming event: the stream is open and its handler waits

    def parsed() -> list[SessionRecord]:
        gc.collect()
        return [o for o in gc.get_objects() if isinstance(o, SessionRecord) and o.session_id == legacy.session_id
                and o.client_capabilities]
    await until(lambda: not parsed())  # the listen's set-up (a task of its own) reads the record too, then lets it go
    assert parsed() == []
    stream.close()
