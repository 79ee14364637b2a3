"""The shared pipelined Redis connection (``gateway.session.redis_wire``) against a real Redis: replies reach
their own callers however many tasks share the socket, transactions and scripts, every failure is
``StoreUnavailable``, and the connection is made again after a timeout or a Redis restart.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator

import pytest

from gateway.session.redis_wire import RedisWire, Script, Target
from gateway.session.store import StoreUnavailable
from tests.gateway.session.test_redis_store import private_redis, redis_url  # noqa: F401  (fixtures)
from tests.waiting import until

pytest.importorskip("hiredis")


@pytest.fixture
async def wire(redis_url) -> AsyncIterator[RedisWire]:  # noqa: F811
    conn = RedisWire(redis_url, timeout_seconds=2)
    yield conn
    await conn.close()


@pytest.fixture
def key() -> str:
    return f"test-wire-{secrets.token_hex(6)}"


def test_urls_parse_as_redis_py_reads_them() -> None:
    assert Target.from_url("redis://127.0.0.1:6390/3") == Target(port=6390, db=3)
    assert Target.from_url("redis://u:p%40ss@db.example:7000/0?db=2") == Target(
        host="db.example", port=7000, db=2, username="u", password="p@ss")
    assert Target.from_url("rediss://:secret@h") == Target(host="h", password="secret", tls=True)
    assert Target.from_url("unix:///run/redis.sock?db=1") == Target(path="/run/redis.sock", db=1)
    assert Target(password="x").handshake() == [("AUTH", "x")]
    assert Target(username="u", password="x", db=4).handshake() == [("AUTH", "u", "x"), ("SELECT", 4)]
    with pytest.raises(ValueError, match="not a Redis URL"):
        Target.from_url("http://127.0.0.1:6379/0")
    with pytest.raises(ValueError, match="not a Redis URL"):
        Target.from_url("redis://127.0.0.1:6379/zero")


async def test_many_tasks_share_one_socket_and_each_gets_its_own_reply(wire, key) -> None:
    async def one(i: int) -> bytes:
        await wire.call("SET", f"{key}:{i}", f"v{i}", "PX", 60_000)
        return await wire.call("GET", f"{key}:{i}")

    replies = await asyncio.gather(*(one(i) for i in range(200)))
    assert replies == [f"v{i}".encode() for i in range(200)]
    assert await wire.call("DEL", *(f"{key}:{i}" for i in range(200))) == 200


async def test_commands_issued_while_others_wait_leave_in_one_write(wire, key) -> None:
    """Alone on the connection a command is written at once; those issued while its reply is awaited are held to
    the loop's next turn and leave together, in order (one send for many, at concurrency)."""
    await wire.call("PING")  # connected
    conn = wire._conn
    assert conn is not None and conn.transport is not None
    writes: list[bytes] = []
    write = conn.transport.write

    def counted(data: bytes) -> None:
        writes.append(bytes(data))
        write(data)

    conn.transport.write = counted  # type: ignore[method-assign]
    replies = await asyncio.gather(wire.call("SET", key, "1", "PX", 60_000), wire.call("INCR", key),
                                   wire.call("INCR", key), wire.call("GET", key))
    assert replies == [b"OK", 2, 3, b"3"]
    assert len(writes) == 2 and writes[1].count(b"INCR") == 2 and b"GET" in writes[1]
    writes.clear()
    assert await wire.call("GET", key) == b"3"  # alone again: written at once, no turn waited
    assert len(writes) == 1
    await wire.call("DEL", key)


async def test_a_transaction_is_atomic_and_in_one_piece(wire, key) -> None:
    async def block(i: int) -> list[object]:
        return await wire.transaction([("INCR", key), ("INCR", key), ("PEXPIRE", key, 60_000)])

    results = await asyncio.gather(*(block(i) for i in range(50)))
    # No other task's INCR fell between a block's two: each block saw two consecutive values, odd then even.
    assert sorted(first for first, _second, _ttl in results) == list(range(1, 100, 2))
    assert all(second == first + 1 for first, second, _ttl in results)
    await wire.call("DEL", key)


async def test_an_error_reply_is_store_unavailable_and_the_socket_stays_in_step(wire, key) -> None:
    await wire.call("SET", key, "text", "PX", 60_000)
    with pytest.raises(StoreUnavailable, match="WRONGTYPE"):
        await wire.call("LPUSH", key, "x")
    with pytest.raises(StoreUnavailable, match=r"EXECABORT|wrong number"):
        await wire.transaction([("GET", key), ("SET", key)])
    assert await wire.pipeline([("GET", key), ("EXISTS", key)]) == [b"text", 1]
    await wire.call("DEL", key)


