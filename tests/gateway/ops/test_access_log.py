"""The access log of ``python -m gateway serve`` keeps URLs' secrets out: the HTTP+SSE door's session id
(``/messages?session_id=…``) and the dashboard's ``?token=`` become ``<redacted>``, in the request line and in
a ``Referer`` that repeats the URL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from gateway.ops.logs import redact_query
from tests.gateway.ops.test_workers import _free_port
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "admin-hunter2-token"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "log-test", "version": "1"}}}


async def _ready(base: str, proc: subprocess.Popen) -> None:
    async def healthy() -> bool:
        assert proc.poll() is None, "the gateway exited at start-up"
        try:
            async with aiohttp.ClientSession() as http, http.get(f"{base}/healthz") as resp:
                return resp.status == 200
        except aiohttp.ClientConnectionError:
            return False
    # start-up imports the gateway and the embedded core: slow on a loaded machine
    await until(healthy, "the gateway starts", seconds=60)


async def _sse_session(http: aiohttp.ClientSession, base: str) -> str:
    """Open ``GET /sse``, post an initialize to its endpoint, close it: the session id the endpoint named."""
    async with http.get(f"{base}/sse", headers={"Accept": "text/event-stream"}) as stream:
        endpoint = ""
        while not endpoint:
            line = (await stream.content.readline()).decode().strip()
            endpoint = line.removeprefix("data: ") if line.startswith("data: ") else ""
        async with http.post(base + endpoint, json=INITIALIZE) as posted:
            assert posted.status == 202
        while b'"id":1' not in (await stream.content.readline()).replace(b" ", b""):
            pass  # the initialize's answer arrived on the stream
    return endpoint.partition("session_id=")[2]


async def test_the_access_log_redacts_the_sse_session_id_and_the_admin_token(tmp_path: Path) -> None:
    pytest.importorskip("modern_server.app")
    port, log = _free_port(), tmp_path / "gateway.log"
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--port", str(port),
                                 "--usage-db", str(tmp_path / "u.db")], cwd=tmp_path,
                                env={**os.environ, "PYTHONPATH": str(ROOT), "GATEWAY_ADMIN_TOKEN": TOKEN},
                                stdout=subprocess.DEVNULL, stderr=err)
    base = f"http://127.0.0.1:{port}"
    try:
        await _ready(base, proc)
        async with aiohttp.ClientSession() as http:
            session_id = await _sse_session(http, base)
            url = f"{base}/migration?since=7d&token={TOKEN}"
            async with http.get(url, headers={"Referer": url}, allow_redirects=False) as resp:
                assert resp.status == 303
        await until(lambda: log.read_text().count("<redacted>") >= 3)  # aiohttp logs a request once its handler is done
    finally:
        proc.terminate()
        proc.wait(10)
    written = log.read_text()
    assert len(session_id) >= 16 and session_id not in written and TOKEN not in written
    assert "POST /messages?session_id=<redacted> HTTP/1.1" in written
    assert "GET /migration?since=7d&token=<redacted> HTTP/1.1" in written
    assert f'"{base}/migration?since=7d&token=<redacted>"' in written  # the Referer


def test_only_the_secret_parameters_are_redacted() -> None:
    assert redact_query("GET /migration?format=json&token=a%20b&since=7d HTTP/1.1") == \
        "GET /migration?format=json&token=<redacted>&since=7d HTTP/1.1"
    assert redact_query("POST /messages?session%5Fid=x HTTP/1.1") == "POST /messages?session%5Fid=<redacted> HTTP/1.1"
    assert redact_query("GET /mcp?tokens=1&token HTTP/1.1") == "GET /mcp?tokens=1&token HTTP/1.1"
    assert redact_query("http://h/migration?token=x#top") == "http://h/migration?token=<redacted>#top"
