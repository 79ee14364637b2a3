"""Flooding and non-reading clients on the WebSocket and HTTP+SSE doors of a real ``serve`` process (issue #38,
defect 1): the gateway's memory stays under :data:`RSS_BOUND_MB` over its baseline, a client that does not read
is cut off (WebSocket close 1008, SSE stream ended), and once a client has left its upstream requests stop
within :data:`QUIET_SECONDS`.

Before the doors' flow control one socket sending ``tools/list`` for 10 s grew the gateway by 950 MB and its
requests went on reaching the upstream for 50 s after it left; a client that never read grew it without end.
The gateway's RSS is read from ``/proc/PID/status`` every 50 ms; the upstream (faulty_upstream.py) counts the
requests it receives.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.faults import procs
from tests.faults.procs import Proc
from tests.waiting import until

RUN_SECONDS = 5.0  # each client's flood
# What the gateway (about 75 MB idle) may grow by during one run. What the doors hold by design at most: the
# answers of door_max_in_flight (32) messages, 256 KiB each, a few copies of each at once (the hop's body, its
# parse, the frame), plus door_max_queued_bytes (4 MiB) waiting and one frame in the transport: about 40 MB. The
# runs grow it by 2-4 MB (floods) and 18-25 MB (non-reading clients); 100 MB leaves room for the allocator and
# still fails the doors without their outbox bound (+655 MB on /ws, +262 MB on /sse in 5 s).
RSS_BOUND_MB = 100
QUIET_SECONDS = 2.0  # after a client left, its requests must have stopped by then
CUT_OFF_SECONDS = 10.0  # a client that stopped reading, reading again: its connection has ended by then
DOOR_IN_FLIGHT = 32  # door_max_in_flight's default: the requests that may still be on their way when it leaves
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "flood", "version": "1"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def tools_list(ident: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/list"}


def big_call(ident: int) -> dict[str, Any]:
    """A call whose answer is faulty_upstream.BIG_BYTES (256 KiB)."""
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call",
            "params": {"name": "big", "arguments": {"nonce": str(ident)}}}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


class RssPeak:
    """The gateway's largest RSS while the ``async with`` block runs, over its RSS at the start."""

    def __init__(self, pid: int) -> None:
        self.pid, self.baseline, self.peak = pid, rss_mb(pid), 0.0
        self.task: asyncio.Task[None] | None = None

    async def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, rss_mb(self.pid))
            await asyncio.sleep(0.05)  # sleep: the sampling's pace

    async def __aenter__(self) -> RssPeak:
        self.task = asyncio.get_running_loop().create_task(self._sample())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)

    @property
    def growth(self) -> float:
        return self.peak - self.baseline


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[tuple[Proc, Proc]]:
    upstream = procs.faulty_upstream(tmp_path)
    gateway = procs.gateway(tmp_path, upstream.url)
    try:
        await asyncio.gather(upstream.listening(), gateway.listening())
        yield upstream, gateway
    finally:
        gateway.stop()
        upstream.stop()


async def upstream_calls(upstream: Proc) -> int:
    """The ``tools/list`` and ``tools/call`` requests the upstream received so far."""
    async with aiohttp.ClientSession() as http, http.post(upstream.url, json={
            "jsonrpc": "2.0", "id": 1, "method": "faults/stats"}) as resp:
        counts = (await resp.json())["result"]
    return int(counts.get("tools/list", 0) + counts.get("tools/call", 0))


async def assert_quiet_after_leaving(upstream: Proc, before_leaving: int) -> None:
    """What was on its way when the client left may still arrive (at most the door's messages in flight);
    nothing after :data:`QUIET_SECONDS`."""
    await asyncio.sleep(QUIET_SECONDS)  # sleep: what was on its way arrives (no event: it may be nothing)
    settled = await upstream_calls(upstream)
    await asyncio.sleep(QUIET_SECONDS)  # sleep: a quiet window: nothing more may arrive
    assert await upstream_calls(upstream) == settled, "the upstream still gets requests for a client that left"
    assert settled - before_leaving <= DOOR_IN_FLIGHT, (before_leaving, settled)