async def test_a_script_unknown_to_redis_is_sent_once_in_full(wire, key) -> None:
    script = Script(f"return {{ARGV[1], '{secrets.token_hex(8)}'}}")  # a text Redis never saw
    first = await wire.script(script, ["a"])
    assert first[0] == b"a"
    assert await wire.call("SCRIPT", "EXISTS", script.sha) == [1]  # EVAL made it known for EVALSHA
    assert await wire.script(script, ["b"]) == [b"b", first[1]]
    with pytest.raises(StoreUnavailable):
        await wire.script(Script("return redis.call('NOPE')"), [])


async def test_the_database_of_the_url_is_the_one_used(redis_url, key) -> None:  # noqa: F811
    base = redis_url.rsplit("/", 1)[0]
    one, zero = RedisWire(f"{base}/1", timeout_seconds=2), RedisWire(f"{base}/0", timeout_seconds=2)
    try:
        await one.call("SET", key, "in-1", "PX", 60_000)
        assert await zero.call("GET", key) is None
        assert await one.call("GET", key) == b"in-1"
    finally:
        await one.call("DEL", key)
        await one.close()
        await zero.close()


async def test_refused_credentials_are_store_unavailable(redis_url) -> None:  # noqa: F811
    host_port = redis_url.split("//", 1)[1].rsplit("/", 1)[0]
    wire = RedisWire(f"redis://:wrong-password@{host_port}/0", timeout_seconds=2)
    with pytest.raises(StoreUnavailable, match=r"AUTH|password|WRONGPASS"):
        await wire.call("PING")
    await wire.close()


async def silent_server() -> tuple[asyncio.Server, int, list[asyncio.StreamWriter]]:
    """A loopback server that accepts and never answers: a Redis that stopped responding."""
    held: list[asyncio.StreamWriter] = []

    async def accept(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], held


async def test_no_reply_in_time_fails_every_waiter_and_the_next_call_connects_again() -> None:
    server, port, held = await silent_server()
    wire = RedisWire(f"redis://127.0.0.1:{port}/0", timeout_seconds=0.3)
    try:
        results = await asyncio.gather(*(wire.call("PING") for _ in range(5)), return_exceptions=True)
        assert all(isinstance(r, StoreUnavailable) and "no reply within" in str(r) for r in results)
        with pytest.raises(StoreUnavailable):
            await wire.call("PING")
        assert len(held) == 2  # the timed-out connection was dropped, not reused out of step
    finally:
        await wire.close()
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_commands_one_at_a_time_arm_no_timer_each(wire, monkeypatch) -> None:
    """The reply watchdog stays armed while the connection is busy now and then: a command does not arm and
    cancel a timer of its own (two timer operations per store round trip, at one request at a time)."""
    await wire.call("PING")  # connected, and the watchdog armed
    loop = asyncio.get_running_loop()
    armed: list[float] = []
    real_call_at = loop.call_at

    def counting_call_at(when: float, callback, *args):  # type: ignore[no-untyped-def]
        armed.append(when)
        return real_call_at(when, callback, *args)

    monkeypatch.setattr(loop, "call_at", counting_call_at)
    for _ in range(50):
        assert await wire.call("PING") == b"PONG"
    assert armed == []


async def test_a_command_after_an_idle_spell_still_times_out_on_its_own_deadline(redis_url, key) -> None:  # noqa: F811
    """The watchdog armed for an earlier command fires at that command's deadline, finds a later one waiting
    and waits for its deadline: the later command is failed when its own time is up, not before, not never."""
    wire = RedisWire(redis_url, timeout_seconds=0.5)
    loop = asyncio.get_running_loop()
    try:
        assert await wire.call("PING") == b"PONG"  # its watchdog fires at +0.5 s
        await asyncio.sleep(0.3)  # sleep: an idle spell, part of the PING's watchdog time, passes
        started = loop.time()
        with pytest.raises(StoreUnavailable, match="no reply within"):
            await wire.call("BLPOP", f"{key}:never", 2)  # Redis holds its reply for 2 s
        waited = loop.time() - started
        assert 0.45 <= waited < 1.5, waited
    finally:
        await wire.close()


async def test_a_cancelled_caller_leaves_the_replies_in_step(wire, key) -> None:
    await wire.call("SET", key, "kept", "PX", 60_000)
    slow = asyncio.ensure_future(wire.call("BLPOP", f"{key}:never", 0.3))  # blocks Redis's reply to it

    def sent() -> bool:  # written on the connection, its reply awaited
        conn = wire._conn
        return conn is not None and bool(conn._waiting) and conn._unsent is None
    await until(sent, "the BLPOP is sent")
    slow.cancel()
    assert await wire.call("GET", key) == b"kept"  # not the cancelled BLPOP's reply
    await wire.call("DEL", key)


