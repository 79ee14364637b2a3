"""A real authorization server for the tests: node ``oidc-provider`` (pinned in tests/conformance/package.json,
installed by tests/conformance/install.sh, which .ci/run runs) started from
``tests/conformance/authorization_server.mjs`` on a loopback port. Skips, saying why, when Node or the package is
absent."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp
import pytest

from tests.gateway.ts_sdk import CONFORMANCE, node


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class AuthorizationServer:
    issuer: str

    async def client_token(self, resource: str, scope: str = "mcp:tools", client: str = "gateway-tests") -> str:
        """A client-credentials access token (a JWT whose audience is ``resource``, RFC 8707 and RFC 9068)."""
        async with aiohttp.ClientSession() as http:
            resp = await http.post(f"{self.issuer}/token", data={
                "grant_type": "client_credentials", "resource": resource, "scope": scope},
                headers={"Authorization": aiohttp.encode_basic_auth(client, f"secret-{client}")})
            body = await resp.json()
            assert resp.status == 200, body
            return str(body["access_token"])


@asynccontextmanager
async def authorization_server(ttl_seconds: int = 300) -> AsyncIterator[AuthorizationServer]:
    if not (CONFORMANCE / "node_modules" / "oidc-provider").exists():
        pytest.skip("oidc-provider is not installed (bash tests/conformance/install.sh; .ci/run does it)")
    port = free_port()
    proc = await asyncio.create_subprocess_exec(*node(), str(CONFORMANCE / "authorization_server.mjs"), str(port),
                                                str(ttl_seconds), cwd=CONFORMANCE, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line.startswith(b"ready "), line
        yield AuthorizationServer(line.decode().split()[1])
    finally:
        proc.terminate()
        await proc.wait()