def report(name: str, peak: RssPeak, **numbers: Any) -> None:
    print(f"\n{name}: baseline {peak.baseline:.0f} MB, peak {peak.peak:.0f} MB (+{peak.growth:.0f}), {numbers}")


def vanish(ws: aiohttp.ClientWebSocketResponse) -> None:
    """The client is gone at once (its process ended), frames of its flood still unread by the gateway."""
    connection = ws._response.connection
    assert connection is not None and connection.transport is not None
    connection.transport.abort()


async def _ws_answer(ws: aiohttp.ClientWebSocketResponse, ident: int) -> dict[str, Any]:
    async with asyncio.timeout(10):
        while True:
            message: dict[str, Any] = json.loads(await ws.receive_str())
            if message.get("id") == ident:
                return message


async def _count_answers(ws: aiohttp.ClientWebSocketResponse, seen: list[int]) -> None:
    async for frame in ws:
        if frame.type == aiohttp.WSMsgType.TEXT and "result" in json.loads(frame.data):
            seen[0] += 1


async def test_a_websocket_flooding_tools_list(stack: tuple[Proc, Proc]) -> None:
    upstream, gateway = stack
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(f"ws://127.0.0.1:{gateway.port}/ws", protocols=("mcp",))
        await ws.send_str(json.dumps(INIT))
        await _ws_answer(ws, 0)
        await ws.send_str(json.dumps(INITIALIZED))
        answered, sent = [0], 0
        reader = asyncio.get_running_loop().create_task(_count_answers(ws, answered))
        async with RssPeak(gateway.proc.pid) as peak:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RUN_SECONDS):
                    while True:  # as fast as the socket takes them
                        sent += 1
                        await ws.send_str(json.dumps(tools_list(sent)))
            # Counted after leaving: counting is a round trip, during which the door would serve more of the
            # flood; what was in flight when the client vanished (at most the door's places) may still arrive.
            vanish(ws)
            before_leaving = await upstream_calls(upstream)
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            await assert_quiet_after_leaving(upstream, before_leaving)
    report("websocket flood", peak, sent=sent, answered=answered[0], upstream=before_leaving)
    assert answered[0] > 100  # the flood was served, not refused
    assert peak.growth < RSS_BOUND_MB
    assert gateway.alive() and "Traceback" not in gateway.stderr()


async def raw_websocket(port: int) -> socket.socket:
    """A WebSocket client that never reads what it is sent (a library's client reads into its own buffer): its
    receive buffer is small, and nothing is read past the upgrade's answer."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(sock, (b"GET /ws HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
                                   b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                                   b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mcp\r\n\r\n"))
    head = b""
    while b"\r\n\r\n" not in head:
        head += await loop.sock_recv(sock, 1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


async def raw_send(sock: socket.socket, message: dict[str, Any]) -> bool:
    """One masked text frame (a zero key: the text as is); False once the gateway has closed the connection."""
    payload = json.dumps(message).encode()
    assert len(payload) < 1 << 16
    size = bytes([0x80 | len(payload)]) if len(payload) < 126 else bytes([0x80 | 126]) + len(payload).to_bytes(2)
    try:
        await asyncio.get_running_loop().sock_sendall(sock, b"\x81" + size + b"\0" * 4 + payload)
    except OSError:
        return False
    return True


async def read_to_end(sock: socket.socket) -> bytes | None:
    """Everything left on the connection once the client reads again, up to its end (EOF or reset); None when
    it has not ended within :data:`CUT_OFF_SECONDS`."""
    data, loop = bytearray(), asyncio.get_running_loop()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(CUT_OFF_SECONDS):
            while True:
                try:
                    chunk = await loop.sock_recv(sock, 1 << 16)
                except ConnectionResetError:
                    return bytes(data)
                if not chunk:
                    return bytes(data)
                data += chunk
    return None


def close_code(stream: bytes) -> int | None:
    """The code of the close frame among the server's (unmasked) frames in ``stream``, if it got there whole."""
    at = 0
    while at + 2 <= len(stream):
        opcode, length, at = stream[at] & 0x0F, stream[at + 1] & 0x7F, at + 2
        if length >= 126:
            size = 2 if length == 126 else 8
            length, at = int.from_bytes(stream[at:at + size]), at + size
        if opcode == 0x8 and at + 2 <= len(stream):
            return int.from_bytes(stream[at:at + 2])
        at += length
    return None


