"""The reverse bridge end to end with code we did not write
(docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge): the official 2026 client (Python
``mcp`` 2.3, pinned to 2026-07-28) -> the gateway -> a 2025-11-25-only server written with the official ``mcp`` 1.x
SDK (tests/gateway/http/legacy_sdk1_server.py, in the 1.x venv of test_doors_sdk1), all real processes on loopback.
Plus the faults: tampered, replayed and foreign states, other arguments, and a client that never retries."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from adapters.usage import KEY_FIELDS
from gateway.config.settings import load_config
from gateway.http.app import create_app
from gateway.http.keys import REVERSE
from gateway.telemetry.usage import USAGE
from tests.gateway.http.test_doors_sdk1 import _client_env, sdk1_python  # noqa: F401  (a fixture)
from tests.waiting import accepts_sync, until, until_sync

SERVER = Path(__file__).with_name("legacy_sdk1_server.py")
# A 2026-07-28 subscriptions/listen's headers (2026-07-28 basic/transports: Mcp-Method names the method).
LISTEN_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
                  "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "subscriptions/listen"}
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"sampling": {}, "elicitation": {}, "roots": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "1"}}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def legacy_url(sdk1_python: Path) -> Iterator[str]:  # noqa: F811
    with _legacy_server(sdk1_python) as (url, _):
        yield url


@contextlib.contextmanager
def _legacy_server(sdk1_python: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:  # noqa: F811
    port = _free_port()
    proc = subprocess.Popen([str(sdk1_python), "-I", str(SERVER), str(port)], env=_client_env(),
                            cwd=tempfile.gettempdir(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def started() -> bool:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            return accepts_sync(port)
        until_sync(started, "the legacy server listens", seconds=10)
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        proc.kill()
        proc.wait()


async def _gateway(aiohttp_server: Any, url: str, **reverse: Any) -> Any:
    config = load_config(upstream_url=url, upstream_era="2025-11-25", reverse=reverse)
    return await aiohttp_server(create_app(config))


@pytest.fixture
async def gateway(aiohttp_server: Any, legacy_url: str) -> Any:
    return await _gateway(aiohttp_server, legacy_url)


def text_of(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def sampling(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    prompt = params.messages[0].content
    said = prompt.text if isinstance(prompt, types.TextContent) else "?"
    return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text=f"<{said}>"),
                                     model="m")


async def roots(context: Any) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[types.Root(uri="file:///work/a", name="a")])


def elicit(action: str, confirm: bool = True) -> Any:
    async def answer(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action=action, content={"confirm": confirm} if action == "accept" else None)
    return answer


def modern(gateway: Any, **kwargs: Any) -> Client:
    return Client(str(gateway.make_url("/mcp")), mode="2026-07-28", sampling_callback=sampling,
                  list_roots_callback=roots, **kwargs)


async def _post(http: aiohttp.ClientSession, gateway: Any, ident: int, method: str, params: dict[str, Any],
                name: str | None = None, meta: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
    if name is not None:
        headers["Mcp-Name"] = name
    body = {"jsonrpc": "2.0", "id": ident, "method": method, "params": {**params, "_meta": meta or META}}
    async with http.post(gateway.make_url("/mcp"), json=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def _ask(http: aiohttp.ClientSession, gateway: Any, ident: int = 1, **extra: Any) -> tuple[int, dict]:
    return await _post(http, gateway, ident, "tools/call", {"name": "ask_model", "arguments": {"topic": "t"},
                                                            **extra}, "ask_model")


SAMPLED = {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"}


async def test_discover_and_the_strict_2026_checks(gateway: Any) -> None:
    async with aiohttp.ClientSession() as http:
        status, found = await _post(http, gateway, 1, "server/discover", {})
        assert status == 200 and found["result"]["supportedVersions"] == ["2026-07-28"]
        assert found["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "legacy-notes"
        assert (found["result"]["ttlMs"], found["result"]["cacheScope"]) == (0, "private")
        assert found["result"]["instructions"] == "A 2025-era notes server."
        status, wrong = await _post(http, gateway, 2, "tools/call", {"name": "echo", "arguments": {"text": "x"}},
                                    "other")
        assert (status, wrong["error"]["code"], wrong["id"]) == (400, -32020, 2)
        status, removed = await _post(http, gateway, 3, "logging/setLevel", {"level": "info"})
        assert (status, removed["error"]["code"]) == (404, -32601)  # removed in 2026: _meta logLevel instead
        no_sampling = {**META, "io.modelcontextprotocol/clientCapabilities": {}}
        status, needs = await _post(http, gateway, 4, "tools/call",
                                    {"name": "ask_model", "arguments": {"topic": "t"}}, "ask_model", no_sampling)
        assert (status, needs["error"]["code"]) == (400, -32021)
        assert needs["error"]["data"] == {"requiredCapabilities": {"sampling": {}}}


async def test_tampered_replayed_foreign_and_changed_retries_are_refused(gateway: Any) -> None:
    async with aiohttp.ClientSession() as http:
        _, first = await _ask(http, gateway)
        state = first["result"]["requestState"]
        assert first["result"]["resultType"] == "input_required"
        raw = bytearray(base64.urlsafe_b64decode(state))
        raw[-1] ^= 1
        tampered = base64.urlsafe_b64encode(bytes(raw)).decode()
        answers = {"inputResponses": {"in1": SAMPLED}}
        for ident, params in [(2, {"requestState": tampered}), (3, {"requestState": "not-a-state"})]:
            status, refused = await _ask(http, gateway, ident, **answers, **params)
            assert (status, refused["error"]["code"]) == (400, -32602), refused
        other = await _post(http, gateway, 4, "tools/call", {"name": "ask_model", "arguments": {"topic": "u"},
                                                             "requestState": state, **answers}, "ask_model")
        assert other[1]["error"]["code"] == -32602 and "another request" in other[1]["error"]["message"]
        status, done = await _ask(http, gateway, 5, requestState=state, **answers)
        assert done["result"] == {"content": [{"type": "text", "text": "model said: hi"}], "isError": False,
                                  "structuredContent": {"result": "model said: hi"}, "resultType": "complete"}
        status, replayed = await _ask(http, gateway, 6, requestState=state, **answers)
        assert (status, replayed["error"]["code"]) == (400, -32602)


async def test_a_state_of_another_principal_is_refused(gateway: Any) -> None:
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer alice"}) as alice, \
            aiohttp.ClientSession(headers={"Authorization": "Bearer bob"}) as bob:
        _, first = await _ask(alice, gateway)
        state = first["result"]["requestState"]
        status, refused = await _ask(bob, gateway, 2, requestState=state, inputResponses={"in1": SAMPLED})
        assert (status, refused["error"]["code"]) == (400, -32602)
        _, done = await _ask(alice, gateway, 3, requestState=state, inputResponses={"in1": SAMPLED})
        assert done["result"]["resultType"] == "complete"
        await _post(bob, gateway, 4, "tools/call", {"name": "echo", "arguments": {"text": "b"}}, "echo")
    sessions = {p.session.session_id for p in gateway.app[REVERSE].pool.values()}
    assert len(sessions) == 2  # one legacy session per principal, never shared


async def test_bridged_calls_keep_their_upstream_connections(gateway: Any) -> None:
    """The 1.x SDK ends a call's stream a moment after its answer: that end is read, so the connection is reused
    (left before it, a connection is closed and the next call opens another)."""
    posts = gateway.app[REVERSE].posts
    connect, opened = posts._connect, []

    async def counted(deadline: float) -> Any:
        opened.append(deadline)
        return await connect(deadline)
    posts._connect = counted
    async with aiohttp.ClientSession() as http:
        for n in range(10):
            _, first = await _ask(http, gateway, 2 * n + 1)
            _, done = await _ask(http, gateway, 2 * n + 2, requestState=first["result"]["requestState"],
                                 inputResponses={"in1": SAMPLED})
            assert done["result"]["resultType"] == "complete"
    assert len(opened) <= 3  # the call's and its answer's, and one more at most when a call's end came late


async def test_a_call_nobody_retries_is_cancelled_upstream(aiohttp_server: Any, legacy_url: str) -> None:
    gateway = await _gateway(aiohttp_server, legacy_url, answer_timeout_seconds=0.3)
    bridge = gateway.app[REVERSE]
    async with aiohttp.ClientSession() as http:
        _, first = await _ask(http, gateway)
        assert bridge.parked
        await until(lambda: not bridge.parked, "the parked call is given up")
        assert not bridge.parked and all(p.busy == 0 for p in bridge.pool.values())
        assert await _cancelled(http, gateway) == "ask_model"  # the legacy tool was cancelled
        status, late = await _ask(http, gateway, 2, requestState=first["result"]["requestState"],
                                  inputResponses={"in1": SAMPLED})
        assert (status, late["error"]["code"]) == (400, -32602)
        status, fine = await _post(http, gateway, 3, "tools/call", {"name": "echo", "arguments": {"text": "ok"}},
                                   "echo")
        assert fine["result"]["content"][0]["text"] == "ok"  # the session still serves


async def _cancelled(http: aiohttp.ClientSession, gateway: Any) -> str:
    async def told() -> str:
        _, said = await _post(http, gateway, 99, "tools/call", {"name": "cancelled", "arguments": {}}, "cancelled")
        return str(said["result"]["content"][0]["text"]) if said["result"]["content"] else ""
    return str(await until(told, "the legacy server names a cancelled tool"))


async def test_a_client_that_hangs_up_cancels_the_legacy_call(gateway: Any) -> None:
    bridge = gateway.app[REVERSE]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=0.5)) as http:
        with pytest.raises(TimeoutError):
            await _post(http, gateway, 1, "tools/call", {"name": "slow", "arguments": {}}, "slow")
    async with aiohttp.ClientSession() as http:
        assert await _cancelled(http, gateway) == "slow"  # 2026-07-28: a closed stream is the cancel
        assert all(not p.calls for p in bridge.pool.values())


async def test_the_official_client_sees_refusals_as_errors(gateway: Any) -> None:
    async with modern(gateway) as client:  # no elicitation callback: elicitation is not declared
        with pytest.raises(MCPError) as refused:
            await client.call_tool("delete_note", {"note": "n1"})
    assert refused.value.error.code == -32021


async def test_an_idle_session_is_closed_and_a_new_one_opens(aiohttp_server: Any, legacy_url: str) -> None:
    gateway = await _gateway(aiohttp_server, legacy_url, session_idle_seconds=0.2)
    bridge = gateway.app[REVERSE]
    async with aiohttp.ClientSession() as http:
        await _post(http, gateway, 1, "tools/call", {"name": "echo", "arguments": {"text": "a"}}, "echo")
        first = next(iter(bridge.pool.values())).session.session_id
        await until(lambda: not bridge.pool, "the idle session is closed")
        assert not bridge.pool
        _, again = await _post(http, gateway, 2, "tools/call", {"name": "echo", "arguments": {"text": "b"}}, "echo")
        assert again["result"]["content"][0]["text"] == "b"
        assert next(iter(bridge.pool.values())).session.session_id != first


async def test_a_session_the_server_ended_is_initialized_again(gateway: Any) -> None:
    bridge = gateway.app[REVERSE]
    async with aiohttp.ClientSession() as http:
        await _post(http, gateway, 1, "tools/call", {"name": "echo", "arguments": {"text": "a"}}, "echo")
        pooled = next(iter(bridge.pool.values()))
        gone = pooled.session.session_id
        headers = {"Mcp-Session-Id": gone, "MCP-Protocol-Version": pooled.session.version}
        async with http.delete(pooled.session.url, headers=headers) as resp:  # the server ends it behind our back
            assert resp.status == 200
        _, again = await _post(http, gateway, 2, "tools/call", {"name": "echo", "arguments": {"text": "b"}}, "echo")
        assert again["result"]["content"][0]["text"] == "b"
        assert next(iter(bridge.pool.values())).session.session_id != gone


def test_auto_takes_the_probes_verdict(legacy_url: str) -> None:
    from gateway.ops.cli import check_upstream

    # --require-upstream passes: the 2025 server is served in reverse, and serve's app is then made with its era.
    assert check_upstream(load_config(upstream_url=legacy_url), True) == (None, "2025-11-25", {})
    pinned = load_config(upstream_url=legacy_url, upstream_era="2026-07-28")
    assert check_upstream(pinned, False) == (None, None, {})
    with pytest.raises(SystemExit, match="2025-era"):
        check_upstream(pinned, True)


async def _eventually(http: aiohttp.ClientSession, gateway: Any, tool: str, expected: str) -> str:
    """A legacy tool's text once it says ``expected`` (what the gateway does after an answer, it does soon after)."""
    text = [""]

    async def says() -> bool:
        _, said = await _post(http, gateway, 98, "tools/call", {"name": tool, "arguments": {}}, tool)
        content = said["result"]["content"]
        text[0] = str(content[0]["text"]) if content else ""
        return text[0] == expected
    await until(says, f"{tool} says {expected!r}", lambda: f"(it says {text[0]!r})")
    return text[0]


