"""Crash tests with real processes (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds): two
``python -m gateway serve`` replicas on one real Redis behind a failover front, the reference core upstream, and the
official ``mcp`` SDK as the legacy client. Replica A is killed with SIGKILL in the middle of a bridged call; the
client, reaching replica B from then on, still gets its answer exactly once, and another session is not disturbed."""

from __future__ import annotations

import asyncio
import functools
import json
import signal
import sqlite3
from pathlib import Path
from typing import Any

import aiohttp
import mcp_types as types
import pytest
from mcp import Client

from tests.faults.replicas import Front, HoldingUpstream, replica
from tests.gateway.conftest import Legacy
from tests.gateway.session import test_redis_store as redis_tests
from tests.gateway.session.test_relay import owner_keys
from tests.gateway.session.test_takeover import until_closed
from tests.waiting import until
from tests.waiting import within as bounded

pytest.importorskip("redis")
core_app = pytest.importorskip("modern_server.app")
core_config = pytest.importorskip("modern_server.config")

redis_url, prefix = redis_tests.redis_url, redis_tests.prefix  # its fixtures, shared
LEASE = 1.0
within = functools.partial(bounded, seconds=60)  # processes start and stop slower than apps in the test's loop


class Stack:
    def __init__(self, upstream: HoldingUpstream, a: Any, b: Any, front: Front, url: str, db: Path) -> None:
        self.upstream, self.a, self.b, self.front, self.url, self.db = upstream, a, b, front, url, db

    def kill_a(self) -> None:
        """SIGKILL: no shutdown, no handover; its leases must lapse."""
        self.a.proc.kill()
        self.a.proc.wait()

    def standups(self) -> int:
        with sqlite3.connect(self.db) as db:
            return db.execute("SELECT COUNT(*) FROM notes WHERE title = 'Standup'").fetchone()[0]


@pytest.fixture
async def stack(aiohttp_server, tmp_path, redis_url, prefix):
    async for built in make_stack(aiohttp_server, tmp_path, redis_url, prefix, LEASE):
        yield built


@pytest.fixture
async def long_lease_stack(aiohttp_server, tmp_path, redis_url, prefix):
    """Leases that would outlast the test: a round moves only if its replica releases it."""
    async for built in make_stack(aiohttp_server, tmp_path, redis_url, prefix, 600.0):
        yield built


async def make_stack(aiohttp_server: Any, tmp_path: Path, redis_url: str, prefix: str, lease: float) -> Any:
    db = tmp_path / "core.db"
    core = await aiohttp_server(core_app.create_app(core_config.CoreConfig(database=str(db))))
    holder = HoldingUpstream(str(core.make_url("/mcp")), hold=_confirmation)
    upstream = await aiohttp_server(holder.app())
    url = str(upstream.make_url("/mcp"))
    a = replica(tmp_path, "a", url, redis_url, prefix, lease)
    b = replica(tmp_path, "b", url, redis_url, prefix, lease)
    front = Front([a.port, b.port])
    try:
        await a.listening()
        await b.listening()
        yield Stack(holder, a, b, front, await front.start(), db)
    finally:
        await front.close()
        for proc in (a, b):
            proc.stop()
        for proc in (a, b):
            assert "Traceback" not in proc.stderr(), proc.stderr()[-3000:]


def _confirmation(body: dict[str, Any]) -> bool:
    """The notes_delete retry carrying the user's confirmation."""
    params = body.get("params") or {}
    return params.get("name") == "notes_delete" and "delete_choice" in (params.get("inputResponses") or {})


def sampling_killing(stack: Stack, killed: list[bool]) -> Any:
    async def sampling(context, params: types.CreateMessageRequestParams):
        prompt = params.messages[0].content.text
        if not killed:  # the client is answering the first round: its replica dies now
            stack.kill_a()
            killed.append(True)
        answer = json.dumps(prompt.splitlines()[1:4]) if "JSON array" in prompt else "A small repository."
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text=answer),
                                         model="test-model", stop_reason="endTurn")
    return sampling


async def confirm_first(context, params):
    choice = params.requested_schema["properties"]["note_id"]["enum"][0]
    return types.ElicitResult(action="accept", content={"note_id": choice, "confirm": True})


