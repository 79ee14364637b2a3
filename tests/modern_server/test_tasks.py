"""The tasks extension on the core, over real HTTP: build_project's lives, tasks/*, gating, bounds, durability.

Every reply is validated by the test client (tests.schema -> tests.task_wire for task messages).
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from modern_server.app import build_services, create_app
from modern_server.framework import SERVICES, Registry
from modern_server.taskrun import task_tool
from modern_server.tasks import TaskSupport
from tests import schema
from tests.modern_server.conftest import ALICE, BOB, CoreClient, V, core_config, parse_sse
from tests.waiting import until

TASKS = "io.modelcontextprotocol/tasks"
CAPS = {"elicitation": {"form": {}}, "extensions": {TASKS: {}}}
BUILD = "build_project"


@pytest.fixture
def config(tmp_path: Any) -> Any:
    return core_config(tmp_path, build_step_seconds=0.02, task_ttl_seconds=60, task_lease_seconds=10)


async def create(client: CoreClient, token: str = ALICE, **arguments: Any) -> str:
    reply = await client.tool(BUILD, {"project": "demo", **arguments}, caps=CAPS, token=token)
    assert reply.status == 200 and reply.result["resultType"] == "task", reply.final
    assert reply.result["status"] == "working" and reply.result["pollIntervalMs"] == 1000
    return str(reply.result["taskId"])


async def get(client: CoreClient, task_id: str, token: str = ALICE) -> dict[str, Any]:
    return (await client.call("tasks/get", {"taskId": task_id}, caps=CAPS, token=token)).result


async def until_status(client: CoreClient, task_id: str, *statuses: str, token: str = ALICE) -> dict[str, Any]:
    """The task once its status is one of ``statuses``, with every status message seen on the way (``seen``)."""
    seen: list[str] = []

    async def reached() -> dict[str, Any] | None:
        task = await get(client, task_id, token)
        seen.append(task.get("statusMessage", ""))
        return task if task["status"] in statuses else None
    task: dict[str, Any] = await until(reached, f"task {task_id} reaches {statuses}", lambda: f"messages {seen[-5:]}")
    task["seen"] = seen
    return task


async def update(client: CoreClient, task_id: str, responses: dict[str, Any], token: str = ALICE) -> Any:
    return await client.call("tasks/update", {"taskId": task_id, "inputResponses": responses}, caps=CAPS, token=token)


def confirm(yes: bool) -> dict[str, Any]:
    return {"publish": {"action": "accept", "content": {"confirm": yes}}}


async def test_a_confirmed_build_reports_asks_and_completes(client):
    task_id = await create(client)
    asked = await until_status(client, task_id, "input_required")  # a tasks/get right after creation resolved, too
    ask = asked["inputRequests"]["publish"]
    assert ask["method"] == "elicitation/create" and ask["params"]["mode"] == "form"
    assert asked["statusMessage"] == "waiting for confirmation to publish demo"
    assert any(m.startswith("step 2/4: compiling") for m in asked["seen"])
    ack = await update(client, task_id, confirm(True))
    assert ack.result == {"resultType": "complete", "_meta": ack.result["_meta"]}
    done = await until_status(client, task_id, "completed", "failed", "cancelled")
    assert done["status"] == "completed" and done["result"]["structuredContent"] == {
        "project": "demo", "outcome": "published"}
    assert "isError" not in done["result"] and done["result"]["resultType"] == "complete"
    assert any(m.startswith("step 4/4: publishing") for m in done["seen"])


@pytest.mark.parametrize(("answer", "status", "outcome"), [
    ({"publish": {"action": "decline"}}, "completed", "declined"),
    (confirm(False), "completed", "declined"),  # confirm false is never consent
    ({"publish": {"action": "cancel"}}, "cancelled", None),  # the user dismissed the question
])
async def test_a_declined_or_dismissed_confirmation(client, answer, status, outcome):
    task_id = await create(client)
    await until_status(client, task_id, "input_required")
    await update(client, task_id, answer)
    done = await until_status(client, task_id, "completed", "failed", "cancelled")
    assert done["status"] == status
    if outcome:
        assert done["result"]["structuredContent"]["outcome"] == outcome and "isError" not in done["result"]
    else:
        assert "result" not in done and "cancelled at its confirmation" in done["statusMessage"]


async def test_a_broken_build_completes_with_is_error_and_a_crash_fails_the_task(client):
    broken = await until_status(client, await create(client, simulate_failure="tool_error"), "completed", "failed")
    assert broken["status"] == "completed" and broken["result"]["isError"] is True
    crashed = await until_status(client, await create(client, simulate_failure="protocol_error"), "completed", "failed")
    assert crashed["status"] == "failed" and crashed["error"]["code"] == -32603 and "result" not in crashed
    assert "crashed" in crashed["error"]["message"] and crashed["statusMessage"].startswith("failed: ")


async def test_cancel_mid_build_stops_it_and_is_idempotent(client, core):
    task_id = await create(client)
    await until_status(client, task_id, "input_required")
    assert task_id in core.services.running
    for _ in range(2):  # the second cancel meets a terminal task: the same empty acknowledgement
        ack = await client.call("tasks/cancel", {"taskId": task_id}, caps=CAPS, token=ALICE)
        assert set(ack.result) == {"resultType", "_meta"}
    assert (await get(client, task_id))["status"] == "cancelled"
    await until(lambda: task_id not in core.services.running)  # the runner notices at its next look and ends
    assert task_id not in core.services.running
    late = await update(client, task_id, confirm(True))  # answers to a cancelled task change nothing
    assert late.status == 200 and (await get(client, task_id))["status"] == "cancelled"


async def test_another_principal_cannot_see_or_touch_a_task(client):
    task_id = await create(client)
    await until_status(client, task_id, "input_required")
    unknown = await client.call("tasks/get", {"taskId": "no-such-task"}, caps=CAPS, token=BOB)
    for method, extra in (("tasks/get", {}), ("tasks/update", {"inputResponses": confirm(True)}),
                          ("tasks/cancel", {})):
        reply = await client.call(method, {"taskId": task_id, **extra}, caps=CAPS, token=BOB)
        assert reply.status == 400 and reply.error["code"] == -32602
        assert reply.error["message"] == unknown.error["message"] == "Failed to retrieve task: Task not found"
    assert (await get(client, task_id))["status"] == "input_required"  # alice's task is untouched


async def test_without_the_extension_the_build_runs_in_its_call_and_asks_through_mrtr(client):
    form = {"elicitation": {"form": {}}}
    first = await client.tool(BUILD, {"project": "demo"}, caps=form)
    assert first.result["resultType"] == "input_required" and "taskId" not in first.result
    assert first.result["inputRequests"]["publish"]["method"] == "elicitation/create"
    done = await client.tool(BUILD, {"project": "demo"}, caps=form, requestState=first.result["requestState"],
                             inputResponses=confirm(True))
    assert done.result["resultType"] == "complete"
    assert done.result["structuredContent"] == {"project": "demo", "outcome": "published"}
    bad = await client.tool(BUILD, {"project": "demo"}, caps=form, requestState=first.result["requestState"],
                            inputResponses={"publish": {"action": "maybe"}})
    assert bad.error["code"] == -32602


async def test_a_task_only_tool_refuses_a_client_without_the_extension(aiohttp_server, config, clock):
    async def job(run: Any) -> dict[str, Any]:
        return {"content": []}

    registry = Registry(tools={"only_task": task_tool("only_task", "t", {"type": "object"}, job,
                                                      TaskSupport.REQUIRED)})
    server = await aiohttp_server(create_app(config, services=build_services(config, env={}, clock=clock),
                                             registry=registry))
    async with aiohttp.ClientSession() as session:
        client = CoreClient(session, str(server.make_url("/mcp")))
        refused = await client.tool("only_task", caps={})
        assert refused.status == 400 and refused.error["code"] == -32021
        assert refused.error["data"] == {"requiredCapabilities": {"extensions": {TASKS: {}}}}
        created = await client.tool("only_task", caps=CAPS)
        assert created.result["resultType"] == "task"


async def test_tasks_methods_need_the_extension(client):
    for method, extra in (("tasks/get", {}), ("tasks/update", {"inputResponses": {}}), ("tasks/cancel", {})):
        reply = await client.call(method, {"taskId": "x", **extra}, caps={})
        assert reply.status == 400 and reply.error["code"] == -32021
    no_form = await client.tool(BUILD, {"project": "demo"}, caps={"extensions": {TASKS: {}}})
    assert no_form.error["data"] == {"requiredCapabilities": {"elicitation": {"form": {}}}}
    bad = await client.tool(BUILD, {"project": ""}, caps=CAPS)
    assert bad.error["code"] == -32602  # bad arguments fail the call itself, never as a failed task
    discovered = await client.call("server/discover", caps={})
    assert discovered.result["capabilities"]["extensions"][TASKS] == {}


async def test_a_bad_answer_is_refused_and_loses_nothing(client):
    task_id = await create(client)
    await until_status(client, task_id, "input_required")
    bad = await update(client, task_id, {"publish": {"action": "maybe"}})
    assert bad.status == 400 and bad.error["code"] == -32602 and "publish" in bad.error["message"]
    still = await get(client, task_id)
    assert still["status"] == "input_required" and "publish" in still["inputRequests"]
    ignored = await update(client, task_id, {"never-asked": {"whatever": 1}})  # unknown keys: ignored
    assert ignored.status == 200 and (await get(client, task_id))["status"] == "input_required"
    missing = await client.call("tasks/update", {"taskId": task_id}, caps=CAPS, token=ALICE)
    assert missing.error["code"] == -32602
    mismatch = await client.call("tasks/get", {"taskId": task_id}, caps=CAPS, token=ALICE,
                                 headers={"Mcp-Name": "another-task"})
    assert mismatch.status == 400 and mismatch.error["code"] == -32020


async def test_a_task_expires_after_its_ttl(client, core, clock):
    task_id = await create(client)
    await until_status(client, task_id, "input_required")
    clock.now += 59.9
    assert (await get(client, task_id))["ttlMs"] == 60_000
    clock.now += 0.1
    gone = await client.call("tasks/get", {"taskId": task_id}, caps=CAPS, token=ALICE)
    assert gone.error["code"] == -32602 and gone.error["message"] == "Failed to retrieve task: Task has expired"
    assert core.services.store.task(task_id) is None  # purged
    await until(lambda: task_id not in core.services.running)
    assert task_id not in core.services.running  # its runner stopped too


async def test_bounds_on_unfinished_tasks_and_on_kept_tasks(aiohttp_server, tmp_path, clock):
    cfg = core_config(tmp_path, build_step_seconds=0.02, max_active_tasks_per_principal=2, max_tasks=3)
    server = await aiohttp_server(create_app(cfg, services=build_services(cfg, env={}, clock=clock)))
    async with aiohttp.ClientSession() as session:
        client = CoreClient(session, str(server.make_url("/mcp")))
        first, second = await create(client), await create(client)
        over = await client.tool(BUILD, {"project": "demo"}, caps=CAPS, token=ALICE)
        assert over.status == 200 and over.error["code"] == -32000
        assert over.error["data"] == {"limit": "max_active_tasks_per_principal", "max": 2}
        bobs = await create(client, token=BOB)  # the bound is per principal
        await client.call("tasks/cancel", {"taskId": first}, caps=CAPS, token=ALICE)
        third = await create(client)  # total 3 kept: the finished one makes room (it is evicted)
        assert (await client.call("tasks/get", {"taskId": first}, caps=CAPS, token=ALICE)).error["code"] == -32602
        full = await client.tool(BUILD, {"project": "demo"}, caps=CAPS, token=BOB)
        assert full.error["code"] == -32000 and full.error["data"]["limit"] == "max_tasks_total"
        for task_id in (second, third):
            assert (await get(client, task_id))["status"] in ("working", "input_required")
        assert (await get(client, bobs, BOB))["status"] in ("working", "input_required")


async def test_task_notifications_on_a_listen_stream(client):
    task_id = await create(client)
    await until_status(client, task_id, "input_required")
    params = {"notifications": {"taskIds": [task_id, "not-mine-or-unknown"]}, "_meta": client.meta(CAPS)}
    body = {"jsonrpc": "2.0", "id": "listen-t", "method": "subscriptions/listen", "params": params}
    headers = client.headers("subscriptions/listen", params, ALICE)
    async with client.session.post(client.url, json=body, headers=headers) as resp:
        ack = await _next_event(resp)
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        assert ack["params"]["notifications"] == {"taskIds": [task_id]}
        snapshot = await _next_event(resp)
        assert snapshot["params"]["status"] == "input_required"
        await update(client, task_id, confirm(True))
        statuses = []
        while not statuses or statuses[-1] != "completed":
            event = await _next_event(resp)
            assert event["method"] == "notifications/tasks" and event["params"]["taskId"] == task_id
            assert event["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-t"
            statuses.append(event["params"]["status"])
    assert statuses[0] == "working" and statuses[-1] == "completed"
    assert "publishing" in " ".join(statuses) or len(statuses) >= 3
    refused = await client.call("subscriptions/listen", {"notifications": {"taskIds": [task_id]}}, caps={})
    assert refused.error["code"] == -32021


async def test_a_listen_stream_carries_only_its_own_principals_task_events(client, core):
    bobs = await create(client, token=BOB)
    params = {"notifications": {"taskIds": [bobs]}, "_meta": client.meta(CAPS)}
    body = {"jsonrpc": "2.0", "id": "listen-b", "method": "subscriptions/listen", "params": params}
    async with client.session.post(client.url, json=body, headers=client.headers("subscriptions/listen", params,
                                                                                 BOB)) as resp:
        assert (await _next_event(resp))["params"]["notifications"] == {"taskIds": [bobs]}
        status = (await _next_event(resp))["params"]["status"]  # the snapshot, then every change
        while status != "input_required":
            status = (await _next_event(resp))["params"]["status"]
        # An event addressed to another principal, even about an id this stream follows, is never delivered.
        core.services.bus.publish("notifications/tasks", {"taskId": bobs, "status": "completed"}, "alice")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(_next_event(resp), 0.3)


# ---------------------------------------------------------------------------------------------- durability

async def _serve(aiohttp_server: Any, cfg: Any, clock: Any) -> Any:
    return await aiohttp_server(create_app(cfg, services=build_services(cfg, env={}, clock=clock)))


async def test_a_task_survives_a_restart_of_the_core(aiohttp_server, config, clock):
    first = await _serve(aiohttp_server, config, clock)
    async with aiohttp.ClientSession() as session:
        client = CoreClient(session, str(first.make_url("/mcp")))
        task_id = await create(client)
        asked = await until_status(client, task_id, "input_required")
        await first.close()  # a graceful stop releases the task's lease
        second = await _serve(aiohttp_server, config, clock)
        client = CoreClient(session, str(second.make_url("/mcp")))
        again = await get(client, task_id)
        assert again["status"] == "input_required" and again["inputRequests"] == asked["inputRequests"]
        assert again["createdAt"] == asked["createdAt"]
        await update(client, task_id, confirm(True))
        done = await until_status(client, task_id, "completed")
        assert done["result"]["structuredContent"]["outcome"] == "published"


async def test_a_dead_runner_is_taken_over_once_its_lease_runs_out(aiohttp_server, config, clock):
    first = await _serve(aiohttp_server, config, clock)
    second = await _serve(aiohttp_server, config, clock)  # another process on the same SQLite file

    async with aiohttp.ClientSession() as session:
        one = CoreClient(session, str(first.make_url("/mcp")))
        two = CoreClient(session, str(second.make_url("/mcp")))
        task_id = await create(one)
        await until_status(one, task_id, "input_required")
        runner = first.app[SERVICES].running[task_id]
        runner.cancel()  # the first process "dies": its runner is gone, its lease is not released
        await asyncio.gather(runner, return_exceptions=True)
        await get(two, task_id)
        assert task_id not in second.app[SERVICES].running  # the lease still holds: nobody takes it over
        await update(two, task_id, confirm(True))
        await asyncio.sleep(0.1)  # sleep: a quiet window: nobody may run the task while the lease holds
        assert (await get(two, task_id))["status"] == "working"  # answered, but nobody runs it yet
        clock.now += config.task_lease_seconds
        await get(two, task_id)  # the lease ran out: this process resumes the build from its checkpoint
        assert task_id in second.app[SERVICES].running
        done = await until_status(two, task_id, "completed")
        assert done["result"]["structuredContent"]["outcome"] == "published"


async def _next_event(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    buffer = b""
    while b"\n\n" not in buffer:
        chunk = await asyncio.wait_for(resp.content.readline(), 5)
        assert chunk, "stream ended"
        buffer += chunk
    event = parse_sse(buffer.decode())[0]
    schema.check(V, event)
    return event
