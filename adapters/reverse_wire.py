"""The reverse bridge's wire rules (docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge): a
2026-07-28 client in front of a 2025-11-25 server.

Owns what the gateway, acting as a strict 2026-07-28 server, checks on a client's request (the validation ladder
in the order the official conformance suite uses: 2026-07-28 basic §Error Codes), which era an upstream is served
in, and how messages change era: the legacy ``initialize`` result becomes ``server/discover``, a legacy result
gets ``resultType`` (and ``ttlMs``/``cacheScope`` where 2026 requires them), a 2026 request loses its ``_meta``
protocol keys before it reaches the 2025 server.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from mcp_types.jsonrpc import HEADER_MISMATCH, MISSING_REQUIRED_CLIENT_CAPABILITY, UNSUPPORTED_PROTOCOL_VERSION

from adapters import errors as E
from adapters.probe import UpstreamKind
from adapters.protocol import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    LOG_LEVEL_META_KEY,
    LOG_LEVELS,
    MODERN_VERSION,
    NAME_PARAM,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
    TASK_NAME_PARAM,
)

SUPPORTED: Final = (MODERN_VERSION,)
# 2026-07-28 server/utilities/caching: these complete results carry ttlMs and cacheScope.
CACHEABLE: Final = frozenset({"server/discover", "tools/list", "prompts/list", "resources/list",
                              "resources/templates/list", "resources/read"})
# A shared intermediary answers for one principal at a time: nothing it relays may be reused across
# authorization contexts (2026-07-28 server/utilities/caching, "private"), and the legacy server says nothing
# about freshness, so nothing is fresh (ttlMs 0).
CACHE_FIELDS: Final = {"ttlMs": 0, "cacheScope": "private"}
# Each relayed method and the legacy server capability it needs (2026-07-28 basic §Error Codes: a method gated
# behind a capability the server did not advertise is METHOD_NOT_FOUND).
RELAYED: Final[Mapping[str, str | None]] = {
    "server/discover": None, "tools/list": "tools", "tools/call": "tools", "prompts/list": "prompts",
    "prompts/get": "prompts", "resources/list": "resources", "resources/read": "resources",
    "resources/templates/list": "resources", "completion/complete": "completions",
    # served from the session's GET stream and resources/subscribe (adapters.reverse_listen), what the server
    # offers of it told in the acknowledgement
    "subscriptions/listen": None,
    # the tasks extension's requests, on a server with 2025 tasks (adapters.reverse_tasks)
    "tasks/get": "tasks", "tasks/update": "tasks", "tasks/cancel": "tasks"}
# What a retry relayed to the replica holding its call carries of its HTTP request: the headers the ladder checks.
ROUTING_HEADERS: Final = frozenset({"mcp-protocol-version", "mcp-method", "mcp-name"})
_SENTINEL = re.compile(r"=\?base64\?([A-Za-z0-9+/=]*)\?=")
# 2025-11-25 server capabilities a 2026-07-28 discover result has no field for (tasks moved to an extension).
_LEGACY_ONLY_CAPS: Final = frozenset({"tasks"})
_MIRRORED: Final = (PROTOCOL_VERSION_META_KEY, CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY,
                    LOG_LEVEL_META_KEY)


class Era(Enum):
    MODERN = "2026-07-28"  # passed through (docs/design/eras.md#one-url-two-eras)
    LEGACY = "2025-11-25"  # served in reverse


def era_of(configured: str, probed: UpstreamKind | None) -> Era:
    """``upstream_era``: a fixed era, or ``auto``, the start-up probe's verdict (only a 2025-era server found
    there is served in reverse; anything else keeps today's passthrough)."""
    if configured == "auto":
        return Era.LEGACY if probed is UpstreamKind.LEGACY else Era.MODERN
    return Era(configured)


@dataclass(frozen=True, slots=True)
class Request:
    """One validated 2026-07-28 request, as a view of the client's own dict."""

    ident: str | int
    method: str
    params: Mapping[str, Any]
    capabilities: Mapping[str, Any]
    client_info: Mapping[str, Any]
    log_level: str | None = None  # ``_meta`` logLevel: this request's opt-in to log messages


@dataclass(frozen=True, slots=True)
class Refused:
    """A request refused before it reaches the legacy server: its HTTP status and error."""

    status: int
    error: E.ErrorValue