async def test_a_replica_killed_while_the_client_answers(stack: Stack) -> None:
    killed: list[bool] = []
    async with Client(stack.url, mode="legacy") as bystander:  # another session, idle on A when it dies
        async with Client(stack.url, mode="legacy", sampling_callback=sampling_killing(stack, killed)) as client:
            result = await within(client.call_tool("summarize_repo", {"repo": "demo"}))
        assert killed and not stack.a.alive() and stack.b.alive()
        assert not result.is_error
        assert result.structured_content["files"] == ["README.md", "pyproject.toml", "src/app/__init__.py"]
        # Every round reached the core exactly once: the one A was asking the client about repeats nothing.
        rounds = stack.upstream.calls("summarize_repo")
        assert [sorted(b["params"].get("inputResponses", {})) for b in rounds] == [[], ["pick_files"], ["summary"]]
        echoed = await within(bystander.call_tool("echo", {"text": "still here"}))
        assert echoed.content[0].text == "still here"
    assert stack.front.used[1] > 0  # B served the rest


async def test_a_confirmed_deletion_happens_once_when_its_replica_dies(stack: Stack) -> None:
    """A dies after the core deleted the note and before the client heard: B, taking the round over from the
    client's resumed stream, sends the same confirmation again, which the core answers with the result it recorded
    for it (issue #38, 5): the client learns the note was deleted, and it was deleted once."""
    before = stack.standups()
    async with Client(stack.url, mode="legacy", elicitation_callback=confirm_first) as client:
        call = asyncio.ensure_future(client.call_tool("notes_delete", {"workspaceUri": "file:///work/notes",
                                                                       "title": "Standup"}))
        await within(stack.upstream.held.wait())  # the core deleted the note; A never got its answer
        assert b"Deleted" in stack.upstream.answers[0]
        stack.kill_a()
        result = await within(call)
        assert not result.is_error and result.content[0].text.startswith("Deleted")
        assert f'"deleted":"{result.structured_content["deleted"]}"'.encode() in stack.upstream.answers[0]
        assert (await within(client.call_tool("echo", {"text": "after"}))).content[0].text == "after"
    assert stack.standups() == before - 1  # deleted once, never twice
    confirmations = stack.upstream.calls("notes_delete")[1:]
    assert len(confirmations) == 2 and confirmations[0]["params"] == confirmations[1]["params"]  # byte for byte


async def test_sigterm_hands_the_round_over_at_once(long_lease_stack: Stack) -> None:
    """SIGTERM while the client answers: A refuses new connections, releases the round's lease and exits; B
    continues the round at once (its lease would otherwise hold it for the whole test)."""
    stack, stopped = long_lease_stack, []

    async def sampling(context, params: types.CreateMessageRequestParams):
        if not stopped:
            stack.a.proc.send_signal(signal.SIGTERM)
            stopped.append(await asyncio.to_thread(stack.a.proc.wait, 60))  # it exits (within its deadline)
        prompt = params.messages[0].content.text
        answer = json.dumps(prompt.splitlines()[1:4]) if "JSON array" in prompt else "A small repository."
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text=answer),
                                         model="test-model", stop_reason="endTurn")
    async with Client(stack.url, mode="legacy", sampling_callback=sampling) as client:
        result = await within(client.call_tool("summarize_repo", {"repo": "demo"}))
    assert stopped == [0] and not result.is_error
    assert result.structured_content["files"] == ["README.md", "pyproject.toml", "src/app/__init__.py"]
    rounds = stack.upstream.calls("summarize_repo")
    assert [sorted(b["params"].get("inputResponses", {})) for b in rounds] == [[], ["pick_files"], ["summary"]]
    assert "handed over" in stack.a.stderr()


@pytest.fixture
async def three(aiohttp_server, tmp_path, redis_url, prefix):
    """Three replicas on one Redis and the core, for a raw client that picks the replica of every request."""
    async for holder, procs, clients in raw_replicas(aiohttp_server, tmp_path, redis_url, prefix, "abc"):
        yield holder, procs, clients


async def raw_replicas(aiohttp_server: Any, tmp_path: Path, redis_url: str, prefix: str, names: str,
                       hold: Any = lambda body: False) -> Any:
    """Replicas ``names`` on one Redis, the core behind a :class:`HoldingUpstream` (``hold``), and a raw client
    on each replica (it resumes nothing by itself)."""
    core = await aiohttp_server(core_app.create_app(core_config.CoreConfig(database=str(tmp_path / "core.db"))))
    holder = HoldingUpstream(str(core.make_url("/mcp")), hold=hold)
    upstream = await aiohttp_server(holder.app())
    procs = [replica(tmp_path, name, str(upstream.make_url("/mcp")), redis_url, prefix, LEASE) for name in names]
    sessions = [aiohttp.ClientSession(base_url=f"http://127.0.0.1:{p.port}") for p in procs]
    try:
        for proc in procs:
            await proc.listening()
        yield holder, procs, [Legacy(session) for session in sessions]
    finally:
        for session in sessions:
            await session.close()
        for proc in procs:
            proc.stop()
        for proc in procs:
            assert "Traceback" not in proc.stderr(), proc.stderr()[-3000:]


