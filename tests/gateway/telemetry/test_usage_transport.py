"""The transport label end to end: the same gateway app serves a Streamable HTTP client (the official SDK in
legacy mode), an HTTP+SSE client (the SDK's ``sse_client``) and a WebSocket client; /metrics, the report and
the /migration page say which door each request came through, and HTTP+SSE counts as a deprecated feature in
the verdict. A usage store written before the label keeps its rows, counted as Streamable HTTP."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import aiohttp
import mcp_types as types
import websockets
from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from prometheus_client.parser import text_string_to_metric_families

from adapters.usage import DAY_MS, KEY_FIELDS, day_number
from gateway.config.settings import load_config
from gateway.http.app import create_app
from gateway.telemetry.dashboard import render_html
from gateway.telemetry.report import build_report, render_table
from gateway.telemetry.usage import USAGE, UsageDb
from kit.usage_report import Window
from tests.gateway.http.test_e2e_sdk import sampling

TODAY = "2026-12-04"


async def _over_sse(base: str) -> None:
    async with sse_client(f"{base}/sse") as (read, write), ClientSession(
            read, write, sampling_callback=sampling, client_info=types.Implementation(name="old-sse", version="1")
    ) as session:
        await session.initialize()
        await session.call_tool("summarize_repo", {})  # bridged: two live sampling rounds on the stream


async def _over_websocket(base: str) -> None:
    async with websockets.connect(base.replace("http", "ws") + "/ws", subprotocols=["mcp"]) as ws:
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "ws-tool", "version": "1"}}}))
        await ws.recv()
        await ws.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                  "params": {"name": "echo", "arguments": {"text": "hi"}}}))
        while json.loads(await ws.recv()).get("id") != 2:
            pass


async def _over_streamable_http(base: str) -> None:
    async with Client(f"{base}/mcp", mode="legacy", client_info=types.Implementation(name="ide", version="1")) as c:
        await c.call_tool("echo", {"text": "hi"})


def _metric(text: str, **labels: str) -> float:
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name.endswith("_total") and all(s.labels.get(k) == v for k, v in labels.items()))


async def test_each_door_is_a_transport_label_and_http_sse_a_deprecated_feature(aiohttp_server,
                                                                                   tmp_path: Path) -> None:
    db = str(tmp_path / "usage.db")
    server = await aiohttp_server(create_app(load_config(usage={"db": db, "flush_seconds": 3600,
                                                                "known_clients": ["old-sse", "ws-tool", "ide"]})))
    base = str(server.make_url("")).rstrip("/")
    await _over_sse(base)
    await _over_websocket(base)
    await _over_streamable_http(base)
    async with aiohttp.ClientSession() as http, http.get(f"{base}/metrics") as metrics:
        text = await metrics.text()
    await server.app[USAGE].flush()
    # initialize, the tools/list the SDK reads before its first call, tools/call
    assert _metric(text, client="old-sse", transport="http_sse") == 3
    assert _metric(text, client="ws-tool", transport="websocket") == 2
    assert _metric(text, client="ide", transport="streamable_http") >= 2
    assert _metric(text, transport="http_sse") == 3  # no other client's request is labelled with its door
    assert _metric(text, feature="HTTP+SSE transport") == 3
    store = UsageDb(db)
    try:
        report = build_report(store, Window(30), (day_number(TODAY) + 1) * DAY_MS - 1, {})
    finally:
        store.close()
    peer = report["peers"][0]
    assert peer["transports"]["http_sse"] == 3 and peer["transports"]["websocket"] == 2
    assert peer["transports"]["streamable_http"] >= 2
    by_client = {c["client"]: c for c in peer["clients"]}
    assert "HTTP+SSE transport" in by_client["old-sse"]["verdict"]
    assert "HTTP+SSE transport" not in by_client["ws-tool"]["verdict"]
    assert "transports: streamable_http" in render_table(report) and "http_sse 3" in render_table(report)
    assert 'class="transports">' in render_html(report) and "http_sse: 3" in render_html(report)


def test_a_store_from_before_the_upstream_label_keeps_its_rows(tmp_path: Path) -> None:
    path = str(tmp_path / "old.db")
    old = [f for f in KEY_FIELDS if f != "upstream"]
    conn = sqlite3.connect(path)
    conn.execute(f"CREATE TABLE usage ({', '.join(old)}, count, rounds, PRIMARY KEY ({', '.join(old)}))")
    conn.execute("CREATE INDEX usage_bucket ON usage (bucket)")
    row: dict[str, Any] = dict(bucket=0, peer="default", client="bot", client_version="1", era="modern",
                               revision="2026-07-28", method="tools/call", translated=1, inputs="sampling",
                               features="", outcome="ok", cause="", transport="streamable_http", count=4, rounds=4)
    conn.execute(f"INSERT INTO usage VALUES ({', '.join('?' * len(row))})", list(row.values()))
    conn.commit()
    conn.close()
    store = UsageDb(path)
    try:
        assert [(r["client"], r["count"], r["upstream"]) for r in store.rows(0)] == [("bot", 4, "")]
        store.write({(*[row[f] for f in old], ""): [1, 1], (*[row[f] for f in old], "crm"): [2, 2]}, {}, 400, 0)
        assert sorted((r["upstream"], r["count"]) for r in store.rows(0)) == [("", 5), ("crm", 2)]
    finally:
        store.close()


def test_a_store_from_before_the_transport_label_keeps_its_rows(tmp_path: Path) -> None:
    path = str(tmp_path / "old.db")
    old = [f for f in KEY_FIELDS if f not in ("transport", "upstream")]  # the first stores' key
    conn = sqlite3.connect(path)
    conn.execute(f"CREATE TABLE usage ({', '.join(old)}, count, rounds, PRIMARY KEY ({', '.join(old)}))")
    conn.execute("CREATE INDEX usage_bucket ON usage (bucket)")
    row: dict[str, Any] = dict(bucket=0, peer="default", client="ide", client_version="1", era="legacy",
                               revision="2025-11-25", method="tools/call", translated=1, inputs="",
                               features="legacy handshake", outcome="ok", cause="", count=7, rounds=0)
    conn.execute(f"INSERT INTO usage VALUES ({', '.join('?' * len(row))})", list(row.values()))
    conn.commit()
    conn.close()
    store = UsageDb(path)
    try:
        rows = list(store.rows(0))
        assert [(r["client"], r["count"], r["transport"]) for r in rows] == [("ide", 7, "streamable_http")]
        key = (*[row[f] for f in old], "streamable_http", "")
        store.write({key: [3, 0]}, {}, 400, 0)  # the upsert meets the migrated key
        assert [r["count"] for r in store.rows(0)] == [10]
    finally:
        store.close()
