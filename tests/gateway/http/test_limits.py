"""What clients may make the gateway hold, through the real endpoint: sessions in total and per principal, the
size of what initialize stores, subscriptions and cached roots per session, and the request body's size and
arrival time ([gateway.sessions], [gateway.connections]; adapters.admission)."""

from __future__ import annotations

import asyncio
import json

from gateway.config.settings import load_config
from gateway.http.app import GATEWAY
from tests.gateway.conftest import Legacy, geo_upstream, text
from tests.waiting import until_hung_up

INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}


async def _initialize(client, params=None, **headers: str):
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json", **headers}
    body = {"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": params or INIT}
    return await client.post("/mcp", data=json.dumps(body), headers=headers)


async def _refused(resp, limit: str, value: int, status: int = 503) -> None:
    assert resp.status == status
    message = await resp.json()
    assert message["id"] == 7 and message["error"]["code"] == -32000
    assert message["error"]["data"] == {"limit": limit, "value": value} and limit in message["error"]["message"]
    assert "Mcp-Session-Id" not in resp.headers


async def test_max_sessions_refuses_a_new_session_with_503_and_existing_ones_keep_working(make_gateway) -> None:
    client = await make_gateway(sessions={"max_sessions": 2})
    first, second = Legacy(client), Legacy(client)
    await first.initialize()
    await second.initialize()
    await _refused(await _initialize(client), "max_sessions", 2)
    assert (await first.call("ping"))["result"] == {} and (await second.call("ping"))["result"] == {}
    assert len(client.app[GATEWAY].runtimes) <= 2


async def test_a_slot_taken_by_another_replica_since_the_count_is_not_taken_twice(make_gateway) -> None:
    """Replicas on one store count, then store: a handshake on another replica may take the last slot in between.
    The store's own count right after the write tells, and the session stored second is taken back (503)."""
    client = await make_gateway(sessions={"max_sessions": 2})
    store = client.app[GATEWAY].store
    first, other = Legacy(client), Legacy(client)
    await first.initialize()
    real_count = store.count_sessions

    async def counted_before_the_other(principal):  # the other replica's session is stored right after this
        store.count_sessions = real_count
        counts = await real_count(principal)
        await other.initialize()
        return counts
    store.count_sessions = counted_before_the_other
    await _refused(await _initialize(client), "max_sessions", 2)
    assert (await store.count_sessions("anonymous")) == (2, 2)  # the limit held: the late one was taken back
    assert (await first.call("ping"))["result"] == {} and (await other.call("ping"))["result"] == {}


async def test_a_deleted_session_frees_its_slot(make_gateway) -> None:
    client = await make_gateway(sessions={"max_sessions": 1})
    first = Legacy(client)
    await first.initialize()
    await _refused(await _initialize(client), "max_sessions", 1)
    resp = await client.delete("/mcp", headers=first.headers())
    assert resp.status == 204
    assert (await _initialize(client)).status == 200


async def test_an_expired_session_frees_its_slot(make_gateway) -> None:
    client = await make_gateway(sessions={"max_sessions": 1}, session_idle_seconds=60)
    await Legacy(client).initialize()
    gw = client.app[GATEWAY]
    await _refused(await _initialize(client), "max_sessions", 1)
    real = gw.clock
    gw.clock = lambda: real() + 61_000  # an injected clock: the next initialize's sweep expires the first
    assert (await _initialize(client)).status == 200


async def test_max_sessions_per_principal_counts_each_bearer_token_and_anonymous_apart(make_gateway) -> None:
    client = await make_gateway(sessions={"max_sessions_per_principal": 1})
    await Legacy(client).initialize()
    await _refused(await _initialize(client), "max_sessions_per_principal", 1)  # anonymous is one principal
    assert (await _initialize(client, Authorization="Bearer alice")).status == 200
    await _refused(await _initialize(client, Authorization="Bearer alice"), "max_sessions_per_principal", 1)
    assert (await _initialize(client, Authorization="Bearer bob")).status == 200


async def test_an_initialize_storing_too_much_is_refused_by_name(make_gateway) -> None:
    client = await make_gateway(sessions={"max_initialize_bytes": 1024})
    params = {**INIT, "clientInfo": {"name": "big", "version": "1", "title": "x" * 2000}}
    resp = await _initialize(client, params)
    await _refused(resp, "max_initialize_bytes", 1024, status=200)  # the request's own fault: a JSON-RPC error
    assert client.app[GATEWAY].runtimes == {} and (await _initialize(client)).status == 200


