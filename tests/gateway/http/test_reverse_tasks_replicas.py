"""Tasks in reverse on replicas (docs/design/eras.md#tasks-in-reverse): two gateways on one Redis (a key prefix of
each test alone) with one state key, in front of the conformance lane's 2025-11-25-only TypeScript server
(tests/conformance/legacy_server.mjs, its task fixtures). A task lives on the replica that made it; its requests
reaching the other replica are relayed to it through the store's bus and answered from there, another principal's
never leave the replica they reached, a listen there hears the task's state by relay, each change pushed by the
holder as it happens (also on the in-process shared store), and a task whose replica is killed is told lost. Real
processes on loopback."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from yarl import URL

pytest.importorskip("redis")

from gateway.config.settings import load_config
from gateway.http.app import create_app
from gateway.http.keys import REVERSE
from gateway.session.store import SharedMemory
from tests import schema
from tests.gateway.http.test_reverse_e2e import LISTEN_HEADERS, _next_data
from tests.gateway.http.test_reverse_replicas import KEY_ENV, _serve
from tests.gateway.http.test_reverse_tasks_e2e import TASKS_META, call, result, status_of
from tests.gateway.http.test_reverse_ts import SUITE_SERVER, _ts_server
from tests.gateway.session.test_redis_store import prefix, redis_url  # noqa: F401  (fixtures)
from tests.waiting import until, within

ACCEPT = {"action": "accept", "content": {"confirm": True}}


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch, redis_url: str, prefix: str) -> dict[str, Any]:  # noqa: F811
    monkeypatch.setenv(KEY_ENV, "one key for every replica")
    return {"store": {"url": redis_url, "prefix": prefix}, "reverse": {"state_key_env": KEY_ENV}}


@pytest.fixture
def legacy() -> Iterator[str]:
    with _ts_server(SUITE_SERVER) as url:
        yield url


async def _replicas(aiohttp_server: Any, legacy: str, shared: dict[str, Any]) -> tuple[Any, Any]:
    config = load_config(upstream_url=legacy, upstream_era="2025-11-25", **shared)
    return await aiohttp_server(create_app(config)), await aiohttp_server(create_app(config))


class At:
    """A gateway in a process of its own, addressed as the test servers are (``make_url``)."""

    def __init__(self, url: str) -> None:
        self.url = URL(url)

    def make_url(self, path: str) -> URL:
        return self.url.with_path(path)


def _relays(gateway: Any) -> list[str]:
    """The replicas ``gateway``'s bridge relays requests to, as it relays them."""
    bridge, sent = gateway.app[REVERSE], []
    forward = bridge.forward

    async def counted(replica: str, relayed: dict[str, Any]) -> Any:
        sent.append(replica)
        return await forward(replica, relayed)
    bridge.forward = counted
    return sent


async def test_a_task_made_on_one_replica_is_polled_answered_and_cancelled_through_the_other(
        aiohttp_server: Any, legacy: str, shared: dict[str, Any]) -> None:
    a, b = await _replicas(aiohttp_server, legacy, shared)
    relayed = _relays(b)
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer alice"}) as alice:
        asked = await result(alice, a, "tools/call", {"name": "confirm_delete", "arguments": {"filename": "r.txt"}})
        task_id = asked["taskId"]
        waiting = await status_of(alice, b, task_id, "input_required")  # its question, as A's driver heard it
        [(key, question)] = waiting["inputRequests"].items()
        assert question["params"]["message"] == "Delete r.txt?"
        assert await result(alice, b, "tasks/update", {"taskId": task_id, "inputResponses": {key: ACCEPT}}) == {
            "resultType": "complete"}
        done = await status_of(alice, b, task_id, "completed")
        assert done["result"]["content"][0]["text"] == "deleted r.txt"
        assert await result(alice, a, "tasks/get", {"taskId": task_id}) == done  # one task, seen from either

        running = await result(alice, a, "tools/call", {"name": "slow_compute", "arguments": {"seconds": 60}})
        assert await result(alice, b, "tasks/cancel", {"taskId": running["taskId"]}) == {"resultType": "complete"}
        cancelled = await status_of(alice, b, running["taskId"], "cancelled")
        assert "result" not in cancelled and "error" not in cancelled
    holder = a.app[REVERSE].legacy_tasks
    assert {t for _, t in holder.entries} == {task_id, running["taskId"]} and not b.app[REVERSE].legacy_tasks.entries
    assert relayed and set(relayed) == {a.app[REVERSE].settings.replica}  # every one of B's answers came from A


