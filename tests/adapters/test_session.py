"""The legacy session core, message by message with no loop, store or clock: every protocol decision the shell
used to make in its handlers (2025-11-25 basic/lifecycle, basic/utilities/cancellation, server/utilities/logging;
docs/design/core-and-shell.md#one-session-core-decides-the-shell-performs)."""

from __future__ import annotations

import dataclasses

import pytest

from adapters import session as S
from adapters.admission import SessionLimits
from adapters.authz import Principal, ResourceServer
from adapters.bridge import BridgeLimits
from adapters.classify import Accepted, Kind
from adapters.errors import GATEWAY_LIMIT_EXCEEDED, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND
from adapters.peers import Peer
from adapters.protocol import LATEST_LEGACY, LEGACY_VERSIONS, MODERN_VERSION, SSE_ERA_VERSION
from adapters.records import SessionRecord
from adapters.tool_policy import ToolPolicy

TODAY = "2026-12-04"
LIMITS = BridgeLimits()
SESSION_LIMITS = SessionLimits()
PEER = Peer("default")
CAPS = {"sampling": {}, "elicitation": {"form": {}}, "roots": {"listChanged": True}}
INFO = {"name": "client", "version": "1.0"}


def record(version: str = LATEST_LEGACY) -> SessionRecord:
    return SessionRecord("s1", "anonymous", version, dict(CAPS), dict(INFO), 0, 0)


def request(method: str, params=None, ident=7, version: str = LATEST_LEGACY) -> Accepted:
    message = {"jsonrpc": "2.0", "id": ident, "method": method, **({"params": params} if params is not None else {})}
    return Accepted(Kind.REQUEST, "anonymous", message, record(version))


def on_session(peer: Peer = PEER, in_flight=(), limits: BridgeLimits = LIMITS) -> S.Context:
    return S.Context(TODAY, limits, SessionLimits(), peer, in_flight=in_flight)


def error_code(actions) -> int:
    (reply,) = actions
    assert isinstance(reply, S.Reply)
    return reply.message["error"]["code"]


# --- requests on a session ---------------------------------------------------------------------------------
def test_ping_is_answered_here_with_an_empty_result() -> None:
    assert S.handle(request("ping"), on_session()) == (S.Reply({"jsonrpc": "2.0", "id": 7, "result": {}}),)


def test_unknown_methods_and_a_second_initialize_are_refused_without_going_upstream() -> None:
    assert error_code(S.handle(request("tasks/list"), on_session())) == METHOD_NOT_FOUND
    again = request("initialize", {"protocolVersion": LATEST_LEGACY, "capabilities": {}, "clientInfo": INFO})
    (reply,) = S.handle(again, on_session())
    assert reply.message["error"] == {"code": INVALID_REQUEST, "message": "the session is already initialized"}


def test_set_level_keeps_the_level_in_the_record_before_answering() -> None:
    actions = S.handle(request("logging/setLevel", {"level": "warning"}), on_session())
    assert actions == (S.UpdateSession(S.SessionChange.LOG_LEVEL, "warning"),
                       S.Reply({"jsonrpc": "2.0", "id": 7, "result": {}}))
    assert error_code(S.handle(request("logging/setLevel", {"level": "loud"}), on_session())) == INVALID_PARAMS


def test_subscribe_and_unsubscribe_become_a_subscription_change() -> None:
    params = {"uri": "notes://1"}
    assert S.handle(request("resources/subscribe", params), on_session()) == (
        S.ChangeSubscription(7, params, True),)
    assert S.handle(request("resources/unsubscribe", params), on_session()) == (
        S.ChangeSubscription(7, params, False),)


def test_a_forwarded_request_is_bounded_by_its_peers_limits() -> None:
    peer = Peer("tight", max_rounds=2)
    (forward,) = S.handle(request("tools/call", {"name": "t", "arguments": {}}), on_session(peer))
    assert forward == S.Forward(7, dataclasses.replace(LIMITS, max_rounds=2))


def test_an_id_already_in_flight_is_refused_and_nothing_is_forwarded() -> None:
    actions = S.handle(request("tools/list", ident="x"), on_session(in_flight={"x"}))
    assert error_code(actions) == INVALID_REQUEST


def test_the_pending_limit_refuses_one_more_request() -> None:
    full = on_session(in_flight={1, 2}, limits=dataclasses.replace(LIMITS, max_pending_per_session=2))
    (reply,) = S.handle(request("tools/list", ident=3), full)
    assert isinstance(reply, S.Reply) and reply.message["error"]["code"] == GATEWAY_LIMIT_EXCEEDED
    assert reply.message["error"]["data"]["limit"] == "max_pending_per_session"


