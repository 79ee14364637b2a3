"""Check the tasks extension's wire shapes (``io.modelcontextprotocol/tasks``: Task, CreateTaskResult, DetailedTask).

Neither the 2026-07-28 core schema nor ``mcp-types`` carry the extension's types, so the ``Task`` envelope is
checked here field by field as the ext-tasks schema defines it (``Task``, ``CreateTaskResult``,
``GetTaskResult``, ``UpdateTaskResult``, ``CancelTaskResult``), and what a task embeds is checked with the
official validators (:mod:`tests.schema`: the shared JSON schemas, else ``mcp-types``): ``inputRequests`` as an
``InputRequests`` map, ``result`` as a ``CallToolResult``, ``error`` as a JSON-RPC ``Error``.
"""

from __future__ import annotations

import re
from typing import Any

from mcp_types import methods as wire

from tests import schema

V = "2026-07-28"
STATUSES = frozenset({"working", "input_required", "completed", "failed", "cancelled"})
ISO_8601 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
# v1 (2025-11-25) names and MRTR's requestState never appear on the extension's wire.
FOREIGN = frozenset({"ttl", "pollInterval", "requestState", "task"})
PAYLOADS = {"input_required": "inputRequests", "completed": "result", "failed": "error"}


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _valid(definition: str, value: Any) -> None:
    if schema.available(V):
        problems = schema.errors(V, definition, value)
        assert not problems, f"{definition}: {problems[:5]}"
    elif definition == "CallToolResult":
        wire.validate_server_result("tools/call", V, value)
    elif definition == "InputRequests":
        wire.validate_server_result("tools/call", V, {"resultType": "input_required", "inputRequests": value})
    else:
        assert isinstance(value.get("code"), int) and isinstance(value.get("message"), str), value


def check_task(task: dict[str, Any]) -> None:
    """The ``Task`` fields every task-bearing message carries."""
    assert isinstance(task.get("taskId"), str) and task["taskId"], task
    assert task.get("status") in STATUSES, task
    assert ISO_8601.match(task.get("createdAt", "")) and ISO_8601.match(task.get("lastUpdatedAt", "")), task
    assert "ttlMs" in task and (task["ttlMs"] is None or _positive_int(task["ttlMs"])), task
    assert "pollIntervalMs" not in task or _positive_int(task["pollIntervalMs"]), task
    assert "statusMessage" not in task or isinstance(task["statusMessage"], str), task
    assert not FOREIGN & task.keys(), task


def check_created(result: dict[str, Any]) -> None:
    """``CreateTaskResult``: flat, ``resultType: "task"``, no status payload (that is for ``tasks/get``)."""
    assert result.get("resultType") == "task", result
    check_task(result)
    assert not {"result", "error", "inputRequests"} & result.keys(), result


def check_detailed(task: dict[str, Any], *, notification: bool = False) -> None:
    """A ``DetailedTask``: ``tasks/get``'s result (``resultType: "complete"``) or ``notifications/tasks`` params;
    exactly the payload its status calls for."""
    if not notification:
        assert task.get("resultType") == "complete", task
    check_task(task)
    wanted = PAYLOADS.get(task["status"])
    for key in PAYLOADS.values():
        assert (key in task) == (key == wanted), (key, task)
    if wanted == "inputRequests":
        assert task["inputRequests"], task
        _valid("InputRequests", task["inputRequests"])
    elif wanted == "result":
        _valid("CallToolResult", task["result"])
        assert "io.modelcontextprotocol/related-task" not in task["result"].get("_meta", {}), task
    elif wanted == "error":
        _valid("Error", task["error"])


def check_ack(result: dict[str, Any]) -> None:
    """``UpdateTaskResult`` / ``CancelTaskResult``: an empty acknowledgement."""
    assert result.get("resultType") == "complete" and set(result) <= {"resultType", "_meta"}, result


def check_request(message: dict[str, Any]) -> None:
    """A ``tasks/get``, ``tasks/update`` or ``tasks/cancel`` request: an id, the task it names, and for an update
    the answers keyed by input request (ext-tasks, its request shapes)."""
    ident, params = message.get("id"), message.get("params")
    assert isinstance(ident, str | int) and not isinstance(ident, bool), message
    assert isinstance(params, dict) and isinstance(params.get("taskId"), str) and params["taskId"], message
    if message["method"] == "tasks/update":
        assert isinstance(params.get("inputResponses"), dict), message
    meta = params.get("_meta")
    assert isinstance(meta, dict) and meta.get("io.modelcontextprotocol/protocolVersion") == "2026-07-28", message


def check_message(message: dict[str, Any], method: str | None) -> None:
    """One successful task-bearing message (routed here by :func:`tests.schema.check`)."""
    assert message.get("jsonrpc") == "2.0", message
    if message.get("method") in ("tasks/get", "tasks/update", "tasks/cancel"):
        check_request(message)
    elif message.get("method") == "notifications/tasks":
        assert "id" not in message, message
        check_detailed(message["params"], notification=True)
    elif method == "tasks/get":
        check_detailed(message["result"])
    elif method in ("tasks/update", "tasks/cancel"):
        check_ack(message["result"])
    else:
        check_created(message["result"])
