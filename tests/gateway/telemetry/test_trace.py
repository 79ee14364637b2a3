"""Translation traces (``serve --trace``): a bridged call through the gateway writes every message of both sides
under one correlation id, redacted unless content is asked for; the file rotates at ``max_bytes``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gateway.config.settings import load_config
from gateway.http.app import create_app
from gateway.telemetry.trace import Tracer
from tests.gateway.conftest import Legacy
from tests.gateway.http.test_bridge_shell import SAMPLED, two_rounds

SECRET = "hunter2-argument"


async def bridged_call(upstream: Any, aiohttp_client: Any, tracer: Tracer) -> list[dict[str, Any]]:
    """A tools/call bridged over two input rounds (three upstream calls); the trace's records."""
    upstream.script["tools/call"] = two_rounds
    legacy = Legacy(await aiohttp_client(create_app(load_config(upstream_url=upstream.url), tap=tracer)))
    await legacy.initialize()
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {"secret": SECRET}})
    await legacy.next_event(resp)  # priming
    for asked in (2, 1):  # two_rounds asks for two samplings, then one
        asks = [(await legacy.next_event(resp))[1] for _ in range(asked)]
        for ask in asks:
            assert ask is not None and await legacy.answer(ask["id"], SAMPLED) == 202
    _, final = await legacy.next_event(resp)
    assert final is not None and final["result"]["content"][0]["text"] == "bridged"
    await legacy.client.close()
    tracer.close()
    return [json.loads(line) for line in tracer.path.read_text().splitlines()]


def of_call(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of the (only) legacy tools/call."""
    corr = next(r["corr"] for r in records if r["method"] == "tools/call" and r["dir"] == "client->gateway")
    return [r for r in records if r["corr"] == corr]


async def test_a_bridged_call_is_traced_under_one_correlation_id(upstream, aiohttp_client, tmp_path: Path) -> None:
    records = await bridged_call(upstream, aiohttp_client, Tracer(tmp_path / "t.jsonl", max_bytes=1 << 20))
    mine = of_call(records)
    dirs = [r["dir"] for r in mine]
    # in, 3 upstream calls and their answers, 3 sampling requests, 3 client answers, the final response
    assert dirs.count("client->gateway") == 4 and dirs.count("gateway->client") == 4
    assert dirs.count("gateway->upstream") == 3 and dirs.count("upstream->gateway") == 3
    assert dirs[:2] == ["client->gateway", "gateway->upstream"] and dirs[-1] == "gateway->client"
    assert [r["round"] for r in mine if r["dir"] == "gateway->upstream"] == [0, 1, 2]
    assert [r.get("resultType") for r in mine if r["dir"] == "upstream->gateway"] == \
        ["input_required", "input_required", "complete"]
    assert all(r["t_ms"] <= s["t_ms"] for r, s in zip(mine, mine[1:], strict=False))
    assert {r["session"] for r in mine} == {mine[0]["session"]} and mine[0]["corr"].startswith(mine[0]["session"])
    text = json.dumps(records)
    assert SECRET not in text and "s1\\u00e9" not in text and "s1\u00e9" not in text  # arguments, requestState
    call = mine[0]["message"]["params"]
    assert call["name"] == "t" and set(call["arguments"]) == {"len", "sha256"} and len(call["arguments"]["sha256"]) == 12


async def test_content_is_kept_when_asked_for(upstream, aiohttp_client, tmp_path: Path) -> None:
    tracer = Tracer(tmp_path / "t.jsonl", max_bytes=1 << 20, content=True)
    mine = of_call(await bridged_call(upstream, aiohttp_client, tracer))
    assert mine[0]["message"]["params"]["arguments"] == {"secret": SECRET}
    states = [r["message"]["params"].get("requestState") for r in mine if r["dir"] == "gateway->upstream"]
    assert states == [None, "s1\u00e9", "s2"]


async def test_an_upstream_failure_is_traced_as_the_reason(upstream, aiohttp_client, tmp_path: Path) -> None:
    tracer = Tracer(tmp_path / "t.jsonl", max_bytes=1 << 20)
    upstream.script["tools/call"] = lambda body, headers: ("error", {"code": -32602, "message": "bad tool"})
    legacy = Legacy(await aiohttp_client(create_app(load_config(upstream_url=upstream.url), tap=tracer)))
    await legacy.initialize()
    answer = await legacy.call("tools/call", {"name": "t", "arguments": {}})
    assert answer["error"]["code"] == -32602
    await legacy.client.close()
    tracer.close()
    mine = of_call([json.loads(line) for line in tracer.path.read_text().splitlines()])
    assert [r["dir"] for r in mine] == ["client->gateway", "gateway->upstream", "upstream->gateway",
                                        "gateway->client"]
    assert mine[2]["error"]["code"] == -32602 and mine[3]["error"]["code"] == -32602


def test_the_file_rotates_at_max_bytes(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    tracer = Tracer(path, max_bytes=1024)
    for n in range(40):
        tracer("client", {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "t"}})
    tracer.close()
    rotated = path.with_name("t.jsonl.1")
    assert rotated.exists() and path.stat().st_size <= 1024 and rotated.stat().st_size <= 1024
    ids = [json.loads(line)["id"] for f in (rotated, path) for line in f.read_text().splitlines()]
    assert ids == sorted(ids) and ids[-1] == 39


def test_a_tap_without_every_kind_sees_only_its_two_kinds() -> None:
    from adapters.trace import every_kind
    assert every_kind(Tracer.__new__(Tracer)) and not every_kind(lambda kind, message: None)
