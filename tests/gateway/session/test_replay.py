"""SSE replay across replicas (docs/design/replicas.md#sse-replay-across-replicas): what only Redis does with a copy,
the mirror that writes it, then two gateway apps on real ports sharing a real Redis, where a stream written by
replica A is resumed through replica B (the stream-copy contract of every backend is ``test_store_contract``). Redis
is found as in ``test_redis_store``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("redis")
from adapters.sse import Event
from gateway.http.app import GATEWAY
from gateway.session.redis_store import RedisStore
from gateway.session.replay import Mirror, MirrorState
from gateway.session.store import StoreUnavailable
from gateway.session.streams import OutStream
from tests.gateway.conftest import CAPS, Legacy
from tests.gateway.http.test_bridge_shell import SAMPLED, SAMPLING, two_rounds
from tests.gateway.session import test_redis_store as redis_tests
from tests.gateway.session.test_store_contract import events, open_session
from tests.waiting import until, within

redis_url, prefix, private_redis = redis_tests.redis_url, redis_tests.prefix, redis_tests.private_redis  # shared
NOW = redis_tests.NOW


async def test_the_copy_expires_and_is_renewed_with_its_session(redis_url, prefix) -> None:
    store = RedisStore(redis_url, idle_seconds=60, prefix=prefix)
    try:
        await open_session(store)
        await store.append_events("s1", "x", events((1, "a")), capacity=8, opening=True)
        key, names = store.stream_key("s1", "x"), store.key("es:", "s1")
        assert 0 < await store.redis.pttl(key) <= 60_000
        await store.redis.pexpire(key, 5_000)
        await store.redis.pexpire(names, 5_000)
        await store.touch_session("s1", NOW + 1)
        assert await store.redis.pttl(key) > 5_000 and await store.redis.pttl(names) > 5_000
    finally:
        await store.close()


class FailingStore:
    """A store whose copies fail: with the store's own error, or with a bug."""

    shares_streams = True

    def __init__(self, error: Exception) -> None:
        self.error, self.dropped = error, 0

    async def append_events(self, *args: Any, **kwargs: Any) -> None:
        raise self.error

    async def drop_stream(self, session_id: str, stream: str) -> None:
        self.dropped += 1


@pytest.mark.parametrize("error", [StoreUnavailable("down"), RuntimeError("a bug")])
async def test_a_copy_that_fails_never_holds_the_stream_back(error: Exception) -> None:
    store = FailingStore(error)
    stream = OutStream("s", 8)
    stream.mirror = mirror = Mirror(stream, store, "s1", asyncio.ensure_future)  # type: ignore[arg-type]
    stream.push({"n": 1})
    await asyncio.wait_for(mirror.start(), 5)
    batches = stream.batches_after(0, keepalive=60, writer=stream.claim())
    assert [e.message for e in await asyncio.wait_for(batches.__anext__(), 5)] == [{"n": 1}]
    stream.finish({"n": 2})
    assert [e.message for e in await asyncio.wait_for(batches.__anext__(), 5)] == [{"n": 2}]
    assert mirror.state is MirrorState.LOCAL and store.dropped == 1


class RecordingStore:
    """A store whose copies only record what they were given."""

    shares_streams = True

    def __init__(self) -> None:
        self.appended: list[tuple[int, Any]] = []
        self.dropped = 0

    async def append_events(self, session_id: str, stream: str, events: list[Event], **kwargs: Any) -> None:
        self.appended += [(e.seq, e.message) for e in events]

    async def drop_stream(self, session_id: str, stream: str) -> None:
        self.dropped += 1


async def test_a_held_copy_sends_nothing_until_its_write_is_done_and_a_failed_one_forgets_the_events() -> None:
    """docs/design/takeover.md#a-bridged-step-is-one-fenced-store-write: while a save holds the copy, the events
    pushed wait (a writer starting meanwhile waits for the opening that save makes); written, they go out; not
    written, nobody ever gets them."""
    store = RecordingStore()
    stream = OutStream("s", 8)
    stream.mirror = mirror = Mirror(stream, store, "s1", asyncio.ensure_future)  # type: ignore[arg-type]
    assert mirror.hold() and not mirror.hold()  # one holder at a time
    stream.push({"n": 1})
    opened = asyncio.ensure_future(mirror.start())
    await asyncio.sleep(0.01)  # sleep: a quiet window: the opening must wait for the held save
    assert not opened.done() and store.appended == []  # no copy of its own meanwhile
    copy = mirror.held_events()
    assert copy is not None and copy.opening and [e.seq for e in copy.events] == [1]
    mirror.released(copy, True)
    await asyncio.wait_for(opened, 5)
    batches = stream.batches_after(0, keepalive=60, writer=stream.claim())
    assert [e.message for e in await asyncio.wait_for(batches.__anext__(), 5)] == [{"n": 1}]
    assert mirror.hold()
    stream.push({"n": 2})
    fenced = mirror.held_events()
    assert fenced is not None and not fenced.opening
    mirror.released(fenced, False)
    assert stream.buffer.next_seq == 2 and store.appended == []  # forgotten: its number is free again
    stream.push({"n": 3})
    assert [e.message for e in await asyncio.wait_for(batches.__anext__(), 5)] == [{"n": 3}]
    assert store.appended == [(2, {"n": 3})]  # copied as usual once nothing holds the copy


