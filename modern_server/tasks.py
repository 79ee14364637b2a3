"""The tasks extension's task model (``io.modelcontextprotocol/tasks``, ext-tasks specification "Tasks"): pure.

A :class:`TaskRecord` is one durable task. Every change is a pure function from a record and ``now`` (epoch
seconds, given by the caller) to a new record, and only the status moves in :data:`TRANSITIONS` are allowed
(ext-tasks §Task Status, its state diagram: working <-> input_required, either -> a terminal status, nothing
out of a terminal one). Each change bumps ``version``, which the store uses to compare-and-set, so a runner and
a ``tasks/cancel`` racing on one task can never both win. The wire views (:func:`created_result`,
:func:`detailed`) are the only places the record becomes protocol JSON. No I/O, no clock.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from enum import Enum
from typing import Any

EXTENSION = "io.modelcontextprotocol/tasks"


class TaskStatus(Enum):
    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED)


class TaskSupport(Enum):
    """How a tool runs for a client: as a task when it declared the extension; otherwise inline (OPTIONAL) or
    refused with -32021 naming the extension (REQUIRED, ext-tasks §Capability Negotiation)."""

    OPTIONAL = "optional"
    REQUIRED = "required"


_S = TaskStatus
_ANY = frozenset({_S.WORKING, _S.INPUT_REQUIRED, _S.COMPLETED, _S.FAILED, _S.CANCELLED})
# A non-terminal status may also move to itself: a new status message, or a partial answer that leaves other
# input requests outstanding.
TRANSITIONS: Mapping[TaskStatus, frozenset[TaskStatus]] = {
    _S.WORKING: _ANY,
    _S.INPUT_REQUIRED: _ANY,
    _S.COMPLETED: frozenset(),
    _S.FAILED: frozenset(),
    _S.CANCELLED: frozenset(),
}


class InvalidTransition(Exception):
    """A move the state diagram does not allow (e.g. out of a terminal status)."""


@dataclass(frozen=True)
class TaskRecord:
    """One task. ``input_requests`` are the outstanding requests; ``responses`` every answer ever accepted (keys
    are unique over a task's lifetime, ext-tasks §Task Update Requests, so a job that asks a key again after a
    restart gets the recorded answer). ``job_input`` and ``checkpoint`` are the job's own, opaque here."""

    task_id: str
    principal: str
    tool: str
    job_input: Mapping[str, Any]
    status: TaskStatus
    created: float
    updated: float
    ttl_ms: int
    poll_ms: int
    status_message: str | None = None
    input_requests: Mapping[str, Any] = field(default_factory=dict)
    responses: Mapping[str, Any] = field(default_factory=dict)
    checkpoint: Mapping[str, Any] = field(default_factory=dict)
    result: Mapping[str, Any] | None = None
    error: Mapping[str, Any] | None = None
    version: int = 0

    @property
    def expires(self) -> float:
        return self.created + self.ttl_ms / 1000

    def expired(self, now: float) -> bool:
        return now >= self.expires


def new_task(task_id: str, principal: str, tool: str, job_input: Mapping[str, Any], now: float, *,
             ttl_ms: int, poll_ms: int, message: str | None = None) -> TaskRecord:
    return TaskRecord(task_id, principal, tool, dict(job_input), _S.WORKING, now, now, ttl_ms, poll_ms, message)


def move(record: TaskRecord, status: TaskStatus, now: float, **changes: Any) -> TaskRecord:
    """The one place a status changes: checks :data:`TRANSITIONS`, stamps ``updated``, bumps ``version``."""
    if status not in TRANSITIONS[record.status]:
        raise InvalidTransition(f"{record.status.value} -> {status.value}")
    return replace(record, status=status, updated=now, version=record.version + 1, **changes)


def report(record: TaskRecord, now: float, message: str, checkpoint: Mapping[str, Any] | None = None) -> TaskRecord:
    """A progress step: still working, with a new status message (and the job's checkpoint, if it gave one).

    While a question is outstanding (a resumed job replaying the steps before it) the task stays
    ``input_required`` with its question's message: status is ``input_required`` exactly when requests are
    outstanding, so an answer sent meanwhile is never refused for a momentary ``working``."""
    if record.input_requests:
        return record if checkpoint is None else move(record, _S.INPUT_REQUIRED, now, checkpoint=dict(checkpoint))
    changes: dict[str, Any] = {"status_message": message}
    if checkpoint is not None:
        changes["checkpoint"] = dict(checkpoint)
    return move(record, _S.WORKING, now, **changes)


