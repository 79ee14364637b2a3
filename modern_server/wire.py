"""The 2026-07-28 request-validation ladder and the header-value codec (pure: no I/O).

The ladder runs in the order the official conformance suite checks (the spec defines none;
2026-07-28 basic §Error Codes gives the codes and statuses):

1. ``MCP-Protocol-Version`` header absent                         -> -32020 (400)
2. ``_meta`` absent, ``protocolVersion`` absent or not a string,
   ``clientCapabilities`` absent or not an object                  -> -32602 (400)
3. header != ``_meta`` protocol version                            -> -32020 (400)
4. version not supported                                           -> -32022 (400), data {supported, requested}
5. ``Mcp-Method`` / ``Mcp-Name`` absent or != body                 -> -32020 (400)

Method dispatch (-32601/404) and capability checks (-32021) follow in ``framework``. The ladder only *reads*
the client's dict and returns a view of it (:class:`Envelope`); the request itself is never rebuilt.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, LOG_LEVEL_META_KEY, PROTOCOL_VERSION_META_KEY

from modern_server import SUPPORTED_VERSIONS
from modern_server.errors import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    UNSUPPORTED_PROTOCOL_VERSION,
    McpError,
)

# streamable-http §Request headers: the params key each name-bearing method mirrors into Mcp-Name.
# The tasks extension routes its methods by task (ext-tasks §Streamable HTTP: Routing Headers).
NAME_PARAM = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri",
              "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
_SENTINEL = re.compile(r"=\?base64\?([A-Za-z0-9+/=]*)\?=")


@dataclass(frozen=True, slots=True)
class Envelope:
    """A read-only view of one validated request; ``params`` is the client's own dict."""

    id: str | int
    method: str
    params: Mapping[str, Any]
    version: str
    capabilities: Mapping[str, Any]
    client_info: Mapping[str, Any] | None
    log_level: str | None
    progress_token: str | int | None


def decode_header(value: str | None) -> str | None:
    """Undo the ``=?base64?...?=`` sentinel (streamable-http §Value encoding); a corrupt one decodes to None."""
    if value is None:
        return None
    match = _SENTINEL.fullmatch(value)
    if match is None:
        return value
    try:
        raw = base64.b64decode(match.group(1), validate=True)
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def check_jsonrpc(body: Any) -> None:
    """A POST body must be one JSON-RPC request object with a string or integer id (basic/index)."""
    if not isinstance(body, dict) or body.get("jsonrpc") != "2.0" or not isinstance(body.get("method"), str):
        raise McpError(INVALID_REQUEST, "expected one JSON-RPC 2.0 request object")
    ident = body.get("id")
    if isinstance(ident, bool) or not isinstance(ident, (str, int)):
        raise McpError(INVALID_REQUEST, "the request id must be a string or an integer")
    if "params" in body and not isinstance(body["params"], dict):
        raise McpError(INVALID_REQUEST, "params must be an object")


def _meta_of(body: Mapping[str, Any]) -> Mapping[str, Any]:
    params = body.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        raise McpError(INVALID_PARAMS, f"params._meta is required and must carry {PROTOCOL_VERSION_META_KEY!r}")
    if not isinstance(meta.get(PROTOCOL_VERSION_META_KEY), str):
        raise McpError(INVALID_PARAMS, f"params._meta[{PROTOCOL_VERSION_META_KEY!r}] must be a string")
    if not isinstance(meta.get(CLIENT_CAPABILITIES_META_KEY), dict):
        raise McpError(INVALID_PARAMS, f"params._meta[{CLIENT_CAPABILITIES_META_KEY!r}] must be an object")
    return meta


def _check_routing_headers(headers: Mapping[str, str], method: str, params: Mapping[str, Any]) -> None:
    if headers.get("mcp-method") != method:
        raise McpError(HEADER_MISMATCH, f"the Mcp-Method header must be present and equal {method!r}")
    key = NAME_PARAM.get(method)
    if key is None:
        return
    value = params.get(key)
    if not isinstance(value, str):
        raise McpError(INVALID_PARAMS, f"params.{key} must be a string")
    if decode_header(headers.get("mcp-name")) != value:
        raise McpError(HEADER_MISMATCH, f"the Mcp-Name header must be present and equal params.{key}")


