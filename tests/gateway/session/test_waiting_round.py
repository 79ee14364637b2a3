"""A waiting ``connect_service`` round (the user accepted the URL, the embedded core answers ``requestState`` only
until the page is completed) stops polling the core as soon as its legacy client is gone: the session deleted,
the request cancelled, or the session expired while the client stays silent."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.config.settings import load_config
from gateway.http.app import create_app
from gateway.http.keys import GATEWAY
from tests.gateway.conftest import Legacy
from tests.waiting import until

FAST_POLLS = {"state_only_backoff_seconds": 0.01, "state_only_backoff_max_seconds": 0.02}


class CorePolls:
    """The gateway's tap: counts the tools/call requests it sends the embedded core (one per round)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, kind: str, message: Any) -> None:
        if kind == "upstream" and isinstance(message, dict) and message.get("method") == "tools/call":
            self.count += 1


async def waiting_connect(aiohttp_client: Any, tmp_path: Any, **config: Any) -> tuple[Legacy, Any, CorePolls, Any]:
    """A legacy session whose connect_service call is in its waiting rounds (the URL accepted, the page never
    completed), the core being polled; (client, its open call stream, the poll counter, the gateway)."""
    polls = CorePolls()
    settings = load_config(usage={"enabled": False}, limits=FAST_POLLS, state_dir=str(tmp_path), **config)
    client = await aiohttp_client(create_app(settings, tap=polls))
    legacy = Legacy(client)
    await legacy.initialize()
    resp = await legacy.post("tools/call", {"name": "connect_service", "arguments": {"service": "calendar"}})
    while True:
        eid, message = await legacy.next_event(resp)
        assert eid is not None or message is not None, "the stream ended before the URL elicitation"
        if message is not None and message.get("method") == "elicitation/create":
            assert message["params"]["mode"] == "url"
            assert await legacy.answer(message["id"], {"action": "accept"}) == 202
            break
    started = polls.count
    await until(lambda: polls.count >= started + 3)  # waiting rounds: the core is polled
    return legacy, resp, polls, client.app[GATEWAY]


async def stopped_polling(polls: CorePolls, gateway: Any, session_id: str) -> None:
    """The exchange is gone, and no poll follows (with polls 20 ms apart, several would in 300 ms)."""
    await until(lambda: not (session_id in gateway.runtimes and gateway.runtimes[session_id].exchanges))
    seen = polls.count
    await asyncio.sleep(0.3)  # sleep: a quiet window: no poll may follow the exchange's end
    assert polls.count == seen, "the core is still being polled"


async def test_deleting_the_session_stops_the_polls(aiohttp_client, tmp_path) -> None:
    legacy, _resp, polls, gateway = await waiting_connect(aiohttp_client, tmp_path)
    resp = await legacy.client.delete("/mcp", headers=legacy.headers())
    assert resp.status in (200, 204)
    await stopped_polling(polls, gateway, legacy.session_id)


async def test_cancelling_the_call_stops_the_polls(aiohttp_client, tmp_path) -> None:
    legacy, resp, polls, gateway = await waiting_connect(aiohttp_client, tmp_path)
    assert await legacy.notify("notifications/cancelled", {"requestId": 2, "reason": "user closed"}) == 202
    await stopped_polling(polls, gateway, legacy.session_id)
    rest = await legacy.events(resp)  # the stream ends without an answer (2025-11-25 §Cancellation)
    assert not [m for m in rest if m.get("id") == 2]


@pytest.mark.parametrize("idle", [0.5])
async def test_an_expired_session_stops_the_polls(aiohttp_client, tmp_path, idle) -> None:
    legacy, resp, polls, gateway = await waiting_connect(aiohttp_client, tmp_path, session_idle_seconds=idle)
    resp.close()  # the client is gone: its stream dropped, nothing more sent
    await stopped_polling(polls, gateway, legacy.session_id)
    late = await legacy.client.post("/mcp", json={"jsonrpc": "2.0", "id": 9, "method": "ping"},
                                    headers=legacy.headers())
    assert late.status == 404  # expired, as the polls' end assumed
