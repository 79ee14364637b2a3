"""connect_service (URL mode), workspace_scan (roots), MCP Apps, the MRTR prompt, streaming and listen."""

from __future__ import annotations

import asyncio

import aiohttp

from tests.modern_server.conftest import ALICE, parse_sse

UI = "io.modelcontextprotocol/ui"
UI_CAPS = {"extensions": {UI: {"mimeTypes": ["text/html;profile=mcp-app"]}}}


async def test_connect_service_url_mode(client):
    first = await client.tool("connect_service", {"service": "calendar"}, token=ALICE)
    ask = first.result["inputRequests"]["connect"]
    assert ask["params"]["mode"] == "url" and "elicitationId" not in ask["params"]
    url = ask["params"]["url"]
    state = first.result["requestState"]
    # accept is only consent: the step is not done yet, so the server asks the client to retry (state only).
    pending = await client.tool("connect_service", {"service": "calendar"}, token=ALICE, requestState=state,
                                inputResponses={"connect": {"action": "accept"}})
    assert pending.result["resultType"] == "input_required" and "inputRequests" not in pending.result
    async with client.session.post(url + "/complete", headers={"Authorization": "Bearer bob-token"}) as resp:
        assert resp.status == 404  # another principal cannot complete alice's step
    async with client.session.post(url + "/complete", headers={"Authorization": f"Bearer {ALICE}"}) as resp:
        assert resp.status == 200
    done = await client.tool("connect_service", {"service": "calendar"}, token=ALICE,
                             requestState=pending.result["requestState"])
    assert done.result["structuredContent"] == {"connected": True, "service": "calendar"}


async def test_connect_service_waiting_rounds_do_not_use_up_the_round_limit(client, core, clock):
    # A user who takes a while to open the page makes the client retry many times; those retries ask nothing,
    # so they are not rounds against max_rounds (10): the wait is bounded by the first round's deadline instead.
    first = await client.tool("connect_service", {"service": "calendar"}, token=ALICE)
    state = first.result["requestState"]
    for _ in range(core.services.config.max_rounds + 5):
        clock.now += 1
        pending = await client.tool("connect_service", {"service": "calendar"}, token=ALICE, requestState=state)
        assert pending.result["resultType"] == "input_required" and "inputRequests" not in pending.result
        state = pending.result["requestState"]
    url = first.result["inputRequests"]["connect"]["params"]["url"]
    async with client.session.post(url + "/complete", headers={"Authorization": f"Bearer {ALICE}"}) as resp:
        assert resp.status == 200
    done = await client.tool("connect_service", {"service": "calendar"}, token=ALICE, requestState=state)
    assert done.result["structuredContent"] == {"connected": True, "service": "calendar"}


async def test_connect_service_wait_ends_at_the_first_rounds_deadline(client, core, clock):
    ttl = core.services.config.state_ttl_seconds
    first = await client.tool("connect_service", {"service": "issue-tracker"}, token=ALICE)
    clock.now += ttl - 1  # each retry re-seals the state (a fresh expiry), but the deadline stays the first's
    pending = await client.tool("connect_service", {"service": "issue-tracker"}, token=ALICE,
                                requestState=first.result["requestState"])
    assert pending.result["resultType"] == "input_required"
    clock.now += 1
    late = await client.tool("connect_service", {"service": "issue-tracker"}, token=ALICE,
                             requestState=pending.result["requestState"])
    assert late.result["isError"] is True and late.result["structuredContent"] == {"connected": False}
    assert "not completed within" in late.result["content"][0]["text"]


async def test_connect_service_decline_and_capability(client):
    first = await client.tool("connect_service", {"service": "storage"})
    reply = await client.tool("connect_service", {"service": "storage"}, requestState=first.result["requestState"],
                              inputResponses={"connect": {"action": "decline"}})
    assert reply.result["isError"] is True and reply.result["structuredContent"] == {"connected": False}
    form_only = await client.tool("connect_service", {"service": "storage"}, caps={"elicitation": {}})
    assert form_only.error["data"] == {"requiredCapabilities": {"elicitation": {"url": {}}}}


async def test_workspace_scan_roots_never_bypass_the_allow_list(client):
    first = await client.tool("workspace_scan")
    assert first.result["inputRequests"]["roots"]["method"] == "roots/list"
    roots = {"roots": [{"uri": "file:///work/notes/2026", "name": "year"}, {"uri": "file:///work/notes-evil"},
                       {"uri": "file:///work/notes/%2e%2e"}]}
    reply = await client.tool("workspace_scan", requestState=first.result["requestState"],
                              inputResponses={"roots": roots})
    data = reply.result["structuredContent"]
    assert data["scanned"] == ["file:///work/notes/2026"]
    assert data["skipped"] == ["file:///work/notes-evil", "file:///work/notes/%2e%2e"]
    assert [n["id"] for n in data["notes"]] == ["n-1001", "n-1002"]


async def test_workspace_scan_explicit_and_without_roots(client):
    reply = await client.tool("workspace_scan", {"workspaceUri": "file:///work/notes/ideas"}, caps={})
    assert [n["id"] for n in reply.result["structuredContent"]["notes"]] == ["n-1004"]
    reply = await client.tool("workspace_scan", caps={})
    assert reply.error["data"] == {"requiredCapabilities": {"roots": {}}}


