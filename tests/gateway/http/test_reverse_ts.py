"""The reverse bridge end to end against a 2025-11-25-only server written with the official TypeScript SDK 1.x
(tests/conformance/legacy_notes_server.mjs, the twin of legacy_sdk1_server.py;
docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge): the official Python 2026 client
(``mcp`` 2.3 pinned to 2026-07-28) and the official TypeScript 2026 client (``@modelcontextprotocol/client`` pinned
to 2026-07-28, tests/conformance/reverse_client.mjs) through the gateway, every flow: sampling, two rounds, form and
URL elicitation (accept, decline, cancel), roots, progress, a prompt, a subscribable resource, a hang-up and an
unanswered round cancelled upstream; a 2025 client relayed as it is; and Mcp-Param-* headers checked against the
server's x-mcp-header annotations. The TypeScript client also runs against the Python 1.x server, whose URL
elicitation the Python client drives too. All real processes on loopback."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.http.keys import REVERSE
from tests.gateway.http.test_doors_sdk1 import sdk1_python  # noqa: F401  (a fixture)
from tests.gateway.http.test_reverse_e2e import META, _ask, _cancelled, _gateway, _legacy_server, _post, modern, text_of
from tests.gateway.ts_sdk import CONFORMANCE, node, run
from tests.waiting import until, until_sync

SERVER = CONFORMANCE / "legacy_notes_server.mjs"
SUITE_SERVER = CONFORMANCE / "legacy_server.mjs"  # the conformance lane's: test_custom_header annotates x-mcp-header
CLIENT = CONFORMANCE / "reverse_client.mjs"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.1).close()
    except OSError:
        return False
    return True


@contextlib.contextmanager
def _ts_server(script: Path = SERVER) -> Iterator[str]:
    if not (CONFORMANCE / "node_modules" / "@modelcontextprotocol" / "sdk").exists():
        pytest.skip("the pinned TypeScript SDK is not installed (bash tests/conformance/install.sh)")
    port = _free_port()
    proc = subprocess.Popen([*node(), str(script), str(port)], cwd=tempfile.gettempdir(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        until_sync(lambda: proc.poll() is not None or _listening(port), "the TypeScript legacy server listens")
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def ts_url() -> Iterator[str]:
    with _ts_server() as url:
        yield url


@pytest.fixture
async def gateway(aiohttp_server: Any, ts_url: str) -> AsyncIterator[Any]:
    yield await _gateway(aiohttp_server, ts_url)


async def test_a_listen_gets_the_ts_servers_resource_updates(gateway: Any) -> None:
    from mcp.client.subscriptions import ResourceUpdated, ToolsListChanged

    async with modern(gateway) as client:
        async with client.listen(tools_list_changed=True, resource_subscriptions=["notes://readme"]) as sub:
            assert sub.honored.tools_list_changed and sub.honored.resource_subscriptions == ["notes://readme"]
            assert text_of(await client.call_tool("subscribed", {})) == "notes://readme"  # subscribed upstream
            await client.call_tool("touch", {"uri": "notes://readme"})
            seen = [await sub.__anext__(), await sub.__anext__()]
        assert ResourceUpdated(uri="notes://readme") in seen and ToolsListChanged() in seen


async def test_a_hang_up_and_an_unanswered_round_cancel_the_ts_call(aiohttp_server: Any, ts_url: str) -> None:
    gateway = await _gateway(aiohttp_server, ts_url, answer_timeout_seconds=0.3)
    bridge = gateway.app[REVERSE]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=0.5)) as http:
        with pytest.raises(TimeoutError):
            await _post(http, gateway, 1, "tools/call", {"name": "slow", "arguments": {}}, "slow")
    async with aiohttp.ClientSession() as http:
        assert await _cancelled(http, gateway) == "slow"  # 2026-07-28: a closed stream is the cancel
        _, first = await _ask(http, gateway, 2)
        assert first["result"]["resultType"] == "input_required"
        await until(lambda: not bridge.parked, "the unanswered call is dropped", lambda: bridge.parked)
        said: list[str] = []

        async def both_cancelled() -> bool:  # the cancel reaches the server after the drop, on its own request
            _, answer = await _post(http, gateway, 3, "tools/call", {"name": "cancelled", "arguments": {}},
                                    "cancelled")
            said.append(answer["result"]["content"][0]["text"])
            return said[-1] == "slow,ask_model"

        await until(both_cancelled, "the unanswered call is cancelled upstream", lambda: said[-1:])


async def test_mcp_param_headers_are_checked_against_the_legacy_tools_annotations(aiohttp_server: Any) -> None:
    """2026-07-28 basic/transports §Server validation, for a 2025 server's tool annotated x-mcp-header: the
    annotations come from the server's tools/list, learned on the session's first call."""
    with _ts_server(SUITE_SERVER) as url:
        gateway = await _gateway(aiohttp_server, url)
        async with aiohttp.ClientSession() as http:
            async def call(region: str, header: str | None) -> tuple[int, dict[str, Any]]:
                headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
                           "Mcp-Method": "tools/call", "Mcp-Name": "test_custom_header"}
                if header is not None:
                    headers["Mcp-Param-Region"] = header
                params = {"name": "test_custom_header", "arguments": {"region": region}, "_meta": META}
                body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
                async with http.post(gateway.make_url("/mcp"), json=body, headers=headers) as resp:
                    return resp.status, await resp.json()

            status, ok = await call("Hello", "=?base64?SGVsbG8=?=")
            assert (status, ok["result"]["content"][0]["text"]) == (200, "region=Hello")
            for header in (None, "elsewhere", "=?base64?SGVs!!!bG8=?="):  # missing, different, corrupt
                status, refused = await call("Hello", header)
                assert (status, refused["error"]["code"]) == (400, -32020), refused


# ------------------------------------------------------------------------------------ the TypeScript 2026 client

EXPECTED = [
    "the client negotiated 2026-07-28 (pinned)", "the legacy server's tools are listed", "a plain call",
    "a sampling round", "two rounds, the second built on the first", "a form elicitation, accepted",
    "a form elicitation, answered decline", "a form elicitation, answered cancel",
    "a URL elicitation, answered accept", "a URL elicitation, answered decline", "a URL elicitation, answered cancel",
    "a roots round", "progress around a round", "a prompt", "a resource", "a listen is acknowledged with the resource",
    "the listen subscribed the legacy session", "the resource update reaches the listen",
    "an aborted call ends on the client", "the abort cancelled the legacy call",
]


async def _ts_client(gateway: Any) -> list[str]:
    """``reverse_client.mjs`` against the gateway: its ``ok - …`` lines (it exits non-zero on the first miss)."""
    if not (CONFORMANCE / "node_modules" / "@modelcontextprotocol" / "client").exists():
        pytest.skip("the pinned TypeScript 2026 client is not installed (bash tests/conformance/install.sh)")
    status, out = await run(*node(), str(CLIENT), str(gateway.make_url("/mcp")), cwd=Path(tempfile.gettempdir()))
    assert status == 0, out
    return [line.removeprefix("ok - ") for line in out.splitlines() if line.startswith("ok - ")]


async def test_the_ts_2026_client_through_the_gateway_to_the_ts_legacy_server(gateway: Any) -> None:
    assert await _ts_client(gateway) == EXPECTED
    assert not gateway.app[REVERSE].parked


async def test_the_ts_2026_client_through_the_gateway_to_the_python_legacy_server(
        aiohttp_server: Any, sdk1_python: Path) -> None:  # noqa: F811
    with _legacy_server(sdk1_python) as (url, _):
        gateway = await _gateway(aiohttp_server, url)
        assert await _ts_client(gateway) == EXPECTED
        assert not gateway.app[REVERSE].parked


