"""Tasks in reverse (docs/design/eras.md#tasks-in-reverse): a 2026-07-28 client using the tasks extension
(``io.modelcontextprotocol/tasks``, ext-tasks specification/draft/tasks.md) in front of a 2025-11-25 server that
offers 2025 tasks (2025-11-25 basic/utilities/tasks). Pure rules, no I/O, no clock; the shell
(gateway.http.reverse_tasks) performs them on the pooled upstream session the task was created on.

The two wires differ in who decides and where the answer lives:

=====================================  ================================================================
2026-07-28 (extension)                 2025-11-25 (the upstream)
=====================================  ================================================================
``extensions[EXT]`` in discover        ``capabilities.tasks.requests.tools.call`` at initialize
the server decides: a task-supporting  the client decides: ``params.task`` on a tool whose
tool answers ``resultType: "task"``    ``execution.taskSupport`` is optional or required
flat ``CreateTaskResult``              ``{task: Task}``; ``ttl``/``pollInterval`` (ms)
``tasks/get`` inlines ``result`` /     ``tasks/get`` is status only; ``tasks/result`` blocks until
``error`` / ``inputRequests``          terminal, streaming the task's requests on its way
``tasks/update`` answers by key        the JSON-RPC response to the streamed request's id
``tasks/cancel``: an empty ack, also   ``tasks/cancel`` answers the Task; a terminal one is refused
for a terminal task                    (INVALID_PARAMS)
=====================================  ================================================================

So the shell reads each task's ``tasks/result`` from its creation on (the *driver*): the requests it streams
become the task's pending ``inputRequests`` (keys minted here, as for a call's rounds), and its answer is the
payload a terminal ``tasks/get`` inlines. Task ids are the upstream's, passed through opaque (never parsed); the
shell keeps which principal created each, so a task of one principal is unknown to every other.

A task lives in the replica that created it (its session and driver are there). On a shared store that replica
records itself as the task's holder (:func:`holder_key`, :class:`Holder`), and a request about the task reaching
another replica is relayed there (:func:`route`), as a parked call's retry is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Final

from adapters.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    ErrorValue,
    UpstreamFault,
    limit_error,
    upstream_failure,
)
from adapters.jsonwire import JsonObject, JsonValue, JsonView, members
from adapters.protocol import INPUT_REQUEST_METHODS
from adapters.reverse import Asked, canonical, input_request, missing_capability
from adapters.reverse_listen import notification as listen_notification
from adapters.reverse_wire import complete_result, legacy_params, modern_error
from adapters.task_poll import EXTENSION

# The extension's requests that name a task (ext-tasks §Task Methods); tasks/result and tasks/list are 2025 only.
METHODS: Final = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})
RELATED_TASK: Final = "io.modelcontextprotocol/related-task"
TASKS: Final = "notifications/tasks"  # the extension's status notification (ext-tasks §Task Status Notifications)
TASK_IDS: Final = "taskIds"  # its subscriptions/listen filter
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})
_STATUSES: Final = frozenset({"working", "input_required", *TERMINAL})
# 2025 Task fields -> extension Task fields (2025-11-25 schema "Task"; ext-tasks §Task: integer milliseconds).
_FIELDS: Final = {"taskId": "taskId", "status": "status", "statusMessage": "statusMessage",
                  "createdAt": "createdAt", "lastUpdatedAt": "lastUpdatedAt", "ttl": "ttlMs",
                  "pollInterval": "pollIntervalMs"}


class Support(Enum):
    """A 2025 tool's ``execution.taskSupport`` (2025-11-25 schema "ToolExecution"; absent: forbidden)."""

    FORBIDDEN = "forbidden"
    OPTIONAL = "optional"
    REQUIRED = "required"


class Dispatch(Enum):
    INLINE = "inline"  # relayed as a plain call (its rounds as any call's)
    TASK = "task"  # sent task-augmented; the client gets a CreateTaskResult
    REFUSE = "refuse"  # MISSING_REQUIRED_CLIENT_CAPABILITY: a task-only tool, the extension not declared


def offered(server_capabilities: JsonView | None) -> bool:
    """The 2025 server runs ``tools/call`` as a task (2025-11-25 basic/utilities/tasks §Capabilities)."""
    tasks = members(members(members(dict(server_capabilities or {}).get("tasks")).get("requests")).get("tools"))
    return isinstance(tasks.get("call"), Mapping)


