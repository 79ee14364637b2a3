"""Which door a legacy request came through, and what that door lets a client negotiate.

Owns the :class:`Transport` kinds (the migration telemetry's transport label), the door header by which the gateway's
own doors (stdio, HTTP+SSE, WebSocket: clients of the Streamable HTTP endpoint,
docs/design/doors.md#the-stdio-httpsse-and-websocket-doors-are-clients-of-the-streamable-http-door) tell the endpoint
which transport a message arrived on, the handshake revisions each door offers, and the refusal of a message too large
to read whole (:func:`too_large`), answered under the id its first bytes show.

The header is trusted only with the process's door key, a secret the doors share with the endpoint in memory: an
outside client sending it is read as Streamable HTTP, so it can neither take a revision its transport lacks nor pass
for another transport in the report
(docs/design/doors.md#doors-name-their-transport-2024-11-05-is-negotiated-on-the-doors-of-its-transports)."""

from __future__ import annotations

import hmac
import re
from enum import StrEnum
from typing import Final

from adapters.errors import INVALID_REQUEST
from adapters.jsonwire import JsonObject, JsonValue, loads
from adapters.protocol import LEGACY_VERSIONS, SSE_ERA_VERSION, is_request_id

DOOR_HEADER: Final = "X-Gateway-Door"
# How much of a message too large to read whole is searched for its id: an id after this many bytes (behind a
# large params) is not found, and the refusal's id is null, as for any unreadable message.
ID_SCAN_BYTES: Final = 16_384
_STRUCTURE = re.compile(rb'["{}\[\]]')
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_ID_VALUE = re.compile(rb'\s*:\s*("(?:[^"\\]|\\.)*"|-?[0-9]+)(?=\s*[,}])')


class Transport(StrEnum):
    STREAMABLE_HTTP = "streamable_http"
    HTTP_SSE = "http_sse"
    WEBSOCKET = "websocket"
    STDIO = "stdio"


def door_header(transport: Transport, key: str) -> str:
    """The header value a door sends on each of its requests to the endpoint."""
    return f"{transport.value} {key}"


def transport_of(value: str | None, key: str) -> Transport:
    """The transport a request came through: a door's, when its header carries this process's key, else
    Streamable HTTP (a client that reached ``/mcp`` directly)."""
    if not value or not key:
        return Transport.STREAMABLE_HTTP
    name, _, given = value.partition(" ")
    if not hmac.compare_digest(given.encode(), key.encode()):
        return Transport.STREAMABLE_HTTP
    try:
        return Transport(name)
    except ValueError:
        return Transport.STREAMABLE_HTTP


def offered_versions(transport: Transport, mcp_allows_2024: bool = False) -> tuple[str, ...]:
    """The handshake revisions a door negotiates, newest first.

    2024-11-05 defined two transports, stdio and HTTP with SSE (2024-11-05 basic/transports), so a client of
    that revision is served on those doors and on the WebSocket door (no revision defines one; its clients
    predate Streamable HTTP). Streamable HTTP arrived in 2025-03-26, so ``/mcp`` offers 2024-11-05 only when
    the configuration says so; otherwise such a client is offered the latest revision, as any unknown one is
    (2025-11-25 basic/lifecycle §Version Negotiation).
    """
    if transport is Transport.STREAMABLE_HTTP and not mcp_allows_2024:
        return LEGACY_VERSIONS
    return (*LEGACY_VERSIONS, SSE_ERA_VERSION)


def scan_id(prefix: bytes) -> JsonValue:
    """The request id of a JSON object whose first bytes are ``prefix``, read without parsing the rest: the value
    of its top-level ``"id"`` key when that is a whole string or integer inside ``prefix``, else None. Strings are
    skipped whole, so an ``"id"`` inside one, or in a nested object, is never taken for the message's."""
    depth, at = 0, 0
    while (mark := _STRUCTURE.search(prefix, at)) is not None:
        char, at = mark.group(), mark.start()
        if char != b'"':
            depth += 1 if char in (b"{", b"[") else -1
            at += 1
            continue
        string = _STRING.match(prefix, at)
        if string is None:  # cut off by the prefix
            return None
        at = string.end()
        if depth == 1 and string.group() == b'"id"' and (value := _ID_VALUE.match(prefix, at)) is not None:
            ident = loads(value.group(1))
            return ident if is_request_id(ident) else None
    return None


def too_large(prefix: bytes, limit: int) -> JsonObject:
    """The answer to a message over ``limit`` bytes (``max_request_bytes``, the endpoint's own bound) that a door
    did not read whole, under the id :func:`scan_id` finds in its first bytes (JSON-RPC 2.0 §5: null when it
    cannot be read). INVALID_REQUEST with the bound named, as the endpoint refuses such a body."""
    return {"jsonrpc": "2.0", "id": scan_id(prefix[:ID_SCAN_BYTES]),
            "error": {"code": INVALID_REQUEST, "message": f"message exceeds max_request_bytes ({limit} bytes)",
                      "data": {"limit": "max_request_bytes", "value": limit}}}
