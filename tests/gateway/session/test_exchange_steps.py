"""Which task steps an exchange's machine (docs/design/takeover.md#a-step-runs-in-the-task-of-its-event): the task
that has the event, when the exchange's own task waits with nothing queued; still one step at a time, and every
failure answered by the exchange's task."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.config.settings import load_config
from gateway.http.app import GATEWAY, create_app
from gateway.session.exchange import Door, Exchange
from gateway.session.runtime import SessionRuntime
from gateway.session.store import InMemoryStore, StoreUnavailable
from tests.gateway.conftest import Legacy, SharedMemoryStore
from tests.gateway.http.test_bridge_shell import SAMPLED, two_requests_sent, two_rounds
from tests.gateway.session.test_redis_store import prefix, redis_url  # noqa: F401  (fixtures)


class Steps:
    """Every step an exchange performs: its event's kind, whether the exchange's own task ran it, and the most
    steps ever under way at once."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[tuple[str, bool]] = []
        self.running = self.most = 0
        step = Exchange._step

        async def watched(exchange: Exchange, event: Any) -> None:
            self.seen.append((type(event).__name__, asyncio.current_task() is exchange._task))
            self.running += 1
            self.most = max(self.most, self.running)
            try:
                await step(exchange, event)
            finally:
                self.running -= 1
        monkeypatch.setattr(Exchange, "_step", watched)


async def gateway(upstream: Any, aiohttp_client: Any, store: InMemoryStore | None = None) -> Legacy:
    upstream.script["tools/call"] = two_rounds
    client = Legacy(await aiohttp_client(create_app(load_config(upstream_url=upstream.url), store=store)))
    await client.initialize()
    return client


async def test_an_answer_and_an_upstream_outcome_are_stepped_by_their_own_tasks(upstream, aiohttp_client,
                                                                                 monkeypatch) -> None:
    steps = Steps(monkeypatch)
    client = await gateway(upstream, aiohttp_client)
    resp, first, second = await two_requests_sent(client)
    assert await client.answer(first["id"], SAMPLED) == 202
    assert await client.answer(second["id"], SAMPLED) == 202
    _, third = await client.next_event(resp)
    assert await client.answer(third["id"], SAMPLED) == 202
    final = (await client.events(resp))[-1]
    assert final["result"]["content"][0]["text"] == "bridged"
    # The first round runs in the request's handler (Exchange.begin); every later event is stepped where it
    # arrived: three answers in their handlers, two upstream outcomes in their rounds' tasks.
    assert steps.seen == [("ClientAnswered", False), ("ClientAnswered", False), ("UpstreamResult", False),
                          ("ClientAnswered", False), ("UpstreamResult", False)]
    assert client.client.app[GATEWAY].runtime(client.session_id).exchanges == {}


class _SlowSave(SharedMemoryStore):
    """Holds the second save of a round (the first answer's step) until released."""

    def __init__(self) -> None:
        super().__init__()
        self.saves, self.saving, self.release = 0, asyncio.Event(), asyncio.Event()

    async def put_round(self, record: Any, *args: Any, **kwargs: Any) -> bool:
        self.saves += 1
        if self.saves == 2:
            self.saving.set()
            await self.release.wait()
        return await super().put_round(record, *args, **kwargs)


async def test_a_cancel_during_an_answers_step_waits_for_that_step(upstream, aiohttp_client, monkeypatch) -> None:
    steps, store = Steps(monkeypatch), _SlowSave()
    client = await gateway(upstream, aiohttp_client, store)
    resp, first, second = await two_requests_sent(client)
    answering = asyncio.ensure_future(client.answer(first["id"], SAMPLED))
    await asyncio.wait_for(store.saving.wait(), 10)  # the answer's step is saving, in its handler's task
    assert await client.notify("notifications/cancelled", {"requestId": client.next_id, "reason": "stop"}) == 202
    await asyncio.sleep(0.05)  # sleep: a quiet window: the cancel must not step while the answer's step saves
    assert steps.seen == [("ClientAnswered", False)] and not answering.done()  # the cancel waits
    store.release.set()
    assert await answering == 202
    rest = await client.events(resp)
    # Then the exchange's task steps the cancel: the client's outstanding request is cancelled, nothing answered.
    assert rest == [{"jsonrpc": "2.0", "method": "notifications/cancelled",
                     "params": {"requestId": second["id"], "reason": "the original request ended"}}]
    assert steps.seen == [("ClientAnswered", False), ("Cancelled", True)] and steps.most == 1
    assert len(upstream.calls("tools/call")) == 1