async def test_a_websocket_client_that_does_not_read(stack: tuple[Proc, Proc]) -> None:
    upstream, gateway = stack
    sock = await raw_websocket(gateway.port)
    try:
        assert await raw_send(sock, INIT) and await raw_send(sock, INITIALIZED)
        sent = 0
        async with RssPeak(gateway.proc.pid) as peak:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RUN_SECONDS):
                    while await raw_send(sock, big_call(sent + 1)):  # until the gateway gives up on it
                        sent += 1
            before_leaving = await upstream_calls(upstream)
            left = await read_to_end(sock)
        report("websocket not reading", peak, sent=sent, upstream=before_leaving, ended=left is not None)
    finally:
        sock.close()
    assert peak.growth < RSS_BOUND_MB
    assert "not reading its answers; closing with 1008" in gateway.stderr()
    assert left is not None, "the connection of a client that does not read was not ended"
    assert close_code(left) in (1008, None)  # None: cut off behind the answers it did not read, with a reset
    assert before_leaving > 10  # it was served answers worth more than door_max_queued_bytes before
    await assert_quiet_after_leaving(upstream, before_leaving)
    assert gateway.alive() and "Traceback" not in gateway.stderr()


async def sse_endpoint(stream: aiohttp.StreamReader) -> str:
    """The POST URL the ``endpoint`` event names (the stream's first event)."""
    async with asyncio.timeout(10):
        while line := await stream.readline():
            if line.startswith(b"data:"):
                return line[5:].strip().decode()
    raise AssertionError("no endpoint event")


async def post_until(http: aiohttp.ClientSession, url: str, messages: Any, deadline: float) -> int:
    """POSTs ``messages`` one by one (each 202 comes once the door has taken it) until ``deadline`` or a refusal
    (the stream was ended); the number accepted."""
    accepted, loop = 0, asyncio.get_running_loop()
    for message in messages:
        if loop.time() > deadline:
            break
        async with http.post(url, json=message) as resp:
            if resp.status != 202:
                break
        accepted += 1
    return accepted


async def _count_sse_answers(stream: aiohttp.StreamReader, seen: list[int]) -> None:
    while line := await stream.readline():
        if line.startswith(b"data:") and b'"result"' in line:
            seen[0] += 1


async def test_an_sse_client_flooding_tools_list(stack: tuple[Proc, Proc]) -> None:
    upstream, gateway = stack
    base, loop = f"http://127.0.0.1:{gateway.port}", asyncio.get_running_loop()
    async with aiohttp.ClientSession() as http:
        stream = await http.get(f"{base}/sse")
        url = base + await sse_endpoint(stream.content)
        await post_until(http, url, [INIT, INITIALIZED], loop.time() + 10)
        answered = [0]
        reader = loop.create_task(_count_sse_answers(stream.content, answered))
        async with RssPeak(gateway.proc.pid) as peak:
            deadline, ids = loop.time() + RUN_SECONDS, iter(range(1, 1 << 30))
            # Several POSTs at once, as fast as each is taken: more than the door serves at once.
            posted = await asyncio.gather(*(post_until(http, url, map(tools_list, ids), deadline) for _ in range(8)))
            before_leaving = await upstream_calls(upstream)
            assert stream.connection is not None and stream.connection.transport is not None
            stream.connection.transport.abort()  # the client is gone
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            await assert_quiet_after_leaving(upstream, before_leaving)
    report("sse flood", peak, posted=sum(posted), answered=answered[0], upstream=before_leaving)
    assert answered[0] > 100
    assert peak.growth < RSS_BOUND_MB
    assert gateway.alive() and "Traceback" not in gateway.stderr()


