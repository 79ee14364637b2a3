"""A long-running tool that runs as an upstream task, reached by the official TypeScript SDK's client in 2025-11-25 mode
WITHOUT task support (no ``tasks`` capability, plain ``client.callTool``: ``tests/conformance/plain_tasks_client.mjs``)
-> the gateway's ``/mcp`` -> the real core's ``build_project`` on loopback. The gateway drives the task for the call
(docs/design/bridge.md#tasks-the-gateway-drives-them-or-maps-them-onto-2025-tasks, adapters.task_poll): completed with
the confirmation accepted, declined, dismissed, failed both ways, status messages as ``notifications/progress``, and the
call aborted mid-way by the client (``notifications/cancelled``) cancelling the task upstream.

Every message the gateway sends the client is checked against the 2025-11-25 schema (and the client never sees a
task); every request it sends upstream against the 2026-07-28 schema (tests.gateway.http.test_e2e_tasks.Wire).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from adapters.task_poll import EXTENSION
from gateway.http.keys import GATEWAY
from tests.gateway import ts_sdk
from tests.gateway.http.test_e2e_tasks import CAPS_META, Wire, make_stack, task_status, tasks_counted
from tests.waiting import until

QUESTION = "demo compiled. Run its tests and publish it?"
STEPS = ("resolving dependencies", "compiling", "waiting for confirmation", "running tests", "publishing")


async def run_client(gateway: Any, mode: str, tmp_path: Path) -> dict[str, Any]:
    command = ts_sdk.node()
    if not (ts_sdk.CONFORMANCE / "node_modules" / "@modelcontextprotocol" / "sdk").exists():
        pytest.skip("the pinned TypeScript SDK is not installed (tests/conformance/install.sh)")
    status, said = await ts_sdk.run(*command, str(ts_sdk.CONFORMANCE / "plain_tasks_client.mjs"),
                                    str(gateway.make_url("/mcp")), mode, cwd=tmp_path)
    assert status == 0, said[-3000:]
    out: dict[str, Any] = json.loads(said.strip().splitlines()[-1])
    assert out["version"] == "2025-11-25"
    assert "tasks" not in out["capabilities"] and EXTENSION not in json.dumps(out["capabilities"])
    assert out["tool"] is not None and out["echo"] == "still here"  # the session outlives every build
    return out


def task_ids(wire: Wire) -> list[str]:
    """The upstream tasks the gateway drove, in the order it first named them upstream (polled, updated or
    cancelled: a call aborted at once may be cancelled before its first poll)."""
    return list(dict.fromkeys(b["params"]["taskId"] for b in wire.upstream
                              if b.get("method", "").startswith("tasks/") and "taskId" in b.get("params", {})))


async def test_the_typescript_client_without_tasks_runs_builds_the_gateway_drives(
        aiohttp_server: Any, tmp_path: Path) -> None:
    core, gateway, wire = await make_stack(aiohttp_server, tmp_path, 0.02)
    out = await run_client(gateway, "flows", tmp_path)

    published = {"project": "demo", "outcome": "published"}
    assert out["accepted"] == {"result": {"isError": False, "structured": published}, "asked": [QUESTION]}
    assert out["declined"] == {"result": {"isError": False, "structured": {"project": "demo", "outcome": "declined"}},
                               "asked": [QUESTION]}
    dismissed = out["dismissed"]
    assert dismissed["asked"] == [QUESTION] and dismissed["error"]["code"] == -32603, dismissed
    assert "cancelled" in dismissed["error"]["message"] and dismissed["error"]["data"]["taskStatus"] == "cancelled"
    failed = out["failed"]
    assert failed["asked"] == [] and failed["error"]["code"] == -32603 and "crashed" in failed["error"]["message"]
    broken = out["broken"]  # the build broke: the tool's own isError result, from the completed task
    assert broken["asked"] == [] and broken["result"]["isError"] is True
    assert broken["result"]["structured"]["outcome"] == "broken"

    builds = [b for b in wire.calls("tools/call") if b["params"]["name"] == "build_project"]
    assert len(builds) == 5 and all(EXTENSION in b["params"]["_meta"][CAPS_META]["extensions"] for b in builds)
    ids = task_ids(wire)  # each call answered with a task the gateway polled: none ran inline
    assert len(ids) == 5
    assert [await task_status(core, i) for i in ids] == ["completed", "completed", "cancelled", "failed", "completed"]
    answers = [b["params"]["inputResponses"] for b in wire.calls("tasks/update")]
    assert answers == [{"publish": {"action": "accept", "content": {"confirm": True}}},
                       {"publish": {"action": "decline"}}, {"publish": {"action": "cancel"}}]
    assert not wire.calls("tasks/cancel")  # the dismissed task ended itself: nothing left to cancel
    assert len(wire.sent("elicitation/create")) == 3 and not wire.sent("notifications/progress")  # no token sent
    assert await tasks_counted(gateway) == {"completed": 3, "cancelled": 1, "failed": 1}
    wire.check()


async def test_the_typescript_client_without_tasks_gets_progress_and_aborts_a_build(
        aiohttp_server: Any, tmp_path: Path) -> None:
    core, gateway, wire = await make_stack(aiohttp_server, tmp_path, 0.3)
    out = await run_client(gateway, "slow", tmp_path)

    progressed = out["progressed"]
    assert progressed["result"] == {"isError": False, "structured": {"project": "demo", "outcome": "published"}}
    values = [p["progress"] for p in progressed["progress"]]
    assert values == sorted(values) and len(set(values)) == len(values), values
    said = " | ".join(p.get("message") or "" for p in progressed["progress"])
    for step in STEPS:
        assert step in said, said

    aborted = out["aborted"]  # the SDK rejects the call with its abort reason at once, and tells the gateway
    assert "the user stopped the build" in aborted["error"]["message"] and aborted["asked"] == [], aborted
    assert len(aborted["progress"]) >= 1
    gw = gateway.app[GATEWAY]
    await until(lambda: wire.calls("tasks/cancel") and not any(rt.exchanges for rt in gw.runtimes.values()),
                "the aborted call's task cancelled upstream", lambda: wire.calls("tasks/cancel"))
    first, second = task_ids(wire)
    assert [b["params"]["taskId"] for b in wire.calls("tasks/cancel")] == [second]
    assert await task_status(core, first) == "completed" and await task_status(core, second) == "cancelled"
    assert len(wire.sent("elicitation/create")) == 1  # the aborted build was stopped before its confirmation
    tokens = {b["params"]["_meta"]["progressToken"] for b in wire.calls("tools/call")
              if b["params"]["name"] == "build_project"}
    assert len(tokens) == 2  # the client's own tokens, passed through opaque
    assert {n["params"]["progressToken"] for n in wire.sent("notifications/progress")} == tokens
    assert await tasks_counted(gateway) == {"completed": 1, "client_cancelled": 1}
    wire.check()