async def test_another_principals_request_is_unknown_and_never_relayed(
        aiohttp_server: Any, legacy: str, shared: dict[str, Any]) -> None:
    a, b = await _replicas(aiohttp_server, legacy, shared)
    relayed = _relays(b)
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer alice"}) as alice, \
            aiohttp.ClientSession(headers={"Authorization": "Bearer bob"}) as bob:
        asked = await result(alice, a, "tools/call", {"name": "confirm_delete", "arguments": {"filename": "s"}})
        task_id = asked["taskId"]
        key = next(iter((await status_of(alice, a, task_id, "input_required"))["inputRequests"]))
        for gateway in (b, a):
            for method, params in [("tasks/get", {}), ("tasks/cancel", {}),
                                   ("tasks/update", {"inputResponses": {key: {"action": "decline"}}})]:
                status, refused = await call(bob, gateway, method, {"taskId": task_id, **params})
                assert (status, refused["error"]) == (400, {"code": -32602, "message": "unknown taskId",
                                                            "data": {"taskId": "unknown"}}), refused
            status, never = await call(alice, gateway, "tasks/get", {"taskId": "never-made"})
            assert (status, never["error"]["message"]) == (400, "unknown taskId")
        assert relayed == []  # none of it left B
        still = await result(alice, b, "tasks/get", {"taskId": task_id})
        assert still["status"] == "input_required" and key in still["inputRequests"]  # bob changed nothing
        assert relayed == [a.app[REVERSE].settings.replica]


async def test_a_listen_on_the_other_replica_hears_the_task_by_relay(
        aiohttp_server: Any, legacy: str, shared: dict[str, Any]) -> None:
    """ext-tasks §Task Status Notifications across replicas: the listen's acknowledgement names the caller's task
    kept elsewhere (not another's, nor an unknown one), then the task's state comes, then its changes."""
    a, b = await _replicas(aiohttp_server, legacy, shared)
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer alice"}) as alice, \
            aiohttp.ClientSession(headers={"Authorization": "Bearer bob"}) as bob:
        mine = await result(alice, a, "tools/call", {"name": "confirm_delete", "arguments": {"filename": "l"}})
        theirs = await result(bob, a, "tools/call", {"name": "slow_compute", "arguments": {"seconds": 60}})
        headers = LISTEN_HEADERS
        params = {"notifications": {"taskIds": [mine["taskId"], theirs["taskId"], "never-made"]},
                  "_meta": TASKS_META}
        listen = await alice.post(b.make_url("/mcp"), headers=headers, json={
            "jsonrpc": "2.0", "id": "l1", "method": "subscriptions/listen", "params": params})
        try:
            ack = await _next_data(listen)
            assert ack["params"]["notifications"] == {"taskIds": [mine["taskId"]]}

            async def next_task() -> dict[str, Any]:
                message = await _next_data(listen)
                assert message["method"] == "notifications/tasks", message
                schema.check("2026-07-28", message)
                assert message["params"]["_meta"] == {"io.modelcontextprotocol/subscriptionId": "l1"}
                assert message["params"]["taskId"] == mine["taskId"]
                return dict(message["params"])

            told = await next_task()
            while told["status"] != "input_required":  # working until its question reached A
                told = await next_task()
            [key] = told["inputRequests"]
            await result(alice, a, "tasks/update", {"taskId": mine["taskId"], "inputResponses": {key: ACCEPT}})
            while told["status"] != "completed":
                told = await next_task()
            assert told["result"]["content"][0]["text"] == "deleted l"
        finally:
            listen.close()
        await result(bob, b, "tasks/cancel", {"taskId": theirs["taskId"]})


