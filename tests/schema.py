"""Validate wire messages against the official JSON schemas in ``../shared/spec/<version>/schema.json``.

The schemas are read from the shared folder beside the checkout (never copied into the project). When the
folder is absent, :func:`available` is False and :func:`check` is a no-op that callers may skip on.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

SPEC_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "spec"

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


@functools.cache
def _schema(version: str) -> dict[str, Any]:
    return json.loads((SPEC_DIR / version / "schema.json").read_text())


@functools.cache
def _validator(version: str, definition: str) -> Draft202012Validator:
    root = _schema(version)
    return Draft202012Validator({"$ref": f"#/$defs/{definition}", "$defs": root["$defs"]})


def errors(version: str, definition: str, value: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in _validator(version, definition).iter_errors(value)]


def check(version: str, message: dict[str, Any], method: str | None = None) -> None:
    """Assert ``message`` is a valid JSON-RPC message of ``version``; a result is checked against ``method``."""
    if not available(version):
        return
    problems = errors(version, "JSONRPCMessage", message)
    result = message.get("result")
    if not problems and method in RESULT_DEFS and isinstance(result, dict):
        definition = RESULT_DEFS[method]
        if method in MRTR and result.get("resultType") == "input_required":
            definition = "InputRequiredResult"
        problems = errors(version, definition, result)
    assert not problems, f"{method or message.get('method')} breaks the {version} schema: {problems[:5]}"
