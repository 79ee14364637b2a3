"""The first upstream round of a forwarded request runs in the handler (``Exchange.begin``): a lone response is
answered as JSON with no task, stream or saved round, and everything else escalates to the full exchange with
nothing lost (notifications, cancellation, session end, the total limit, the bridge)."""

from __future__ import annotations

import asyncio

from gateway.http.app import GATEWAY
from tests.gateway.conftest import Legacy, SharedMemoryStore, text
from tests.gateway.http.test_bridge_shell import SAMPLED, _hold, gateway_tasks, two_rounds
from tests.waiting import until


def _runtime(legacy: Legacy):
    return legacy.client.app[GATEWAY].runtimes[legacy.session_id]


def _record_saves(store) -> list:
    """Every round record ``store`` is asked to save from now on (the save still happens)."""
    saved, real_put = [], store.put_round

    async def put_round(record, *args, **kwargs):
        saved.append(record)
        return await real_put(record, *args, **kwargs)
    store.put_round = put_round
    return saved


async def test_a_plain_request_makes_no_stream_no_task_and_saves_no_round(legacy, upstream) -> None:
    upstream.script["tools/call"] = lambda b, r: text("fast")
    await legacy.initialize()
    gw = legacy.client.app[GATEWAY]
    saved = _record_saves(gw.store)
    for _ in range(3):
        resp = await legacy.post("tools/call", {"name": "echo", "arguments": {}})
        assert resp.content_type == "application/json"
        assert (await resp.json())["result"]["content"][0]["text"] == "fast"
    runtime = _runtime(legacy)
    assert runtime.streams == {} and runtime.exchanges == {} and runtime.tasks == set() and saved == []


async def test_a_bridged_request_still_saves_its_round_while_it_waits(make_gateway, upstream) -> None:
    upstream.script["tools/call"] = two_rounds
    legacy = Legacy(await make_gateway(session_store=SharedMemoryStore()))  # a store another process reads
    await legacy.initialize()
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {}})
    await legacy.next_event(resp)  # priming
    _, first = await legacy.next_event(resp)
    _, second = await legacy.next_event(resp)
    gw = legacy.client.app[GATEWAY]
    (pending,) = await gw.store.rounds_of(legacy.session_id)
    assert pending.phase == "awaiting_client" and pending.request_state == "s1\u00e9"
    for ask in (first, second):
        await legacy.answer(ask["id"], SAMPLED)
    _, third = await legacy.next_event(resp)
    await legacy.answer(third["id"], SAMPLED)
    _, final = await legacy.next_event(resp)
    assert final["result"]["content"][0]["text"] == "bridged"
    assert await gw.store.rounds_of(legacy.session_id) == []


async def test_a_notification_that_comes_unasked_is_sent_before_the_response(legacy, upstream) -> None:
    # No progress token and no log level: the first round runs in the handler, yet the upstream logs anyway.
    upstream.script["tools/call"] = lambda b, r: [
        {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "unasked"}},
        text("done")]
    await legacy.initialize()
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {}})
    assert resp.status == 200 and resp.content_type == "text/event-stream"
    events = await legacy.events(resp)
    assert [e.get("method", "response") for e in events] == ["notifications/message", "response"]
    assert events[0]["params"]["data"] == "unasked" and events[1]["result"]["content"][0]["text"] == "done"


async def test_delete_during_the_first_round_ends_the_request_and_leaves_nothing(legacy, upstream) -> None:
    upstream.script["tools/call"] = lambda b, r: [_hold(r)]
    await legacy.initialize()
    post = asyncio.ensure_future(legacy.post("tools/call", {"name": "t", "arguments": {}}))
    await until(lambda: upstream.calls("tools/call"))
    runtime = _runtime(legacy)
    assert list(runtime.exchanges) == [legacy.next_id]  # in flight, though no task of its own runs it
    assert (await legacy.client.delete("/mcp", headers=legacy.headers())).status == 204
    assert (await asyncio.wait_for(post, 10)).status == 202  # no response for a request of a dead session
    assert runtime.exchanges == {} and gateway_tasks() == []


