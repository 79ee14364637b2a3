"""Which door a legacy request came through, and what that door lets a client negotiate.

Owns the :class:`Transport` kinds (the migration telemetry's transport label), the door header by which the
gateway's own doors (stdio, HTTP+SSE, WebSocket: clients of the Streamable HTTP endpoint, docs/design.md §35)
tell the endpoint which transport a message arrived on, and the handshake revisions each door offers.

The header is trusted only with the process's door key, a secret the doors share with the endpoint in memory:
an outside client sending it is read as Streamable HTTP, so it can neither take a revision its transport lacks
nor pass for another transport in the report (docs/design.md §43).
"""

from __future__ import annotations

import hmac
from enum import StrEnum
from typing import Final

from adapters.protocol import LEGACY_VERSIONS, SSE_ERA_VERSION

DOOR_HEADER: Final = "X-Gateway-Door"


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
