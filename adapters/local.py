"""The method routing table for a legacy session and the answers the gateway gives itself: the
methods 2026-07-28 removed (2026-07-28 changelog) are answered here or translated, never forwarded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from mcp_types.methods import validate_client_notification, validate_client_request

from adapters.errors import INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, ErrorValue
from adapters.jsonwire import JsonObject, JsonView
from adapters.protocol import FORWARDED_METHODS, LOG_LEVELS, MRTR_METHODS, is_request_id

REQUEST_ROUTES: Final = {
    "initialize": "initialize",
    "ping": "ping",
    "logging/setLevel": "set_level",
    "resources/subscribe": "subscribe",
    "resources/unsubscribe": "unsubscribe",
    **{m: "bridge" for m in MRTR_METHODS},
    **{m: "forward" for m in FORWARDED_METHODS - MRTR_METHODS},
}
# Client notifications never go upstream: 2026 defines none over HTTP (2026-07-28
# basic/transports §Streamable HTTP).
NOTIFICATION_ROUTES: Final = {
    "notifications/initialized": "initialized",
    "notifications/cancelled": "cancelled",
    "notifications/roots/list_changed": "roots_changed",
}


def route_request(method: str) -> str:
    """``tasks/*`` and anything unknown end here as ``not_found``: a session offered 2025 tasks has its
    ``tasks/*`` decided before this (adapters.legacy_tasks,
    docs/design/bridge.md#tasks-the-gateway-drives-them-or-maps-them-onto-2025-tasks)."""
    return REQUEST_ROUTES.get(method, "not_found")


def route_notification(method: str) -> str:
    return NOTIFICATION_ROUTES.get(method, "ignore")


def not_found(method: str) -> ErrorValue:
    return ErrorValue(METHOD_NOT_FOUND, f"method not found: {method}")


def check_request(method: str, version: str, params: object) -> ErrorValue | None:
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


def check_notification(method: str, version: str, params: object) -> bool:
    try:
        validate_client_notification(method, version, params if isinstance(params, Mapping) else None)
    except (KeyError, ValueError):
        return False
    return True


def set_level(params: object) -> str | ErrorValue:
    """``logging/setLevel``: kept per session; invalid level -> INVALID_PARAMS (2025-11-25 server/utilities/logging)."""
    level = params.get("level") if isinstance(params, Mapping) else None
    if not isinstance(level, str) or level not in LOG_LEVELS:
        return ErrorValue(INVALID_PARAMS, f"level must be one of {', '.join(LOG_LEVELS)}")
    return level


@dataclass(frozen=True, slots=True)
class CancelRequest:
    """What a valid ``notifications/cancelled`` asks: stop ``request_id`` (a string or an integer, the only ids
    the gateway ever accepts for a request), for ``reason`` when the client gave one as text."""

    request_id: str | int
    reason: str | None = None


def cancel_request(params: object) -> CancelRequest | None:
    """The cancel a ``notifications/cancelled`` asks for, or None when it names no valid request id.

    Choice: an invalid cancellation (``requestId`` missing, or an array, object, bool, float or null) is
    *ignored* (202, nothing cancelled) rather than refused with 400: 2025-11-25 basic/utilities/cancellation
    §Error Handling says invalid cancellation notifications SHOULD be ignored, and a notification has no id to
    answer an error to. A non-text ``reason`` is dropped, not fatal: the request is still cancelled."""
    if not isinstance(params, Mapping):
        return None
    ident, reason = params.get("requestId"), params.get("reason")
    if not isinstance(ident, (str, int)) or not is_request_id(ident):
        return None  # also keeps unhashable values out of the id-keyed exchange table
    return CancelRequest(ident, reason if isinstance(reason, str) else None)


# --- what a legacy request on a session becomes ----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Reply:
    """Answered here, at once: ``result``, or ``error`` when it is not None."""

    result: JsonObject | None = None
    error: ErrorValue | None = None


@dataclass(frozen=True, slots=True)
class SetLevel:
    """``logging/setLevel``: keep ``level`` in the session record, then answer ``{}``."""

    level: str


@dataclass(frozen=True, slots=True)
class ChangeSubscription:
    """``resources/subscribe`` (``subscribe``) or ``unsubscribe``: change the session's listen, then answer."""

    params: JsonView
    subscribe: bool


@dataclass(frozen=True, slots=True)
class Forward:
    """Sent upstream through a bridge exchange."""


Decision = Reply | SetLevel | ChangeSubscription | Forward
_ALREADY = ErrorValue(INVALID_REQUEST, "the session is already initialized")


def decide(method: str, params: object, version: str) -> Decision:
    """What the gateway does with a request on a live session (a session past its peer's sunset is refused before
    this). ``ping`` is answered here (2026-07-28 removed it); unknown and ``tasks/*`` methods are METHOD_NOT_FOUND (a
    session offered 2025 tasks has those decided before: adapters.legacy_tasks); anything else is checked
    against the session's revision before it goes anywhere."""
    route = route_request(method)
    if route == "ping":
        return Reply({})
    if route in ("not_found", "initialize"):
        return Reply(error=not_found(method) if route == "not_found" else _ALREADY)
    problem = check_request(method, version, params)
    if problem is not None:
        return Reply(error=problem)
    if route == "set_level":
        level = set_level(params)
        return Reply(error=level) if isinstance(level, ErrorValue) else SetLevel(level)
    if route in ("subscribe", "unsubscribe"):
        return ChangeSubscription(params if isinstance(params, Mapping) else {}, route == "subscribe")
    return Forward()
