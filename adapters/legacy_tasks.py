"""2025-11-25 tasks for legacy clients that declare them, backed by the upstream's tasks extension
(2025-11-25 basic/utilities/tasks; ``io.modelcontextprotocol/tasks``, ext-tasks specification/draft/tasks.md;
docs/design/bridge.md#tasks-the-gateway-drives-them-or-maps-them-onto-2025-tasks): pure rules, no I/O, no clock.

What is here: when a session gets 2025 tasks (:func:`enabled`) and the ``tasks`` capability it is offered
(:func:`capability`), what a ``tasks/*`` request becomes (:func:`decide`: answered here, or driven upstream by
:class:`adapters.bridge.BridgeMachine`), the translation of an extension ``Task`` into a 2025 ``Task``
(:func:`to_legacy`), the ``related-task`` metadata, ``notifications/tasks/status`` (also from the upstream's
``notifications/tasks`` on the session's task listen: :func:`listen_filter`, :func:`from_listen`), the session's
bounded registry of the tasks it created (:func:`remember`, :func:`admit`; an entry past its ``ttl`` is forgotten:
:func:`expired`, the time given by the caller), which ``tasks/list`` answers from, and the outcome a task is
counted with once the registry first sees it over (:func:`ended`).

Task ids are the upstream's, passed through opaque (never parsed or re-encoded): the registry is what makes an id
the session's, so an id the session did not create is unknown here whoever made it upstream.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, TypeAlias

from adapters.errors import INVALID_PARAMS, METHOD_NOT_FOUND, ErrorValue, limit_error
from adapters.jsonwire import JsonArray, JsonObject, JsonValue, JsonView
from adapters.task_poll import EXTENSION, TaskOutcome, TaskState, offered, read_task

RELATED_TASK: Final = "io.modelcontextprotocol/related-task"
# The revisions that have tasks (2025-11-25 introduced them; 2026-07-28 moved them into the extension).
VERSIONS: Final = frozenset({"2025-11-25"})
METHODS: Final = frozenset({"tasks/get", "tasks/result", "tasks/list", "tasks/cancel"})
# Requests the bridge machine drives for a 2025 task (adapters.bridge): each names one task of the session.
DRIVEN: Final = frozenset({"tasks/get", "tasks/result", "tasks/cancel"})
# Terminal tasks the registry keeps beyond the live ones, for tasks/list and a late tasks/result; the oldest go
# first (2025-11-25 basic/utilities/tasks §Task Lifetime: a receiver may forget a task after its ttl anyway).
KEPT_TERMINAL: Final = 16
# Extension Task fields -> 2025 Task fields (2025-11-25 schema "Task"); the rest of the extension's task
# (inputRequests, result, error, resultType) is not part of a 2025 Task.
# The session's 2025 tasks (adapters.records.SessionRecord.legacy_tasks): task id -> the 2025 Task as last seen.
Registry: TypeAlias = Mapping[str, JsonView]
_FIELDS: Final = {"taskId": "taskId", "status": "status", "statusMessage": "statusMessage",
                  "createdAt": "createdAt", "lastUpdatedAt": "lastUpdatedAt", "ttlMs": "ttl",
                  "pollIntervalMs": "pollInterval"}


def enabled(client_capabilities: JsonView | None, server_capabilities: JsonView | None,
            version: str) -> bool:
    """2025 tasks for a session: it speaks a revision that has them, its client declared ``tasks`` at initialize
    (it speaks 2025 tasks) and the upstream offers the extension that backs them (ext-tasks §Capability
    Negotiation)."""
    return (version in VERSIONS and isinstance((client_capabilities or {}).get("tasks"), Mapping)
            and offered(server_capabilities))


def capability() -> JsonObject:
    """The server ``tasks`` capability a 2025 client is offered (2025-11-25 basic/utilities/tasks
    §Capabilities): task-augmented ``tools/call``, ``tasks/list`` and ``tasks/cancel``."""
    return {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}


def augmented(method: str, params: JsonView | None) -> bool:
    """A task-augmented request the gateway runs as a task: ``tools/call`` with ``params.task``."""
    return method == "tools/call" and isinstance((params or {}).get("task"), Mapping)


def to_legacy(task: JsonView) -> JsonObject:
    """An extension ``Task`` (or ``DetailedTask``) as a 2025 ``Task``: milliseconds fields renamed, ``ttl``
    present (null: unlimited), values passed as they are."""
    out = {legacy: task[name] for name, legacy in _FIELDS.items() if task.get(name) is not None}
    out.setdefault("ttl", None)
    return out


def created_result(task: JsonView) -> JsonObject:
    """``CreateTaskResult`` for a task-augmented call the upstream answered with a task."""
    return {"task": to_legacy(task)}


def status_notification(task: JsonView) -> JsonObject:
    """``notifications/tasks/status``: the 2025 task as its params."""
    return {"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": dict(task)}


def related(task_id: str) -> JsonObject:
    return {RELATED_TASK: {"taskId": task_id}}


def with_related(result: JsonView, task_id: str) -> JsonObject:
    """A ``tasks/result`` answer carries the related-task metadata (2025-11-25 basic/utilities/tasks §Related
    Task Metadata: MUST, since the result itself does not name the task)."""
    meta = result.get("_meta")
    return {**result, "_meta": {**(meta if isinstance(meta, Mapping) else {}), **related(task_id)}}


def ask_params(params: JsonView, task_id: str) -> JsonObject:
    """A request the task needs answered (elicitation, sampling), marked as the task's (§Related Task
    Metadata: requests sent on behalf of a task carry it)."""
    return with_related(params, task_id)


# --- the session's registry -------------------------------------------------------------------------------
_STATUSES = frozenset(s.value for s in TaskState)


def _terminal(task: JsonView) -> bool:
    status = task.get("status")
    return isinstance(status, str) and status in _STATUSES and TaskState(status).terminal


def expired(task: JsonView, now_ms: int | None) -> bool:
    """Past its ``ttl`` (milliseconds from ``createdAt``; null: never): 2025-11-25 basic/utilities/tasks §TTL and
    Resource Management lets a receiver forget such a task whatever its status, and the registry does, so a task
    the client never polls stops counting against the session's bound. ``now_ms`` None: nothing expires."""
    ttl, created = task.get("ttl"), task.get("createdAt")
    if now_ms is None or not isinstance(ttl, int) or isinstance(ttl, bool) or not isinstance(created, str):
        return False
    at = epoch_ms(created)
    if at is None:
        return False  # a timestamp we cannot read: kept, bounded by KEPT_TERMINAL and max_tasks_per_session
    return now_ms >= at + ttl


