"""``python -m gateway check`` end to end: the reference core, a faulty 2026 upstream, a 2025-only server and
nothing listening. The CLI runs as a subprocess (exit codes, output) while the test's loop serves the upstream."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

from aiohttp import web

from gateway.ops.check import OUT_OF_BAND_SECONDS, Options, run_check
from kit.check import ProblemKind, Status
from modern_server.app import create_app as create_core
from modern_server.config import CoreConfig
from tests.gateway.conftest import gateway_cli

ROOT = Path(__file__).resolve().parents[3]


async def cli(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    return await gateway_cli(tmp_path, "check", *args)


async def test_reference_core_every_tool_ok_or_skipped(aiohttp_server, tmp_path) -> None:
    # build_project's four steps take a second each by default: shorter here, to fit --timeout 3.
    core = await aiohttp_server(create_core(CoreConfig(database=str(tmp_path / "core.sqlite3"),
                                                       build_step_seconds=0.1)))
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"notes_delete": {"workspaceUri": "file:///work/notes", "title": "none"}}))
    code, out, _err = await cli(tmp_path, "--upstream", str(core.make_url("/mcp")), "--json", "--timeout", "3",
                                "--args", str(args_file))
    doc = json.loads(out)
    tools = {t["name"]: t for t in doc["tools"]}
    assert code == 0 and doc["summary"]["failed"] == 0
    assert {n for n, t in tools.items() if t["status"] == "ok"} >= {"echo", "slow_count", "workspace_scan",
                                                                    "notes_timeline"}
    assert tools["workspace_scan"]["inputs"] == ["roots"] and tools["workspace_scan"]["rounds"] == 2
    # The core refuses the canned model reply (it must be a JSON array of paths): the bridge delivered it.
    assert tools["summarize_repo"]["status"] == "skipped" and tools["summarize_repo"]["inputs"] == ["sampling"]
    assert "canned answers" in tools["summarize_repo"]["error"]
    assert tools["notes_delete"]["status"] == "skipped" and "arguments" in tools["notes_delete"]["error"]
    # URL accept is only consent (2026-07-28 client §Elicitation): the core waits for the out-of-band step.
    assert tools["connect_service"]["status"] == "skipped" and tools["connect_service"]["inputs"] == [
        "elicitation.url"]
    assert doc["server"]["name"] and doc["server"]["notes"] == []


def _tool(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "inputSchema": {"type": "object", "properties": {}}, **extra}


FAULTY_TOOLS = [
    _tool("fine"),
    _tool("array_out", outputSchema={"type": "array"}),
    {"name": "bad_header", "inputSchema": {"type": "object", "properties": {
        "xs": {"type": "array", "items": {"type": "string", "x-mcp-header": "Xs"}}}}},
    _tool("loops"), _tool("broken"), _tool("mismatch"),
]


def _faulty_call(body: dict[str, Any], _request: web.Request) -> Any:
    name = body["params"]["name"]
    if name == "loops":  # asks again forever, with a new key each round
        key = f"k{len(body['params'].get('inputResponses') or {})}{body['id']}"
        return {"resultType": "input_required", "requestState": "s", "inputRequests": {key: {
            "method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}}}
    if name == "broken":
        return {"resultType": "complete", "content": [{"type": "text"}]}
    if name == "mismatch":
        return ("error", {"code": -32020, "message": "Mcp-Name does not match"}, 400)
    return {"resultType": "complete", "content": [{"type": "text", "text": "done"}]}


async def test_faulty_upstream_problems(upstream) -> None:
    upstream.script["tools/list"] = lambda body, _r: {"resultType": "complete", "tools": FAULTY_TOOLS,
                                                      "ttlMs": 0, "cacheScope": "private"}
    upstream.script["tools/call"] = _faulty_call
    outcome = await run_check(Options(upstream.url, roots=("file:///tmp",), timeout=30))
    reports = {r.name: r for r in outcome.reports}
    kinds = {name: [p.kind for p in r.problems] for name, r in reports.items()}
    assert reports["fine"].status is Status.OK and reports["fine"].rounds == 1
    assert reports["array_out"].status is Status.OK and kinds["array_out"] == [ProblemKind.OUTPUT_SCHEMA_REMOVED]
    assert reports["bad_header"].status is Status.FAILED and kinds["bad_header"] == [ProblemKind.DROPPED]
    assert reports["loops"].status is Status.FAILED and kinds["loops"] == [ProblemKind.ROUND_LIMIT]
    assert reports["loops"].inputs and reports["loops"].rounds > 1
    assert reports["broken"].status is Status.FAILED
    assert kinds["broken"] == [ProblemKind.UPSTREAM_ANSWER_REFUSED]  # the gateway refuses it before 2025 sees it
    assert reports["mismatch"].status is Status.FAILED and kinds["mismatch"] == [ProblemKind.MAPPING_FAULT]
    assert not any(c.get("params", {}).get("name") == "bad_header" for c in upstream.calls("tools/call"))


async def test_faulty_upstream_cli_exit_1_and_table(upstream, tmp_path) -> None:
    upstream.script["tools/list"] = lambda body, _r: {"resultType": "complete", "tools": FAULTY_TOOLS[:3],
                                                      "ttlMs": 0, "cacheScope": "private"}
    upstream.script["tools/call"] = _faulty_call
    code, out, _err = await cli(tmp_path, "--upstream", upstream.url, "--tools", "fine,bad_header")
    lines = out.splitlines()
    assert code == 1 and lines[1].split()[:5] == ["tool", "status", "inputs", "rounds", "problems"]
    assert lines[-1] == "2 tools: 1 ok, 1 failed, 0 skipped"
    assert any(line.startswith("bad_header") and "dropped:" in line for line in lines)


async def _legacy_only(request: web.Request) -> web.Response:
    body = await request.json()
    if body.get("method") == "initialize":
        return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "old", "version": "1"}}},
            headers={"Mcp-Session-Id": "abc"})
    return web.json_response({"jsonrpc": "2.0", "id": None, "error": {"code": -32000,
                                                                      "message": "Missing session ID"}}, status=400)


async def test_a_2025_only_server_exits_2_saying_what_it_is(aiohttp_server, tmp_path) -> None:
    app = web.Application()
    app.router.add_post("/mcp", _legacy_only)
    app.router.add_delete("/mcp", lambda _r: web.Response(status=200))
    server = await aiohttp_server(app)
    code, out, err = await cli(tmp_path, "--upstream", str(server.make_url("/mcp")))
    assert code == 2 and out == ""
    assert "a 2025-era server: it answered 400 Missing session ID" in err


async def test_nothing_listening_exits_2(tmp_path) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code, out, _err = await cli(tmp_path, "--upstream", f"http://127.0.0.1:{port}/mcp", "--json")
    doc = json.loads(out)
    assert code == 2 and doc["server"]["error"] == f"cannot connect to 127.0.0.1:{port}: connection refused"
    assert doc["tools"] == []
    code, _out, err = await cli(tmp_path, "--upstream", f"http://127.0.0.1:{port}/mcp")
    url = f"http://127.0.0.1:{port}/mcp"  # named once, and no TLS words for plain HTTP
    assert code == 2 and err == f"cannot check {url}: cannot connect to 127.0.0.1:{port}: connection refused\n"


async def test_an_unset_token_variable_exits_2(tmp_path) -> None:
    code, _out, err = await cli(tmp_path, "--upstream", "http://127.0.0.1:9/mcp", "--token-env", "NO_SUCH_VAR_X")
    assert code == 2 and "NO_SUCH_VAR_X is not set" in err


async def test_check_trace_is_the_serve_trace_and_renders(aiohttp_server, tmp_path) -> None:
    core = await aiohttp_server(create_core(CoreConfig(database=str(tmp_path / "core.sqlite3"))))
    trace, page = tmp_path / "check.jsonl", tmp_path / "check.html"
    code, _out, _err = await cli(tmp_path, "--upstream", str(core.make_url("/mcp")), "--tools", "workspace_scan",
                                 "--timeout", "5", "--trace", str(trace))
    assert code == 0
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    (corr,) = {r["corr"] for r in records if r["method"] == "tools/call" and r["dir"] == "client->gateway"}
    mine = [r for r in records if r["corr"] == corr]
    # Both sides of the bridged call: the client's call, the upstream rounds, the live roots/list and its answer.
    assert {r["dir"] for r in mine} == {"client->gateway", "gateway->upstream", "upstream->gateway",
                                        "gateway->client"}
    assert [r["round"] for r in mine if r["dir"] == "gateway->upstream"] == [0, 1]
    assert any(r["method"] == "roots/list" for r in mine)
    call = next(r for r in mine if r["dir"] == "client->gateway" and r["method"] == "tools/call")
    assert set(call["message"]["params"]["arguments"]) == {"len", "sha256"}  # redacted by default
    code, out, _err = await gateway_cli(tmp_path, "trace", str(trace), "--request", corr, "--html", str(page))
    assert code == 0 and corr in out and "<svg" in page.read_text()


async def test_check_trace_to_an_unwritable_file_exits_2(tmp_path) -> None:
    code, _out, err = await cli(tmp_path, "--upstream", "http://127.0.0.1:9/mcp", "--trace",
                                str(tmp_path / "no-such-dir" / "t.jsonl"))
    assert code == 2 and "--trace" in err and "No such file" in err


async def test_the_shipped_answers_pass_every_core_tool_but_the_out_of_band_one(aiohttp_server, tmp_path) -> None:
    """config/check/reference-core.toml: every tool ok but connect_service, skipped a few seconds after its URL
    elicitation (not at the end of --timeout); one progress line per tool on stderr; twice, the same."""
    core = await aiohttp_server(create_core(CoreConfig(database=str(tmp_path / "core.sqlite3"))))
    answers = ROOT / "config" / "check" / "reference-core.toml"
    for _run in range(2):  # repeatable: nothing the answers do changes what the next run sees
        started = asyncio.get_running_loop().time()
        code, out, err = await cli(tmp_path, "--upstream", str(core.make_url("/mcp")), "--answers", str(answers),
                                   "--json")
        elapsed = asyncio.get_running_loop().time() - started
        doc = json.loads(out)
        statuses = {t["name"]: t["status"] for t in doc["tools"]}
        assert code == 0 and elapsed < 30, (elapsed, err)
        assert statuses == {"build_project": "ok", "connect_service": "skipped", "echo": "ok", "notes_delete": "ok",
                            "notes_timeline": "ok", "slow_count": "ok", "summarize_repo": "ok", "workspace_scan": "ok"}
        progress = [line for line in err.splitlines() if line.startswith("check: [")]
        assert all(f"/8] {name} " in line for name, line in zip(sorted(statuses), progress, strict=True))
        [skipped] = [line for line in progress if "connect_service" in line]
        assert "skipped" in skipped and f"waited {OUT_OF_BAND_SECONDS:g} s" in skipped, skipped


async def test_answers_that_do_not_meet_their_expectations_fail_the_tool(aiohttp_server, tmp_path) -> None:
    core = await aiohttp_server(create_core(CoreConfig(database=str(tmp_path / "core.sqlite3"))))
    (tmp_path / "a.toml").write_text('[[step]]\ncall = "echo"\narguments = { text = "a" }\nexpect_text = "b"\n')
    code, out, _err = await cli(tmp_path, "--upstream", str(core.make_url("/mcp")), "--tools", "echo",
                                "--answers", "a.toml", "--json")
    [echo] = json.loads(out)["tools"]
    assert code == 1 and echo["status"] == "failed" and "expected text containing 'b'" in echo["error"]
    (tmp_path / "p.toml").write_text('[[step]]\nprompt = "draft_note"\n')
    code, out, err = await cli(tmp_path, "--upstream", str(core.make_url("/mcp")), "--answers", "p.toml")
    assert code == 2 and "--answers p.toml: step 1 (prompt draft_note): check calls tools" in err
    assert err.count("\n") == 1 and "Traceback" not in err


async def test_an_html_error_page_is_one_line(aiohttp_server, tmp_path) -> None:
    page = ("<!DOCTYPE html>\n<html>\n<head><title>502 Bad Gateway</title></head>\n<body>\n<center><h1>502 Bad "
            "Gateway</h1></center>\n<hr><center>nginx</center>\n</body>\n</html>\n")
    app = web.Application()
    app.router.add_post("/mcp", lambda _r: web.Response(status=502, text=page, content_type="text/html"))
    server = await aiohttp_server(app)
    code, out, err = await cli(tmp_path, "--upstream", str(server.make_url("/mcp")))
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.endswith("it answered 502 an HTML page (502 Bad Gateway)\n") and "<" not in err, err
