"""``--upstream`` in front of an OAuth-protected server: the start-up probe reads the upstream's 401 challenge
and its RFC 9728 metadata, says which authorization server it trusts, and ``serve`` protects its own doors the
same way at once (their metadata names that authorization server, and tokens are required)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from adapters.authz import UpstreamProtection
from adapters.probe import UpstreamKind
from gateway.ops.probe import probe
from tests.gateway.auth.oidc import free_port
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[3]
AS = "https://auth.example.com"


async def protected_upstream(aiohttp_server: Any, *, metadata_at: str = "/meta/mcp",
                             document: dict[str, Any] | None = None) -> str:
    """A server that refuses every request with a Bearer challenge pointing at its metadata."""
    base: list[str] = []

    async def refuse(request: web.Request) -> web.Response:
        challenge = f'Bearer resource_metadata="{base[0]}{metadata_at}", scope="files:read"'
        return web.Response(status=401, headers={"WWW-Authenticate": challenge})

    async def metadata(request: web.Request) -> web.Response:
        doc = document if document is not None else {
            "resource": f"{base[0]}/mcp", "authorization_servers": [AS], "scopes_supported": ["files:read"]}
        return web.json_response(doc)

    app = web.Application()
    app.router.add_post("/mcp", refuse)
    app.router.add_get(metadata_at, metadata)
    server = await aiohttp_server(app)
    base.append(str(server.make_url("")).rstrip("/"))
    return f"{base[0]}/mcp"


async def test_the_probe_reads_the_challenge_and_the_metadata(aiohttp_server: Any) -> None:
    url = await protected_upstream(aiohttp_server)
    verdict = await probe(url, 5.0)
    assert verdict.kind is UpstreamKind.PROTECTED
    assert verdict.protection == UpstreamProtection(url, (AS,), ("files:read",))
    assert f"resource {url}" in verdict.message and AS in verdict.message


async def test_metadata_that_names_no_server_leaves_the_verdict_unclear(aiohttp_server: Any) -> None:
    url = await protected_upstream(aiohttp_server, document={"resource": "x"})
    verdict = await probe(url, 5.0)
    assert verdict.kind is UpstreamKind.UNCLEAR and verdict.protection is None


async def test_serve_protects_its_doors_like_the_upstream(aiohttp_server: Any, tmp_path: Path) -> None:
    url = await protected_upstream(aiohttp_server)
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "serve", "--port", str(port), "--upstream", url,
        "--usage-db", str(tmp_path / "usage.sqlite3"), cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        assert proc.stderr is not None
        seen: list[str] = []
        while not any("serving legacy MCP" in line for line in seen):
            line = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
            assert line, "".join(seen)
            seen.append(line)
        text = "".join(seen)
        assert "an OAuth-protected server" in text and f"doors protected like the upstream: tokens of {AS}" in text
        base = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as http:
            await listening(http, base)
            async with http.get(f"{base}/.well-known/oauth-protected-resource/mcp") as resp:
                doc = await resp.json()
            assert doc["resource"] == f"{base}/mcp" and doc["authorization_servers"] == [AS]
            assert doc["scopes_supported"] == ["files:read"]
            async with http.post(f"{base}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers={
                    "Accept": "application/json, text/event-stream"}) as resp:
                assert resp.status == 401
                assert f'resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"' in \
                    resp.headers["WWW-Authenticate"]
    finally:
        proc.terminate()
        await proc.wait()


async def listening(http: aiohttp.ClientSession, base: str) -> None:
    """The banner is logged as the server starts listening, not after: wait for /healthz."""
    async def healthy() -> bool:
        try:
            async with http.get(f"{base}/healthz") as resp:
                return resp.status == 200
        except aiohttp.ClientConnectorError:
            return False
    await until(healthy, f"{base} listens")


@pytest.mark.parametrize("challenge, expected", [
    ('Bearer resource_metadata="https://a/.well-known/oauth-protected-resource/x"',
     "https://a/.well-known/oauth-protected-resource/x"),
    ('Bearer realm="x"', "https://up.example/.well-known/oauth-protected-resource/mcp"),
    ('Basic resource_metadata="https://elsewhere/m"', "https://up.example/.well-known/oauth-protected-resource/mcp"),
    ('Bearer resource_metadata="javascript:alert(1)"', "https://up.example/.well-known/oauth-protected-resource/mcp"),
])
def test_where_the_metadata_is(challenge: str, expected: str) -> None:
    from adapters.authz import resource_metadata_location

    assert resource_metadata_location((challenge,), "https://up.example/mcp") == expected


async def _serve_forwarding(tmp_path: Path, url: str, port: int) -> tuple[int | None, str]:
    """``serve`` with the main upstream configured to get clients' tokens: its exit status (None: it served)
    and what it logged up to its banner or its end."""
    config = tmp_path / "forward.toml"
    config.write_text('[gateway.upstream_auth]\nauth = "forward"\nshares_audience = true\n')
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "serve", "--port", str(port), "--upstream", url, "--config", str(config),
        "--usage-db", str(tmp_path / "usage.sqlite3"), cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    assert proc.stderr is not None
    seen: list[str] = []
    try:
        while not any("serving legacy MCP" in line for line in seen):
            line = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
            if not line:
                return await proc.wait(), "".join(seen)
            seen.append(line)
        return None, "".join(seen)
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()


async def test_forward_to_an_upstream_of_another_audience_stops_the_start(aiohttp_server: Any,
                                                                          tmp_path: Path) -> None:
    url = await protected_upstream(aiohttp_server)  # its metadata names its own URL as the resource
    status, text = await _serve_forwarding(tmp_path, url, free_port())
    assert status not in (None, 0) and "Traceback" not in text
    assert f'gateway.upstream_auth: auth = "forward" would pass clients\' tokens to {url}' in text.splitlines()[-1]


async def test_forward_to_an_upstream_of_the_same_audience_serves(aiohttp_server: Any, tmp_path: Path) -> None:
    port = free_port()
    own = f"http://127.0.0.1:{port}/mcp"
    url = await protected_upstream(aiohttp_server, document={"resource": own, "authorization_servers": [AS]})
    status, text = await _serve_forwarding(tmp_path, url, port)
    assert status is None, text


def test_forward_refusal_names_both_audiences() -> None:
    from adapters.credentials import forward_refusal

    assert forward_refusal("x", "https://gw/mcp", ["https://gw/mcp", "https://gw/sse"]) is None
    refused = forward_refusal("upstreams.a", "https://up/mcp", ["https://gw/mcp"])
    assert refused is not None and "https://up/mcp" in refused and "https://gw/mcp" in refused
    assert "public_url" in (forward_refusal("x", "https://up/mcp", []) or "")
