"""``initialize`` answered locally from the upstream's ``server/discover`` (2025-11-25 basic/lifecycle
§Initialization, 2026-07-28 server/discover), and the discover cache policy (2026-07-28 server/utilities §Caching).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapters.capabilities import BridgedFeatures, server_caps_to_legacy
from adapters.errors import ErrorValue, UpstreamFault, upstream_failure
from adapters.legacy_tasks import enabled as legacy_tasks_enabled
from adapters.protocol import LEGACY_VERSIONS, MODERN_VERSION, SERVER_INFO_META_KEY, negotiate_version

# serverInfo is required in 2025 (2025-11-25 schema InitializeResult); when the upstream reports none we say who we are.
SYNTHETIC_SERVER_INFO = {"name": "mcp-legacy-gateway", "version": "0.1.0"}


def server_info_of(discover: Mapping[str, Any]) -> dict[str, Any]:
    """serverInfo from result ``_meta`` (final spec), else top-level (SEP-2575 draft), else synthesized."""
    meta = discover.get("_meta")
    for candidate in (meta.get(SERVER_INFO_META_KEY) if isinstance(meta, Mapping) else None,
                      discover.get("serverInfo")):
        if isinstance(candidate, Mapping) and isinstance(candidate.get("name"), str) \
                and isinstance(candidate.get("version"), str):
            return dict(candidate)
    return dict(SYNTHETIC_SERVER_INFO)


def check_discover(discover: Any) -> ErrorValue | None:
    """A discover result we can build a handshake from, or why not."""
    if not isinstance(discover, Mapping):
        return upstream_failure(UpstreamFault.INVALID_RESPONSE, "server/discover did not return an object")
    versions = discover.get("supportedVersions")
    if not isinstance(versions, list) or MODERN_VERSION not in versions:
        return upstream_failure(UpstreamFault.UNSUPPORTED_VERSION, f"the upstream does not list {MODERN_VERSION}")
    return None


def build_initialize_result(discover: Mapping[str, Any], requested_version: Any, features: BridgedFeatures,
                            offered: tuple[str, ...] = LEGACY_VERSIONS,
                            client_capabilities: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``offered``: the revisions the client's door negotiates (adapters.doors.offered_versions);
    ``client_capabilities``: the client's, as kept for its session (2025 tasks are offered only to a client that
    declared them: adapters.legacy_tasks)."""
    version = negotiate_version(requested_version, offered)
    tasks = legacy_tasks_enabled(client_capabilities, discover.get("capabilities"), version)
    result: dict[str, Any] = {
        "protocolVersion": version,
        "capabilities": server_caps_to_legacy(discover.get("capabilities"), features, tasks),
        "serverInfo": server_info_of(discover),
    }
    if isinstance(discover.get("instructions"), str):
        result["instructions"] = discover["instructions"]
    return result


@dataclass(frozen=True, slots=True)
class CachePolicy:
    """Where and until when a cacheable result may be reused."""

    key: str
    expires_ms: int

    def fresh(self, now_ms: int) -> bool:
        return now_ms < self.expires_ms


def cache_policy(result: Mapping[str, Any], principal: str, received_ms: int, name: str) -> CachePolicy:
    """2026-07-28 server/utilities §Caching: absent/negative ttl = 0 (stale at once); ``private`` never leaves the
    authorization context (the gateway is a shared intermediary); unknown scope = private."""
    ttl = result.get("ttlMs")
    ttl = ttl if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl > 0 else 0
    scope = "public" if result.get("cacheScope") == "public" else "private"
    key = f"{name}|public" if scope == "public" else f"{name}|private|{principal}"
    return CachePolicy(key, received_ms + ttl)


def discover_cache_keys(principal: str) -> tuple[str, str]:
    """Lookup order for a cached discover: this principal's private entry, then the public one."""
    return (f"server/discover|private|{principal}", "server/discover|public")
