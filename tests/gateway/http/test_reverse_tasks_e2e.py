"""Tasks in reverse end to end (docs/design/eras.md#tasks-in-reverse): raw 2026-07-28 requests declaring the tasks
extension, through the gateway, to the conformance lane's 2025-11-25-only server (tests/conformance/
legacy_server.mjs, TypeScript SDK 1.x with its 2025 tasks): a task created, polled, asked a question and
answered, completed, cancelled, heard on a listen, and kept from another principal. Every answer is checked
against the 2026 wire (tests.schema; the extension's shapes with tests.task_wire). Real processes on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from gateway.http.keys import REVERSE
from tests import schema
from tests.gateway.http.test_reverse_e2e import LISTEN_HEADERS, META, _next_data, _post
from tests.gateway.http.test_reverse_ts import SUITE_SERVER, _gateway, _ts_server
from tests.waiting import until

EXT = "io.modelcontextprotocol/tasks"
CAPS = {"elicitation": {}, "extensions": {EXT: {}}}
TASKS_META = {**META, "io.modelcontextprotocol/clientCapabilities": CAPS}


@pytest.fixture
async def gateway(aiohttp_server: Any) -> AsyncIterator[Any]:
    with _ts_server(SUITE_SERVER) as url:
        yield await _gateway(aiohttp_server, url)


async def call(http: aiohttp.ClientSession, gateway: Any, method: str, params: dict[str, Any],
               meta: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    """One 2026 request; a successful answer is checked against the 2026 wire."""
    name = params.get("name") if method == "tools/call" else params.get("taskId")
    status, said = await _post(http, gateway, 1, method, params, name, meta or TASKS_META)
    if "result" in said:
        schema.check("2026-07-28", said, method)
    return status, said


async def result(http: aiohttp.ClientSession, gateway: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
    status, said = await call(http, gateway, method, params)
    assert status == 200 and "result" in said, said
    return dict(said["result"])


async def status_of(http: aiohttp.ClientSession, gateway: Any, task_id: str, wanted: str) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        task = await result(http, gateway, "tasks/get", {"taskId": task_id})
        return task if task["status"] == wanted else None
    return dict(await until(reached, f"the task is {wanted}"))


async def test_a_task_is_created_polled_asked_answered_and_completed(gateway: Any) -> None:
    async with aiohttp.ClientSession() as http:
        found = await result(http, gateway, "server/discover", {})
        assert EXT in found["capabilities"]["extensions"] and "tasks" not in found["capabilities"]

        created = await result(http, gateway, "tools/call", {"name": "slow_compute",
                                                             "arguments": {"seconds": 0.3, "label": "e2e"}})
        assert created["resultType"] == "task"
        working = await result(http, gateway, "tasks/get", {"taskId": created["taskId"]})
        assert working["taskId"] == created["taskId"] and working["status"] in ("working", "completed")
        done = await status_of(http, gateway, created["taskId"], "completed")
        assert done["result"]["content"][0]["text"] == "computed e2e after 0.3s"

        asked = await result(http, gateway, "tools/call", {"name": "confirm_delete",
                                                           "arguments": {"filename": "a.txt"}})
        waiting = await status_of(http, gateway, asked["taskId"], "input_required")
        [(key, question)] = waiting["inputRequests"].items()
        assert question["method"] == "elicitation/create" and question["params"]["message"] == "Delete a.txt?"
        ack = await result(http, gateway, "tasks/update", {"taskId": asked["taskId"], "inputResponses": {
            key: {"action": "accept", "content": {"confirm": True}}, "unknown": {"action": "decline"}}})
        assert ack == {"resultType": "complete"}
        done = await status_of(http, gateway, asked["taskId"], "completed")
        assert done["result"]["content"][0]["text"] == "deleted a.txt"
        assert await result(http, gateway, "tasks/cancel", {"taskId": asked["taskId"]}) == ack  # idempotent

        failed = await result(http, gateway, "tools/call", {"name": "failing_job", "arguments": {}})
        done = await status_of(http, gateway, failed["taskId"], "completed")  # a tool's error: completed, isError
        assert done["result"]["isError"] is True
        unpolled = await result(http, gateway, "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.2}})
    bridge = gateway.app[REVERSE]
    # a task nobody polls is finished by its driver: its session is released all the same
    await until(lambda: all(p.busy == 0 for p in bridge.pool.values()), "every task released its session")
    [kept] = [e for (_, t), e in bridge.legacy_tasks.entries.items() if t == unpolled["taskId"]]
    assert kept.state.final is not None and kept.state.final["status"] == "completed"


async def test_a_running_task_is_cancelled_upstream(gateway: Any) -> None:
    async with aiohttp.ClientSession() as http:
        created = await result(http, gateway, "tools/call", {"name": "slow_compute",
                                                             "arguments": {"seconds": 60, "label": "long"}})
        assert await result(http, gateway, "tasks/cancel", {"taskId": created["taskId"]}) == {
            "resultType": "complete"}
        cancelled = await status_of(http, gateway, created["taskId"], "cancelled")
        assert "result" not in cancelled and "error" not in cancelled
        assert await result(http, gateway, "tasks/cancel", {"taskId": created["taskId"]}) == {
            "resultType": "complete"}


async def test_the_extension_decides_and_gates(gateway: Any) -> None:
    plain = {**META, "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
    async with aiohttp.ClientSession() as http:
        status, inline = await call(http, gateway, "tools/call", {"name": "slow_compute", "arguments": {
            "seconds": 0, "label": "inline"}, "task": {"ttl": 1000}}, plain)
        assert (status, inline["result"]["resultType"]) == (200, "complete")  # no task to an undeclared client
        status, refused = await call(http, gateway, "tools/call", {"name": "failing_job", "arguments": {}}, plain)
        assert (status, refused["error"]["code"]) == (400, -32021)
        assert refused["error"]["data"] == {"requiredCapabilities": {"extensions": {EXT: {}}}}
        status, gated = await call(http, gateway, "tasks/get", {"taskId": "whatever"}, plain)
        assert (status, gated["error"]["code"]) == (400, -32021)
        status, sync = await call(http, gateway, "tools/call", {"name": "greet", "arguments": {"name": "Ada"},
                                                                "task": {"ttl": 1000}})
        assert sync["result"]["content"][0]["text"] == "Hello, Ada!"  # a v1 task hint never makes a task
        for removed in ("tasks/result", "tasks/list"):
            status, gone = await call(http, gateway, removed, {"taskId": "whatever"})
            assert (status, gone["error"]["code"]) == (404, -32601)
        status, unknown = await call(http, gateway, "tasks/get", {"taskId": "never-created"})
        assert (status, unknown["error"]["code"]) == (400, -32602)


async def test_a_task_is_never_visible_to_another_principal(gateway: Any) -> None:
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer alice"}) as alice, \
            aiohttp.ClientSession(headers={"Authorization": "Bearer bob"}) as bob:
        created = await result(alice, gateway, "tools/call", {"name": "confirm_delete",
                                                              "arguments": {"filename": "secret.txt"}})
        task_id = created["taskId"]
        waiting = await status_of(alice, gateway, task_id, "input_required")
        key = next(iter(waiting["inputRequests"]))
        for method, params in [("tasks/get", {}), ("tasks/cancel", {}),
                               ("tasks/update", {"inputResponses": {key: {"action": "decline"}}})]:
            status, refused = await call(bob, gateway, method, {"taskId": task_id, **params})
            assert (status, refused["error"]["code"]) == (400, -32602), refused
        still = await result(alice, gateway, "tasks/get", {"taskId": task_id})
        assert still["status"] == "input_required" and key in still["inputRequests"]  # bob changed nothing
        await result(alice, gateway, "tasks/update", {"taskId": task_id, "inputResponses": {
            key: {"action": "accept", "content": {"confirm": True}}}})
        done = await status_of(alice, gateway, task_id, "completed")
        assert done["result"]["content"][0]["text"] == "deleted secret.txt"
    sessions = {p.session.session_id for p in gateway.app[REVERSE].pool.values()}
    assert len(sessions) == 2  # each principal's requests rode its own legacy session


async def test_a_listen_hears_the_status_of_its_principals_tasks(gateway: Any) -> None:
    """ext-tasks §Task Status Notifications: ``notifications/tasks`` on subscriptions/listen for the tasks it
    names, its principal's own only; the current state first, then each change."""
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer alice"}) as alice, \
            aiohttp.ClientSession(headers={"Authorization": "Bearer bob"}) as bob:
        mine = await result(alice, gateway, "tools/call", {"name": "confirm_delete", "arguments": {"filename": "n"}})
        theirs = await result(bob, gateway, "tools/call", {"name": "slow_compute", "arguments": {"seconds": 60}})
        headers = LISTEN_HEADERS
        params = {"notifications": {"taskIds": [mine["taskId"], theirs["taskId"]]}, "_meta": TASKS_META}
        listen = await alice.post(gateway.make_url("/mcp"), headers=headers, json={
            "jsonrpc": "2.0", "id": "l1", "method": "subscriptions/listen", "params": params})
        try:
            ack = await _next_data(listen)
            assert ack["params"]["notifications"] == {"taskIds": [mine["taskId"]]}  # bob's task is not alice's

            async def next_task() -> dict[str, Any]:
                message = await _next_data(listen)
                assert message["method"] == "notifications/tasks", message
                schema.check("2026-07-28", message)
                assert message["params"]["_meta"] == {"io.modelcontextprotocol/subscriptionId": "l1"}
                return dict(message["params"])

            told = await next_task()
            while told["status"] != "input_required":  # working until its question arrived
                told = await next_task()
            [key] = told["inputRequests"]
            await result(alice, gateway, "tasks/update", {"taskId": mine["taskId"], "inputResponses": {
                key: {"action": "accept", "content": {"confirm": True}}}})
            while told["status"] != "completed":
                told = await next_task()
            assert told["taskId"] == mine["taskId"] and told["result"]["content"][0]["text"] == "deleted n"
        finally:
            listen.close()
        await result(bob, gateway, "tasks/cancel", {"taskId": theirs["taskId"]})
        plain = {**TASKS_META, "io.modelcontextprotocol/clientCapabilities": {}}
        status, refused = await _post(alice, gateway, 2, "subscriptions/listen",
                                      {"notifications": {"taskIds": [mine["taskId"]]}}, None, plain)
        assert (status, refused["error"]["code"]) == (400, -32021)