async def test_a_listen_gets_the_legacy_sessions_changes_it_opted_into(gateway: Any) -> None:
    from mcp.client.subscriptions import ResourceUpdated, ToolsListChanged

    async with modern(gateway) as client:
        async with client.listen(tools_list_changed=True, resource_subscriptions=["notes://readme"]) as sub:
            assert sub.honored.tools_list_changed and sub.honored.resource_subscriptions == ["notes://readme"]
            assert text_of(await client.call_tool("subscribed", {})) == "notes://readme"  # subscribed upstream
            await client.call_tool("touch", {"uri": "notes://readme/part"})  # a sub-resource counts
            seen = [await sub.__anext__(), await sub.__anext__()]
        assert ResourceUpdated(uri="notes://readme/part") in seen and ToolsListChanged() in seen
    async with aiohttp.ClientSession() as http:  # the listen ended: the legacy subscription with it
        assert await _eventually(http, gateway, "subscribed", "") == ""
    assert all(p.busy == 0 and not p.listens for p in gateway.app[REVERSE].pool.values())


async def test_a_listen_acknowledges_only_what_it_asked_and_the_server_offers(gateway: Any) -> None:
    body = {"notifications": {"promptsListChanged": True, "resourceSubscriptions": ["notes://x"]}}
    headers = LISTEN_HEADERS
    message = {"jsonrpc": "2.0", "id": "l1", "method": "subscriptions/listen", "params": {**body, "_meta": META}}
    async with aiohttp.ClientSession() as http:
        async with http.post(gateway.make_url("/mcp"), json=message, headers=headers) as resp:
            assert resp.headers["Content-Type"] == "text/event-stream"
            line = b""
            while not line.startswith(b"data:"):
                line = await resp.content.readline()
        ack = json.loads(line[5:])
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        assert ack["params"] == {"notifications": {"promptsListChanged": True, "resourceSubscriptions": ["notes://x"]},
                                 "_meta": {"io.modelcontextprotocol/subscriptionId": "l1"}}
        bad = await _post(http, gateway, 2, "subscriptions/listen", {"notifications": {"resourceSubscriptions": "x"}})
        assert bad[0] == 400 and bad[1]["error"]["code"] == -32602


