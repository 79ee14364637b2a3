"""The official conformance suite's server fixture, written as 2026-07-28 handlers on the core's framework.

``@modelcontextprotocol/conformance`` calls a fixed set of tools, prompts and resources (``test_simple_text``,
``test_sampling``, ``test_input_required_result_*``, ``test://static-text`` ...). Its reference
``examples/servers/typescript/everything-server.ts`` and the scenario sources (``src/scenarios/server/*.ts``)
name them and give the expected outputs; this module serves the same set from the stateless core, so:

- lane 1 runs ``conformance server --requirements 2026-07-28`` straight against it, and
- lane 2 runs the 2025-11-25 server scenarios against the gateway in front of it; there the legacy
  server-to-client requests (``sampling/createMessage``, ``elicitation/create``) the scenarios expect come from the
  gateway turning this fixture's MRTR ``input_required`` rounds into legacy requests.

Every flow that needs the client is written the 2026 way: ``input_required(...)`` with a sealed ``requestState``
(``ctx.seal``/``ctx.open_state``) where the flow carries state, and the declared-capability checks the core
enforces (``ctx.require`` -> -32021). It is not part of the default tool set: only this module builds it.

Run: ``python -m tests.conformance.fixture --port P`` (serves ``http://127.0.0.1:P/mcp``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
from collections.abc import Mapping
from typing import Any

import mcp_types
from aiohttp import web
from pydantic import ValidationError

from modern_server.app import create_app
from modern_server.config import CoreConfig
from modern_server.errors import INTERNAL_ERROR, McpError
from modern_server.framework import (
    Context,
    Prompt,
    Registry,
    ResourceFamily,
    Tool,
    arguments,
    bound_call,
    input_required,
    next_round,
    text_result,
)
from modern_server.taskrun import TASKS_CAPS, Run, start_task, task_tool
from modern_server.tasks import EXTENSION, TaskSupport

# The suite's own sample payloads (everything-server.ts): a 1x1 red PNG and a minimal WAV.
IMAGE_PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")
AUDIO_WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}}
LOGGER = "conformance-fixture"


# ---------------------------------------------------------------------------------------------- helpers

def _elicit(message: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"method": "elicitation/create", "params": {
        "mode": "form", "message": message,
        "requestedSchema": {"type": "object", "properties": properties, "required": required}}}


def _sample(text: str, max_tokens: int) -> dict[str, Any]:
    return {"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": max_tokens}}


ROOTS: dict[str, Any] = {"method": "roots/list", "params": {}}


def _elicit_answer(responses: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    """The ElicitResult under ``key``; None when it is absent (ask again); -32602 when it is not one."""
    answer = responses.get(key)
    if answer is None:
        return None
    try:
        mcp_types.ElicitResult.model_validate(answer)
    except ValidationError:
        raise McpError.invalid_params(f"inputResponses.{key} is not an ElicitResult") from None
    return dict(answer)


def _sample_answer(responses: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    answer = responses.get(key)
    if answer is None:
        return None
    try:
        mcp_types.CreateMessageResult.model_validate(answer)
    except ValidationError:
        raise McpError.invalid_params(f"inputResponses.{key} is not a CreateMessageResult") from None
    return dict(answer)


def _roots_answer(responses: Mapping[str, Any], key: str) -> list[Any] | None:
    answer = responses.get(key)
    if answer is None:
        return None
    try:
        mcp_types.ListRootsResult.model_validate(answer)
    except ValidationError:
        raise McpError.invalid_params(f"inputResponses.{key} is not a ListRootsResult") from None
    return list(answer["roots"])


def _sampled_text(answer: Mapping[str, Any]) -> str:
    content = answer.get("content")
    blocks = content if isinstance(content, list) else [content]
    texts = [b.get("text", "") for b in blocks if isinstance(b, Mapping) and b.get("type") == "text"]
    return " ".join(texts) or "No response"


def _field(answer: Mapping[str, Any], name: str, default: str = "unknown") -> Any:
    content = answer.get("content") or {}
    value = content.get(name) if isinstance(content, Mapping) else None
    return default if value is None else value


def _needs_form(ctx: Context, what: str) -> None:
    ctx.require(ctx.declares_form_elicitation(), {"elicitation": {"form": {}}}, f"{what} asks the user (elicitation)")


def _needs_sampling(ctx: Context, what: str) -> None:
    ctx.require(ctx.declares("sampling"), {"sampling": {}}, f"{what} needs the client's model (sampling)")


# ---------------------------------------------------------------------------------------------- content tools

async def simple_text(ctx: Context) -> dict[str, Any]:
    return text_result("This is a simple text response for testing.")


async def image_content(ctx: Context) -> dict[str, Any]:
    return {"content": [{"type": "image", "data": IMAGE_PNG, "mimeType": "image/png"}]}


async def audio_content(ctx: Context) -> dict[str, Any]:
    return {"content": [{"type": "audio", "data": AUDIO_WAV, "mimeType": "audio/wav"}]}


async def embedded_resource(ctx: Context) -> dict[str, Any]:
    return {"content": [{"type": "resource", "resource": {
        "uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content."}}]}


async def multiple_content_types(ctx: Context) -> dict[str, Any]:
    return {"content": [
        {"type": "text", "text": "Multiple content types test:"},
        {"type": "image", "data": IMAGE_PNG, "mimeType": "image/png"},
        {"type": "resource", "resource": {"uri": "test://mixed-content-resource", "mimeType": "application/json",
                                          "text": json.dumps({"test": "data", "value": 123})}},
    ]}


async def tool_with_logging(ctx: Context) -> dict[str, Any]:
    # 2026 logging: only when the request opted in with _meta logLevel (ctx.log enforces it).
    for i, message in enumerate(("Tool execution started", "Tool processing data", "Tool execution completed")):
        if i:
            await asyncio.sleep(0.05)  # sleep: the tool's steps are spaced, as the scenario expects
        await ctx.log("info", message, logger=LOGGER)
    return text_result("Tool with logging executed successfully")


async def tool_with_progress(ctx: Context) -> dict[str, Any]:
    for i, value in enumerate((0, 50, 100)):
        if i:
            await asyncio.sleep(0.05)  # sleep: the tool's steps are spaced, as the scenario expects
        await ctx.progress(value, 100, f"Completed step {value} of 100")
    token = ctx.env.progress_token
    return text_result(str(token if token is not None else 0))


async def error_handling(ctx: Context) -> dict[str, Any]:
    # tools §Error Handling: a tool failure is a result with isError, not a JSON-RPC error.
    return text_result("This tool intentionally returns an error for testing", error=True)


async def reconnection(ctx: Context) -> dict[str, Any]:
    # SEP-1699 (2025-11-25 server-sse-polling): stream polling is the legacy transport's business (the gateway's);
    # the upstream call itself simply completes.
    await asyncio.sleep(0.1)  # sleep: the call takes a while, for the client to reconnect meanwhile
    return text_result("Reconnection test completed successfully. If you received this, the client properly "
                       "reconnected after stream closure.")


JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"address": {"$anchor": "addressDef", "type": "object",
                          "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"},
                   "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                   "phone": {"type": "string"}, "email": {"type": "string"}},
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


async def json_schema_tool(ctx: Context) -> dict[str, Any]:
    return text_result(f"JSON Schema 2020-12 tool called with: {json.dumps(dict(arguments(ctx)))}")


# ---------------------------------------------------------------------------------------------- legacy-era flows (MRTR)

async def sampling(ctx: Context) -> dict[str, Any]:
    """``test_sampling``: one sampling round (key ``llm``), the prompt taken from the arguments."""
    _needs_sampling(ctx, "test_sampling")
    prompt = arguments(ctx).get("prompt")
    if not isinstance(prompt, str):
        raise McpError.invalid_params("argument prompt (string) is required")
    opened = ctx.open_state(bound_call(ctx))
    round_no = next_round(ctx, opened)
    answer = _sample_answer(ctx.input_responses(), "llm") if opened is not None else None
    if answer is None:
        return input_required({"llm": _sample(prompt, 100)}, ctx.seal(bound_call(ctx), "sample", {"round": round_no}))
    return text_result(f"LLM response: {_sampled_text(answer)}")


def _elicitation_tool(key: str, message_of, properties: dict[str, Any], required: list[str]):  # type: ignore[no-untyped-def]
    async def handler(ctx: Context) -> dict[str, Any]:
        _needs_form(ctx, ctx.params["name"])
        opened = ctx.open_state(bound_call(ctx))
        round_no = next_round(ctx, opened)
        answer = _elicit_answer(ctx.input_responses(), key) if opened is not None else None
        if answer is None:
            request = _elicit(message_of(ctx), properties, required)
            return input_required({key: request}, ctx.seal(bound_call(ctx), "elicit", {"round": round_no}))
        content = answer.get("content") or {}
        return text_result(f"User response: action={answer['action']}, content={json.dumps(content)}")
    return handler


def _message_argument(ctx: Context) -> str:
    message = arguments(ctx).get("message")
    if not isinstance(message, str):
        raise McpError.invalid_params("argument message (string) is required")
    return message


elicitation = _elicitation_tool("user_info", _message_argument, {
    "username": {"type": "string", "description": "User's response"},
    "email": {"type": "string", "description": "User's email address"},
}, ["username", "email"])

elicitation_defaults = _elicitation_tool(
    "defaults", lambda ctx: "Please review and update the form fields with defaults", {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {"type": "string", "description": "User status", "enum": ["active", "inactive", "pending"],
                   "default": "active"},
        "verified": {"type": "boolean", "description": "Verification status", "default": True},
    }, [])

elicitation_enums = _elicitation_tool(
    "enums", lambda ctx: "Please select options from the enum fields", {
        "untitledSingle": {"type": "string", "description": "Select one option",
                           "enum": ["option1", "option2", "option3"]},
        "titledSingle": {"type": "string", "description": "Select one option with titles",
                         "oneOf": [{"const": "value1", "title": "First Option"},
                                   {"const": "value2", "title": "Second Option"},
                                   {"const": "value3", "title": "Third Option"}]},
        "legacyEnum": {"type": "string", "description": "Select one option (legacy)",
                       "enum": ["opt1", "opt2", "opt3"], "enumNames": ["Option One", "Option Two", "Option Three"]},
        "untitledMulti": {"type": "array", "description": "Select multiple options", "minItems": 1, "maxItems": 3,
                          "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
        "titledMulti": {"type": "array", "description": "Select multiple options with titles", "minItems": 1,
                        "maxItems": 3, "items": {"anyOf": [{"const": "value1", "title": "First Choice"},
                                                           {"const": "value2", "title": "Second Choice"},
                                                           {"const": "value3", "title": "Third Choice"}]}},
    }, [])


# ---------------------------------------------------------------------------------------------- 2026-07-28 diagnostics

async def missing_capability(ctx: Context) -> dict[str, Any]:
    _needs_sampling(ctx, "test_missing_capability")
    return text_result("Success")


async def streaming_elicitation(ctx: Context) -> dict[str, Any]:
    # The response stream may carry only this request's notifications (progress, when asked for), then the result.
    await ctx.progress(50, 100, "half way")
    return text_result("Streaming complete")


async def logging_tool(ctx: Context) -> dict[str, Any]:
    await ctx.log("info", "Diagnostic trace logging activated", logger=LOGGER)
    return text_result("Logging evaluated")


def _trigger(method: str):  # type: ignore[no-untyped-def]
    async def handler(ctx: Context) -> dict[str, Any]:
        ctx.services.bus.publish(method, {})  # delivered only to listen streams that asked for it
        return text_result("Mutation triggered")
    return handler


async def custom_header(ctx: Context) -> dict[str, Any]:
    # SEP-2243: the client mirrors ``region`` into ``Mcp-Param-Region``; checking the header against the body is
    # the transport's job (the core's), so the handler only echoes the argument.
    return text_result(f"region={arguments(ctx).get('region')}")


CUSTOM_HEADER_SCHEMA = {"type": "object", "properties": {
    "region": {"type": "string", "description": "mirrored as Mcp-Param-Region", "x-mcp-header": "Region"}},
    "required": ["region"]}


# ---------------------------------------------------------------------------------------------- SEP-2322 MRTR tools

async def irr_elicitation(ctx: Context) -> dict[str, Any]:
    """Stateless round trip: everything the flow needs comes back in ``inputResponses.user_name``."""
    _needs_form(ctx, "test_input_required_result_elicitation")
    answer = _elicit_answer(ctx.input_responses(), "user_name")
    if answer is None:  # missing or wrong keys: ask again (mrtr §Retry), not an error
        return input_required({"user_name": _elicit("What is your name?", {"name": {"type": "string"}}, ["name"])},
                              None)
    return text_result(f"Hello, {_field(answer, 'name')}!")


async def irr_sampling(ctx: Context) -> dict[str, Any]:
    _needs_sampling(ctx, "test_input_required_result_sampling")
    answer = _sample_answer(ctx.input_responses(), "capital_question")
    if answer is None:
        return input_required({"capital_question": _sample("What is the capital of France?", 100)}, None)
    return text_result(f"Sampling result: {_sampled_text(answer)}")


async def irr_list_roots(ctx: Context) -> dict[str, Any]:
    ctx.require(ctx.declares("roots"), {"roots": {}}, "test_input_required_result_list_roots asks for roots")
    roots = _roots_answer(ctx.input_responses(), "client_roots")
    if roots is None:
        return input_required({"client_roots": ROOTS}, None)
    uris = ", ".join(str(r.get("uri")) for r in roots if isinstance(r, Mapping))
    return text_result(f"Found {len(roots)} root(s): {uris}")


async def irr_request_state(ctx: Context) -> dict[str, Any]:
    _needs_form(ctx, "test_input_required_result_request_state")
    opened = ctx.open_state(bound_call(ctx))
    round_no = next_round(ctx, opened)
    answer = _elicit_answer(ctx.input_responses(), "confirm") if opened is not None else None
    if answer is None or _field(answer, "ok", None) is not True:
        confirm = _elicit("Please confirm", {"ok": {"type": "boolean"}}, ["ok"])
        return input_required({"confirm": confirm}, ctx.seal(bound_call(ctx), "confirm", {"round": round_no}))
    return text_result("state-ok: requestState validated")


async def irr_multiple_inputs(ctx: Context) -> dict[str, Any]:
    _needs_form(ctx, "test_input_required_result_multiple_inputs")
    _needs_sampling(ctx, "test_input_required_result_multiple_inputs")
    ctx.require(ctx.declares("roots"), {"roots": {}}, "test_input_required_result_multiple_inputs asks for roots")
    opened = ctx.open_state(bound_call(ctx))
    round_no = next_round(ctx, opened)
    responses = ctx.input_responses() if opened is not None else {}
    name = _elicit_answer(responses, "user_name")
    greeting = _sample_answer(responses, "greeting")
    roots = _roots_answer(responses, "client_roots")
    if name is None or greeting is None or roots is None:
        requests = {"user_name": _elicit("What is your name?", {"name": {"type": "string"}}, ["name"]),
                    "greeting": _sample("Generate a greeting", 50),
                    "client_roots": ROOTS}
        return input_required(requests, ctx.seal(bound_call(ctx), "all", {"round": round_no}))
    return text_result(f"Name: {_field(name, 'name')}; Greeting: {_sampled_text(greeting)}; Roots: {len(roots)}")


async def irr_multi_round(ctx: Context) -> dict[str, Any]:
    _needs_form(ctx, "test_input_required_result_multi_round")
    opened = ctx.open_state(bound_call(ctx))
    round_no = next_round(ctx, opened)
    responses = ctx.input_responses()
    step1 = _elicit("Step 1: What is your name?", {"name": {"type": "string"}}, ["name"])
    if opened is None or (opened.phase == "step1" and _elicit_answer(responses, "step1") is None):
        return input_required({"step1": step1}, ctx.seal(bound_call(ctx), "step1", {"round": round_no}))
    if opened.phase == "step1":
        name = str(_field(_elicit_answer(responses, "step1") or {}, "name", "friend"))
        step2 = _elicit("Step 2: What is your favorite color?", {"color": {"type": "string"}}, ["color"])
        return input_required({"step2": step2},
                              ctx.seal(bound_call(ctx), "step2", {"round": round_no, "name": name}))
    answer = _elicit_answer(responses, "step2")
    name = opened.values.get("name", "friend")
    if answer is None:
        step2 = _elicit("Step 2: What is your favorite color?", {"color": {"type": "string"}}, ["color"])
        return input_required({"step2": step2},
                              ctx.seal(bound_call(ctx), "step2", {"round": round_no, "name": name}))
    return text_result(f"Multi-round complete for {name} who likes {_field(answer, 'color')}")


async def irr_tampered_state(ctx: Context) -> dict[str, Any]:
    _needs_form(ctx, "test_input_required_result_tampered_state")
    opened = ctx.open_state(bound_call(ctx))  # a tampered state is -32602 here (sealing: HMAC-SHA256)
    round_no = next_round(ctx, opened)
    answer = _elicit_answer(ctx.input_responses(), "confirm") if opened is not None else None
    if answer is None:
        confirm = _elicit("Please confirm", {"ok": {"type": "boolean"}}, ["ok"])
        return input_required({"confirm": confirm}, ctx.seal(bound_call(ctx), "tamper-test", {"round": round_no}))
    return text_result("integrity-ok: state verified")


async def irr_capabilities(ctx: Context) -> dict[str, Any]:
    """Asks only for what this request's clientCapabilities declare (mrtr §capabilities)."""
    requests: dict[str, Any] = {}
    if ctx.declares_form_elicitation():
        requests["elicit_input"] = _elicit("Elicitation input", {"value": {"type": "string"}}, ["value"])
    if ctx.declares("sampling"):
        requests["sample_input"] = _sample("Sample request", 50)
    opened = ctx.open_state(bound_call(ctx))
    round_no = next_round(ctx, opened)
    responses = ctx.input_responses() if opened is not None else {}
    got = [key for key in requests if key in responses]
    if not requests:
        return text_result("No supported capabilities declared")
    if len(got) < len(requests):
        return input_required(requests, ctx.seal(bound_call(ctx), "caps", {"round": round_no}))
    _elicit_answer(responses, "elicit_input")
    _sample_answer(responses, "sample_input")
    return text_result(f"capabilities-ok: received {','.join(got)}")


