"""Usage accounting end to end: real SDK clients (legacy and 2026-07-28) through the gateway app with
its embedded core; exact counts from scripted mixes; history kept across a restart; /metrics parses."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from prometheus_client.parser import text_string_to_metric_families

from gateway.config.settings import load_config
from gateway.http.app import create_app
from gateway.telemetry.usage import USAGE

pytest.importorskip("modern_server.app")


async def sampling(context, params):
    prompt = params.messages[0].content.text
    answer = json.dumps(prompt.splitlines()[1:4]) if "JSON array" in prompt else "A small repository."
    return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text=answer),
                                     model="test-model", stop_reason="endTurn")


async def roots(context):
    return types.ListRootsResult(roots=[types.Root(uri="file:///work/notes", name="notes")])


def info(name: str, version: str = "1.0") -> types.Implementation:
    return types.Implementation(name=name, version=version)


async def start(aiohttp_server, db: str, **usage: Any):
    config = load_config(sse_retry_ms=50, usage={"db": db, "flush_seconds": 3600, **usage})
    server = await aiohttp_server(create_app(config))
    return server, str(server.make_url("/mcp"))


def rows(db: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM usage")]
    finally:
        conn.close()


def count(table: list[dict[str, Any]], **where: Any) -> int:
    return sum(r["count"] for r in table if all(r[k] == v for k, v in where.items()))


async def legacy_script(url: str, name: str = "ide-plugin", version: str = "2.1") -> None:
    async with Client(url, mode="legacy", sampling_callback=sampling, list_roots_callback=roots,
                      client_info=info(name, version)) as client:
        await client.list_tools()
        for i in range(3):
            await client.call_tool("echo", {"text": f"hi {i}"})
        await client.call_tool("summarize_repo", {"repo": "demo"})  # two live sampling rounds
        await client.call_tool("workspace_scan", {})  # one roots/list round
        await client.send_ping()
        await client.set_logging_level("warning")


async def modern_script(url: str) -> None:
    async with Client(url, mode="2026-07-28", sampling_callback=sampling, client_info=info("agent", "0.9")) as client:
        await client.list_tools()
        await client.call_tool("echo", {"text": "x"})
        await client.call_tool("summarize_repo", {"repo": "demo"})  # 3 requests: the SDK drives MRTR itself


async def test_a_scripted_mix_is_counted_exactly(aiohttp_server, tmp_path) -> None:
    db = str(tmp_path / "usage.db")
    server, url = await start(aiohttp_server, db)
    await legacy_script(url)
    await legacy_script(url)
    await modern_script(url)
    await server.app[USAGE].flush()
    table = rows(db)
    legacy = dict(era="legacy", client="ide-plugin", client_version="2.1", revision="2025-11-25", peer="default")
    assert count(table, **legacy) == 2 * 9
    assert count(table, **legacy, method="initialize", translated=0) == 2
    assert count(table, **legacy, method="tools/list", translated=1) == 2
    assert count(table, **legacy, method="tools/call", translated=1) == 2 * 5
    assert count(table, **legacy, method="tools/call", inputs="sampling", features="legacy handshake,sampling") == 2
    assert count(table, **legacy, method="tools/call", inputs="roots", features="legacy handshake,roots") == 2
    assert count(table, **legacy, method="ping", features="legacy handshake,ping", translated=0) == 2
    assert count(table, **legacy, method="logging/setLevel", features="legacy handshake,logging/setLevel") == 2
    assert sum(r["rounds"] for r in table if r["inputs"] == "sampling") == 2 * 2  # two sampling rounds each
    assert sum(r["rounds"] for r in table if r["inputs"] == "roots") == 2 * 1
    modern = dict(era="modern", client="agent", client_version="0.9", revision="2026-07-28", translated=0)
    assert count(table, **modern) == 5
    assert count(table, **modern, method="tools/list") == 1 and count(table, **modern, method="tools/call") == 4
    assert count(table, **modern, method="tools/call", features="sampling") == 2  # the two MRTR retries
    assert count(table, outcome="ok") == 2 * 9 + 5 and sum(r["count"] for r in table) == 2 * 9 + 5
    assert not [r for r in table if "hi 0" in json.dumps(r) or "demo" in json.dumps(r)]  # never content


async def test_failure_causes_end_to_end(aiohttp_server, tmp_path) -> None:
    db = str(tmp_path / "usage.db")
    server, url = await start(aiohttp_server, db)
    async with Client(url, mode="legacy", client_info=info("no-sampling")) as client:  # declares no sampling
        with pytest.raises(MCPError):
            await client.call_tool("summarize_repo", {"repo": "demo"})
    await server.close()
    config = load_config(sse_retry_ms=50, limits={"max_rounds": 1}, usage={"db": db, "flush_seconds": 3600})
    server = await aiohttp_server(create_app(config))
    async with Client(str(server.make_url("/mcp")), mode="legacy", sampling_callback=sampling,
                      client_info=info("capped")) as client:
        with pytest.raises(MCPError):
            await client.call_tool("summarize_repo", {"repo": "demo"})  # needs 2 rounds, the cap is 1
    await server.close()
    table = rows(db)
    assert count(table, client="no-sampling", method="tools/call", outcome="error", cause="missing capability") == 1
    assert count(table, client="capped", method="tools/call", outcome="error", cause="round cap") == 1


async def test_restart_keeps_the_history(aiohttp_server, tmp_path) -> None:
    db = str(tmp_path / "usage.db")
    server, url = await start(aiohttp_server, db)
    async with Client(url, mode="2026-07-28", client_info=info("agent")) as client:
        await client.call_tool("echo", {"text": "before"})
    await server.close()  # the app's cleanup flushes what is still in memory
    assert count(rows(db), client="agent", method="tools/call") == 1
    server, url = await start(aiohttp_server, db)
    async with Client(url, mode="2026-07-28", client_info=info("agent")) as client:
        await client.call_tool("echo", {"text": "after"})
    await server.close()
    assert count(rows(db), client="agent", method="tools/call") == 2
    assert len([r for r in rows(db) if r["method"] == "tools/call"]) == 1  # one hourly row, summed


async def initialize(http, name: str, version: str = "1") -> str:
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": name, "version": version}}}
    async with http.post("/mcp", json=body, headers={"Accept": "application/json, text/event-stream"}) as resp:
        assert resp.status == 200
        return resp.headers["Mcp-Session-Id"]


async def test_label_cardinality_is_bounded(aiohttp_server, aiohttp_client, tmp_path) -> None:
    db = str(tmp_path / "usage.db")
    server, _ = await start(aiohttp_server, db, max_clients=3, max_versions_per_client=2)
    http = await aiohttp_client(server)
    for i in range(8):
        await initialize(http, f"client-{i}")
    for v in range(5):
        await initialize(http, "client-0", f"v{v}")
    await server.app[USAGE].flush()
    table = rows(db)
    assert {r["client"] for r in table} == {"client-0", "client-1", "client-2", "other"}
    assert count(table, client="other") == 5 and count(table, client="client-0") == 6
    assert {r["client_version"] for r in table if r["client"] == "client-0"} == {"1", "v0", "other"}
    text = await (await http.get("/metrics")).text()
    clients = {s.labels["client"] for f in text_string_to_metric_families(text) for s in f.samples
               if "client" in s.labels}
    assert clients == {"other"}  # /metrics labels known names and configured peers' clients: none of these


async def test_metrics_parse_with_the_prometheus_parser(aiohttp_server, aiohttp_client, tmp_path) -> None:
    server, url = await start(aiohttp_server, str(tmp_path / "usage.db"), known_clients=["ide-plugin"])
    await legacy_script(url)
    await modern_script(url)
    http = await aiohttp_client(server)
    await initialize(http, "lingering")  # a session still open: the gauge counts it
    resp = await http.get("/metrics")
    assert resp.status == 200 and resp.content_type.startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(await resp.text())}

    def total(name: str, sample: str, **labels: str) -> float:
        return sum(s.value for s in families[name].samples
                   if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()))
    assert total("mcp_gateway_requests", "mcp_gateway_requests_total", era="legacy", client="ide-plugin") == 9
    assert total("mcp_gateway_requests", "mcp_gateway_requests_total", era="modern") == 5
    assert total("mcp_gateway_deprecated_feature_uses", "mcp_gateway_deprecated_feature_uses_total",
                 feature="sampling") == 1 + 2
    assert total("mcp_gateway_bridged_inputs", "mcp_gateway_bridged_inputs_total", input_kind="roots") == 1
    assert total("mcp_gateway_mrtr_rounds", "mcp_gateway_mrtr_rounds_total") == 3
    # Every upstream call of the 6 bridged requests:
    assert total("mcp_gateway_mrtr_round_seconds", "mcp_gateway_mrtr_round_seconds_count") == 1 + 3 + 3 + 2
    assert total("mcp_gateway_translation_overhead_seconds", "mcp_gateway_translation_overhead_seconds_count") == 6
    assert total("mcp_gateway_request_seconds", "mcp_gateway_request_seconds_count") == 9 + 5 + 1  # + lingering
    assert total("mcp_gateway_active_legacy_sessions", "mcp_gateway_active_legacy_sessions",
                 revision="2025-11-25") >= 1


async def test_random_names_cannot_take_the_labels_of_known_and_configured_clients(aiohttp_server, aiohttp_client,
                                                                                    tmp_path) -> None:
    """60 invented names first (past max_clients, 50): a well-known client name (Claude Desktop's) and the
    client of a configured peer arriving afterwards still get their own /metrics label; the invented names are
    ``other`` there. The store still keeps the first 50 invented names for the report."""
    config_file = tmp_path / "peers.toml"
    config_file.write_text('[[peers]]\nname = "ci"\nclient_name = "acme-ci-*"\n')
    db = str(tmp_path / "usage.db")
    config = load_config(config_file, sse_retry_ms=50, usage={"db": db, "flush_seconds": 3600})
    server = await aiohttp_server(create_app(config))
    http = await aiohttp_client(server)
    for i in range(60):
        await initialize(http, f"random-{i}")
    await initialize(http, "claude-ai")
    await initialize(http, "acme-ci-runner")
    text = await (await http.get("/metrics")).text()
    labels = {(s.labels["peer"], s.labels["client"]) for f in text_string_to_metric_families(text)
              for s in f.samples if s.name == "mcp_gateway_requests_total"}
    assert labels == {("default", "other"), ("default", "claude-ai"), ("ci", "acme-ci-runner")}
    await server.app[USAGE].flush()
    stored = {r["client"] for r in rows(db)}
    assert stored == {*(f"random-{i}" for i in range(50)), "other", "claude-ai", "acme-ci-runner"}
