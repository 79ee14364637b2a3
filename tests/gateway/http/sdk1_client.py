"""A client built on the official Python SDK's 1.x line, run by the isolated venv of ``test_doors_sdk1`` (it
imports only that SDK and the standard library, never the project): it connects through one door of a gateway
on loopback and prints JSON lines on stdout.

``flows`` runs the bridged flows in one session and prints one summary: the negotiated revision, each flow's
result and the requests the server sent this client during it. ``vanish`` initializes, calls ``ask`` (whose
sampling request this client never answers) and ``hang`` together, prints ``{"asked": ...}`` once the sampling
request has arrived and then waits for the test to kill it.

usage: python sdk1_client.py (ws|sse) BASE_URL (flows|vanish)
"""

from __future__ import annotations

import asyncio
import json
import sys
from contextlib import AbstractAsyncContextManager
from typing import Any

from mcp import ClientSession, types
from mcp.client.sse import sse_client
from mcp.client.websocket import websocket_client


def transport(door: str, base: str) -> AbstractAsyncContextManager[Any]:
    if door == "ws":
        return websocket_client(base.replace("http", "ws", 1) + "/ws")
    return sse_client(base + "/sse")


class Peer:
    """The client's side of the bridge: answers sampling, elicitation and roots, and logs each request."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.elicit_action = "accept"

    async def sampling(self, context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.asked.append("sampling/createMessage")
        content = params.messages[0].content
        prompt = content.text if isinstance(content, types.TextContent) else ""
        answer = json.dumps(prompt.splitlines()[1:4]) if "JSON array" in prompt else "A parser and a gateway."
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text=answer),
                                         model="sdk1-model", stopReason="endTurn")

    async def elicitation(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append("elicitation/create")
        if self.elicit_action != "accept":
            return types.ElicitResult(action=self.elicit_action)  # type: ignore[arg-type]
        schema = params.requestedSchema if isinstance(params, types.ElicitRequestFormParams) else {}
        fields = schema.get("properties", {})
        if "note_id" in fields:
            return types.ElicitResult(action="accept", content={"note_id": fields["note_id"]["enum"][0],
                                                                "confirm": True})
        return types.ElicitResult(action="accept", content={"tone": "formal"})

    async def roots(self, context: Any) -> types.ListRootsResult:
        self.asked.append("roots/list")
        return types.ListRootsResult(roots=[types.Root(uri="file:///work/notes", name="notes")])  # type: ignore[arg-type]

    def session(self, read: Any, write: Any, name: str) -> ClientSession:
        return ClientSession(read, write, sampling_callback=self.sampling, elicitation_callback=self.elicitation,
                             list_roots_callback=self.roots, client_info=types.Implementation(name=name, version="1"))

    def taken(self) -> list[str]:
        asked, self.asked = self.asked, []
        return asked


def tool_result(result: types.CallToolResult) -> dict[str, Any]:
    first = result.content[0] if result.content else None
    return {"isError": result.isError, "text": first.text if isinstance(first, types.TextContent) else None,
            "structured": result.structuredContent}


async def flows(door: str, base: str) -> dict[str, Any]:
    peer = Peer()
    out: dict[str, Any] = {}
    async with transport(door, base) as (read, write), peer.session(read, write, f"sdk1-{door}") as session:
        init = await session.initialize()
        out["initialize"] = {"protocolVersion": init.protocolVersion, "server": init.serverInfo.name,
                             "asked": peer.taken()}
        calls = [("echo", "echo", {"text": "plain"}), ("summarize_repo", "summarize_repo", {}),
                 ("workspace_scan", "workspace_scan", {}),
                 ("notes_delete_accept", "notes_delete", {"workspaceUri": "file:///work/notes", "title": "Roadmap"}),
                 ("notes_delete_decline", "notes_delete", {"workspaceUri": "file:///work/notes", "title": "Standup"})]
        for label, name, arguments in calls:
            peer.elicit_action = "decline" if label.endswith("decline") else "accept"
            out[label] = {**tool_result(await session.call_tool(name, arguments)), "asked": peer.taken()}
        peer.elicit_action = "accept"
        prompt = await session.get_prompt("draft_note", {"topic": "release"})
        first = prompt.messages[0].content
        out["draft_note"] = {"text": first.text if isinstance(first, types.TextContent) else None,
                             "asked": peer.taken()}
        # Notifications (the deletion's list_changed) come on the same stream or socket: a last round trip lets
        # them arrive before the session closes (the SDK's reader refuses messages after its session ended).
        await session.send_ping()
    return out


async def vanish(door: str, base: str) -> None:
    arrived = asyncio.Event()

    async def never_answers(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        print(json.dumps({"asked": "sampling/createMessage"}), flush=True)
        arrived.set()
        await asyncio.Event().wait()  # killed while the round waits for this answer
        raise AssertionError("unreachable")

    async with transport(door, base) as (read, write), ClientSession(
            read, write, sampling_callback=never_answers,
            client_info=types.Implementation(name=f"sdk1-{door}-gone", version="1")) as session:
        init = await session.initialize()
        print(json.dumps({"protocolVersion": init.protocolVersion}), flush=True)
        calls = [asyncio.create_task(session.call_tool(name, {})) for name in ("ask", "hang")]
        await asyncio.wait(calls)


def main() -> None:
    door, base, mode = sys.argv[1:4]
    if mode == "flows":
        print(json.dumps(asyncio.run(flows(door, base)), sort_keys=True), flush=True)
    else:
        asyncio.run(vanish(door, base))


if __name__ == "__main__":
    main()
