"""Revision constants, method families and legacy version negotiation (2025-11-25 basic/lifecycle §Version
Negotiation; which methods the gateway answers itself, forwards or bridges: docs/design/eras.md#one-url-two-eras).

Owns the answers to "which revision", "which method goes where" and "which version do we echo".
"""

from __future__ import annotations

from typing import Final, TypeGuard

from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    LOG_LEVEL_META_KEY,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
)

__all__ = [
    "CLIENT_CAPABILITIES_META_KEY",
    "CLIENT_INFO_META_KEY",
    "LOG_LEVEL_META_KEY",
    "PROTOCOL_VERSION_META_KEY",
    "SERVER_INFO_META_KEY",
]

MODERN_VERSION: Final = "2026-07-28"
# The legacy revisions the gateway speaks on Streamable HTTP, newest first.
LEGACY_VERSIONS: Final[tuple[str, ...]] = ("2025-11-25", "2025-06-18", "2025-03-26")
# The HTTP+SSE transport's revision (2024-11-05 basic/transports): negotiated on the doors whose transport it
# defined, not on /mcp unless configured (adapters.doors.offered_versions).
SSE_ERA_VERSION: Final = "2024-11-05"
# Every revision reachable through the initialize handshake.
HANDSHAKE_VERSIONS: Final[tuple[str, ...]] = (*LEGACY_VERSIONS, SSE_ERA_VERSION)
LATEST_LEGACY: Final = LEGACY_VERSIONS[0]
# 2025-11-25 basic/transports §Protocol Version Header: a missing header means 2025-03-26 when not otherwise known.
DEFAULT_HEADER_VERSION: Final = "2025-03-26"
# 2025-03-26 basic §Batching: a 2025-03-26 server MUST accept JSON-RPC batches; 2025-06-18 removed them.
BATCH_VERSIONS: Final = frozenset({"2025-03-26"})
MAX_BATCH: Final = 64  # elements per batch: one POST must not start unbounded work (a gateway limit)

SUBSCRIPTION_ID_META_KEY: Final = "io.modelcontextprotocol/subscriptionId"
GATEWAY_META_PREFIX: Final = "dev.legacy-gateway/"  # our own vendor prefix (2026-07-28 basic §_meta)

# Methods that may answer input_required (2026-07-28 basic/patterns §Multi Round-Trip Requests).
MRTR_METHODS: Final = frozenset({"tools/call", "prompts/get", "resources/read"})
# Methods forwarded upstream 1:1: their 2026-07-28 form is the 2025-11-25 one plus _meta.
FORWARDED_METHODS: Final = frozenset(
    {"tools/list", "prompts/list", "resources/list", "resources/templates/list", "completion/complete"}
) | MRTR_METHODS
# streamable-http §Request headers: the params key mirrored into Mcp-Name.
NAME_PARAM: Final = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
# The same for the tasks extension's requests (io.modelcontextprotocol/tasks): Mcp-Name carries the taskId.
TASK_NAME_PARAM: Final = {"tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}
# Server -> client request methods an upstream input request may carry (2026-07-28 basic/patterns
# §Multi Round-Trip Requests).
INPUT_REQUEST_METHODS: Final = frozenset({"sampling/createMessage", "elicitation/create", "roots/list"})
LOG_LEVELS: Final = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


def is_request_id(value: object) -> TypeGuard[str | int]:
    """A JSON-RPC id the gateway takes: a string or an integer (MCP: ``RequestId = string | number``; the gateway
    reads only integral numbers, and never a bool, which Python counts as an int)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def negotiate_version(requested: object, offered: tuple[str, ...] = LEGACY_VERSIONS) -> str:
    """Echo the client's version when we speak it (among ``offered``, the door's), else offer the latest legacy
    one (2025-11-25 basic/lifecycle)."""
    if isinstance(requested, str) and requested in offered:
        return requested
    return LATEST_LEGACY


def is_legacy_version(value: object) -> bool:
    return isinstance(value, str) and value in HANDSHAKE_VERSIONS
