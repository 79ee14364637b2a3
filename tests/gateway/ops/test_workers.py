"""``serve --workers N``: N processes on one port, refused without a shared store; with Redis, connections
reach different workers and every worker serves every session (a session opened on one is used on others)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from gateway.config.settings import load_config
from gateway.ops.workers import refusal, worker_argv
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[3]
REDIS = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _redis_answers() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=0.5):
            return True
    except OSError:
        return False


def test_workers_need_a_shared_store_and_own_the_pid_file() -> None:
    assert "shared session store" in (refusal(load_config(), 2) or "")
    assert refusal(load_config(store={"url": REDIS}), 2) is None and refusal(load_config(), 1) is None
    assert worker_argv(["--port", "1", "--workers", "3", "--pid-file", "p", "--store", "x"]) == [
        "--port", "1", "--store", "x", "--reuse-port"]


def test_serve_refuses_workers_on_the_memory_store(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "gateway", "serve", "--workers", "2", "--port", "0",
                          "--usage-db", str(tmp_path / "u.db")], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert run.returncode != 0 and "needs a shared session store" in run.stderr and "Traceback" not in run.stderr


def test_a_dying_worker_restarts_with_a_doubling_backoff_reset_by_a_long_life() -> None:
    from gateway.ops.workers import STEADY_SECONDS, Supervisor, ending

    now = [0.0]
    dying = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    supervisor = Supervisor(dying, 1, clock=lambda: now[0])
    worker, delays = supervisor.workers[0], []
    for _ in range(4):
        worker.proc.wait()
        assert supervisor.tend(worker) is None  # noticed: a restart is due later
        assert worker.due is not None
        delays.append(worker.due - now[0])
        now[0] = worker.due
        supervisor.tend(worker)  # restarted
        assert worker.due is None
    assert delays == [0.5, 1.0, 2.0, 4.0]
    worker.proc.wait()
    now[0] += STEADY_SECONDS  # it lived a while: the next restart is soon again
    supervisor.tend(worker)
    assert worker.due is not None and worker.due - now[0] == 0.5
    assert ending(-9) == "killed by SIGKILL" and ending(3) == "exited with status 3"


def test_a_worker_refusing_at_start_up_stops_the_service_with_its_status() -> None:
    from gateway.ops.workers import Supervisor

    assert Supervisor([sys.executable, "-c", "raise SystemExit(3)"], 2).run() == 3


@pytest.mark.skipif(not _redis_answers(), reason="no Redis at 127.0.0.1:6379")
async def test_two_workers_share_one_port_and_every_session(tmp_path: Path) -> None:
    port, prefix = _free_port(), f"test-workers-{secrets.token_hex(4)}:"
    config = tmp_path / "g.toml"
    config.write_text(f'[gateway.store]\nurl = "{REDIS}"\nprefix = "{prefix}"\n')
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--workers", "2", "--port", str(port),
                             "--config", str(config), "--usage-db", str(tmp_path / "u.db"), "--no-access-log"],
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base, headers = f"http://127.0.0.1:{port}", {"Accept": "application/json, text/event-stream"}
    try:
        replicas: set[str] = set()

        async def both_answered() -> bool:  # start-up, then new connections until both workers answered
            try:
                async with aiohttp.ClientSession() as http, http.get(f"{base}/healthz") as resp:
                    replicas.add(resp.headers["X-Gateway-Replica"])
            except aiohttp.ClientConnectionError:
                pass
            return len(replicas) == 2
        await until(both_answered, "both workers answer", lambda: replicas, seconds=60)
        assert len(replicas) == 2
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "w", "version": "1"}}}
        async with aiohttp.ClientSession() as http, http.post(f"{base}/mcp", json=init, headers=headers) as resp:
            session = resp.headers["Mcp-Session-Id"]
        session_headers = {**headers, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
        for ident in range(2, 12):  # a new connection each time: the kernel spreads them over the workers
            async with aiohttp.ClientSession() as http, http.post(f"{base}/mcp", headers=session_headers, json={
                    "jsonrpc": "2.0", "id": ident, "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"text": f"n{ident}"}}}) as resp:
                message = await resp.json()
            assert message["result"]["content"][0]["text"].endswith(f"n{ident}"), message
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        await _forget(prefix)


async def _forget(prefix: str) -> None:
    """The test's keys go (never a FLUSHDB: the Redis may be shared)."""
    import redis.asyncio as redis

    client = redis.from_url(REDIS)
    try:
        keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