# ---------------------------------------------------------------------------------------------- tasks

# The tasks extension scenarios' fixtures (the suite's src/scenarios/server/tasks/*.ts name them): one sync tool
# and task tools run by the core's task runner (modern_server.taskrun).

async def add(ctx: Context) -> dict[str, Any]:
    args = arguments(ctx)
    numbers = [args.get(k, 0) for k in ("a", "b")]
    if not all(isinstance(n, (int, float)) and not isinstance(n, bool) for n in numbers):
        raise McpError.invalid_params("a and b must be numbers")
    return text_result(str(numbers[0] + numbers[1]))


async def greet(ctx: Context) -> dict[str, Any]:
    return text_result(f"Hello, {arguments(ctx).get('name', 'World')}!")


async def slow_compute(run: Run) -> dict[str, Any]:
    seconds, label = float(run.job_input.get("seconds", 1)), str(run.job_input.get("label", ""))
    await run.status(f"computing {label} for {seconds:g}s")
    await run.sleep(seconds)
    return text_result(f"computed {label} in {seconds:g}s")


def _slow_compute_args(ctx: Context) -> None:
    seconds = arguments(ctx).get("seconds", 1)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= 600:
        raise McpError.invalid_params("seconds must be a number from 0 to 600")


async def failing_job(run: Run) -> dict[str, Any]:
    await run.sleep(0.3)
    return text_result("the job failed: input rejected by the worker", error=True)


