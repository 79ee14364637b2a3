"""What only the Redis store does (the contract every backend keeps is ``test_store_contract``): changes raced by
other replicas, key TTLs, expiry by Redis itself, StoreUnavailable and recovery, and a gateway on Redis end to
end (503 while it is down). Its fixtures and records are shared by the other Redis tests.

Redis: ``REDIS_URL`` if set, else ``redis://127.0.0.1:6379`` if it answers, else a private ``redis-server`` on a
free port in the test's temporary directory, else the Redis tests skip. Each test writes under its own random key
prefix and deletes those keys at the end (never FLUSHDB).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

redis = pytest.importorskip("redis")
from redis.asyncio import Redis  # noqa: E402

from adapters.jsonwire import dumps  # noqa: E402
from adapters.records import PendingRound, SessionRecord  # noqa: E402
from gateway.http.app import GATEWAY  # noqa: E402
from gateway.session.redis_store import RedisStore, wall_ms  # noqa: E402
from gateway.session.store import StoreUnavailable  # noqa: E402
from tests.gateway.conftest import Legacy  # noqa: E402
from tests.gateway.http.test_bridge_shell import SAMPLED, two_rounds  # noqa: E402
from tests.waiting import until, until_sync  # noqa: E402

NOW = 1_800_000_000_000  # the contract's clock (ms): the Redis store prunes its counts against it
IDLE = 3600.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PrivateRedis:
    """A ``redis-server`` of this test only, on one port across stops and starts, persisting nothing."""

    def __init__(self, directory: Path) -> None:
        self.directory, self.port, self.process = directory, free_port(), None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                         "--save", "", "--appendonly", "no", "--dir", str(self.directory)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        def up() -> bool:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}")
            return answers(self.url)
        until_sync(up, "redis-server answers")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def answers(url: str) -> bool:
    try:
        import redis as sync_redis
        return bool(sync_redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5).ping())
    except Exception:
        return False


@pytest.fixture
def private_redis(tmp_path) -> Iterator[PrivateRedis]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(tmp_path) -> Iterator[str]:
    url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
    if answers(url):
        yield url
        return
    if shutil.which("redis-server") is None:
        pytest.skip(f"no Redis at {url} and redis-server is not installed")
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def prefix(redis_url) -> Iterator[str]:
    """A key prefix of this test alone; its keys are deleted at the end."""
    import redis as sync_redis

    name = f"test-{secrets.token_hex(6)}:"
    yield name
    client = sync_redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{name}*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


def record(session_id: str, principal: str = "alice", seen: int = NOW) -> SessionRecord:
    return SessionRecord(session_id, principal, "2025-11-25", {"sampling": {}, "roots": {"listChanged": True}},
                         {"name": "client \u00e9", "version": "1"}, NOW - 10_000, seen)


def pending(bridge_id: str, session_id: str) -> PendingRound:
    return PendingRound(bridge_id, session_id, 7, "tools/call", {"name": "t", "arguments": {"x": [1, 2]}})


def _set(**fields: Any) -> Any:
    def change(stored: SessionRecord) -> None:
        for name, value in fields.items():
            setattr(stored, name, value)
    return change


# --- Redis only (the contract every backend keeps is test_store_contract) ---------------------------------------
async def test_a_change_raced_every_time_gives_up_as_the_store_failing(redis_url, prefix) -> None:
    """Each retry means another change was written meanwhile: a session changed faster than it can be read is
    not retried for ever, but fails as the store does (HTTP 503 to the client), after CHANGE_TRIES reads."""
    import redis

    from gateway.session.redis_store import CHANGE_TRIES

    store = RedisStore(redis_url, idle_seconds=IDLE, prefix=prefix, clock=Clock())
    other = redis.Redis.from_url(redis_url)
    try:
        await store.put_session(record("s1"))
        tries: list[int] = []

        def always_raced(stored: SessionRecord) -> None:
            tries.append(1)
            theirs = record("s1")
            theirs.log_level = f"level-{len(tries)}"  # a new text each time
            other.hset(f"{prefix}s:s1", "r", dumps(theirs.to_dict()))
            stored.log_level = "debug"
        with pytest.raises(StoreUnavailable, match=f"{CHANGE_TRIES} times"):
            await store.change_session("s1", always_raced)
        assert len(tries) == CHANGE_TRIES
        assert (await store.get_session("s1")).log_level == f"level-{CHANGE_TRIES}"  # theirs, never overwritten
    finally:
        other.close()
        await store.close()


async def test_a_change_raced_by_another_replicas_is_made_again_on_its_record(redis_url, prefix) -> None:
    """Two replicas change one session at once (a setLevel here, a subscribe there): each is written only over
    the text it read, and the one that finds it changed is made again on the newer record, so neither is lost."""
    import redis

    here, there = (RedisStore(redis_url, idle_seconds=IDLE, prefix=prefix, clock=Clock()) for _ in range(2))
    other = redis.Redis.from_url(redis_url)
    try:
        await here.put_session(record("s1"))
        seen: list[list[str]] = []

        def level_after_theirs(stored: SessionRecord) -> None:
            seen.append(list(stored.subscriptions))
            if len(seen) == 1:  # their change lands between this read and this write (raw, as their script would)
                theirs = record("s1")
                theirs.subscriptions = ["file:///a"]
                other.hset(f"{prefix}s:s1", "r", dumps(theirs.to_dict()))
            stored.log_level = "debug"
        changed = await here.change_session("s1", level_after_theirs)
        assert seen == [[], ["file:///a"]]  # made again on their record
        stored = await there.get_session("s1")
        assert stored == changed and (stored.log_level, stored.subscriptions) == ("debug", ["file:///a"])

        def deleted_meanwhile(stored: SessionRecord) -> None:
            other.delete(f"{prefix}s:s1")  # their DELETE lands between this read and this write
            stored.log_level = "error"
        assert await here.change_session("s1", deleted_meanwhile) is None
        assert await there.get_session("s1") is None
    finally:
        other.close()
        for store in (here, there):
            await store.close()


async def ttl_ms(client: Redis, *keys: str) -> list[int]:
    return [await client.pttl(key) for key in keys]


async def test_every_key_expires_and_a_touch_renews_it(redis_url, prefix) -> None:
    store = RedisStore(redis_url, idle_seconds=IDLE, prefix=prefix, clock=Clock())
    try:
        await store.put_session(record("s1"))
        await store.put_round(pending("b1", "s1"))
        keys = [store.key("s:", "s1"), store.key("seen"), store.key("p:", "alice"), store.key("r:", "b1"),
                store.key("rs:", "s1"), store.key("u")]  # u: alice is not verified (max_unverified_sessions)
        assert sorted(k.decode() for k in await store.redis.keys(f"{prefix}*")) == sorted(keys)
        assert all(0 < ttl <= IDLE * 1000 for ttl in await ttl_ms(store.redis, *keys))
        for key in keys:
            await store.redis.pexpire(key, 1000)
        await store.touch_session("s1", NOW + 1)
        assert all(1000 < ttl <= IDLE * 1000 for ttl in await ttl_ms(store.redis, *keys))
        for key in keys:  # a busy session passed as ``keep`` is renewed by the sweep as well
            await store.redis.pexpire(key, 1000)
        assert await store.expire_sessions(NOW - 10, keep={"s1"}) == []
        renewed = dict(zip(keys, await ttl_ms(store.redis, *keys), strict=True))
        assert all(renewed[store.key(k, n)] > 1000 for k, n in [("s:", "s1"), ("r:", "b1"), ("rs:", "s1")])
        await store.put_round(pending("b2", "s1"), ("A", 5))  # a leased round: the sweep's index too
        assert all(0 < ttl <= IDLE * 1000 for ttl in await ttl_ms(store.redis, store.key("rl"), store.key("ol:b2")))
    finally:
        await store.close()


async def test_counts_stay_right_when_redis_expires_a_session_itself(redis_url, prefix) -> None:
    """One session goes idle and Redis drops its keys (no sweep); the other is kept alive by touches."""
    store = RedisStore(redis_url, idle_seconds=1.5, prefix=prefix)  # the wall clock, as Redis's TTLs
    try:
        await store.put_session(record("idle", seen=wall_ms()))
        await store.put_session(record("live", seen=wall_ms()))
        assert await store.count_sessions("alice") == (2, 2)

        async def idle_gone() -> bool:
            await store.touch_session("live", wall_ms())
            return not await store.redis.exists(store.key("s:", "idle"))
        await until(idle_gone)
        assert await store.count_sessions("alice") == (1, 1)
        assert await store.get_session("idle") is None and set(await store.last_seen(["idle", "live"])) == {"live"}
    finally:
        await store.close()


async def every_method_fails(store: RedisStore) -> None:
    calls = [store.get_session("s"), store.put_session(record("s")), store.touch_session("s", NOW),
             store.change_session("s", _set(log_level="debug")),
             store.delete_session("s"), store.count_sessions("alice"), store.last_seen(["s"]),
             store.expire_sessions(NOW), store.put_round(pending("b", "s")), store.get_round("b"),
             store.end_round("b", "A"), store.rounds_of("s")]
    for call in calls:
        with pytest.raises(StoreUnavailable, match="session store"):
            await call


async def test_unreachable_redis_is_store_unavailable() -> None:
    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", idle_seconds=IDLE, timeout_seconds=0.5)
    try:
        await every_method_fails(store)
    finally:
        await store.close()


async def test_store_unavailable_while_redis_is_down_then_recovers(private_redis) -> None:
    store = RedisStore(private_redis.url, idle_seconds=IDLE, prefix="t:", timeout_seconds=0.5, clock=Clock())
    try:
        await store.put_session(record("s1"))
        private_redis.stop()
        await every_method_fails(store)
        private_redis.start()  # the same port, nothing persisted
        assert await store.get_session("s1") is None
        await store.put_session(record("s1"))
        assert (await store.get_session("s1")).session_id == "s1" and await store.count_sessions("alice") == (1, 1)
    finally:
        await store.close()


def test_memory_usage_of_an_idle_session_is_bounded(redis_url) -> None:
    """MEMORY USAGE of a typical idle session's own key (the record) stays small; the number is in the module
    docstring of gateway.session.redis_store."""
    import redis as sync_redis

    client = sync_redis.Redis.from_url(redis_url)
    key = f"test-{secrets.token_hex(6)}:s:x"
    try:
        from adapters.jsonwire import dumps
        client.hset(key, mapping={"r": dumps(record("x").to_dict()), "p": "alice"})
        assert client.memory_usage(key) < 2048
    finally:
        client.delete(key)


# --- a gateway on Redis -------------------------------------------------------------------------------------------
async def test_a_gateway_on_redis(make_gateway, upstream, redis_url, prefix) -> None:
    upstream.script["tools/list"] = lambda body, req: {"resultType": "complete", "tools": []}
    upstream.script["tools/call"] = two_rounds
    legacy = Legacy(await make_gateway(store={"url": redis_url, "prefix": prefix}))
    assert isinstance(legacy.client.app[GATEWAY].store, RedisStore)
    await legacy.initialize()
    assert (await legacy.call("tools/list", {}))["result"]["tools"] == []
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {}})
    await legacy.next_event(resp)  # priming
    _, first = await legacy.next_event(resp)
    _, second = await legacy.next_event(resp)
    client = Redis.from_url(redis_url)
    try:
        assert await client.scard(f"{prefix}rs:{legacy.session_id}") == 1  # the round waits in Redis
        for message in (first, second):
            assert await legacy.answer(message["id"], SAMPLED) == 202
        _, third = await legacy.next_event(resp)
        assert await legacy.answer(third["id"], SAMPLED) == 202
        _, final = await legacy.next_event(resp)
        assert final["result"]["content"][0]["text"] == "bridged"
        stored = await client.hget(f"{prefix}s:{legacy.session_id}", "r")
        assert stored is not None and f'"session_id":"{legacy.session_id}"'.encode() in stored
        assert 0 < await client.pttl(f"{prefix}s:{legacy.session_id}") <= 3600 * 1000
    finally:
        await client.aclose()


async def test_redis_down_is_a_503_and_the_gateway_serves_again_once_it_is_back(make_gateway, upstream,
                                                                                 private_redis) -> None:
    upstream.script["tools/list"] = lambda body, req: {"resultType": "complete", "tools": []}
    legacy = Legacy(await make_gateway(store={"url": private_redis.url, "timeout_seconds": 0.5}))
    await legacy.initialize()
    private_redis.stop()
    resp = await legacy.post("tools/list", {})
    assert resp.status == 503
    body = await resp.json()
    assert body["id"] == legacy.next_id and body["error"]["code"] == -32603
    assert body["error"]["data"] == {"store": "unavailable"}
    fresh = Legacy(legacy.client)
    resp = await fresh.post("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                           "clientInfo": {"name": "raw", "version": "1"}})
    assert resp.status == 503 and (await resp.json())["id"] == 1
    private_redis.start()  # nothing persisted: the old session is gone, a new one works
    assert (await legacy.post("tools/list", {})).status == 404
    await fresh.initialize()
    assert (await fresh.call("tools/list", {}))["result"]["tools"] == []
