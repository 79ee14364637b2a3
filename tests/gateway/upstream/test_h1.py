"""The upstream hop's HTTP/1.1 pool (gateway.upstream.h1) against real servers on loopback: aiohttp for well-formed
HTTP, raw asyncio servers for the bytes aiohttp would never send."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web

from gateway.upstream.h1 import BrokenResponse, H1Pool, Unreachable
from tests.waiting import until


def pool_for(url: str, **kw: float) -> H1Pool:
    return H1Pool(url, connect_timeout=kw.pop("connect_timeout", 2.0), read_timeout=kw.pop("read_timeout", 5.0),
                  **kw)  # type: ignore[arg-type]


async def pool_serving(aiohttp_server, handle, server_kw: dict | None = None, **pool_kw: float) -> H1Pool:
    """A pool for an aiohttp server whose ``POST /mcp`` is ``handle``."""
    app = web.Application()
    app.router.add_post("/mcp", handle)
    server = await aiohttp_server(app, **(server_kw or {}))
    return pool_for(str(server.make_url("/mcp")), **pool_kw)


async def sse(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    return resp


@contextlib.asynccontextmanager
async def raw_server(reply: Callable[[asyncio.StreamReader, asyncio.StreamWriter], object]) -> AsyncIterator[str]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reply(reader, writer)  # type: ignore[misc]

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.close()


async def test_json_answers_reuse_one_connection(aiohttp_server) -> None:
    peers, bodies = [], []

    async def handle(request: web.Request) -> web.Response:
        peers.append(request.transport.get_extra_info("peername"))
        bodies.append((await request.read(), request.headers["X-Test"], request.path))
        return web.json_response({"ok": len(peers)}, headers={"X-Answer": "yes"})

    pool = await pool_serving(aiohttp_server, handle)
    for number in range(1, 6):
        async with await pool.post(b'{"n": 1}', {"X-Test": "v", "Content-Type": "application/json"}) as resp:
            assert (resp.status, resp.content_type, resp.headers["x-answer"]) == (200, "application/json", "yes")
            assert await resp.read() == f'{{"ok": {number}}}'.encode()
    assert bodies[0] == (b'{"n": 1}', "v", "/mcp")
    assert len(set(peers)) == 1 and pool.connections == 1
    await pool.close()


async def test_a_stream_is_read_as_it_arrives(aiohttp_server) -> None:
    second = asyncio.Event()

    async def handle(request: web.Request) -> web.StreamResponse:
        resp = await sse(request)
        await resp.write(b"data: one\n\n")
        await second.wait()
        await resp.write(b"data: two\n\n")
        await resp.write_eof()
        return resp

    pool = await pool_serving(aiohttp_server, handle)
    got = []
    async with await pool.post(b"{}", {}) as resp:
        assert resp.content_type == "text/event-stream"
        async for chunk in resp.chunks():
            got.append(chunk)
            second.set()  # the second event is only written after the first one was read here
    assert b"".join(got) == b"data: one\n\ndata: two\n\n"
    assert pool.connections == 1  # a chunked body that ended cleanly keeps its connection
    await pool.close()


async def test_a_body_delimited_by_the_close_is_read_and_not_reused() -> None:
    async def reply(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{\"a\": 1}")
        await writer.drain()
        writer.close()

    async with raw_server(reply) as url:
        pool = pool_for(url)
        async with await pool.post(b"{}", {}) as resp:
            assert await resp.read() == b'{"a": 1}'
        assert pool.connections == 0
        await pool.close()


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",  # closed three bytes into ten
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",  # closed inside a chunk
    b"NOT HTTP AT ALL\r\n\r\n",  # garbage
])
async def test_broken_and_malformed_answers_raise_broken_response(answer: bytes) -> None:
    async def reply(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(answer)
        await writer.drain()
        writer.close()

    async with raw_server(reply) as url:
        pool = pool_for(url)
        with pytest.raises(BrokenResponse):
            async with await pool.post(b"{}", {}) as resp:
                await resp.read()
        assert pool.connections == 0
        await pool.close()


async def test_refused_is_unreachable(unused_tcp_port: int) -> None:
    pool = pool_for(f"http://127.0.0.1:{unused_tcp_port}/mcp", limit=1)
    for _ in range(2):  # the failed attempt gave its slot back
        with pytest.raises(Unreachable, match="cannot connect"):
            await pool.post(b"{}", {})


async def test_a_silent_server_times_out_between_arrivals(aiohttp_server) -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        resp = await sse(request)
        await resp.write(b"data: first\n\n")
        await asyncio.sleep(10)  # sleep: silent from here on
        return resp

    pool = await pool_serving(aiohttp_server, handle, read_timeout=0.3)
    got = []
    with pytest.raises(TimeoutError):
        async with await pool.post(b"{}", {}) as resp:
            async for chunk in resp.chunks():
                got.append(chunk)
    assert got == [b"data: first\n\n"]
    await pool.close()


async def test_leaving_a_stream_early_closes_its_connection(aiohttp_server) -> None:
    disconnected = asyncio.Event()

    async def handle(request: web.Request) -> web.StreamResponse:
        resp = await sse(request)
        try:
            while True:
                await resp.write(b"data: tick\n\n")
                await asyncio.sleep(0.02)  # sleep: the stream's pace
        except (ConnectionResetError, asyncio.CancelledError):
            disconnected.set()
            raise

    pool = await pool_serving(aiohttp_server, handle)
    async with await pool.post(b"{}", {}) as resp:
        async for _chunk in resp.chunks():
            break
    await asyncio.wait_for(disconnected.wait(), 5)  # closing the response is the 2026 cancel
    assert pool.connections == 0
    await pool.close()


async def test_a_connection_the_server_closed_while_idle_is_not_reused(aiohttp_server) -> None:
    async def handle(request: web.Request) -> web.Response:
        return web.json_response({}, headers={"Connection": "keep-alive"})

    pool = await pool_serving(aiohttp_server, handle, {"keepalive_timeout": 0.1})
    for _ in range(2):
        async with await pool.post(b"{}", {}) as resp:
            assert await resp.read() == b"{}"
        await until(lambda: pool.connections == 0, "the server closes the idle connection")
    await pool.close()


async def test_idle_connections_past_keepalive_are_not_reused(aiohttp_server) -> None:
    peers = []

    async def handle(request: web.Request) -> web.Response:
        peers.append(request.transport.get_extra_info("peername"))
        return web.json_response({})

    pool = await pool_serving(aiohttp_server, handle, keepalive_seconds=0.0)
    for _ in range(3):
        async with await pool.post(b"{}", {}) as resp:
            await resp.read()
    assert len(set(peers)) == 3
    await pool.close()


async def test_the_connection_limit_queues_requests(aiohttp_server) -> None:
    active, most = 0, 0

    async def handle(request: web.Request) -> web.Response:
        nonlocal active, most
        active += 1
        most = max(most, active)
        await asyncio.sleep(0.05)  # sleep: each request takes a while, so that they overlap
        active -= 1
        return web.json_response({})

    pool = await pool_serving(aiohttp_server, handle, limit=2)

    async def one() -> bytes:
        async with await pool.post(b"{}", {}) as resp:
            return await resp.read()

    assert await asyncio.gather(*(one() for _ in range(6))) == [b"{}"] * 6
    assert most == 2
    await pool.close()


async def test_streams_have_their_own_limit_and_never_take_a_request_slot(aiohttp_server) -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        return await sse(request) if request.headers.get("X-Stream") else web.json_response({})

    pool = await pool_serving(aiohttp_server, handle, limit=1, stream_limit=1, connect_timeout=0.3)
    held = await pool.post(b"{}", {"X-Stream": "1"}, stream=True)  # a listen, left open
    for _ in range(2):  # the request limit's one slot is still there, and given back each time
        async with await pool.post(b"{}", {}) as resp:
            assert await resp.read() == b"{}"
    with pytest.raises(Unreachable, match="all 1 stream connections are in use"):
        await pool.post(b"{}", {"X-Stream": "1"}, stream=True)
    held.release()  # closed early (not read to its end): the connection goes, the stream slot comes back
    again = await pool.post(b"{}", {"X-Stream": "1"}, stream=True)
    again.release()
    await pool.close()


async def test_a_request_that_gets_no_connection_fails_within_the_connect_timeout(aiohttp_server) -> None:
    from gateway.upstream.client import UpstreamClient, UpstreamFailure
    from gateway.upstream.h1 import PoolBusy

    async def handle(request: web.Request) -> web.Response:
        await asyncio.sleep(0 if request.headers.get("X-Fast") else 10)  # sleep: the slow one never answers
        return web.json_response({})

    pool = await pool_serving(aiohttp_server, handle, limit=1, connect_timeout=0.2)
    slow = asyncio.ensure_future(pool.post(b"{}", {}))
    await until(lambda: any(conn.in_use for conn in pool._all), "the slow request holds the connection")
    started = asyncio.get_running_loop().time()
    with pytest.raises(PoolBusy, match=r"within 0.2 s: all 1 request connections are in use"):
        await pool.post(b"{}", {"X-Fast": "1"})
    assert asyncio.get_running_loop().time() - started < 1
    client = UpstreamClient("http://x/mcp", connect_timeout=0.2, read_timeout=1)
    client.pool = pool  # the client names the failure: the gateway's limit, not the upstream, is the problem
    with pytest.raises(UpstreamFailure) as caught:
        await client.post(b"{}", {"X-Fast": "1"})
    assert caught.value.error.data == {"upstream": "busy"}
    slow.cancel()
    await asyncio.gather(slow, return_exceptions=True)
    async with await pool.post(b"{}", {"X-Fast": "1"}) as resp:  # the waiters gave their places back
        assert await resp.read() == b"{}"
    await pool.close()


async def test_a_header_that_would_break_framing_is_refused_before_sending(aiohttp_server) -> None:
    seen = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.json_response({})

    pool = await pool_serving(aiohttp_server, handle, limit=1)
    for bad in ({"X-Evil": "a\r\nInjected: 1"}, {"X-Evil\n": "a"}, {"X: Y": "a"}):
        with pytest.raises(ValueError, match="framing"):
            await pool.post(b"{}", bad)
    async with await pool.post(b"{}", {"X-Fine": "ok"}) as resp:  # the limit's one slot is still free
        await resp.read()
    assert len(seen) == 1 and "Injected" not in seen[0]
    await pool.close()


async def test_cancelling_a_request_frees_its_slot_and_closes_the_connection(aiohttp_server) -> None:
    arrived = asyncio.Event()

    async def handle(request: web.Request) -> web.Response:
        if request.headers.get("X-Slow"):
            arrived.set()
            await asyncio.sleep(10)  # sleep: never answers
        return web.json_response({})

    pool = await pool_serving(aiohttp_server, handle, limit=1)
    slow = asyncio.ensure_future(pool.post(b"{}", {"X-Slow": "1"}))
    await arrived.wait()
    slow.cancel()
    with pytest.raises(asyncio.CancelledError):
        await slow
    assert pool.connections == 0
    async with await pool.post(b"{}", {}) as resp:
        assert await resp.read() == b"{}"
    await pool.close()


async def test_a_large_body_read_slowly_pauses_and_resumes_reading(aiohttp_server) -> None:
    blob = bytes(range(256)) * (4 * 4096)  # 4 MiB: past the high-water mark

    async def handle(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        for start in range(0, len(blob), 65536):
            await resp.write(blob[start:start + 65536])
        await resp.write_eof()
        return resp

    pool = await pool_serving(aiohttp_server, handle)
    got, paused = [], False
    async with await pool.post(b"{}", {}) as resp:
        await until(lambda: resp._conn.paused, "the server fills the buffer: reading pauses")
        paused = resp._conn.paused
        async for chunk in resp.chunks():
            got.append(chunk)
    assert paused and b"".join(got) == blob
    await pool.close()


def test_only_http_urls_are_accepted() -> None:
    with pytest.raises(ValueError, match="http"):
        pool_for("ftp://example/mcp")
    assert pool_for("https://example.test/a?b=1").port == 443


async def test_an_idle_connection_the_server_writes_on_is_dropped() -> None:
    async def reply(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()
        await asyncio.sleep(0.1)  # sleep: the client has released the connection when the stray bytes come
        writer.write(b"HTTP/1.1 200 OK\r\n")  # nobody asked: the connection is not to be trusted again
        await writer.drain()
        await asyncio.sleep(1)  # sleep: keeps the connection open

    async with raw_server(reply) as url:
        pool = pool_for(url)
        async with await pool.post(b"{}", {}) as resp:
            assert await resp.read() == b"{}"
        assert pool.connections == 1
        await until(lambda: pool.connections == 0, "the connection the server wrote on is dropped")
        assert pool.connections == 0
        await pool.close()


async def test_the_upstream_client_reports_a_framing_header_as_a_broken_call_and_sends_nothing() -> None:
    """``UpstreamClient.post`` maps the pool's refusal (a CR/LF in a header) to an upstream failure of kind
    ``stream_broken``; nothing reaches the upstream."""
    from gateway.upstream.client import UpstreamClient, UpstreamFailure

    seen: list[bytes] = []

    async def record(reader: asyncio.StreamReader, _w: asyncio.StreamWriter) -> None:
        seen.append(await reader.read(100))

    async with raw_server(record) as url:
        client = UpstreamClient(url, connect_timeout=2, read_timeout=2)
        with pytest.raises(UpstreamFailure) as caught:
            await client.post(b"{}", {"X-Note": "a\r\nInjected: 1"})
        await asyncio.sleep(0.05)  # sleep: a quiet window: nothing may reach the upstream
        await client.close()
    assert caught.value.error.data == {"upstream": "stream_broken"} and "framing" in caught.value.error.message
    assert seen == [] and client.pool.connections == 0


# --- interim responses, trailing bytes, bounds (an adversarial upstream) --------------------------------------
ANSWER = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Final: yes\r\nContent-Length: 8\r\n\r\n{"a": 1}'


def interim_then(head: bytes, answer: bytes = ANSWER):
    """A server that sends ``head`` (a 1xx) and, in a later packet, ``answer``; then waits for the next request
    on the same connection and answers it with its number."""
    served = []

    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(head)
        await writer.drain()
        await asyncio.sleep(0.05)  # sleep: separate packets: the 1xx is read alone
        writer.write(answer)
        await writer.drain()
        served.append(1)
        while True:
            with contextlib.suppress(asyncio.IncompleteReadError):
                await reader.readuntil(b"\r\n\r\n")
                await reader.readexactly(2)
                writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n{"n": %d}' % len(served))
                await writer.drain()
                served.append(1)
                continue
            return
    return reply


@pytest.mark.parametrize("head", [b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\nX-Final: no\r\n\r\n",
                                  b"HTTP/1.1 100 Continue\r\n\r\n",
                                  b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n"])
async def test_interim_responses_are_skipped_and_the_final_one_is_the_answer(head: bytes) -> None:
    async with raw_server(interim_then(head)) as url:
        pool = pool_for(url)
        async with await pool.post(b"{}", {}) as resp:
            assert (resp.status, resp.headers.get("x-final"), "link" in resp.headers) == (200, "yes", False)
            assert await resp.read() == b'{"a": 1}'
        async with await pool.post(b"{}", {}) as resp:  # the same connection, in step: the second answer
            assert await resp.read() == b'{"n": 1}'
        assert pool.connections == 1
        await pool.close()


async def test_a_101_is_a_broken_response_and_its_connection_is_closed() -> None:
    async with raw_server(interim_then(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade"
                                       b"\r\n\r\n")) as url:
        pool = pool_for(url)
        with pytest.raises(BrokenResponse, match="101"):
            await pool.post(b"{}", {})
        assert pool.connections == 0
        await pool.close()


@pytest.mark.parametrize("extra", [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", b"garbage"])
async def test_bytes_after_the_answer_in_the_same_packet_make_the_connection_not_reused(extra: bytes) -> None:
    async def reply(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(ANSWER + extra)
        await writer.drain()
        await asyncio.sleep(1)  # sleep: keeps the connection open

    async with raw_server(reply) as url:
        pool = pool_for(url)
        async with await pool.post(b"{}", {}) as resp:
            assert (resp.status, resp.headers["x-final"], await resp.read()) == (200, "yes", b'{"a": 1}')
        assert pool.connections == 0
        await pool.close()


async def test_bytes_after_the_answer_before_it_is_released_make_the_connection_not_reused() -> None:
    async def reply(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(ANSWER)
        await writer.drain()
        await asyncio.sleep(0.05)  # sleep: separate packets: the stray answer comes after the real one
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()
        await asyncio.sleep(1)  # sleep: keeps the connection open

    async with raw_server(reply) as url:
        pool = pool_for(url)
        async with await pool.post(b"{}", {}) as resp:
            assert await resp.read() == b'{"a": 1}'
            await until(lambda: resp._conn.closed, "the stray answer arrives while this response is held")
        assert pool.connections == 0
        await pool.close()


async def test_repeated_headers_keep_every_value() -> None:
    async def reply(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b'HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm="a", scope="x y"\r\n'
                     b'Content-Length: 0\r\nwww-authenticate: DPoP algs="ES256"\r\n\r\n')
        await writer.drain()
        await asyncio.sleep(1)  # sleep: keeps the connection open

    async with raw_server(reply) as url:
        pool = pool_for(url)
        async with await pool.post(b"{}", {}) as resp:
            assert resp.getall("www-authenticate") == ('Bearer realm="a", scope="x y"', 'DPoP algs="ES256"')
            assert resp.headers["www-authenticate"] == 'Bearer realm="a", scope="x y", DPoP algs="ES256"'
            assert resp.getall("content-length") == ("0",) and resp.getall("x-none") == ()
        await pool.close()


@pytest.mark.parametrize("url,host", [("http://user:secret@127.0.0.1:{port}/mcp", "127.0.0.1:{port}"),
                                      ("http://user@localhost:{port}/mcp", "localhost:{port}")])
async def test_the_host_header_never_carries_userinfo(url: str, host: str) -> None:
    seen: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = pool_for(url.format(port=port))
    async with await pool.post(b"{}", {}) as resp:
        await resp.read()
    await pool.close()
    server.close()
    assert f"\r\nHost: {host.format(port=port)}\r\n".encode() in seen[0] and b"secret" not in seen[0]
    assert b"user" not in seen[0]


def test_an_ipv6_host_header_is_bracketed() -> None:
    assert b"\r\nHost: [::1]:8080\r\n" in pool_for("http://u:p@[::1]:8080/mcp").head(0, {})
    assert b"\r\nHost: [::1]\r\n" in pool_for("http://[::1]/mcp").head(0, {})


async def big_answer(head: bytes, size: int, chunk: int = 65536):
    async def reply(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(head)
        with contextlib.suppress(ConnectionError):
            for _ in range(size // chunk):
                writer.write(b" " * chunk)
                await writer.drain()
        writer.close()
    return reply


@pytest.mark.parametrize("head", [b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n",  # until close
                                  b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4000000\r\n"])
async def test_a_body_over_the_bound_fails_once_that_much_is_buffered_and_is_not_pooled(head: bytes) -> None:
    from gateway.upstream.h1 import TooLarge

    async with raw_server(await big_answer(head, 8 << 20)) as url:
        pool = pool_for(url, max_body_bytes=1 << 20)
        async with await pool.post(b"{}", {}) as resp:
            with pytest.raises(TooLarge, match="1048576"):
                await resp.read()
            assert resp._conn.received <= (1 << 20) + (1 << 18)  # stopped at the bound (one read past at most)
        assert pool.connections == 0
        await pool.close()


async def test_a_declared_length_over_the_bound_fails_before_the_body() -> None:
    from gateway.upstream.h1 import TooLarge

    async with raw_server(await big_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 41943040\r\n\r\n", 0)) as url:
        pool = pool_for(url, max_body_bytes=1 << 20)
        with pytest.raises(TooLarge):
            await pool.post(b"{}", {})
        assert pool.connections == 0
        await pool.close()


async def test_an_event_stream_is_not_bounded_by_the_body_bound() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
    async with raw_server(await big_answer(head, 2 << 20)) as url:
        pool = pool_for(url, max_body_bytes=1 << 20)
        async with await pool.post(b"{}", {}) as resp:
            assert sum([len(chunk) async for chunk in resp.chunks()]) == 2 << 20
        await pool.close()


@pytest.mark.parametrize("head", [b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (100 << 10) + b"\r\nContent-Length: 0"
                                  b"\r\n\r\n",  # one header, received whole or in parts
                                  b"HTTP/1.1 200 OK\r\n" + b"X-Many: 0123456789\r\n" * 5000 + b"\r\n",
                                  b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" * 5000])  # endless 1xx
async def test_a_head_over_the_bound_fails(head: bytes) -> None:
    from gateway.upstream.h1 import TooLarge

    async with raw_server(await big_answer(head, 0)) as url:
        pool = pool_for(url, max_head_bytes=64 << 10)
        with pytest.raises(TooLarge, match="head"):
            await pool.post(b"{}", {})
        assert pool.connections == 0
        await pool.close()