def sampled(request: dict[str, Any]) -> dict[str, Any]:
    prompt = request["params"]["messages"][0]["content"]["text"]
    text = json.dumps(prompt.splitlines()[1:4]) if "JSON array" in prompt else "A small repository."
    return {"role": "assistant", "content": {"type": "text", "text": text}, "model": "m", "stopReason": "endTurn"}


async def asked_on_a(on_a: Legacy, on_b: Legacy, on_c: Legacy) -> tuple[Any, str, dict[str, Any]]:
    """One session on all three replicas, and a summarize_repo call on A up to its first live request: A's
    stream, that event's id, and the request."""
    await on_a.initialize({"sampling": {}})
    on_b.session_id = on_c.session_id = on_a.session_id
    resp = await on_a.post("tools/call", {"name": "summarize_repo", "arguments": {"repo": "demo"}})
    await within(on_a.next_event(resp))  # priming
    seen, first = await within(on_a.next_event(resp))
    assert first["method"] == "sampling/createMessage"
    return resp, seen, first


async def test_a_stream_resumed_on_a_third_replica_after_its_writer_was_killed(three) -> None:
    """The client's stream was on A when A was killed; it answers through B and resumes on C: C replays the
    store's copy of the stream, which the replica that took the round over goes on writing."""
    upstream, (a, b, c), (on_a, on_b, on_c) = three
    _resp, seen, first = await asked_on_a(on_a, on_b, on_c)
    a.proc.kill()
    a.proc.wait()
    assert await within(on_b.answer(first["id"], sampled(first))) == 202
    stream = await within(on_c.client.get("/mcp", headers={**on_c.headers(), "Accept": "text/event-stream",
                                                           "Last-Event-ID": seen}))
    assert stream.status == 200
    _, second = await within(on_c.next_event(stream))
    assert second["method"] == "sampling/createMessage" and second["id"] != first["id"]
    assert await within(on_c.answer(second["id"], sampled(second))) == 202
    _, final = await within(on_c.next_event(stream))
    assert final["id"] == on_a.next_id and not final["result"].get("isError")
    assert final["result"]["structuredContent"]["files"] == ["README.md", "pyproject.toml", "src/app/__init__.py"]
    rounds = upstream.calls("summarize_repo")
    assert [sorted(r["params"].get("inputResponses", {})) for r in rounds] == [[], ["pick_files"], ["summary"]]
    assert "taken over" in b.stderr() + c.stderr()


async def test_a_replica_stalled_past_its_lease_gives_the_round_up(three, redis_url, prefix) -> None:
    """A stops (SIGSTOP: a frozen VM, a stop-the-world pause) while its client is being asked, until its lease
    lapses: B takes the round over on the client's answer and the client finishes it on C. A, resumed, finds
    its lease lost and stops its exchange without a word: nothing answered twice, no round repeated upstream,
    the copy of the stream left to the holder, and no record left behind."""
    upstream, (a, b, _c), (on_a, on_b, on_c) = three
    resp, seen, first = await asked_on_a(on_a, on_b, on_c)
    a.proc.send_signal(signal.SIGSTOP)
    try:
        async def lapsed() -> bool:
            return await owner_keys(redis_url, prefix, "l") == {}
        await until(lapsed)  # A renews nothing while stopped
        assert await within(on_b.answer(first["id"], sampled(first))) == 202  # B takes the round over
        stream = await within(on_c.client.get("/mcp", headers={**on_c.headers(), "Accept": "text/event-stream",
                                                               "Last-Event-ID": seen}))
        _, second = await within(on_c.next_event(stream))
        assert second["method"] == "sampling/createMessage"
        assert await within(on_c.answer(second["id"], sampled(second))) == 202
        _, final = await within(on_c.next_event(stream))
        assert final["id"] == on_a.next_id and not final["result"].get("isError")
    finally:
        a.proc.send_signal(signal.SIGCONT)

    async def gave_up() -> bool:
        return "lost the lease" in a.stderr()
    await until(gave_up)
    assert "taken over" in b.stderr()
    assert [m for m in await within(until_closed(on_a, resp)) if "result" in m or "error" in m] == []
    assert a.alive()
    rounds = upstream.calls("summarize_repo")
    assert [sorted(r["params"].get("inputResponses", {})) for r in rounds] == [[], ["pick_files"], ["summary"]]

    async def released() -> bool:
        return await owner_keys(redis_url, prefix, "aql") == {}
    await until(released)
    echoed = await within(on_a.post("tools/call", {"name": "echo", "arguments": {"text": "A works"}}))
    assert (await echoed.json())["result"]["content"][0]["text"] == "A works"  # A serves the session again


