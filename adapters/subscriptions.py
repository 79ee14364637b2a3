"""Legacy ``resources/subscribe`` and unsolicited list_changed -> upstream ``subscriptions/listen``, and back
(2026-07-28 basic/patterns §Subscriptions; docs/design/streams.md#subscriptions-over-subscriptionslisten).

A listen filter cannot be edited, so a change of the subscribed set opens a new listen; the shell waits for its
acknowledgement and only then closes the old one (no gap in delivery). The acknowledged filter is the subset the
server will honour (2026-07-28 basic/patterns §Subscriptions): a listen that leaves out a subscribed URI is
not taken. Delivered notifications go onto the session's GET stream with ``subscriptionId`` stripped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from adapters.capabilities import BridgedFeatures, wants_listen
from adapters.errors import INVALID_PARAMS, ErrorValue, UpstreamFault, translate_upstream_error
from adapters.jsonwire import JsonArray, JsonObject, JsonValue, JsonView, members
from adapters.protocol import LOG_LEVELS, SUBSCRIPTION_ID_META_KEY

_DELIVERED = frozenset({
    "notifications/tools/list_changed", "notifications/prompts/list_changed",
    "notifications/resources/list_changed", "notifications/resources/updated",
})
ACK = "notifications/subscriptions/acknowledged"


def listen_filter(server_caps: JsonView | None, subscriptions: list[str],
                  features: BridgedFeatures) -> JsonObject:
    """The filter for a session: the list_changed families we claimed, plus the subscribed URIs."""
    out: JsonObject = {k: True for k, v in wants_listen(server_caps, features).items() if v}
    if subscriptions and features.resource_subscribe:
        out["resourceSubscriptions"] = [*sorted(set(subscriptions))]
    return out


def apply_subscribe(current: list[str], uri: str, subscribe: bool) -> list[str]:
    items = [u for u in current if u != uri]
    return sorted([*items, uri]) if subscribe else items


def apply_subscribes(current: list[str], changes: list[tuple[str, bool]]) -> list[str]:
    """Several queued (uri, subscribe?) changes, in the order they came: a later one for the same URI wins."""
    for uri, subscribe in changes:
        current = apply_subscribe(current, uri, subscribe)
    return current


def subscribe_uri(params: JsonValue) -> str | ErrorValue:
    uri = params.get("uri") if isinstance(params, Mapping) else None
    if not isinstance(uri, str) or not uri:
        return ErrorValue(INVALID_PARAMS, "params.uri must be a non-empty string")
    return uri


def is_ack(message: JsonView) -> bool:
    return message.get("method") == ACK


def listen_refusal(message: JsonView, listen_id: JsonValue) -> ErrorValue | None:
    """The upstream's JSON-RPC error answering our listen (unknown resource, auth...), as the legacy client is to
    see it; None for anything else. The id may be null: rejected before the id was read (2026-07-28 basic
    §Error Codes)."""
    error = message.get("error")
    if "method" in message or not isinstance(error, Mapping) or message.get("id") not in (None, listen_id):
        return None
    return translate_upstream_error(error)


def unhonoured(ack: JsonView, wanted: JsonView) -> list[str]:
    """The wanted ``resourceSubscriptions`` the acknowledgement's filter leaves out (2026-07-28 basic/patterns
    §Subscriptions). Left-out list_changed families are not counted: the session simply receives none of those."""
    params = ack.get("params")
    granted = params.get("notifications") if isinstance(params, Mapping) else None
    uris = granted.get("resourceSubscriptions") if isinstance(granted, Mapping) else None
    kept = {u for u in uris if isinstance(u, str)} if isinstance(uris, list) else set()
    asked = wanted.get("resourceSubscriptions")
    return [u for u in asked if isinstance(u, str) and u not in kept] if isinstance(asked, list) else []


def unhonoured_error(uris: list[str]) -> ErrorValue:
    # INVALID_PARAMS: the server chose not to watch these URIs; asking again the same way will not help.
    return ErrorValue(INVALID_PARAMS, f"the server does not honour a subscription to {', '.join(uris)}",
                      {"unhonouredUris": [*uris]})


# Failures of an acknowledged listen that re-opening may cure: the transport, not the upstream's answer. The
# server keeps no subscription state (2026-07-28 basic/patterns §Subscriptions), so a dropped listen is simply
# opened again.
_TRANSIENT = frozenset({UpstreamFault.STREAM_BROKEN, UpstreamFault.TIMEOUT, UpstreamFault.UNREACHABLE,
                        UpstreamFault.BUSY, UpstreamFault.HTTP_5XX})


def worth_retrying(error: ErrorValue) -> bool:
    """Whether a listen that failed after its first acknowledgement is opened again (with a backoff). An
    upstream that *answered* the listen with a refusal (a JSON-RPC error, an HTTP 4xx such as an expired
    token) would refuse the same request again, so that listen ends instead of retrying forever; the session
    keeps working and its next subscribe (or GET stream) opens a new listen, whose refusal that request sees."""
    data = error.data
    return isinstance(data, Mapping) and data.get("upstream") in _TRANSIENT


def without_uris(filter_: JsonView, uris: list[str]) -> JsonObject:
    """``filter_`` less the subscriptions to ``uris``: what a re-opened listen still honours."""
    out = dict(filter_)
    listed = out.pop("resourceSubscriptions", None)
    kept: JsonArray = [u for u in listed if u not in uris] if isinstance(listed, list) else []
    if kept:
        out["resourceSubscriptions"] = kept
    return out


def gateway_warning(log_level: str | None, text: str, data: JsonView) -> JsonObject | None:
    """A ``notifications/message`` from the gateway itself for the session's GET stream, or None: only to a
    session whose ``logging/setLevel`` admits warnings (2025-11-25 server/utilities/logging), since no other legacy
    message can tell a client that a subscription it was granted has stopped."""
    if log_level not in LOG_LEVELS or LOG_LEVELS.index(log_level) > LOG_LEVELS.index("warning"):
        return None
    return {"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "warning", "logger": "gateway", "data": {"message": text, **data}}}


def legacy_notification(message: JsonView) -> JsonObject | None:
    """A listen-stream notification for the GET stream, or None (ack, results, unknown methods)."""
    method = message.get("method")
    if method not in _DELIVERED or "id" in message:
        return None
    params = dict(members(message.get("params")))
    meta = params.pop("_meta", None)
    if isinstance(meta, Mapping):
        rest = {k: v for k, v in meta.items() if k != SUBSCRIPTION_ID_META_KEY}
        if rest:
            params["_meta"] = rest
    out: JsonObject = {"jsonrpc": "2.0", "method": method}
    if params:
        out["params"] = params
    return out


_STALE_LISTS: Final = {"notifications/tools/list_changed": "tools/list",
                      "notifications/prompts/list_changed": "prompts/list",
                      "notifications/resources/list_changed": "resources/list"}

def invalidates(message: JsonView) -> str | None:
    """Which cached method a delivered notification makes stale (2026-07-28 server/utilities §Caching: list_changed
    invalidates)."""
    return _STALE_LISTS.get(str(message.get("method")))
