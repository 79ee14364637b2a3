"""server/discover and the lists: cache hints, deterministic order, resultType and serverInfo everywhere."""

from __future__ import annotations

import pytest

SERVER_INFO = "io.modelcontextprotocol/serverInfo"
CACHEABLE = ["server/discover", "tools/list", "prompts/list", "resources/list", "resources/templates/list"]


async def test_discover_without_roots_and_with_cache_hints(client):
    reply = await client.call("server/discover", caps={})  # a client declaring nothing, not even roots
    result = reply.result
    assert reply.status == 200 and reply.headers["Content-Type"].startswith("application/json")
    assert result["supportedVersions"] == ["2026-07-28"]
    assert result["resultType"] == "complete"
    assert isinstance(result["ttlMs"], int) and result["ttlMs"] >= 0 and result["cacheScope"] == "public"
    assert result["_meta"][SERVER_INFO]["name"] == "mcp-reference-core"
    assert "io.modelcontextprotocol/ui" in result["capabilities"]["extensions"]
    assert "tasks" not in result["capabilities"] and "serverInfo" not in result


@pytest.mark.parametrize("method", CACHEABLE)
async def test_lists_carry_cache_hints_and_server_info(client, method):
    result = (await client.call(method)).result
    assert result["resultType"] == "complete"
    assert result["cacheScope"] in ("public", "private") and result["ttlMs"] >= 0
    assert SERVER_INFO in result["_meta"]


async def test_tool_list_is_deterministic_and_sorted(client):
    first = (await client.call("tools/list")).result["tools"]
    second = (await client.call("tools/list", caps={})).result["tools"]
    names = [t["name"] for t in first]
    assert names == sorted(names) == [t["name"] for t in second]
    assert {"echo", "summarize_repo", "notes_delete", "connect_service", "workspace_scan",
            "notes_timeline", "slow_count"} <= set(names)
    assert first == (await client.call("tools/list")).result["tools"]


async def test_resource_list_is_sorted_and_scoped_to_the_principal(client):
    anon = [r["uri"] for r in (await client.call("resources/list")).result["resources"]]
    assert anon == sorted(anon)
    assert "ui://notes/timeline.html" in anon
    assert "file:///work/notes-evil/secret.md" not in anon and "file:///work/private.md" not in anon
    bob = [r["uri"] for r in (await client.call("resources/list", token="bob-token")).result["resources"]]
    assert [u for u in bob if u.startswith("file:")] == ["file:///work/notes/ideas/sqlite.md"]


async def test_unknown_cursor_is_invalid_params(client):
    reply = await client.call("tools/list", {"cursor": "opaque"})
    assert reply.status == 400 and reply.error["code"] == -32602


async def test_every_success_has_result_type(client):
    for reply in [await client.tool("echo", {"text": "a"}), await client.call("resources/read", {"uri": "file:///work/notes/roadmap.md"}),
                  await client.call("completion/complete", {"ref": {"type": "ref/prompt", "name": "draft_note"},
                                                            "argument": {"name": "topic", "value": "st"}})]:
        assert reply.result["resultType"] == "complete" and SERVER_INFO in reply.result["_meta"]


async def test_resource_read_carries_cache_hints(client):
    result = (await client.call("resources/read", {"uri": "file:///work/notes/roadmap.md"})).result
    assert result["contents"][0]["text"].startswith("# Roadmap")
    assert result["cacheScope"] == "private" and result["ttlMs"] > 0


async def test_completion_for_prompt_argument(client):
    reply = await client.call("completion/complete", {"ref": {"type": "ref/prompt", "name": "draft_note"},
                                                      "argument": {"name": "topic", "value": "st"}})
    assert reply.result["completion"]["values"] == ["Standup"]
