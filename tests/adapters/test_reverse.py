"""The reverse bridge's pure rules, event by event with no event loop
(docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge): the 2026-07-28 validation ladder,
era translation, the session pool, the sealed state's claims and the call machine."""

from __future__ import annotations

from typing import Any

import pytest

from adapters import reverse as R
from adapters import reverse_wire as W
from adapters.probe import UpstreamKind

META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
HEADERS = {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "t"}
CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t", "arguments": {}, "_meta": META}}
CAPS: dict[str, Any] = {"sampling": {}, "elicitation": {"form": {}, "url": {}}, "roots": {}}
SAMPLE = {"messages": [], "maxTokens": 5, "_meta": {"x": 1}}
FORM = {"mode": "form", "message": "ok?", "requestedSchema": {"type": "object", "properties": {}}}
URL = {"mode": "url", "message": "open", "url": "https://x/1", "elicitationId": "e-1"}


def _with(headers=None, **params):
    message = {**CALL, "params": {**CALL["params"], **params}}
    merged = {k: v for k, v in {**HEADERS, **(headers or {})}.items() if v is not None}  # None: header absent
    return W.validate(merged, message, {"tools": {}})


@pytest.mark.parametrize(("headers", "params", "status", "code"), [
    ({"mcp-protocol-version": None}, {}, 400, -32020),
    ({}, {"_meta": {}}, 400, -32602),
    ({}, {"_meta": {**META, "io.modelcontextprotocol/clientCapabilities": None}}, 400, -32602),
    ({"mcp-protocol-version": "2025-11-25"}, {}, 400, -32020),
    ({"mcp-protocol-version": "2099-01-01"},
     {"_meta": {**META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}}, 400, -32022),
    ({"mcp-method": "tools/list"}, {}, 400, -32020),
    ({"mcp-name": "other"}, {}, 400, -32020),
    ({"mcp-name": None}, {}, 400, -32020),
    ({}, {"_meta": {**META, "io.modelcontextprotocol/logLevel": "loud"}}, 400, -32602),
])
def test_the_ladder_refuses_in_the_conformance_order(headers, params, status, code) -> None:
    refused = _with(headers, **params)
    assert isinstance(refused, W.Refused)
    assert (refused.status, refused.error.code) == (status, code)


def test_the_ladder_accepts_a_base64_name_and_echoes_the_requested_version() -> None:
    ok = _with({"mcp-name": "=?base64?dA==?="})
    assert isinstance(ok, W.Request) and ok.method == "tools/call"
    refused = _with({"mcp-protocol-version": "v9"}, _meta={**META, "io.modelcontextprotocol/protocolVersion": "v9"})
    assert isinstance(refused, W.Refused) and refused.error.data == {"supported": ["2026-07-28"], "requested": "v9"}


@pytest.mark.parametrize(("method", "caps", "status"), [
    ("prompts/list", {"tools": {}}, 404),  # not advertised by the legacy server
    ("subscriptions/listen", {"tools": {}}, None),  # served from the session's GET stream, whatever it offers
    ("logging/setLevel", {"logging": {}}, 404),  # removed in 2026: _meta logLevel instead
    ("initialize", {"tools": {}}, 404),  # removed in 2026
    ("prompts/list", {"prompts": {}}, None),
])
def test_a_method_is_relayed_only_when_the_server_advertised_it(method, caps, status) -> None:
    message = {"jsonrpc": "2.0", "id": 2, "method": method, "params": {"_meta": META}}
    verdict = W.validate({**HEADERS, "mcp-method": method}, message, caps)
    assert (verdict.status if isinstance(verdict, W.Refused) else None) == status


@pytest.mark.parametrize(("http", "headers", "message", "relayed"), [
    ("GET", {}, None, True), ("DELETE", {}, None, True),
    ("POST", {}, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}, True),
    ("POST", {}, {"jsonrpc": "2.0", "id": 1, "result": {}}, True),  # an answer to the legacy server
    ("POST", {}, {"jsonrpc": "2.0", "method": "notifications/initialized"}, True),
    ("POST", {}, [{"jsonrpc": "2.0", "id": 1, "method": "ping"}], True),
    ("POST", HEADERS, CALL, False),
    ("POST", {}, CALL, False),  # the _meta says 2026
    ("POST", {}, {"jsonrpc": "2.0", "id": 1, "method": "server/discover"}, False),
])
def test_which_requests_are_relayed_to_the_legacy_server_as_they_are(http, headers, message, relayed) -> None:
    assert W.relayed_as_is(http, headers, message) is relayed