def _optional_meta(meta: Mapping[str, Any]) -> tuple[Mapping[str, Any] | None, str | None, Any]:
    info = meta.get(CLIENT_INFO_META_KEY)
    if info is not None and not isinstance(info, dict):
        raise McpError(INVALID_PARAMS, f"params._meta[{CLIENT_INFO_META_KEY!r}] must be an object")
    level = meta.get(LOG_LEVEL_META_KEY)
    if level is not None and level not in LOG_LEVELS:  # logging §: invalid level -> -32602
        raise McpError(INVALID_PARAMS, f"params._meta[{LOG_LEVEL_META_KEY!r}] must be one of {list(LOG_LEVELS)}")
    token = meta.get("progressToken")
    if token is not None and (isinstance(token, bool) or not isinstance(token, (str, int))):
        raise McpError(INVALID_PARAMS, "params._meta.progressToken must be a string or an integer")
    return info, level, token


def validate(headers: Mapping[str, str], body: Mapping[str, Any]) -> Envelope:
    """Run the ladder over a request already known to be JSON-RPC; ``headers`` are keyed lowercase."""
    header_version = headers.get("mcp-protocol-version")
    if header_version is None:
        raise McpError(HEADER_MISMATCH, "the MCP-Protocol-Version header is required")
    meta = _meta_of(body)
    version = meta[PROTOCOL_VERSION_META_KEY]
    if header_version != version:
        raise McpError(HEADER_MISMATCH, "the MCP-Protocol-Version header does not match params._meta")
    if version not in SUPPORTED_VERSIONS:
        data = {"supported": list(SUPPORTED_VERSIONS), "requested": version}
        raise McpError(UNSUPPORTED_PROTOCOL_VERSION, f"unsupported protocol version {version!r}", data)
    params = body["params"]
    _check_routing_headers(headers, body["method"], params)
    info, level, token = _optional_meta(meta)
    return Envelope(body["id"], body["method"], params, version, meta[CLIENT_CAPABILITIES_META_KEY],
                    info, level, token)


def _annotated(schema: Any, path: tuple[str, ...] = ()) -> Any:
    """(path, token, type) of every property reachable through pure ``properties`` chains with x-mcp-header."""
    props = schema.get("properties") if isinstance(schema, dict) else None
    for name, sub in (props.items() if isinstance(props, dict) else ()):
        if isinstance(sub, dict):
            if isinstance(sub.get("x-mcp-header"), str):
                yield (*path, name), sub["x-mcp-header"], sub.get("type")
            yield from _annotated(sub, (*path, name))


def _argument(arguments: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = arguments
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def _same(kind: Any, value: Any, decoded: str) -> bool:
    if isinstance(value, bool):
        return decoded == ("true" if value else "false")
    if kind == "integer" and isinstance(value, (int, float)):
        try:  # tools §x-mcp-header: integers compare numerically ("42" equals 42.0)
            return float(decoded) == float(value) and decoded.strip() == decoded
        except ValueError:
            return False
    return isinstance(value, (str, int, float)) and decoded == str(value)


def check_param_headers(schema: Any, arguments: Mapping[str, Any], headers: Mapping[str, str]) -> None:
    """streamable-http §Custom headers: each ``x-mcp-header`` argument is mirrored as ``Mcp-Param-<token>``.

    Present argument -> the header must be present and (after sentinel decoding) equal it; absent or null
    argument -> the header must be absent. Anything else is -32020.
    """
    for path, token, kind in _annotated(schema):
        name, where = f"Mcp-Param-{token}", ".".join(path)
        raw, value = headers.get(name.lower()), _argument(arguments, path)
        if value is None:
            if raw is not None:
                raise McpError(HEADER_MISMATCH, f"{name} was sent but argument {where!r} is absent")
            continue
        if raw is None:
            raise McpError(HEADER_MISMATCH, f"argument {where!r} must be mirrored in the {name} header")
        decoded = decode_header(raw)
        if decoded is None or not _same(kind, value, decoded):
            raise McpError(HEADER_MISMATCH, f"the {name} header does not match argument {where!r}")