async def test_unreachable_then_restarted_redis(private_redis) -> None:  # noqa: F811
    wire = RedisWire(private_redis.url, timeout_seconds=0.5)
    try:
        assert await wire.call("PING") == b"PONG"
        private_redis.stop()
        with pytest.raises(StoreUnavailable):
            await wire.call("PING")
        private_redis.start()
        assert await wire.call("PING") == b"PONG"  # a new connection, made by the call itself
    finally:
        await wire.close()


async def _next(messages: AsyncIterator[bytes]) -> bytes:
    return await asyncio.wait_for(anext(messages), 2)


async def test_a_subscriber_gets_every_message_of_its_channels_in_order(wire, key) -> None:
    subscriber = await wire.subscribe([f"{key}:a", f"{key}:b"])  # returns once Redis confirmed both
    try:
        messages = subscriber.messages()
        for n in range(50):
            assert await wire.call("PUBLISH", f"{key}:a" if n % 2 else f"{key}:b", f"m{n}") == 1
        await wire.call("PUBLISH", f"{key}:other", "not subscribed")
        assert [await _next(messages) for _ in range(50)] == [f"m{n}".encode() for n in range(50)]
        assert await wire.call("PUBSUB", "NUMSUB", f"{key}:a") == [f"{key}:a".encode(), 1]
    finally:
        subscriber.close()
    assert [data async for data in messages] == []  # closed: the messages end, nothing raised

    async def unsubscribed() -> bool:
        return (await wire.call("PUBSUB", "NUMSUB", f"{key}:a"))[1] == 0
    await until(unsubscribed, "the closed subscriber's connection gone from Redis")


async def client_id(wire: RedisWire, name: str) -> int | None:
    """The id of the connection named ``name`` in Redis's CLIENT LIST, if there is one."""
    for line in (await wire.call("CLIENT", "LIST", "TYPE", "pubsub")).decode().splitlines():
        fields = dict(field.split("=", 1) for field in line.split(" ") if "=" in field)
        if fields.get("name") == name:
            return int(fields["id"])
    return None


async def test_a_subscriber_killed_by_redis_is_store_unavailable(wire, key) -> None:
    subscriber = await wire.subscribe([key], name=key)
    messages = subscriber.messages()
    await wire.call("PUBLISH", key, "before")
    assert await _next(messages) == b"before"
    assert await wire.call("CLIENT", "KILL", "ID", await client_id(wire, key)) == 1
    with pytest.raises(StoreUnavailable, match="connection"):
        await _next(messages)
    subscriber.close()


async def test_a_subscriber_with_refused_credentials_or_database_is_store_unavailable(redis_url) -> None:  # noqa: F811
    host_port = redis_url.split("//", 1)[1].rsplit("/", 1)[0]
    for url in (f"redis://:wrong-password@{host_port}/0", f"redis://{host_port}/100000"):
        wire = RedisWire(url, timeout_seconds=2)
        with pytest.raises(StoreUnavailable, match=r"AUTH|password|WRONGPASS|DB index"):
            await wire.subscribe(["any"])
        await wire.close()


async def test_a_subscriber_of_a_redis_that_never_confirms_times_out_and_hangs_up() -> None:
    readers: list[asyncio.StreamReader] = []

    async def accept(reader: asyncio.StreamReader, _writer: asyncio.StreamWriter) -> None:
        readers.append(reader)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    wire = RedisWire(f"redis://127.0.0.1:{server.sockets[0].getsockname()[1]}/0", timeout_seconds=0.3)
    try:
        with pytest.raises(StoreUnavailable, match="SUBSCRIBE"):
            await wire.subscribe(["any"])
        sent = await asyncio.wait_for(readers[0].read(), 2)  # to the end: the subscriber closed its side
        assert b"SUBSCRIBE" in sent
    finally:
        server.close()
        await server.wait_closed()


async def test_a_subscriber_reading_what_is_not_resp_is_store_unavailable() -> None:
    """A server on the Redis port that is not Redis: its answer cannot be read, the subscription fails at once
    and the connection is closed (not read on out of step)."""
    hung_up: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sent = await reader.read(1)
        writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        await writer.drain()
        hung_up.set_result(sent + await reader.read())  # read() returns once the subscriber closed its side

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    wire = RedisWire(f"redis://127.0.0.1:{server.sockets[0].getsockname()[1]}/0", timeout_seconds=2)
    try:
        with pytest.raises(StoreUnavailable, match="unreadable reply"):
            await wire.subscribe(["any"])
        assert b"SUBSCRIBE" in await asyncio.wait_for(hung_up, 2)
    finally:
        server.close()
        await server.wait_closed()