@pytest.mark.parametrize(("configured", "probed", "era"), [
    ("auto", UpstreamKind.LEGACY, W.Era.LEGACY), ("auto", UpstreamKind.MODERN, W.Era.MODERN),
    ("auto", UpstreamKind.UNREACHABLE, W.Era.MODERN), ("auto", None, W.Era.MODERN),
    ("2025-11-25", UpstreamKind.MODERN, W.Era.LEGACY), ("2026-07-28", UpstreamKind.LEGACY, W.Era.MODERN),
])
def test_the_era_of_an_upstream(configured, probed, era) -> None:
    assert W.era_of(configured, probed) is era


def test_discover_is_built_from_initialize_private_and_never_fresh() -> None:
    init = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}, "tasks": {"list": {}}},
            "serverInfo": {"name": "old", "version": "1"}, "instructions": "be nice"}
    assert W.discover_result(init) == {
        "resultType": "complete", "supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
        "instructions": "be nice", "ttlMs": 0, "cacheScope": "private",
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "old", "version": "1"}}}


def test_results_params_and_errors_change_era() -> None:
    assert W.complete_result("tools/call", {"content": []}) == {"content": [], "resultType": "complete"}
    assert W.complete_result("resources/read", {"contents": []})["cacheScope"] == "private"
    params = {"name": "t", "arguments": {"a": 1}, "requestState": "s", "inputResponses": {},
              "_meta": {**META, "progressToken": 7}}
    assert W.legacy_params(params) == {"name": "t", "arguments": {"a": 1}, "_meta": {"progressToken": 7}}
    assert W.modern_error({"code": -32002, "message": "nope"}).code == -32602
    assert W.modern_error({"code": -32042, "message": "url"}).code == -32603
    assert W.modern_error("junk").code == -32603


# --- pool -----------------------------------------------------------------------------------------------
A, B, C = (R.pool_key(p, CAPS, {"name": "c", "version": "1"}) for p in ("alice", "bob", "carol"))
LIMITS = R.PoolLimits(max_sessions=2, idle_seconds=10)


def test_the_pool_key_separates_principals_and_what_the_server_may_use() -> None:
    assert A != B
    assert R.pool_key("alice", {"sampling": {}}, {}) != R.pool_key("alice", {}, {})
    with_extension = R.pool_key("alice", {"sampling": {}, "extensions": {"x": {}}}, {})
    assert with_extension == R.pool_key("alice", {"sampling": {}}, {})


@pytest.mark.parametrize(("entries", "key", "decision"), [
    ({A: R.Entry(5)}, A, R.Reuse(A)),
    ({A: R.Entry(5)}, B, R.Open()),
    ({A: R.Entry(5), B: R.Entry(1)}, C, R.Open((B,))),  # least recently used idle one goes
    ({A: R.Entry(5), B: R.Entry(1, busy=1)}, C, R.Open((A,))),  # a busy one is never taken
])
def test_the_pool_reuses_opens_and_evicts(entries, key, decision) -> None:
    assert R.plan(entries, key, LIMITS) == decision


def test_a_pool_full_of_busy_sessions_refuses_and_idle_ones_expire() -> None:
    full = R.plan({A: R.Entry(5, 1), B: R.Entry(1, 2)}, C, LIMITS)
    assert isinstance(full, R.Full) and full.error.data == {"limit": "reverse.max_sessions", "value": 2}
    assert R.expired({A: R.Entry(0), B: R.Entry(0, busy=1), C: R.Entry(9_000)}, 10_000, LIMITS) == (A,)
    assert R.reinitialize(404) and not R.reinitialize(400)
    assert R.owner_of_unrelated(["c1"]) == "c1" and R.owner_of_unrelated(["c1", "c2"]) is None
    assert R.owner_of_unrelated([]) is None


# --- claims ---------------------------------------------------------------------------------------------
CLAIMS = R.Claims("call-1", 1, "alice", "tools/call", "t", R.digest({"name": "t", "arguments": {"a": 1}}), 5_000)


@pytest.mark.parametrize(("change", "now", "why"), [
    ({}, 1_000, None),
    ({}, 6_000, "expired"),
    ({"principal": "bob"}, 1_000, "another request"),
    ({"digest": R.digest({"name": "t", "arguments": {"a": 2}})}, 1_000, "another request"),
    ({"name": "u"}, 1_000, "another request"),
    ({"round": 2}, 1_000, "already answered"),  # the call went on: this state was used
    ({"call": "call-2"}, 1_000, "already answered"),
])
def test_a_state_is_checked_against_the_retry(change, now, why) -> None:
    expected = R.Claims(**{**{f: getattr(CLAIMS, f) for f in CLAIMS.__slots__}, **change})
    error = R.check_claims(R.decode_claims(CLAIMS.encode()), expected, now)
    assert (None if error is None else error.code) == (None if why is None else -32602)
    assert why is None or (error is not None and why in error.message)