class _FailingSecondSave(SharedMemoryStore):
    async def put_round(self, record: Any, *args: Any, **kwargs: Any) -> bool:
        self.saves = getattr(self, "saves", 0) + 1
        if self.saves == 2:
            raise StoreUnavailable("redis://127.0.0.1:1: connection refused")
        return await super().put_round(record, *args, **kwargs)


async def test_a_step_failing_in_a_handlers_task_is_answered_by_the_exchange(upstream, aiohttp_client,
                                                                            monkeypatch) -> None:
    steps = Steps(monkeypatch)
    client = await gateway(upstream, aiohttp_client, _FailingSecondSave())
    resp, first, second = await two_requests_sent(client)
    assert await client.answer(first["id"], SAMPLED) == 202  # its step failed saving: the request says so
    final = (await client.events(resp))[-1]
    assert final["id"] == client.next_id
    assert final["error"]["code"] == -32603 and final["error"]["data"] == {"store": "unavailable"}
    assert steps.seen == [("ClientAnswered", False)]
    runtime = client.client.app[GATEWAY].runtime(client.session_id)
    assert runtime.exchanges == {} and runtime.awaiting == {}  # nothing left waiting
    assert await client.answer(second["id"], SAMPLED) == 202  # a late answer, ignored
    assert "result" in await client.call("ping")


async def test_a_rounds_upstream_task_leaves_the_session_by_itself(upstream, aiohttp_client, monkeypatch) -> None:
    """An upstream round's task takes itself out of its session's tasks as its last step (no done callback, whose
    loop turn a round would pay): each is among them while the upstream has its request, none is left once the
    call is answered, and one cancelled before it started stays, done, until the session's work ends."""
    spawned: list[tuple[asyncio.Task, bool]] = []
    spawn = SessionRuntime.spawn

    def watched(runtime: SessionRuntime, coro: Any, *, leaves: bool = False) -> asyncio.Task:
        task = spawn(runtime, coro, leaves=leaves)
        spawned.append((task, leaves))
        return task
    monkeypatch.setattr(SessionRuntime, "spawn", watched)
    client = await gateway(upstream, aiohttp_client)
    held_while_asked: list[bool] = []  # whether each retry's task was in the session's tasks as the upstream got it

    def retry_seen(body: dict[str, Any], request: Any) -> Any:
        if "inputResponses" in body["params"]:
            held_while_asked.append(spawned[-1][1] and spawned[-1][0] in runtime.tasks and not spawned[-1][0].done())
        return two_rounds(body, request)
    upstream.script["tools/call"] = retry_seen
    runtime = client.client.app[GATEWAY].runtime(client.session_id)
    resp, first, second = await two_requests_sent(client)
    for ask in (first, second):
        assert await client.answer(ask["id"], SAMPLED) == 202
    _, third = await client.next_event(resp)
    assert [leaves for _, leaves in spawned] == [False, True]  # the exchange's task, the first retry's
    assert await client.answer(third["id"], SAMPLED) == 202
    assert (await client.events(resp))[-1]["result"]["content"][0]["text"] == "bridged"
    rounds = [task for task, leaves in spawned if leaves]
    assert len(rounds) == 2 and all(task.done() and task not in runtime.tasks for task in rounds)
    assert held_while_asked == [True, True]

    async def never_started() -> None:
        runtime.left()
    early = runtime.spawn(never_started(), leaves=True)
    early.cancel()
    await asyncio.sleep(0)
    assert early.cancelled() and early in runtime.tasks
    await asyncio.wait_for(runtime.close(), 5)  # a done task in the set is only waited for, at once