async def protocol_error_job(run: Run) -> dict[str, Any]:
    await run.sleep(0.1)
    raise McpError(INTERNAL_ERROR, "the job's worker crashed")


async def confirm_delete(run: Run) -> dict[str, Any]:
    filename = str(run.job_input.get("filename", "file"))
    ask = _elicit(f"Delete {filename}?", {"confirm": {"type": "boolean"}}, ["confirm"])
    answer = (await run.ask({"confirm": ask}, f"waiting for confirmation to delete {filename}"))["confirm"]
    deleted = answer.get("action") == "accept" and _field(answer, "confirm", "false") is True
    return text_result(f"{'deleted' if deleted else 'kept'} {filename}")


async def multi_input(run: Run) -> dict[str, Any]:
    asks = {key: _elicit(f"Name for {key}?", {"name": {"type": "string"}}, ["name"]) for key in ("first", "second")}
    answers = await run.ask(asks, "waiting for two names")
    return text_result(f"names: {_field(answers['first'], 'name')}, {_field(answers['second'], 'name')}")


async def greet_task(run: Run) -> dict[str, Any]:
    await run.sleep(0.2)
    return text_result(f"Hello, {run.job_input['user_name']}! (from a task)")


async def tool_with_task(ctx: Context) -> dict[str, Any]:
    """MRTR first, then a task (ext-tasks §Task Creation: input before the task is gathered synchronously)."""
    ctx.require(ctx.declares_extension(EXTENSION), TASKS_CAPS, "test_tool_with_task runs only as a task")
    _needs_form(ctx, "test_tool_with_task")
    answer = _elicit_answer(ctx.input_responses(), "user_name")
    if answer is None:
        return input_required({"user_name": _elicit("What is your name?", {"name": {"type": "string"}},
                                                    ["name"])}, None)
    return await start_task(ctx, greet_task, {"user_name": str(_field(answer, "name"))})