async def test_a_write_that_carried_every_event_leaves_no_copy_to_make() -> None:
    """A save that carried the step's events into the copy leaves it whole: no copy task is made after it (one
    made for nothing costs a loop turn per step), while an event pushed after the save still is copied."""
    store, spawned = RecordingStore(), []

    def spawn(coro: Any) -> asyncio.Future:
        spawned.append(coro)
        return asyncio.ensure_future(coro)

    stream = OutStream("s", 8)
    stream.mirror = mirror = Mirror(stream, store, "s1", spawn)  # type: ignore[arg-type]
    assert mirror.hold()
    stream.push({"n": 1})
    mirror.released(mirror.held_events(), True)
    assert spawned == [] and mirror.kept == 1
    stream.push({"n": 2})
    assert len(spawned) == 1
    await asyncio.wait_for(asyncio.shield(mirror._task), 5)  # type: ignore[arg-type]
    assert store.appended == [(2, {"n": 2})]
    stream.finish()
    assert len(spawned) == 2  # the end is copied too
    await asyncio.wait_for(asyncio.shield(mirror._task), 5)  # type: ignore[arg-type]
    mirror.kick()
    assert len(spawned) == 2


async def test_a_result_whose_write_failed_still_goes_out_and_the_copy_is_dropped() -> None:
    """A round's end carries its result (docs/design/takeover.md#a-bridged-step-is-one-fenced-store-write); when that
    write fails the result is not forgotten as a step's ask is: the request is answered from this replica, whose copy
    no other can resume any more."""
    store = RecordingStore()
    stream = OutStream("s", 8)
    stream.mirror = mirror = Mirror(stream, store, "s1", asyncio.ensure_future)  # type: ignore[arg-type]
    await asyncio.wait_for(mirror.start(), 5)
    batches = stream.batches_after(0, keepalive=60, writer=stream.claim())
    await asyncio.wait_for(batches.__anext__(), 5)  # the first, empty batch
    assert mirror.hold()
    stream.finish({"result": {}})
    copy = mirror.held_events()
    assert copy is not None and copy.ended_after == 1 and [e.seq for e in copy.events] == [1]
    mirror.released(copy, False, forget=False)
    assert [e.message for e in await asyncio.wait_for(batches.__anext__(), 5)] == [{"result": {}}]
    await until(lambda: store.dropped, "the copy is dropped")
    assert mirror.state is MirrorState.LOCAL and store.dropped == 1 and store.appended == []


async def test_events_evicted_before_a_held_write_leave_the_stream_uncopied() -> None:
    """A held append whose events were evicted first (a step that sent more than the buffer keeps) has nothing
    whole to write: the save goes without them, and once it is done the copy is dropped and the stream goes on
    from this replica only, as when a copy of its own finds such a hole."""
    store = RecordingStore()
    stream = OutStream("s", 1)
    stream.mirror = mirror = Mirror(stream, store, "s1", asyncio.ensure_future)  # type: ignore[arg-type]
    await asyncio.wait_for(mirror.start(), 5)
    assert mirror.hold()
    stream.push({"n": 1})
    stream.push({"n": 2})  # evicts event 1, not copied yet
    assert mirror.held_events() is None
    mirror.released(None, True)
    await until(lambda: store.dropped, "the copy is dropped")
    assert mirror.state is MirrorState.LOCAL and store.dropped == 1 and store.appended == []
    batches = stream.batches_after(1, keepalive=60, writer=stream.claim())  # a writer past the evicted event
    assert [e.message for e in await asyncio.wait_for(batches.__anext__(), 5)] == [{"n": 2}]  # uncopied


# Two replicas on one Redis ------------------------------------------------------------------------------------


async def replicas(make_gateway: Any, url: str, name: str, store_timeout: float = 2.0,
                   **config: Any) -> tuple[Legacy, Legacy]:
    """A client initialized on replica A, and the same session's client on replica B (each its own port)."""
    settings = {"url": url, "prefix": name, "timeout_seconds": store_timeout}
    a = Legacy(await make_gateway(store=settings, **config))
    b = Legacy(await make_gateway(store=settings, **config))
    assert a.client.app[GATEWAY].replica != b.client.app[GATEWAY].replica
    assert a.client.port != b.client.port
    await a.initialize(CAPS)
    b.session_id = a.session_id
    return a, b


