"""The start-up probe against each kind of upstream (small aiohttp servers), the ``serve`` line it logs, the
``--require-upstream`` exit, and the same explanation reaching a client through a misdirected gateway."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path

from aiohttp import web

from adapters.probe import UpstreamKind
from gateway.ops.probe import probe
from tests.gateway.conftest import Legacy

ROOT = Path(__file__).resolve().parents[3]


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/mcp"


async def serve_app(aiohttp_server, handler) -> str:
    app = web.Application()
    app.router.add_route("*", "/mcp", handler)
    return str((await aiohttp_server(app)).make_url("/mcp"))


async def legacy_2025(request: web.Request) -> web.Response:
    """A 2025-era server: initialize opens a session; anything else without one is refused, as the SDKs do."""
    body = await request.json()
    if body.get("method") == "initialize":
        return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "serverInfo": {"name": "old-notes", "version": "3.1"}}}, headers={"Mcp-Session-Id": "s1"})
    return web.Response(status=400, text="Bad Request: Missing session ID")


async def not_found(_request: web.Request) -> web.Response:
    return web.Response(status=404, text="<html><body>Not Found</body></html>", content_type="text/html")


async def test_a_real_2026_core_is_named(aiohttp_server) -> None:
    from modern_server.app import create_app as create_core

    app = create_core()
    url = str((await aiohttp_server(app)).make_url("/mcp"))
    verdict = await probe(url)
    assert verdict.kind is UpstreamKind.MODERN and "2026-07-28 server: mcp-reference-core" in verdict.message


async def test_a_2025_server_is_told_apart_and_named(aiohttp_server) -> None:
    verdict = await probe(await serve_app(aiohttp_server, legacy_2025))
    assert verdict.kind is UpstreamKind.LEGACY and "old-notes 3.1" in verdict.message
    assert "served in reverse" in verdict.message


async def test_a_2025_server_that_refuses_everything_is_still_2025(aiohttp_server) -> None:
    async def refuse(_request: web.Request) -> web.Response:
        return web.Response(status=400, text="Bad Request: Missing session ID")

    assert (await probe(await serve_app(aiohttp_server, refuse))).kind is UpstreamKind.LEGACY


async def test_a_404_page_is_not_mcp(aiohttp_server) -> None:
    verdict = await probe(await serve_app(aiohttp_server, not_found))
    assert verdict.kind is UpstreamKind.NOT_MCP and "HTTP 404, an HTML page" in verdict.message


async def test_nothing_listening_is_unreachable() -> None:
    verdict = await probe(closed_port_url())
    assert verdict.kind is UpstreamKind.UNREACHABLE and "not reachable (connection failed" in verdict.message


async def test_a_client_of_a_misdirected_gateway_gets_the_same_explanation(upstream, make_gateway) -> None:
    upstream.script["tools/call"] = lambda body, request: web.Response(
        status=404, text="<html>Not Found</html>", content_type="text/html")
    legacy = Legacy(await make_gateway())
    await legacy.initialize()
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {}})
    error = (await legacy.events(resp))[-1]["error"] if resp.content_type == "text/event-stream" \
        else (await resp.json())["error"]
    assert "not MCP at that path (HTTP 404, an HTML page)" in error["message"]
    assert error["data"] == {"upstream": "http_status", "upstreamStatus": 404, "upstreamKind": "not_mcp"}


async def run_serve(tmp_path: Path, *flags: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "serve", "--port", "0", "--usage-db", str(tmp_path / "usage.sqlite3"),
        *flags, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)


async def test_require_upstream_exits_with_the_probe_line(tmp_path, aiohttp_server) -> None:
    url = await serve_app(aiohttp_server, not_found)
    proc = await run_serve(tmp_path, "--upstream", url, "--require-upstream")
    _, err = await proc.communicate()
    assert proc.returncode != 0
    assert f"upstream {url}: not MCP at that path (HTTP 404" in err.decode()
    assert "Traceback" not in err.decode()


async def test_without_require_upstream_it_logs_one_line_and_serves(tmp_path) -> None:
    url = closed_port_url()
    proc = await run_serve(tmp_path, "--upstream", url)
    try:
        assert proc.stderr is not None
        seen = []
        while not any("serving anyway" in line for line in seen):
            line = (await proc.stderr.readline()).decode()
            assert line, "".join(seen)
            seen.append(line)
        probe_lines = [line for line in seen if f"upstream {url}" in line]
        assert len(probe_lines) == 1 and "not reachable" in probe_lines[0]
        assert proc.returncode is None
    finally:
        proc.terminate()
        await proc.wait()


NAMED = """[upstreams.good]
url = "{good}"