async def test_the_total_limit_applies_to_the_first_round(make_gateway, upstream) -> None:
    legacy = Legacy(await make_gateway(limits={"total_timeout_seconds": 0.2}))
    upstream.script["tools/call"] = lambda b, r: [_hold(r)]
    await legacy.initialize()
    message = await asyncio.wait_for(legacy.call("tools/call", {"name": "t", "arguments": {}}), 10)
    assert "total_timeout_seconds" in message["error"]["message"]
    assert (await legacy.call("ping"))["result"] == {} and _runtime(legacy).exchanges == {}


async def test_the_total_limit_counts_from_arrival_after_escalating(make_gateway, upstream) -> None:
    legacy = Legacy(await make_gateway(limits={"total_timeout_seconds": 0.3}))
    upstream.script["tools/call"] = two_rounds
    await legacy.initialize()
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {}})
    events = await asyncio.wait_for(legacy.events(resp), 10)  # the client never answers
    final = [e for e in events if e.get("id") == legacy.next_id]
    assert len(final) == 1 and "total_timeout_seconds" in final[0]["error"]["message"]
    assert [e["method"] for e in events if "method" in e].count("notifications/cancelled") == 2


async def test_a_reused_id_is_refused_while_the_first_round_is_in_flight(legacy, upstream) -> None:
    release = asyncio.Event()

    async def slow():
        await release.wait()
        return text("first")
    upstream.script["tools/call"] = lambda b, r: [slow]
    await legacy.initialize()
    first = asyncio.ensure_future(legacy.post("tools/call", {"name": "t", "arguments": {}}))
    await until(lambda: upstream.calls("tools/call"))
    legacy.next_id -= 1  # the same id again
    again = await legacy.call("tools/call", {"name": "t", "arguments": {}})
    assert "already in flight" in again["error"]["message"]
    release.set()
    resp = await first
    assert resp.content_type == "application/json"  # the refusal did not disturb the request in flight
    assert (await resp.json())["result"]["content"][0]["text"] == "first"


async def test_an_exchanges_inbox_keeps_arrival_order_and_survives_a_cancelled_wait() -> None:
    """Exchange events (answers, upstream outcomes, timers) come out in the order they were put, whether put
    before or during the wait; a cancelled wait (the exchange's task cancelled) loses nothing."""
    from gateway.session.exchange import _Inbox

    inbox = _Inbox()
    inbox.put_nowait("a")
    waiting = asyncio.ensure_future(inbox.get())
    assert await asyncio.wait_for(waiting, 5) == "a"
    waiting = asyncio.ensure_future(inbox.get())
    await asyncio.sleep(0)
    inbox.put_nowait("b")
    inbox.put_nowait("c")
    assert await asyncio.wait_for(waiting, 5) == "b"
    assert await asyncio.wait_for(inbox.get(), 5) == "c"
    cancelled = asyncio.ensure_future(inbox.get())
    await asyncio.sleep(0)
    cancelled.cancel()
    await asyncio.gather(cancelled, return_exceptions=True)
    inbox.put_nowait("d")  # no waiter now: kept for the next get
    assert await asyncio.wait_for(inbox.get(), 5) == "d"


async def test_on_a_store_no_other_process_reads_a_bridged_round_is_never_saved(legacy, upstream) -> None:
    """docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds: on one process nobody could continue a
    round, so its record is not written (it cost a bridged call 2% of its instructions, to be read by no one)."""
    upstream.script["tools/call"] = two_rounds
    await legacy.initialize()
    gw = legacy.client.app[GATEWAY]
    saved = _record_saves(gw.store)
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {}})
    await legacy.next_event(resp)  # priming
    _, first = await legacy.next_event(resp)
    _, second = await legacy.next_event(resp)
    assert await gw.store.rounds_of(legacy.session_id) == []  # waiting for the client, and not in the store
    for ask in (first, second):
        await legacy.answer(ask["id"], SAMPLED)
    _, third = await legacy.next_event(resp)
    await legacy.answer(third["id"], SAMPLED)
    _, final = await legacy.next_event(resp)
    assert final["result"]["content"][0]["text"] == "bridged" and saved == []
