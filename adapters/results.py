"""Upstream results, errors and request-scoped notifications -> what the legacy client receives
(2026-07-28 basic §ResultType, basic/patterns §Multi Round-Trip Requests).

Choices where the spec is silent (docs/design/eras.md#resulttype-ttlms-and-cachescope-are-consumed-not-forwarded,
docs/design/eras.md#schema-widening):

- ``resultType`` is consumed by the gateway and removed: a 2025 client has no such field, and ``complete`` is
  the only value that ever reaches it (``input_required`` is bridged, anything else is invalid).
- ``ttlMs``/``cacheScope`` are consumed (the gateway caches ``server/discover``) and removed: they are 2026
  caching hints addressed to the immediate client, which is the gateway.
- ``structuredContent`` that is not an object, and an ``outputSchema`` whose root is not an object, cannot be
  represented in 2025 (the 2025-11-25 schema requires objects); the gateway drops both (the text ``content``
  still carries the answer) rather than inventing a wrapper shape the tool never declared.
- Tools with an invalid ``x-mcp-header`` are dropped from ``tools/list`` (2026-07-28 server/tools MUST).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import UnionType
from typing import Any, get_args

from mcp_types.methods import CACHEABLE_METHODS, SERVER_RESULTS
from pydantic import TypeAdapter

from adapters.errors import ErrorValue, UpstreamFault, upstream_failure
from adapters.jsonwire import JsonObject, JsonValue, JsonView, members
from adapters.protocol import INPUT_REQUEST_METHODS, MODERN_VERSION, MRTR_METHODS, SUBSCRIPTION_ID_META_KEY
from adapters.upstream import x_mcp_header_map

_CONSUMED_KEYS = ("resultType", "ttlMs", "cacheScope")


@dataclass(frozen=True, slots=True)
class Complete:
    result: JsonObject  # already in legacy shape
    raw: JsonObject  # the upstream's result (for caching decisions)


@dataclass(frozen=True, slots=True)
class InputRequired:
    input_requests: dict[str, JsonView]  # each an object with a known method and object params
    request_state: str | None


@dataclass(frozen=True, slots=True)
class Invalid:
    error: ErrorValue


def _validation_view(method: str, result: JsonView) -> JsonObject:
    """A copy for schema checks: absent resultType means complete (2026-07-28 basic §ResultType); absent ttl/scope
    from older servers mean 0 / private (2026-07-28 caching). The copy is checked, never forwarded."""
    view = dict(result)
    view.setdefault("resultType", "complete")
    if method in CACHEABLE_METHODS:
        view.setdefault("ttlMs", 0)
        view.setdefault("cacheScope", "private")
    return view


@cache
def _complete_validator(method: str) -> TypeAdapter[Any] | None:
    """The 2026 result row (``mcp_types.methods.SERVER_RESULTS``) without its InputRequiredResult arm: a
    ``complete`` result must be the real type (the union's lenient input_required arm would otherwise accept
    anything). None for a method without a 2026 row (never forwarded; nothing to check against).

    Validation only: ``mcp_types.methods.validate_server_result`` also dumps the validated model back to a
    dict, which the gateway never uses (it forwards the upstream's own dict) and which cost a quarter of the
    check in the benchmark's profile."""
    row = SERVER_RESULTS.get((method, MODERN_VERSION))
    if row is None:
        return None
    # A runtime union is a type form, but pydantic >= 2.14 types TypeAdapter's argument as TypeForm, which a
    # UnionType value (or get_args' JsonValue) does not satisfy statically: the form is passed as the JsonValue it is.
    form: Any = row
    if isinstance(row, UnionType):
        arms = [arm for arm in get_args(row) if arm.__name__ != "InputRequiredResult"]
        form = arms[0] if len(arms) == 1 else row
    return TypeAdapter(form)


def _schema_error(method: str, view: JsonView) -> ErrorValue | None:
    validator = _complete_validator(method)
    if validator is None:
        return None
    try:
        validator.validate_python(view, by_name=False)  # by alias, as on the wire (as mcp_types does)
    except Exception as exc:  # pydantic.ValidationError; its text names the broken field
        first = str(exc).splitlines()[1] if len(str(exc).splitlines()) > 1 else str(exc)
        return upstream_failure(UpstreamFault.INVALID_RESULT, f"{method} result breaks the 2026-07-28 schema: {first}")
    return None


def classify_result(method: str, result: JsonValue) -> Complete | InputRequired | Invalid:
    if not isinstance(result, Mapping):
        return Invalid(upstream_failure(UpstreamFault.INVALID_RESULT, f"{method} result is not an object"))
    kind = result.get("resultType", "complete")
    if kind == "input_required":
        return _input_required(method, result)
    if kind != "complete":
        # An unrecognised resultType is invalid (2026-07-28 basic §ResultType); we declared no extension adding one.
        return Invalid(upstream_failure(UpstreamFault.INVALID_RESULT, f"unknown resultType {kind!r} for {method}"))
    error = _schema_error(method, _validation_view(method, result))
    return Invalid(error) if error else Complete(to_legacy_result(method, result), dict(result))


def _input_required(method: str, result: JsonView) -> InputRequired | Invalid:
    if method not in MRTR_METHODS:
        return Invalid(upstream_failure(UpstreamFault.INVALID_RESULT, f"input_required is not allowed for {method}"))
    requests, state = result.get("inputRequests"), result.get("requestState")
    if requests is None and state is None:
        return Invalid(upstream_failure(UpstreamFault.INVALID_RESULT,
                                        "input_required without inputRequests or requestState"))
    if state is not None and not isinstance(state, str):
        return Invalid(upstream_failure(UpstreamFault.INVALID_RESULT, "requestState must be a string"))
    if requests is not None and not isinstance(requests, Mapping):
        return Invalid(upstream_failure(UpstreamFault.INVALID_RESULT, "inputRequests must be an object"))
    entries: dict[str, JsonView] = {}
    for key, entry in (requests or {}).items():
        if not isinstance(entry, Mapping) or entry.get("method") not in INPUT_REQUEST_METHODS \
                or not isinstance(entry.get("params", {}), Mapping):
            return Invalid(upstream_failure(UpstreamFault.INVALID_RESULT, f"input request {key!r} is malformed"))
        entries[key] = entry
    return InputRequired(entries, state)


def to_legacy_result(method: str, result: JsonView) -> JsonObject:
    out = {k: v for k, v in result.items() if k not in _CONSUMED_KEYS}
    if method == "tools/call" and "structuredContent" in out and not isinstance(out["structuredContent"], dict):
        del out["structuredContent"]
    tools = out.get("tools")
    if method == "tools/list" and isinstance(tools, list):
        out["tools"] = [_legacy_tool(t) for t in tools if isinstance(t, Mapping) and _tool_is_valid(t)]
    return out


def _tool_is_valid(tool: JsonView) -> bool:
    return x_mcp_header_map(tool.get("inputSchema")) is not None


def _legacy_tool(tool: JsonView) -> JsonObject:
    out = dict(tool)
    schema = out.get("outputSchema")
    if schema is not None and not (isinstance(schema, Mapping) and schema.get("type") == "object"):
        del out["outputSchema"]
    return out


def request_notification(message: JsonView, progress_token: JsonValue) -> JsonObject | None:
    """An upstream request-stream notification -> the legacy one (or None to drop it).

    Only progress and log messages are request-scoped in 2026 (2026-07-28 basic/transports
    §Streamable HTTP). Progress carries the client's own token object (docs/design/bridge.md#progress); a progress
    notification for a request without a token is dropped, as the client never asked for one.
    """
    method, params = message.get("method"), message.get("params")
    if not isinstance(params, Mapping):
        return None
    if method == "notifications/message":
        return {"jsonrpc": "2.0", "method": method, "params": _strip_subscription(params)}
    if method == "notifications/progress" and progress_token is not None:
        out = _strip_subscription(params)
        out["progressToken"] = progress_token
        return {"jsonrpc": "2.0", "method": method, "params": out}
    return None


def progress_advances(last: float | None, message: JsonView) -> tuple[bool, float | None]:
    """Progress must increase (2025-11-25 basic/utilities/progress) but every MRTR round is a new upstream request
    whose progress may start again: keep only values above the last one forwarded for this client request."""
    if message.get("method") != "notifications/progress":
        return True, last
    value = members(message.get("params")).get("progress")
    if not isinstance(value, (int, float)) or isinstance(value, bool) or (last is not None and value <= last):
        return False, last
    return True, value


def _strip_subscription(params: JsonView) -> JsonObject:
    out = dict(params)
    meta = out.get("_meta")
    if isinstance(meta, Mapping) and SUBSCRIPTION_ID_META_KEY in meta:
        rest = {k: v for k, v in meta.items() if k != SUBSCRIPTION_ID_META_KEY}
        out.pop("_meta")
        if rest:
            out["_meta"] = rest
    return out


def response(request_id: JsonValue, result: JsonView | None = None,
             error: ErrorValue | None = None) -> JsonObject:
    if error is not None:
        return {"jsonrpc": "2.0", "id": request_id, "error": error.to_wire()}
    return {"jsonrpc": "2.0", "id": request_id, "result": dict(result or {})}