# An RFC 3339 date-time (the schema's ISO 8601 ``createdAt``); no offset is read as UTC.
_DATE_TIME: Final = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
                               r"(?:([Zz])|([+-])(\d{2}):(\d{2}))?")


def epoch_ms(text: str) -> int | None:
    """Milliseconds since the epoch of an RFC 3339 date-time, or None when it is not one. Computed here, not
    with ``datetime``: the core reads no clock, and the parse is the proleptic Gregorian day count."""
    m = _DATE_TIME.fullmatch(text)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.group(1, 2, 3, 4, 5, 6))
    if not (1 <= month <= 12 and 1 <= day <= _days_in(year, month) and hour < 24 and minute < 60 and second < 61):
        return None
    millis = int((m.group(7) or "0").ljust(3, "0")[:3])
    offset = 0 if m.group(9) is None else (1 if m.group(9) == "+" else -1) * (int(m.group(10)) * 60
                                                                               + int(m.group(11)))
    minutes = _days_from_civil(year, month, day) * 1440 + hour * 60 + minute - offset
    return (minutes * 60 + second) * 1000 + millis


def _days_in(year: int, month: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days from 1970-01-01 (H. Hinnant's ``days_from_civil``: eras of 400 years, March-based years)."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


def current(tasks: Registry | None, now_ms: int | None) -> dict[str, JsonView]:
    """The registry less the tasks past their ttl."""
    return {k: t for k, t in (tasks or {}).items() if not expired(t, now_ms)}


def admit(tasks: Registry | None, limit: int, now_ms: int | None = None) -> ErrorValue | None:
    """A new task-augmented call, refused when the session already has ``limit`` tasks not known to be over
    (nor past their ttl)."""
    if sum(not _terminal(t) for t in current(tasks, now_ms).values()) >= limit:
        return limit_error("max_tasks_per_session", limit)
    return None


def remember(tasks: Registry | None, task: JsonView, created: bool,
             now_ms: int | None = None) -> dict[str, JsonObject] | None:
    """The registry with ``task`` as last seen (``created``: a task the session just made), or None when nothing
    changes (a task it does not hold, or no new status), so an unchanged poll writes nothing. A write leaves out
    the other tasks past their ttl (``task`` itself was just seen: it is kept)."""
    ident = task.get("taskId")
    if not isinstance(ident, str) or (not created and ident not in (tasks or {})) or (tasks or {}).get(ident) == task:
        return None
    kept = {k: dict(t) for k, t in (tasks or {}).items() if k == ident or not expired(t, now_ms)}
    kept[ident] = dict(task)
    terminal = [k for k, t in kept.items() if _terminal(t)]
    for old in terminal[:max(0, len(terminal) - KEPT_TERMINAL)]:
        del kept[old]
    return kept


_OUTCOMES: Final = {TaskState.COMPLETED: TaskOutcome.COMPLETED, TaskState.FAILED: TaskOutcome.FAILED,
                    TaskState.CANCELLED: TaskOutcome.CANCELLED}


def ended(tasks: Registry | None, task: JsonView) -> TaskOutcome | None:
    """The outcome ``task`` (as just seen, and written to the registry ``tasks``) is counted with: only when the
    registry did not know it over, so each task is counted once whoever sees it end (a poll, a tasks/result, the
    listen). A cancelled one is ``cancelled`` even when the client's tasks/cancel ended it: the listen may report
    it before that request's own tasks/get does, so who cancelled it cannot be told."""
    before = (tasks or {}).get(str(task.get("taskId")))
    if (before is not None and _terminal(before)) or not _terminal(task):
        return None
    return _OUTCOMES[TaskState(str(task["status"]))]


# --- status notifications outside a tasks/result -------------------------------------------------------------
def watched(tasks: Registry | None, now_ms: int | None) -> list[str]:
    """The session's tasks whose status may still change (neither over nor past their ttl), in a stable order."""
    return sorted(k for k, t in current(tasks, now_ms).items() if not _terminal(t))


def listen_filter(tasks: Registry | None, now_ms: int | None) -> JsonObject:
    """The session's task listen (ext-tasks §Task Status Notifications: ``subscriptions/listen`` with
    ``notifications.taskIds``): its live tasks, or nothing to listen to. Its own listen, apart from the session's
    list_changed and resource one, so a task created or ended never disturbs those."""
    ids: JsonArray = [*watched(tasks, now_ms)]
    return {"taskIds": ids} if ids else {}


def from_listen(message: JsonView) -> JsonObject | None:
    """The 2025 Task an upstream ``notifications/tasks`` carries (a whole ``DetailedTask``: ext-tasks §Task Status
    Notifications), or None for anything else (the acknowledgement, a malformed task). Whether it is the
    session's and news is :func:`remember`'s to say; the result it may carry is not part of a 2025 Task, the
    client fetches it with tasks/result."""
    params = message.get("params")
    if message.get("method") != "notifications/tasks" or "id" in message or not isinstance(params, Mapping):
        return None
    task = {k: v for k, v in params.items() if k != "_meta"}
    if isinstance(read_task(task, None), ErrorValue):
        return None
    return to_legacy(task)


# --- what a tasks/* request becomes ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Answer:
    """Answered here: ``result``, or ``error`` when it is not None."""

    result: JsonObject | None = None
    error: ErrorValue | None = None


@dataclass(frozen=True, slots=True)
class Drive:
    """Sent through a bridge exchange (tasks/get, tasks/result, tasks/cancel of a task the session holds)."""


def unknown(task_id: JsonValue) -> ErrorValue:
    """2025-11-25 basic/utilities/tasks §Error Handling: an invalid or nonexistent taskId is INVALID_PARAMS."""
    return ErrorValue(INVALID_PARAMS, "Failed to retrieve task: Task not found", {"taskId": task_id})


def decide(method: str, params: object, tasks: Registry | None, on: bool,
           now_ms: int | None = None) -> Answer | Drive:
    """A ``tasks/*`` request of a session: METHOD_NOT_FOUND when the session has no 2025 tasks (none were offered),
    ``tasks/list`` from the registry (one page: it is bounded), an id the session does not hold (or holds past its
    ttl) INVALID_PARAMS, a ``tasks/cancel`` of a task already over INVALID_PARAMS (§Cancelling Tasks: MUST reject);
    the rest is driven."""
    if not on:
        return Answer(error=ErrorValue(METHOD_NOT_FOUND, f"method not found: {method}"))
    held = current(tasks, now_ms)
    if method == "tasks/list":
        return Answer({"tasks": [dict(t) for t in held.values()]})
    task_id = params.get("taskId") if isinstance(params, Mapping) else None
    if not isinstance(task_id, str):
        return Answer(error=ErrorValue(INVALID_PARAMS, f"invalid params for {method}: taskId must be a string"))
    if task_id not in held:
        return Answer(error=unknown(task_id))
    status = held[task_id].get("status")
    if method == "tasks/cancel" and _terminal(held[task_id]):
        return Answer(error=ErrorValue(INVALID_PARAMS, f"Cannot cancel task: already in terminal status "
                                                       f"'{status}'", {"taskId": task_id}))
    return Drive()


__all__ = ["EXTENSION", "METHODS", "RELATED_TASK", "Answer", "Drive", "admit", "augmented", "capability",
           "created_result", "current", "decide", "enabled", "ended", "expired", "from_listen", "listen_filter",
           "remember", "status_notification", "to_legacy", "watched", "with_related"]
