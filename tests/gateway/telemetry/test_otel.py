"""OpenTelemetry spans (``[gateway.otel] enabled``), read back from the SDK's in-memory exporter: a bridged call is
one server span with a child per upstream round and per live request to the client, its W3C traceparent sent
upstream with each round; plain requests get one span each; no content unless the trace keeps content."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed (pip install '.[otel]')")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from bench.procs import free_port
from gateway.config.settings import load_config
from gateway.http.app import create_app, watchers
from gateway.session.runtime import Gateway
from gateway.telemetry.usage import UsageObserver
from tests.gateway.conftest import Legacy
from tests.gateway.http.test_bridge_shell import SAMPLED, two_rounds
from tests.waiting import accepts, until

ROOT = Path(__file__).resolve().parents[3]
SECRET = "hunter2-argument"
EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> InMemorySpanExporter:
    """The process's tracer provider (set once: the API allows one) exporting to memory, emptied per test."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
    EXPORTER.clear()
    return EXPORTER


async def _legacy(aiohttp_client: Any, upstream: Any, **config: Any) -> Legacy:
    app = create_app(load_config(upstream_url=upstream.url, otel={"enabled": True}, **config))
    legacy = Legacy(await aiohttp_client(app))
    await legacy.initialize()
    return legacy


async def _bridged_call(legacy: Legacy) -> None:
    """tools/call over two input rounds (two samplings, then one): three upstream rounds."""
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {"secret": SECRET}})
    await legacy.next_event(resp)  # priming
    for asked in (2, 1):
        asks = [(await legacy.next_event(resp))[1] for _ in range(asked)]
        for ask in asks:
            assert ask is not None and await legacy.answer(ask["id"], SAMPLED) == 202
    _, final = await legacy.next_event(resp)
    assert final is not None and final["result"]["content"][0]["text"] == "bridged"