def discover(result: JsonObject, server_capabilities: JsonView | None) -> JsonObject:
    """``server/discover`` with the extension advertised when the server offers 2025 tasks for tools/call
    (ext-tasks §Capability Negotiation); the 2025 ``tasks`` key is never there (2026-07-28 has none)."""
    if not offered(server_capabilities):
        return result
    caps = dict(members(result.get("capabilities")))
    caps["extensions"] = {**members(caps.get("extensions")), EXTENSION: {}}
    return {**result, "capabilities": caps}


def declared(client_capabilities: JsonView) -> bool:
    """The request declares the extension (2026-07-28: capabilities travel on every request)."""
    return isinstance(members(client_capabilities.get("extensions")).get(EXTENSION), Mapping)


def learned_support(known: Mapping[str, Support], tools_list: JsonView) -> dict[str, Support]:
    """The task support of each tool of one ``tools/list`` page, added to what earlier pages said."""
    out = dict(known)
    tools = tools_list.get("tools")
    for item in tools if isinstance(tools, list) else ():
        tool = members(item)
        name = tool.get("name")
        if isinstance(name, str):
            value = members(tool.get("execution")).get("taskSupport")
            out[name] = Support(value) if value in ("optional", "required") else Support.FORBIDDEN
    return out


def support_of(known: Mapping[str, Support] | None, tool: str) -> Support:
    """A tool's task support as learned (None: not learned, as for an unknown tool: forbidden, run inline)."""
    return (known or {}).get(tool, Support.FORBIDDEN)


def dispatch(offers: bool, client_declared: bool, support: Support) -> Dispatch:
    """How a ``tools/call`` runs: the server (here the gateway) decides (ext-tasks §Task Creation); it never
    returns a task to a request that did not declare the extension, and refuses one it cannot serve without
    (ext-tasks §Capability Negotiation). A 2025 ``optional`` tool called without a task runs inline."""
    if not offers or support is Support.FORBIDDEN:
        return Dispatch.INLINE
    if client_declared:
        return Dispatch.TASK
    return Dispatch.REFUSE if support is Support.REQUIRED else Dispatch.INLINE


def required_error(tool: str) -> ErrorValue:
    return ErrorValue(MISSING_REQUIRED_CLIENT_CAPABILITY, f"the tool {tool!r} runs only as a task: declare the "
                      f"{EXTENSION} extension", {"requiredCapabilities": {"extensions": {EXTENSION: {}}}})


def gate(method: str, client_declared: bool, offers: bool) -> ErrorValue | None:
    """A task method: METHOD_NOT_FOUND when the server has no tasks, MISSING_REQUIRED_CLIENT_CAPABILITY from a
    request that did not declare the extension (ext-tasks §Capability Negotiation), else None."""
    if not offers:
        return ErrorValue(METHOD_NOT_FOUND, f"method not found: {method}")
    if not client_declared:
        return ErrorValue(MISSING_REQUIRED_CLIENT_CAPABILITY, f"{method} needs the {EXTENSION} extension",
                          {"requiredCapabilities": {"extensions": {EXTENSION: {}}}})
    return None


def unknown_task() -> ErrorValue:
    """A task id this principal did not create through the gateway (ext-tasks: unknown ids are INVALID_PARAMS);
    the same answer whether it exists for someone else or nowhere."""
    return ErrorValue(INVALID_PARAMS, "unknown taskId", {"taskId": "unknown"})


def vanished(error: ErrorValue) -> bool:
    """The server's answer to ``tasks/get`` says it does not know the task (2025-11-25 basic/utilities/tasks:
    an unknown or expired task is INVALID_PARAMS): the gateway forgets it too."""
    return error.code == INVALID_PARAMS


def task_lost() -> ErrorValue:
    """The pooled session that held the task ended (a 2025 server binds a task to its session): the task went
    with it; later requests about it are told it is unknown."""
    return upstream_failure(UpstreamFault.SESSION, "the upstream session holding this task ended; the task is gone")


def task_id_of(params: JsonView) -> str | None:
    value = params.get("taskId")
    return value if isinstance(value, str) else None