async def test_an_answer_relayed_to_a_frozen_replica_is_acted_on_where_its_round_goes(three) -> None:
    """A is frozen (SIGSTOP) just as the client's answer reaches B, which relays it to A, still the round's live
    owner (its lease not lapsed, its subscription open). No word comes back, so B keeps the answer and, once A's
    lease lapses, acts on it where the round is taken over. The client, resuming on C, finishes the call. (A,
    woken, may send that one round upstream again before its fenced save stops it:
    docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds.)"""
    upstream, (a, _b, _c), (on_a, on_b, on_c) = three
    _resp, seen, first = await asked_on_a(on_a, on_b, on_c)
    a.proc.send_signal(signal.SIGSTOP)
    try:
        assert await within(on_b.answer(first["id"], sampled(first))) == 202  # relayed to A, which never answers
        stream = await within(on_c.client.get("/mcp", headers={**on_c.headers(), "Accept": "text/event-stream",
                                                               "Last-Event-ID": seen}))
        _, second = await within(on_c.next_event(stream))
        assert second["method"] == "sampling/createMessage"  # the next round: the first answer was acted on
        assert await within(on_c.answer(second["id"], sampled(second))) == 202
        _, final = await within(on_c.next_event(stream))
        assert final["id"] == on_a.next_id and not final["result"].get("isError")
    finally:
        a.proc.send_signal(signal.SIGCONT)
    rounds = [sorted(r["params"].get("inputResponses", {})) for r in upstream.calls("summarize_repo")]
    assert rounds[0] == [] and rounds[-1] == ["summary"] and set(map(tuple, rounds[1:-1])) == {("pick_files",)}


@pytest.fixture
async def pair(aiohttp_server, tmp_path, redis_url, prefix):
    """Two replicas, the core behind an upstream that holds the confirmed deletion's answer back, a raw client on
    each, and the core's database."""
    async for holder, procs, clients in raw_replicas(aiohttp_server, tmp_path, redis_url, prefix, "ab",
                                                     _confirmation):
        yield holder, procs, clients, tmp_path / "core.db"


async def test_a_round_whose_client_never_comes_back_is_continued_by_the_sweep(pair, redis_url, prefix) -> None:
    """The client confirmed a deletion on A and then went quiet (no resume, no answer, no cancel). A dies after
    the core deleted the note: B's sweep finds the round nobody holds once its lease ran out, sends the same
    confirmation again (answered with the result the core recorded for it: deleted once) and writes the answer to
    the stream's copy,
    where the client finds it when it does resume. Nothing of the round is left in the store."""
    upstream, (a, b), (on_a, on_b), db = pair
    await on_a.initialize({"elicitation": {}})
    on_b.session_id = on_a.session_id
    with sqlite3.connect(db) as conn:
        before = conn.execute("SELECT COUNT(*) FROM notes WHERE title = 'Standup'").fetchone()[0]
    resp = await on_a.post("tools/call", {"name": "notes_delete", "arguments": {
        "workspaceUri": "file:///work/notes", "title": "Standup"}})
    await within(on_a.next_event(resp))  # priming
    seen, asked = await within(on_a.next_event(resp))
    assert asked["method"] == "elicitation/create"
    choice = asked["params"]["requestedSchema"]["properties"]["note_id"]["enum"][0]
    assert await within(on_a.answer(asked["id"], {"action": "accept",
                                                  "content": {"note_id": choice, "confirm": True}})) == 202
    await within(upstream.held.wait())  # the core deleted the note; A never got its answer
    a.proc.kill()
    a.proc.wait()

    async def swept() -> bool:
        return "taken over" in b.stderr() and len(upstream.calls("notes_delete")) == 3
    await until(swept)  # no client message reached B
    confirmations = upstream.calls("notes_delete")[1:]
    assert confirmations[0]["params"] == confirmations[1]["params"]  # byte for byte
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM notes WHERE title = 'Standup'").fetchone()[0] == before - 1

    async def ended() -> bool:
        client = redis_tests.Redis.from_url(redis_url)
        try:
            return [k async for k in client.scan_iter(match=f"{prefix}r:*")] == []
        finally:
            await client.aclose()
    await until(ended)
    stream = await within(on_b.resume(seen))  # the client, back at last, on the survivor
    assert stream.status == 200
    messages = [m for m in await within(until_closed(on_b, stream)) if "id" in m]
    assert [m["id"] for m in messages] == [on_a.next_id]
    assert messages[0]["result"]["structuredContent"] == {"deleted": choice}
