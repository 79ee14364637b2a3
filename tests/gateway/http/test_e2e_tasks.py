"""A long-running tool that runs as an upstream task (io.modelcontextprotocol/tasks), reached by a client that
knows nothing of tasks: the official ``mcp`` SDK in ``mode="legacy"`` -> the gateway -> the real core's
``build_project`` on loopback (docs/design/bridge.md#tasks-the-gateway-drives-them-or-maps-them-onto-2025-tasks).

Every message the gateway sends the client is checked against the 2025-11-25 schema; every request it sends
upstream against the 2026-07-28 schema, its task requests against the extension's shapes (tests.task_wire).
"""

from __future__ import annotations

from typing import Any

import aiohttp
import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from prometheus_client.parser import text_string_to_metric_families

from adapters.task_poll import EXTENSION
from adapters.upstream import SessionView, build_request
from gateway.config.settings import load_config
from gateway.http.app import GATEWAY, create_app
from tests import schema
from tests.waiting import until

core_app = pytest.importorskip("modern_server.app")
core_config = pytest.importorskip("modern_server.config")

CAPS_META = "io.modelcontextprotocol/clientCapabilities"
FAST = {"task_poll_floor_seconds": 0.05, "task_poll_max_seconds": 0.1}


class Wire:
    """The gateway's wire tap, checked against the official schemas (and the extension's shapes)."""

    def __init__(self) -> None:
        self.downstream: list[dict[str, Any]] = []
        self.upstream: list[dict[str, Any]] = []

    def __call__(self, direction: str, message: Any) -> None:
        (self.downstream if direction == "downstream" else self.upstream).append(message)

    def check(self) -> None:
        for message in self.downstream:
            assert "task" not in str(message.get("result", {}).keys()), message  # the client never sees a task
            kind = "ServerRequest" if "id" in message and "method" in message else (
                "ServerNotification" if "method" in message else "JSONRPCMessage")
            problems = schema.errors("2025-11-25", kind, message) if schema.available("2025-11-25") else []
            assert not problems, (message, problems[:3])
        for body in self.upstream:
            schema.check("2026-07-28", body)
            if schema.available("2026-07-28") and not body["method"].startswith("tasks/"):
                assert not schema.errors("2026-07-28", "ClientRequest", body), body

    def calls(self, method: str) -> list[dict[str, Any]]:
        return [b for b in self.upstream if b.get("method") == method]

    def sent(self, method: str) -> list[dict[str, Any]]:
        return [m for m in self.downstream if m.get("method") == method]


async def make_stack(aiohttp_server, tmp_path, step: float):
    config = core_config.CoreConfig(database=str(tmp_path / "core.db"), build_step_seconds=step,
                                    task_poll_interval_ms=50)
    core = await aiohttp_server(core_app.create_app(config))
    wire = Wire()
    gateway = await aiohttp_server(create_app(load_config(upstream_url=str(core.make_url("/mcp")), sse_retry_ms=50,
                                                          limits=FAST), tap=wire))
    return core, gateway, wire


@pytest.fixture
async def stack(aiohttp_server, tmp_path):
    core, gateway, wire = await make_stack(aiohttp_server, tmp_path, 0.02)
    yield core, gateway, wire
    wire.check()


@pytest.fixture
async def slow_stack(aiohttp_server, tmp_path):
    core, gateway, wire = await make_stack(aiohttp_server, tmp_path, 0.3)
    yield core, gateway, wire
    wire.check()


def confirming(action: str, confirm: bool = True):
    seen: list[Any] = []

    async def elicit(context, params):
        seen.append(params)
        return types.ElicitResult(action=action, content={"confirm": confirm} if action == "accept" else None)
    elicit.seen = seen  # type: ignore[attr-defined]
    return elicit


def legacy(gateway, elicit) -> Client:
    return Client(str(gateway.make_url("/mcp")), mode="legacy", elicitation_callback=elicit)


async def task_status(core, task_id: str) -> str:
    """The task's status as the core itself answers ``tasks/get`` (the extension declared, as the gateway does)."""
    view = SessionView({"extensions": {EXTENSION: {}}}, {"name": "probe", "version": "1"})
    call = build_request("tasks/get", {"taskId": task_id}, request_id=1, view=view)
    async with aiohttp.ClientSession() as http, http.post(core.make_url("/mcp"), json=call.body,
                                                            headers=call.headers) as resp:
        body = await resp.json(content_type=None)
    return str(body["result"]["status"])


async def tasks_counted(gateway) -> dict[str, float]:
    """``mcp_gateway_tasks`` by outcome, as /metrics shows it."""
    async with aiohttp.ClientSession() as http, http.get(gateway.make_url("/metrics")) as resp:
        text = await resp.text()
    return {s.labels["outcome"]: s.value for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == "mcp_gateway_tasks_total"}