@pytest.mark.parametrize("store", ["memory", "shared", "redis"])
async def test_the_next_round_leaves_before_the_answers_202(upstream, aiohttp_client, request, store) -> None:
    """docs/design/bridge.md#a-clients-answer-is-acted-on-before-it-is-acknowledged: the retry an answer completes is
    on its way upstream before that answer's 202 is written, whether its step saves nothing or waits on Redis for its
    save (with replicas, every step saves)."""
    order: list[str] = []
    upstream.script["tools/call"] = two_rounds

    def tap(kind: Any, message: Any) -> None:
        if kind.value == "upstream" and message.get("method") == "tools/call":
            order.append("retry" if "inputResponses" in message["params"] else "request")

    async def prepared(_request: Any, response: Any) -> None:
        if response.status == 202:
            order.append("202")
    settings: dict[str, Any] = {}
    if store == "redis":
        settings["store"] = {"url": request.getfixturevalue("redis_url"), "prefix": request.getfixturevalue("prefix")}
    app = create_app(load_config(upstream_url=upstream.url, **settings),
                     store=SharedMemoryStore() if store == "shared" else None, tap=tap)
    app.on_response_prepare.append(prepared)
    client = Legacy(await aiohttp_client(app))
    await client.initialize()
    order.clear()  # notifications/initialized got a 202 too
    resp, first, second = await two_requests_sent(client)
    for ask in (first, second):
        assert await client.answer(ask["id"], SAMPLED) == 202
    _, third = await client.next_event(resp)
    assert await client.answer(third["id"], SAMPLED) == 202
    assert (await client.events(resp))[-1]["result"]["content"][0]["text"] == "bridged"
    # The first answer completes nothing (two were asked); the second and the third each start a retry.
    assert order == ["request", "202", "retry", "202", "retry", "202"]


async def test_a_queued_answer_is_acknowledged_after_its_own_step(upstream, aiohttp_client, monkeypatch) -> None:
    """Two answers queued at once (as a relay delivers them): each waiter is told only once its own answer's step
    is done (and saved), never when an earlier answer's step is."""
    stepped: set[str] = set()
    premature: list[str] = []
    waiters: dict[int, str] = {}
    step, settle, queue = Exchange._step, Exchange._settle, Door._queue_waited

    async def watched_step(exchange: Exchange, event: Any) -> None:
        await step(exchange, event)
        if hasattr(event, "gateway_id"):
            stepped.add(event.gateway_id)

    def watched_settle(exchange: Exchange, only: Any = None, acted: bool = False) -> None:
        for waiter in ([only] if only is not None else list(exchange.events.acted)):
            if not waiter.done() and not exchange.machine.done and waiters[id(waiter)] not in stepped:
                premature.append(waiters[id(waiter)])
        settle(exchange, only, acted)

    def watched_queue(door: Door, event: Any, tell: Any = None) -> Any:
        acted = queue(door, event, tell)
        waiters[id(acted)] = event.gateway_id
        return acted
    monkeypatch.setattr(Exchange, "_step", watched_step)
    monkeypatch.setattr(Exchange, "_settle", watched_settle)
    monkeypatch.setattr(Door, "_queue_waited", watched_queue)
    client = await gateway(upstream, aiohttp_client, SharedMemoryStore())
    resp, first, second = await two_requests_sent(client)
    runtime = client.client.app[GATEWAY].runtime(client.session_id)
    exchange = runtime.awaiting[first["id"]]
    acks = [exchange.door.answer(ask["id"], {"jsonrpc": "2.0", "id": ask["id"], "result": SAMPLED})
            for ask in (first, second)]
    assert await asyncio.wait_for(asyncio.gather(*acks), 5) == [True, True]  # both acted on
    assert stepped >= {first["id"], second["id"]} and premature == []
    _, third = await client.next_event(resp)
    assert await client.answer(third["id"], SAMPLED) == 202
    assert (await client.events(resp))[-1]["result"]["content"][0]["text"] == "bridged"