def _by_name(finished: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return sorted((s for s in finished if s.name == name), key=lambda s: s.start_time or 0)


async def test_a_bridged_call_is_a_span_with_rounds_and_client_requests(spans, upstream, aiohttp_client) -> None:
    upstream.script["tools/call"] = two_rounds
    legacy = await _legacy(aiohttp_client, upstream)
    await _bridged_call(legacy)
    await legacy.client.close()
    finished = spans.get_finished_spans()
    (root,) = _by_name(finished, "tools/call t")
    assert root.kind is SpanKind.SERVER and root.attributes is not None
    assert dict(root.attributes) | {"mcp_gateway.input_kinds": None} == {
        "mcp.method.name": "tools/call", "mcp_gateway.kind": "bridged", "mcp.protocol.version": "2025-11-25",
        "mcp_gateway.peer": "default", "gen_ai.tool.name": "t", "mcp_gateway.rounds": 2,
        "mcp_gateway.upstream_calls": 3, "mcp_gateway.input_kinds": None}
    assert tuple(root.attributes["mcp_gateway.input_kinds"]) == ("sampling",)
    rounds = _by_name(finished, "upstream tools/call")
    asks = _by_name(finished, "client sampling/createMessage")
    assert [r.attributes["mcp_gateway.round"] for r in rounds] == [0, 1, 2]  # type: ignore[index]
    assert [r.attributes["mcp_gateway.outcome"] for r in rounds] == [  # type: ignore[index]
        "input_required", "input_required", "finished"]
    assert [r.attributes["mcp_gateway.request_state_echoed"] for r in rounds] == [  # type: ignore[index]
        False, True, True]
    assert len(asks) == 3 and all(a.attributes["mcp_gateway.input_kind"] == "sampling" for a in asks)  # type: ignore[index]
    assert root.context is not None
    for child in (*rounds, *asks):
        assert child.parent is not None and child.parent.span_id == root.context.span_id
        assert child.context is not None and child.context.trace_id == root.context.trace_id
        assert root.start_time <= child.start_time and child.end_time <= root.end_time  # type: ignore[operator]
    # Each round's upstream request carried that round's span as its W3C traceparent.
    sent = [h.get("Traceparent") or h.get("traceparent") for h, b in zip(upstream.headers, upstream.received,
                                                                          strict=True)
            if b.get("method") == "tools/call"]
    assert sent == [f"00-{root.context.trace_id:032x}-{r.context.span_id:016x}-{r.context.trace_flags:02x}"  # type: ignore[union-attr]
                    for r in rounds]
    assert SECRET not in json.dumps([dict(s.attributes or {}) for s in finished], default=str)


async def test_plain_requests_get_one_span_each(spans, upstream, aiohttp_client) -> None:
    legacy = await _legacy(aiohttp_client, upstream)
    assert "result" in await legacy.call("ping")
    error = await legacy.call("tools/call", {"name": "nope"})  # the fake upstream answers -32601
    await legacy.client.close()
    finished = spans.get_finished_spans()
    (handshake,) = _by_name(finished, "initialize")
    (ping,) = _by_name(finished, "ping")
    (failed,) = _by_name(finished, "tools/call nope")
    assert handshake.attributes["mcp_gateway.kind"] == "initialize"  # type: ignore[index]
    assert ping.attributes["mcp_gateway.kind"] == "local" and ping.status.status_code is StatusCode.UNSET  # type: ignore[index]
    assert failed.attributes["mcp_gateway.kind"] == "bridged"  # type: ignore[index]
    assert failed.attributes["rpc.jsonrpc.error_code"] == error["error"]["code"]  # type: ignore[index]
    assert failed.status.status_code is StatusCode.ERROR
    assert not _by_name(finished, "notifications/initialized")  # notifications are not requests


PEERS = {"peers": [{"name": "debug", "client_name": "raw", "trace": {"content": True}}]}
QUIET = {"peers": [{"name": "quiet", "client_name": "raw", "trace": {"enabled": False}}]}


async def test_a_peer_with_trace_content_gets_arguments_and_a_quiet_peer_no_spans(
        spans, upstream, aiohttp_client, tmp_path) -> None:
    upstream.script["tools/call"] = two_rounds
    path = tmp_path / "peers.toml"
    _write_toml(path, PEERS)
    legacy = await _legacy(aiohttp_client, upstream, path=str(path))
    await _bridged_call(legacy)
    await legacy.client.close()
    (root,) = _by_name(spans.get_finished_spans(), "tools/call t")
    assert root.attributes is not None and json.loads(str(root.attributes["mcp_gateway.arguments"])) == {
        "secret": SECRET}
    spans.clear()
    _write_toml(path, QUIET)
    legacy = await _legacy(aiohttp_client, upstream, path=str(path))
    await _bridged_call(legacy)
    await legacy.client.close()
    assert spans.get_finished_spans() == ()


def test_without_otel_on_the_app_watches_only_usage() -> None:
    gateway = Gateway(load_config(), store=None, upstream=None)  # type: ignore[arg-type]
    assert isinstance(watchers(gateway), UsageObserver)


def _write_toml(path: Any, data: dict[str, Any]) -> None:
    lines = []
    for peer in data["peers"]:
        lines += ["[[peers]]", f'name = "{peer["name"]}"', f'client_name = "{peer["client_name"]}"', "[peers.trace]"]
        lines += [f"{k} = {str(v).lower()}" for k, v in peer["trace"].items()]
    path.write_text("\n".join(lines) + "\n")


async def test_serve_otel_exports_over_otlp_to_the_configured_endpoint(aiohttp_server, tmp_path) -> None:
    """``serve --otel``, a real process, sends its spans to an OTLP/HTTP endpoint named by OTEL_* variables."""
    received: list[bytes] = []

    async def collect(request: web.Request) -> web.Response:
        received.append(await request.read())
        return web.Response(body=b"", content_type="application/x-protobuf")

    collector = web.Application()
    collector.router.add_post("/v1/traces", collect)
    endpoint = str((await aiohttp_server(collector)).make_url("")).rstrip("/")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
           "OTEL_SERVICE_NAME": "gw-under-test", "OTEL_BSP_SCHEDULE_DELAY": "50"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "serve", "--otel", "--port", str(port), "--usage-db",
        str(tmp_path / "usage.sqlite3"), "--workspace", str(tmp_path), cwd=tmp_path, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        await _listening(port, proc)
        async with aiohttp.ClientSession() as http:
            init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "otlp", "version": "1"}}}
            async with http.post(f"http://127.0.0.1:{port}/mcp", json=init,
                                 headers={"Accept": "application/json, text/event-stream"}) as resp:
                assert resp.status == 200
    finally:
        proc.terminate()  # a graceful stop: the exporter's queue is flushed at the app's end
        _, err = await proc.communicate()
    body = b"".join(received)
    assert b"gw-under-test" in body and b"initialize" in body and b"mcp_gateway.kind" in body, err.decode()[-2000:]
    assert f"exported over OTLP to {endpoint}" in err.decode()


async def _listening(port: int, proc: asyncio.subprocess.Process) -> None:
    def started() -> Any:
        assert proc.returncode is None, "serve exited early"
        return accepts(port)
    await until(started, "serve listens", seconds=30)
