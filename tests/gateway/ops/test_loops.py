"""``serve --loop uvloop``: the gateway runs on uvloop (the ``fast`` extra) as on asyncio, on the memory store and
on Redis, through a plain call and a bridged one (live sampling rounds on the POST's SSE stream).

On Redis this once failed at start-up: uvloop calls a protocol's ``connection_made`` only after
``create_connection`` has returned, and its transports are not ``asyncio.Transport`` subclasses."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from bench.clients import LegacyClient
from tests.gateway.ops.test_workers import REDIS, _forget, _free_port, _redis_answers
from tests.waiting import until

pytest.importorskip("uvloop")
ROOT = Path(__file__).resolve().parents[3]


async def _ready(base: str, proc: subprocess.Popen) -> None:
    async def healthy() -> bool:
        assert proc.poll() is None, "the gateway exited at start-up"
        try:
            async with aiohttp.ClientSession() as http, http.get(f"{base}/healthz") as resp:
                return resp.status == 200
        except aiohttp.ClientConnectionError:
            return False
    await until(healthy, "the gateway starts", seconds=30)


@pytest.mark.parametrize("store", ["memory", "redis"])
async def test_the_gateway_serves_plain_and_bridged_calls_on_uvloop(tmp_path: Path, store: str) -> None:
    if store == "redis" and not _redis_answers():
        pytest.skip("no Redis at 127.0.0.1:6379")
    port, prefix = _free_port(), f"test-loops-{secrets.token_hex(4)}:"
    config = tmp_path / "g.toml"
    config.write_text(f'[gateway.store]\nurl = "{REDIS}"\nprefix = "{prefix}"\n' if store == "redis" else "")
    log = tmp_path / "gateway.log"
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--loop", "uvloop", "--port", str(port),
                                 "--config", str(config), "--usage-db", str(tmp_path / "u.db"), "--no-access-log"],
                                cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                stdout=subprocess.DEVNULL, stderr=err)
    base = f"http://127.0.0.1:{port}"
    try:
        await _ready(base, proc)
        async with aiohttp.ClientSession() as http:
            client = LegacyClient(http, f"{base}/mcp")
            await client.start()
            assert await client.call("echo", {"text": "hi"})
            for _ in range(3):  # two live sampling rounds each, answered on the request's stream
                assert await client.call("summarize_repo", {"repo": "uv"})
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        if store == "redis":
            await _forget(prefix)
    text = log.read_text()
    assert "event loop: uvloop" in text and "Traceback" not in text, text[-3000:]
    assert code == 0
