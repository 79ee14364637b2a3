"""Per-peer pins, pure: matching order, revision admission, sunset, deprecation notice, canary split."""

from __future__ import annotations

from collections import Counter

import pytest

from adapters.peers import (
    DEPRECATION_META_KEY,
    Peer,
    admit_initialize,
    admit_modern,
    allowed_input_kind,
    deprecation_meta,
    legacy_answer_version,
    match_peer,
    pick_upstream,
)

IDE = Peer("ide-plugin", revisions=("2025-11-25",), client_name="acme-ide*", sunset="2027-03-31",
           deprecation_notice="Upgrade the plugin to 4.x before 2027-03-31.")
AGENT = Peer("agent", revisions=("2026-07-28",), principals=("agent-svc",))
BOT = Peer("bot", principals=("ci-bot",), client_name="never-matches-by-name")
DEFAULT = Peer("default")
PEERS = (IDE, AGENT, BOT)


@pytest.mark.parametrize("principal, info, expected", [
    ("agent-svc", {"name": "acme-ide", "version": "3.2"}, "agent"),   # principal beats a claimed name
    ("ci-bot", None, "bot"),
    ("anonymous", {"name": "acme-ide-pro", "version": "3.2"}, "ide-plugin"),
    ("anonymous", {"name": "ACME-IDE", "version": "3.2"}, "default"),  # patterns are case-sensitive
    ("anonymous", {"name": "other", "version": "1"}, "default"),
    ("anonymous", None, "default"),
    ("someone", {"name": "never-matches-by-name"}, "default"),  # a peer with principals is never claimed by name
])
def test_matching_order(principal, info, expected):
    assert match_peer(PEERS, DEFAULT, principal, info).name == expected


def test_version_pattern():
    old = Peer("old-sdk", client_name="mcp", client_version="1.*")
    assert match_peer((old,), DEFAULT, "p", {"name": "mcp", "version": "1.9.0"}).name == "old-sdk"
    assert match_peer((old,), DEFAULT, "p", {"name": "mcp", "version": "2.0.0"}).name == "default"


def test_modern_only_peer_initialize_gets_the_2025_shape():
    error = admit_initialize(AGENT, "2025-11-25", "2026-12-01")
    assert error.code == -32602 and error.data == {"supported": ["2026-07-28"], "requested": "2025-11-25"}
    assert "2026-07-28" in error.message


def test_sunset_before_and_after():
    assert admit_initialize(IDE, "2025-11-25", "2027-03-31") is None  # the sunset day itself still works
    error = admit_initialize(IDE, "2025-11-25", "2027-04-01")
    assert error.code == -32602 and "2027-03-31" in error.message and "2026-07-28" in error.message
    assert error.data["sunset"] == "2027-03-31"


def test_deprecation_notice_only_before_the_sunset():
    meta = deprecation_meta(IDE, "2027-01-01")
    assert meta[DEPRECATION_META_KEY] == {"message": "Upgrade the plugin to 4.x before 2027-03-31.",
                                          "moveTo": "2026-07-28", "sunset": "2027-03-31"}
    assert deprecation_meta(IDE, "2027-04-01") is None
    assert deprecation_meta(DEFAULT, "2027-01-01") is None


def test_legacy_pinned_modern_probe_is_steered_to_initialize():
    error = admit_modern(IDE, "2026-07-28")
    assert error.code == -32022 and error.data == {"supported": ["2025-11-25"], "requested": "2026-07-28"}
    assert admit_modern(DEFAULT, "2026-07-28") is None


def test_answer_version_stays_inside_the_pins():
    assert legacy_answer_version(IDE, "2025-06-18") == "2025-11-25"
    assert legacy_answer_version(DEFAULT, "2025-06-18") == "2025-06-18"


def test_canary_split_is_stable_and_proportional():
    canary = Peer("canaried", upstream="stable", canary=(("next", 20),))
    picks = Counter(pick_upstream(canary, f"session-{i}", "seed-1") for i in range(10_000))
    assert 1800 <= picks["next"] <= 2200 and picks["next"] + picks["stable"] == 10_000
    assert pick_upstream(canary, "session-7", "seed-1") == pick_upstream(canary, "session-7", "seed-1")
    other_seed = [pick_upstream(canary, f"session-{i}", "seed-2") for i in range(200)]
    assert other_seed != [pick_upstream(canary, f"session-{i}", "seed-1") for i in range(200)]
    assert {pick_upstream(Peer("p", upstream="u"), f"s{i}", "x") for i in range(50)} == {"u"}


@pytest.mark.parametrize("method, params, refused", [
    ("sampling/createMessage", {}, "sampling"),
    ("elicitation/create", {"mode": "url"}, "elicitation.url"),
    ("elicitation/create", {}, None),
    ("roots/list", {}, None),
])
def test_bridge_policy_input_kinds(method, params, refused):
    peer = Peer("p", input_kinds=("elicitation.form", "roots"))
    assert allowed_input_kind(peer, method, params) == refused


def test_a_peers_trace_choices_override_the_gateways() -> None:
    from adapters.peers import Peer, peer_from_record, peer_record, trace_policy

    assert trace_policy(None, True, False) == (True, False)
    assert trace_policy(Peer("p"), False, True) == (False, True)  # unset: the gateway's
    debug = Peer("debug", trace=True, trace_content=True)
    assert trace_policy(debug, False, False) == (True, True)
    assert trace_policy(peer_from_record(peer_record(debug)), False, False) == (True, True)  # kept by sessions