def _children(pid: int) -> set[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return set()
    return {int(one) for one in text.split()}


async def _load(base: str, headers: dict[str, str], results: list[str], stop: asyncio.Event, first: int) -> None:
    """A client calling ``echo`` over and over, a new connection each time (spread over the workers): each
    outcome is ``ok``, ``conn`` (the connection failed: a request in flight on the killed worker) or ``wrong``."""
    ident = first  # each client its own request ids: the session is shared
    while not stop.is_set():
        ident += 1
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http, http.post(
                    f"{base}/mcp", headers=headers, json={"jsonrpc": "2.0", "id": ident, "method": "tools/call",
                                                          "params": {"name": "echo",
                                                                     "arguments": {"text": f"n{ident}"}}}) as resp:
                message = await resp.json()
            ok = message.get("result", {}).get("content", [{}])[0].get("text", "").endswith(f"n{ident}")
            results.append("ok" if ok else f"wrong {message}")
        except (TimeoutError, aiohttp.ClientError):
            results.append("conn")
            await asyncio.sleep(0.05)  # sleep: the load's pause before it tries again


def _start(args: list[str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    """``serve`` with its stderr in ``log`` (a file: a pipe nobody reads would fill up)."""
    with open(log, "wb") as err:
        return subprocess.Popen([sys.executable, "-m", "gateway", "serve", *args], cwd=cwd, stderr=err,
                                env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)


@pytest.mark.skipif(not _redis_answers(), reason="no Redis at 127.0.0.1:6379")
async def test_a_worker_killed_under_load_is_restarted_and_the_service_stays_up(tmp_path: Path) -> None:
    port, prefix = _free_port(), f"test-workers-{secrets.token_hex(4)}:"
    config = tmp_path / "g.toml"
    config.write_text(f'[gateway.store]\nurl = "{REDIS}"\nprefix = "{prefix}"\n')
    log = tmp_path / "parent.stderr"
    proc = _start(["--workers", "2", "--port", str(port), "--config", str(config), "--usage-db",
                   str(tmp_path / "u.db"), "--no-access-log", "--pid-file", "var/gw.pid"], tmp_path, log)
    base, headers = f"http://127.0.0.1:{port}", {"Accept": "application/json, text/event-stream"}
    stop, results = asyncio.Event(), []
    try:
        await until(lambda: log.read_text().count("serving legacy MCP") == 2, seconds=60)
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "w", "version": "1"}}}
        async with aiohttp.ClientSession() as http, http.post(f"{base}/mcp", json=init, headers=headers) as resp:
            session = resp.headers["Mcp-Session-Id"]
        session_headers = {**headers, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
        before = _children(proc.pid)
        assert len(before) == 2
        assert (tmp_path / "var" / "gw.pid").read_text().strip() == str(proc.pid)  # the parent's, folder made
        loads = [asyncio.create_task(_load(base, session_headers, results, stop, first))
                 for first in (100, 1_000_000)]
        await until(lambda: results.count("ok") >= 20)
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        killed_at = len(results)
        # the restart is due after 0.5 s; the new worker then starts up
        await until(lambda: "serving legacy MCP" in log.read_text().split("restarted")[-1]
                    and "restarted" in log.read_text(), "a worker restarted", seconds=30)
        after = len(results)
        await until(lambda: len(results) >= after + 40)
        stop.set()
        await asyncio.gather(*loads)
        assert proc.poll() is None, log.read_text()  # the parent stayed up
        now = _children(proc.pid)
        assert len(now) == 2 and victim not in now and len(now - before) == 1, (before, now)
        assert not [one for one in results if one.startswith("wrong")], results
        assert results[killed_at:].count("conn") <= 2, results[killed_at:]  # that worker's in-flight requests
        assert results[:killed_at].count("conn") == 0 and results[after:].count("conn") == 0, results
        text = log.read_text()
        assert f"worker 1 (pid {victim}) killed by SIGKILL" in text or f"(pid {victim}) killed by SIGKILL" in text, \
            text
        assert "restarted (pid" in text and "Traceback" not in text, text
    finally:
        stop.set()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()
        await _forget(prefix)
    assert "workers stopped" in log.read_text() and not (tmp_path / "var" / "gw.pid").exists()
    assert not any(Path(f"/proc/{pid}").exists() for pid in now)  # every worker ended with the parent


@pytest.mark.skipif(not _redis_answers() or not sys.platform.startswith("linux"),
                    reason="no Redis at 127.0.0.1:6379, or not Linux (PR_SET_PDEATHSIG)")
async def test_workers_end_when_their_supervisor_is_killed(tmp_path: Path) -> None:
    port, prefix = _free_port(), f"test-workers-{secrets.token_hex(4)}:"
    config = tmp_path / "g.toml"
    config.write_text(f'[gateway.store]\nurl = "{REDIS}"\nprefix = "{prefix}"\n')
    log = tmp_path / "parent.stderr"
    proc = _start(["--workers", "2", "--port", str(port), "--config", str(config), "--usage-db",
                   str(tmp_path / "u.db"), "--no-access-log"], tmp_path, log)
    workers: set[int] = set()
    try:
        await until(lambda: log.read_text().count("serving legacy MCP") == 2, seconds=60)
        workers = _children(proc.pid)
        assert len(workers) == 2, log.read_text()
        proc.kill()
        proc.wait()
        # each gets SIGTERM from the kernel and stops within its shutdown budget
        await until(lambda: not any(Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid) for pid in workers),
                    "the workers stopped", seconds=30)
        assert not [pid for pid in workers if Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid)]
        assert log.read_text().count("gateway stopped") == 2, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in workers:  # orphans, should the test fail
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        await _forget(prefix)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].splitlines()[0].lower()
    except (OSError, IndexError):
        return "zombie"  # gone meanwhile
