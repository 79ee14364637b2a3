"""Version negotiation, capability translation, InitializeResult from server/discover, cache policy, and the
handshake's order as a pure machine."""

from __future__ import annotations

import pytest

from adapters import errors as E
from adapters import handshake as H
from adapters.admission import SessionLimits
from adapters.capabilities import BridgedFeatures, client_caps_to_modern, server_caps_to_legacy
from adapters.handshake import (
    SYNTHETIC_SERVER_INFO,
    build_initialize_result,
    cache_policy,
    check_discover,
    discover_cache_keys,
    server_info_of,
)
from adapters.peers import Peer
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


# --- the handshake's order (adapters.handshake.Handshake), event by event, with no event loop -------------------------
LIMITS = SessionLimits(max_sessions=10, max_sessions_per_principal=4, max_unverified_sessions=3)
PEER = Peer("default")


def handshake(verified: bool = True, peer: Peer = PEER) -> H.Handshake:
    return H.Handshake(H.HandshakeContext(7, "sid-1", "alice", peer, "2025-11-25", {"roots": {"listChanged": True}},
                                          {"name": "c", "version": "1"}, "default", BridgedFeatures(), LIMITS,
                                          verified, "2026-12-07"))


def admitting(verified: bool = True, peer: Peer = PEER) -> H.Handshake:
    """A handshake past its discover (a cached one), waiting for the counts."""
    machine = handshake(verified, peer)
    assert machine.start(discover_result(), 1000) == [H.SweepExpired(), *([H.Verify("alice")] if verified else []),
                                                      H.CountSessions("alice")]
    assert machine.step is H.HandshakeStep.ADMIT
    return machine


def saving(verified: bool = True, unverified: int | None = None, peer: Peer = PEER) -> H.Handshake:
    """A handshake admitted on the counts before its write, waiting for the counts after it (``unverified``: an
    unverified principal's, counted again after the write)."""
    machine = admitting(verified, peer)
    (save,) = machine.handle(H.Counted(1, 1, unverified))
    assert isinstance(save, H.SaveSession) and machine.step is H.HandshakeStep.SAVE
    assert save.count_unverified == (unverified is not None)
    return machine


def test_a_cached_discover_is_not_fetched_again_and_the_session_is_counted_after_the_sweep() -> None:
    """start -> ADMIT: the sweep goes first (each new session pays for ending the expired ones), the principal the
    gateway vouches for is verified, and the counts come last, after every other wait."""
    admitting(verified=True)
    admitting(verified=False)


def test_without_a_cached_discover_the_upstream_is_asked() -> None:
    machine = handshake()
    assert machine.start(None, 1000) == [H.FetchDiscover()] and machine.step is H.HandshakeStep.DISCOVER
    assert machine.start(None, 1000) == []  # started once


@pytest.mark.parametrize("ttl,scope,cached", [
    (60000, "public", [H.CacheDiscover("server/discover|public", 61000, discover_result())]),
    (5000, "private", [H.CacheDiscover("server/discover|private|alice", 6000, discover_result(ttlMs=5000,
                                                                                            cacheScope="private"))]),
    (0, "public", []),  # stale at once (2026-07-28 server/utilities §Caching): nothing kept
])
def test_a_discover_is_cached_as_its_policy_says_then_the_session_is_admitted(ttl, scope, cached) -> None:
    machine = handshake(verified=False)
    machine.start(None, 1000)
    actions = machine.handle(H.Discovered(discover_result(ttlMs=ttl, cacheScope=scope), 1000))
    assert actions == [*cached, H.SweepExpired(), H.CountSessions("alice")] and machine.step is H.HandshakeStep.ADMIT
    assert machine.record is not None and machine.record.created_ms == machine.record.last_seen_ms == 1000
    assert machine.record.server_capabilities == UPSTREAM_CAPS and machine.record.pins["name"] == "default"


@pytest.mark.parametrize("event,code,fault", [
    (H.Discovered("nope", 1000), E.UPSTREAM_FAILURE, E.UpstreamFault.INVALID_RESULT),  # not an object
    (H.Discovered(discover_result(supportedVersions=["2099-01-01"]), 1000), E.UPSTREAM_FAILURE,
     E.UpstreamFault.UNSUPPORTED_VERSION),
    (H.DiscoverRefused({"code": E.METHOD_NOT_FOUND, "message": "no such method"}), E.METHOD_NOT_FOUND, None),
    (H.DiscoverRefused({"code": "x"}), E.UPSTREAM_FAILURE, E.UpstreamFault.INVALID_RESPONSE),  # malformed
    (H.DiscoverFailed(E.upstream_failure(E.UpstreamFault.TIMEOUT, "late")), E.UPSTREAM_FAILURE,
     E.UpstreamFault.TIMEOUT),
])
def test_a_discover_that_fails_answers_the_initialize_with_an_error_and_asks_nothing_more(event, code, fault) -> None:
    machine = handshake()
    machine.start(None, 1000)
    (fail,) = machine.handle(event)
    assert isinstance(fail, H.Fail) and fail.error.code == code and machine.step is H.HandshakeStep.DONE
    assert fault is None or fail.error.data == {"upstream": fault.value}
    assert machine.handle(H.Counted(0, 0, None)) == [] and machine.handle(event) == []