async def test_apps_with_and_without_the_extension(client):
    with_ui = {t["name"]: t for t in (await client.call("tools/list", caps=UI_CAPS)).result["tools"]}
    without = {t["name"]: t for t in (await client.call("tools/list", caps={})).result["tools"]}
    assert with_ui["notes_timeline"]["_meta"]["ui"]["resourceUri"] == "ui://notes/timeline.html"
    assert "_meta" not in without["notes_timeline"]
    assert {k: v for k, v in with_ui["notes_timeline"].items() if k != "_meta"} == without["notes_timeline"]
    call = (await client.tool("notes_timeline", caps={})).result
    assert call["content"][0]["type"] == "text" and call["structuredContent"]["notes"][0]["id"] == "n-1003"
    read = (await client.call("resources/read", {"uri": "ui://notes/timeline.html"}, caps=UI_CAPS)).result
    content = read["contents"][0]
    assert content["mimeType"] == "text/html;profile=mcp-app"
    assert content["_meta"]["ui"]["csp"] == {"connectDomains": [], "resourceDomains": [], "frameDomains": [],
                                             "baseUriDomains": []}
    assert content["_meta"]["ui"]["permissions"] == {} and (read["ttlMs"], read["cacheScope"]) == (60000, "public")
    assert "<script src" not in content["text"] and "event.origin !== hostOrigin" in content["text"]
    fallback = await client.call("resources/read", {"uri": "ui://notes/timeline.html"}, caps={})
    assert fallback.status == 400 and fallback.error["code"] == -32021
    assert UI in fallback.error["data"]["requiredCapabilities"]["extensions"]


async def test_prompt_elicits_its_tone(client):
    params = {"name": "draft_note", "arguments": {"topic": "release"}}
    first = await client.call("prompts/get", params)
    ask = first.result["inputRequests"]["tone"]
    assert ask["method"] == "elicitation/create"
    tone = {"action": "accept", "content": {"tone": "terse"}}
    done = await client.call("prompts/get", {**params, "requestState": first.result["requestState"],
                                             "inputResponses": {"tone": tone}})
    assert done.result["messages"][0]["content"]["text"] == "Write a short terse note about release."
    no = await client.call("prompts/get", params, caps={})
    assert no.error["data"] == {"requiredCapabilities": {"elicitation": {"form": {}}}}


async def test_input_required_only_from_the_three_methods(client):
    for method in ("tools/list", "resources/list", "prompts/list", "server/discover"):
        assert (await client.call(method)).result["resultType"] == "complete"


async def test_progress_and_logs_stream_only_when_opted_in(client):
    plain = await client.tool("slow_count", {"n": 2})
    assert plain.headers["Content-Type"].startswith("application/json")
    meta = client.meta(progressToken=7, **{"io.modelcontextprotocol/logLevel": "info"})
    streamed = await client.tool("slow_count", {"n": 2}, meta=meta)
    assert streamed.headers["Content-Type"].startswith("text/event-stream")
    kinds = [m.get("method", "result") for m in streamed.messages]
    assert kinds == ["notifications/message", "notifications/progress"] * 2 + ["result"]
    assert [m["params"]["progress"] for m in streamed.messages if m.get("method") == "notifications/progress"] == [1, 2]
    assert streamed.messages[1]["params"]["progressToken"] == 7
    warn_only = await client.tool("slow_count", {"n": 2},
                                  meta=client.meta(**{"io.modelcontextprotocol/logLevel": "error"}))
    assert warn_only.headers["Content-Type"].startswith("application/json")


async def test_listen_acknowledges_then_delivers_only_what_was_asked(client, core):
    params = {"notifications": {"resourcesListChanged": True, "resourceSubscriptions": ["file:///work/notes/2026"]},
              "_meta": client.meta()}
    body = {"jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen", "params": params}
    headers = client.headers("subscriptions/listen", params)
    async with client.session.post(client.url, json=body, headers=headers) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        ack = await _next_event(resp)
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        assert ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-1"
        core.services.bus.publish("notifications/tools/list_changed", {})  # not asked for: never delivered
        core.services.bus.publish("notifications/resources/updated", {"uri": "file:///work/notes/2026/standup-a.md"})
        core.services.bus.publish("notifications/resources/updated", {"uri": "file:///work/notes/roadmap.md"})
        core.services.bus.publish("notifications/resources/list_changed", {})
        got = [await _next_event(resp), await _next_event(resp)]
    assert [g["method"] for g in got] == ["notifications/resources/updated", "notifications/resources/list_changed"]
    assert got[0]["params"]["uri"].endswith("standup-a.md")
    assert all(g["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-1" for g in got)


async def test_disconnect_cancels_the_request(client, core, monkeypatch):
    cancelled = asyncio.Event()
    real_sleep = asyncio.sleep

    async def watched_sleep(delay):
        try:
            await real_sleep(delay)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    monkeypatch.setattr("modern_server.tools.basic.asyncio.sleep", watched_sleep)
    meta = client.meta(progressToken="p")
    params = {"name": "slow_count", "arguments": {"n": 50, "delay": 0.05}, "_meta": meta}
    body = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params}
    async with client.session.post(client.url, json=body, headers=client.headers("tools/call", params)) as resp:
        await _next_event(resp)
    # streamable-http (2026) cancellation: closing the response stream cancels the handler.
    await asyncio.wait_for(cancelled.wait(), 5)
    assert (await client.tool("echo", {"text": "still here"})).result["content"][0]["text"] == "still here"


async def _next_event(resp: aiohttp.ClientResponse) -> dict:
    buffer = b""
    while b"\n\n" not in buffer:
        chunk = await asyncio.wait_for(resp.content.readline(), 5)
        assert chunk, "stream ended"
        buffer += chunk
    return parse_sse(buffer.decode())[0]