# ---------------------------------------------------------------------------------------------- prompts

def _prompt_args(ctx: Context) -> Mapping[str, Any]:
    return ctx.params.get("arguments") or {}


def _messages(*contents: dict[str, Any]) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": c} for c in contents]}


async def simple_prompt(ctx: Context) -> dict[str, Any]:
    return _messages({"type": "text", "text": "This is a simple prompt for testing."})


async def prompt_with_arguments(ctx: Context) -> dict[str, Any]:
    args = _prompt_args(ctx)
    missing = [name for name in ("arg1", "arg2") if not isinstance(args.get(name), str)]
    if missing:
        raise McpError.invalid_params(f"missing required argument(s): {', '.join(missing)}")
    return _messages({"type": "text", "text": f"Prompt with arguments: arg1='{args['arg1']}', arg2='{args['arg2']}'"})


async def prompt_with_embedded_resource(ctx: Context) -> dict[str, Any]:
    uri = _prompt_args(ctx).get("resourceUri")
    if not isinstance(uri, str):
        raise McpError.invalid_params("missing required argument: resourceUri")
    return _messages({"type": "resource", "resource": {"uri": uri, "mimeType": "text/plain",
                                                       "text": "Embedded resource content for testing."}},
                     {"type": "text", "text": "Please process the embedded resource above."})


