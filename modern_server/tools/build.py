"""``build_project``: a long-running build that runs as a task (the tasks extension, ``modern_server.taskrun``).

The build goes through four steps of ``build_step_seconds`` each, reporting each as the task's status message.
After compiling it asks for a confirmation (key ``publish``, a form elicitation through the task's
``input_required`` status, ext-tasks §Task Update Requests) before testing and publishing:
- ``accept`` with ``confirm`` true -> the build goes on and completes ("published");
- ``decline``, or ``accept`` with ``confirm`` false -> the task completes with a "declined" result;
- ``cancel`` (the user dismissed the question) -> the task ends ``cancelled``.
``tasks/cancel`` stops it at its next step. ``simulate_failure`` demonstrates the two ways a task ends badly:
``tool_error`` completes with ``isError`` (the build broke), ``protocol_error`` fails the task with a JSON-RPC
error (ext-tasks §Task Execution Errors). For a client that did not declare the extension the build runs within
its call and asks the 2026 way (an ``input_required`` round whose sealed ``requestState`` carries the step
reached). After a restart a task resumes from the step it last reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mcp_types
from pydantic import ValidationError

from modern_server.errors import INTERNAL_ERROR, McpError
from modern_server.framework import Context, arguments, text_result
from modern_server.taskrun import CancelTask, Run, task_tool
from modern_server.tasks import TaskSupport

STEPS = ("resolving dependencies", "compiling", "running tests", "publishing")
CONFIRM_AT = 2  # the step that needs the confirmation: after compiling, before testing and publishing
CONFIRM = "publish"
FAILURES = ("none", "tool_error", "protocol_error")

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "project": {"type": "string", "minLength": 1, "maxLength": 200, "description": "The project to build"},
        "simulate_failure": {"type": "string", "enum": list(FAILURES), "default": "none",
                             "description": "Demonstration: make the build break (tool_error) or the server "
                                            "fail (protocol_error) after compiling"},
    },
    "required": ["project"],
    "additionalProperties": False,
}


def _check(ctx: Context) -> None:
    args = arguments(ctx)
    project = args.get("project")
    if not isinstance(project, str) or not 1 <= len(project) <= 200:
        raise McpError.invalid_params("project must be a string of 1 to 200 characters")
    if args.get("simulate_failure", "none") not in FAILURES:
        raise McpError.invalid_params(f"simulate_failure must be one of {list(FAILURES)}")
    if set(args) - {"project", "simulate_failure"}:
        raise McpError.invalid_params(f"unknown argument(s): {sorted(set(args) - {'project', 'simulate_failure'})}")
    ctx.require(ctx.declares_form_elicitation(), {"elicitation": {"form": {}}},
                "build_project asks for a confirmation half-way (form elicitation)")


def _question(project: str) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"confirm": {"type": "boolean", "title": "Test and publish",
                                                           "default": False}}, "required": ["confirm"]}
    return {"method": "elicitation/create", "params": {
        "mode": "form", "message": f"{project} compiled. Run its tests and publish it?", "requestedSchema": schema}}


def _consented(project: str, answer: Any) -> bool:
    try:
        mcp_types.ElicitResult.model_validate(answer)
    except ValidationError:
        raise McpError.invalid_params(f"inputResponses.{CONFIRM} is not an ElicitResult") from None
    if answer["action"] == "cancel":
        raise CancelTask(f"the build of {project} was cancelled at its confirmation")
    content = answer.get("content") or {}
    return answer["action"] == "accept" and content.get("confirm") is True


def _outcome(project: str, outcome: str, text: str, *, error: bool = False) -> dict[str, Any]:
    return text_result(text, {"project": project, "outcome": outcome}, error=error)


def _broken(project: str, failure: str) -> dict[str, Any]:
    if failure == "protocol_error":
        raise McpError(INTERNAL_ERROR, f"the build worker for {project} crashed")
    return _outcome(project, "broken", f"{project} failed to compile: 1 error", error=True)


async def build(run: Run) -> dict[str, Any]:
    args: Mapping[str, Any] = run.job_input
    project, failure = args["project"], args.get("simulate_failure", "none")
    for step in range(int(run.checkpoint.get("step", 0)), len(STEPS)):
        if step == CONFIRM_AT:
            await run.status(f"{project} compiled", {"step": step})  # a resumed or retried run starts here
            answers = await run.ask({CONFIRM: _question(project)}, f"waiting for confirmation to publish {project}")
            if not _consented(project, answers[CONFIRM]):
                return _outcome(project, "declined", f"{project} compiled; testing and publishing were declined")
        await run.status(f"step {step + 1}/{len(STEPS)}: {STEPS[step]} {project}", {"step": step})
        await run.sleep(run.config.build_step_seconds)
        if STEPS[step] == "compiling" and failure != "none":
            return _broken(project, failure)
    return _outcome(project, "published", f"{project} built, tested and published")


TOOLS = (
    task_tool("build_project", "Build, test and publish a project (long-running: runs as a task, asks for a "
              "confirmation before publishing)", SCHEMA, build, TaskSupport.OPTIONAL, title="Build project",
              check=_check),
)
