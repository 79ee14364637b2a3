"""Capability translation in both directions (2025-11-25 basic/lifecycle §Capability
Negotiation, 2026-07-28 basic §_meta, server/discover).

Client (2025 -> 2026): ``roots{listChanged}`` -> ``roots{}``; ``sampling``/``elicitation`` kept; ``tasks`` dropped (the
gateway drives upstream tasks itself, docs/design/bridge.md#tasks-the-gateway-drives-them-or-maps-them-onto-2025-tasks);
``experimental``/``extensions`` passed through (MCP Apps declares ``extensions["io.modelcontextprotocol/ui"]`` in
initialize capabilities).

Server (2026 -> 2025): ``extensions`` travel inside ``capabilities``; ``listChanged``/``subscribe`` are only
claimed when the upstream offers them AND the gateway bridges them through ``subscriptions/listen``; ``tasks``
(2025-11-25 basic/utilities/tasks) only to a client that declared ``tasks`` itself, backed by the upstream's tasks
extension (adapters.legacy_tasks).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from adapters.jsonwire import JsonObject, JsonValue, JsonView
from adapters.legacy_tasks import capability as legacy_task_capability
from adapters.task_poll import EXTENSION as TASKS_EXTENSION
from adapters.task_poll import offered

_PASS_THROUGH_CLIENT = ("sampling", "elicitation", "experimental", "extensions")


@dataclass(frozen=True, slots=True)
class BridgedFeatures:
    """What the gateway bridges onto the legacy GET stream; only these may be claimed downstream."""

    list_changed: bool = True
    resource_subscribe: bool = True


def client_caps_to_modern(caps: JsonView | None) -> JsonObject:
    """The per-request ``clientCapabilities`` sent upstream for a legacy session (capabilities
    travel on every request in 2026-07-28: basic §_meta)."""
    caps = caps if isinstance(caps, Mapping) else {}
    out: JsonObject = {}
    if isinstance(caps.get("roots"), Mapping):
        out["roots"] = {}  # 2026 roots has no listChanged (2026-07-28 client/roots)
    for key in _PASS_THROUGH_CLIENT:
        value = caps.get(key)
        if isinstance(value, Mapping):
            out[key] = dict(value)
    return out


def _flag(section: JsonValue, name: str) -> bool:
    return isinstance(section, Mapping) and section.get(name) is True


def _list_section(section: JsonValue, claim_list_changed: bool, extra: JsonObject | None = None) -> JsonObject:
    out: JsonObject = dict(extra or {})
    if claim_list_changed and _flag(section, "listChanged"):
        out["listChanged"] = True
    return out


def server_caps_to_legacy(caps: JsonView | None, features: BridgedFeatures,
                          client_tasks: bool = False) -> JsonObject:
    """The ``InitializeResult.capabilities`` for a 2026 upstream's discovered capabilities; ``client_tasks``:
    the client declared 2025 tasks (adapters.legacy_tasks.enabled then says whether they are offered)."""
    caps = caps if isinstance(caps, Mapping) else {}
    out: JsonObject = {}
    for name in ("tools", "prompts"):
        if isinstance(caps.get(name), Mapping):
            out[name] = _list_section(caps[name], features.list_changed)
    if isinstance(caps.get("resources"), Mapping):
        subscribe = features.resource_subscribe and _flag(caps["resources"], "subscribe")
        sub: JsonObject = {"subscribe": True} if subscribe else {}
        out["resources"] = _list_section(caps["resources"], features.list_changed, sub)
    # logging/setLevel is answered locally and mapped to the per-request logLevel, so logging is claimed
    # whenever the upstream emits logs at all.
    for name in ("logging", "completions", "experimental", "extensions"):
        if isinstance(section := caps.get(name), Mapping):
            out[name] = dict(section)
    # The tasks extension is the gateway's to use (it drives the upstream's tasks,
    # docs/design/bridge.md#tasks-the-gateway-drives-them-or-maps-them-onto-2025-tasks); a client that speaks 2025 tasks
    # is offered those instead, backed by it.
    if client_tasks and offered(caps):
        out["tasks"] = legacy_task_capability()
    extensions = out.get("extensions")
    if isinstance(extensions, dict):
        extensions.pop(TASKS_EXTENSION, None)
        if not extensions:
            del out["extensions"]
    return out


def wants_listen(caps: JsonView | None, features: BridgedFeatures) -> dict[str, bool]:
    """Which list_changed families the session's listen should ask for (only those we claimed)."""
    legacy = server_caps_to_legacy(caps, features)
    return {
        "toolsListChanged": _flag(legacy.get("tools"), "listChanged"),
        "promptsListChanged": _flag(legacy.get("prompts"), "listChanged"),
        "resourcesListChanged": _flag(legacy.get("resources"), "listChanged"),
    }
