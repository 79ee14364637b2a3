"""The ONE place that builds upstream (2026-07-28) request bodies and headers (2026-07-28 basic §_meta,
basic/transports §Streamable HTTP).

Every upstream POST gets a fresh JSON-RPC id (minted by the caller), the full per-request ``_meta``
(protocolVersion, the session's translated clientCapabilities, clientInfo, logLevel when set, and the client's
own non-reserved ``_meta`` entries such as ``progressToken`` kept as they came) and the mirrored headers. It never
carries ``Mcp-Session-Id`` or ``Last-Event-ID`` (2026-07-28 has neither). A value that no mirrored header can carry
raises :class:`UnencodableHeader` before any request exists: the client's bad input, answered with ``INVALID_PARAMS``.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from adapters.errors import HEADER_MISMATCH, INVALID_PARAMS, ErrorValue
from adapters.jsonwire import JsonObject, JsonValue, JsonView
from adapters.protocol import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    LOG_LEVEL_META_KEY,
    MODERN_VERSION,
    NAME_PARAM,
    PROTOCOL_VERSION_META_KEY,
    TASK_NAME_PARAM,
)

_SENTINEL = re.compile(r"^=\?base64\?.*\?=$")
_PLAIN = re.compile(r"^[\x20-\x7E]*$")
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
# Params the legacy client may send that must not go upstream: ``task`` (the gateway declared no tasks, so per
# 2025-11-25 basic/utilities/tasks it ignores task augmentation) and MRTR fields, which only the bridge sets
# (2026-07-28 basic/patterns §Multi Round-Trip Requests: they belong to the retry alone).
_STRIPPED_PARAMS = frozenset({"_meta", "task", "inputResponses", "requestState"})
_RESERVED_META = ("io.modelcontextprotocol/", "dev.mcp/")


@dataclass(frozen=True, slots=True)
class SessionView:
    """What every upstream request needs to know about the legacy session it speaks for."""

    capabilities: JsonView  # already translated to 2026 (capabilities.client_caps_to_modern)
    client_info: JsonView | None = None
    log_level: str | None = None
    authorization: str | None = None  # passed through: the embedded core shares the gateway's audience


@dataclass(frozen=True, slots=True)
class UpstreamCall:
    body: JsonObject
    headers: dict[str, str] = field(default_factory=dict)


class UnencodableHeader(ValueError):
    """A value that must be mirrored into ``header`` has no UTF-8 form (a lone surrogate, which JSON allows):
    the base64 sentinel encodes UTF-8 (2026-07-28 basic/transports §Streamable HTTP), so no request can carry it."""

    def __init__(self, header: str) -> None:
        super().__init__(f"{header}: the value is not valid Unicode (a lone surrogate)")
        self.header = header

    def error(self, method: str) -> ErrorValue:
        """The client's answer: its params, not the gateway or the upstream, are at fault (INVALID_PARAMS)."""
        return ErrorValue(INVALID_PARAMS, f"invalid params for {method}: the value mirrored into the "
                          f"{self.header} header is not valid Unicode (a lone surrogate) and cannot be sent")


def encode_header_value(value: str, header: str = "header") -> str:
    """streamable-http §Value encoding: plain visible ASCII passes; anything else uses the base64 sentinel.
    Raises :class:`UnencodableHeader` (naming ``header``) when ``value`` has no UTF-8 form."""
    if _PLAIN.fullmatch(value) and value == value.strip() and not _SENTINEL.fullmatch(value):
        return value
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError:
        raise UnencodableHeader(header) from None
    return "=?base64?" + base64.b64encode(raw).decode("ascii") + "?="


def build_meta(client_meta: JsonValue, view: SessionView) -> JsonObject:
    meta: JsonObject = {}
    if isinstance(client_meta, Mapping):
        # Keep the client's own entries (progressToken, traceparent, vendor keys) as the same objects; only
        # the reserved namespace is ours to set (2026-07-28 basic §_meta).
        meta.update({k: v for k, v in client_meta.items() if not k.startswith(_RESERVED_META)})
    meta[PROTOCOL_VERSION_META_KEY] = MODERN_VERSION
    meta[CLIENT_CAPABILITIES_META_KEY] = dict(view.capabilities)
    if view.client_info:
        meta[CLIENT_INFO_META_KEY] = dict(view.client_info)
    if view.log_level:
        meta[LOG_LEVEL_META_KEY] = view.log_level
    return meta


def build_request(method: str, params: JsonView | None, *, request_id: str | int, view: SessionView,
                  extra: JsonView | None = None,
                  header_map: Mapping[tuple[str, ...], str] | None = None) -> UpstreamCall:
    """The upstream request for ``method``; ``extra`` adds bridge fields (inputResponses / requestState).
    Raises :class:`UnencodableHeader` when a value to mirror into a header has no UTF-8 form."""
    params = params if isinstance(params, Mapping) else {}
    out: JsonObject = {k: v for k, v in params.items() if k not in _STRIPPED_PARAMS}
    out.update(extra or {})
    out["_meta"] = build_meta(params.get("_meta"), view)
    body: JsonObject = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": out}
    return UpstreamCall(body, build_headers(method, out, view, header_map))


def build_headers(method: str, params: JsonView, view: SessionView,
                  header_map: Mapping[tuple[str, ...], str] | None = None) -> dict[str, str]:
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN_VERSION,  # must equal _meta protocolVersion (2026-07-28 basic/transports)
        "Mcp-Method": method,
    }
    name_key = NAME_PARAM.get(method) or TASK_NAME_PARAM.get(method)
    name = params.get(name_key) if name_key is not None else None
    if isinstance(name, str):
        headers["Mcp-Name"] = encode_header_value(name, "Mcp-Name")
    if method == "tools/call" and header_map:
        headers.update(param_headers(header_map, params.get("arguments")))
    if view.authorization:
        headers["Authorization"] = view.authorization
    return headers


