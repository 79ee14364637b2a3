"""``serve --workers N``: N processes on one port, refused without a shared store; with Redis, connections
reach different workers and every worker serves every session (a session opened on one is used on others)."""

from __future__ import annotations

import asyncio
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
        for _ in range(600):  # start-up, then new connections until both workers answered
            try:
                async with aiohttp.ClientSession() as http, http.get(f"{base}/healthz") as resp:
                    replicas.add(resp.headers["X-Gateway-Replica"])
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.1)
            if len(replicas) == 2:
                break
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