def one_round(body: dict[str, Any], request: Any) -> dict[str, Any]:
    if body["params"].get("requestState") is None:
        return {"resultType": "input_required", "inputRequests": {"a": SAMPLING}, "requestState": "s1"}
    assert body["params"]["inputResponses"] == {"a": SAMPLED}
    return redis_tests_text("sampled on A, answered through B")


def redis_tests_text(value: str) -> dict[str, Any]:
    return {"resultType": "complete", "content": [{"type": "text", "text": value}]}


async def test_a_stream_dropped_on_a_resumes_on_b_and_follows_to_the_result(make_gateway, upstream, redis_url,
                                                                           prefix) -> None:
    upstream.script["tools/call"] = one_round
    a, b = await replicas(make_gateway, redis_url, prefix)
    post = await a.post("tools/call", {"name": "t", "arguments": {}})
    priming, _ = await within(a.next_event(post))
    post.close()  # the client's connection to A breaks before it read the sampling request
    resumed = await b.resume(priming)
    assert resumed.status == 200 and resumed.headers["Content-Type"] == "text/event-stream"
    eid, asked = await within(b.next_event(resumed))
    assert asked["method"] == "sampling/createMessage" and eid.rpartition(".")[0] == priming.rpartition(".")[0]
    assert await b.answer(asked["id"], SAMPLED) == 202  # relayed to A, whose exchange goes on (§34)
    _, final = await within(b.next_event(resumed))
    assert final["id"] == a.next_id and final["result"]["content"][0]["text"] == "sampled on A, answered through B"
    assert await within(b.events(resumed)) == []  # the stream ended: B's resumed response ends with it
    assert b.client.app[GATEWAY].runtime(b.session_id).followers == {}  # and B follows nothing any more

    again = await b.resume(priming)  # a finished stream replays to its end and closes, on any replica
    assert [m.get("method") or m["id"] for m in await within(b.events(again))] == ["sampling/createMessage", a.next_id]


async def test_a_position_evicted_on_the_writer_is_refused_the_same_on_every_replica(make_gateway, upstream,
                                                                                     redis_url, prefix) -> None:
    upstream.script["tools/call"] = two_rounds
    a, b = await replicas(make_gateway, redis_url, prefix, replay_buffer_events=2)
    post = await a.post("tools/call", {"name": "t", "arguments": {}})
    priming, _ = await within(a.next_event(post))
    first, asked_a = await within(a.next_event(post))
    _, asked_b = await within(a.next_event(post))
    assert await a.answer(asked_a["id"], SAMPLED) == 202 and await a.answer(asked_b["id"], SAMPLED) == 202
    await within(a.next_event(post))  # the second round's request evicted the first event (capacity 2)
    refusals = [await client.resume(priming) for client in (a, b)]
    assert [r.status for r in refusals] == [400, 400]
    bodies = [await r.json() for r in refusals]
    assert bodies[0] == bodies[1] and "Last-Event-ID" in bodies[0]["error"]["message"]
    kept = await b.resume(first)  # right after the evicted event: nothing is lost, so it resumes
    assert kept.status == 200
    _, second = await within(b.next_event(kept))
    assert second["id"] == asked_b["id"]
    kept.close()
    post.close()


async def test_a_resume_on_b_while_redis_is_down_is_store_unavailable(make_gateway, upstream, private_redis,
                                                                      prefix) -> None:
    upstream.script["tools/call"] = one_round
    a, b = await replicas(make_gateway, private_redis.url, prefix, store_timeout=0.5)
    post = await a.post("tools/call", {"name": "t", "arguments": {}})
    priming, _ = await within(a.next_event(post))
    post.close()
    private_redis.stop()
    refused = await b.resume(priming)
    assert refused.status == 503
    assert (await refused.json())["error"]["data"]["store"] == "unavailable"
    private_redis.start()  # back, but empty (it persists nothing): the gateway answers again, the session is gone
    assert (await b.resume(priming)).status == 404


async def test_the_in_memory_store_copies_nothing(legacy, upstream) -> None:
    upstream.script["tools/call"] = one_round
    await legacy.initialize(CAPS)
    post = await legacy.post("tools/call", {"name": "t", "arguments": {}})
    await legacy.next_event(post)
    _, asked = await legacy.next_event(post)
    runtime = legacy.client.app[GATEWAY].runtime(legacy.session_id)
    assert [s.mirror for s in runtime.streams.values()] == [None]
    assert await legacy.answer(asked["id"], SAMPLED) == 202
    assert (await legacy.events(post))[-1]["result"]["content"][0]["text"] == "sampled on A, answered through B"