async def test_a_task_whose_replica_is_killed_is_lost_and_the_call_made_again(
        aiohttp_server: Any, legacy: str, shared: dict[str, Any], tmp_path: Path) -> None:
    config = load_config(upstream_url=legacy, upstream_era="2025-11-25", **shared)
    b = await aiohttp_server(create_app(config))
    async with aiohttp.ClientSession() as http:
        serving = _serve(tmp_path, legacy, shared)
        url, proc = await serving.__anext__()
        a = At(url)
        made = await result(http, a, "tools/call", {"name": "slow_compute", "arguments": {"seconds": 60}})
        assert (await result(http, b, "tasks/get", {"taskId": made["taskId"]}))["status"] == "working"  # via A
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        await serving.aclose()
        for method in ("tasks/get", "tasks/cancel"):
            status, lost = await call(http, b, method, {"taskId": made["taskId"]})
            assert (status, lost["error"]["code"], lost["error"]["data"]) == (400, -32602, {"taskId": "lost"})
            assert "replica holding this task is gone" in lost["error"]["message"]
        # the 2026 client calls the tool again: a task on a live replica
        again = await result(http, b, "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.2,
                                                                                           "label": "again"}})
        done = await status_of(http, b, again["taskId"], "completed")
        assert done["result"]["content"][0]["text"] == "computed again after 0.2s"


async def test_a_task_forgotten_by_its_replica_is_unknown_everywhere(
        aiohttp_server: Any, legacy: str, shared: dict[str, Any]) -> None:
    """A task the holder forgets (here: its bridge closes, as a reload does) releases its holder record: the other
    replica answers unknown at once, without a relay to a replica that no longer has it."""
    a, b = await _replicas(aiohttp_server, legacy, shared)
    async with aiohttp.ClientSession() as http:
        made = await result(http, a, "tools/call", {"name": "slow_compute", "arguments": {"seconds": 60}})
        assert (await result(http, b, "tasks/get", {"taskId": made["taskId"]}))["status"] == "working"
        relayed = _relays(b)
        await a.app[REVERSE].legacy_tasks.close()

        async def unknown() -> bool:
            status, said = await call(http, b, "tasks/get", {"taskId": made["taskId"]})
            return status == 400 and said["error"]["message"] == "unknown taskId"
        await until(unknown, "the holder record is released")
        assert relayed == []


def _pushed_only(*gateways: Any) -> None:
    """The listens' safety re-check of their holders set far beyond every bound of the test: what a listen hears
    in time was pushed by the holder, not asked for."""
    for gateway in gateways:
        bridge = gateway.app[REVERSE]
        bridge.settings = replace(bridge.settings, watch_recheck_seconds=3600.0)


