"""Named upstreams of both eras behind one gateway
(docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge): ``[upstreams.next]`` the reference
core (2026-07-28), ``[upstreams.old]`` the legacy ``mcp`` 1.x server (2025-11-25), and two peers routed by
clientInfo. A 2026 client of the old peer is served in reverse, a 2025 one relayed; the new peer's clients go to the
core as they always did. Plus ``era``'s checks and the start-up probe's verdict per named upstream."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import mcp_types as types
import pytest
from mcp import Client

from gateway.config.settings import ConfigError, load_config
from gateway.http.app import create_app
from gateway.http.keys import REVERSE, REVERSES
from tests.gateway.http.test_doors_sdk1 import sdk1_python  # noqa: F401  (a fixture)
from tests.gateway.http.test_reverse_e2e import META, _post, elicit, legacy_url, roots, sampling, text_of  # noqa: F401

PEERS = """
[upstreams.next]
url = "embedded"

[upstreams.old]
url = "{legacy}"
era = "{era}"

[[peers]]
name = "new-clients"
client_name = "new-*"
upstream = "next"

[[peers]]
name = "old-clients"
client_name = "old-*"
upstream = "old"
"""


def _config_file(tmp_path: Path, legacy: str, era: str = "2025-11-25") -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(PEERS.format(legacy=legacy, era=era))
    return path


@pytest.fixture
async def gateway(aiohttp_server: Any, legacy_url: str, tmp_path: Path) -> Any:  # noqa: F811
    config = load_config(_config_file(tmp_path, legacy_url), state_dir=str(tmp_path / "state"))
    return await aiohttp_server(create_app(config))


def client(gateway: Any, name: str, mode: str, **kwargs: Any) -> Client:
    return Client(str(gateway.make_url("/mcp")), mode=mode, sampling_callback=sampling, list_roots_callback=roots,
                  client_info=types.Implementation(name=name, version="1"), **kwargs)  # type: ignore[arg-type]


async def test_each_peer_reaches_its_upstream_in_that_upstreams_era(gateway: Any) -> None:
    assert set(gateway.app[REVERSES].by_name) == {"old"} and REVERSE not in gateway.app  # the main one is the core
    async with client(gateway, "old-2026", "2026-07-28", elicitation_callback=elicit("accept")) as old:
        assert "ask_model" in {t.name for t in (await old.list_tools()).tools}
        assert text_of(await old.call_tool("ask_model", {"topic": "owls"})) == "model said: <about owls>"
        assert text_of(await old.call_tool("two_rounds", {})) == "<first> then <second after <first>>"
    async with client(gateway, "new-2026", "2026-07-28") as new:
        assert "ask_model" not in {t.name for t in (await new.list_tools()).tools}  # the core's tools
    bridge = gateway.app[REVERSES].get("old")
    assert len(bridge.pool) == 1 and not bridge.parked
    async with aiohttp.ClientSession() as http:  # which legacy servers are behind the gateway: the named one
        async with http.get(gateway.make_url("/metrics")) as resp:
            said = await resp.text()
    assert 'mcp_gateway_legacy_upstream_sessions{revision="2025-11-25",server="legacy-notes"} 1.0' in said


async def test_a_2025_client_of_the_old_peer_is_relayed_and_of_the_new_one_bridged(gateway: Any) -> None:
    async with client(gateway, "old-2025", "legacy", elicitation_callback=elicit("accept", confirm=False)) as old:
        assert old.protocol_version == "2025-11-25"
        assert text_of(await old.call_tool("ask_model", {"topic": "owls"})) == "model said: <about owls>"
        assert text_of(await old.call_tool("delete_note", {"note": "n1"})) == "kept n1"
        assert text_of(await old.call_tool("show_roots", {})) == "file:///work/a"  # on the relayed GET stream
    async with client(gateway, "new-2025", "legacy") as new:
        assert "ask_model" not in {t.name for t in (await new.list_tools()).tools}  # bridged to the core
    assert not gateway.app[REVERSES].get("old").pool  # the relayed sessions are the server's own


async def test_a_relayed_session_is_its_principals_alone(gateway: Any) -> None:
    """The gateway's id of a relayed session is sealed over its upstream, the server's own id and the principal:
    another principal holding it is told the session does not exist; a forged one reaches no upstream."""
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "old-raw", "version": "1"}}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    async with aiohttp.ClientSession() as http:
        async with http.post(gateway.make_url("/mcp"), json=init, headers={**headers, "Authorization": "Bearer a"}) \
                as resp:
            assert resp.status == 200
            sealed = resp.headers["Mcp-Session-Id"]
        legacy = {**headers, "Mcp-Session-Id": sealed, "MCP-Protocol-Version": "2025-11-25"}
        async with http.post(gateway.make_url("/mcp"), json=ping, headers={**legacy, "Authorization": "Bearer a"}) \
                as resp:
            assert resp.status == 200
        async with http.post(gateway.make_url("/mcp"), json=ping, headers={**legacy, "Authorization": "Bearer b"}) \
                as resp:
            assert resp.status == 404
        forged = {**legacy, "Mcp-Session-Id": sealed[:-4] + ("AAAA" if not sealed.endswith("AAAA") else "BBBB")}
        async with http.post(gateway.make_url("/mcp"), json=ping, headers={**forged, "Authorization": "Bearer a"}) \
                as resp:
            assert resp.status == 404


def test_era_is_checked_with_its_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"upstreams\.old\.era"):
        load_config(_config_file(tmp_path, "http://127.0.0.1:1/mcp", era="2024-11-05"))
    (tmp_path / "core.toml").write_text('[upstreams.core]\nurl = "embedded"\nera = "2025-11-25"\n')
    with pytest.raises(ConfigError, match="embedded core is a 2026-07-28 server"):
        load_config(tmp_path / "core.toml")


def test_auto_takes_the_probes_verdict_per_named_upstream(legacy_url: str, tmp_path: Path) -> None:  # noqa: F811
    from gateway.ops.cli import check_upstream

    path = _config_file(tmp_path, legacy_url, era="auto")
    assert load_config(path).pins.upstreams["old"].era == "auto"
    protection, era, eras = check_upstream(load_config(path), True)  # the old one is fine: served in reverse
    assert (protection, era, eras) == (None, None, {"old": "2025-11-25"})
    assert load_config(path, upstream_eras=eras).pins.upstreams["old"].era == "2025-11-25"  # as serve then runs
    pinned = _config_file(tmp_path, legacy_url, era="2026-07-28")
    assert check_upstream(load_config(pinned), False)[2] == {}
    with pytest.raises(SystemExit, match="2025-era"):
        check_upstream(load_config(pinned), True)


async def test_a_reload_gives_a_named_upstream_its_new_era(aiohttp_server: Any, legacy_url: str,  # noqa: F811
                                                          tmp_path: Path) -> None:
    from gateway.http.keys import CORE_URL, GATEWAY
    from gateway.ops.reload import reload_config

    path = _config_file(tmp_path, legacy_url, era="2026-07-28")
    gateway = await aiohttp_server(create_app(load_config(path, state_dir=str(tmp_path / "state"))))
    bridges = gateway.app[REVERSES]
    assert not bridges.by_name  # passed through, as the file says
    path.write_text(PEERS.format(legacy=legacy_url, era="2025-11-25"))
    assert reload_config(gateway.app[GATEWAY], path, gateway.app[CORE_URL], bridges) is True
    async with client(gateway, "old-2026", "2026-07-28") as old:
        assert text_of(await old.call_tool("ask_model", {"topic": "owls"})) == "model said: <about owls>"
    assert set(bridges.by_name) == {"old"} and len(bridges.get("old").pool) == 1
    path.write_text(PEERS.format(legacy=legacy_url, era="2026-07-28"))
    assert reload_config(gateway.app[GATEWAY], path, gateway.app[CORE_URL], bridges) is True
    assert not bridges.by_name  # the bridge is closed; the old peer's requests pass through again