@pytest.mark.parametrize("counted,limit", [
    (H.Counted(10, 0, None), "max_sessions"),
    (H.Counted(6, 2, None, relayed=4), "max_sessions"),  # the relayed 2025 sessions count too
    (H.Counted(5, 4, None), "max_sessions_per_principal"),
    (H.Counted(5, 2, None, relayed=2, relayed_own=2), "max_sessions_per_principal"),
    (H.Counted(5, 1, 3), "max_unverified_sessions"),
])
def test_a_full_limit_refuses_the_session_before_it_is_stored(counted, limit) -> None:
    machine = admitting()
    (refuse,) = machine.handle(counted)
    assert isinstance(refuse, H.Refuse) and refuse.rejection.error.data["limit"] == limit
    assert refuse.rejection.ident == 7 and machine.step is H.HandshakeStep.DONE
    assert machine.handle(H.Saved(1, 1, None)) == []  # nothing was saved


def test_an_admitted_session_is_saved_then_answered_with_its_id() -> None:
    machine = saving(unverified=None)
    (answer,) = machine.handle(H.Saved(5, 2, None))
    assert isinstance(answer, H.Answer) and answer.session_id == "sid-1" and machine.step is H.HandshakeStep.DONE
    assert answer.result["protocolVersion"] == "2025-11-25" and answer.result["serverInfo"] == INFO
    schema.check("2025-11-25", {"jsonrpc": "2.0", "id": 7, "result": answer.result}, "initialize")
    assert machine.handle(H.Saved(5, 2, None)) == []  # answered once


def test_the_answer_carries_the_peers_deprecation_notice() -> None:
    peer = Peer("old", sunset="2027-01-01", deprecation_notice="move on")
    machine = saving(peer=peer)
    (answer,) = machine.handle(H.Saved(1, 1, None))
    assert isinstance(answer, H.Answer) and "move on" in answer.result["instructions"]


@pytest.mark.parametrize("saved,limit", [
    (H.Saved(11, 1, None), "max_sessions"),  # another replica took the last slot between the count and the write
    (H.Saved(5, 5, None), "max_sessions_per_principal"),
    (H.Saved(5, 1, 4), "max_unverified_sessions"),
])
def test_a_slot_taken_meanwhile_takes_the_stored_session_back(saved, limit) -> None:
    machine = saving(verified=False, unverified=None if saved.unverified is None else 0)
    delete, refuse = machine.handle(saved)
    assert delete == H.DeleteSession("sid-1") and machine.step is H.HandshakeStep.DONE
    assert isinstance(refuse, H.Refuse) and refuse.rejection.error.data["limit"] == limit


def test_events_out_of_step_are_ignored() -> None:
    machine = handshake()
    assert machine.handle(H.Discovered(discover_result(), 1)) == []  # not started: nothing was asked
    assert machine.handle(H.Counted(0, 0, None)) == [] and machine.step is H.HandshakeStep.START
    machine = admitting()
    assert machine.handle(H.Discovered(discover_result(), 1)) == [] and machine.handle(H.Saved(1, 1, None)) == []
    assert machine.step is H.HandshakeStep.ADMIT


def test_a_cached_discover_is_found_for_its_upstream_private_first_and_only_while_fresh() -> None:
    cache = {"default|server/discover|public": (2000, {"v": "public"}),
             "default|server/discover|private|alice": (1500, {"v": "alice"}),
             "other|server/discover|public": (9000, {"v": "other"})}
    assert H.cached_discover(cache, "default", "alice", 1000) == {"v": "alice"}
    assert H.cached_discover(cache, "default", "alice", 1500) == {"v": "public"}  # alice's went stale
    assert H.cached_discover(cache, "default", "bob", 1999) == {"v": "public"}
    assert H.cached_discover(cache, "default", "bob", 2000) is None
    assert H.cached_discover(cache, "other", "bob", 2000) == {"v": "other"}
