"""Translation traces (``serve --trace``): a bridged call through the gateway writes every message of both sides
under one correlation id, redacted unless content is asked for; the file rotates at ``max_bytes``."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from gateway.config.settings import load_config
from gateway.http.app import create_app
from gateway.telemetry.trace import Tracer
from tests.gateway.conftest import Legacy, text
from tests.gateway.http.test_bridge_shell import SAMPLED, SAMPLING, two_rounds

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
    assert all(r["t_ms"] <= s["t_ms"] for r, s in itertools.pairwise(mine))
    assert {r["session"] for r in mine} == {mine[0]["session"]} and mine[0]["corr"].startswith(mine[0]["session"])
    text = json.dumps(records)
    assert SECRET not in text and "s1\\u00e9" not in text and "s1\u00e9" not in text  # arguments, requestState
    call = mine[0]["message"]["params"]
    assert call["name"] == "t" and set(call["arguments"]) == {"len", "sha256"}
    assert len(call["arguments"]["sha256"]) == 12


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


async def test_the_cli_summarizes_and_draws_a_request(upstream, aiohttp_client, tmp_path: Path, capsys) -> None:
    from gateway.ops.cli import main

    records = await bridged_call(upstream, aiohttp_client, Tracer(tmp_path / "t.jsonl", max_bytes=1 << 20))
    mine = of_call(records)
    out = tmp_path / "trace.html"
    with pytest.raises(SystemExit) as done:
        main(["trace", str(tmp_path / "t.jsonl"), "--request", mine[0]["corr"], "--html", str(out)])
    assert done.value.code == 0
    text = capsys.readouterr().out
    # The heading names the tool beside the method (the name is not content: kept without --trace-content).
    assert text.startswith(f"== {mine[0]['corr']}  tools/call t  {len(mine)} messages, 3 round(s)")
    assert text.count("\n") == len(mine) + 1 and "-> upstream" in text and "!!" not in text
    page = out.read_text()
    section = page.split(f'data-corr="{mine[0]["corr"]}"')[1]
    assert page.count('<section class="request') == 1 and section.count('<g class="arrow') == len(mine)
    assert section.count('<g class="round">') == 3 and "<script" not in page and "http" not in page.split("<svg")[0]
    assert "tools/call t <small>" in section
    # Lane names are plain text: the lanes' dashed stroke is drawn on their lines only.
    assert "line.lane{stroke:#bbb;stroke-dasharray:4}" in page and ".lane{stroke" not in page.replace("line.lane", "")


def test_a_request_whose_session_id_starts_with_a_dash_is_found(tmp_path: Path, capsys) -> None:
    # Session ids are URL-safe base64 (handshake: secrets.token_urlsafe), so one in 64 starts with "-", and so does
    # its requests' correlation id: `--request -Ab…/7` must select it, not stop as an unknown option.
    from adapters.trace import Seen, TapKind, trace_record
    from gateway.ops.cli import main

    file = tmp_path / "t.jsonl"
    for session in ("-dash", "plain"):
        record = trace_record(TapKind.CLIENT, {"jsonrpc": "2.0", "id": 7, "method": "tools/call"},
                              Seen(session, 7, 0, 1.0), content=False)
        with file.open("a") as out:
            out.write(json.dumps(record) + "\n")
    with pytest.raises(SystemExit) as done:
        main(["trace", str(file), "--request", "-dash/7"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("== -dash/7  tools/call") and "plain/7" not in text


def test_errors_are_marked_in_the_summary_and_red_in_the_page() -> None:
    from adapters.trace import Seen, TapKind, trace_record
    from kit.trace_view import group, html_page, summary

    seen = Seen("s", 7, 0, 1.0)
    records = [trace_record(TapKind.CLIENT, {"jsonrpc": "2.0", "id": 7, "method": "tools/call"}, seen, content=False),
               trace_record(TapKind.FAILED, {"code": -32603, "message": "timeout", "data": {"upstream": "timeout"}},
                            seen, content=False),
               trace_record(TapKind.DOWNSTREAM, {"jsonrpc": "2.0", "id": 7, "error": {"code": -32603, "message":
                                                 "timeout"}}, seen, content=False)]
    assert records[1]["error"]["data"] == {"upstream": "timeout"} and "message" not in records[1]
    requests = group(records, "7")
    assert [r.corr for r in requests] == ["s/7"] and requests[0].failed
    text = summary(requests)
    assert "FAILED" in text and text.count("!!") == 2 and "ERROR -32603: timeout" in text
    assert html_page(requests).count('<g class="arrow error">') == 2


async def test_serve_trace_writes_the_file_the_flags_name(aiohttp_client, tmp_path: Path) -> None:
    """``serve --trace FILE --trace-content`` over the file's ``[gateway.trace]``: the trace is the app's tap and
    its last records are written when the app stops."""
    from gateway.ops.cli import parser, served_app

    pytest.importorskip("modern_server.app")
    config_file = tmp_path / "g.toml"
    config_file.write_text("[gateway.trace]\nmax_bytes = 4096\n")
    trace = tmp_path / "t.jsonl"
    args = parser().parse_args(["serve", "--config", str(config_file), "--trace", str(trace), "--trace-content",
                                "--gc-gen0", "0", "--usage-db", str(tmp_path / "usage.sqlite3")])
    app, config = served_app(args)
    assert (config.trace.file, config.trace.max_bytes, config.trace.content) == (str(trace), 4096, True)
    legacy = Legacy(await aiohttp_client(app))
    await legacy.initialize()
    await legacy.client.close()  # the app's cleanup closes the trace
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [r["dir"] for r in records if r["method"] == "initialize"] == ["client->gateway"]
    assert records[0]["message"]["params"]["clientInfo"]  # content kept: --trace-content


PEER_TRACE = """[gateway.trace]
enabled = false