def the_task(wire: Wire) -> str:
    ids = {b["params"]["taskId"] for b in wire.calls("tasks/get")}
    assert len(ids) == 1, ids
    return ids.pop()


async def test_completed_with_the_confirmation_accepted(stack) -> None:
    core, gateway, wire = stack
    elicit = confirming("accept")
    async with legacy(gateway, elicit) as client:
        assert EXTENSION not in str(client.server_capabilities.model_dump())  # the gateway's to use, not offered
        result = await client.call_tool("build_project", {"project": "demo"})
    assert not result.is_error and result.structured_content == {"project": "demo", "outcome": "published"}
    assert len(elicit.seen) == 1 and "demo compiled" in elicit.seen[0].message
    (call,) = wire.calls("tools/call")
    assert EXTENSION in call["params"]["_meta"][CAPS_META]["extensions"]  # declared: the core offers it
    (update,) = wire.calls("tasks/update")
    assert update["params"]["inputResponses"] == {"publish": {"action": "accept", "content": {"confirm": True}}}
    assert await task_status(core, the_task(wire)) == "completed" and not wire.calls("tasks/cancel")
    assert await tasks_counted(gateway) == {"completed": 1}


async def test_declined(stack) -> None:
    _core, gateway, wire = stack
    async with legacy(gateway, confirming("decline")) as client:
        result = await client.call_tool("build_project", {"project": "demo"})
    assert result.structured_content == {"project": "demo", "outcome": "declined"}
    assert wire.calls("tasks/update")[0]["params"]["inputResponses"] == {"publish": {"action": "decline"}}


async def test_the_confirmation_cancelled_ends_the_call_with_the_cancelled_task(stack) -> None:
    core, gateway, wire = stack
    async with legacy(gateway, confirming("cancel")) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("build_project", {"project": "demo"})
        assert (await client.call_tool("echo", {"text": "still here"})).content[0].text == "still here"
    error = raised.value.error
    assert error.code == -32603 and "cancelled" in error.message and error.data["taskStatus"] == "cancelled"
    assert await task_status(core, the_task(wire)) == "cancelled" and not wire.calls("tasks/cancel")


@pytest.mark.parametrize("failure,code", [("protocol_error", -32603), ("tool_error", None)])
async def test_a_failed_build(stack, failure, code) -> None:
    _core, gateway, wire = stack
    async with legacy(gateway, confirming("accept")) as client:
        if code is None:  # the build broke: the tool's own isError result
            result = await client.call_tool("build_project", {"project": "demo", "simulate_failure": failure})
            assert result.is_error and result.structured_content["outcome"] == "broken"
            assert wire.calls("tasks/get")  # as a task (run in its call, the answer would be the same)
            return
        with pytest.raises(MCPError) as raised:
            await client.call_tool("build_project", {"project": "demo", "simulate_failure": failure})
    assert raised.value.error.code == code and "crashed" in raised.value.error.message


async def test_progress_from_the_tasks_status_messages(slow_stack) -> None:
    _core, gateway, wire = slow_stack
    progress: list[tuple[float, str | None]] = []

    async def on_progress(value, total, message) -> None:
        progress.append((value, message))
    async with legacy(gateway, confirming("accept")) as client:
        result = await client.call_tool("build_project", {"project": "demo"}, progress_callback=on_progress)
    assert result.structured_content["outcome"] == "published"
    values = [v for v, _ in progress]
    assert values == sorted(values) and len(set(values)) == len(values)
    said = " | ".join(m or "" for _, m in progress)
    for step in ("resolving dependencies", "compiling", "waiting for confirmation", "running tests", "publishing"):
        assert step in said, said
    token = wire.calls("tools/call")[0]["params"]["_meta"]["progressToken"]
    assert all(n["params"]["progressToken"] == token for n in wire.sent("notifications/progress"))


async def test_cancelled_mid_way_by_the_client_cancels_the_task_upstream(slow_stack) -> None:
    core, gateway, wire = slow_stack
    async with legacy(gateway, confirming("accept")) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "build_project", {"project": "demo"})
            await until(lambda: wire.calls("tasks/get"))
            tg.cancel_scope.cancel()
        gw = gateway.app[GATEWAY]
        await until(lambda: wire.calls("tasks/cancel") and not any(rt.exchanges for rt in gw.runtimes.values()))
        task_id = the_task(wire)
        assert [b["params"]["taskId"] for b in wire.calls("tasks/cancel")] == [task_id]
        assert await task_status(core, task_id) == "cancelled"
        assert await tasks_counted(gateway) == {"client_cancelled": 1}
        assert (await client.call_tool("echo", {"text": "still here"})).content[0].text == "still here"
    assert not wire.sent("elicitation/create")  # cancelled before its confirmation
