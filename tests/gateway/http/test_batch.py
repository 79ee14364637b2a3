"""2025-03-26 JSON-RPC batches through the shell (2025-03-26 basic §Batching, transports §Sending Messages;
docs/design/eras.md#json-rpc-batches-2025-03-26-only): each element goes its own way, the answers come as one JSON
array or one SSE stream."""

from __future__ import annotations

import json

from tests.gateway.conftest import Legacy, text
from tests.gateway.http.test_bridge_shell import SAMPLED, SAMPLING


def call(ident, name, method="tools/call"):
    return {"jsonrpc": "2.0", "id": ident, "method": method, "params": {"name": name, "arguments": {}}}


async def old_session(make_gateway, version="2025-03-26") -> Legacy:
    legacy = Legacy(await make_gateway(), version=version)
    await legacy.initialize()
    return legacy


async def post_batch(legacy: Legacy, items):
    return await legacy.client.post("/mcp", data=json.dumps(items), headers=legacy.headers())


async def test_a_batch_of_requests_is_answered_with_one_json_array(make_gateway, upstream) -> None:
    upstream.script["tools/call"] = lambda body, request: text("ran " + body["params"]["name"])
    legacy = await old_session(make_gateway)
    resp = await post_batch(legacy, [call(1, "a"), call("two", "b"),
                                     {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}])
    assert resp.status == 200 and resp.content_type == "application/json"
    answers = await resp.json()
    assert {a["id"]: a["result"]["content"][0]["text"] for a in answers} == {1: "ran a", "two": "ran b"}
    assert len(upstream.calls("tools/call")) == 2


async def test_bad_elements_are_answered_alone_and_the_rest_still_run(make_gateway, upstream) -> None:
    upstream.script["tools/call"] = lambda body, request: text("ok")
    legacy = await old_session(make_gateway)
    init = {"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {}}
    resp = await post_batch(legacy, [init, "junk", call(1, "a"), call(1, "dup")])
    answers = await resp.json()
    by_id = {}
    for answer in answers:
        by_id.setdefault(json.dumps(answer["id"]), []).append(answer)
    assert "initialize" in by_id["9"][0]["error"]["message"] and by_id["9"][0]["error"]["code"] == -32600
    assert by_id["null"][0]["error"]["code"] == -32600
    # The same id twice in one batch: one runs, the other is refused as already in flight.
    assert sorted("result" in a for a in by_id["1"]) == [False, True]


async def test_notifications_and_responses_alone_get_202(make_gateway, upstream) -> None:
    legacy = await old_session(make_gateway)
    resp = await post_batch(legacy, [{"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
                                     {"jsonrpc": "2.0", "id": "nobody-asked", "result": {}}])
    assert resp.status == 202 and await resp.read() == b""
    resp = await post_batch(legacy, [{"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}, 7])
    assert resp.status == 400 and (await resp.json())[0]["error"]["code"] == -32600


async def test_a_batch_with_a_bridged_request_is_one_sse_stream(make_gateway, upstream) -> None:
    def bridged(body, request):
        if body["params"]["name"] == "plain":
            return text("plain")
        if "requestState" not in body["params"]:
            return {"resultType": "input_required", "inputRequests": {"s": SAMPLING}, "requestState": "st"}
        assert body["params"]["inputResponses"] == {"s": SAMPLED}
        return text("sampled")
    upstream.script["tools/call"] = bridged
    legacy = await old_session(make_gateway)
    resp = await post_batch(legacy, [call("p", "plain"), call("q", "asks")])
    assert resp.status == 200 and resp.content_type == "text/event-stream"
    seen = []
    while True:
        _eid, message = await legacy.next_event(resp)
        if message is None:
            if _eid is None:
                break
            continue
        seen.append(message)
        if message.get("method") == "sampling/createMessage":
            assert await legacy.answer(message["id"], SAMPLED) == 202
    finals = {m["id"]: m["result"]["content"][0]["text"] for m in seen if "result" in m}
    assert finals == {"p": "plain", "q": "sampled"}  # both on the one stream, which then ended
    assert [m["method"] for m in seen if "method" in m] == ["sampling/createMessage"]


async def test_a_batch_on_a_later_revision_is_refused(make_gateway, upstream) -> None:
    for version in ("2025-11-25", "2025-06-18"):
        legacy = await old_session(make_gateway, version)
        resp = await post_batch(legacy, [call(1, "a")])
        assert resp.status == 400
        error = (await resp.json())["error"]
        assert error["code"] == -32600 and "2025-03-26" in error["message"]
    assert upstream.calls("tools/call") == []


async def test_every_element_of_a_batch_is_counted_once(make_gateway, upstream) -> None:
    from tests.gateway.telemetry.test_usage_shell import records
    upstream.script["tools/call"] = lambda body, request: text("ok")
    legacy = await old_session(make_gateway)
    resp = await post_batch(legacy, [call("x", "a"), {"jsonrpc": "2.0", "id": "p", "method": "ping"},
                                     call("y", "b")])
    assert len(await resp.json()) == 3
    counted = {(r["method"], r["revision"]): r["count"] for r in records(legacy.client) if r["method"] != "initialize"}
    assert counted == {("tools/call", "2025-03-26"): 2, ("ping", "2025-03-26"): 1}
