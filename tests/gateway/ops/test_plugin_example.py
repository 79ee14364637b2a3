"""The pytest plugin's documented example (docs/howto/testing.md, "The pytest plugin"), run against the
reference core: keep the two in step."""

from __future__ import annotations

import json

import pytest
from aiohttp import web

from gateway.ops.testing import LegacyCallError
from modern_server.app import create_app
from modern_server.config import CoreConfig

# Installed, the plugin loads itself (its pytest11 entry point); this checkout is installed from elsewhere.
pytest_plugins = ["gateway.ops.testing"]


@pytest.fixture
def legacy_upstream(tmp_path) -> web.Application:
    # A URL string works too: the plugin serves an application on loopback itself.
    return create_app(CoreConfig(database=str(tmp_path / "core.sqlite3")))


async def test_summarize_repo_asks_the_model_twice(legacy_client) -> None:
    answers = iter([json.dumps(["README.md", "src/app/core.py", "docs/architecture.md"]), "A tiny app."])
    legacy_client.on_sampling(lambda request: next(answers))
    result = await legacy_client.call_tool("summarize_repo", {"repo": "demo"})
    assert "A tiny app." in result["content"][0]["text"]
    assert result["structuredContent"]["files"][0] == "README.md"
    assert [r.method for r in legacy_client.requests] == ["sampling/createMessage"] * 2
    assert legacy_client.rounds == 3  # two rounds that asked, one that completed


async def test_notes_delete_confirms_with_a_form(legacy_client) -> None:
    legacy_client.on_elicitation(lambda request: {"action": "accept",
                                                  "content": {"note_id": "n-1003", "confirm": True}})
    result = await legacy_client.call_tool("notes_delete", {"workspaceUri": "file:///work/notes",
                                                            "title": "Roadmap"})
    assert result["content"][0]["text"] == "Deleted 'Roadmap' (file:///work/notes/roadmap.md)."
    assert legacy_client.requests[0].params["mode"] == "form"


async def test_workspace_scan_asks_for_roots(legacy_client) -> None:
    legacy_client.on_roots(lambda: ["file:///work/notes/2026"])
    result = await legacy_client.call_tool("workspace_scan")
    assert result["structuredContent"]["scanned"] == ["file:///work/notes/2026"]
    assert [r.method for r in legacy_client.requests] == ["roots/list"]


async def test_a_refused_call_raises_with_the_json_rpc_error(legacy_client) -> None:
    with pytest.raises(LegacyCallError) as caught:
        await legacy_client.call_tool("echo", {"text": 5})
    assert caught.value.code == -32602 and "text must be a string" in caught.value.message


async def test_prompts_resources_and_the_tool_list(legacy_client) -> None:
    legacy_client.on_elicitation(lambda request: {"action": "accept", "content": {"tone": "formal"}})
    prompt = await legacy_client.get_prompt("draft_note", {"topic": "the gateway"})
    assert prompt["description"] == "A formal note about the gateway"
    resource = await legacy_client.read_resource("file:///work/notes/roadmap.md")
    assert "stateless everything" in resource["contents"][0]["text"]
    assert "echo" in {tool["name"] for tool in await legacy_client.list_tools()}