async def test_the_default_initialize_bound_admits_a_real_clients_declaration(make_gateway) -> None:
    client = await make_gateway()
    caps = {"sampling": {"tools": {}, "context": {}}, "elicitation": {"form": {}, "url": {}},
            "roots": {"listChanged": True}, "experimental": {"x": {"y": True}}}
    info = {"name": "mcp-sdk-client", "title": "A client", "version": "1.22.0", "websiteUrl": "https://example.com",
            "icons": [{"src": "data:image/png;base64," + "A" * 8000, "mimeType": "image/png", "sizes": ["64x64"]}]}
    resp = await _initialize(client, {**INIT, "capabilities": caps, "clientInfo": info})
    assert resp.status == 200 and "result" in await resp.json()


def _listen_acking(upstream) -> None:
    def listen(body, request):
        ack = {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
               "params": {"notifications": body["params"]["notifications"]}}

        async def hold():
            await until_hung_up(request)
        return [ack, hold]
    upstream.script["subscriptions/listen"] = listen


async def test_max_subscriptions_per_session_refuses_a_new_uri_by_name(make_gateway, upstream) -> None:
    _listen_acking(upstream)
    client = Legacy(await make_gateway(sessions={"max_subscriptions_per_session": 2}))
    await client.initialize()
    for uri in ("file:///a", "file:///b", "file:///a"):  # a repeat is no new entry
        assert (await client.call("resources/subscribe", {"uri": uri}))["result"] == {}
    refused = await client.call("resources/subscribe", {"uri": "file:///c"})
    assert refused["error"]["code"] == -32000
    assert refused["error"]["data"] == {"limit": "max_subscriptions_per_session", "value": 2}
    record = await client.client.app[GATEWAY].store.get_session(client.session_id)
    assert sorted(record.subscriptions) == ["file:///a", "file:///b"]
    assert (await client.call("resources/unsubscribe", {"uri": "file:///a"}))["result"] == {}
    assert (await client.call("resources/subscribe", {"uri": "file:///c"}))["result"] == {}  # its slot is free


async def test_a_body_over_max_request_bytes_gets_413_with_a_json_rpc_error(make_gateway) -> None:
    client = await make_gateway(connections={"max_request_bytes": 2048})
    params = {**INIT, "clientInfo": {"name": "x" * 4096, "version": "1"}}
    resp = await _initialize(client, params)
    assert resp.status == 413 and resp.content_type == "application/json"
    message = await resp.json()
    assert message["id"] is None and message["error"]["code"] == -32600
    assert "max_request_bytes" in message["error"]["message"]
    assert (await _initialize(client)).status == 200  # the gateway is unharmed


