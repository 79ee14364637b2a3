"""The tasks extension as the bridge drives it for a legacy client that knows nothing of tasks
(``io.modelcontextprotocol/tasks``, ext-tasks specification/draft/tasks.md;
docs/design/bridge.md#tasks-the-gateway-drives-them-or-maps-them-onto-2025-tasks): pure rules for
:class:`adapters.bridge.BridgeMachine`'s task states.

What is here: when the gateway declares the extension upstream (:func:`declare`), what a task message must look
like to be acted on (:func:`read_task`), how long to wait before the next ``tasks/get`` (:func:`poll_delay`), the
``notifications/progress`` a status message becomes (:func:`progress`), and what a task that ended badly tells
the client (:func:`ended_error`). No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from adapters.errors import INTERNAL_ERROR, ErrorValue, UpstreamFault, translate_upstream_error, upstream_failure
from adapters.jsonwire import JsonObject, JsonValue, JsonView

EXTENSION: Final = "io.modelcontextprotocol/tasks"
# Methods whose requests declare the extension: the one the bridge accepts a task for, the task methods themselves, and
# the listen for task notifications (a server refuses them with MISSING_REQUIRED_CLIENT_CAPABILITY to a request that
# does not declare it: ext-tasks §Capability Negotiation, §Task Status Notifications).
DECLARED_FOR: Final = frozenset({"tools/call", "tasks/get", "tasks/update", "tasks/cancel", "subscriptions/listen"})
# Consecutive tasks/get or tasks/update calls that got no answer (the hop failed) before the bridge gives up:
# the task is durable upstream, so a blip is waited out at the poll's backoff, an upstream that stays away is not.
TASK_CALL_FAILURES: Final = 5


class TaskState(StrEnum):
    """ext-tasks §Task Status."""

    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELLED)


class TaskOutcome(StrEnum):
    """How a bridged task ended (the ``mcp_gateway_tasks`` counter's label)."""

    COMPLETED = "completed"  # the task's result answered the call (a tool's isError result included)
    FAILED = "failed"  # the task failed with a JSON-RPC error
    CANCELLED = "cancelled"  # cancelled upstream (the server, or the user dismissing one of its questions)
    CLIENT_CANCELLED = "client_cancelled"  # the client's notifications/cancelled: the task was cancelled upstream
    ABANDONED = "abandoned"  # the gateway ended the call (a limit, a refused answer, a bad task message, shutdown)


@dataclass(frozen=True, slots=True)
class TaskView:
    """What the bridge reads of a ``Task`` (``CreateTaskResult`` or ``tasks/get``'s ``DetailedTask``)."""

    task_id: str
    state: TaskState
    message: str | None
    poll_ms: int | None
    payload: JsonValue = None  # inputRequests (input_required), result (completed) or error (failed)

    @property
    def seen(self) -> str:
        """What changes when the task moves: its status and status message (for backoff and progress)."""
        return f"{self.state.value}:{self.message or ''}"


_PAYLOAD = {TaskState.INPUT_REQUIRED: "inputRequests", TaskState.COMPLETED: "result", TaskState.FAILED: "error"}


def offered(server_capabilities: JsonView | None) -> bool:
    """Whether the upstream's ``server/discover`` lists the extension (ext-tasks §Capability Negotiation)."""
    extensions = (server_capabilities or {}).get("extensions")
    return isinstance(extensions, Mapping) and isinstance(extensions.get(EXTENSION), Mapping)


def declare(capabilities: JsonView, server_capabilities: JsonView | None,
            method: str) -> JsonView:
    """The per-request client capabilities with the extension declared when the upstream offers it and the
    gateway drives tasks for ``method`` (2026-07-28 basic §_meta: capabilities travel on every request)."""
    if method not in DECLARED_FOR or not offered(server_capabilities):
        return capabilities
    extensions = capabilities.get("extensions")
    merged = {**(extensions if isinstance(extensions, Mapping) else {}), EXTENSION: {}}
    return {**capabilities, "extensions": merged}


def is_task(result: JsonValue) -> bool:
    return isinstance(result, Mapping) and result.get("resultType") == "task"


def read_task(value: JsonValue, task_id: str | None) -> TaskView | ErrorValue:
    """A task message as the bridge acts on it, or the upstream failure it is (``task_id``: the task it must be
    about, None for the ``CreateTaskResult`` that names it)."""
    if not isinstance(value, Mapping):
        return upstream_failure(UpstreamFault.INVALID_RESULT, "the task is not an object")
    ident, status, message, poll = (value.get(k) for k in ("taskId", "status", "statusMessage", "pollIntervalMs"))
    if not isinstance(ident, str) or not ident or (task_id is not None and ident != task_id):
        return upstream_failure(UpstreamFault.INVALID_RESULT, "the task's taskId is missing or names another task")
    if status not in TaskState.__members__.values():
        return upstream_failure(UpstreamFault.INVALID_RESULT, f"unknown task status {status!r}")
    if message is not None and not isinstance(message, str):
        return upstream_failure(UpstreamFault.INVALID_RESULT, "the task's statusMessage is not a string")
    if poll is not None and (not isinstance(poll, int) or isinstance(poll, bool) or poll <= 0):
        return upstream_failure(UpstreamFault.INVALID_RESULT, "the task's pollIntervalMs is not a positive integer")
    state = TaskState(str(status))
    key = _PAYLOAD.get(state)
    payload = value.get(key) if key is not None and task_id is not None else None
    if key is not None and task_id is not None and not isinstance(payload, Mapping):
        return upstream_failure(UpstreamFault.INVALID_RESULT, f"a {state.value} task without its {key}")
    return TaskView(ident, state, message, poll, payload)


def poll_delay(poll_ms: int | None, unchanged: int, floor: float, ceiling: float) -> float:
    """Seconds to the next ``tasks/get``: the server's ``pollIntervalMs`` (never below ``floor``), doubled for
    every poll that found the task unchanged, up to ``ceiling``; a server asking for more than the ceiling is
    polled as it asks (ext-tasks: the client SHOULD respect ``pollIntervalMs``)."""
    base = max(floor, (poll_ms or 0) / 1000)
    return float(max(base, min(ceiling, base * 2 ** min(unchanged, 16))))


def progress(token: JsonValue, count: int, message: str | None) -> JsonObject:
    """A status message as the legacy client's progress (2025-11-25 basic/utilities/progress): the client's own
    token object, a count of the task's moves (it must increase), the status message as the progress message."""
    params: JsonObject = {"progressToken": token, "progress": count}
    if message:
        params["message"] = message
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}


def ended_error(view: TaskView) -> ErrorValue:
    """The error a failed or cancelled task answers the legacy call with: a failed task's own JSON-RPC error
    (ext-tasks §Task Execution Errors), translated as any upstream error; a cancelled task has no 2025 code of its
    own, so INTERNAL_ERROR saying so, with the task's id and status message in ``data``."""
    if view.state is TaskState.FAILED and isinstance(view.payload, Mapping):
        return translate_upstream_error(view.payload)
    data: JsonObject = {"taskId": view.task_id, "taskStatus": view.state.value}
    detail = f": {view.message}" if view.message else ""
    return ErrorValue(INTERNAL_ERROR, f"the upstream task was {view.state.value}{detail}",
                      {**data, "statusMessage": view.message} if view.message else data)