async def raw_sse(port: int) -> tuple[socket.socket, str]:
    """``GET /sse`` from a client that reads the ``endpoint`` event and nothing after it, with a small receive
    buffer; the socket and the POST path."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(sock, b"GET /sse HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n")
    head = b""
    while b"data:" not in head or b"\n\n" not in head.split(b"data:", 1)[1]:  # the event's end
        head += await loop.sock_recv(sock, 1)
    assert head.startswith(b"HTTP/1.1 200"), head
    return sock, head.split(b"data:", 1)[1].split(b"\n", 1)[0].strip().decode()


async def test_an_sse_client_that_does_not_read(stack: tuple[Proc, Proc]) -> None:
    upstream, gateway = stack
    base, loop = f"http://127.0.0.1:{gateway.port}", asyncio.get_running_loop()
    sock, path = await raw_sse(gateway.port)
    try:
        async with aiohttp.ClientSession() as http:
            await post_until(http, base + path, [INIT, INITIALIZED], loop.time() + 10)
            async with RssPeak(gateway.proc.pid) as peak:
                posted = await post_until(http, base + path, map(big_call, range(1, 1 << 30)),
                                          loop.time() + RUN_SECONDS)
                before_leaving = await upstream_calls(upstream)
                async with http.post(base + path, json=big_call(0)) as after:
                    refused = after.status  # the stream was ended: its session is gone
                left = await read_to_end(sock)
            report("sse not reading", peak, posted=posted, upstream=before_leaving, after=refused,
                   ended=left is not None)
    finally:
        sock.close()
    assert peak.growth < RSS_BOUND_MB
    assert "not reading its stream; ending it" in gateway.stderr()
    assert refused == 404, "the session of an ended stream still takes messages"
    assert left is not None, "the stream of a client that does not read was not ended"
    assert before_leaving > 10
    await assert_quiet_after_leaving(upstream, before_leaving)
    assert gateway.alive() and "Traceback" not in gateway.stderr()


# A gateway under a low hard descriptor limit (it cannot raise it), with door bounds lowered so that a few door
# sessions fit: each may hold 4 + 4 + 2 loopback connections (20 descriptors); upstream connections take 30.
# Derived: (256 - 64 - 30) // 2 // 20 = 4 door sessions, 162 - 4 * 20 = 82 client connections.
LOW_NOFILE = (256, 256)
LOW_DOORS = 4
LOW_CONFIG = """max_pending_per_session = 4

[gateway.connections]
door_max_in_flight = 4
"""
UPSTREAM_CONNECTIONS = "upstream_max_connections = 20\nupstream_max_stream_connections = 10\n"


def hang_call(ident: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call",
            "params": {"name": "hang", "arguments": {"nonce": str(ident)}}}


async def upstream_hanging(upstream: Proc) -> int:
    async with aiohttp.ClientSession() as http, http.post(upstream.url, json={
            "jsonrpc": "2.0", "id": 1, "method": "faults/stats"}) as resp:
        return int((await resp.json())["result"].get("hanging", 0))


async def poll_health(port: int, seconds: float) -> list[int | str]:
    """``/healthz`` every 100 ms, each on a new connection: the status of each, or the error instead. The probes run
    in a thread with an event loop of their own: the floods share this test's loop and, at their start, write for
    about two seconds without yielding (until the sockets' buffers fill), which held a probe on this loop past its
    timeout while the gateway answered others in 2 ms; a probe's time is then the gateway's, not this loop's."""
    return await asyncio.to_thread(asyncio.run, _probe_health(port, seconds))


async def _probe_health(port: int, seconds: float) -> list[int | str]:
    statuses: list[int | str] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True),
                                     timeout=aiohttp.ClientTimeout(total=2)) as http:
        while loop.time() < deadline:
            try:
                async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
                    statuses.append(resp.status)
            except (aiohttp.ClientError, TimeoutError) as exc:
                statuses.append(repr(exc))
            await asyncio.sleep(0.1)  # sleep: the probe's pace
    return statuses