async def test_listens_of_two_principals_get_only_their_own_subscriptions(gateway: Any) -> None:
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer alice"}) as alice, \
            aiohttp.ClientSession(headers={"Authorization": "Bearer bob"}) as bob:
        streams = [await _open_listen(alice, gateway, "a", ["notes://a"]), await _open_listen(bob, gateway, "b",
                                                                                               ["notes://b"])]
        await _post(alice, gateway, 3, "tools/call", {"name": "touch", "arguments": {"uri": "notes://b"}}, "touch")
        got = [await _next_data(s) for s in streams]
        for resp in streams:
            resp.close()
    # alice's listen: the tools list changed (its session subscribed), not bob's resource
    assert got[0]["method"] == "notifications/tools/list_changed"
    assert got[0]["params"]["_meta"] == {"io.modelcontextprotocol/subscriptionId": "a"}
    assert got[1]["method"] == "notifications/resources/updated" and got[1]["params"]["uri"] == "notes://b"
    assert got[1]["params"]["_meta"] == {"io.modelcontextprotocol/subscriptionId": "b"}


async def _open_listen(http: aiohttp.ClientSession, gateway: Any, ident: str, uris: list[str]) -> Any:
    headers = LISTEN_HEADERS
    params = {"notifications": {"toolsListChanged": True, "resourceSubscriptions": uris}, "_meta": META}
    resp = await http.post(gateway.make_url("/mcp"), json={"jsonrpc": "2.0", "id": ident,
                                                           "method": "subscriptions/listen", "params": params},
                           headers=headers)
    ack = await _next_data(resp)
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    return resp