async def prompt_with_image(ctx: Context) -> dict[str, Any]:
    return _messages({"type": "image", "data": IMAGE_PNG, "mimeType": "image/png"},
                     {"type": "text", "text": "Please analyze the image above."})


async def irr_prompt(ctx: Context) -> dict[str, Any]:
    _needs_form(ctx, "test_input_required_result_prompt")
    answer = _elicit_answer(ctx.input_responses(), "user_context")
    if answer is None:
        ask = _elicit("What context should the prompt use?", {"context": {"type": "string"}}, ["context"])
        return input_required({"user_context": ask}, None)
    return _messages({"type": "text", "text": f"Prompt with context: {_field(answer, 'context')}"})


def _no_completions(ctx: Context, argument: str, value: str) -> list[str]:
    return []  # completion-complete: the endpoint must answer; values may be empty


def _arg(name: str, description: str, required: bool = True) -> dict[str, Any]:
    return {"name": name, "description": description, "required": required}


PROMPTS = (
    Prompt("test_simple_prompt", "A simple prompt without arguments", (), simple_prompt),
    Prompt("test_prompt_with_arguments", "A prompt with required arguments",
           (_arg("arg1", "First test argument"), _arg("arg2", "Second test argument")), prompt_with_arguments,
           _no_completions),
    Prompt("test_prompt_with_embedded_resource", "A prompt that includes an embedded resource",
           (_arg("resourceUri", "URI of the resource to embed"),), prompt_with_embedded_resource),
    Prompt("test_prompt_with_image", "A prompt that includes image content", (), prompt_with_image),
    Prompt("test_input_required_result_prompt", "MRTR: prompt that requires elicitation input", (), irr_prompt),
)