[[peers]]
name = "debug"
client_name = "{client}"
[peers.trace]
enabled = true
content = true
"""


async def _traced_by_peer(upstream: Any, aiohttp_client: Any, tmp_path: Path, client: str) -> list[dict[str, Any]]:
    """A bridged call by the Legacy client (clientInfo name "raw") under a config tracing only peer ``client``."""
    config_file = tmp_path / "peers.toml"
    config_file.write_text(PEER_TRACE.format(client=client))
    tracer = Tracer(tmp_path / f"{client}.jsonl", max_bytes=1 << 20)  # content off for the gateway as a whole
    upstream.script["tools/call"] = two_rounds
    app = create_app(load_config(config_file, upstream_url=upstream.url), tap=tracer)
    legacy = Legacy(await aiohttp_client(app))
    await legacy.initialize()
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {"secret": SECRET}})
    for message in await _answering(legacy, resp):
        assert "error" not in message
    await legacy.client.close()
    tracer.close()
    return [json.loads(line) for line in tracer.path.read_text().splitlines()]


async def _answering(legacy: Legacy, resp: Any) -> list[dict[str, Any]]:
    """Read the call's stream to its end, answering every sampling request."""
    seen = []
    while True:
        eid, message = await legacy.next_event(resp)
        if message is None:
            if eid is None:
                return seen
            continue  # the priming event
        seen.append(message)
        if message.get("method") == "sampling/createMessage":
            assert await legacy.answer(message["id"], SAMPLED) == 202
        elif "method" not in message:
            return seen


async def test_a_peer_can_be_traced_with_content_while_the_rest_is_not(upstream, aiohttp_client, tmp_path) -> None:
    records = await _traced_by_peer(upstream, aiohttp_client, tmp_path, "raw")
    mine = of_call(records)
    assert mine[0]["message"]["params"]["arguments"] == {"secret": SECRET}  # the peer's content = true
    assert [r["dir"] for r in records if r["method"] == "initialize"] == ["client->gateway"]
    assert len([r for r in mine if r["dir"] == "gateway->upstream"]) == 3


async def test_other_peers_are_not_traced_when_the_gateway_default_is_off(upstream, aiohttp_client, tmp_path) -> None:
    assert await _traced_by_peer(upstream, aiohttp_client, tmp_path, "someone-else") == []


COMPLETION_SECRET, CONTEXT_SECRET = "typed-hunter2", "context-hunter2"
REFUSAL_SECRET, URL_SECRET = "refused-because-hunter2", "https://idp.example/cb?code=hunter2"


def _digested(record_part: Any, value: Any) -> None:
    from adapters.trace import digest
    assert record_part == digest(value)


