"""Validate wire messages against the official JSON schemas in ``../shared/spec/<version>/schema.json``.

The schemas are read from the shared folder beside the checkout (never copied into the project). A clone from a
public host has no such folder: :func:`available` is then False and :func:`check` validates the same messages
with the official ``mcp-types`` models instead (their public validation API), so a message that breaks its
revision's wire types still fails the test. :data:`MODE` says which of the two runs (the test summary prints it).
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from mcp_types import methods as wire

SPEC_DIR = Path(os.environ.get("MCP_SPEC_DIR") or Path(__file__).resolve().parents[1].parent / "shared" / "spec")

# method -> the result definition a success must satisfy (MRTR methods may also answer InputRequiredResult).
RESULT_DEFS = {
    "server/discover": "DiscoverResult", "tools/list": "ListToolsResult", "tools/call": "CallToolResult",
    "prompts/list": "ListPromptsResult", "prompts/get": "GetPromptResult", "resources/list": "ListResourcesResult",
    "resources/templates/list": "ListResourceTemplatesResult", "resources/read": "ReadResourceResult",
    "completion/complete": "CompleteResult", "subscriptions/listen": "SubscriptionsListenResult",
    "initialize": "InitializeResult", "ping": "EmptyResult", "logging/setLevel": "EmptyResult",
    "resources/subscribe": "EmptyResult", "resources/unsubscribe": "EmptyResult",
}
MRTR = {"tools/call", "prompts/get", "resources/read"}


def available(version: str) -> bool:
    return (SPEC_DIR / version / "schema.json").is_file()


MODE = ("the official JSON schemas in ../shared/spec" if available("2025-11-25") and available("2026-07-28")
        else "the official mcp-types models (../shared/spec not found)")


@functools.cache
def _schema(version: str) -> dict[str, Any]:
    return json.loads((SPEC_DIR / version / "schema.json").read_text())


@functools.cache
def _validator(version: str, definition: str) -> Draft202012Validator:
    root = _schema(version)
    return Draft202012Validator({"$ref": f"#/$defs/{definition}", "$defs": root["$defs"]})


def errors(version: str, definition: str, value: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in _validator(version, definition).iter_errors(value)]


def check(version: str, message: dict[str, Any], method: str | None = None) -> None:
    """Assert ``message`` is a valid JSON-RPC message of ``version``; a result is checked against ``method``."""
    if version == "2026-07-28" and _is_task_message(message, method):
        from tests import task_wire  # the tasks extension's shapes: no schema of the core revision has them

        task_wire.check_message(message, method)
        return
    if not available(version):
        _check_with_types(version, message, method)
        return
    problems = errors(version, "JSONRPCMessage", message)
    result = message.get("result")
    if not problems and method in RESULT_DEFS and isinstance(result, dict):
        definition = RESULT_DEFS[method]
        if method in MRTR and result.get("resultType") == "input_required":
            definition = "InputRequiredResult"
        problems = errors(version, definition, result)
    assert not problems, f"{method or message.get('method')} breaks the {version} schema: {problems[:5]}"


def _is_task_message(message: dict[str, Any], method: str | None) -> bool:
    result = message.get("result")
    return (message.get("method") == "notifications/tasks" or message.get("method") in TASK_METHODS
            or (isinstance(result, dict) and (method in TASK_METHODS or result.get("resultType") == "task")))


TASK_METHODS = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})


def _check_with_types(version: str, message: dict[str, Any], method: str | None) -> None:
    """The same check through ``mcp_types.methods``: requests and notifications by their method (the client's
    side of the revision when the method is one a client sends, else the server's), results by ``method``."""
    assert message.get("jsonrpc") == "2.0", message
    name, params = message.get("method"), message.get("params")
    if isinstance(name, str):
        client_side = (name, version) in (wire.CLIENT_NOTIFICATIONS if "id" not in message else wire.CLIENT_REQUESTS)
        if "id" not in message:
            (wire.parse_client_notification if client_side else wire.parse_server_notification)(name, version, params)
        elif client_side:
            wire.validate_client_request(name, version, params)
        else:
            wire.parse_server_request(name, version, params)
    elif "error" in message:
        error = message["error"]
        assert isinstance(error, dict) and isinstance(error.get("code"), int) and isinstance(error.get("message"), str)
    elif method is not None and (method, version) in wire.SERVER_RESULTS:
        wire.validate_server_result(method, version, message["result"])
    else:
        assert isinstance(message.get("result"), dict), message
