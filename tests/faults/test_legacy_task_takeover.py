"""A replica killed while a 2025 client's blocking ``tasks/result`` waits on it
(docs/design/bridge.md#tasks-the-gateway-drives-them-or-maps-them-onto-2025-tasks,
docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds): two ``python -m gateway serve`` replicas on
one real Redis behind a failover front, the reference core's ``build_project`` upstream, the official Python SDK's
1.x client with its 2025 task support (``tests/gateway/http/sdk1_tasks_client.py takeover``). The task is created
through A; A is killed with SIGKILL while its ``tasks/result`` waits between two polls of the task; the client
resumes its stream through B, which takes the wait over from the saved record, polls the same task, asks the
confirmation once (with related-task metadata) and answers the result once; ``tasks/list`` through B knows the task
(the session's registry is in the shared record)."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.faults.replicas import Front, HoldingUpstream, replica
from tests.gateway.http.test_doors_sdk1 import _client_env, sdk1_python  # noqa: F401 (the venv's fixture)
from tests.gateway.session import test_redis_store as redis_tests

pytest.importorskip("redis")
core_app = pytest.importorskip("modern_server.app")
core_config = pytest.importorskip("modern_server.config")

redis_url, prefix = redis_tests.redis_url, redis_tests.prefix  # its fixtures, shared
CLIENT = Path(__file__).resolve().parents[1] / "gateway" / "http" / "sdk1_tasks_client.py"
LEASE = 1.0
FAST_POLLS = "[gateway.limits]\ntask_poll_floor_seconds = 0.05\ntask_poll_max_seconds = 0.2\n"


async def test_a_replica_killed_while_tasks_result_waits(aiohttp_server, tmp_path, redis_url, prefix,
                                                         sdk1_python) -> None:  # noqa: F811
    core = await aiohttp_server(core_app.create_app(core_config.CoreConfig(
        database=str(tmp_path / "core.db"), build_step_seconds=0.5, task_poll_interval_ms=50)))
    polled, polls = asyncio.Event(), []

    def watch(body: dict[str, Any]) -> bool:
        """Notes the task's second poll (only the client's tasks/result polls it: the client never calls
        tasks/get in this run): the first one's answer was acted on, so the wait is saved and the client's stream
        has its first event; nothing is held."""
        if body.get("method") == "tasks/get":
            polls.append(body)
            if len(polls) == 2:
                polled.set()
        return False
    holder = HoldingUpstream(str(core.make_url("/mcp")), hold=watch)
    upstream = await aiohttp_server(holder.app())
    a, b = (replica(tmp_path, name, str(upstream.make_url("/mcp")), redis_url, prefix, LEASE, extra=FAST_POLLS)
            for name in "ab")
    front = Front([a.port, b.port])
    proc = None
    try:
        await a.listening()
        await b.listening()
        url = await front.start()
        proc = await asyncio.create_subprocess_exec(str(sdk1_python), "-I", str(CLIENT), url.removesuffix("/mcp"),
                                                    "takeover", env=_client_env(), cwd=tempfile.gettempdir(),
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        assert proc.stdout is not None
        created = json.loads(await asyncio.wait_for(proc.stdout.readline(), 60))
        task_id = created["created"]
        await asyncio.wait_for(polled.wait(), 30)
        a.proc.kill()  # A is waiting on the task for the client's tasks/result: it dies now
        a.proc.wait()
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()[-3000:]
        summary: dict[str, Any] = json.loads(out.decode().splitlines()[-1])
        assert summary["structured"] == {"project": "demo", "outcome": "published"}
        assert summary["related"] == {"taskId": task_id}
        assert [x["related"] for x in summary["asked"]] == [{"taskId": task_id}]  # asked once, by B
        assert summary["listed"] == ["completed"]
        bodies = holder.bodies
        assert len(holder.calls("build_project")) == 1  # one task, created once
        assert {x["params"]["taskId"] for x in bodies if x.get("method", "").startswith("tasks/")} == {task_id}
        assert len([x for x in bodies if x.get("method") == "tasks/update"]) == 1
        assert not [x for x in bodies if x.get("method") == "tasks/cancel"]
        assert front.used[1] > 0 and "taken over" in b.stderr()
    finally:
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()
        await front.close()
        for replica_proc in (a, b):
            replica_proc.stop()
        assert "Traceback" not in b.stderr(), b.stderr()[-3000:]
