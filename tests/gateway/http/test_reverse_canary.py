"""Canary splits across eras (docs/design/eras.md#canary-splits-across-eras): a peer's canary splits its 2025
clients' new sessions whichever era each named upstream is. A share on a 2025-era upstream is relayed to it (its
sealed session id names it from then on); a share on a 2026 one is the gateway's own session, on exactly the
upstream picked (never split a second time onto a 2025 server it cannot speak 2026 to). On loopback: the
embedded 2026 core and fake 2025 servers (``test_reverse_relay_limits``), raw 2025 clients."""

from __future__ import annotations

from typing import Any

import aiohttp

from gateway.config.settings import load_config
from gateway.http.app import create_app
from gateway.ops.cli import check_config
from tests.gateway.http.test_reverse_relay_limits import LEGACY, FakeLegacy

SESSIONS = 30

CORE_AND_OLD = """
[upstreams.old]
url = "{old}"
era = "2025-11-25"

[default_peer]
name = "default"
canary = {{ old = 50 }}
"""

TWO_OLD = """
[upstreams.old]
url = "{old}"
era = "2025-11-25"

[upstreams.older]
url = "{older}"
era = "2025-11-25"

[[peers]]
name = "ide"
client_name = "ide-*"
upstream = "old"
canary = {{ older = 40 }}
"""


async def _fake(aiohttp_server: Any) -> tuple[FakeLegacy, str]:
    fake = FakeLegacy()
    return fake, str((await aiohttp_server(fake.app())).make_url("/mcp"))


async def _gateway(aiohttp_server: Any, tmp_path: Any, toml: str) -> str:
    path = tmp_path / "gateway.toml"
    path.write_text(toml)
    assert check_config(str(path)) == 0  # a split across eras is a valid configuration
    config = load_config(path, state_dir=str(tmp_path / "state"))
    return str((await aiohttp_server(create_app(config))).make_url("/mcp"))


async def _sessions(url: str, client: str) -> list[Any]:
    """``SESSIONS`` 2025 clients: each initializes, then lists tools on its session; the answers to the lists."""
    lists = []
    async with aiohttp.ClientSession() as http:
        for ident in range(SESSIONS):
            init = {"jsonrpc": "2.0", "id": ident, "method": "initialize",
                    "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                               "clientInfo": {"name": client, "version": "1"}}}
            async with http.post(url, json=init, headers=LEGACY) as resp:
                assert resp.status == 200, await resp.text()
                headers = {**LEGACY, "Mcp-Session-Id": resp.headers["Mcp-Session-Id"],
                           "MCP-Protocol-Version": "2025-11-25"}
            async with http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                                 headers=headers) as resp:
                assert resp.status == 202
            async with http.post(url, json={"jsonrpc": "2.0", "id": 1000 + ident, "method": "tools/list"},
                                 headers=headers) as resp:
                assert resp.status == 200
                lists.append((await resp.json())["result"])
    return lists


async def test_a_split_between_a_2026_upstream_and_a_2025_one(aiohttp_server: Any, tmp_path: Any) -> None:
    fake, old = await _fake(aiohttp_server)
    url = await _gateway(aiohttp_server, tmp_path, CORE_AND_OLD.format(old=old))
    lists = await _sessions(url, "raw")
    relayed = [m for m, _ in fake.seen].count("initialize")
    assert 0 < relayed < SESSIONS  # both shares taken (each half: a 2^-29 chance to miss one)
    # The relayed sessions' requests reach the fake (its empty result), the others the embedded core (its tools):
    # none of the 2026 share landed on the 2025 server, none of the 2025 share on the core.
    assert sum(1 for result in lists if result == {}) == relayed == [m for m, _ in fake.seen].count("tools/list")
    assert all(result == {} or result["tools"] for result in lists)


async def test_a_split_between_two_2025_upstreams(aiohttp_server: Any, tmp_path: Any) -> None:
    (fake_old, old), (fake_older, older) = await _fake(aiohttp_server), await _fake(aiohttp_server)
    url = await _gateway(aiohttp_server, tmp_path, TWO_OLD.format(old=old, older=older))
    lists = await _sessions(url, "ide-plugin")
    assert lists == [{}] * SESSIONS  # every session relayed, its requests to the server it was opened on
    counts = [[m for m, _ in fake.seen].count(method) for fake in (fake_old, fake_older)
              for method in ("initialize", "tools/list")]
    assert counts[0] == counts[1] > 0 and counts[2] == counts[3] > 0 and counts[0] + counts[2] == SESSIONS