async def test_completions_url_elicitations_and_refusals_are_digested(upstream, aiohttp_client, tmp_path) -> None:
    """Without content: a completion's argument value and context, a URL elicitation's ``url`` and the client's
    message refusing a sampling request reach the trace as digests only, on every hop they travel."""
    url_ask = {"method": "elicitation/create", "params": {"mode": "url", "message": "sign in", "url": URL_SECRET}}

    def connect(body, headers):
        if body["params"].get("requestState") is None:
            return {"resultType": "input_required", "inputRequests": {"u": url_ask}, "requestState": "w1"}
        return text("connected")

    def sample(body, headers):
        return {"resultType": "input_required", "inputRequests": {"s": SAMPLING}, "requestState": "x"}
    upstream.script["completion/complete"] = lambda body, headers: {
        "resultType": "complete", "completion": {"values": ["a"]}}
    upstream.script["tools/call"] = lambda body, headers: (connect if body["params"]["name"] == "connect"
                                                           else sample)(body, headers)
    tracer = Tracer(tmp_path / "t.jsonl", max_bytes=1 << 20)
    legacy = Legacy(await aiohttp_client(create_app(load_config(upstream_url=upstream.url), tap=tracer)))
    await legacy.initialize()
    complete = {"ref": {"type": "ref/prompt", "name": "p"}, "argument": {"name": "a", "value": COMPLETION_SECRET},
                "context": {"arguments": {"b": CONTEXT_SECRET}}}
    assert "result" in await legacy.call("completion/complete", complete)
    resp = await legacy.post("tools/call", {"name": "connect", "arguments": {}})
    await legacy.next_event(resp)
    _, ask = await legacy.next_event(resp)
    assert ask["params"]["url"] == URL_SECRET and await legacy.answer(ask["id"], {"action": "accept"}) == 202
    assert (await legacy.events(resp))[-1]["result"]["content"][0]["text"] == "connected"
    resp = await legacy.post("tools/call", {"name": "sample", "arguments": {}})
    await legacy.next_event(resp)
    _, ask = await legacy.next_event(resp)
    assert await legacy.answer(ask["id"], error={"code": -1, "message": REFUSAL_SECRET}) == 202
    final = (await legacy.events(resp))[-1]
    assert REFUSAL_SECRET in final["error"]["message"]  # the client still gets its own words back
    await legacy.client.close()
    tracer.close()
    written = tracer.path.read_text()
    for secret in (COMPLETION_SECRET, CONTEXT_SECRET, REFUSAL_SECRET, URL_SECRET, "hunter2"):
        assert secret not in written
    records = [json.loads(line) for line in written.splitlines()]
    completions = [r["message"]["params"] for r in records if r["method"] == "completion/complete"]
    assert len(completions) == 2  # the client's request and the one sent upstream
    for params in completions:
        _digested(params["argument"], complete["argument"])
        _digested(params["context"], complete["context"])
        assert params["ref"] == complete["ref"]  # which prompt is not content
    urls = [r["message"]["params"]["url"] for r in records if r["method"] == "elicitation/create"]
    assert len(urls) == 1
    _digested(urls[0], URL_SECRET)
    refusal, final_record = [r for r in records if "error" in r and r["dir"] in ("client->gateway",
                                                                                 "gateway->client")]
    assert refusal["dir"] == "client->gateway" and refusal["error"]["code"] == -1
    _digested(refusal["error"]["message"], REFUSAL_SECRET)
    _digested(refusal["message"]["error"]["message"], REFUSAL_SECRET)
    _digested(final_record["error"]["message"], final["error"]["message"])
    _digested(final_record["message"]["error"]["message"], final["error"]["message"])


def test_other_error_messages_stay_readable() -> None:
    """The gateway's and the upstream's own error messages are not the client's words: they stay in clear."""
    from adapters.trace import Seen, TapKind, trace_record

    error = {"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": "unknown tool"}}
    for kind in (TapKind.ANSWER, TapKind.DOWNSTREAM):
        record = trace_record(kind, error, Seen("s", 3, 0, 1.0), content=False)
        assert record["error"]["message"] == "unknown tool" == record["message"]["error"]["message"]


def test_the_summary_escapes_control_characters(tmp_path: Path, capsys) -> None:
    """Method names, ids and error messages are the peers' choice: ESC and C1 controls (CSI, OSC), DEL,
    newlines and bidi overrides come out as escapes, never raw, so a trace cannot drive the reader's terminal.
    The HTML page escapes markup as before."""
    from adapters.trace import Seen, TapKind, trace_record
    from gateway.ops.cli import main
    from kit.trace_view import printable

    method = "tools/call\x1b]0;owned\x07\x9b2J\x1b[2K"
    error = {"code": -32601, "message": "no\rsuch\x9d method\x7f\u202egnp.exe\u2028<b>"}
    seen = Seen("s\x1b[31m", "7\x85", 0, 1.0)
    file = tmp_path / "t.jsonl"
    records = [trace_record(TapKind.CLIENT, {"jsonrpc": "2.0", "id": "7\x85", "method": method}, seen,
                            content=False),
               trace_record(TapKind.ANSWER, {"jsonrpc": "2.0", "id": 1, "error": error}, seen, content=False)]
    file.write_text("".join(json.dumps(r) + "\n" for r in records))
    html = tmp_path / "t.html"
    with pytest.raises(SystemExit) as done:
        main(["trace", str(file), "--html", str(html)])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for raw in ("\x1b", "\x07", "\x9b", "\x9d", "\x85", "\x7f", "\r", "\u202e", "\u2028"):
        assert raw not in out
    assert "tools/call\\x1b]0;owned\\x07\\u009b2J\\x1b[2K" in out and "s\\x1b[31m/" in out
    assert "ERROR -32601: no\\x0dsuch\\u009d method\\x7f\\u202egnp.exe\\u2028<b>" in out
    assert out.count("\n") == 3  # a header and two lines: no line of the peer's making
    assert "&lt;b&gt;" in html.read_text() and "<b>" not in html.read_text()
    assert printable("plain text, é, 日本") == "plain text, é, 日本"