def need_input(record: TaskRecord, requests: Mapping[str, Any], now: float, message: str) -> TaskRecord:
    """Park the task on ``requests``; keys already answered are not asked again (the unchanged record)."""
    fresh = {k: v for k, v in requests.items() if k not in record.responses}
    if not fresh or (record.status is _S.INPUT_REQUIRED and fresh.keys() <= record.input_requests.keys()):
        return record  # nothing new to ask (a resumed job asking again what is already outstanding or answered)
    outstanding = {**record.input_requests, **fresh}
    return move(record, _S.INPUT_REQUIRED, now, input_requests=outstanding, status_message=message)


def answer(record: TaskRecord, responses: Mapping[str, Any], now: float) -> tuple[TaskRecord, tuple[str, ...]]:
    """Accept the responses to outstanding keys; others (never issued, already answered) are ignored
    (ext-tasks §Task Update Requests). The task works again once nothing is outstanding."""
    accepted = tuple(k for k in responses if k in record.input_requests)
    if not accepted or record.status is not _S.INPUT_REQUIRED:
        return record, ()
    left = {k: v for k, v in record.input_requests.items() if k not in accepted}
    answers = {**record.responses, **{k: responses[k] for k in accepted}}
    status = _S.INPUT_REQUIRED if left else _S.WORKING
    message = record.status_message if left else "input received; resuming"
    return move(record, status, now, input_requests=left, responses=answers, status_message=message), accepted


def complete(record: TaskRecord, result: Mapping[str, Any], now: float, message: str | None = None) -> TaskRecord:
    return move(record, _S.COMPLETED, now, result=dict(result), input_requests={},
                status_message=message or record.status_message)


def fail(record: TaskRecord, error: Mapping[str, Any], now: float) -> TaskRecord:
    """A JSON-RPC error during execution (ext-tasks §Task Execution Errors); never a tool's ``isError``."""
    return move(record, _S.FAILED, now, error=dict(error), input_requests={},
                status_message=f"failed: {error.get('message', 'error')}")


def cancel(record: TaskRecord, now: float, message: str = "cancelled at the client's request") -> TaskRecord:
    """Cancel a live task; a terminal one is returned unchanged (``tasks/cancel`` is idempotent)."""
    if record.status.terminal:
        return record
    return move(record, _S.CANCELLED, now, input_requests={}, status_message=message)


# ---------------------------------------------------------------------------------------------- wire views

def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def task_fields(record: TaskRecord) -> dict[str, Any]:
    """The ``Task`` shape: integer milliseconds, ISO 8601 times, no ``requestState`` (not on the tasks wire)."""
    task: dict[str, Any] = {"taskId": record.task_id, "status": record.status.value,
                            "createdAt": iso(record.created), "lastUpdatedAt": iso(record.updated),
                            "ttlMs": record.ttl_ms, "pollIntervalMs": record.poll_ms}
    if record.status_message:
        task["statusMessage"] = record.status_message
    return task


def created_result(record: TaskRecord) -> dict[str, Any]:
    """``CreateTaskResult``: a flat ``Result & Task`` with ``resultType: "task"`` (ext-tasks §Task Creation)."""
    return {"resultType": "task", **task_fields(record)}


def detailed(record: TaskRecord) -> dict[str, Any]:
    """``DetailedTask``: what ``tasks/get`` answers and ``notifications/tasks`` carries (ext-tasks §Response)."""
    task = task_fields(record)
    if record.status is _S.INPUT_REQUIRED:
        task["inputRequests"] = dict(record.input_requests)
    elif record.status is _S.COMPLETED and record.result is not None:
        task["result"] = dict(record.result)
    elif record.status is _S.FAILED and record.error is not None:
        task["error"] = dict(record.error)
    return task


# ---------------------------------------------------------------------------------------------- storage form

def dumps(record: TaskRecord) -> str:
    row = asdict(record)
    row["status"] = record.status.value
    return json.dumps(row, separators=(",", ":"))


def loads(text: str) -> TaskRecord:
    row = json.loads(text)
    row["status"] = TaskStatus(row["status"])
    return TaskRecord(**row)
