"""The core's one error type and the one table that maps JSON-RPC error codes to HTTP statuses.

Every failure a handler or the validation ladder can produce is an :class:`McpError`; the HTTP shell turns it
into a response in exactly one place (``app._error_response``) using :data:`HTTP_STATUS`.
"""

from __future__ import annotations

from typing import Any

from mcp_types.jsonrpc import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
)

# Implementation-defined server-error band (JSON-RPC 2.0 §5.1): a bound of this server was reached. Like every
# application-defined code it rides on HTTP 200.
LIMIT_EXCEEDED = -32000

__all__ = [
    "HEADER_MISMATCH",
    "HTTP_STATUS",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "LIMIT_EXCEEDED",
    "METHOD_NOT_FOUND",
    "MISSING_REQUIRED_CLIENT_CAPABILITY",
    "PARSE_ERROR",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "McpError",
    "http_status",
]

# 2026-07-28 basic §Error Codes: the ladder's errors are 400, an unknown or removed method is 404.
# A -32602 raised by a tool about its own arguments is still a malformed request, so it keeps 400 too
# (the spec assigns no status there; one rule is easier to reason about than two). -32603 is a server fault.
HTTP_STATUS: dict[int, int] = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
    INTERNAL_ERROR: 500,
}


def http_status(code: int) -> int:
    """The HTTP status for a JSON-RPC error code; application-defined codes ride on 200."""
    return HTTP_STATUS.get(code, 200)


class McpError(Exception):
    """A JSON-RPC error the core answers with. ``data`` is sent only when not ``None``."""

    def __init__(self, code: int, message: str, data: Any = None, *, http: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.http = http if http is not None else http_status(code)

    def to_error(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error

    @classmethod
    def invalid_params(cls, message: str, data: Any = None) -> McpError:
        return cls(INVALID_PARAMS, message, data)

    @classmethod
    def missing_capability(cls, required: dict[str, Any], why: str) -> McpError:
        # -32021 data is an object keyed by capability (2026-07-28 basic §Error Codes and the
        # schema's MissingRequiredClientCapabilityError example).
        return cls(MISSING_REQUIRED_CLIENT_CAPABILITY, why, {"requiredCapabilities": required})