def test_a_session_outliving_its_peers_sunset_is_refused_whatever_it_asks() -> None:
    past = Peer("old", sunset="2026-12-01")
    for method in ("ping", "tools/list", "logging/setLevel"):
        (reply,) = S.handle(request(method, {"level": "info"}, version="2025-06-18"), on_session(past))
        assert reply.message["error"]["data"] == {"supported": [MODERN_VERSION], "requested": "2025-06-18",
                                                  "sunset": "2026-12-01"}
    assert isinstance(S.handle(request("ping"), on_session(Peer("old", sunset=TODAY)))[0], S.Reply)


def test_invalid_params_are_refused_against_the_sessions_revision() -> None:
    assert error_code(S.handle(request("tools/call", {"arguments": {}}), on_session())) == INVALID_PARAMS


# --- notifications and answers -----------------------------------------------------------------------------
def note(method: str, params=None) -> Accepted:
    message = {"jsonrpc": "2.0", "method": method, **({"params": params} if params is not None else {})}
    return Accepted(Kind.NOTIFICATION, "anonymous", message, record())


def test_notifications_change_the_record_then_are_acknowledged() -> None:
    assert S.handle(note("notifications/initialized"), on_session()) == (
        S.UpdateSession(S.SessionChange.INITIALIZED, True), S.Acknowledge())
    assert S.handle(note("notifications/roots/list_changed"), on_session()) == (
        S.UpdateSession(S.SessionChange.ROOTS_STALE), S.Acknowledge())
    assert S.handle(note("notifications/progress", {"progressToken": 1, "progress": 1}), on_session()) == (
        S.Acknowledge(),)


@pytest.mark.parametrize(("params", "expected"), [
    ({"requestId": 5, "reason": "user"}, (S.Cancel(5, "user"),)),
    ({"requestId": "a", "reason": 9}, (S.Cancel("a", None),)),  # a non-text reason is dropped, not fatal
    ({"requestId": [1]}, ()),  # invalid cancellations are ignored (2025-11-25 cancellation §Error Handling)
    ({"requestId": True}, ()),
    ({}, ()),
])
def test_a_cancel_names_a_valid_request_id_or_is_ignored(params, expected) -> None:
    assert S.handle(note("notifications/cancelled", params), on_session()) == (*expected, S.Acknowledge())


def test_a_clients_answer_is_delivered_then_acknowledged() -> None:
    answer = {"jsonrpc": "2.0", "id": "g1", "result": {}}
    assert S.handle(Accepted(Kind.RESPONSE, "anonymous", answer, record()), on_session()) == (
        S.Deliver(answer), S.Acknowledge())


# --- initialize --------------------------------------------------------------------------------------------
def initialize(version="2025-06-18", capabilities=CAPS, info=INFO, principal="anonymous") -> Accepted:
    params = {"protocolVersion": version, "capabilities": capabilities, "clientInfo": info}
    return Accepted(Kind.INITIALIZE, principal, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                                 "params": params})


def before_session(*peers: Peer, limits: SessionLimits = SESSION_LIMITS) -> S.Context:
    return S.Context(TODAY, LIMITS, limits, peers=peers, default_peer=PEER, offered=LEGACY_VERSIONS)


def test_initialize_opens_a_session_at_the_requested_revision_or_our_latest() -> None:
    assert S.handle(initialize(), before_session()) == (S.OpenSession(PEER, "2025-06-18", CAPS, INFO),)
    (opening,) = S.handle(initialize("1999-01-01"), before_session())
    assert isinstance(opening, S.OpenSession) and opening.version == LATEST_LEGACY


def test_initialize_masks_capabilities_by_the_matched_peers_bridge_policy() -> None:
    no_sampling = Peer("tool", client_name="client", input_kinds=("roots",))
    (opening,) = S.handle(initialize(), before_session(no_sampling))
    assert isinstance(opening, S.OpenSession) and opening.peer is no_sampling
    assert "sampling" not in opening.capabilities and "roots" in opening.capabilities


def test_initialize_refusals_carry_the_operators_reason() -> None:
    modern_only = Peer("modern", client_name="client", revisions=(MODERN_VERSION,))
    (reply,) = S.handle(initialize(), before_session(modern_only))
    assert isinstance(reply, S.Reply) and reply.message["error"]["code"] == INVALID_PARAMS
    assert reply.log == "modern-only peer modern sent initialize"
    big = initialize(info={"name": "x" * 100, "version": "1"})
    (reply,) = S.handle(big, before_session(limits=SessionLimits(max_initialize_bytes=64)))
    assert isinstance(reply, S.Reply) and "max_initialize_bytes" in reply.message["error"]["message"]