def task_request(params: JsonView) -> JsonObject:
    """A 2026 ``tools/call`` as the 2025 task-augmented one: the protocol ``_meta`` keys gone, ``params.task``
    the gateway's (the client's v1 hint, if any, is not a 2026 field)."""
    return {**legacy_params(params), "task": {}}


def as_task(task: JsonView) -> JsonObject:
    """A 2025 ``Task`` in extension terms: ``ttl``/``pollInterval`` renamed, ``ttlMs`` always there (null:
    unlimited), other values as they are."""
    out: JsonObject = {new: task[old] for old, new in _FIELDS.items() if task.get(old) is not None}
    out.setdefault("ttlMs", None)
    return out


def _valid(task: object) -> JsonView | None:
    if not isinstance(task, Mapping) or not isinstance(task.get("taskId"), str) or not task["taskId"]:
        return None
    return task if task.get("status") in _STATUSES else None


def created(result: JsonValue) -> JsonObject | ErrorValue | None:
    """The 2025 answer to a task-augmented call: a flat ``CreateTaskResult`` (ext-tasks §Task Creation), None
    when the server answered the call at once (a plain result), or the upstream failure a malformed task is."""
    if not isinstance(result, Mapping) or "task" not in result:
        return None
    task = _valid(result.get("task"))
    if task is None:
        return upstream_failure(UpstreamFault.INVALID_RESULT, "the CreateTaskResult has no valid task")
    return {"resultType": "task", **as_task(task)}


def ack() -> JsonObject:
    """What ``tasks/update`` and ``tasks/cancel`` answer (ext-tasks: no task envelope)."""
    return {"resultType": "complete"}


# --- one task ----------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Outcome:
    """The answer of the task's ``tasks/result``: its result, or its JSON-RPC error."""

    result: JsonView | None = None
    error: JsonView | None = None


@dataclass(frozen=True, slots=True)
class Reply:
    """A JSON-RPC response the shell sends to the server's request ``upstream_id``."""

    upstream_id: str | int
    result: JsonView | None = None
    error: ErrorValue | None = None


@dataclass(frozen=True, slots=True)
class TaskState:
    task_id: str
    principal: str
    capabilities: JsonView  # the creating request's client capabilities: what its inputRequests may ask
    pending: tuple[Asked, ...] = ()  # streamed by tasks/result, not answered yet
    asked: int = 0
    outcome: Outcome | None = None
    final: JsonObject | None = None  # the terminal DetailedTask, once known: answered here from then on


def start(task_id: str, principal: str, capabilities: JsonView) -> TaskState:
    return TaskState(task_id, principal, capabilities)


def asked(state: TaskState, upstream_id: str | int, method: str, params: JsonView) -> tuple[TaskState, Reply | None]:
    """A request the server streamed on the task's ``tasks/result``: ping answered, an input request kept
    pending under a new key, anything else (or one needing a capability the client did not declare) refused to
    the server, which then decides the task's fate."""
    if method == "ping":
        return state, Reply(upstream_id, {})
    if method not in INPUT_REQUEST_METHODS or state.final is not None:
        return state, Reply(upstream_id, error=ErrorValue(METHOD_NOT_FOUND,
                                                          f"the gateway's client cannot answer {method}"))
    needed = missing_capability(method, params, state.capabilities)
    if needed is not None:
        return state, Reply(upstream_id, error=ErrorValue(
            MISSING_REQUIRED_CLIENT_CAPABILITY, f"the client did not declare {next(iter(needed))!r}",
            {"requiredCapabilities": needed}))
    item = Asked(f"in{state.asked + 1}", upstream_id, method, params)
    return replace(state, asked=state.asked + 1, pending=(*state.pending, item)), None


def answered(state: TaskState, responses: JsonValue) -> tuple[TaskState, tuple[Reply, ...]] | ErrorValue:
    """``tasks/update``: each response to a pending key goes to the server; unknown keys are ignored, a partial
    answer leaves the rest pending (ext-tasks §Task Update Requests)."""
    if not isinstance(responses, Mapping):
        return ErrorValue(INVALID_PARAMS, "params.inputResponses must be an object")
    done = tuple(a for a in state.pending if isinstance(responses.get(a.key), Mapping))
    replies = tuple(Reply(a.upstream_id, members(responses[a.key])) for a in done)
    return replace(state, pending=tuple(a for a in state.pending if a not in done)), replies


