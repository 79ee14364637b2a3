"""A replica killed while it drives an upstream task for a legacy client
(docs/design/bridge.md#tasks-the-gateway-drives-them-or-maps-them-onto-2025-tasks,
docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds): two ``python -m gateway serve`` replicas on
one real Redis behind a failover front, the reference core's ``build_project`` upstream, the official ``mcp`` SDK in
legacy mode. Replica A is killed with SIGKILL while it polls the task; B takes the call over from the saved record
and keeps polling the same task, the client is asked its confirmation once, and the call completes once."""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types as types
import pytest
from mcp import Client

from tests.faults.replicas import Front, HoldingUpstream, replica
from tests.gateway.session import test_redis_store as redis_tests

pytest.importorskip("redis")
core_app = pytest.importorskip("modern_server.app")
core_config = pytest.importorskip("modern_server.config")

redis_url, prefix = redis_tests.redis_url, redis_tests.prefix  # its fixtures, shared
LEASE = 1.0
FAST_POLLS = "[gateway.limits]\ntask_poll_floor_seconds = 0.05\ntask_poll_max_seconds = 0.2\n"


async def test_a_replica_killed_while_polling_a_task(aiohttp_server, tmp_path, redis_url, prefix) -> None:
    core = await aiohttp_server(core_app.create_app(core_config.CoreConfig(
        database=str(tmp_path / "core.db"), build_step_seconds=0.5, task_poll_interval_ms=50)))
    holder = HoldingUpstream(str(core.make_url("/mcp")))
    upstream = await aiohttp_server(holder.app())
    a, b = (replica(tmp_path, name, str(upstream.make_url("/mcp")), redis_url, prefix, LEASE, extra=FAST_POLLS)
            for name in "ab")
    front = Front([a.port, b.port])
    asked: list[Any] = []
    progress: list[str | None] = []

    async def on_progress(value, total, message) -> None:
        progress.append(message)
        if a.alive():  # A is polling the task (the progress came from its poll): it dies now
            a.proc.kill()
            a.proc.wait()

    async def elicit(context, params):
        asked.append(params)
        return types.ElicitResult(action="accept", content={"confirm": True})
    try:
        await a.listening()
        await b.listening()
        url = await front.start()
        async with Client(url, mode="legacy", elicitation_callback=elicit) as client:
            result = await asyncio.wait_for(
                client.call_tool("build_project", {"project": "demo"}, progress_callback=on_progress), 60)
        assert not a.alive() and b.alive()
        assert result.structured_content == {"project": "demo", "outcome": "published"}
        assert len(asked) == 1  # asked once, by B
        assert len(holder.calls("build_project")) == 1  # one task, created once
        bodies = holder.bodies
        task_ids = {x["params"]["taskId"] for x in bodies if x.get("method", "").startswith("tasks/")}
        assert len(task_ids) == 1  # B polled the same task A created
        updates = [x for x in bodies if x.get("method") == "tasks/update"]
        assert [u["params"]["inputResponses"] for u in updates] == [
            {"publish": {"action": "accept", "content": {"confirm": True}}}]
        assert not [x for x in bodies if x.get("method") == "tasks/cancel"]
        assert any("publishing" in (m or "") for m in progress)  # B's polls went on reaching the client
        assert front.used[1] > 0 and "taken over" in b.stderr()
    finally:
        await front.close()
        for proc in (a, b):
            proc.stop()
        assert "Traceback" not in b.stderr(), b.stderr()[-3000:]
