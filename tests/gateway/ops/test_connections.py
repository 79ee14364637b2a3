"""The client connection cap (gateway.ops.connections) on a real listening socket, as ``serve`` runs it, and the
rate-limited log filter (gateway.ops.logs) with an injected clock."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
from aiohttp import web

from gateway.config.settings import load_config
from gateway.http.app import create_app
from gateway.ops import logs
from gateway.ops.connections import CappedRunner, ConnectionCap, client_cap, derived_cap, door_cap
from gateway.ops.logs import RepeatFilter
from tests.faults import procs
from tests.faults.procs import faulty_upstream
from tests.waiting import until

REQUEST = b"DELETE /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"  # answered by the gateway alone (400: no session)


async def _served(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    writer.write(REQUEST)
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = [int(h.split(b":")[1]) for h in head.lower().split(b"\r\n") if h.startswith(b"content-length:")]
    await reader.readexactly(length[0] if length else 0)  # the whole answer: the connection is reusable
    return head.startswith(b"HTTP/1.1 400")


async def _closed_by_server(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), 10) == b""
    except ConnectionResetError:
        return True


async def test_connections_over_the_cap_are_closed_at_once_and_a_freed_slot_is_served_again(upstream) -> None:
    cap = ConnectionCap(3)
    runner = CappedRunner(create_app(load_config(upstream_url=upstream.url)), cap)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    held: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        for n in range(1, 4):  # one at a time, so the first three are the ones accepted
            held.append(await asyncio.open_connection("127.0.0.1", site.port))
            await until(lambda n=n: cap.open == n)
        extra = [await asyncio.open_connection("127.0.0.1", site.port) for _ in range(2)]
        for reader, writer in extra:
            assert await _closed_by_server(reader)  # before anything was sent: nothing of theirs was read
            writer.close()
        assert cap.refused == 2 and cap.open == 3
        assert all([await _served(reader, writer) for reader, writer in held])
        held.pop()[1].close()
        await until(lambda: cap.open == 2)
        held.append(await asyncio.open_connection("127.0.0.1", site.port))
        assert await _served(*held[-1]) and cap.open == 3
    finally:
        for _reader, writer in held:
            writer.close()
        await runner.cleanup()


def test_the_cap_is_derived_from_the_descriptor_limit_unless_configured() -> None:
    config = load_config()  # upstream 100 + 1000 connections
    # (1024 - 64) / 2 left once upstream connections take half, less one door session's hop (2 * (32 + 32 + 2))
    assert derived_cap(config, 1024) == 480 - 132 and door_cap(config, 1024) == 1
    assert door_cap(config, 65_536) == (65_536 - 64 - 1100) // 2 // 132 == 243
    assert derived_cap(config, 1_048_576) == 1_048_576 - 64 - 1100 - door_cap(config, 1_048_576) * 132
    assert derived_cap(config, 10) == 1 and door_cap(config, 10) == 1
    assert door_cap(load_config(connections={"door_max_sessions": 5}), 1024) == 5
    assert client_cap(load_config(connections={"max_client_connections": 7})) == 7


def _record(msg: str, *args: object, name: str = "asyncio", level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_a_repeated_error_is_logged_once_per_interval_with_the_count_suppressed() -> None:
    now = [100.0]
    flt = RepeatFilter(10.0, clock=lambda: now[0])
    assert flt.filter(_record("socket.accept() out of system resource %s", 1))
    assert not flt.filter(_record("socket.accept() out of system resource %s", 2))  # same template
    assert not flt.filter(_record("socket.accept() out of system resource %s", 3))
    assert flt.filter(_record("another failure"))  # a different message is logged at once
    assert flt.filter(_record("socket.accept() out of system resource %s", 4, name="gateway"))  # other logger
    now[0] = 111.0
    again = _record("socket.accept() out of system resource %s", 5)
    assert flt.filter(again)
    assert "2 repeats of this message suppressed" in again.getMessage() and again.getMessage().startswith(
        "socket.accept() out of system resource 5")
    assert not flt.filter(_record("socket.accept() out of system resource %s", 6))
    assert flt.filter(_record("info lines pass %s", 1, level=logging.INFO))
    assert flt.filter(_record("info lines pass %s", 2, level=logging.INFO))


def test_the_filter_remembers_a_bounded_number_of_messages() -> None:
    flt = RepeatFilter(10.0, clock=lambda: 0.0)
    for i in range(logs.MAX_KEYS + 50):
        assert flt.filter(_record(f"distinct {i}"))
    assert len(flt._last) <= logs.MAX_KEYS
    assert RepeatFilter(0.0).filter(_record("x")) and RepeatFilter(0.0).filter(_record("x"))


async def test_serve_applies_the_configured_cap(tmp_path) -> None:
    root = Path(__file__).resolve().parents[3]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = tmp_path / "gateway.toml"
    config.write_text("[gateway.connections]\nmax_client_connections = 1\n")
    log = (tmp_path / "stderr.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--port", str(port), "--config", str(config),
                             "--upstream", "http://127.0.0.1:9/mcp", "--usage-db", str(tmp_path / "u.sqlite3"),
                             "--no-access-log"], cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                            stdout=subprocess.DEVNULL, stderr=log)
    try:
        async def served() -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
            try:
                connection = await asyncio.open_connection("127.0.0.1", port)
                return connection if await _served(*connection) else None
            except (OSError, asyncio.IncompleteReadError):
                return None
        first = await until(served, "the gateway comes up", seconds=15)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await _closed_by_server(reader)
        writer.close()
        assert await _served(*first)  # the one within the cap still works
        first[1].close()
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
    assert b"max_client_connections (1)" in (tmp_path / "stderr.log").read_bytes()


def _open_files(pid: int) -> tuple[int, int]:
    """A process's (soft, hard) RLIMIT_NOFILE as the kernel shows it."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no open files line")


async def test_serve_raises_a_low_descriptor_soft_limit_before_deriving_its_caps(tmp_path: Path) -> None:
    upstream = faulty_upstream(tmp_path)
    gateway = procs.gateway(tmp_path, upstream.url, nofile=(1024, 4096))
    try:
        await upstream.listening()
        await gateway.listening()
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{gateway.port}/healthz") as health:
            assert health.status == 200
        assert _open_files(gateway.proc.pid) == (4096, 4096)
        # the banner is printed just after the bind
        await until(lambda: "max_client_connections" in (tmp_path / "gateway.stdout").read_text())
        # Derived at 4096, not 1024 (348): (4096 - 64 - 1100) less 11 door sessions' 132 descriptors.
        assert "(max_client_connections 1480)" in (tmp_path / "gateway.stdout").read_text()
        assert "descriptor limit raised from 1024 to 4096" in gateway.stderr()
        # 4096 is still under what serve raises to: the operator is told what it costs and what to change.
        warning = next(line for line in gateway.stderr().splitlines() if "descriptor limit is 4096" in line)
        assert "WARNING" in warning and "door_max_sessions is 11" in warning and "ulimit -n" in warning
    finally:
        gateway.stop()
        upstream.stop()