def test_initialize_with_invalid_params_is_refused_before_any_peer_check() -> None:
    (reply,) = S.handle(initialize(capabilities="none"), before_session())
    assert isinstance(reply, S.Reply) and reply.message["error"]["code"] == INVALID_PARAMS


# --- the kinds decided by the classifier -------------------------------------------------------------------
@pytest.mark.parametrize("kind", [Kind.OPEN_STREAM, Kind.RESUME, Kind.DELETE])
def test_stream_kinds_are_performed_as_they_are(kind: Kind) -> None:
    assert S.handle(Accepted(kind, "anonymous", session=record()), on_session()) == (S.Stream(kind),)


def test_a_batch_fans_out_each_element() -> None:
    elements = (request("ping", ident=1), note("notifications/initialized"))
    assert S.handle(Accepted(Kind.BATCH, "anonymous", batch=elements), before_session()) == (S.FanOut(elements),)


def modern(client: str = "client") -> Accepted:
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
            "io.modelcontextprotocol/clientInfo": {"name": client, "version": "2"}}
    return Accepted(Kind.MODERN, "anonymous", {"jsonrpc": "2.0", "id": 3, "method": "tools/list",
                                               "params": {"_meta": meta}})


def test_a_modern_request_passes_through_to_its_peers_upstream() -> None:
    canary = Peer("canary", client_name="client", upstream="next")
    assert S.handle(modern(), before_session(canary)) == (S.PassThrough("next"),)
    assert S.handle(modern("other"), before_session(canary)) == (S.PassThrough("default"),)


def test_a_legacy_pinned_peers_modern_request_is_refused_with_400() -> None:
    pinned = Peer("old", client_name="client", revisions=("2025-06-18",))
    (refuse,) = S.handle(modern(), before_session(pinned))
    assert isinstance(refuse, S.Refuse) and refuse.rejection.status == 400
    assert refuse.rejection.body()["error"]["data"] == {"supported": ["2025-06-18"], "requested": MODERN_VERSION}
    assert refuse.rejection.body()["id"] == 3


def test_every_kind_has_actions_ending_in_something_the_shell_answers_with() -> None:
    answering = (S.Reply, S.Acknowledge, S.OpenSession, S.ChangeSubscription, S.Forward, S.Stream, S.FanOut,
                 S.PassThrough, S.Refuse)
    samples = {Kind.REQUEST: request("ping"), Kind.NOTIFICATION: note("notifications/initialized"),
               Kind.RESPONSE: Accepted(Kind.RESPONSE, "anonymous", {"id": 1, "result": {}}, record()),
               Kind.INITIALIZE: initialize()}
    for kind in Kind:
        acc = samples.get(kind, Accepted(kind, "anonymous", session=record()))
        context = before_session() if kind in (Kind.INITIALIZE, Kind.MODERN) else on_session()
        actions = S.handle(acc, context)
        assert actions and isinstance(actions[-1], answering), kind


def test_actions_are_frozen_values() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        S.Cancel(1, None).request_id = 2  # type: ignore[misc]
    assert hash(S.Stream(Kind.DELETE)) == hash(S.Stream(Kind.DELETE))


def test_the_kind_table_covers_every_kind() -> None:
    assert set(S._BY_KIND) == set(Kind)


def test_initialize_negotiates_only_what_the_clients_door_offers() -> None:
    door = S.Context(TODAY, LIMITS, SESSION_LIMITS, peers=(), default_peer=PEER,
                     offered=(*LEGACY_VERSIONS, SSE_ERA_VERSION))
    (opening,) = S.handle(initialize(SSE_ERA_VERSION), door)
    assert isinstance(opening, S.OpenSession) and opening.version == SSE_ERA_VERSION
    (opening,) = S.handle(initialize(SSE_ERA_VERSION), before_session())  # /mcp: offered the latest instead
    assert isinstance(opening, S.OpenSession) and opening.version == LATEST_LEGACY


# --- per-peer tool policy and token claims (adapters.tool_policy, adapters.peers) ---------------------------
RESOURCE = ResourceServer("https://gw.example/mcp", ("https://as.example",))
POLICED = Peer("ide", tools=ToolPolicy(allowed=("read_*", "deploy*"), denied=("read_secrets",),
                                        scopes=(("deploy*", "deploy"),)))


def token(*scopes: str, client: str = "ide-app") -> Principal:
    return Principal("https://as.example", "alice", client, frozenset(scopes), None)