def decode_header(value: str | None) -> str | None:
    """Undo the ``=?base64?...?=`` sentinel (2026-07-28 basic/transports §Value encoding); corrupt: None."""
    match = _SENTINEL.fullmatch(value) if value is not None else None
    if match is None:
        return value
    try:
        return base64.b64decode(match.group(1), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def _meta(params: object) -> Mapping[str, Any] | str:
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    if not isinstance(meta, Mapping) or not isinstance(meta.get(PROTOCOL_VERSION_META_KEY), str):
        return f"params._meta[{PROTOCOL_VERSION_META_KEY!r}] is required and must be a string"
    if not isinstance(meta.get(CLIENT_CAPABILITIES_META_KEY), Mapping):
        return f"params._meta[{CLIENT_CAPABILITIES_META_KEY!r}] is required and must be an object"
    info = meta.get(CLIENT_INFO_META_KEY)
    if info is not None and not isinstance(info, Mapping):
        return f"params._meta[{CLIENT_INFO_META_KEY!r}] must be an object"
    level = meta.get(LOG_LEVEL_META_KEY)
    if level is not None and level not in LOG_LEVELS:
        return f"params._meta[{LOG_LEVEL_META_KEY!r}] must be one of {list(LOG_LEVELS)}"
    return meta


def _bad(status: int, code: int, message: str, data: Any = None) -> Refused:
    return Refused(status, E.ErrorValue(code, message, data))


def validate(headers: Mapping[str, str], message: Mapping[str, Any],
             server_caps: Mapping[str, Any] | None) -> Request | Refused:
    """The 2026-07-28 ladder (headers keyed case-insensitively): HEADER_MISMATCH, INVALID_PARAMS, HEADER_MISMATCH,
    UNSUPPORTED_PROTOCOL_VERSION, HEADER_MISMATCH for ``Mcp-Method``/``Mcp-Name``, then METHOD_NOT_FOUND (404) for a
    method not relayed or not advertised by the server (``server_caps``: its initialize capabilities; None: not known
    yet, checked later)."""
    header = headers.get("mcp-protocol-version")
    if header is None:
        return _bad(400, HEADER_MISMATCH, "the MCP-Protocol-Version header is required")
    params, method = message.get("params"), message["method"]
    meta = _meta(params)
    if isinstance(meta, str):
        return _bad(400, E.INVALID_PARAMS, meta)
    assert isinstance(params, Mapping)
    version = meta[PROTOCOL_VERSION_META_KEY]
    if header != version:
        return _bad(400, HEADER_MISMATCH, "the MCP-Protocol-Version header does not match params._meta")
    if version not in SUPPORTED:
        return _bad(400, UNSUPPORTED_PROTOCOL_VERSION, f"unsupported protocol version {version!r}",
                    {"supported": list(SUPPORTED), "requested": version})
    routing = _routing(headers, method, params)
    if routing is not None:
        return routing
    if method not in RELAYED or not gated_open(method, server_caps):
        return _bad(404, E.METHOD_NOT_FOUND, f"method not found: {method}")
    return Request(message["id"], method, params, meta[CLIENT_CAPABILITIES_META_KEY],
                   meta.get(CLIENT_INFO_META_KEY) or {}, meta.get(LOG_LEVEL_META_KEY))


def _routing(headers: Mapping[str, str], method: str, params: Mapping[str, Any]) -> Refused | None:
    if headers.get("mcp-method") != method:
        return _bad(400, HEADER_MISMATCH, f"the Mcp-Method header must be present and equal {method!r}")
    key = NAME_PARAM.get(method) or TASK_NAME_PARAM.get(method)  # ext-tasks: Mcp-Name carries the taskId
    if key is None:
        return None
    value = params.get(key)
    if not isinstance(value, str):
        return _bad(400, E.INVALID_PARAMS, f"params.{key} must be a string")
    if decode_header(headers.get("mcp-name")) != value:
        return _bad(400, HEADER_MISMATCH, f"the Mcp-Name header must be present and equal params.{key}")
    return None


def param_header_refusal(header_map: Mapping[tuple[str, ...], str], arguments: object,
                         headers: Mapping[str, str]) -> Refused | None:
    """2026-07-28 basic/transports §Server validation: each argument a tool annotates with ``x-mcp-header`` is
    mirrored in ``Mcp-Param-<Name>`` (headers keyed lower-case): present, it must equal the sentinel-decoded header
    (booleans as ``true``/``false``, numbers compared numerically); absent or null, the header must be absent.
    ``header_map``: the tool's (adapters.upstream.x_mcp_header_map). Anything else is HEADER_MISMATCH."""
    for path, name in header_map.items():
        header, where = f"Mcp-Param-{name}", ".".join(path)
        value: object = arguments
        for step in path:
            value = value.get(step) if isinstance(value, Mapping) else None
        raw = headers.get(header.lower())
        if value is None:
            if raw is not None:
                return _bad(400, HEADER_MISMATCH, f"{header} was sent but argument {where!r} is absent")
            continue
        if raw is None:
            return _bad(400, HEADER_MISMATCH, f"argument {where!r} must be mirrored in the {header} header")
        decoded = decode_header(raw)
        if decoded is None or not _mirrors(value, decoded):
            return _bad(400, HEADER_MISMATCH, f"the {header} header does not match argument {where!r}")
    return None


def _mirrors(value: object, decoded: str) -> bool:
    if isinstance(value, bool):
        return decoded == ("true" if value else "false")
    if isinstance(value, (int, float)):
        try:  # 2026-07-28 server/tools §x-mcp-header: numbers compare by value ("42" mirrors 42.0)
            return decoded == decoded.strip() and float(decoded) == float(value)
        except ValueError:
            return False
    return isinstance(value, str) and decoded == value


def relayed_as_is(http_method: str, headers: Mapping[str, str], message: object) -> bool:
    """Whether a request at a reverse-bridged endpoint is a 2025-era one, relayed to the legacy server as it is
    (its own session, live requests and GET stream: 2025-11-25 basic/transports): every GET and DELETE, and a POST
    that is not a 2026-07-28 request (adapters.classify.is_modern: its header, ``_meta`` or ``server/discover``)."""
    if http_method != "POST":
        return True
    if not isinstance(message, Mapping) or not isinstance(message.get("method"), str) or "id" not in message:
        return True  # a response, a notification, a batch, or junk: the legacy server judges it
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    modern = (headers.get("mcp-protocol-version") == MODERN_VERSION or message["method"] == "server/discover"
              or (isinstance(meta, Mapping) and PROTOCOL_VERSION_META_KEY in meta))
    return not modern


def gated_open(method: str, server_caps: Mapping[str, Any] | None) -> bool:
    """Whether the legacy server advertised the capability ``method`` needs (unknown caps: not yet judged)."""
    need = RELAYED.get(method)
    return need is None or server_caps is None or isinstance(server_caps.get(need), Mapping)


def legacy_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """A 2026 request's params for the 2025 server: the protocol ``_meta`` keys (said once, at ``initialize``),
    the MRTR fields and a v1 ``task`` hint (not a 2026 field: whether a call runs as a 2025 task is the gateway's
    choice, adapters.reverse_tasks) removed; other ``_meta`` keys (``progressToken``, tracing, vendors') stay."""
    out = {k: v for k, v in params.items() if k not in ("_meta", "inputResponses", "requestState", "task")}
    meta = params.get("_meta")
    if isinstance(meta, Mapping):
        kept = {k: v for k, v in meta.items() if k not in _MIRRORED}
        if kept:
            out["_meta"] = kept
    return out


def initialize_params(capabilities: Mapping[str, Any], client_info: Mapping[str, Any]) -> dict[str, Any]:
    """The 2025-11-25 ``initialize`` params a pooled session opens with: the 2026 client's capabilities (roots
    without listChanged: 2026 has no roots/list_changed) and its clientInfo, or the gateway's name."""
    caps = {k: v for k, v in capabilities.items() if k in ("roots", "sampling", "elicitation", "experimental")}
    info = dict(client_info) if client_info.get("name") and client_info.get("version") else {
        "name": "mcp-legacy-gateway-reverse", "version": "1"}
    return {"protocolVersion": "2025-11-25", "capabilities": caps, "clientInfo": info}


def discover_result(initialized: Mapping[str, Any]) -> dict[str, Any]:
    """``server/discover`` (2026-07-28 server/discover) from the legacy server's ``initialize`` result."""
    caps = initialized.get("capabilities")
    caps = {k: v for k, v in caps.items() if k not in _LEGACY_ONLY_CAPS} if isinstance(caps, Mapping) else {}
    out: dict[str, Any] = {"resultType": "complete", "supportedVersions": list(SUPPORTED), "capabilities": caps,
                           **CACHE_FIELDS}
    if isinstance(initialized.get("instructions"), str):
        out["instructions"] = initialized["instructions"]
    info = initialized.get("serverInfo")
    if isinstance(info, Mapping):
        out["_meta"] = {SERVER_INFO_META_KEY: dict(info)}
    return out


def complete_result(method: str, result: object) -> dict[str, Any]:
    """A legacy result as a 2026 one: ``resultType`` "complete", and the cache fields where required."""
    out = dict(result) if isinstance(result, Mapping) else {}
    out["resultType"] = "complete"
    if method in CACHEABLE:
        out.update(CACHE_FIELDS)
    return out


# 2026-07-28 basic §Error Codes: the ladder's errors are 400, an unknown or removed method 404 (as modern_server).
_STATUS: Final[Mapping[int, int]] = {E.PARSE_ERROR: 400, E.INVALID_REQUEST: 400, E.INVALID_PARAMS: 400,
                                     HEADER_MISMATCH: 400, MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
                                     UNSUPPORTED_PROTOCOL_VERSION: 400, E.METHOD_NOT_FOUND: 404,
                                     E.INTERNAL_ERROR: 500}


def modern_status(code: int) -> int:
    """The HTTP status of a 2026 error answer; other codes (a tool's own) ride on 200."""
    return _STATUS.get(code, 200)


def modern_error(error: object) -> E.ErrorValue:
    """A legacy server's error for a 2026 client: RESOURCE_NOT_FOUND_2025 (resource not found) was retired for
    INVALID_PARAMS (2026-07-28 basic §Error Codes); codes in the band 2026 reserves (``E.reserved_2026``) are never
    passed on as they are."""
    if not isinstance(error, Mapping) or not isinstance(error.get("code"), int):
        return E.ErrorValue(E.INTERNAL_ERROR, "the upstream server sent a malformed error")
    code, message = error["code"], str(error.get("message", ""))
    if code == E.RESOURCE_NOT_FOUND_2025:
        code = E.INVALID_PARAMS
    elif E.reserved_2026(code):
        code = E.INTERNAL_ERROR
    return E.ErrorValue(code, message, error.get("data"))
