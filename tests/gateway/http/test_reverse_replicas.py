"""The reverse bridge on replicas (docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge):
two gateways on one Redis (a key prefix of each test alone) with one ``requestState`` key, in front of the legacy
``mcp`` 1.x server. A call parked on one replica is answered through the other (the retry relayed over the store's
bus); when the replica holding it is killed, the retry is told so, and the request sent again succeeds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

pytest.importorskip("redis")

from gateway.config.settings import load_config
from gateway.http.app import create_app
from gateway.http.keys import REVERSE
from tests.gateway.conftest import ROOT
from tests.gateway.http.test_doors_sdk1 import sdk1_python  # noqa: F401  (a fixture)
from tests.gateway.http.test_reverse_e2e import META, SAMPLED, _free_port, legacy_url  # noqa: F401
from tests.gateway.session.test_redis_store import prefix, redis_url  # noqa: F401  (fixtures)
from tests.waiting import until

KEY_ENV = "TEST_REVERSE_STATE_KEY"
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
           "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call"}


async def call(http: aiohttp.ClientSession, url: str, ident: int, tool: str, **extra: Any) -> tuple[int, Any]:
    params = {"name": tool, "arguments": {}, **extra, "_meta": META}
    body = {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params}
    async with http.post(url, json=body, headers={**HEADERS, "Mcp-Name": tool}) as resp:
        return resp.status, await resp.json()


def asked(answer: Any) -> tuple[list[str], str]:
    """An input_required result's keys and state."""
    result = answer["result"]
    assert result["resultType"] == "input_required", answer
    return sorted(result["inputRequests"]), result["requestState"]


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch, redis_url: str, prefix: str) -> dict[str, Any]:  # noqa: F811
    monkeypatch.setenv(KEY_ENV, "one key for every replica")
    return {"store": {"url": redis_url, "prefix": prefix}, "reverse": {"state_key_env": KEY_ENV}}


async def test_a_round_parked_on_one_replica_is_answered_through_the_other(
        aiohttp_server: Any, legacy_url: str, shared: dict[str, Any]) -> None:  # noqa: F811
    config = load_config(upstream_url=legacy_url, upstream_era="2025-11-25", **shared)
    a, b = await aiohttp_server(create_app(config)), await aiohttp_server(create_app(config))
    url_a, url_b = str(a.make_url("/mcp")), str(b.make_url("/mcp"))
    async with aiohttp.ClientSession() as http:
        _, first = await call(http, url_a, 1, "two_rounds")
        keys, state = asked(first)
        status, second = await call(http, url_b, 2, "two_rounds", requestState=state,  # relayed to A
                                    inputResponses={keys[0]: SAMPLED})
        assert status == 200
        keys, state = asked(second)  # A's next round, answered through B
        status, done = await call(http, url_b, 3, "two_rounds", requestState=state, inputResponses={keys[0]: SAMPLED})
        assert status == 200 and done["result"]["content"][0]["text"] == "hi then hi"
        # the state was used: replaying it through B is refused by A, as on one replica
        status, replayed = await call(http, url_b, 4, "two_rounds", requestState=state,
                                      inputResponses={keys[0]: SAMPLED})
        assert status == 400 and replayed["error"]["code"] == -32602
        assert "already answered" in replayed["error"]["message"]
    assert not a.app[REVERSE].parked and not b.app[REVERSE].pool  # all of it ran on A


async def test_a_retry_checked_where_it_lands_before_it_is_relayed(
        aiohttp_server: Any, legacy_url: str, shared: dict[str, Any]) -> None:  # noqa: F811
    config = load_config(upstream_url=legacy_url, upstream_era="2025-11-25", **shared)
    a, b = await aiohttp_server(create_app(config)), await aiohttp_server(create_app(config))
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer alice"}) as alice, \
            aiohttp.ClientSession(headers={"Authorization": "Bearer bob"}) as bob:
        keys, state = asked((await call(alice, str(a.make_url("/mcp")), 1, "ask_model", arguments={"topic": "t"}))[1])
        status, refused = await call(bob, str(b.make_url("/mcp")), 2, "ask_model", arguments={"topic": "t"},
                                     requestState=state, inputResponses={keys[0]: SAMPLED})
        assert status == 400 and "minted for another request" in refused["error"]["message"]
        status, done = await call(alice, str(b.make_url("/mcp")), 3, "ask_model", arguments={"topic": "t"},
                                  requestState=state, inputResponses={keys[0]: SAMPLED})
        assert status == 200 and done["result"]["content"][0]["text"] == "model said: hi"


async def _serve(tmp_path: Path, legacy: str, shared: dict[str, Any]) -> AsyncIterator[tuple[str, Any]]:
    """A gateway replica in a process of its own (so it can be killed), on the shared store and state key."""
    store = shared["store"]
    config = tmp_path / "replica.toml"
    config.write_text(f'[gateway.store]\nurl = "{store["url"]}"\nprefix = "{store["prefix"]}"\n'
                      f'[gateway.reverse]\nstate_key_env = "{KEY_ENV}"\n')
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--config", str(config), "--upstream", legacy,
                             "--upstream-era", "2025-11-25", "--port", str(port), "--usage-db",
                             str(tmp_path / "usage.sqlite3"), "--no-access-log"],
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            async def ready() -> bool:
                try:
                    async with http.get(f"{url}/readyz") as resp:
                        return resp.status == 200
                except aiohttp.ClientError:
                    return proc.poll() is not None  # it died: the test fails on its first request
            await until(ready)
        yield f"{url}/mcp", proc
    finally:
        proc.kill()
        proc.wait()


async def test_a_killed_replicas_parked_call_is_lost_and_sent_again(
        aiohttp_server: Any, legacy_url: str, shared: dict[str, Any], tmp_path: Path) -> None:  # noqa: F811
    config = load_config(upstream_url=legacy_url, upstream_era="2025-11-25", **shared)
    b = await aiohttp_server(create_app(config))
    url_b = str(b.make_url("/mcp"))
    async with aiohttp.ClientSession() as http:
        serving = _serve(tmp_path, legacy_url, shared)
        url_a, proc = await serving.__anext__()
        keys, state = asked((await call(http, url_a, 1, "ask_model", arguments={"topic": "t"}))[1])
        answers = {"requestState": state, "inputResponses": {keys[0]: SAMPLED}}
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        await serving.aclose()
        status, lost = await call(http, url_b, 2, "ask_model", arguments={"topic": "t"}, **answers)
        assert status == 400 and lost["error"]["code"] == -32602
        assert "replica holding this call is gone" in lost["error"]["message"]
        # the 2026 client sends the request again (2026-07-28 basic/transports): now parked on B
        keys, state = asked((await call(http, url_b, 3, "ask_model", arguments={"topic": "t"}))[1])
        status, done = await call(http, url_b, 4, "ask_model", arguments={"topic": "t"}, requestState=state,
                                  inputResponses={keys[0]: SAMPLED})
        assert status == 200 and done["result"]["content"][0]["text"] == "model said: hi"