def settled(state: TaskState, outcome: Outcome) -> TaskState:
    """The task's ``tasks/result`` answered: what it streamed and nobody answered is moot."""
    return replace(state, outcome=outcome, pending=())


def cancelled(state: TaskState) -> TaskState:
    """The client cancelled the task: its questions are withdrawn (the server drops them too)."""
    return replace(state, pending=())


def _inlined(result: JsonView) -> JsonObject:
    """A task's result as ``tasks/get`` inlines it: a 2026 ``CallToolResult`` (``resultType`` "complete"), without
    the 2025 related-task ``_meta`` key (the taskId is at the root: ext-tasks §Task Results)."""
    out = complete_result("tools/call", result)
    meta = {k: v for k, v in members(out.pop("_meta", None)).items() if k != RELATED_TASK}
    if meta:
        out["_meta"] = meta
    return out


def _payload(task: JsonObject, status: str, outcome: Outcome | None) -> JsonObject | None:
    """A terminal task's DetailedTask, or None while its payload is not known yet (it is then reported working:
    a completed or failed DetailedTask must inline its result or error).

    2025 and 2026 judge a tool's error differently: a 2025 server may fail a task whose tool returned
    ``isError`` (its task result is the CallToolResult), while 2026 keeps ``failed`` for protocol errors and
    reports a tool's error as ``completed`` with ``result.isError`` (ext-tasks §Task Execution Errors)."""
    if status == "cancelled":
        return {**task, "status": "cancelled"}
    if outcome is None:
        return None
    if outcome.error is not None:
        return {**task, "status": "failed", "error": modern_error(outcome.error).to_wire()}
    result = members(dict(outcome.result or {}))
    if status == "completed" or result.get("isError") is True:
        return {**task, "status": "completed", "result": _inlined(result)}
    message = task.get("statusMessage")
    error = ErrorValue(INTERNAL_ERROR, message if isinstance(message, str) and message else "the task failed")
    return {**task, "status": "failed", "error": error.to_wire()}


def detailed(state: TaskState, upstream_task: object) -> tuple[TaskState, JsonObject | ErrorValue]:
    """``tasks/get`` from the server's 2025 ``tasks/get`` answer and what the driver knows: pending questions
    make the task ``input_required`` (and only they: 2026 inlines them, so a 2025 ``input_required`` whose
    questions have not arrived, or were all answered, is ``working``); a terminal status is reported with its
    payload once the driver has it, and kept (the shell answers from it from then on)."""
    if state.final is not None:
        return state, state.final
    task = _valid(upstream_task)
    if task is None:
        return state, upstream_failure(UpstreamFault.INVALID_RESULT, "tasks/get answered no valid task")
    out = as_task(task)
    if out["taskId"] != state.task_id:
        return state, upstream_failure(UpstreamFault.INVALID_RESULT, "tasks/get answered another task")
    status = str(task["status"])
    out["resultType"] = "complete"
    if status in TERMINAL:
        final = _payload(out, status, state.outcome)
        if final is not None:
            return replace(state, final=final, pending=()), final
    if state.pending:
        requests: JsonObject = {a.key: input_request(a) for a in state.pending}
        return state, {**out, "status": "input_required", "inputRequests": requests}
    return state, {**out, "status": "working"}


def terminal(upstream_task: object) -> bool:
    task = _valid(upstream_task)
    return task is not None and task.get("status") in TERMINAL


# --- status notifications -----------------------------------------------------------------------------------
def listened(task_ids: JsonValue, client_declared: bool, owned: frozenset[str]) -> list[str] | ErrorValue:
    """A listen's ``taskIds`` (ext-tasks §Task Status Notifications): the extension must be declared;
    only the caller's own tasks are honoured, the rest left out of the acknowledgement (whether they exist
    elsewhere is not told)."""
    if not client_declared:
        return ErrorValue(MISSING_REQUIRED_CLIENT_CAPABILITY, f"task notifications need the {EXTENSION} extension",
                          {"requiredCapabilities": {"extensions": {EXTENSION: {}}}})
    if not isinstance(task_ids, list) or not all(isinstance(t, str) for t in task_ids):
        return ErrorValue(INVALID_PARAMS, "params.notifications.taskIds must be an array of strings")
    return [t for t in dict.fromkeys(task_ids) if isinstance(t, str) and t in owned]