# ---------------------------------------------------------------------------------------------- resources

STATIC: dict[str, dict[str, Any]] = {
    "test://static-text": {"name": "static-text", "title": "Static Text Resource",
                           "description": "A static text resource for testing", "mimeType": "text/plain",
                           "text": "This is the content of the static text resource."},
    "test://static-binary": {"name": "static-binary", "title": "Static Binary Resource",
                             "description": "A static binary resource (image) for testing", "mimeType": "image/png",
                             "blob": IMAGE_PNG},
    "test://watched-resource": {"name": "watched-resource", "title": "Watched Resource",
                                "description": "A resource that can be subscribed to", "mimeType": "text/plain",
                                "text": "Watched resource content"},
}
TEMPLATE = re.compile(r"test://template/([^/]+)/data")
CACHE_HINTS = {"ttlMs": 300_000, "cacheScope": "public"}


def _listing(ctx: Context) -> list[dict[str, Any]]:
    keys = ("name", "title", "description", "mimeType")
    return [{"uri": uri, **{k: entry[k] for k in keys}} for uri, entry in STATIC.items()]


async def _read(ctx: Context, uri: str) -> dict[str, Any] | None:
    if uri in STATIC:
        entry = STATIC[uri]
        body = {"text": entry["text"]} if "text" in entry else {"blob": entry["blob"]}
        return {"contents": [{"uri": uri, "mimeType": entry["mimeType"], **body}], **CACHE_HINTS}
    match = TEMPLATE.fullmatch(uri)
    if match:
        ident = match.group(1)
        text = json.dumps({"id": ident, "templateTest": True, "data": f"Data for ID: {ident}"})
        return {"contents": [{"uri": uri, "mimeType": "application/json", "text": text}], **CACHE_HINTS}
    return None  # the core answers -32602 with data.uri (resources §Error Handling, SEP-2164)


