"""The core driven by a client we did not write: the official ``mcp`` SDK in 2026-07-28 mode.

Its own MRTR driver answers sampling, elicitation and roots through the callbacks below, so every flow here is
the SDK's reading of the core's wire, not ours.
"""

from __future__ import annotations

import json

import mcp_types as types
from mcp import Client


def sampler(calls):
    async def sample(context, params):
        prompt = params.messages[0].content.text
        calls.append(prompt)
        if "JSON array" in prompt:
            text = json.dumps(["README.md", "src/app/core.py", "docs/architecture.md"])
        else:
            text = "A tidy little app."
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text=text),
                                         model="sdk-test-model", stop_reason="endTurn")
    return sample


async def confirm_first(context, params):
    if getattr(params, "mode", "form") == "url":
        return types.ElicitResult(action="decline")
    choices = params.requested_schema["properties"]
    if "note_id" in choices:
        return types.ElicitResult(action="accept", content={"note_id": choices["note_id"]["enum"][0], "confirm": True})
    return types.ElicitResult(action="accept", content={"tone": "formal"})


async def roots(context):
    return types.ListRootsResult(roots=[types.Root(uri="file:///work/notes/ideas", name="ideas")])


async def test_sdk_modern_client_runs_every_mrtr_flow(core):
    url = str(core.make_url("/mcp"))
    calls: list[str] = []
    async with Client(url, mode="2026-07-28", sampling_callback=sampler(calls), elicitation_callback=confirm_first,
                      list_roots_callback=roots) as client:
        tools = await client.list_tools()
        assert "summarize_repo" in [t.name for t in tools.tools]
        summary = await client.call_tool("summarize_repo", {"repo": "demo"})
        assert summary.structured_content == {"files": ["README.md", "src/app/core.py", "docs/architecture.md"],
                                              "summary": "A tidy little app."}
        assert len(calls) == 2
        deleted = await client.call_tool("notes_delete", {"workspaceUri": "file:///work/notes", "title": "Standup"})
        assert deleted.structured_content == {"deleted": "n-1001"}
        scanned = await client.call_tool("workspace_scan", {})
        assert [n["id"] for n in scanned.structured_content["notes"]] == ["n-1004"]
        prompt = await client.get_prompt("draft_note", {"topic": "release"})
        assert prompt.messages[0].content.text == "Write a short formal note about release."
        declined = await client.call_tool("connect_service", {"service": "calendar"})
        assert declined.is_error is True


async def test_sdk_auto_mode_discovers_the_core(core):
    async with Client(str(core.make_url("/mcp")), mode="auto") as client:
        assert client.session.protocol_version == "2026-07-28"
        echoed = await client.call_tool("echo", {"text": "hello"})
        assert echoed.content[0].text == "hello"
