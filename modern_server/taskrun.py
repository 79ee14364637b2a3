"""Running tasks of the tasks extension (``io.modelcontextprotocol/tasks``): creation, runners, ``tasks/*``.

A tool with a ``job`` runs as a task when the request declares the extension (ext-tasks §Capability
Negotiation; the server decides, the client sends no hint). :func:`start_task` stores the task durably *before*
answering ``CreateTaskResult`` (ext-tasks §Task Creation: a ``tasks/get`` for it must already resolve), then a
runner in this process drives the job. The job sees a :class:`Run`: ``status`` (a status message and the job's
checkpoint), ``ask`` (input requests, answered through ``tasks/update``) and ``sleep``. Each of them re-reads
the task, so a cancel, an expiry or a takeover stops the job at its next step, whichever process wrote it.

The runner holds a lease on its task and renews it. A task whose lease ran out (its process died) or was
released (its process stopped) is resumed by the process that next serves ``tasks/get`` or ``tasks/update``
for it: from the job's last checkpoint, with the answers already given (a step may run twice, an answered
question is never asked again). A task belongs to the principal that created it: any other principal gets the
same -32602 as for an unknown task (ext-tasks §Security Considerations, Auth binding).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

import mcp_types
from pydantic import BaseModel, ValidationError

from modern_server import tasks
from modern_server.config import CoreConfig
from modern_server.errors import INTERNAL_ERROR, LIMIT_EXCEEDED, McpError
from modern_server.framework import (
    Context,
    Job,
    Registry,
    Services,
    Tool,
    arguments,
    bound_call,
    finish,
    input_required,
    next_round,
)
from modern_server.storage import TaskLimitError
from modern_server.tasks import EXTENSION, TaskRecord, TaskSupport

log = logging.getLogger("modern_server.tasks")

TASKS_CAPS: dict[str, Any] = {"extensions": {EXTENSION: {}}}
TASK_METHODS = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})
TICK = 0.05  # seconds between a waiting job's looks at its task (answers and cancels may come from any process)
# What a client's answer to each kind of input request must be (2026-07-28 basic/patterns/mrtr, InputResponse).
ANSWER_TYPES: dict[str, type[BaseModel]] = {"elicitation/create": mcp_types.ElicitResult,
                                           "sampling/createMessage": mcp_types.CreateMessageResult,
                                           "roots/list": mcp_types.ListRootsResult}


class TaskEnded(Exception):
    """The task is terminal, expired, gone or run by another process now: its job stops here."""


class CancelTask(Exception):
    """Raised by a job to end its own task as ``cancelled`` (e.g. the user dismissed its question)."""


class Run(Protocol):
    """What a job sees of its task."""

    config: CoreConfig
    job_input: Mapping[str, Any]
    checkpoint: Mapping[str, Any]

    async def status(self, message: str, checkpoint: Mapping[str, Any] | None = None) -> None: ...

    async def ask(self, requests: Mapping[str, Any], message: str) -> dict[str, Any]: ...

    async def sleep(self, seconds: float) -> None: ...


# ---------------------------------------------------------------------------------------------- records

def load(services: Services, task_id: str) -> TaskRecord | None:
    row = services.store.task(task_id)
    return tasks.loads(row.record) if row else None


def change(services: Services, task_id: str, step: Callable[[TaskRecord], TaskRecord]) -> TaskRecord | None:
    """Apply a pure change by compare-and-set, re-reading on a conflict; None when the task is gone. A change
    that took is announced to this process's ``subscriptions/listen`` streams (ext-tasks §Task Status
    Notifications) for the task's own principal only."""
    for _ in range(100):
        record = load(services, task_id)
        if record is None:
            return None
        new = step(record)
        if new is record:
            return record
        if services.store.save_task(task_id, record.version, new.version, tasks.dumps(new), not new.status.terminal):
            services.bus.publish("notifications/tasks", tasks.detailed(new), new.principal)
            return new
    raise RuntimeError(f"task {task_id}: the store keeps changing under this update")


def _settle(services: Services, task_id: str, step: Callable[[TaskRecord, float], TaskRecord]) -> None:
    """The runner's last word, unless the task already ended (cancelled, expired) in the meantime."""
    now = services.clock()
    change(services, task_id, lambda r: r if r.status.terminal or r.expired(now) else step(r, now))


