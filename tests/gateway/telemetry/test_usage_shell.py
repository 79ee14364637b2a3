"""Usage accounting of the causes a real core rarely produces, against the scripted fake upstream:
upstream failure, client answer timeout, includeContext and URL elicitation, a client's refusal, cancellation."""

from __future__ import annotations

import asyncio
from typing import Any

from adapters.usage import KEY_FIELDS
from gateway.telemetry.usage import USAGE
from tests.gateway.conftest import Legacy, text
from tests.waiting import until

SAMPLING = {"method": "sampling/createMessage", "params": {
    "messages": [{"role": "user", "content": {"type": "text", "text": "pick"}}], "maxTokens": 10,
    "includeContext": "thisServer"}}
URL = {"method": "elicitation/create", "params": {"mode": "url", "message": "connect", "url": "https://example.test/c"}}


def records(client: Any) -> list[dict[str, Any]]:
    recorder = client.server.app[USAGE]
    recorder.drain()
    return [dict(zip(KEY_FIELDS, key, strict=True), count=value[0], rounds=value[1])
            for key, value in recorder.rollup.items()]


def calls_of(rows: list[dict[str, Any]], **where: Any) -> int:
    return sum(r["count"] for r in rows if r["method"] == "tools/call" and all(r[k] == v for k, v in where.items()))


async def test_upstream_failure_is_counted(make_gateway, upstream) -> None:
    client = Legacy(await make_gateway())
    upstream.script["tools/call"] = lambda body, headers: ("error", {"code": -1, "message": "boom"}, 503)
    await client.initialize()
    assert "error" in await client.call("tools/call", {"name": "t", "arguments": {}})
    assert calls_of(records(client.client), outcome="error", cause="upstream error", translated=1) == 1


async def test_client_timeout_and_deprecated_inputs_are_counted(make_gateway, upstream) -> None:
    client = Legacy(await make_gateway(limits={"client_answer_timeout_seconds": 0.2}))
    upstream.script["tools/call"] = lambda body, headers: {
        "resultType": "input_required", "inputRequests": {"s": SAMPLING, "u": URL}, "requestState": "r"}
    await client.initialize()
    message = await client.call("tools/call", {"name": "t", "arguments": {}})  # never answered
    assert message["error"]["data"]["limit"] == "client_answer_timeout_seconds"
    rows = records(client.client)
    assert calls_of(rows, cause="client timeout", inputs="sampling,elicitation.url",
                    features="legacy handshake,sampling,elicitation url ids,includeContext") == 1


async def test_client_refusal_and_cancellation_are_counted(make_gateway, upstream) -> None:
    client = Legacy(await make_gateway())
    upstream.script["tools/call"] = lambda body, headers: {
        "resultType": "input_required", "inputRequests": {"s": SAMPLING}}
    await client.initialize()
    resp = await client.post("tools/call", {"name": "t", "arguments": {}})
    await client.next_event(resp)
    _, asked = await client.next_event(resp)
    await client.answer(asked["id"], error={"code": -1, "message": "user said no"})
    _, final = await client.next_event(resp)
    assert final["error"]["data"]["inputKey"] == "s"
    resp = await client.post("tools/call", {"name": "t", "arguments": {}})
    await client.next_event(resp)
    await client.next_event(resp)
    assert await client.notify("notifications/cancelled", {"requestId": client.next_id}) == 202
    await client.events(resp)
    await until(lambda: calls_of(records(client.client)) == 2)
    rows = records(client.client)
    assert calls_of(rows, outcome="error", cause="client refused") == 1
    assert calls_of(rows, outcome="cancelled") == 1


async def test_recording_off_records_nothing(make_gateway, upstream) -> None:
    client = Legacy(await make_gateway(usage={"enabled": False}))
    upstream.script["tools/call"] = lambda body, headers: text("x")
    await client.initialize()
    await client.call("tools/call", {"name": "t", "arguments": {}})
    assert records(client.client) == []
    assert (await client.client.get("/metrics")).status == 200