def test_undecodable_claims_are_refused_and_the_digest_ignores_meta() -> None:
    assert R.decode_claims(b"[1,2]") is None and R.decode_claims(b"\xff") is None
    refused = R.check_claims(None, CLAIMS, 0)
    assert refused is not None and refused.code == -32602
    assert R.digest({"name": "t", "_meta": {"a": 1}, "requestState": "x"}) == R.digest({"name": "t"})


# --- the call machine ----------------------------------------------------------------------------------
NO_LIMITS = R.CallLimits()


def run(events, caps=CAPS, limits=NO_LIMITS):
    state, out = R.start("tools/call", caps, limits), []
    for event in events:
        state, actions = R.handle(state, event)
        out.append(actions)
    return state, out


def test_two_rounds_then_the_result() -> None:
    state, out = run([R.ServerAsked(7, "sampling/createMessage", SAMPLE), R.Drained(),
                      R.Retried({"in1": {"role": "assistant", "content": {}, "model": "m"}, "junk": 1}),
                      R.Drained(), R.ServerAsked(8, "elicitation/create", URL), R.Drained(),
                      R.Retried({"in2": {"action": "accept"}}),
                      R.ServerAnswered({"content": []})])
    assert out == [
        (), (R.AskClient({"in1": {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}},
                         1),),
        (R.AnswerServer(7, {"role": "assistant", "content": {}, "model": "m"}),), (), (),
        (R.AskClient({"in2": {"method": "elicitation/create",
                              "params": {"mode": "url", "message": "open", "url": "https://x/1"}}}, 2),),
        (R.AnswerServer(8, {"action": "accept"}),),
        (R.Finish({"content": [], "resultType": "complete"}),)]
    assert state.phase is R.Phase.DONE


def test_several_questions_at_once_and_a_missing_answer_is_asked_again() -> None:
    state, out = run([R.ServerAsked(1, "roots/list", {}), R.ServerAsked(2, "elicitation/create", FORM),
                      R.Drained(), R.Retried({"in1": {"roots": []}})])
    assert list(out[2][0].requests) == ["in1", "in2"]
    assert out[3] == (R.AnswerServer(1, {"roots": []}),
                      R.AskClient({"in2": {"method": "elicitation/create", "params": FORM}}, 2))
    assert state.round == 2 and state.phase is R.Phase.WAITING


@pytest.mark.parametrize(("method", "params", "caps", "needed"), [
    ("sampling/createMessage", SAMPLE, {}, {"sampling": {}}),
    ("sampling/createMessage", {**SAMPLE, "tools": [{}]}, {"sampling": {}}, {"sampling": {"tools": {}}}),
    ("elicitation/create", FORM, {"elicitation": {"url": {}}}, {"elicitation": {"form": {}}}),
    ("elicitation/create", URL, {"elicitation": {}}, {"elicitation": {"url": {}}}),
    ("roots/list", {}, {"sampling": {}}, {"roots": {}}),
])
def test_a_question_for_an_undeclared_capability_ends_the_call_with_32021(method, params, caps, needed) -> None:
    state, out = run([R.ServerAsked(3, method, params)], caps=caps)
    cancel, finish = out[0]
    assert isinstance(cancel, R.CancelServer) and finish.error.code == -32021
    assert finish.error.data == {"requiredCapabilities": needed} and state.phase is R.Phase.DONE


def test_a_list_cannot_ask_the_client() -> None:
    state, actions = R.handle(R.start("tools/list", CAPS), R.ServerAsked(9, "roots/list", {}))
    assert actions[0].error.code == -32603 and state.phase is R.Phase.RUNNING  # type: ignore[union-attr]


def test_progress_reaches_an_open_request_only_and_logs_never() -> None:
    progress = R.ServerNotified("notifications/progress", {"progressToken": 1, "progress": 1})
    _, out = run([progress, R.ServerNotified("notifications/message", {"level": "info", "data": "x"}),
                  R.ServerAsked(1, "roots/list", {}), R.Drained(), progress])
    assert out[0] == (R.Notify({"jsonrpc": "2.0", "method": "notifications/progress",
                                "params": {"progressToken": 1, "progress": 1}}),)
    assert out[1] == () and out[4] == ()


@pytest.mark.parametrize(("token", "expected"), [
    ("round-2", {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "round-2",
                                                                                  "progress": 1}}),
    (None, None), (True, None)])
def test_progress_carries_the_token_of_the_request_driving_the_call(token, expected) -> None:
    sent = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 7, "progress": 1}}
    assert R.progress_for(sent, token) == expected


def test_ping_and_unknown_server_requests_are_answered_at_once() -> None:
    _, out = run([R.ServerAsked(4, "ping"), R.ServerAsked(5, "tasks/get")])
    assert out[0] == (R.AnswerServer(4, {}),)
    assert out[1][0].error.code == -32601