# ---------------------------------------------------------------------------------------------- runs

class DurableRun:
    """A job's view of its stored task; every call checks the task is still live and this process runs it."""

    def __init__(self, services: Services, record: TaskRecord, lease_until: float) -> None:
        self.config = services.config
        self.job_input, self.checkpoint = record.job_input, record.checkpoint
        self._services, self._id, self._lease_until = services, record.task_id, lease_until

    def _live(self) -> TaskRecord:
        now = self._services.clock()
        record = load(self._services, self._id)
        if record is None or record.status.terminal or record.expired(now):
            raise TaskEnded(self._id)
        lease = self.config.task_lease_seconds
        if self._lease_until - now <= lease / 2:
            if not self._services.store.lease_task(self._id, self._services.instance, now, now + lease):
                raise TaskEnded(self._id)  # another process took it over while this one stalled
            self._lease_until = now + lease
        return record

    def _change(self, step: Callable[[TaskRecord, float], TaskRecord]) -> TaskRecord:
        self._live()
        now = self._services.clock()
        record = change(self._services, self._id, lambda r: r if r.status.terminal else step(r, now))
        if record is None or record.status.terminal:
            raise TaskEnded(self._id)
        return record

    async def status(self, message: str, checkpoint: Mapping[str, Any] | None = None) -> None:
        record = self._change(lambda r, now: tasks.report(r, now, message, checkpoint))
        self.checkpoint = record.checkpoint
        await asyncio.sleep(0)

    async def ask(self, requests: Mapping[str, Any], message: str) -> dict[str, Any]:
        self._change(lambda r, now: tasks.need_input(r, requests, now, message))
        while True:
            record = self._live()
            if all(key in record.responses for key in requests):
                return {key: record.responses[key] for key in requests}
            await asyncio.sleep(TICK)

    async def sleep(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while (left := end - loop.time()) > 0:
            self._live()
            await asyncio.sleep(min(TICK, left))
        self._live()


class _NeedInput(Exception):
    def __init__(self, requests: Mapping[str, Any]) -> None:
        super().__init__("input required")
        self.requests = dict(requests)


class InlineRun:
    """An OPTIONAL task tool run for a client without the extension: within its own request. A question is
    asked the 2026 way instead (basic/patterns/mrtr): the call answers ``input_required`` with a sealed
    ``requestState`` holding the job's checkpoint, and the retry runs the job again from there with the answers."""

    def __init__(self, ctx: Context) -> None:
        opened = ctx.open_state(bound_call(ctx))
        self.round = next_round(ctx, opened)
        self.config, self.job_input = ctx.services.config, dict(arguments(ctx))
        self.checkpoint: Mapping[str, Any] = dict(opened.values.get("checkpoint", {})) if opened else {}
        self._answers = ctx.input_responses() if opened is not None else {}
        self._ctx = ctx

    async def status(self, message: str, checkpoint: Mapping[str, Any] | None = None) -> None:
        if checkpoint is not None:
            self.checkpoint = dict(checkpoint)
        await self._ctx.log("info", message, logger="task")

    async def ask(self, requests: Mapping[str, Any], message: str) -> dict[str, Any]:
        if any(key not in self._answers for key in requests):
            raise _NeedInput(requests)
        answers = {key: self._answers[key] for key in requests}
        _check_answers(requests, answers)
        return answers

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def asking(self, need: _NeedInput) -> dict[str, Any]:
        state = self._ctx.seal(bound_call(self._ctx), "task-inline", {"round": self.round,
                                                                      "checkpoint": dict(self.checkpoint)})
        return input_required(need.requests, state)


# ---------------------------------------------------------------------------------------------- runners

async def _drive(services: Services, job: Job, record: TaskRecord, lease_until: float) -> None:
    task_id = record.task_id
    try:
        result = await job(DurableRun(services, record, lease_until))
    except TaskEnded:
        return
    except CancelTask as exc:
        reason = str(exc) or "cancelled"
        _settle(services, task_id, lambda r, now: tasks.cancel(r, now, reason))
    except McpError as exc:  # a JSON-RPC error during execution: the task fails with it (ext-tasks §Task Status)
        error = exc.to_error()
        _settle(services, task_id, lambda r, now: tasks.fail(r, error, now))
    except Exception:
        log.exception("task %s (%s) crashed", task_id, record.tool)
        error = McpError(INTERNAL_ERROR, "internal error while running the task").to_error()
        _settle(services, task_id, lambda r, now: tasks.fail(r, error, now))
    else:
        stamped = finish(dict(result), services)
        _settle(services, task_id, lambda r, now: tasks.complete(r, stamped, now, "completed"))


def _spawn(services: Services, job: Job, record: TaskRecord, lease_until: float) -> None:
    task_id = record.task_id
    if task_id in services.running:
        return
    runner = asyncio.get_running_loop().create_task(_drive(services, job, record, lease_until), name=f"task {task_id}")
    services.running[task_id] = runner
    runner.add_done_callback(lambda _: services.running.pop(task_id, None))


async def stop_runners(services: Services) -> None:
    """At shutdown: stop this process's runners and release their leases, so a successor resumes them at once."""
    runners = dict(services.running)
    for runner in runners.values():
        runner.cancel()
    await asyncio.gather(*runners.values(), return_exceptions=True)
    for task_id in runners:
        services.store.release_task(task_id, services.instance)


def _resume(services: Services, reg: Registry, record: TaskRecord) -> None:
    """Run a live task nobody runs (its process died or stopped) here, if this process wins its lease."""
    if record.status.terminal or record.task_id in services.running:
        return
    now = services.clock()
    until = now + services.config.task_lease_seconds
    if not services.store.lease_task(record.task_id, services.instance, now, until):
        return  # another process runs it
    tool = reg.tools.get(record.tool)
    if tool is None or tool.job is None:
        error = McpError(INTERNAL_ERROR, f"tool {record.tool!r} is no longer served").to_error()
        _settle(services, record.task_id, lambda r, t: tasks.fail(r, error, t))
        return
    log.info("resuming task %s (%s)", record.task_id, record.tool)
    _spawn(services, tool.job, record, until)


# ---------------------------------------------------------------------------------------------- creation

async def start_task(ctx: Context, job: Job, job_input: Mapping[str, Any], message: str = "started") -> dict[str, Any]:
    """Create the task (bounded, durable), start its runner, and answer ``CreateTaskResult``."""
    services, cfg = ctx.services, ctx.services.config
    now = services.clock()
    record = tasks.new_task(services.new_id(), ctx.principal, ctx.params["name"], job_input, now,
                            ttl_ms=int(cfg.task_ttl_seconds * 1000), poll_ms=cfg.task_poll_interval_ms,
                            message=message)
    until = now + cfg.task_lease_seconds
    try:
        services.store.create_task(record.task_id, record.principal, tasks.dumps(record), created=now,
                                   expires=record.expires, owner=services.instance, lease_until=until,
                                   max_active=cfg.max_active_tasks_per_principal, max_total=cfg.max_tasks)
    except TaskLimitError as exc:
        raise _limit(cfg, str(exc)) from None
    _spawn(services, job, record, until)
    return tasks.created_result(record)


def _limit(cfg: CoreConfig, which: str) -> McpError:
    if which == "per_principal":
        bound, what = cfg.max_active_tasks_per_principal, "unfinished tasks of yours"
    else:
        bound, what = cfg.max_tasks, "tasks kept by this server"
    return McpError(LIMIT_EXCEEDED, f"too many tasks: {bound} {what}; wait for one to finish or cancel one",
                    {"limit": f"max_tasks_{which}" if which == "total" else "max_active_tasks_per_principal",
                     "max": bound})


def task_tool(name: str, description: str, schema: dict[str, Any], job: Job, support: TaskSupport, *,
              title: str | None = None, check: Callable[[Context], None] | None = None) -> Tool:
    """A tool that runs ``job`` as a task for clients that declared the extension; ``check`` validates the
    request first, so bad arguments are a -32602 to the call itself, never a failed task."""

    async def handler(ctx: Context) -> dict[str, Any]:
        if check is not None:
            check(ctx)
        if ctx.declares_extension(EXTENSION):
            return await start_task(ctx, job, dict(arguments(ctx)))
        if support is TaskSupport.REQUIRED:
            raise McpError.missing_capability(TASKS_CAPS, f"{name} runs only as a task: declare {EXTENSION}")
        run = InlineRun(ctx)
        try:
            return await job(run)
        except _NeedInput as need:
            return run.asking(need)

    return Tool(name, description, schema, handler, title=title, job=job)


# ---------------------------------------------------------------------------------------------- tasks/*

def check_params(ctx: Context) -> None:
    """The request shapes of ``tasks/*`` (ext-tasks schema; ``mcp_types`` has no types for the extension)."""
    if not isinstance(ctx.params.get("taskId"), str):
        raise McpError.invalid_params("params.taskId must be a string")
    if ctx.env.method == "tasks/update" and not isinstance(ctx.params.get("inputResponses"), Mapping):
        raise McpError.invalid_params("params.inputResponses must be an object")


def _owned(ctx: Context, reg: Registry) -> TaskRecord:
    # ext-tasks §Protocol Errors: -32021 for a client that did not declare the extension on this request.
    ctx.require(ctx.declares_extension(EXTENSION), TASKS_CAPS, f"tasks/* needs the {EXTENSION} extension")
    task_id = ctx.params["taskId"]
    record = load(ctx.services, task_id)
    if record is None or record.principal != ctx.principal:
        raise McpError.invalid_params("Failed to retrieve task: Task not found", {"taskId": task_id})
    if record.expired(ctx.services.clock()):
        ctx.services.store.delete_task(task_id)
        raise McpError.invalid_params("Failed to retrieve task: Task has expired", {"taskId": task_id})
    _resume(ctx.services, reg, record)
    return record


async def tasks_get(ctx: Context, reg: Registry) -> dict[str, Any]:
    return tasks.detailed(_owned(ctx, reg))


def _check_answers(requests: Mapping[str, Any], responses: Mapping[str, Any]) -> None:
    for key, value in responses.items():
        request = requests.get(key)
        method = request.get("method", "") if isinstance(request, Mapping) else ""
        model = ANSWER_TYPES.get(method)
        if model is None:
            continue  # not outstanding: ignored (ext-tasks §Task Update Requests)
        try:
            model.model_validate(value)
        except ValidationError:
            raise McpError.invalid_params(f"inputResponses.{key} is not a valid {method} result",
                                          {"key": key}) from None


async def tasks_update(ctx: Context, reg: Registry) -> dict[str, Any]:
    record = _owned(ctx, reg)
    responses = ctx.params["inputResponses"]
    _check_answers(record.input_requests, responses)  # all or nothing: one bad answer stores none of them
    now = ctx.services.clock()
    change(ctx.services, record.task_id, lambda r: tasks.answer(r, responses, now)[0])
    return {}  # an empty acknowledgement (ext-tasks §Task Update Requests, Response)


async def tasks_cancel(ctx: Context, reg: Registry) -> dict[str, Any]:
    record = _owned(ctx, reg)
    now = ctx.services.clock()
    change(ctx.services, record.task_id, lambda r: tasks.cancel(r, now))
    return {}  # idempotent: a terminal task gets the same empty acknowledgement


def subscribable(ctx: Context, task_ids: Any) -> list[str]:
    """``subscriptions/listen`` ``taskIds``: needs the extension (-32021); only the caller's live-or-kept tasks
    are honoured, the rest are left out of the acknowledgement (ext-tasks §Task Status Notifications)."""
    ctx.require(ctx.declares_extension(EXTENSION), TASKS_CAPS, f"task notifications need the {EXTENSION} extension")
    if not isinstance(task_ids, list) or not all(isinstance(t, str) for t in task_ids):
        raise McpError.invalid_params("notifications.taskIds must be an array of strings")
    now = ctx.services.clock()
    return [t for t in dict.fromkeys(task_ids) if _visible(load(ctx.services, t), ctx.principal, now)]


def _visible(record: TaskRecord | None, principal: str, now: float) -> bool:
    return record is not None and record.principal == principal and not record.expired(now)


def snapshots(ctx: Context, task_ids: Iterable[str]) -> list[dict[str, Any]]:
    """The current state of each subscribed task, sent right after the acknowledgement so a change between the
    client's last poll and its subscription is not missed."""
    records = (load(ctx.services, t) for t in task_ids)
    return [tasks.detailed(r) for r in records if r is not None]


METHODS: dict[str, Callable[[Context, Registry], Awaitable[dict[str, Any]]]] = {
    "tasks/get": tasks_get,
    "tasks/update": tasks_update,
    "tasks/cancel": tasks_cancel,
}
