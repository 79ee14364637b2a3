"""Usage records of 2025 clients relayed as they are to a 2025-era upstream
(docs/design/eras.md#relayed-2025-requests-are-counted-in-the-usage-report): each request once, era ``legacy``, not
translated, the upstream's name, the client sealed in its session id, the outcome read from the answer (JSON or
SSE) as it passed; and the migration report counts them (the peer's legacy traffic, and the relayed section by
upstream). On loopback: the gateway in front of a fake 2025 server, a raw 2025 client."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from typing import Any

import aiohttp
from aiohttp import web

from adapters.usage import DAY_MS, iso_day
from gateway.config.settings import load_config
from gateway.http.app import create_app
from gateway.telemetry.usage import USAGE
from kit.usage_report import ReportBuilder
from tests.gateway.conftest import ROOT
from tests.gateway.http.test_reverse_relay_limits import LEGACY, FakeLegacy
from tests.waiting import until, until_hung_up

UPSTREAM_TOML = """
[upstreams.crm]
url = "{url}"
era = "2025-11-25"

[[peers]]
name = "ide"
client_name = "ide-*"
upstream = "crm"
"""


class Answering(FakeLegacy):
    """Also: ``tools/call`` of tool ``fails`` answers a JSON-RPC error; ``prompts/get`` answers on an SSE stream
    (a progress notification, then the result); ``tools/call`` of tool ``asks`` sends a form elicitation and a
    roots/list on its SSE stream, then waits until the client hangs up."""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.method == "POST" and request.headers.get("Mcp-Session-Id") in self.sessions:
            message = await request.json()
            if message.get("method") == "tools/call" and message["params"]["name"] == "fails":
                self.seen.append(("tools/call", request.headers.get("Authorization")))
                error = {"code": -32603, "message": "the tool broke"}
                return web.json_response({"jsonrpc": "2.0", "id": message["id"], "error": error})
            if message.get("method") == "tools/call" and message["params"]["name"] == "asks":
                out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await out.prepare(request)
                for ident, method in ((901, "elicitation/create"), (902, "roots/list")):
                    params = {"message": "secret question", "requestedSchema": {}} if ident == 901 else {}
                    asked = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
                    await out.write(f"event: message\ndata: {json.dumps(asked)}\n\n".encode())
                await until_hung_up(request)
                return out
            if message.get("method") == "prompts/get":
                self.seen.append(("prompts/get", request.headers.get("Authorization")))
                out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await out.prepare(request)
                progress = {"jsonrpc": "2.0", "method": "notifications/progress",
                            "params": {"progressToken": 1, "progress": 1, "message": "a result is coming"}}
                done = {"jsonrpc": "2.0", "id": message["id"], "result": {"messages": []}}
                for event in (progress, done):
                    await out.write(f"event: message\ndata: {json.dumps(event)}\n\n".encode())
                return out
        return await super().handle(request)


def rows(db: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM usage")]
    finally:
        conn.close()


async def _relaying(aiohttp_server: Any, tmp_path: Any) -> tuple[Answering, Any, str, str]:
    """A gateway relaying to a fake 2025-era server, its usage kept in a database flushed on demand: the fake, the
    gateway's test server, its /mcp and the database's path."""
    fake = Answering()
    upstream = str((await aiohttp_server(fake.app())).make_url("/mcp"))
    path, db = tmp_path / "gateway.toml", str(tmp_path / "usage.db")
    path.write_text(UPSTREAM_TOML.format(url=upstream))
    config = load_config(path, state_dir=str(tmp_path / "state"), usage={"db": db, "flush_seconds": 3600})
    server = await aiohttp_server(create_app(config))
    return fake, server, str(server.make_url("/mcp")), db


async def test_relayed_requests_are_recorded_and_reported(aiohttp_server: Any, tmp_path: Any) -> None:
    fake, server, url, db = await _relaying(aiohttp_server, tmp_path)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "ide-plugin", "version": "3.1"}}}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=init, headers=LEGACY) as resp:
            assert resp.status == 200
            headers = {**LEGACY, "Mcp-Session-Id": resp.headers["Mcp-Session-Id"],
                       "MCP-Protocol-Version": "2025-11-25"}

        async def post(message: dict[str, Any]) -> int:
            async with http.post(url, json=message, headers=headers) as resp:
                await resp.read()
                return resp.status

        assert await post({"jsonrpc": "2.0", "method": "notifications/initialized"}) == 202  # not a request
        assert await post({"jsonrpc": "2.0", "id": 2, "method": "ping"}) == 200
        for ident in (3, 4):
            assert await post({"jsonrpc": "2.0", "id": ident, "method": "tools/call",
                               "params": {"name": "echo", "arguments": {"text": "secret words"}}}) == 200
        assert await post({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                           "params": {"name": "fails", "arguments": {}}}) == 200
        assert await post({"jsonrpc": "2.0", "id": 6, "method": "prompts/get", "params": {"name": "p"}}) == 200
    assert [m for m, _ in fake.seen if m != "GET"] == ["initialize", "notifications/initialized", "ping",
                                                      "tools/call", "tools/call", "tools/call", "prompts/get"]
    await server.app[USAGE].flush()
    table = rows(db)
    cell = {"era": "legacy", "translated": 0, "upstream": "crm", "peer": "ide", "client": "ide-plugin",
            "client_version": "3.1", "revision": "2025-11-25"}
    got = sorted((r["method"], r["outcome"], r["features"], r["count"]) for r in table)
    assert got == [("initialize", "ok", "legacy handshake", 1), ("ping", "ok", "legacy handshake,ping", 1),
                   ("prompts/get", "ok", "legacy handshake", 1), ("tools/call", "error", "legacy handshake", 1),
                   ("tools/call", "ok", "legacy handshake", 2)]
    assert all(r[k] == v for r in table for k, v in cell.items()), table
    assert not [r for r in table if "secret words" in json.dumps(r)]  # never content

    builder = ReportBuilder()
    for row in table:
        builder.add(row)
    report = builder.finish("2026-12-02", 1, {})
    assert report["reverse"] == []  # no 2026 client reached crm
    assert [(u["upstream"], u["requests"], u["errors"], u["methods"], u["clients"]) for u in report["relayed"]] == [
        ("crm", 6, 1, {"tools/call": 3, "initialize": 1, "ping": 1, "prompts/get": 1}, {"ide/ide-plugin": 6})]
    ide = report["peers"][0]
    assert (ide["peer"], ide["requests"], ide["legacy"]) == ("ide", 6, 6)
    assert ide["verdict"] == "blocked by: legacy handshake, ping"

    today = iso_day(table[0]["bucket"] // DAY_MS)  # the report's day is the rows' own
    text = subprocess.run([sys.executable, "-m", "gateway", "report", "--db", db, "--today", today], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert text.returncode == 0, text.stderr
    section = text.stdout.split("legacy clients -> legacy servers (relayed as they are)\n")[1].splitlines()[:4]
    assert section == ["  crm: 6 requests, 1 errors, 0 cancelled",
                       "    legacy features reached: none",
                       "    methods: tools/call 3, initialize 1, ping 1, prompts/get 1",
                       "    clients: ide/ide-plugin 6"]


async def test_a_relayed_call_is_recorded_with_what_the_server_asked_when_its_client_hangs_up(
        aiohttp_server: Any, tmp_path: Any) -> None:
    """The server's requests on a relayed call's stream are its record's input kinds (never their content); a
    client that hangs up before the server's stream ended is still recorded, as cancelled."""
    _, server, url, db = await _relaying(aiohttp_server, tmp_path)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}, "roots": {}},
                       "clientInfo": {"name": "ide-plugin", "version": "3.1"}}}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=init, headers=LEGACY) as resp:
            headers = {**LEGACY, "Mcp-Session-Id": resp.headers["Mcp-Session-Id"],
                       "MCP-Protocol-Version": "2025-11-25"}
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "asks", "arguments": {}}}
        async with http.post(url, json=call, headers=headers) as resp:
            seen = b""
            while b"roots/list" not in seen:  # both requests passed: the client hangs up without answering
                seen += await resp.content.readany()

    async def recorded() -> list[dict[str, Any]]:
        await server.app[USAGE].flush()
        return [r for r in rows(db) if r["method"] == "tools/call"]
    [row] = await until(recorded, "the hung-up call recorded")
    assert (row["inputs"], row["features"], row["outcome"], row["count"]) == (
        "elicitation.form,roots", "legacy handshake,roots", "cancelled", 1)
    assert not [r for r in rows(db) if "secret question" in json.dumps(r)]
