"""adapters.admission: the pure decisions on new sessions and on what a session keeps."""

from __future__ import annotations

from adapters.admission import (
    SessionCounts,
    SessionLimits,
    WaitingLoad,
    admit_session,
    admit_waiting,
    answer_verifies,
    gateway_verified,
    header_maps_storable,
    initialize_size_error,
    past_ceilings,
    roots_cacheable,
    subscription_error,
    waiting_ceilings,
)
from adapters.authz import Principal
from adapters.bridge import BridgeLimits

LIMITS = SessionLimits(max_sessions=3, max_sessions_per_principal=2, max_initialize_bytes=300,
                       max_subscriptions_per_session=1, max_cached_roots_bytes=50,
                       max_header_maps_bytes=40)


def test_admit_session_names_the_full_bound_and_keeps_the_id() -> None:
    assert admit_session(SessionCounts(2, 1), LIMITS, 1) is None
    total = admit_session(SessionCounts(3, 0), LIMITS, "x")
    assert total is not None and (total.status, total.ident) == (503, "x")
    assert total.body()["error"]["data"] == {"limit": "max_sessions", "value": 3}
    mine = admit_session(SessionCounts(2, 2), LIMITS, 5)
    assert mine is not None and mine.body()["error"]["data"] == {"limit": "max_sessions_per_principal", "value": 2}


def test_unverified_principals_share_their_allowance_and_a_verified_one_is_not_held_to_it() -> None:
    limits = SessionLimits(max_sessions=10, max_sessions_per_principal=5, max_unverified_sessions=2)
    assert admit_session(SessionCounts(2, 0, 1), limits, 1) is None
    full = admit_session(SessionCounts(2, 0, 2), limits, 1)
    assert full is not None and full.status == 503
    assert full.body()["error"]["data"] == {"limit": "max_unverified_sessions", "value": 2}
    assert admit_session(SessionCounts(9, 4, None), limits, 1) is None  # verified: only the other bounds
    whole = admit_session(SessionCounts(10, 0, 0), limits, 1)  # the table itself is full first
    assert whole is not None and whole.body()["error"]["data"]["limit"] == "max_sessions"


def test_who_is_verified_without_an_upstream_and_which_answers_verify() -> None:
    assert gateway_verified("anonymous", ()) and gateway_verified("acme", ["acme"])
    assert not gateway_verified("bearer:0123", ["acme"])
    verified = Principal("https://as.example", "alice", "app", frozenset(), None)
    assert gateway_verified(verified.key, ())  # a token the gateway verified itself ([gateway.auth])
    assert answer_verifies(True, True)  # the upstream judged the client's own token
    assert not answer_verifies(True, False)  # it was sent the gateway's credential, or none
    assert not answer_verifies(False, False)  # anonymous: verified by the gateway already


def test_initialize_size_counts_capabilities_and_client_info_together() -> None:
    assert initialize_size_error({}, {"name": "n", "version": "1"}, LIMITS) is None
    error = initialize_size_error({"x": "a" * 150}, {"name": "b" * 150}, LIMITS)  # each alone would fit
    assert error is not None and error.data == {"limit": "max_initialize_bytes", "value": 300}


def test_subscriptions_bound_new_uris_only() -> None:
    assert subscription_error([], "a", LIMITS) is None
    assert subscription_error(["a"], "a", LIMITS) is None
    error = subscription_error(["a"], "b", LIMITS)
    assert error is not None and error.code == -32000 and error.data["limit"] == "max_subscriptions_per_session"


def test_roots_cacheable_by_encoded_size() -> None:
    assert roots_cacheable({"roots": []}, LIMITS)
    assert not roots_cacheable({"roots": [{"uri": "file:///" + "x" * 60}]}, LIMITS)


def test_subscriptions_bound_the_uris_bytes_together() -> None:
    limits = SessionLimits(max_subscriptions_per_session=10, max_subscription_bytes=100)
    assert subscription_error(["a" * 50], "b" * 50, limits) is None
    error = subscription_error(["a" * 50], "b" * 51, limits)
    assert error is not None and error.data == {"limit": "max_subscription_bytes", "value": 100}
    assert subscription_error(["a" * 150], "a" * 150, limits) is None  # held already: no new entry


def test_a_turns_changes_are_judged_in_order_against_what_the_earlier_ones_leave() -> None:
    from adapters.admission import admit_changes

    limits = SessionLimits(max_subscriptions_per_session=2)
    out = admit_changes(["a"], [("b", True), ("c", True), ("a", False), None, ("c", True)], limits)
    assert [e.data["limit"] if e else None for e in out] == [None, "max_subscriptions_per_session", None, None, None]


def test_header_maps_go_in_the_record_up_to_their_bound() -> None:
    small = {"geo": [[["region"], "Region"]]}  # 31 bytes of JSON
    assert header_maps_storable(small, LIMITS)
    assert not header_maps_storable(small | {"zone": [[["z"], "Zone"]]}, LIMITS)
    assert header_maps_storable({}, LIMITS)


def test_a_waiting_round_is_judged_with_itself_counted_and_names_the_bound() -> None:
    limits = BridgeLimits(max_pending_per_session=2, max_waiting_bytes_per_principal=100, max_waiting_bytes=150)
    assert admit_waiting(WaitingLoad(2, 100, 150), limits) is None  # exactly full: admitted
    for load, name in [(WaitingLoad(3, 10, 10), "max_pending_per_session"),
                       (WaitingLoad(1, 101, 101), "max_waiting_bytes_per_principal"),
                       (WaitingLoad(1, 50, 151), "max_waiting_bytes")]:
        error = admit_waiting(load, limits)
        assert error is not None and error.code == -32000 and error.data["limit"] == name


def test_the_ceilings_a_store_applies_refuse_exactly_what_admit_waiting_refuses() -> None:
    limits = BridgeLimits(max_pending_per_session=2, max_waiting_bytes_per_principal=100, max_waiting_bytes=150)
    ceilings = waiting_ceilings(limits)
    assert ceilings == WaitingLoad(2, 100, 150)
    for load in [WaitingLoad(rounds, mine, total) for rounds in (1, 2, 3) for mine in (99, 100, 101)
                 for total in (149, 150, 151)]:
        assert past_ceilings(load, ceilings) == (admit_waiting(load, limits) is not None), load
