"""classify(): every transport rule of the legacy endpoint, table-driven (2025-11-25 basic/transports)."""

from __future__ import annotations

import json

import pytest

from adapters.classify import (
    Accepted,
    HttpView,
    Kind,
    Policy,
    classify,
    kept_while_answering,
    principal_of,
    stands_on_held_record,
    touch_due,
)
from adapters.errors import Reason, Rejection
from adapters.records import SessionRecord

NOW = 10_000_000
POST_HEADERS = {"host": "127.0.0.1:8808", "accept": "application/json, text/event-stream",
                "content-type": "application/json"}


def session(**over) -> SessionRecord:
    base = dict(session_id="s1", principal="anonymous", protocol_version="2025-11-25", client_capabilities={},
                client_info={"name": "c", "version": "1"}, created_ms=NOW - 10, last_seen_ms=NOW - 10)
    base.update(over)
    return SessionRecord(**base)


def post(message, **headers) -> HttpView:
    body = message if isinstance(message, bytes) else json.dumps(message).encode()
    return HttpView("POST", {**POST_HEADERS, **headers}, body)


REQ = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}
SID = {"mcp-session-id": "s1"}

CASES = [
    # name, view, session, expected kind or (status, reason)
    ("initialize needs no session", post(INIT), None, "initialize"),
    ("request with session", post(REQ, **SID), session(), "request"),
    ("notification", post({"jsonrpc": "2.0", "method": "notifications/initialized"}, **SID), session(), "notification"),
    ("client response", post({"jsonrpc": "2.0", "id": "g1", "result": {}}, **SID), session(), "response"),
    ("client error response", post({"jsonrpc": "2.0", "id": "g1", "error": {"code": -1, "message": "no"}}, **SID),
     session(), "response"),
    ("missing session id", post(REQ), None, (400, "missing_session")),
    ("unknown session", post(REQ, **SID), None, (404, "unknown_session")),
    ("another principal's session", post(REQ, **SID), session(principal="bearer:x"), (404, "unknown_session")),
    ("expired session", post(REQ, **SID), session(last_seen_ms=NOW - 3_600_001), (404, "unknown_session")),
    ("bad protocol version header", post(REQ, **SID, **{"mcp-protocol-version": "1999-01-01"}), session(),
     (400, "bad_protocol_version")),
    ("version header differs from negotiated", post(REQ, **SID, **{"mcp-protocol-version": "2025-06-18"}),
     session(), (400, "bad_protocol_version")),
    ("matching version header", post(REQ, **SID, **{"mcp-protocol-version": "2025-11-25"}), session(), "request"),
    ("modern by header: no session needed", post(REQ, **{"mcp-protocol-version": "2026-07-28"}), None, "modern"),
    ("modern by _meta", post({**REQ, "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}}),
     None, "modern"),
    ("server/discover is modern", post({"jsonrpc": "2.0", "id": 1, "method": "server/discover"}), None, "modern"),
    ("modern with a string _meta", post({"jsonrpc": "2.0", "id": 1, "method": "server/discover",
                                          "params": {"_meta": "x"}}), None, (400, "invalid_params")),
    ("modern by header with a list _meta",
     post({**REQ, "params": {"_meta": []}}, **{"mcp-protocol-version": "2026-07-28"}), None, (400, "invalid_params")),
    ("modern with a null _meta", post({**REQ, "params": {"_meta": None}}, **{"mcp-protocol-version": "2026-07-28"}),
     None, (400, "invalid_params")),
    ("bad origin", post(INIT, origin="https://evil.example"), None, (403, "bad_origin")),
    ("loopback origin", post(INIT, origin="http://localhost:3000"), None, "initialize"),
    ("bad host (DNS rebinding)", post(INIT, host="evil.example:8808"), None, (403, "bad_host")),
    ("accept lacks SSE", post(INIT, accept="application/json"), None, (406, "not_acceptable")),
    ("wrong content type", post(INIT, **{"content-type": "text/plain"}), None, (415, "unsupported_media_type")),
    ("not JSON", post(b"{nope"), None, (400, "parse_error")),
    ("batch", post([REQ]), None, (400, "invalid_request")),
    ("not JSON-RPC", post({"id": 1, "method": "x"}), None, (400, "invalid_request")),
    ("null id request", post({"jsonrpc": "2.0", "id": None, "method": "x"}, **SID), session(),
     (400, "invalid_request")),
    ("GET opens the stream", HttpView("GET", {"host": "localhost", "accept": "text/event-stream", **SID}), session(),
     "open_stream"),
    ("GET resumes", HttpView("GET", {"accept": "text/event-stream", "last-event-id": "a.3", **SID}), session(),
     "resume"),
    ("GET without session", HttpView("GET", {"accept": "text/event-stream"}), None, (400, "missing_session")),
    ("GET must accept SSE", HttpView("GET", {"accept": "application/json", **SID}), session(), (406, "not_acceptable")),
    ("DELETE", HttpView("DELETE", SID), session(), "delete"),
    ("DELETE unknown", HttpView("DELETE", SID), None, (404, "unknown_session")),
    ("PUT", HttpView("PUT", SID), session(), (405, "method_not_allowed")),
]


@pytest.mark.parametrize("name,view,record,expected", CASES, ids=[c[0] for c in CASES])
def test_classify(name, view, record, expected) -> None:
    verdict = classify(view, record, Policy(), NOW)
    if isinstance(expected, str):
        assert isinstance(verdict, Accepted), verdict
        assert verdict.kind == expected
    else:
        assert isinstance(verdict, Rejection), verdict
        assert (verdict.status, verdict.reason) == expected
        assert verdict.body()["error"]["message"]


def test_a_malformed_modern_meta_is_invalid_params_with_the_request_id() -> None:
    """2026-07-28 §Error Codes: malformed ``_meta`` is 400 -32602, and every error response carries the request's id."""
    view = post({**REQ, "id": "m7", "params": {"_meta": "x"}}, **{"mcp-protocol-version": "2026-07-28"})
    verdict = classify(view, None, Policy(), NOW)
    assert isinstance(verdict, Rejection)
    assert verdict.body()["id"] == "m7" and verdict.body()["error"]["code"] == -32602


def test_configured_origin_and_host_are_allowed() -> None:
    policy = Policy(allowed_hosts=("gw.example",), allowed_origins=("https://app.example",))
    view = post(INIT, host="gw.example", origin="https://app.example")
    assert isinstance(classify(view, None, policy, NOW), Accepted)
    assert classify(post(INIT), None, policy, NOW).status == 403  # 127.0.0.1 no longer listed


def test_principal_binds_to_the_bearer_credential() -> None:
    assert principal_of(None) == "anonymous"
    alice, bob = principal_of("Bearer alice"), principal_of("Bearer bob")
    assert alice != bob and alice.startswith("bearer:") and "alice" not in alice
    view = post(REQ, **SID, authorization="Bearer bob")
    assert classify(view, session(principal=alice), Policy(), NOW).status == 404
    view = post(REQ, **SID, authorization="Bearer alice")
    assert classify(view, session(principal=alice), Policy(), NOW).kind == "request"


OLD = {"mcp-session-id": "s1", "mcp-protocol-version": "2025-03-26"}


def test_a_batch_on_a_2025_03_26_session_is_split_into_its_elements() -> None:
    """2025-03-26 basic §Batching: a 2025-03-26 server MUST accept batches; each element is judged alone."""
    items = [REQ, {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": "g1", "result": {}}, {**INIT, "id": 7}, "junk",
             {"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": []},
             {"jsonrpc": "2.0", "id": 9, "method": "server/discover"}]
    verdict = classify(post(items, **OLD), session(protocol_version="2025-03-26"), Policy(), NOW)
    assert isinstance(verdict, Accepted) and verdict.kind == "batch"
    kinds = [e.kind if isinstance(e, Accepted) else (e.reason, e.ident) for e in verdict.batch]
    assert kinds == ["request", "notification", "response", ("invalid_request", 7), ("invalid_request", None),
                     ("invalid_request", 8), ("invalid_request", 9)]
    assert "initialize" in verdict.batch[3].error.message
    assert all(e.session is not None for e in verdict.batch if isinstance(e, Accepted))


@pytest.mark.parametrize("body,record,why", [
    ([REQ], session(), "only accepted on 2025-03-26"),  # a 2025-11-25 session
    ([REQ], session(protocol_version="2025-06-18"), "only accepted on 2025-03-26"),
    ([], session(protocol_version="2025-03-26"), "empty"),
    ([REQ] * 65, session(protocol_version="2025-03-26"), "at most 64"),
])
def test_a_batch_the_gateway_cannot_take_is_refused_whole(body, record, why) -> None:
    headers = {**OLD, "mcp-protocol-version": record.protocol_version}
    verdict = classify(post(body, **headers), record, Policy(), NOW)
    assert isinstance(verdict, Rejection) and (verdict.status, verdict.reason) == (400, "invalid_request")
    assert why in verdict.error.message


def test_a_batch_still_needs_a_live_session() -> None:
    verdict = classify(post([REQ], **OLD), None, Policy(), NOW)
    assert isinstance(verdict, Rejection) and verdict.status == 404


@pytest.mark.parametrize("ident", [[1], {"a": 1}, True, 1.5, None])
def test_a_refusal_never_echoes_an_id_that_is_no_valid_id(ident) -> None:
    verdict = classify(post({"jsonrpc": "2.0", "id": ident, "method": "tools/list", "params": 5}), None, Policy(),
                       NOW)
    assert isinstance(verdict, Rejection) and verdict.status == 400 and verdict.body()["id"] is None


def test_a_refusal_echoes_a_valid_id() -> None:
    for ident in ("r", 7):
        verdict = classify(post({"jsonrpc": "2.0", "id": ident, "method": "x", "params": 5}), None, Policy(), NOW)
        assert isinstance(verdict, Rejection) and verdict.ident == ident


def test_an_authorization_header_with_no_utf8_form_is_400_invalid_params() -> None:
    bad = "Bearer \udcff\udcfe"  # how the HTTP server hands over the bytes 0xff 0xfe (surrogateescape)
    verdict = classify(post(INIT, authorization=bad), None, Policy(), NOW)
    assert isinstance(verdict, Rejection) and (verdict.status, verdict.error.code, verdict.ident) == (400, -32602, 0)
    verdict = classify(HttpView("GET", {**POST_HEADERS, **SID, "authorization": bad}), session(), Policy(), NOW)
    assert isinstance(verdict, Rejection) and verdict.status == 400 and verdict.ident is None


def test_a_header_that_carries_one_value_sent_twice_is_refused() -> None:
    body = b'{"jsonrpc":"2.0","id":7,"method":"ping"}'
    view = HttpView("POST", {**POST_HEADERS, **SID}, body, frozenset({"mcp-session-id"}))
    verdict = classify(view, session(), Policy(), NOW)
    assert isinstance(verdict, Rejection) and (verdict.status, verdict.error.code, verdict.ident) == (400, -32600, 7)
    assert "mcp-session-id" in verdict.error.message


@pytest.mark.parametrize("body, headers, sess", [
    (b'{"jsonrpc":"1.0","id":7,"method":"ping"}', SID, True),
    (b'{"jsonrpc":"2.0","id":7}', SID, True),
    (b'{"jsonrpc":"2.0","id":7,"method":"ping"}', {}, True),
    (b'{"jsonrpc":"2.0","id":7,"method":"ping"}', SID, False),
    (b'{"jsonrpc":"2.0","id":7,"method":"ping"}', {**SID, "mcp-protocol-version": "2025-06-18"}, True),
])
def test_refusals_after_the_body_was_read_carry_its_id(body, headers, sess) -> None:
    verdict = classify(post(body, **headers), session() if sess else None, Policy(), NOW)
    assert isinstance(verdict, Rejection) and verdict.ident == 7 and verdict.body()["id"] == 7


def test_a_message_nested_too_deep_is_refused_with_its_id() -> None:
    deep = "[" * 300 + "]" * 300
    verdict = classify(post(f'{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"x":{deep}}}}}'.encode()),
                       None, Policy(), NOW)
    assert isinstance(verdict, Rejection) and (verdict.status, verdict.ident) == (400, 0)


def test_a_batch_answered_as_json_has_the_status_of_what_it_held() -> None:
    from adapters.classify import Kind, batch_status
    from adapters.errors import reject

    request = Accepted(Kind.REQUEST, "anonymous", {"jsonrpc": "2.0", "id": 1, "method": "ping"})
    note = Accepted(Kind.NOTIFICATION, "anonymous", {"jsonrpc": "2.0", "method": "notifications/initialized"})
    bad = reject(Reason.INVALID_REQUEST, "not JSON-RPC")
    assert batch_status((note,), 0) == 202
    assert batch_status((request, bad), 2) == 200
    assert batch_status((note, bad), 1) == 400


def test_a_session_is_touched_again_once_its_last_seen_time_is_a_percent_of_the_idle_limit_old() -> None:
    session = SessionRecord("s", "anonymous", "2025-11-25", {}, {}, 0, 10_000)
    assert not touch_due(session, 10_999, 3_600_000)  # at most a second stale
    assert touch_due(session, 11_000, 3_600_000)
    assert not touch_due(session, 10_599, 60_000) and touch_due(session, 10_600, 60_000)  # 1% of a minute
    assert touch_due(session, 10_000, 0)  # no idle limit to spare: every request writes


ANSWER = {"jsonrpc": "2.0", "id": "g1", "result": {}}


@pytest.mark.parametrize("view,record,stands", [
    (post(ANSWER, **SID), session(), True),  # an accepted answer
    (post({"jsonrpc": "2.0", "id": "g1", "error": {"code": -1, "message": "no"}}, **SID), session(), True),
    (post(REQ, **SID), session(), False),  # a request reads the stored record (its log level, roots, ...)
    (post({"jsonrpc": "2.0", "method": "notifications/initialized"}, **SID), session(), False),
    (post(ANSWER, **SID), session(principal="bearer:x"), False),  # refused on it: decided again on the store's
    (post(ANSWER, **SID), session(last_seen_ms=NOW - 3_600_001), False),  # it may only look older than it is
    (post(ANSWER, **SID, **{"mcp-protocol-version": "2025-06-18"}), session(), False),
])
def test_only_an_accepted_answer_stands_on_a_held_record(view, record, stands) -> None:
    """docs/design/takeover.md#a-clients-answer-is-checked-on-its-requests-session-record."""
    assert stands_on_held_record(classify(view, record, Policy(), NOW)) is stands


@pytest.mark.parametrize("kind,slim", [(Kind.OPEN_STREAM, True), (Kind.RESUME, True), (Kind.REQUEST, False),
                                       (Kind.DELETE, False)])
def test_a_long_lived_answer_keeps_only_its_sessions_identity(kind, slim) -> None:
    record = session(client_capabilities={"sampling": {}}, pins={"max_rounds": 3}, subscriptions=["file:///a"])
    verdict = Accepted(kind, "anonymous", session=record)
    kept = kept_while_answering(verdict)
    if not slim:
        assert kept is verdict
        return
    assert kept.session is not None and kept.kind is kind
    assert (kept.session.session_id, kept.session.principal, kept.session.protocol_version) == \
        ("s1", "anonymous", "2025-11-25")
    assert kept.session.client_capabilities == {} and kept.session.pins == {} and kept.session.subscriptions == []
    assert record.client_capabilities == {"sampling": {}}  # the record itself is untouched


def test_the_verified_claims_ride_on_the_verdict_and_every_batch_element() -> None:
    from dataclasses import replace

    from adapters.authz import Principal
    grant = Principal("https://as.example", "alice", "ide", frozenset({"mcp"}), None)
    old = session(protocol_version="2025-03-26", principal=grant.key)
    view = replace(post([REQ, {**REQ, "id": 2}], **OLD), principal=grant.key, grant=grant)
    verdict = classify(view, old, Policy(), NOW)
    assert isinstance(verdict, Accepted) and verdict.grant is grant
    assert [e.grant for e in verdict.batch] == [grant, grant]
    plain = classify(replace(post(INIT), principal=grant.key, grant=grant), None, Policy(), NOW)
    assert isinstance(plain, Accepted) and plain.grant is grant and plain.principal == grant.key
    assert classify(post(INIT), None, Policy(), NOW).grant is None