def build_discover(request_id: str | int, view: SessionView) -> UpstreamCall:
    return build_request("server/discover", {}, request_id=request_id, view=view)


def build_listen(request_id: str | int, view: SessionView, notifications: JsonView) -> UpstreamCall:
    return build_request("subscriptions/listen", {"notifications": dict(notifications)},
                         request_id=request_id, view=view)


def x_mcp_header_map(input_schema: JsonValue) -> dict[tuple[str, ...], str] | None:
    """``properties`` path -> header name for ``x-mcp-header`` annotations; None when the tool is invalid
    (2026-07-28 server/tools §x-mcp-header: clients MUST drop such tools from their tools/list view).

    The whole schema is walked, not just the ``properties`` chains: an annotation reached through ``items``,
    a composition keyword (anyOf/allOf/oneOf/not/if/then/else), ``$ref``/``$defs`` or anything else but a pure
    ``properties`` chain makes the tool invalid (2026-07-28 server/tools §x-mcp-header)."""
    found: dict[tuple[str, ...], str] = {}
    # path None: the node is off the pure properties chain (an annotation there is invalid)
    stack: list[tuple[tuple[str, ...] | None, JsonValue]] = [((), input_schema)]
    while stack:
        path, node = stack.pop()
        if not isinstance(node, Mapping):
            continue
        if "x-mcp-header" in node:
            name = node["x-mcp-header"]
            if not path or not isinstance(name, str) or not _TOKEN.fullmatch(name) \
                    or node.get("type") not in ("string", "integer", "boolean") \
                    or name.lower() in {n.lower() for n in found.values()}:
                return None
            found[path] = name
        stack.extend(((*path, prop) if path is not None and prop is not None else None, child)
                     for prop, child in _subschemas(node))
    return found


_NAMED_SUBSCHEMAS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_INSTANCE_DATA = frozenset({"const", "enum", "default", "examples"})


def _subschemas(node: JsonView) -> Iterator[tuple[str | None, JsonValue]]:
    """Every subschema of a schema node: ``(name, schema)`` for ``properties`` entries, ``(None, schema)`` for
    the rest. Any other object or array of objects counts as a subschema (unknown keywords too: the safe side);
    instance data (``const``, ``enum``, ...) does not: a key spelled ``x-mcp-header`` in it is a value."""
    for keyword, value in node.items():
        if keyword in _INSTANCE_DATA:
            continue
        if keyword in _NAMED_SUBSCHEMAS and isinstance(value, Mapping):
            named = keyword == "properties"
            yield from ((name if named else None, child) for name, child in value.items())
        elif isinstance(value, Mapping):
            yield None, value
        elif isinstance(value, list):
            yield from ((None, child) for child in value if isinstance(child, Mapping))


def param_headers(header_map: Mapping[tuple[str, ...], str], arguments: JsonValue) -> dict[str, str]:
    """``Mcp-Param-{Name}`` values mirrored from the arguments; null/absent values are omitted."""
    out: dict[str, str] = {}
    for path, name in header_map.items():
        value: JsonValue = arguments
        for step in path:
            value = value.get(step) if isinstance(value, Mapping) else None
        if value is None:
            continue
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        out[f"Mcp-Param-{name}"] = encode_header_value(text, f"Mcp-Param-{name}")
    return out


def learned_header_maps(maps: JsonView, tools_result: object) -> JsonObject | None:
    """``maps`` (as a session record keeps them: tool name -> ``[[path, header name], ...]``, JSON) with one
    ``tools/list`` page learned: each listed tool's map set, or dropped when the tool no longer annotates an
    argument or is invalid (2026-07-28 server/tools §x-mcp-header), so a stale map never outlives the re-fetch a
    HEADER_MISMATCH asks for. None when the page changes nothing: there is nothing to save."""
    tools = tools_result.get("tools") if isinstance(tools_result, Mapping) else None
    if not isinstance(tools, list):
        return None  # malformed: the machine's schema check answers the request (adapters.results)
    out = dict(maps)
    for tool in tools:
        name = tool.get("name") if isinstance(tool, Mapping) else None
        if isinstance(tool, Mapping) and isinstance(name, str):
            found = x_mcp_header_map(tool.get("inputSchema"))
            if found:
                out[name] = [[[*path], header] for path, header in found.items()]
            else:
                out.pop(name, None)
    return out if out != maps else None


def header_map_of(maps: JsonView | None, tool: str) -> dict[tuple[str, ...], str] | None:
    """The x-mcp-header map of ``tool`` from maps kept as :func:`learned_header_maps` makes them."""
    entry = maps.get(tool) if maps else None
    if not isinstance(entry, list) or not entry:
        return None
    found: dict[tuple[str, ...], str] = {}
    for pair in entry:  # [[path, header name], ...], as learned_header_maps wrote it
        if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], list) and isinstance(pair[1], str):
            found[tuple(str(step) for step in pair[0])] = pair[1]
    return found


def needs_header_refresh(method: str, error: object) -> bool:
    """A HEADER_MISMATCH (HeaderMismatch) on ``tools/call``: re-learn the x-mcp-header maps and resend once (2026-07-28
    basic/transports §Custom Headers: on HEADER_MISMATCH the client SHOULD re-fetch tools/list and retry)."""
    return method == "tools/call" and isinstance(error, Mapping) and error.get("code") == HEADER_MISMATCH
