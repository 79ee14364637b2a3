"""A 2025-11-25 client built on the official Python SDK's 1.x line (``streamablehttp_client`` + ``ClientSession``),
run by the isolated venv of ``test_doors_sdk1`` (it imports only that SDK and the standard library, never the
project), for tests/gateway/http/test_reverse_sdk1_relay.py: through the gateway's ``/mcp`` in front of a
2025-only legacy server, whose 2025 clients the gateway relays as they are (docs/topics/reverse-bridge.md).

It answers sampling, elicitation and roots, runs every flow of the legacy notes servers in one session (lists,
a plain call, sampling, a refused sampling request, two rounds, form elicitation accepted, declined and
cancelled, URL elicitation the same, roots, progress, logging, a prompt, a resource read, a subscription and
its update, a call it cancels mid-round) and prints one JSON line on stdout: each flow's outcome and the
requests the server sent this client during it.

usage: python sdk1_relay_client.py MCP_URL
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any

import anyio
from mcp import ClientSession, types
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError
from pydantic import AnyUrl

WAIT = 30.0  # seconds: only a bound on a failure (the test's own timeout is longer)
REFUSED = "the user refused to sample"


class Peer:
    """The client's side: answers the server's requests as the current flow says, and keeps what it was sent."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.action = "accept"
        self.confirm = True
        self.progress: list[float] = []
        self.logged: list[str] = []
        self.notified: list[str] = []
        self.heard = anyio.Event()  # a notification came (set anew by whoever waits for the next)
        self.cancel_call: tuple[ClientSession, int] | None = None  # the call to cancel at its sampling request
        self.cancel_sent = anyio.Event()

    async def sampling(self, context: Any, params: types.CreateMessageRequestParams
                       ) -> types.CreateMessageResult | types.ErrorData:
        self.asked.append("sampling/createMessage")
        content = params.messages[0].content
        said = content.text if isinstance(content, types.TextContent) else "?"
        if self.cancel_call is not None:
            # 2025-11-25 basic/utilities/cancellation: the client cancels the call while the server waits on
            # this request; the notification is posted before this answer (the 1.x transport posts in order),
            # so the server ends the call first and the late answer finds no request.
            session, request_id = self.cancel_call
            self.cancel_call = None
            await session.send_notification(types.ClientNotification(types.CancelledNotification(
                params=types.CancelledNotificationParams(requestId=request_id, reason="the user gave up"))))
            self.cancel_sent.set()
        elif said == "about refuse":
            return types.ErrorData(code=-1, message=REFUSED)
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text=f"<{said}>"),
                                         model="m")

    async def elicitation(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        mode = "url" if isinstance(params, types.ElicitRequestURLParams) else "form"
        self.asked.append(f"elicitation/create ({mode})")
        if self.action != "accept":
            return types.ElicitResult(action=self.action)
        return types.ElicitResult(action="accept", content={"confirm": self.confirm} if mode == "form" else None)

    async def roots(self, context: Any) -> types.ListRootsResult:
        self.asked.append("roots/list")
        return types.ListRootsResult(roots=[types.Root(uri=AnyUrl("file:///work/a"), name="a")])

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logged.append(f"{params.level}: {params.data}")

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress.append(progress)

    async def on_message(self, message: Any) -> None:
        root = getattr(message, "root", None)
        if isinstance(root, types.ResourceUpdatedNotification):
            self.notified.append(f"resources/updated {root.params.uri}")
        elif isinstance(root, types.ToolListChangedNotification):
            self.notified.append("tools/list_changed")
        else:
            return
        self.heard.set()

    async def hear(self, count: int) -> list[str]:
        """The notifications heard once there are ``count`` of them (or after WAIT: what was heard)."""
        with anyio.move_on_after(WAIT):
            while len(self.notified) < count:
                self.heard = anyio.Event()
                await self.heard.wait()
        return sorted(self.notified)


def _text(result: types.CallToolResult) -> str:
    block = result.content[0] if result.content else None
    return block.text if isinstance(block, types.TextContent) else ""


async def _call(session: ClientSession, peer: Peer, tool: str, arguments: dict[str, Any], action: str = "accept",
                **options: Any) -> dict[str, Any]:
    """One tools/call: its text, whether it is an error, and what the server asked this client during it."""
    peer.asked, peer.action, peer.logged = [], action, []
    result = await session.call_tool(tool, arguments, **options)
    return {"text": _text(result), "isError": result.isError, "asked": list(peer.asked),
            "logged": list(peer.logged)}


async def _listed(session: ClientSession) -> dict[str, Any]:
    return {"tools": sorted(t.name for t in (await session.list_tools()).tools),
            "prompts": [p.name for p in (await session.list_prompts()).prompts],
            "resources": [str(r.uri) for r in (await session.list_resources()).resources]}


async def _elicitations(session: ClientSession, peer: Peer) -> dict[str, Any]:
    out = {f"delete_note {action}": await _call(session, peer, "delete_note", {"note": "n1"}, action)
           for action in ("accept", "decline", "cancel")}
    peer.confirm = False
    out["delete_note accept, keep"] = await _call(session, peer, "delete_note", {"note": "n1"})
    peer.confirm = True
    for action in ("accept", "decline", "cancel"):
        out[f"open_link {action}"] = await _call(session, peer, "open_link", {"note": "n1"}, action)
    return out


async def _subscription(session: ClientSession, peer: Peer) -> dict[str, Any]:
    """resources/subscribe, then the server's resources/updated (and tools list_changed) on the GET stream."""
    await session.subscribe_resource(AnyUrl("notes://readme"))
    out: dict[str, Any] = {"subscribed": _text(await session.call_tool("subscribed", {}))}
    await session.call_tool("touch", {"uri": "notes://readme"})
    out["heard"] = await peer.hear(2)
    await session.unsubscribe_resource(AnyUrl("notes://readme"))
    out["after unsubscribe"] = _text(await session.call_tool("subscribed", {}))
    return out


async def _cancelled(session: ClientSession, peer: Peer) -> dict[str, Any]:
    """A call cancelled while its sampling request waits; the legacy tool's ``cancelled`` list says it ended."""
    peer.asked = []
    # The id the next request gets: the 1.x SDK numbers requests in order and offers no other way to learn it.
    peer.cancel_call = (session, session._request_id)

    async def call() -> None:
        with contextlib.suppress(McpError):  # the 1.x Python server answers a cancelled request with an error
            await session.call_tool("ask_model", {"topic": "cancel"})

    with anyio.move_on_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await peer.cancel_sent.wait()
            tg.cancel_scope.cancel()  # a cancelled request gets no answer (the 1.x TypeScript server sends none)
    said = ""
    with anyio.move_on_after(WAIT):
        while "ask_model" not in said.split(","):
            said = _text(await session.call_tool("cancelled", {}))
            await anyio.sleep(0.02)  # sleep: the server ends the call after the notification's 202, on its own
    # What the server logs meanwhile is left out: the 1.x Python server logs the late answer as an error.
    return {"cancel sent": peer.cancel_sent.is_set(), "asked": list(peer.asked), "cancelled": said}


async def flows(session: ClientSession, peer: Peer) -> dict[str, Any]:
    init = await session.initialize()
    out: dict[str, Any] = {"initialize": {"protocolVersion": init.protocolVersion, "server": init.serverInfo.name}}
    out["ping"] = (await session.send_ping()).model_dump(exclude_none=True)
    out["listed"] = await _listed(session)
    out["echo"] = await _call(session, peer, "echo", {"text": "plain"})
    out["ask_model"] = await _call(session, peer, "ask_model", {"topic": "owls"})
    out["ask_model refused"] = await _call(session, peer, "ask_model", {"topic": "refuse"})
    out["two_rounds"] = await _call(session, peer, "two_rounds", {})
    out.update(await _elicitations(session, peer))
    out["show_roots"] = await _call(session, peer, "show_roots", {})
    out["count"] = await _call(session, peer, "count", {"n": 2}, progress_callback=peer.on_progress)
    out["count"]["progress"] = peer.progress
    await session.set_logging_level("info")
    out["chatty"] = await _call(session, peer, "chatty", {})
    out["chatty"]["levels"] = _text(await session.call_tool("levels", {}))
    prompt = await session.get_prompt("greet", {"name": "Ada"})
    content = prompt.messages[0].content
    out["greet"] = content.text if isinstance(content, types.TextContent) else None
    read = (await session.read_resource(AnyUrl("notes://readme"))).contents[0]
    out["readme"] = read.text if isinstance(read, types.TextResourceContents) else None
    out["subscription"] = await _subscription(session, peer)
    out["cancel"] = await _cancelled(session, peer)
    out["echo after"] = await _call(session, peer, "echo", {"text": "still here"})
    return out


async def main(url: str) -> dict[str, Any]:
    peer = Peer()
    async with streamablehttp_client(url) as (read, write, _), ClientSession(
            read, write, sampling_callback=peer.sampling, elicitation_callback=peer.elicitation,
            list_roots_callback=peer.roots, logging_callback=peer.log, message_handler=peer.on_message,
            client_info=types.Implementation(name="sdk1-relay", version="1")) as session:
        try:
            return await flows(session, peer)
        except McpError as exc:
            return {"error": {"code": exc.error.code, "message": exc.error.message}}


if __name__ == "__main__":
    print(json.dumps(anyio.run(main, sys.argv[1])), flush=True)