RESOURCES = ResourceFamily(_listing, _read, templates=({
    "uriTemplate": "test://template/{id}/data", "name": "template", "title": "Resource Template",
    "description": "A resource template with parameter substitution", "mimeType": "application/json"},))


# ---------------------------------------------------------------------------------------------- registry

def _tool(name: str, description: str, handler, schema: dict[str, Any] | None = None) -> Tool:  # type: ignore[no-untyped-def]
    return Tool(name, description, schema or NO_ARGS, handler)


def _string_arg(name: str, description: str) -> dict[str, Any]:
    return {"type": "object", "properties": {name: {"type": "string", "description": description}}, "required": [name]}


TOOLS = (
    _tool("test_simple_text", "Tests simple text content response", simple_text),
    _tool("test_image_content", "Tests image content response", image_content),
    _tool("test_audio_content", "Tests audio content response", audio_content),
    _tool("test_embedded_resource", "Tests embedded resource content response", embedded_resource),
    _tool("test_multiple_content_types", "Tests response with multiple content types (text, image, resource)",
          multiple_content_types),
    _tool("test_tool_with_logging", "Tests tool that emits log messages during execution", tool_with_logging),
    _tool("test_tool_with_progress", "Tests tool that reports progress notifications", tool_with_progress),
    _tool("test_error_handling", "Tests error response handling", error_handling),
    _tool("test_reconnection", "Tests SSE stream disconnection and client reconnection (SEP-1699)", reconnection),
    _tool("test_sampling", "Tests sampling (LLM completion request) through MRTR", sampling,
          _string_arg("prompt", "The prompt to send to the LLM")),
    _tool("test_elicitation", "Tests elicitation (user input request) through MRTR", elicitation,
          _string_arg("message", "The message to show the user")),
    _tool("test_elicitation_sep1034_defaults", "Tests elicitation with default values per SEP-1034",
          elicitation_defaults),
    _tool("test_elicitation_sep1330_enums", "Tests elicitation with enum schema improvements per SEP-1330",
          elicitation_enums),
    _tool("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613)",
          json_schema_tool, JSON_SCHEMA_2020_12),
    _tool("test_missing_capability", "Test tool requiring sampling", missing_capability),
    _tool("test_streaming_elicitation", "Diagnostic tool validating response streams", streaming_elicitation),
    _tool("test_logging_tool", "Diagnostic logging validator tool", logging_tool),
    _tool("test_trigger_tool_change", "Diagnostic hook: announce a tool list change",
          _trigger("notifications/tools/list_changed")),
    _tool("test_trigger_prompt_change", "Diagnostic hook: announce a prompt list change",
          _trigger("notifications/prompts/list_changed")),
    _tool("test_custom_header", "SEP-2243: an argument mirrored into the Mcp-Param-Region header", custom_header,
          CUSTOM_HEADER_SCHEMA),
    _tool("test_input_required_result_elicitation", "MRTR: returns InputRequiredResult with elicitation request",
          irr_elicitation),
    _tool("test_input_required_result_sampling", "MRTR: returns InputRequiredResult with sampling request",
          irr_sampling),
    _tool("test_input_required_result_list_roots", "MRTR: returns InputRequiredResult with roots/list request",
          irr_list_roots),
    _tool("test_input_required_result_request_state", "MRTR: returns InputRequiredResult with requestState",
          irr_request_state),
    _tool("test_input_required_result_multiple_inputs",
          "MRTR: returns InputRequiredResult with multiple input requests", irr_multiple_inputs),
    _tool("test_input_required_result_multi_round", "MRTR: multi-round InputRequiredResult workflow",
          irr_multi_round),
    _tool("test_input_required_result_tampered_state", "MRTR: HMAC-signed requestState integrity test",
          irr_tampered_state),
    _tool("test_input_required_result_capabilities", "MRTR: respects client capabilities in inputRequests",
          irr_capabilities),
)