[upstreams.gone]
url = "{gone}"

[upstreams.core]
url = "embedded"
"""


async def _named_config(tmp_path: Path, aiohttp_server) -> tuple[Path, str, str]:
    from modern_server.app import create_app as create_core

    good = str((await aiohttp_server(create_core())).make_url("/mcp"))
    gone = closed_port_url()
    path = tmp_path / "named.toml"
    path.write_text(NAMED.format(good=good, gone=gone))
    return path, good, gone


async def test_named_upstreams_are_probed_and_reported_by_name(tmp_path, aiohttp_server) -> None:
    config, good, gone = await _named_config(tmp_path, aiohttp_server)
    proc = await run_serve(tmp_path, "--config", str(config))
    try:
        assert proc.stderr is not None
        seen: list[str] = []
        while not any("serving legacy MCP" in line for line in seen):  # the banner: probing is over
            line = (await proc.stderr.readline()).decode()
            assert line, "".join(seen)
            seen.append(line)
        named = [line for line in seen if "upstream '" in line]
        assert len(named) == 2  # the embedded one runs in the process: nothing to probe
        assert any(f"upstream 'good' ({good}): a 2026-07-28 server: mcp-reference-core" in line for line in named)
        assert any(f"upstream 'gone' ({gone}): not reachable" in line and "serving anyway" in line
                   for line in named)
        assert proc.returncode is None
    finally:
        proc.terminate()
        await proc.wait()


async def test_require_upstream_fails_when_a_named_upstream_is_unreachable(tmp_path, aiohttp_server) -> None:
    config, good, gone = await _named_config(tmp_path, aiohttp_server)
    proc = await run_serve(tmp_path, "--config", str(config), "--require-upstream")
    _, err = await proc.communicate()
    text = err.decode()
    assert proc.returncode != 0 and "Traceback" not in text
    assert f"upstream 'gone' ({gone}): not reachable" in text and "(--require-upstream)" in text
    assert good not in text.splitlines()[-1]  # only what failed is blamed


async def test_a_named_upstream_with_the_gateways_credential_is_probed_with_it(aiohttp_server) -> None:
    from gateway.config.settings import load_config
    from gateway.ops.probe import probe_all, targets

    async def guarded(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != "Bearer s3cret":
            return web.Response(status=401, headers={"WWW-Authenticate": "Bearer"})
        body = await request.json()
        return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": {
            "resultType": "complete", "supportedVersions": ["2026-07-28"], "capabilities": {},
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "guarded", "version": "2"}}}})

    url = await serve_app(aiohttp_server, guarded)
    config = load_config(upstream_url=url, pins={"upstreams": {"private": {
        "url": url, "auth": "gateway", "token_env": "PRIVATE_TOKEN"}}})
    found = targets(config, {"PRIVATE_TOKEN": "s3cret"})
    assert [(t.name, t.authorization) for t in found] == [(None, None), ("private", "Bearer s3cret")]
    default, private = await probe_all(found, 5.0)
    assert default[1].kind is UpstreamKind.UNCLEAR  # the default upstream gets clients' tokens, not ours
    assert private[1].kind is UpstreamKind.MODERN and "guarded 2" in private[1].message
