"""Configuration loading, the documented example, and the CLI main command (embedded core)."""

from __future__ import annotations

import gc
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pydantic import BaseModel, ValidationError

from gateway.config.settings import ConfigError, GatewayConfig, load_config
from gateway.http.app import create_app
from gateway.http.reverse_bridges import reverse_settings
from gateway.ops.cli import parser, served_app
from gateway.ops.loops import tune_gc
from tests.gateway.conftest import Legacy
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "config" / "gateway.example.toml"


def test_example_documents_every_key_and_loads_to_the_defaults() -> None:
    """Every key of [gateway] and of each of its tables ([gateway.limits], [gateway.usage], ...) is in the example,
    set or commented out, and the example loads to the defaults."""
    text = EXAMPLE.read_text()
    undocumented = []
    for name, field in GatewayConfig.model_fields.items():
        if name == "pins":  # the top-level tables, documented by gateway.peers.example.toml
            continue
        model = field.annotation if isinstance(field.annotation, type) else None
        if model is not None and issubclass(model, BaseModel):
            assert f"[gateway.{name}]" in text, name
            undocumented += [f"{name}.{k}" for k in model.model_fields if f"{k} =" not in text]
        elif f"{name} =" not in text:
            undocumented.append(name)
    assert not undocumented
    loaded = load_config(EXAMPLE)
    assert loaded.model_dump(exclude={"pins"}) == GatewayConfig().model_dump(exclude={"pins"})


def test_overrides_and_strictness(tmp_path) -> None:
    path = tmp_path / "g.toml"
    path.write_text('[gateway]\nport = 9000\n[gateway.limits]\nmax_rounds = 3\n')
    config = load_config(path, port=9100, upstream_url=None)
    assert config.port == 9100 and config.limits.max_rounds == 3 and config.upstream_url is None
    assert config.limits.to_limits().max_rounds == 3
    path.write_text('[gateway]\nno_such_key = 1\n')
    with pytest.raises(Exception, match="no_such_key"):
        load_config(path)
    with pytest.raises(ValidationError):
        config.port = 1  # frozen


def test_gateway_reverse_reaches_the_bridges_settings(tmp_path) -> None:
    """``[gateway.reverse]`` keys become each reverse bridge's settings (gateway.http.reverse_bridges)."""
    path = tmp_path / "gateway.toml"
    path.write_text("[gateway.reverse]\ntask_watch_recheck_seconds = 2.5\nanswer_timeout_seconds = 7.0\n")
    settings = reverse_settings(load_config(path), "default", "http://127.0.0.1:9/mcp", "r1")
    assert (settings.watch_recheck_seconds, settings.answer_timeout_seconds, settings.replica) == (2.5, 7.0, "r1")
    with pytest.raises(ConfigError):
        path.write_text("[gateway.reverse]\ntask_watch_recheck_seconds = 0\n")
        load_config(path)


def test_cli_arguments() -> None:
    args = parser().parse_args(["serve", "--port", "0", "--upstream", "http://u/mcp"])
    assert (args.command, args.port, args.upstream, args.host, args.config) == ("serve", 0, "http://u/mcp", None, None)
    assert args.gc_gen0 == 10_000 and parser().parse_args(["serve", "--gc-gen0", "0"]).gc_gen0 == 0


async def test_serve_tunes_the_gc_once_the_app_started(aiohttp_client, tmp_path) -> None:
    pytest.importorskip("modern_server.app")
    before = gc.get_threshold()
    args = parser().parse_args(["serve", "--gc-gen0", "4321", "--usage-db", str(tmp_path / "usage.sqlite3")])
    app, config = served_app(args)
    assert config.usage.db == str(tmp_path / "usage.sqlite3") and gc.get_threshold() == before
    try:
        client = Legacy(await aiohttp_client(app))  # runs the start-up hooks, as run_app does
        assert gc.get_threshold()[0] == 4321 and gc.get_freeze_count() > 1000
        assert (await client.initialize())["serverInfo"]["name"] == "mcp-reference-core"
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_gc_tuning_freezes_the_start_up_heap_and_raises_the_young_threshold() -> None:
    before = gc.get_threshold()
    try:
        tune_gc(0)  # 0: Python's defaults, nothing frozen
        assert gc.get_threshold() == before and gc.get_freeze_count() == 0
        tune_gc(12_345)
        assert gc.get_threshold() == (12_345, *before[1:])
        assert gc.get_freeze_count() > 1000  # this process's modules, pydantic's validators...
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


