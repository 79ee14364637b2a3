"""``python -m gateway check`` against servers that attack it, on loopback: a redirect elsewhere, a server that
drips bytes, endless bodies and SSE events, malformed discover and tool lists, and 100,000 tools. Each run is
bounded (time, memory, tools called) and ends with the documented exit code; the CLI runs as a subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from gateway.ops.check import MAX_BODY_BYTES, MAX_EVENT_BYTES, MAX_TOOLS
from tests.gateway.conftest import DISCOVER, ROOT

Handler = Callable[[web.Request, dict[str, Any]], Awaitable[web.StreamResponse]]


# With PEAK_ENV naming a file, the check writes its own peak resident size (KiB) there as it exits: VmHWM of
# its own memory map (getrusage's maxrss would not do: Linux carries it over from the forking parent, pytest).
PEAK_ENV = "TEST_CHECK_PEAK_FILE"
_PEAK_WRAPPER = ("import atexit, os, sys\n"
                 "path = os.environ.get('" + PEAK_ENV + "')\n"
                 "def peak():\n"
                 "    hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')]\n"
                 "    open(path, 'w').write(hwm[0])\n"
                 "if path: atexit.register(peak)\n"
                 "sys.argv[0] = 'gateway'\n"
                 "from gateway.ops.cli import main\n"
                 "main()\n")


async def bounded_cli(tmp_path: Path, seconds: float, *args: str,
                      env: dict[str, str] | None = None) -> tuple[int | None, str, str, float]:
    """``python -m gateway check ARGS``: (exit status or None when it ran past ``seconds``, stdout, stderr,
    elapsed seconds). A run past ``seconds`` is killed, so an unbounded check fails the test instead of hanging."""
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", _PEAK_WRAPPER, "check", *args, cwd=tmp_path,
                                                env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), seconds)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return None, "", "", time.monotonic() - started
    return proc.returncode, out.decode(), err.decode(), time.monotonic() - started


def reply(body: dict[str, Any], result: Any) -> web.Response:
    return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": result})


def tools_list(tools: list[Any]) -> dict[str, Any]:
    return {"resultType": "complete", "tools": tools, "ttlMs": 0, "cacheScope": "private"}


async def hostile(aiohttp_server, methods: dict[str, Handler]) -> tuple[str, list[dict[str, Any]]]:
    """A server answering ``server/discover`` as a 2026 server unless ``methods`` says otherwise; returns its
    URL and the bodies it received."""
    seen: list[dict[str, Any]] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append(body)
        if body.get("method") in methods:
            return await methods[body["method"]](request, body)
        if body.get("method") == "server/discover":
            return reply(body, DISCOVER)
        if body.get("method") == "tools/call":
            return reply(body, {"resultType": "complete", "content": [{"type": "text", "text": "done"}]})
        return web.json_response({"jsonrpc": "2.0", "id": body.get("id"), "error": {"code": -32601,
                                                                                    "message": "nope"}})
    app = web.Application()
    app.router.add_post("/mcp", handle)
    server = await aiohttp_server(app)
    return str(server.make_url("/mcp")), seen


async def test_a_redirect_is_reported_and_never_followed(aiohttp_server, tmp_path) -> None:
    elsewhere, stolen = await hostile(aiohttp_server, {})

    async def redirect(_request: web.Request, _body: dict[str, Any]) -> web.StreamResponse:
        return web.Response(status=307, headers={"Location": elsewhere})
    url, _seen = await hostile(aiohttp_server, {"server/discover": redirect})
    code, out, err, _ = await bounded_cli(tmp_path, 60, "--upstream", url, "--token-env", "CHECK_TOKEN_X",
                                            env={"CHECK_TOKEN_X": "secret"})
    assert (code, out) == (2, "") and stolen == []  # neither the body nor the token went there
    assert err == (f"cannot check {url}: {url} answered 307 redirecting to {elsewhere!r}; check does not follow "
                   "redirects: give that URL with --upstream if it is the server\n")


async def _drip(request: web.Request, _body: dict[str, Any]) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    await resp.prepare(request)
    while True:  # one byte at a time, never the end: only a total timeout stops a reader
        await resp.write(b" ")
        await asyncio.sleep(0.1)  # sleep: the drip's pace


async def test_a_dripping_server_is_timed_out(aiohttp_server, tmp_path) -> None:
    url, _seen = await hostile(aiohttp_server, {"server/discover": _drip})
    (code, _out, err, took), (total_code, _, total_err, total_took) = await asyncio.gather(
        bounded_cli(tmp_path, 60, "--upstream", url, "--timeout", "2"),
        bounded_cli(tmp_path, 60, "--upstream", url, "--timeout", "300", "--total-timeout", "2"))
    assert code == 2 and "server/discover: no complete answer in time" in err and "all 2 s" in err, err
    assert total_code == 2 and "took longer than its total time (2 s, --total-timeout)" in total_err, total_err
    assert took < 30 and total_took < 30
    assert len(err.splitlines()) == 1 and len(total_err.splitlines()) == 1


async def _endless(content_type: str, start: bytes, filler: bytes) -> Handler:
    async def handler(request: web.Request, _body: dict[str, Any]) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": content_type})
        await resp.prepare(request)
        await resp.write(start)
        while True:
            await resp.write(filler)
    return handler


async def test_endless_bodies_stop_at_their_caps(aiohttp_server, tmp_path) -> None:
    json_url, _ = await hostile(aiohttp_server, {"server/discover": await _endless(
        "application/json", b'{"jsonrpc": "2.0", "id": 1, "result": "', b"x" * 65536)})
    sse_url, _ = await hostile(aiohttp_server, {"tools/list": await _endless(
        "text/event-stream", b"data: ", b"y" * 65536)})
    peaks = {name: tmp_path / f"{name}.peak" for name in ("json", "sse")}
    (code, _out, err, _), (sse_code, _out2, sse_err, _) = await asyncio.gather(
        bounded_cli(tmp_path, 90, "--upstream", json_url, env={PEAK_ENV: str(peaks["json"])}),
        bounded_cli(tmp_path, 90, "--upstream", sse_url, env={PEAK_ENV: str(peaks["sse"])}))
    assert code == 2 and f"server/discover: the answer is larger than {MAX_BODY_BYTES} bytes" in err, err
    assert sse_code == 2, sse_err
    assert f"tools/list: an SSE event of the answer is larger than {MAX_EVENT_BYTES} bytes" in sse_err
    # Each of the two checks peaked far below the 460 MB an unbounded read reached (their own peaks: the
    # suite's other children, a browser or Node, must not count).
    assert all(0 < int(peak.read_text()) < 400 * 1024 for peak in peaks.values()), {
        name: peak.read_text() for name, peak in peaks.items()}


async def test_malformed_lists_and_discover_exit_2_in_one_line(aiohttp_server, tmp_path) -> None:
    async def listing(tools: Any) -> Handler:
        async def handler(_request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
            return reply(body, tools_list(tools) if not isinstance(tools, dict) else tools)
        return handler

    async def discover(_request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        return reply(body, {**DISCOVER, "supportedVersions": 5})

    cases: dict[str, dict[str, Handler]] = {
        "tools[0] is not an object with a string name": {"tools/list": await listing([1, "x"])},
        "tools is not an array": {"tools/list": await listing("abc")},
        "nextCursor is not a string": {"tools/list": await listing({"tools": [], "nextCursor": [1]})},
        "supportedVersions is not an array of strings": {"server/discover": discover}}
    urls = [(said, (await hostile(aiohttp_server, methods))[0]) for said, methods in cases.items()]
    runs = await asyncio.gather(*(bounded_cli(tmp_path, 60, "--upstream", url) for _said, url in urls))
    for (said, url), (code, out, err, _) in zip(urls, runs, strict=True):
        assert (code, out) == (2, "") and err.startswith(f"cannot check {url}: ") and said in err, err
        assert len(err.splitlines()) == 1 and "Traceback" not in err


async def test_hostile_schemas_are_skipped_and_the_run_goes_on(aiohttp_server, tmp_path) -> None:
    schemas = {"huge": {"type": "object", "required": ["s"], "properties": {"s": {"type": "string",
                                                                                    "minLength": 4_000_000_000}}},
               "spin": {"type": "object", "required": ["s"], "properties": {"s": {
                   "type": "string", "minLength": 40, "pattern": "^(a|a)+b$"}}},
               "odd": {"type": "object", "required": ["s"], "properties": {"s": {"type": "string",
                                                                                   "minLength": "many"}}},
               "fine": {"type": "object"}}

    async def listing(_request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        return reply(body, tools_list([{"name": n, "inputSchema": s} for n, s in schemas.items()]))
    url, seen = await hostile(aiohttp_server, {"tools/list": listing})
    code, out, err, took = await bounded_cli(tmp_path, 60, "--upstream", url, "--json")
    tools = {t["name"]: t for t in json.loads(out)["tools"]}
    assert code == 0 and took < 30, err
    assert [tools[n]["status"] for n in ("huge", "spin", "odd", "fine")] == ["skipped", "skipped", "skipped", "ok"]
    assert "larger than the check builds" in tools["huge"]["error"] and "pattern" in tools["spin"]["error"]
    assert [b["params"]["name"] for b in seen if b["method"] == "tools/call"] == ["fine"]


async def test_100000_tools_are_capped_and_the_rest_named(aiohttp_server, tmp_path) -> None:
    many = [{"name": f"t{i}", "inputSchema": {"type": "object"}} for i in range(100_000)]

    async def listing(_request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        return reply(body, tools_list(many))
    url, seen = await hostile(aiohttp_server, {"tools/list": listing})
    code, out, err, _ = await bounded_cli(tmp_path, 240, "--upstream", url, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert len(doc["tools"]) == MAX_TOOLS and doc["summary"] == {"ok": MAX_TOOLS, "failed": 0, "skipped": 0,
                                                                 "unchecked": 100_000 - MAX_TOOLS}
    assert f"checked the first {MAX_TOOLS} of 100000 tools (the check's cap); 99900 not checked" in (
        doc["server"]["notes"][-1])
    assert sum(b["method"] == "tools/call" for b in seen) == MAX_TOOLS


async def test_the_total_time_skips_the_tools_left(aiohttp_server, tmp_path) -> None:
    async def slow(_request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        await asyncio.sleep(1.5)  # sleep: a slow tool, past the check's total time
        return reply(body, {"resultType": "complete", "content": [{"type": "text", "text": "late"}]})

    async def listing(_request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        return reply(body, tools_list([{"name": f"s{i}", "inputSchema": {"type": "object"}} for i in range(8)]))
    url, seen = await hostile(aiohttp_server, {"tools/list": listing, "tools/call": slow})
    code, out, err, took = await bounded_cli(tmp_path, 60, "--upstream", url, "--json", "--total-timeout", "4")
    doc = json.loads(out)
    statuses = [t["status"] for t in doc["tools"]]
    assert code == 0 and took < 20, err
    assert "ok" in statuses and statuses[-1] == "skipped" and doc["summary"]["unchecked"] == statuses.count("skipped")
    assert "not called: the run's total time (--total-timeout) ran out" in doc["tools"][-1]["error"]
    assert sum(b["method"] == "tools/call" for b in seen) < 8