@pytest.mark.parametrize(("events", "last"), [
    ([R.ServerAsked(1, "roots/list", {}), R.Drained(), R.AnswerTimedOut(1)],
     (R.CancelServer("the client did not answer in time"),)),
    ([R.ServerAsked(1, "roots/list", {}), R.Drained(), R.AnswerTimedOut(0)], ()),  # a stale timer
    ([R.ClientGone()], (R.CancelServer("the client closed the request"),)),
    ([R.ServerAsked(1, "roots/list", {}), R.Drained(), R.ClientGone()], ()),  # parked: no stream to close
    ([R.ServerAnswered(error={"code": -32002, "message": "gone"})], (R.Finish(error=W.modern_error(
        {"code": -32002, "message": "gone"})),)),
    ([R.ServerAnswered({}), R.ServerAnswered({})], ()),  # late: ignored
    ([R.ServerAsked(1, "roots/list", {}), R.Drained(), R.ServerAnswered({"content": []}), R.Retried({})],
     (R.Finish({"content": [], "resultType": "complete"}),)),  # answered while parked: the retry gets it
])
def test_timeouts_cancels_and_late_answers(events, last) -> None:
    _, out = run(events)
    assert out[-1] == last


def test_the_round_and_request_bounds() -> None:
    _, out = run([R.ServerAsked(1, "roots/list", {}), R.Drained(), R.Retried({"in1": {"roots": []}}),
                  R.ServerAsked(2, "roots/list", {}), R.Drained()], limits=R.CallLimits(max_rounds=1))
    assert out[-1][1].error.data == {"limit": "reverse.max_rounds", "value": 1}
    _, out = run([R.ServerAsked(1, "roots/list", {}), R.ServerAsked(2, "roots/list", {}), R.Drained()],
                 limits=R.CallLimits(max_input_requests_per_round=1))
    assert out[-1][1].error.data["limit"] == "reverse.max_input_requests_per_round"


# --- replicas ------------------------------------------------------------------------------------------
def test_a_state_minted_on_another_replica_is_checked_here_but_for_its_round() -> None:
    minted = R.Claims("call-1", 3, "alice", "tools/call", "t", CLAIMS.digest, 5_000, "replica-a")
    assert R.decode_claims(minted.encode()) == minted
    assert R.held_elsewhere(minted, "replica-b") == "replica-a"
    assert R.held_elsewhere(minted, "replica-a") is None and R.held_elsewhere(None, "replica-b") is None
    assert R.held_elsewhere(R.Claims("c", 1, "a", "m", "n", "d", 0), "replica-b") is None  # names none
    retry = R.Claims("", -1, "alice", "tools/call", "t", CLAIMS.digest, 0)
    assert R.check_claims(minted, R.relayed_claims(minted, retry), 1_000) is None
    for change in ({"principal": "bob"}, {"name": "u"}, {"digest": "x"}):
        refused = R.check_claims(minted, R.relayed_claims(minted, R.Claims(**{**_fields(retry), **change})), 1_000)
        assert refused is not None and refused.code == -32602
    expired = R.check_claims(minted, R.relayed_claims(minted, retry), 6_000)
    assert expired is not None and "expired" in expired.message
    gone = R.holder_gone()
    assert gone.code == -32602 and "send the request again without requestState" in gone.message


def _fields(claims: R.Claims) -> dict[str, Any]:
    return {f: getattr(claims, f) for f in claims.__slots__}


# --- 2025 clients relayed ------------------------------------------------------------------------------
SESSION = R.RelayedSession("old", "up-1", "alice")


@pytest.mark.parametrize(("has_id", "session", "principal", "routed", "relayed"), [
    (False, None, "alice", "old", "old"),  # an initialize whose peer routes to a 2025-era upstream
    (False, None, "alice", "new", None),  # ... to a 2026 one: the gateway's own sessions
    (False, None, "alice", "default", None),
    (True, SESSION, "alice", "", "old"),  # a relayed session's request: where its id says
    (True, SESSION, "bob", "", None),  # another principal's: not found
    (True, None, "alice", "", None),  # an id not ours (the gateway's own session, or junk)
    (True, R.RelayedSession("gone", "up-1", "alice"), "alice", "", None),  # an upstream no longer 2025-era
])
def test_a_2025_request_is_relayed_where_its_session_or_peer_says(has_id, session, principal, routed,
                                                                  relayed) -> None:
    assert R.relay_upstream(has_id, session, principal, routed, {"old", "legacy"}) == relayed


def test_a_relayed_sessions_claims_round_trip() -> None:
    assert R.decode_relayed_session(SESSION.encode()) == SESSION
    assert R.decode_relayed_session(b'["a","b"]') is None and R.decode_relayed_session(b"\xff") is None
    assert R.decode_relayed_session(b'["a","b",3]') is None
