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


# --- token claims ([gateway.auth]: a verified token's client id, subject and scopes) --------------------------
def grant(client="ide-app", subject="alice", scopes=("mcp",)):
    from adapters.authz import Principal
    return Principal("https://as.example", subject, client, frozenset(scopes), None)


BY_CLIENT = Peer("by-client", client_ids=("ide-*",))
BY_SUBJECT_AND_SCOPE = Peer("ops", subjects=("ops-*",), scopes=("admin", "mcp"))
NAMED = Peer("named", client_name="acme-ide*")  # clientInfo only: never a security control
CLAIM_PEERS = (BY_SUBJECT_AND_SCOPE, BY_CLIENT, NAMED)


@pytest.mark.parametrize("token, info, expected", [
    (grant(), None, "by-client"),
    (grant(client="ide-app"), {"name": "acme-ide"}, "by-client"),  # claims beat a claimed clientInfo name
    (grant(client="cli"), {"name": "acme-ide"}, "named"),
    (grant(client=None), None, "default"),  # a token naming no client matches no client_ids glob
    (grant(client="IDE-app"), None, "default"),  # globs are case-sensitive
    (grant(subject="ops-1", scopes=("admin", "mcp")), None, "ops"),  # first peer in order, every kind matched
    (grant(subject="ops-1", scopes=("admin",)), None, "by-client"),  # every listed scope must be held
    (grant(subject="bob", scopes=("admin", "mcp")), None, "by-client"),  # subject must match too
    (None, None, "default"),  # no verified token: no claim peer
])
def test_claims_are_a_credential_match(token, info, expected):
    assert match_peer(CLAIM_PEERS, DEFAULT, "oauth:x", info, token).name == expected


def test_a_claims_peer_is_never_claimed_by_clientinfo():
    peer = Peer("p", client_ids=("svc",), client_name="acme*")
    assert match_peer((peer,), DEFAULT, "anonymous", {"name": "acme"}).name == "default"


def test_a_static_token_name_still_matches_alongside_claims():
    both = Peer("both", principals=("ci-bot",), client_ids=("svc",))
    assert match_peer((both,), DEFAULT, "ci-bot", None).name == "both"
    assert match_peer((both,), DEFAULT, "oauth:x", None, grant(client="svc")).name == "both"


def test_scopes_kept_checks_the_scopes_the_peer_was_matched_on():
    from adapters.peers import scopes_kept
    assert scopes_kept(BY_CLIENT, None)  # matched on no scope: nothing to keep
    assert scopes_kept(BY_SUBJECT_AND_SCOPE, grant(scopes=("admin", "mcp", "x")))
    assert not scopes_kept(BY_SUBJECT_AND_SCOPE, grant(scopes=("mcp",)))
    assert not scopes_kept(BY_SUBJECT_AND_SCOPE, None)


def test_the_record_keeps_the_tool_policy_and_the_matched_scopes_never_the_claims():
    from adapters.peers import peer_from_record, peer_record
    from adapters.tool_policy import ToolPolicy
    peer = Peer("p", client_ids=("svc",), subjects=("alice",), scopes=("admin",),
                tools=ToolPolicy(("read_*",), ("read_x",), (("deploy", "deploy"),)))
    record = peer_record(peer)
    assert "client_ids" not in record and "subjects" not in record
    back = peer_from_record(record)
    assert back.tools == peer.tools and back.scopes == ("admin",)
    old = {k: v for k, v in record.items() if k not in ("tools", "scopes")}  # a record written before this
    assert peer_from_record(old).tools.open and peer_from_record(old).scopes == ()
    assert peer_record(Peer("plain")).keys() == old.keys()  # nothing more kept for a peer without either
