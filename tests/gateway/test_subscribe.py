"""Legacy ``resources/subscribe`` / ``unsubscribe`` through the session's own upstream listen (gateway.listen,
gateway.app.on_subscribe): refusals, concurrency and the acknowledged filter (DIGEST §1.9, §4.15)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.app import GATEWAY


@pytest.mark.parametrize("error,status", [
    ({"code": -32602, "message": "unknown resource"}, 400),
    ({"code": -32001, "message": "token expired"}, 401),
])
async def test_a_refused_listen_answers_the_subscribe_with_the_upstreams_error(legacy, upstream, error,
                                                                               status) -> None:
    upstream.script["subscriptions/listen"] = lambda body, request: ("error", error, status)
    await legacy.initialize()
    message = await legacy.call("resources/subscribe", {"uri": "file:///nope"})
    assert message["error"] == error  # translated (adapters.errors): these codes pass down unchanged
    record = await legacy.client.app[GATEWAY].store.get_session(legacy.session_id)
    assert record.subscriptions == []  # the client is not subscribed