def call(name: str, grant: Principal | None = None, ident=9) -> Accepted:
    message = {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": {"name": name, "arguments": {}}}
    return Accepted(Kind.REQUEST, "oauth:x", message, record(), grant=grant)


def with_auth(peer: Peer = POLICED, resource: ResourceServer | None = RESOURCE) -> S.Context:
    return S.Context(TODAY, LIMITS, SessionLimits(), peer, resource=resource)


@pytest.mark.parametrize("name", ["write_file", "read_secrets", "READ_file"])
def test_a_tool_the_peer_may_not_use_is_an_unknown_tool_and_is_not_forwarded(name) -> None:
    (reply,) = S.handle(call(name, token("mcp")), with_auth())
    assert isinstance(reply, S.Reply)
    assert reply.message["error"] == {"code": INVALID_PARAMS, "message": f"Unknown tool: {name}"}
    assert reply.message["id"] == 9 and "ide" in (reply.log or "")


def test_an_allowed_tool_is_forwarded() -> None:
    (forward,) = S.handle(call("read_file", token()), with_auth())
    assert isinstance(forward, S.Forward) and forward.ident == 9
    (forward,) = S.handle(call("deploy_dev", token("deploy")), with_auth())
    assert isinstance(forward, S.Forward)


def test_a_tool_needing_a_scope_the_token_lacks_steps_up_with_403_naming_it() -> None:
    (refuse,) = S.handle(call("deploy_dev", token("mcp")), with_auth())
    assert isinstance(refuse, S.Refuse) and refuse.rejection.status == 403
    (challenge,) = refuse.rejection.error.challenge.challenges
    assert 'error="insufficient_scope"' in challenge and 'scope="deploy mcp"' in challenge
    assert 'resource_metadata="https://gw.example/.well-known/oauth-protected-resource/mcp"' in challenge
    assert refuse.rejection.body()["id"] == 9
    assert refuse.rejection.body()["error"]["data"] == {"authorization": "insufficient_scope"}


def test_without_a_verified_token_a_scoped_tool_is_never_callable() -> None:
    (reply,) = S.handle(call("deploy_dev", None), with_auth(resource=None))
    assert isinstance(reply, S.Reply) and reply.message["error"]["message"] == "Unknown tool: deploy_dev"


def test_other_methods_and_open_policies_are_not_checked() -> None:
    (forward,) = S.handle(request("tools/list", {}), with_auth())
    assert isinstance(forward, S.Forward)
    (forward,) = S.handle(call("anything", None), on_session())
    assert isinstance(forward, S.Forward)


def test_a_session_matched_on_scopes_steps_up_when_a_refreshed_token_lost_them() -> None:
    admins = Peer("admins", scopes=("admin",))
    (forward,) = S.handle(call("x", token("admin")), with_auth(admins))
    assert isinstance(forward, S.Forward)
    (refuse,) = S.handle(request("tools/list", {}), with_auth(admins))  # no token at all: refused
    assert isinstance(refuse, S.Refuse) and refuse.rejection.status == 403
    (refuse,) = S.handle(call("x", token("mcp")), with_auth(admins))
    assert isinstance(refuse, S.Refuse) and 'scope="admin mcp"' in refuse.rejection.error.challenge.challenges[0]


def test_initialize_matches_a_peer_on_the_tokens_claims() -> None:
    by_client = Peer("by-client", client_ids=("ide-*",))
    granted = dataclasses.replace(initialize(principal="oauth:x"), grant=token(client="ide-app"))
    (opening,) = S.handle(granted, before_session(by_client))
    assert isinstance(opening, S.OpenSession) and opening.peer is by_client
    (opening,) = S.handle(initialize(principal="oauth:x"), before_session(by_client))
    assert isinstance(opening, S.OpenSession) and opening.peer is PEER


def modern_call(name: str, grant: Principal | None = None) -> Accepted:
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
            "io.modelcontextprotocol/clientInfo": {"name": "client", "version": "2"}}
    message = {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": name, "_meta": meta}}
    return Accepted(Kind.MODERN, "oauth:x", message, grant=grant)


def test_a_modern_request_gets_the_same_tool_policy() -> None:
    peer = dataclasses.replace(POLICED, client_name="client")
    context = S.Context(TODAY, LIMITS, SESSION_LIMITS, peers=(peer,), default_peer=PEER, resource=RESOURCE)
    (reply,) = S.handle(modern_call("write_file", token()), context)
    assert isinstance(reply, S.Reply) and reply.message["error"]["message"] == "Unknown tool: write_file"
    (refuse,) = S.handle(modern_call("deploy_x", token()), context)
    assert isinstance(refuse, S.Refuse) and refuse.rejection.status == 403
    assert S.handle(modern_call("read_file", token()), context) == (S.PassThrough("default", peer.tools),)
    list_request = dataclasses.replace(modern(), principal="oauth:x")
    assert S.handle(list_request, context) == (S.PassThrough("default", peer.tools),)  # filtered by the shell