async def test_initialize_counts_the_negotiated_revision(make_gateway, upstream) -> None:
    client = Legacy(await make_gateway(), "2024-01-01")  # unknown: the gateway answers 2025-11-25
    resp = await client.post("initialize", {"protocolVersion": "2024-01-01", "capabilities": {},
                                            "clientInfo": {"name": "old", "version": "1"}})
    assert (await resp.json())["result"]["protocolVersion"] == "2025-11-25"
    assert [(r["method"], r["revision"]) for r in records(client.client)] == [("initialize", "2025-11-25")]


async def test_the_periodic_flush_writes_without_being_asked(make_gateway, upstream, tmp_path) -> None:
    from gateway.telemetry.usage import UsageDb

    db = str(tmp_path / "usage.db")
    client = Legacy(await make_gateway(usage={"db": db, "flush_seconds": 0.05}))
    await client.initialize()
    def methods() -> list[str]:
        store = UsageDb(db)
        stored = [r["method"] for r in store.rows(0)]
        store.close()
        return stored
    stored = await until(methods, "the usage is flushed to the file")
    assert stored == ["initialize"] and records(client.client) == []  # moved from memory to the file


async def _stored_methods(db: str, want: int) -> list[str]:
    from gateway.telemetry.usage import UsageDb

    def methods() -> list[str]:
        store = UsageDb(db)
        stored = [r["method"] for r in store.rows(0) for _ in range(r["count"])]
        store.close()
        return stored
    def enough() -> list[str] | None:
        stored = methods()
        return stored if len(stored) >= want else None
    return list(await until(enough, f"{want} methods stored"))


async def test_a_flush_that_cannot_start_keeps_its_counts_and_the_timer(make_gateway, upstream, tmp_path) -> None:
    """No file descriptor left for the worker thread: the counts stay for the next flush, which still comes."""
    db = str(tmp_path / "usage.db")
    client = Legacy(await make_gateway(usage={"db": db, "flush_seconds": 0.05}))
    loop, real, failures = asyncio.get_running_loop(), asyncio.get_running_loop().run_in_executor, []

    def refuse_once(executor: Any, func: Any, *args: Any) -> Any:
        if getattr(func, "__name__", "") == "_write" and not failures:
            failures.append(func)
            raise OSError(24, "Too many open files")
        return real(executor, func, *args)

    loop.run_in_executor = refuse_once  # type: ignore[method-assign]
    try:
        await client.initialize()
        assert await _stored_methods(db, 1) == ["initialize"]
    finally:
        del loop.run_in_executor
    assert failures  # the injected failure happened, and the next tick wrote what it had kept


async def test_a_failed_write_keeps_its_counts(make_gateway, upstream, tmp_path) -> None:
    """The write itself fails in its thread with an error that is not SQLite's: nothing is lost."""
    db = str(tmp_path / "usage.db")
    client = Legacy(await make_gateway(usage={"db": db, "flush_seconds": 0.05}))
    recorder = client.client.server.app[USAGE]
    real, failures = recorder.db.write, []

    def fail_once(*args: Any) -> None:
        if not failures:
            failures.append(args)
            raise OSError(24, "Too many open files")
        real(*args)

    recorder.db.write = fail_once
    await client.initialize()
    await client.call("ping", {})
    assert sorted(await _stored_methods(db, 2)) == ["initialize", "ping"] and failures


async def test_the_session_gauge_forgets_a_session_whose_get_stream_outlived_it(make_gateway, upstream) -> None:
    """DELETE ends the GET stream, whose handler returns after the DELETE: that must not count the session
    again (40 clean sessions read 41 in the gauge)."""
    client = Legacy(await make_gateway())
    await client.initialize()
    stream = await client.client.get("/mcp", headers=client.headers())
    assert stream.status == 200
    await client.next_event(stream)  # the priming event: the stream is open
    gauge = client.client.server.app[USAGE].sessions
    assert (await client.client.delete("/mcp", headers=client.headers())).status == 204
    assert await client.events(stream) == []  # the stream ended with the session, and its handler returned
    # the GET handler's own accounting runs as it returns
    await until(lambda: gauge.by_revision(client.client.server.app[USAGE].clock_ms()) == {}, "the gauge is down")
    assert gauge.by_revision(client.client.server.app[USAGE].clock_ms()) == {}
