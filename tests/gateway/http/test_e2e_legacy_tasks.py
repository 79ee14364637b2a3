"""2025-11-25 tasks through the gateway
(docs/design/bridge.md#tasks-the-gateway-drives-them-or-maps-them-onto-2025-tasks, adapters.legacy_tasks): the official
Python SDK's 1.x client with its experimental task support (``sdk1_tasks_client.py``, in the isolated venv
``test_doors_sdk1`` builds) and the official TypeScript SDK's (``tests/conformance/tasks_client.mjs``) run the real
core's ``build_project`` as 2025 tasks, backed by the core's ``io.modelcontextprotocol/tasks`` tasks: completed with the
confirmation answered, declined, dismissed (the task ends cancelled), failed, cancelled mid-way with ``tasks/cancel``;
``tasks/list`` and an unknown id; statuses told on the GET stream with no ``tasks/result`` waiting; the session's bound
freed by a task past its ttl; ``mcp_gateway_tasks`` by outcome.

Every message the gateway sends the client is checked against the 2025-11-25 schema, its task results also with
the ``mcp-types`` 2025-11-25 models; every request it sends upstream against the 2026-07-28 schema (task requests
against the extension's shapes: tests.task_wire).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp_types import _v2025_11_25 as v2025
from prometheus_client.parser import text_string_to_metric_families

from gateway.config.settings import load_config
from gateway.http.app import GATEWAY, create_app
from tests import schema
from tests.gateway import ts_sdk
from tests.gateway.conftest import Legacy
from tests.gateway.http.test_doors_sdk1 import run_sdk1_script, sdk1_python  # noqa: F401 (the venv's fixture)
from tests.gateway.http.test_e2e_tasks import FAST, core_app, core_config, make_stack

CLIENT = Path(__file__).with_name("sdk1_tasks_client.py")
RELATED = "io.modelcontextprotocol/related-task"
LIVE = ("working", "input_required")  # a task cancelled mid-way: before or at its confirmation


def check_downstream(message: dict[str, Any]) -> None:
    """The 2025-11-25 schema for every message; the task shapes with the mcp-types models too."""
    kind = "ServerRequest" if "id" in message and "method" in message else (
        "ServerNotification" if "method" in message else "JSONRPCMessage")
    if schema.available("2025-11-25"):
        problems = schema.errors("2025-11-25", kind, message)
        assert not problems, (message, problems[:3])
    result = message.get("result")
    if isinstance(result, dict) and "task" in result:
        v2025.CreateTaskResult.model_validate(result)
    elif isinstance(result, dict) and {"taskId", "status"} <= result.keys():
        v2025.GetTaskResult.model_validate(result)
        assert "ttlMs" not in result and "inputRequests" not in result and "result" not in result, result
    elif isinstance(result, dict) and "tasks" in result:
        v2025.ListTasksResult.model_validate(result)
    if message.get("method") == "notifications/tasks/status":
        v2025.TaskStatusNotification.model_validate(message)
    if message.get("method") == "elicitation/create":
        assert message["params"]["_meta"][RELATED]["taskId"], message


async def deprecated_uses(gateway, feature: str) -> float:
    """``mcp_gateway_deprecated_feature_uses`` for ``feature``, as /metrics shows it."""
    async with aiohttp.ClientSession() as http, http.get(gateway.make_url("/metrics")) as resp:
        text = await resp.text()
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == "mcp_gateway_deprecated_feature_uses_total" and s.labels.get("feature") == feature)


async def tasks_by_outcome(gateway) -> dict[str, float]:
    """``mcp_gateway_tasks`` by outcome, as /metrics shows it."""
    async with aiohttp.ClientSession() as http, http.get(gateway.make_url("/metrics")) as resp:
        text = await resp.text()
    return {s.labels["outcome"]: s.value for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == "mcp_gateway_tasks_total"}


async def run_client(python: Path, base: str, mode: str = "flows") -> dict[str, Any]:
    return await run_sdk1_script(python, CLIENT, base, mode)


async def test_the_sdk1_client_runs_builds_as_2025_tasks(aiohttp_server, tmp_path, sdk1_python) -> None:  # noqa: F811
    _core, gateway, wire = await make_stack(aiohttp_server, tmp_path, 0.05)
    out = await run_client(sdk1_python, str(gateway.make_url("")).rstrip("/"))

    assert out["tasks_capability"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    accepted = out["accepted"]
    task_id = accepted["created"]["taskId"]
    assert accepted["created"]["status"] == "working" and accepted["created"]["ttl"] > 0
    assert accepted["result"] == {"isError": False, "structured": {"project": "demo", "outcome": "published"},
                                  "related": {"taskId": task_id}}
    assert accepted["final"] == "completed"
    assert accepted["asked"] == [{"message": "demo compiled. Run its tests and publish it?",
                                  "related": {"taskId": task_id}}]
    assert out["declined"]["result"]["structured"] == {"project": "demo", "outcome": "declined"}
    assert out["dismissed"]["error"]["code"] == -32603 and out["dismissed"]["final"] == "cancelled"
    assert out["failed"]["error"]["code"] == -32603 and "crashed" in out["failed"]["error"]["message"]
    assert out["failed"]["final"] == "failed" and out["failed"]["asked"] == []

    cancelled = out["cancelled"]
    assert cancelled["before"] in LIVE and cancelled["cancel"] == "cancelled" and cancelled["final"] == "cancelled"
    assert cancelled["again"]["code"] == -32602 and cancelled["result"]["code"] == -32603
    assert out["listed"] == ["cancelled", "cancelled", "completed", "completed", "failed"]
    assert out["unknown"]["code"] == -32602 and out["plain"] is False
    assert {"input_required", "completed"} <= set(out["statuses"]), out["statuses"]

    for message in wire.downstream:
        check_downstream(message)
    for body in wire.upstream:
        schema.check("2026-07-28", body)
        assert "task" not in body.get("params", {}) or body["method"] != "tools/call", body  # params.task stripped
    assert len(wire.calls("tasks/cancel")) == 1  # only the client's: a 2025 task outlives its tasks/result
    assert await deprecated_uses(gateway, "2025 tasks") >= 5 * 3 + 4  # each build's call, get, result; and more
    # Each task counted once by its outcome, whoever saw it end (a cancel by the client's tasks/cancel included).
    assert await tasks_by_outcome(gateway) == {"completed": 2, "cancelled": 2, "failed": 1}


async def test_the_sdk1_client_is_told_task_statuses_with_no_tasks_result_waiting(
        aiohttp_server, tmp_path, sdk1_python) -> None:  # noqa: F811
    """notifications/tasks/status on the session's GET stream, from the upstream's notifications/tasks on the
    session's task listen (docs/design/bridge.md#tasks-the-gateway-drives-them-or-maps-them-onto-2025-tasks): the
    client learns a task failed, or needs its confirmation, without polling it."""
    _core, gateway, wire = await make_stack(aiohttp_server, tmp_path, 0.05)
    out = await run_client(sdk1_python, str(gateway.make_url("")).rstrip("/"), "watch")

    failing, asking = out["failing"], out["asking"]
    assert failing["told"] and failing["told"][-1] == "failed", failing
    assert not [b for b in wire.calls("tasks/get") if b["params"]["taskId"] == failing["id"]]  # never polled
    assert "input_required" in asking["told"], asking
    assert asking["structured"] == {"project": "demo", "outcome": "published"}
    assert asking["asked"] == [{"message": "demo compiled. Run its tests and publish it?",
                                "related": {"taskId": asking["id"]}}]
    assert out["listed"] == ["completed", "failed"]  # the registry kept what the listen told
    listens = [b for b in wire.calls("subscriptions/listen") if "taskIds" in b["params"]["notifications"]]
    assert listens and all(b["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]["extensions"]
                           for b in listens)
    told = wire.sent("notifications/tasks/status")
    assert {m["params"]["taskId"] for m in told} == {failing["id"], asking["id"]}
    for message in wire.downstream:
        check_downstream(message)
    for body in wire.upstream:
        schema.check("2026-07-28", body)
    assert await tasks_by_outcome(gateway) == {"completed": 1, "failed": 1}


async def test_the_typescript_sdk_client_runs_builds_as_2025_tasks(aiohttp_server, tmp_path) -> None:
    command = ts_sdk.node()
    if not (ts_sdk.CONFORMANCE / "node_modules" / "@modelcontextprotocol" / "sdk").exists():
        pytest.skip("the pinned TypeScript SDK is not installed (tests/conformance/install.sh)")
    _core, gateway, wire = await make_stack(aiohttp_server, tmp_path, 0.05)
    status, said = await ts_sdk.run(*command, str(ts_sdk.CONFORMANCE / "tasks_client.mjs"),
                                    str(gateway.make_url("/mcp")), cwd=tmp_path)
    assert status == 0, said[-3000:]
    out = json.loads(said.strip().splitlines()[-1])

    assert out["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    accepted = out["accepted"]
    assert accepted["kinds"][0] == "taskCreated" and accepted["kinds"][-1] == "result"
    assert accepted["result"] == {"structured": {"project": "demo", "outcome": "published"},
                                  "related": {"taskId": accepted["taskId"]}}
    assert accepted["asked"] == [{"message": "demo compiled. Run its tests and publish it?",
                                  "related": {"taskId": accepted["taskId"]}}]
    assert accepted["final"] == "completed"
    assert out["declined"]["result"]["structured"] == {"project": "demo", "outcome": "declined"}
    assert out["dismissed"]["kinds"][-1] == "error" and out["dismissed"]["final"] == "cancelled"
    assert out["failed"]["kinds"][-1] == "error" and out["failed"]["final"] == "failed"
    assert out["cancelled"].pop("before") in LIVE
    assert out["cancelled"] == {"cancel": "cancelled", "final": "cancelled", "again": -32602}
    assert out["listed"] == ["cancelled", "cancelled", "completed", "completed", "failed"]
    # told it failed on the GET stream, never polled
    # (docs/design/bridge.md#tasks-the-gateway-drives-them-or-maps-them-onto-2025-tasks)
    unpolled = out["unpolled"]
    assert unpolled["told"] and unpolled["told"][-1] == "failed", unpolled
    assert not [b for b in wire.calls("tasks/get") if b["params"]["taskId"] == unpolled["taskId"]]
    for message in wire.downstream:
        check_downstream(message)
    for body in wire.upstream:
        schema.check("2026-07-28", body)


async def test_a_task_past_its_ttl_no_longer_counts_against_the_sessions_bound(aiohttp_server, aiohttp_client,
                                                                              tmp_path) -> None:
    """The registry forgets a task past its ttl
    (docs/design/bridge.md#tasks-the-gateway-drives-them-or-maps-them-onto-2025-tasks): a session at
    max_tasks_per_session with a task it never polls gets room again once that task's ttl (the upstream's, from its
    creation) has passed by the gateway's clock; the forgotten task is no longer listed."""
    core = await aiohttp_server(core_app.create_app(core_config.CoreConfig(
        database=str(tmp_path / "core.db"), build_step_seconds=0.02, task_poll_interval_ms=50, task_ttl_seconds=60)))
    client = await aiohttp_client(create_app(load_config(upstream_url=str(core.make_url("/mcp")),
                                                         limits={**FAST, "max_tasks_per_session": 1})))
    legacy = Legacy(client)
    await legacy.initialize({"elicitation": {"form": {}}, "tasks": {"list": {}}})
    call = {"name": "build_project", "arguments": {"project": "demo"}, "task": {"ttl": 1000}}

    async def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
        resp = await legacy.post(method, params)
        assert resp.status == 200, await resp.text()
        messages = [await resp.json()] if resp.content_type == "application/json" else await legacy.events(resp)
        for message in messages:
            check_downstream(message)
        return messages[-1]

    first = (await rpc("tools/call", call))["result"]["task"]
    assert first["ttl"] == 60000  # the upstream's ttl: the requested one is not carried (the extension has none)
    refused = await rpc("tools/call", call)
    assert refused["error"]["data"]["limit"] == "max_tasks_per_session"

    # The gateway's clock at the first task's expiry: created + ttl (any later task has time left).
    expiry = int(datetime.fromisoformat(first["createdAt"]).timestamp() * 1000) + first["ttl"]
    client.server.app[GATEWAY].clock = lambda: expiry
    second = (await rpc("tools/call", call))["result"]["task"]
    listed = (await rpc("tasks/list", {}))["result"]["tasks"]
    assert [t["taskId"] for t in listed] == [second["taskId"]]
    gone = await rpc("tasks/get", {"taskId": first["taskId"]})
    assert gone["error"]["code"] == -32602