async def _next_data(resp: Any) -> dict[str, Any]:
    while True:
        line = await resp.content.readline()
        assert line, "the stream ended"
        if line.startswith(b"data:") and line[5:].strip():
            return dict(json.loads(line[5:]))


async def test_a_requests_log_level_sets_the_legacy_sessions_level_once(gateway: Any) -> None:
    said: list[tuple[str, str]] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        said.append((params.level, str(params.data)))

    async with modern(gateway, log_level="info", logging_callback=on_log) as client:
        assert text_of(await client.call_tool("chatty", {})) == "said"
        assert said == [("info", "an info line"), ("warning", "a warning line")]  # at or above info only
        assert text_of(await client.call_tool("chatty", {})) == "said"
        assert text_of(await client.call_tool("levels", {})) == "info"  # set once: it did not change
    said.clear()
    async with modern(gateway, log_level="warning", logging_callback=on_log) as client:
        await client.call_tool("chatty", {})
        assert said == [("warning", "a warning line")]
        assert text_of(await client.call_tool("levels", {})) == "info,warning"
    said.clear()
    async with modern(gateway, logging_callback=on_log) as client:  # no logLevel: no log messages at all
        await client.call_tool("chatty", {})
    assert said == []


async def test_reverse_bridged_requests_are_counted_once_with_their_rounds(aiohttp_server: Any, legacy_url: str,
                                                                           tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    config = load_config(upstream_url=legacy_url, upstream_era="2025-11-25",
                         usage={"db": str(tmp_path / "usage.db"), "flush_seconds": 3600})
    gateway = await aiohttp_server(create_app(config))
    async with modern(gateway, elicitation_callback=elicit("accept")) as client:
        await client.call_tool("echo", {"text": "x"})  # 1 request
        await client.call_tool("ask_model", {"topic": "owls"})  # 2: input_required (sampling), then the retry
        await client.call_tool("show_roots", {})  # 2: input_required (roots), then the retry
    async with aiohttp.ClientSession() as http:
        async with http.get(gateway.make_url("/metrics")) as resp:
            families = {f.name: f for f in text_string_to_metric_families(await resp.text())}

    def total(name: str, **labels: str) -> float:
        return sum(s.value for s in families[name].samples
                   if s.name.endswith("_total") or name.endswith("sessions")
                   if all(s.labels.get(k) == v for k, v in labels.items()))
    calls = {"era": "modern", "method": "tools/call"}
    assert total("mcp_gateway_requests", translated="true", outcome="ok", **calls) == 5
    assert total("mcp_gateway_requests", translated="false", **calls) == 0  # not counted a second time
    assert total("mcp_gateway_mrtr_rounds") == 2
    assert total("mcp_gateway_bridged_inputs", input_kind="sampling") == 1
    assert total("mcp_gateway_bridged_inputs", input_kind="roots") == 1
    assert total("mcp_gateway_legacy_upstream_sessions", server="legacy-notes", revision="2025-11-25") == 1
    field = {name: i for i, name in enumerate(KEY_FIELDS)}  # the report's rows name the upstream reached
    assert {key[field["upstream"]] for key in gateway.app[USAGE].rollup
            if key[field["era"]] == "modern" and key[field["translated"]]} == {"default"}


async def test_a_legacy_server_that_dies_mid_round_fails_the_retry_clearly(aiohttp_server: Any,
                                                                            sdk1_python: Path) -> None:  # noqa: F811
    with _legacy_server(sdk1_python) as (url, proc):
        gateway = await _gateway(aiohttp_server, url)
        bridge = gateway.app[REVERSE]
        async with aiohttp.ClientSession() as http:
            _, first = await _ask(http, gateway)
            assert first["result"]["resultType"] == "input_required"
            proc.kill()  # the parked call's server is gone
            proc.wait()
            retried = _ask(http, gateway, 2, requestState=first["result"]["requestState"],
                           inputResponses={"in1": SAMPLED})
            _, failed = await asyncio.wait_for(retried, 30)  # a guard against a hang, not a timing check
            assert failed["error"]["code"] == -32603 and failed["error"]["data"]["upstream"] == "session"
            _, again = await asyncio.wait_for(
                _post(http, gateway, 3, "tools/call", {"name": "echo", "arguments": {"text": "x"}}, "echo"), 30)
            assert again["error"]["code"] == -32603 and "upstream" in again["error"]["data"]  # said, not hung
        assert not bridge.parked and all(p.busy == 0 and not p.calls for p in bridge.pool.values())


async def test_a_legacy_server_that_dies_while_a_call_runs_fails_it_clearly(aiohttp_server: Any,
                                                                             sdk1_python: Path) -> None:  # noqa: F811
    with _legacy_server(sdk1_python) as (url, proc):
        gateway = await _gateway(aiohttp_server, url)
        async with aiohttp.ClientSession() as http:
            await _post(http, gateway, 1, "tools/call", {"name": "echo", "arguments": {"text": "x"}}, "echo")
            running = asyncio.ensure_future(_post(http, gateway, 2, "tools/call", {"name": "slow", "arguments": {}},
                                                  "slow"))
            await until(lambda: any(p.calls for p in gateway.app[REVERSE].pool.values()), "the slow call runs")
            proc.kill()
            _, failed = await asyncio.wait_for(running, 30)  # a guard against a hang, not a timing check
        assert failed["error"]["code"] == -32603 and failed["error"]["data"]["upstream"] == "session"


async def test_200_concurrent_2026_clients_of_five_principals_are_never_cross_wired(gateway: Any) -> None:
    """Each client's input_required names its own topic and its answer reaches its own call; one pooled
    legacy session per principal carries all of that principal's calls and none of another's."""
    sessions = [aiohttp.ClientSession(headers={"Authorization": f"Bearer p{p}"},
                                      connector=aiohttp.TCPConnector(limit=0)) for p in range(5)]

    async def one(i: int) -> str:
        http = sessions[i % 5]
        topic = f"p{i % 5}-c{i}"
        _, first = await _post(http, gateway, i, "tools/call", {"name": "ask_model", "arguments": {"topic": topic}},
                               "ask_model")
        asked = first["result"]["inputRequests"]["in1"]["params"]["messages"][0]["content"]["text"]
        assert asked == f"about {topic}"  # the server's question of this very call
        sampled = {**SAMPLED, "content": {"type": "text", "text": f"answer-{i}"}}
        _, done = await _post(http, gateway, 1000 + i, "tools/call",
                              {"name": "ask_model", "arguments": {"topic": topic},
                               "requestState": first["result"]["requestState"], "inputResponses": {"in1": sampled}},
                              "ask_model")
        return str(done["result"]["content"][0]["text"])

    try:
        said = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(200))), 120)
    finally:
        await asyncio.gather(*(s.close() for s in sessions))
    assert said == [f"model said: answer-{i}" for i in range(200)]
    bridge = gateway.app[REVERSE]
    assert sorted(k.principal for k in bridge.pool) == sorted({k.principal for k in bridge.pool}) and \
        len(bridge.pool) == 5  # one session per principal
    assert not bridge.parked and all(p.busy == 0 for p in bridge.pool.values())


async def test_a_listen_ends_gracefully_when_the_legacy_sessions_get_stream_ends(gateway: Any) -> None:
    bridge = gateway.app[REVERSE]
    async with aiohttp.ClientSession() as http:
        stream = await _open_listen(http, gateway, "l9", ["notes://readme"])
        pooled = next(iter(bridge.pool.values()))
        headers = {"Mcp-Session-Id": pooled.session.session_id, "MCP-Protocol-Version": pooled.session.version}
        async with http.delete(pooled.session.url, headers=headers) as resp:  # the server ends the session
            assert resp.status == 200
        last = await asyncio.wait_for(_next_data(stream), 30)  # a guard against a hang, not a timing check
        stream.close()
    assert last == {"jsonrpc": "2.0", "id": "l9",
                    "result": {"resultType": "complete", "_meta": {"io.modelcontextprotocol/subscriptionId": "l9"}}}
    assert not pooled.listens and pooled.busy == 0
