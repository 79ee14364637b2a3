"""Authorization on replicas: three gateways on one Redis behind a real HAProxy in plain round robin, each
checking tokens itself (``[gateway.auth]``) from a real authorization server (node oidc-provider). The official
SDK's OAuth client discovers, authorizes and runs bridged rounds whose requests land on different replicas;
then Redis, every usage database and every trace file are scanned for the token: none holds it."""

from __future__ import annotations

import base64
import json
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from tests.faults.procs import Proc
from tests.gateway.auth.test_sdk_oauth import Memory
from tests.gateway.http.test_e2e_sdk import elicitation_answering, pick_first, sampling
from tests.gateway.ops.test_haproxy import (
    REPLICAS,
    Balancer,
    _delete_keys,
    _free_port,
    _redis,
    _wait_listening,
    haproxy_config,
)
from tests.gateway.ts_sdk import CONFORMANCE, node


@dataclass
class Secured:
    url: str
    issuer: str
    tmp: Path
    redis_url: str
    prefix: str


def _authorization_server(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    if not (CONFORMANCE / "node_modules" / "oidc-provider").exists():
        pytest.skip("oidc-provider is not installed (bash tests/conformance/install.sh; .ci/run does it)")
    port = _free_port()
    proc = subprocess.Popen([*node(), str(CONFORMANCE / "authorization_server.mjs"), str(port)], cwd=CONFORMANCE,
                            stdout=subprocess.PIPE, stderr=open(tmp / "as.stderr", "wb"))
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith(b"ready "), line
    return proc, line.decode().split()[1]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    haproxy = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
    if haproxy is None:
        pytest.skip("haproxy is not installed (apt-get install haproxy)")
    tmp = tmp_path_factory.mktemp("oauth-replicas")
    redis_url, private = _redis(tmp)
    prefix = f"test-oauth-{secrets.token_hex(4)}:"
    auth_server, issuer = _authorization_server(tmp)
    started: list[Proc] = []
    front_port = _free_port()
    try:
        (tmp / "core.toml").write_text(f'database = "{tmp / "core.sqlite3"}"\n')
        core = Proc("core", ["-m", "modern_server", "--port", "{port}", "--config", str(tmp / "core.toml"),
                             "--no-access-log"], tmp)
        started.append(core)
        for n in range(REPLICAS):
            config = tmp / f"gw{n}.toml"
            config.write_text(
                f'[gateway]\nsse_retry_ms = 100\npublic_url = "http://127.0.0.1:{front_port}"\n\n'
                f'[gateway.store]\nprefix = "{prefix}"\n\n'
                f'[gateway.trace]\nfile = "{tmp / f"gw{n}-trace.jsonl"}"\n\n'
                f'[gateway.auth]\nauthorization_servers = ["{issuer}"]\nrequired_scopes = ["mcp:tools"]\n')
            started.append(Proc(f"gw{n}", ["-m", "gateway", "serve", "--port", "{port}", "--upstream", core.url,
                                           "--store", redis_url, "--config", str(config), "--usage-db",
                                           str(tmp / f"gw{n}-usage.sqlite3")], tmp))
        for proc in started:
            _wait_listening(proc)
        (tmp / "haproxy.cfg").write_text(haproxy_config(front_port, [p.port for p in started[1:]]))
        front = Balancer(haproxy, tmp / "haproxy.cfg", front_port, tmp)
        started.append(front)
        _wait_listening(front)
        yield Secured(front.url, issuer, tmp, redis_url, prefix)
    finally:
        for proc in reversed(started):
            proc.stop()
        auth_server.terminate()
        auth_server.wait()
        _delete_keys(redis_url, prefix)
        if private is not None:
            private.stop()


def _redis_bytes(url: str, prefix: str) -> bytes:
    """Every key and value the gateways wrote under ``prefix`` (strings, hashes, sets, sorted sets, lists)."""
    import redis as sync_redis

    client = sync_redis.Redis.from_url(url)
    out = bytearray()
    try:
        for key in client.scan_iter(match=f"{prefix}*"):
            out += key
            kind = client.type(key)
            if kind == b"string":
                out += client.get(key) or b""
            elif kind == b"hash":
                for field, value in client.hgetall(key).items():
                    out += field + value
            elif kind in (b"set", b"zset"):
                out += b"".join(client.zrange(key, 0, -1) if kind == b"zset" else client.smembers(key))
            elif kind == b"list":
                out += b"".join(client.lrange(key, 0, -1))
            elif kind == b"stream":
                out += repr(client.xrange(key)).encode()
    finally:
        client.close()
    return bytes(out)


async def test_the_sdk_authorizes_through_the_balancer_and_no_token_is_kept(secured: Secured) -> None:
    storage = Memory()
    provider = ClientCredentialsOAuthProvider(secured.url, storage, "gateway-tests", "secret-gateway-tests",
                                              scope="mcp:tools", issuer=secured.issuer)
    elicit = elicitation_answering(action="accept", content=pick_first)
    async with create_mcp_http_client(auth=provider) as http:
        async with Client(streamable_http_client(secured.url, http_client=http), mode="legacy",
                          sampling_callback=sampling, elicitation_callback=elicit) as client:
            summary = await client.call_tool("summarize_repo", {"repo": "demo"})
            deleted = await client.call_tool("notes_delete", {"workspaceUri": "file:///work/notes",
                                                              "title": "Standup"})
    assert not summary.is_error and summary.structured_content["files"][0] == "README.md"
    assert deleted.content[0].text.startswith("Deleted 'Standup'")
    assert storage.tokens is not None
    token = storage.tokens.access_token
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["aud"] == secured.url
    signature = token.split(".")[2].encode()
    stored = _redis_bytes(secured.redis_url, secured.prefix)
    assert b"oauth:" in stored, "the sessions' principal (a digest of issuer, subject, client) is not in Redis"
    files = [*secured.tmp.glob("gw*-usage.sqlite3*"), *secured.tmp.glob("gw*-trace.jsonl*"),
             *secured.tmp.glob("gw*.stderr")]
    assert any(f.name.endswith("trace.jsonl") and f.stat().st_size for f in files), "no trace was written"
    for blob, where in [(stored, "Redis"), *((f.read_bytes(), f.name) for f in files)]:
        assert token.encode() not in blob and signature not in blob, f"the token is in {where}"