async def flood_hangs(ws: aiohttp.ClientWebSocketResponse, seconds: float) -> None:
    """Calls that wait on the upstream, as fast as the door takes them; answers are read (timeouts, mostly)."""
    reader = asyncio.get_running_loop().create_task(_count_answers(ws, [0]))
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            for ident in range(1, 1 << 30):
                await ws.send_str(json.dumps(hang_call(ident)))
    reader.cancel()
    await asyncio.gather(reader, return_exceptions=True)


async def sse_hangs(http: aiohttp.ClientSession, base: str, seconds: float) -> aiohttp.ClientResponse:
    """An HTTP+SSE session posting calls that wait on the upstream, as fast as the door takes them; its stream."""
    stream = await http.get(f"{base}/sse")
    url = base + await sse_endpoint(stream.content)
    loop = asyncio.get_running_loop()
    await post_until(http, url, [INIT, INITIALIZED], loop.time() + 10)
    reader = loop.create_task(_count_sse_answers(stream.content, [0]))
    await post_until(http, url, map(hang_call, range(1, 1 << 30)), loop.time() + seconds)
    reader.cancel()
    return stream


async def test_door_sessions_under_a_low_descriptor_limit(tmp_path: Path) -> None:
    upstream = procs.faulty_upstream(tmp_path)
    config = procs.CONFIG.replace("[gateway.limits]", UPSTREAM_CONNECTIONS + "\n[gateway.limits]")
    gateway = procs.Proc("gateway", ["-m", "gateway", "serve", "--upstream", upstream.url, "--port", "{port}",
                                     "--config", str(_config(tmp_path, config + LOW_CONFIG)), "--usage-db",
                                     str(tmp_path / "usage.sqlite3"), "--no-access-log"], tmp_path, LOW_NOFILE)
    base = f"http://127.0.0.1:{gateway.port}"
    try:
        await asyncio.gather(upstream.listening(), gateway.listening())
        async with aiohttp.ClientSession() as http:
            sockets = [await http.ws_connect(f"{base}/ws", protocols=("mcp",)) for _ in range(LOW_DOORS - 1)]
            for ws in sockets:
                await ws.send_str(json.dumps(INIT))
                await _ws_answer(ws, 0)
                await ws.send_str(json.dumps(INITIALIZED))
            sse = asyncio.get_running_loop().create_task(sse_hangs(http, base, RUN_SECONDS))
            # the stream is open: every door place is taken
            await until(lambda: upstream_hanging(upstream), "the SSE stream's call hangs upstream")
            refused = []
            for _ in range(3):  # past door_max_sessions: refused before the upgrade, the others unharmed
                with pytest.raises(aiohttp.WSServerHandshakeError) as extra:
                    await http.ws_connect(f"{base}/ws", protocols=("mcp",))
                refused.append(extra.value.status)
            async with http.get(f"{base}/sse") as over:
                refused.append(over.status)
                limit = (await over.json())["error"]["data"]["limit"]
            health, *_ = await asyncio.gather(poll_health(gateway.port, RUN_SECONDS),
                                              *(flood_hangs(ws, RUN_SECONDS) for ws in sockets))
            stream = await sse
            held = await upstream_hanging(upstream)
            for ws in sockets:
                vanish(ws)
            assert stream.connection is not None and stream.connection.transport is not None
            stream.connection.transport.abort()
            # sleep: a window under the upstream read timeout (2 s): only the doors' ends can release them in it
            await asyncio.sleep(1.0)
            still_held = await upstream_hanging(upstream)
    finally:
        gateway.stop()
        upstream.stop()
    log = gateway.stderr()
    print(f"\nlow descriptors: {len(health)} /healthz, held {held} hanging calls, {still_held} after leaving")
    assert "door_max_sessions is 4" in log  # the derived values kept, the operator warned
    assert refused == [503] * 4 and limit == "door_max_sessions"
    assert health and all(status == 200 for status in health), health
    assert held >= LOW_DOORS  # every session had calls waiting on the upstream
    assert still_held == 0, "calls of clients that left still wait on the upstream"
    assert not any(word in log for word in ("EMFILE", "Too many open files", "Traceback")), log[-3000:]


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return path