async def test_embedded_core_in_the_same_process(aiohttp_client) -> None:
    pytest.importorskip("modern_server.app")
    client = Legacy(await aiohttp_client(create_app(load_config())))
    result = await client.initialize()
    assert result["serverInfo"]["name"] == "mcp-reference-core"
    message = await client.call("tools/call", {"name": "echo", "arguments": {"text": "embedded"}})
    assert message["result"]["content"][0]["text"] == "embedded"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_python_m_gateway_serve_is_the_main_command(tmp_path) -> None:
    pytest.importorskip("modern_server.app")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--port", str(port),
                             "--usage-db", str(tmp_path / "usage.sqlite3")], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "cli-test", "version": "1"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    try:
        async with aiohttp.ClientSession() as http:
            # Start-up imports the gateway and the embedded core: up to a minute on a loaded 2-core machine.
            async def answered() -> tuple[Any, Any] | None:
                try:
                    async with http.post(f"http://127.0.0.1:{port}/mcp", json=body, headers=headers) as resp:
                        return resp, json.loads(await resp.text())
                except aiohttp.ClientConnectionError:
                    assert proc.poll() is None, "the gateway exited during start-up"
                    return None
            resp, message = await until(answered, "the gateway comes up", seconds=60)
        assert resp.headers["Mcp-Session-Id"] and message["result"]["protocolVersion"] == "2025-11-25"
    finally:
        proc.terminate()
        proc.wait(10)


def test_serve_store_flag_overrides_only_the_files_url(tmp_path) -> None:
    """``--store URL`` replaces [gateway.store] url and keeps the file's prefix; ``memory`` is the in-memory store;
    without the flag the file (or the default: in memory) decides."""
    path = tmp_path / "g.toml"
    path.write_text('[gateway.store]\nurl = "redis://127.0.0.1:1/0"\nprefix = "blue:"\n')
    usage = ["--usage-db", str(tmp_path / "usage.sqlite3")]
    _, config = served_app(parser().parse_args(["serve", "--config", str(path), *usage]))
    assert (config.store.url, config.store.prefix) == ("redis://127.0.0.1:1/0", "blue:")
    _, config = served_app(parser().parse_args(["serve", "--config", str(path), "--store", "memory", *usage]))
    assert (config.store.url, config.store.prefix) == (None, "blue:")
    _, config = served_app(parser().parse_args(["serve", "--store", "redis://10.0.0.1:6379/2", *usage]))
    assert (config.store.url, config.store.prefix, config.store.timeout_seconds) == ("redis://10.0.0.1:6379/2",
                                                                                     "mcpgw:", 2.0)
    assert served_app(parser().parse_args(["serve", *usage]))[1].store.url is None
    with pytest.raises(SystemExit, match=r"--store: .*redis://"):
        served_app(parser().parse_args(["serve", "--store", "http://nope", *usage]))
    path.write_text('[gateway.store]\nurl = "mysql://x"\n')
    with pytest.raises(ConfigError, match=r"gateway.store.url"):
        load_config(path)


def test_the_banner_says_where_what_and_where_records_go(monkeypatch) -> None:
    from gateway.ops.cli import banner

    monkeypatch.delenv("GATEWAY_ADMIN_TOKEN", raising=False)
    line = banner(load_config(port=8808, usage={"db": "/var/gw/usage.sqlite3"}))
    assert line == ("serving legacy MCP at http://127.0.0.1:8808/mcp; upstream: the embedded core; "
                    "session store: memory; usage database: /var/gw/usage.sqlite3; "
                    "/migration disabled (set GATEWAY_ADMIN_TOKEN)")
    shared = banner(load_config(port=1, store={"url": "redis://user:s3cret@redis.internal:6379/2"}))
    assert "session store: redis://user@redis.internal:6379/2;" in shared and "s3cret" not in shared
    monkeypatch.setenv("GATEWAY_ADMIN_TOKEN", "t")
    assert "upstream: http://u/mcp" in banner(load_config(upstream_url="http://u/mcp", port=1))
    assert banner(load_config(port=1)).endswith("/migration enabled")
