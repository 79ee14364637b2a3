"""The reverse bridge's change notifications and log levels
(docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge): a 2026-07-28 ``subscriptions/listen``
served from a pooled 2025-11-25 session's GET stream and ``resources/subscribe``, and the per-request ``_meta`` logLevel
served by the session's ``logging/setLevel``.

A legacy session says its changes unsolicited, once per session (2025-11-25 server/tools, server/resources
§Subscriptions); a 2026 client opts into each kind per listen stream and gets only those (2026-07-28 basic/patterns
§Subscriptions). A legacy session has one log level (2025-11-25 server/utilities/logging); a 2026 request says its
own (2026-07-28 server/utilities/logging). These rules decide what the session is asked and what each stream gets;
the shell (gateway.http.reverse) performs them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from adapters import errors as E
from adapters.errors import ErrorValue
from adapters.jsonwire import JsonArray, JsonObject, JsonValue, JsonView
from adapters.protocol import LOG_LEVELS, SUBSCRIPTION_ID_META_KEY

ACK: Final = "notifications/subscriptions/acknowledged"
UPDATED: Final = "notifications/resources/updated"
LOG_MESSAGE: Final = "notifications/message"
# Each 2026 filter flag: the legacy server capability that must say ``listChanged`` for it to be honoured, and the
# notification it lets through (2026-07-28 schema SubscriptionFilter; 2025-11-25 ServerCapabilities).
FLAGS: Final[Mapping[str, tuple[str, str]]] = {
    "toolsListChanged": ("tools", "notifications/tools/list_changed"),
    "promptsListChanged": ("prompts", "notifications/prompts/list_changed"),
    "resourcesListChanged": ("resources", "notifications/resources/list_changed"),
}
SUBSCRIPTIONS: Final = "resourceSubscriptions"
_BY_METHOD: Final = {method: flag for flag, (_, method) in FLAGS.items()}


# --- subscriptions/listen --------------------------------------------------------------------------------
def wanted(params: JsonView) -> JsonView | ErrorValue:
    """The listen's ``notifications`` filter, or INVALID_PARAMS when it is not one (2026-07-28 schema
    SubscriptionsListenRequestParams: required, an object; ``resourceSubscriptions`` a list of URIs)."""
    filt = params.get("notifications")
    if not isinstance(filt, Mapping):
        return ErrorValue(E.INVALID_PARAMS, "params.notifications is required and must be an object")
    uris = filt.get(SUBSCRIPTIONS, [])
    if not isinstance(uris, list) or not all(isinstance(u, str) for u in uris):
        return ErrorValue(E.INVALID_PARAMS, f"params.notifications.{SUBSCRIPTIONS} must be a list of URIs")
    return filt


def honoured(filt: JsonView, server_caps: JsonView) -> JsonObject:
    """The subset the legacy server can serve: a list flag when its capability says ``listChanged``, resource
    URIs when ``resources.subscribe`` (2025-11-25 server/resources §Capabilities); the rest is not promised
    (2026-07-28 basic/patterns §Subscriptions: the acknowledgement names what the server will honour)."""
    out: JsonObject = {}
    for flag, (cap, _) in FLAGS.items():
        given = server_caps.get(cap)
        if filt.get(flag) is True and isinstance(given, Mapping) and given.get("listChanged") is True:
            out[flag] = True
    resources = server_caps.get("resources")
    uris: JsonArray = [*dict.fromkeys(subscriptions(filt))]  # each once, in the client's order
    if uris and isinstance(resources, Mapping) and resources.get("subscribe") is True:
        out[SUBSCRIPTIONS] = uris
    return out


def subscriptions(filt: JsonView) -> list[str]:
    """The resource URIs a filter names (:func:`wanted` checked the client's are all strings)."""
    uris = filt.get(SUBSCRIPTIONS)
    return [u for u in uris if isinstance(u, str)] if isinstance(uris, list) else []


def acknowledged(honour: JsonView, subscribed: Iterable[str]) -> JsonObject:
    """What the acknowledgement promises once the legacy server took (answered) the ``resources/subscribe`` of
    ``subscribed``: a URI it refused is not promised."""
    taken = set(subscribed)
    out = {k: v for k, v in honour.items() if k != SUBSCRIPTIONS}
    uris: JsonArray = [u for u in subscriptions(honour) if u in taken]
    if uris:
        out[SUBSCRIPTIONS] = uris
    return out


def notification(listen_id: JsonValue, method: str, params: JsonView | None = None) -> JsonObject:
    """A message of the listen stream: every one carries the listen's id as ``_meta`` subscriptionId
    (2026-07-28 schema NotificationMetaObject)."""
    return {"jsonrpc": "2.0", "method": method,
            "params": {**(params or {}), "_meta": {SUBSCRIPTION_ID_META_KEY: listen_id}}}


def ack(listen_id: JsonValue, honour: JsonView) -> JsonObject:
    """The stream's first message (2026-07-28 basic/patterns §Subscriptions)."""
    return notification(listen_id, ACK, {"notifications": dict(honour)})


def delivered(honour: JsonView, listen_id: JsonValue, message: JsonView) -> JsonObject | None:
    """A legacy session's notification for one listen stream, or None when the stream did not opt into it. Log
    messages and progress are request-scoped and never go here (2026-07-28 server/utilities/logging)."""
    method, params = message.get("method"), message.get("params")
    params = params if isinstance(params, Mapping) else {}
    flag = _BY_METHOD.get(method) if isinstance(method, str) else None
    if flag is not None and honour.get(flag) is True:
        return notification(listen_id, str(method), {k: v for k, v in params.items() if k != "_meta"})
    if method == UPDATED and _watched(subscriptions(honour), params.get("uri")):
        return notification(listen_id, UPDATED, {"uri": params["uri"]})
    return None


def _watched(uris: Iterable[str], uri: JsonValue) -> bool:
    """The updated URI is a watched one or lies under it (2026-07-28 basic/patterns §Subscriptions: it may name a
    sub-resource)."""
    return isinstance(uri, str) and any(uri == w or uri.startswith(w.rstrip("/") + "/") for w in uris)


def ended(listen_id: JsonValue) -> JsonObject:
    """The listen's own answer when the gateway ends it gracefully (the legacy session's GET stream ended):
    2026-07-28 basic/patterns §Subscriptions, "a normal result" carrying the subscription id."""
    return {"resultType": "complete", "_meta": {SUBSCRIPTION_ID_META_KEY: listen_id}}


def subscribe(counts: Mapping[str, int], uris: Iterable[str]) -> tuple[dict[str, int], tuple[str, ...]]:
    """One more listen of a session watches ``uris``: the new counts, and the URIs the session must now
    ``resources/subscribe`` (those no other listen of it watches: a legacy subscription is per session)."""
    out, first = dict(counts), []
    for uri in uris:
        if out.get(uri, 0) == 0:
            first.append(uri)
        out[uri] = out.get(uri, 0) + 1
    return out, tuple(first)


def unsubscribe(counts: Mapping[str, int], uris: Iterable[str]) -> tuple[dict[str, int], tuple[str, ...]]:
    """A listen that watched ``uris`` ended: the new counts, and the URIs no listen of the session watches any
    more (``resources/unsubscribe``)."""
    out, last = dict(counts), []
    for uri in uris:
        left = out.get(uri, 0) - 1
        if left <= 0:
            out.pop(uri, None)
            if uri in counts:
                last.append(uri)
        else:
            out[uri] = left
    return out, tuple(last)


# --- log levels ------------------------------------------------------------------------------------------
def severity(level: JsonValue) -> int:
    """RFC 5424 order, least severe first (2025-11-25 server/utilities/logging); unknown: the most severe."""
    return LOG_LEVELS.index(level) if level in LOG_LEVELS else len(LOG_LEVELS)


def level_to_set(current: str | None, wanted_levels: Iterable[str]) -> str | None:
    """The level the session must be set to for the requests in progress on it (each says its own; the session
    has one): the most verbose they want, sent only when it differs from the session's; None: leave it."""
    levels = [lv for lv in wanted_levels if lv in LOG_LEVELS]
    if not levels:
        return None
    target = min(levels, key=severity)
    return None if target == current else target


def log_wanted(message_level: JsonValue, request_level: str | None) -> bool:
    """A log message reaches a request that opted in (2026-07-28 server/utilities/logging: none without
    ``_meta`` logLevel) at or above its level."""
    return request_level is not None and severity(message_level) >= severity(request_level) \
        and message_level in LOG_LEVELS