def test_the_new_keys_load_from_toml(tmp_path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text("[gateway.sessions]\nmax_sessions = 5\nmax_subscriptions_per_session = 3\n"
                    "[gateway.connections]\nmax_client_connections = 7\nrequest_body_timeout_seconds = 2.5\n")
    config = load_config(path)
    assert config.sessions.session_limits.max_sessions == 5
    assert config.sessions.session_limits.max_subscriptions_per_session == 3
    assert (config.connections.max_client_connections, config.connections.request_body_timeout_seconds) == (7, 2.5)


async def test_roots_larger_than_max_cached_roots_bytes_are_used_but_asked_again(make_gateway, upstream) -> None:
    def scan(body, headers):
        if "inputResponses" not in body["params"]:
            return {"resultType": "input_required", "inputRequests": {"roots": {"method": "roots/list"}}}
        return text(str(len(body["params"]["inputResponses"]["roots"]["roots"])))
    upstream.script["tools/call"] = scan
    client = Legacy(await make_gateway(sessions={"max_cached_roots_bytes": 1024}))
    await client.initialize()
    roots = [{"uri": f"file:///w{i}", "name": "w" * 40} for i in range(30)]  # about 2 KiB: not kept
    for _ in range(2):  # the second call is asked again: nothing was cached
        resp = await client.post("tools/call", {"name": "scan", "arguments": {}})
        await client.next_event(resp)
        _, ask = await client.next_event(resp)
        assert ask["method"] == "roots/list"
        await client.answer(ask["id"], {"roots": roots})
        message = next(m for m in await client.events(resp) if "result" in m)
        assert message["result"]["content"][0]["text"] == "30"  # used for its own request
    record = await client.client.app[GATEWAY].store.get_session(client.session_id)
    assert record.cached_roots is None


async def test_header_maps_over_max_header_maps_bytes_stay_with_the_process(make_gateway, upstream) -> None:
    geo_upstream(upstream)
    client = Legacy(await make_gateway(sessions={"max_header_maps_bytes": 10}))
    await client.initialize()
    assert "result" in await client.call("tools/list")
    message = await client.call("tools/call", {"name": "geo", "arguments": {"region": "eu"}})
    assert message["result"]["content"][0]["text"] == "ok eu"  # mirrored from this process's copy
    assert [m["method"] for m in upstream.received if m["method"].startswith("tools/")] == ["tools/list", "tools/call"]
    record = await client.client.app[GATEWAY].store.get_session(client.session_id)
    assert record.header_maps is None  # not parsed with every request of the session


async def test_the_store_counts_live_sessions_as_they_are_put_and_dropped() -> None:
    from adapters.records import SessionRecord
    from gateway.session.store import InMemoryStore

    store = InMemoryStore()
    for sid, principal, seen in (("a", "p1", 10), ("b", "p1", 20), ("c", "p2", 30)):
        await store.put_session(SessionRecord(sid, principal, "2025-11-25", {}, {}, seen, seen))
    await store.put_session(SessionRecord("a", "p1", "2025-11-25", {}, {}, 10, 10))  # a re-save is no new session
    assert await store.count_sessions("p1") == (3, 2) and await store.count_sessions("p2") == (3, 1)
    await store.delete_session("b")
    assert await store.count_sessions("p1") == (2, 1)
    assert await store.expire_sessions(25) == ["a"]
    assert await store.count_sessions("p1") == (1, 0) and await store.count_sessions("nobody") == (1, 0)
    assert "p1" not in store._per_principal  # a principal with no session left is forgotten


async def test_a_drip_fed_body_gets_408_and_its_connection_is_closed(make_gateway) -> None:
    client = await make_gateway(connections={"request_body_timeout_seconds": 0.5})
    reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
    writer.write(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{")
    await writer.drain()

    async def drip() -> None:  # a byte now and then, never the whole body
        for _ in range(100):
            await asyncio.sleep(0.1)  # sleep: a slow client's pace
            writer.write(b" ")
            await writer.drain()
    dripping = asyncio.create_task(drip())
    try:
        answer = await asyncio.wait_for(reader.read(), 30)  # read() to EOF: the server closed the connection
    finally:
        dripping.cancel()
        await asyncio.gather(dripping, return_exceptions=True)
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408")
    message = json.loads(body)
    assert message["id"] is None and message["error"]["code"] == -32600
    assert "request_body_timeout_seconds" in message["error"]["message"]
    assert (await _initialize(client)).status == 200


async def test_max_subscription_bytes_refuses_a_huge_uri_by_name(make_gateway, upstream) -> None:
    _listen_acking(upstream)
    client = Legacy(await make_gateway(sessions={"max_subscription_bytes": 1024}))
    await client.initialize()
    refused = await client.call("resources/subscribe", {"uri": "file:///" + "x" * 2000})
    assert refused["error"]["data"] == {"limit": "max_subscription_bytes", "value": 1024}
    assert (await client.call("resources/subscribe", {"uri": "file:///small"}))["result"] == {}
    record = await client.client.app[GATEWAY].store.get_session(client.session_id)
    assert record.subscriptions == ["file:///small"]


async def test_subscribes_in_one_batch_cannot_pass_the_bound_together(make_gateway, upstream) -> None:
    _listen_acking(upstream)
    client = Legacy(await make_gateway(sessions={"max_subscriptions_per_session": 2}), version="2025-03-26")
    await client.initialize()
    batch = [{"jsonrpc": "2.0", "id": i, "method": "resources/subscribe", "params": {"uri": f"file:///{i}"}}
             for i in range(1, 5)]  # run at once: each reads the record before any saved its URI
    resp = await client.client.post("/mcp", data=json.dumps(batch), headers=client.headers())
    answers = {a["id"]: a for a in await resp.json()}
    granted = [i for i, a in answers.items() if "result" in a]
    assert len(granted) == 2 and len(answers) == 4
    assert all(a["error"]["data"]["limit"] == "max_subscriptions_per_session"
               for a in answers.values() if "error" in a)
    record = await client.client.app[GATEWAY].store.get_session(client.session_id)
    assert sorted(record.subscriptions) == sorted(f"file:///{i}" for i in granted)
