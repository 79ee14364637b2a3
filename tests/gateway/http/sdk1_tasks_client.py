"""A 2025-11-25 client with task support, built on the official Python SDK's 1.x line (its experimental tasks
API: ``session.experimental.call_tool_as_task``, ``get_task``, ``get_task_result``, ``list_tasks``,
``cancel_task``), run by the isolated venv of ``test_doors_sdk1`` (it imports only that SDK and the standard
library, never the project). It declares 2025 tasks (a ``tasks/list`` handler of its own makes the SDK declare
``capabilities.tasks``), runs the core's ``build_project`` as 2025 tasks through the gateway on loopback and
prints one JSON summary line on stdout. ``takeover`` (for tests/faults/test_legacy_task_takeover.py) makes one
build a task, prints ``{"created": ID}``, then waits on its blocking ``tasks/result`` and prints its outcome.
``watch`` never polls until the gateway has told it a task's status on its own (``notifications/tasks/status``
with no ``tasks/result`` waiting): a build that fails unpolled, and one whose confirmation it learns of so.

usage: python sdk1_tasks_client.py BASE_URL [flows|takeover|watch]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from typing import Any

from mcp import ClientSession, types
from mcp.client.experimental.task_handlers import ExperimentalTaskHandlers
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError

RELATED = "io.modelcontextprotocol/related-task"
TERMINAL = {"completed", "failed", "cancelled"}


class Peer:
    """Answers the build's confirmation as told, and keeps what the gateway sent."""

    def __init__(self) -> None:
        self.action = "accept"
        self.asked: list[dict[str, Any]] = []
        self.statuses: list[dict[str, Any]] = []
        self.told = asyncio.Event()  # a status notification came

    async def elicit(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        meta = params.meta.model_dump(by_alias=True) if params.meta is not None else {}
        self.asked.append({"message": params.message, "related": meta.get(RELATED)})
        if self.action == "accept":
            return types.ElicitResult(action="accept", content={"confirm": True})
        return types.ElicitResult(action=self.action)  # type: ignore[arg-type]

    async def on_message(self, message: Any) -> None:
        root = getattr(message, "root", None)
        if isinstance(root, types.TaskStatusNotification):
            self.statuses.append(root.params.model_dump(mode="json", by_alias=True, exclude_none=True))
            self.told.set()

    async def told_of(self, task_id: str, statuses: set[str]) -> list[str]:
        """The statuses told for ``task_id`` until one in ``statuses`` (or 30 s: then what was told)."""
        async def heard() -> None:
            while not any(s["taskId"] == task_id and s["status"] in statuses for s in self.statuses):
                self.told.clear()
                await self.told.wait()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(heard(), 30)
        return [s["status"] for s in self.statuses if s["taskId"] == task_id]

    async def own_tasks(self, context: Any, params: Any) -> types.ListTasksResult:
        return types.ListTasksResult(tasks=[])  # this client runs no tasks for the server


def _error(exc: McpError) -> dict[str, Any]:
    return {"code": exc.error.code, "message": exc.error.message}


async def _build(session: ClientSession, peer: Peer, action: str, failure: str = "none") -> dict[str, Any]:
    """One build as a task: created, polled, its blocking result fetched (the confirmation is asked on that
    request's stream), then polled once more."""
    peer.action, peer.asked = action, []
    created = await session.experimental.call_tool_as_task(
        "build_project", {"project": "demo", "simulate_failure": failure}, ttl=60000)
    task_id = created.task.taskId
    out: dict[str, Any] = {"created": created.task.model_dump(mode="json", by_alias=True, exclude_none=True)}
    try:
        result = await session.experimental.get_task_result(task_id, types.CallToolResult)
        out["result"] = {"isError": result.isError, "structured": result.structuredContent,
                         "related": (result.meta or {}).get(RELATED)}
    except McpError as exc:
        out["error"] = _error(exc)
    out["final"] = (await session.experimental.get_task(task_id)).status
    out["asked"] = peer.asked
    return out


async def _cancelled_mid_way(session: ClientSession) -> dict[str, Any]:
    created = await session.experimental.call_tool_as_task("build_project", {"project": "demo"})
    task_id = created.task.taskId
    working = (await session.experimental.get_task(task_id)).status  # live: working, or already asking
    cancelled = await session.experimental.cancel_task(task_id)
    out: dict[str, Any] = {"before": working, "cancel": cancelled.status,
                           "final": (await session.experimental.get_task(task_id)).status}
    try:
        await session.experimental.cancel_task(task_id)
        out["again"] = None
    except McpError as exc:  # a task already over cannot be cancelled (-32602)
        out["again"] = _error(exc)
    try:
        await session.experimental.get_task_result(task_id, types.CallToolResult)
        out["result"] = None
    except McpError as exc:
        out["result"] = _error(exc)
    return out


async def takeover(session: ClientSession, peer: Peer) -> dict[str, Any]:
    created = await session.experimental.call_tool_as_task("build_project", {"project": "demo"})
    print(json.dumps({"created": created.task.taskId}), flush=True)
    out = await _build_result(session, created.task.taskId)
    out["asked"] = peer.asked
    out["listed"] = [t.status for t in (await session.experimental.list_tasks()).tasks]
    return out


async def watch(session: ClientSession, peer: Peer) -> dict[str, Any]:
    """Two builds run unpolled until the gateway tells of them: one fails, one asks for its confirmation (which
    a 2025 requestor then fetches with tasks/result)."""
    failing = await session.experimental.call_tool_as_task(
        "build_project", {"project": "demo", "simulate_failure": "protocol_error"})
    out: dict[str, Any] = {"failing": {"id": failing.task.taskId,
                                       "told": await peer.told_of(failing.task.taskId, TERMINAL)}}
    asking = await session.experimental.call_tool_as_task("build_project", {"project": "demo"})
    told = await peer.told_of(asking.task.taskId, {"input_required"})
    out["asking"] = {"id": asking.task.taskId, "told": told, **await _build_result(session, asking.task.taskId),
                     "asked": peer.asked}
    out["listed"] = sorted(t.status for t in (await session.experimental.list_tasks()).tasks)
    return out


async def _build_result(session: ClientSession, task_id: str) -> dict[str, Any]:
    result = await session.experimental.get_task_result(task_id, types.CallToolResult)
    return {"structured": result.structuredContent, "related": (result.meta or {}).get(RELATED)}


async def main(base: str, mode: str) -> dict[str, Any]:
    peer = Peer()
    handlers = ExperimentalTaskHandlers(list_tasks=peer.own_tasks)
    async with streamablehttp_client(base + "/mcp") as (read, write, _), ClientSession(
            read, write, elicitation_callback=peer.elicit, message_handler=peer.on_message,
            experimental_task_handlers=handlers) as session:
        init = await session.initialize()
        if mode == "takeover":
            return await takeover(session, peer)
        if mode == "watch":
            return await watch(session, peer)
        out: dict[str, Any] = {"tasks_capability": init.capabilities.tasks.model_dump(mode="json", exclude_none=True)
                               if init.capabilities.tasks else None}
        out["accepted"] = await _build(session, peer, "accept")
        out["declined"] = await _build(session, peer, "decline")
        out["dismissed"] = await _build(session, peer, "cancel")
        out["failed"] = await _build(session, peer, "accept", "protocol_error")
        out["cancelled"] = await _cancelled_mid_way(session)
        listed = await session.experimental.list_tasks()
        out["listed"] = sorted(t.status for t in listed.tasks)
        try:
            await session.experimental.get_task("no-such-task")
            out["unknown"] = None
        except McpError as exc:
            out["unknown"] = _error(exc)
        out["statuses"] = sorted({s["status"] for s in peer.statuses})
        out["plain"] = (await session.call_tool("echo", {"text": "still here"})).isError
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "flows"))), flush=True)