async def _hears_changes_pushed_by_the_holder(a: Any, b: Any) -> None:
    """A listen on B for a task held on A: its current state once, then a change made on A (the holder's own
    tasks/update, no request on B) reaches it without B asking again; the holder keeps the watch only while the
    task can change."""
    _pushed_only(a, b)
    holder = a.app[REVERSE].legacy_tasks
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer alice"}) as alice:
        made = await result(alice, a, "tools/call", {"name": "confirm_delete", "arguments": {"filename": "p"}})
        task_id = made["taskId"]
        waiting = await status_of(alice, a, task_id, "input_required")
        headers = LISTEN_HEADERS
        listen = await alice.post(b.make_url("/mcp"), headers=headers, json={
            "jsonrpc": "2.0", "id": "l1", "method": "subscriptions/listen",
            "params": {"notifications": {"taskIds": [task_id]}, "_meta": TASKS_META}})
        try:
            ack = await within(_next_data(listen), what="the listen's acknowledgement")
            assert ack["params"]["notifications"] == {"taskIds": [task_id]}
            now = await within(_next_data(listen), what="the task's state when the listen began")
            assert now["params"]["status"] == "input_required"
            assert now["params"]["inputRequests"] == waiting["inputRequests"]
            assert [t for _, t in holder.remote] == [task_id]  # the listen's watch, registered on A
            [key] = waiting["inputRequests"]
            await result(alice, a, "tasks/update", {"taskId": task_id, "inputResponses": {key: ACCEPT}})
            told = now["params"]
            while told["status"] != "completed":
                message = await within(_next_data(listen), what="a change pushed by the holder")
                assert message["method"] == "notifications/tasks", message
                schema.check("2026-07-28", message)
                told = message["params"]
            assert told["taskId"] == task_id and told["result"]["content"][0]["text"] == "deleted p"
            assert holder.remote == {}  # terminal: nothing more is pushed for it
        finally:
            listen.close()


async def test_a_change_on_the_holder_is_pushed_to_a_listen_on_the_other_replica(
        aiohttp_server: Any, legacy: str, shared: dict[str, Any]) -> None:
    """Two replicas on real Redis."""
    await _hears_changes_pushed_by_the_holder(*await _replicas(aiohttp_server, legacy, shared))


async def test_a_change_is_pushed_between_replicas_on_the_shared_memory_store(
        aiohttp_server: Any, legacy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two replicas in this process on one SharedMemory (its in-process bus), as on Redis."""
    monkeypatch.setenv(KEY_ENV, "one key for every replica")
    config = load_config(upstream_url=legacy, upstream_era="2025-11-25", reverse={"state_key_env": KEY_ENV})
    memory = SharedMemory()
    a = await aiohttp_server(create_app(config, store=memory.replica()))
    b = await aiohttp_server(create_app(config, store=memory.replica()))
    await _hears_changes_pushed_by_the_holder(a, b)


async def test_a_listen_that_ended_is_pushed_nothing_more(
        aiohttp_server: Any, legacy: str, shared: dict[str, Any]) -> None:
    """The holder's next push to a listen that ended is acknowledged as not watched: it drops that watch while the
    task lives on (here: one of its two questions answered)."""
    a, b = await _replicas(aiohttp_server, legacy, shared)
    _pushed_only(a, b)
    holder = a.app[REVERSE].legacy_tasks
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer alice"}) as alice:
        made = await result(alice, a, "tools/call", {"name": "multi_input", "arguments": {}})

        async def both_asked() -> dict[str, Any] | None:
            task = await result(alice, a, "tasks/get", {"taskId": made["taskId"]})
            return task if len(task.get("inputRequests", {})) == 2 else None
        asked = await until(both_asked, "both questions are pending")
        headers = LISTEN_HEADERS
        listen = await alice.post(b.make_url("/mcp"), headers=headers, json={
            "jsonrpc": "2.0", "id": "l1", "method": "subscriptions/listen",
            "params": {"notifications": {"taskIds": [made["taskId"]]}, "_meta": TASKS_META}})
        await within(_next_data(listen), what="the listen's acknowledgement")
        await within(_next_data(listen), what="the task's state when the listen began")
        assert holder.remote
        listen.close()
        await until(lambda: not b.app[REVERSE].legacy_tasks.following, "B's listen ended")
        first = sorted(asked["inputRequests"])[0]
        await result(alice, a, "tasks/update", {"taskId": made["taskId"], "inputResponses": {
            first: {"action": "accept", "content": {"name": "x"}}}})
        await until(lambda: not holder.remote, "the holder dropped the ended listen's watch")
        assert (await result(alice, a, "tasks/get", {"taskId": made["taskId"]}))["status"] == "input_required"
        await result(alice, a, "tasks/cancel", {"taskId": made["taskId"]})