def status_of(notification: JsonView) -> JsonView | None:
    """The 2025 ``Task`` a ``notifications/tasks/status`` carries (2025-11-25 basic/utilities/tasks §Status
    Notifications: its params are the Task), or None."""
    return _valid(notification.get("params")) if notification.get("method") == "notifications/tasks/status" else None


def seen(task: JsonView) -> str:
    """What a listen is told again when it changes: status, status message, the pending keys."""
    keys = ",".join(sorted(members(task.get("inputRequests"))))
    return f"{task.get('status')}|{task.get('statusMessage') or ''}|{keys}"


def notification(task: JsonView) -> JsonObject:
    """``notifications/tasks``: the DetailedTask ``tasks/get`` would answer, as notification params (put on the
    principal's listens that watch the task, each of which stamps it with its id: :func:`delivered`)."""
    return {"jsonrpc": "2.0", "method": TASKS, "params": {k: v for k, v in task.items() if k != "resultType"}}


def delivered(task_ids: Collection[str], listen_id: JsonValue, message: JsonView) -> JsonObject | None:
    """A :func:`notification` for one listen stream, when it watches the task, else None."""
    params = members(message.get("params"))
    if message.get("method") != TASKS or params.get("taskId") not in task_ids:
        return None
    return listen_notification(listen_id, TASKS, {k: v for k, v in params.items() if k != "_meta"})


# --- the gateway's registry of tasks ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TaskLimits:
    max_tasks: int = 1024  # per upstream: live ones and terminal ones kept for tasks/get


def make_room(order: tuple[tuple[str, bool], ...], limits: TaskLimits) -> tuple[str, ...] | ErrorValue:
    """Room for one more task: the oldest terminal entries (``order``: key and terminal, oldest first) are
    forgotten; a registry full of live tasks refuses (a live task is never forgotten)."""
    excess = len(order) + 1 - limits.max_tasks
    if excess <= 0:
        return ()
    old = tuple(key for key, done in order if done)[:excess]
    if len(old) < excess:
        return limit_error("reverse.max_tasks", limits.max_tasks)
    return old


# --- replicas (docs/design/eras.md#tasks-in-reverse) --------------------------------------------------------
HOLD_SECONDS: Final = 30.0  # a holder record's lease, renewed every third of it while the task is kept


@dataclass(frozen=True, slots=True)
class Holder:
    """A task's holder record in the store (``gateway.session.store.TaskHolders``): the principal that created the
    task and the replica its session and driver live on. Nothing a request could be sent with."""

    principal: str
    replica: str


@dataclass(frozen=True, slots=True)
class Elsewhere:
    """The task is the caller's and held by ``replica``: its request is relayed there."""

    replica: str


def holder_key(upstream: str, task_id: str) -> str:
    """The store key of a task's holder record: a digest of the upstream's name and the server's opaque task id
    (the id is neither stored nor parsed)."""
    return "t" + hashlib.sha256(canonical([upstream, task_id]).encode()).hexdigest()


def route(holder: Holder | None, principal: str, me: str) -> Elsewhere | ErrorValue:
    """A task request for a task this replica does not keep: relayed to its holder when the caller created it;
    else :func:`unknown_task`, without any relay, whether another principal created it or nobody did. A record
    naming this replica is stale (the task was forgotten here): unknown too."""
    if holder is None or holder.principal != principal or holder.replica == me:
        return unknown_task()
    return Elsewhere(holder.replica)


def holder_gone() -> ErrorValue:
    """A task whose holder replica is gone (it died, or stopped): the task went with its upstream connection
    (2026-07-28 basic/transports: a broken stream loses the request); the client calls the tool again.
    INVALID_PARAMS as for any unknown task id (ext-tasks), with a message saying why and what to do."""
    return ErrorValue(INVALID_PARAMS, "unknown taskId: the gateway replica holding this task is gone, and the task "
                      "with it; call the tool again", {"taskId": "lost"})
