"""Version negotiation, capability translation, InitializeResult from server/discover, and cache policy."""

from __future__ import annotations

import pytest

from adapters.capabilities import BridgedFeatures, client_caps_to_modern, server_caps_to_legacy
from adapters.handshake import (
    SYNTHETIC_SERVER_INFO,
    build_initialize_result,
    cache_policy,
    check_discover,
    discover_cache_keys,
    server_info_of,
)
from adapters.protocol import negotiate_version
from tests import schema

INFO = {"name": "core", "version": "1.2.3"}


@pytest.mark.parametrize("requested,answer", [
    ("2025-11-25", "2025-11-25"), ("2025-06-18", "2025-06-18"), ("2025-03-26", "2025-03-26"),
    ("2024-11-05", "2025-11-25"), ("2026-07-28", "2025-11-25"), ("garbage", "2025-11-25"), (None, "2025-11-25"),
    (20251125, "2025-11-25"),
])
def test_version_negotiation(requested, answer) -> None:
    assert negotiate_version(requested) == answer


@pytest.mark.parametrize("legacy,modern", [
    ({}, {}),
    (None, {}),
    ({"roots": {"listChanged": True}}, {"roots": {}}),
    ({"roots": {}}, {"roots": {}}),
    ({"sampling": {"tools": {}, "context": {}}}, {"sampling": {"tools": {}, "context": {}}}),
    ({"elicitation": {"form": {}, "url": {}}}, {"elicitation": {"form": {}, "url": {}}}),
    ({"tasks": {"list": {}, "requests": {"sampling": {"createMessage": {}}}}}, {}),
    ({"experimental": {"x": {}},
      "extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}},
     {"experimental": {"x": {}},
      "extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}}),
    ({"roots": True, "sampling": "yes"}, {}),
])
def test_client_capabilities_2025_to_2026(legacy, modern) -> None:
    assert client_caps_to_modern(legacy) == modern


UPSTREAM_CAPS = {"tools": {"listChanged": True}, "prompts": {"listChanged": True},
                 "resources": {"subscribe": True, "listChanged": True}, "logging": {}, "completions": {},
                 "extensions": {"io.modelcontextprotocol/ui": {}}, "tasks": {"list": {}}}


@pytest.mark.parametrize("features,expected", [
    (BridgedFeatures(), {"tools": {"listChanged": True}, "prompts": {"listChanged": True},
                         "resources": {"subscribe": True, "listChanged": True}, "logging": {}, "completions": {},
                         "extensions": {"io.modelcontextprotocol/ui": {}}}),
    (BridgedFeatures(list_changed=False, resource_subscribe=False),
     {"tools": {}, "prompts": {}, "resources": {}, "logging": {}, "completions": {},
      "extensions": {"io.modelcontextprotocol/ui": {}}}),
])
def test_server_capabilities_claim_only_what_is_bridged_and_never_tasks(features, expected) -> None:
    assert server_caps_to_legacy(UPSTREAM_CAPS, features) == expected


def test_upstream_without_list_changed_is_not_claimed() -> None:
    caps = server_caps_to_legacy({"tools": {}, "resources": {"subscribe": False}}, BridgedFeatures())
    assert caps == {"tools": {}, "resources": {}}


@pytest.mark.parametrize("discover,expected", [
    ({"_meta": {"io.modelcontextprotocol/serverInfo": INFO}}, INFO),
    ({"serverInfo": INFO}, INFO),  # SEP-2575 draft placement (2026-07-28 server/discover)
    ({"_meta": {"io.modelcontextprotocol/serverInfo": INFO}, "serverInfo": {"name": "old", "version": "0"}}, INFO),
    ({}, SYNTHETIC_SERVER_INFO),
    ({"serverInfo": {"name": "no version"}}, SYNTHETIC_SERVER_INFO),
])
def test_server_info_sources(discover, expected) -> None:
    assert server_info_of(discover) == expected


def discover_result(**over):
    base = {"resultType": "complete", "supportedVersions": ["2026-07-28"], "capabilities": UPSTREAM_CAPS,
            "instructions": "Be nice.", "ttlMs": 60000, "cacheScope": "public",
            "_meta": {"io.modelcontextprotocol/serverInfo": INFO}}
    base.update(over)
    return base


@pytest.mark.parametrize("requested", ["2025-11-25", "2025-06-18", "2025-03-26", "2099-01-01"])
def test_initialize_result_is_a_valid_2025_result(requested) -> None:
    result = build_initialize_result(discover_result(), requested, BridgedFeatures())
    assert result["protocolVersion"] == negotiate_version(requested)
    assert result["serverInfo"] == INFO and result["instructions"] == "Be nice."
    assert "tasks" not in result["capabilities"]
    schema.check("2025-11-25", {"jsonrpc": "2.0", "id": 1, "result": result}, "initialize")


def test_initialize_without_instructions() -> None:
    result = build_initialize_result(discover_result(instructions=None), "2025-11-25", BridgedFeatures())
    assert "instructions" not in result


@pytest.mark.parametrize("discover,ok", [
    (discover_result(), True),
    (discover_result(supportedVersions=["2099-01-01"]), False),
    ("nope", False),
])
def test_check_discover(discover, ok) -> None:
    assert (check_discover(discover) is None) == ok


@pytest.mark.parametrize("result,key,expires", [
    ({"ttlMs": 5000, "cacheScope": "public"}, "m|public", 1005000),
    ({"ttlMs": 5000, "cacheScope": "private"}, "m|private|p", 1005000),
    ({"ttlMs": 5000}, "m|private|p", 1005000),  # unknown scope: never shared
    ({"ttlMs": -5, "cacheScope": "public"}, "m|public", 1000000),  # negative = 0
    ({}, "m|private|p", 1000000),  # absent = 0 (older servers)
])
def test_cache_policy(result, key, expires) -> None:
    policy = cache_policy(result, "p", 1_000_000, "m")
    assert (policy.key, policy.expires_ms) == (key, expires)
    assert policy.fresh(1_000_000) == (expires > 1_000_000) and not policy.fresh(expires)


def test_private_discover_is_looked_up_per_principal_first() -> None:
    assert discover_cache_keys("alice") == ("server/discover|private|alice", "server/discover|public")


def test_the_tasks_extension_is_not_offered_to_legacy_clients() -> None:
    """The gateway drives the upstream's tasks itself
    (docs/design/bridge.md#tasks-the-gateway-drives-them-or-maps-them-onto-2025-tasks); other extensions pass."""
    ui = {"mimeTypes": ["text/html;profile=mcp-app"]}
    caps = {"tools": {}, "extensions": {"io.modelcontextprotocol/tasks": {}, "io.modelcontextprotocol/ui": ui}}
    assert server_caps_to_legacy(caps, BridgedFeatures())["extensions"] == {"io.modelcontextprotocol/ui": ui}
    assert "extensions" not in server_caps_to_legacy({"extensions": {"io.modelcontextprotocol/tasks": {}}},
                                                     BridgedFeatures())