SLOW_COMPUTE_SCHEMA = {"type": "object", "properties": {"seconds": {"type": "number"}, "label": {"type": "string"}}}
ADD_SCHEMA = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}
TASK_TOOLS = (
    # Named to be listed first: the suite's http-header-validation scenario calls the first listed tool with no
    # arguments and no extension declared, which the task-only tools below (confirm_delete ...) would refuse.
    Tool("add", "Sync: adds a and b (both default to 0)", ADD_SCHEMA, add),
    Tool("greet", "Sync-only: returns Hello, {name}!", _string_arg("name", "Who to greet"), greet),
    task_tool("slow_compute", "Task-supporting (optional): sleeps `seconds`, then answers", SLOW_COMPUTE_SCHEMA,
              slow_compute, TaskSupport.OPTIONAL, check=_slow_compute_args),
    task_tool("failing_job", "Task-required: ends with a tool error", NO_ARGS, failing_job, TaskSupport.REQUIRED),
    task_tool("protocol_error_job", "Task-required: ends with a JSON-RPC error", NO_ARGS, protocol_error_job,
              TaskSupport.REQUIRED),
    task_tool("confirm_delete", "Task-required: asks for a confirmation through the task",
              _string_arg("filename", "The file to delete"), confirm_delete, TaskSupport.REQUIRED),
    task_tool("multi_input", "Task-required: asks two questions at once", NO_ARGS, multi_input,
              TaskSupport.REQUIRED),
    Tool("test_tool_with_task", "MRTR then a task: asks a name, then greets from a task", NO_ARGS, tool_with_task,
         job=greet_task),
)


def build_registry() -> Registry:
    registry = Registry()
    for tool in (*TOOLS, *TASK_TOOLS):
        registry.tools[tool.name] = tool
    for prompt in PROMPTS:
        registry.prompts[prompt.name] = prompt
    registry.resources.append(RESOURCES)
    return registry


def build_app(config: CoreConfig | None = None) -> web.Application:
    config = config or CoreConfig(server_name="mcp-conformance-fixture", seed_notes=False, task_poll_interval_ms=200,
                                  instructions="Conformance fixture: the official suite's tools on the core.")
    return create_app(config, registry=build_registry())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance.fixture", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--access-log", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # 2026 cancellation: a client closing the response stream cancels the handler (as in python -m modern_server).
    web.run_app(build_app(), host=args.host, port=args.port, handler_cancellation=True, print=None,
                access_log=logging.getLogger("aiohttp.access") if args.access_log else None)


if __name__ == "__main__":
    main()
