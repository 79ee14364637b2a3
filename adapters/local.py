"""The method routing table for a legacy session and the answers the gateway gives itself (DIGEST §3 "local"
rows, §4.20: methods a 2026 server removed are answered here or translated, never forwarded).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from mcp_types.methods import validate_client_notification, validate_client_request

from adapters.errors import INVALID_PARAMS, METHOD_NOT_FOUND, ErrorValue
from adapters.protocol import FORWARDED_METHODS, LOG_LEVELS, MRTR_METHODS

REQUEST_ROUTES: Final = {
    "initialize": "initialize",
    "ping": "ping",
    "logging/setLevel": "set_level",
    "resources/subscribe": "subscribe",
    "resources/unsubscribe": "unsubscribe",
    **{m: "bridge" for m in MRTR_METHODS},
    **{m: "forward" for m in FORWARDED_METHODS - MRTR_METHODS},
}
# Client notifications never go upstream: 2026 defines none over HTTP (DIGEST §4.12).
NOTIFICATION_ROUTES: Final = {
    "notifications/initialized": "initialized",
    "notifications/cancelled": "cancelled",
    "notifications/roots/list_changed": "roots_changed",
}


def route_request(method: str) -> str:
    """``tasks/*`` and anything unknown end here as ``not_found`` (we advertise no tasks, DIGEST §3)."""
    return REQUEST_ROUTES.get(method, "not_found")


def route_notification(method: str) -> str:
    return NOTIFICATION_ROUTES.get(method, "ignore")


def not_found(method: str) -> ErrorValue:
    return ErrorValue(METHOD_NOT_FOUND, f"method not found: {method}")


def check_request(method: str, version: str, params: Any) -> ErrorValue | None:
    """Validate a legacy request against the negotiated revision's wire types (a view; nothing is rebuilt)."""
    try:
        validate_client_request(method, version, params if isinstance(params, Mapping) else None)
    except KeyError:
        return not_found(method)
    except ValueError as exc:  # pydantic.ValidationError is a ValueError
        detail = str(exc).splitlines()
        return ErrorValue(INVALID_PARAMS, f"invalid params for {method}: {detail[1] if len(detail) > 1 else ''}"
                          .rstrip(": "))
    return None


def check_notification(method: str, version: str, params: Any) -> bool:
    try:
        validate_client_notification(method, version, params if isinstance(params, Mapping) else None)
    except (KeyError, ValueError):
        return False
    return True


def set_level(params: Any) -> str | ErrorValue:
    """``logging/setLevel``: kept per session; invalid level -> -32602 (S25 server/utilities/logging)."""
    level = params.get("level") if isinstance(params, Mapping) else None
    if level not in LOG_LEVELS:
        return ErrorValue(INVALID_PARAMS, f"level must be one of {', '.join(LOG_LEVELS)}")
    return level


def cancelled_request_id(params: Any) -> Any:
    return params.get("requestId") if isinstance(params, Mapping) else None
