"""SSE framing and replay, listen filters and notifications, routing and local answers."""

from __future__ import annotations

import json

import pytest

from adapters import local
from adapters.capabilities import BridgedFeatures
from adapters.sse import ReplayBuffer, SseDecoder, encode_event, event_id, parse_event_id, resumable
from adapters.subscriptions import apply_subscribe, legacy_notification, listen_filter, subscribe_uri
from tests import schema


def test_event_ids_name_their_stream() -> None:
    assert parse_event_id(event_id("ab12", 7)) == ("ab12", 7)
    for bad in (None, "", "nodot", "a.", ".3", "a.-1", "a.x", "a." + "1" * 5000, "a.\u00b2", "a.\u0663",
                "a.1234567890123456789"):
        assert parse_event_id(bad) is None


def test_encode_event_and_decode_round_trip() -> None:
    raw = encode_event("s.1", {"jsonrpc": "2.0", "method": "x"}, retry_ms=500) + encode_event("s.0", None)
    assert raw.startswith(b"id: s.1\nretry: 500\nevent: message\ndata: ")
    decoder = SseDecoder()
    out = decoder.feed(raw[:10]) + decoder.feed(raw[10:])
    assert [json.loads(out[0]), out[1:]] == [{"jsonrpc": "2.0", "method": "x"}, [""]]  # priming: empty data


@pytest.mark.parametrize("after,expected", [(0, None), (1, None), (2, [3, 4, 5]), (4, [5]), (5, []), (6, None),
                                            (-1, None)])
def test_replay_buffer_is_bounded_and_refuses_lost_positions(after, expected) -> None:
    buffer = ReplayBuffer(3)
    for n in range(5):
        buffer.append({"n": n})
    got = buffer.after(after)
    assert (None if got is None else [e.seq for e in got]) == expected


@pytest.mark.parametrize("seq,oldest,next_seq,ok", [
    (0, 1, 1, True),  # opened, nothing sent: the priming position
    (0, 1, 4, True), (3, 1, 4, True), (4, 1, 4, False),  # never sent
    (1, 3, 6, False), (2, 3, 6, True),  # event 2 evicted: resuming after 1 would lose it; after 2 loses nothing
    (-1, 1, 4, False),
])
def test_one_rule_says_which_positions_resume(seq, oldest, next_seq, ok) -> None:
    assert resumable(seq, oldest, next_seq) is ok


def test_a_copy_of_another_stream_numbers_on_from_where_it_starts() -> None:
    buffer = ReplayBuffer(4, first_seq=7)
    assert buffer.after(6) == [] and buffer.after(5) is None and buffer.oldest == 7 and buffer.capacity == 4
    assert buffer.append({"a": 1}).seq == 7


def test_events_nobody_was_sent_are_forgotten_and_their_numbers_reused() -> None:
    buffer = ReplayBuffer(8)
    for n in range(4):
        buffer.append({"n": n})
    buffer.drop_after(2)
    assert [e.seq for e in buffer.after(0)] == [1, 2] and buffer.next_seq == 3 and buffer.after(3) is None
    assert buffer.append({"n": "again"}).seq == 3
    buffer.drop_after(5)  # nothing after it: unchanged
    assert buffer.next_seq == 4 and len(buffer) == 3


def test_fresh_buffer_replays_everything_after_the_priming_event() -> None:
    buffer = ReplayBuffer(8)
    buffer.append({"a": 1})
    assert [e.message for e in buffer.after(0)] == [{"a": 1}]


@pytest.mark.parametrize("subs,features,expected", [
    ([], BridgedFeatures(), {"toolsListChanged": True, "resourcesListChanged": True}),
    (["file:///b", "file:///a", "file:///a"], BridgedFeatures(),
     {"toolsListChanged": True, "resourcesListChanged": True, "resourceSubscriptions": ["file:///a", "file:///b"]}),
    (["file:///a"], BridgedFeatures(list_changed=False, resource_subscribe=False), {}),
])
def test_listen_filter(subs, features, expected) -> None:
    caps = {"tools": {"listChanged": True}, "resources": {"listChanged": True, "subscribe": True}, "prompts": {}}
    assert listen_filter(caps, subs, features) == expected


def test_subscribe_bookkeeping() -> None:
    assert apply_subscribe(["b"], "a", True) == ["a", "b"]
    assert apply_subscribe(["a", "b"], "a", True) == ["a", "b"]
    assert apply_subscribe(["a", "b"], "a", False) == ["b"]
    assert subscribe_uri({"uri": "file:///x"}) == "file:///x"
    assert subscribe_uri({}).code == -32602


@pytest.mark.parametrize("message,expected", [
    ({"jsonrpc": "2.0", "method": "notifications/resources/updated",
      "params": {"uri": "file:///a", "_meta": {"io.modelcontextprotocol/subscriptionId": "l1"}}},
     {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "file:///a"}}),
    ({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
      "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": "l1"}}},
     {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}),
    ({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": {}}, None),
    ({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": 1}}, None),
    ({"jsonrpc": "2.0", "id": "l1", "result": {"resultType": "complete"}}, None),
])
def test_listen_notifications_for_the_get_stream(message, expected) -> None:
    out = legacy_notification(message)
    assert out == expected
    if out:
        schema.check("2025-11-25", out)


@pytest.mark.parametrize("method,route", [
    ("initialize", "initialize"), ("ping", "ping"), ("logging/setLevel", "set_level"),
    ("resources/subscribe", "subscribe"), ("resources/unsubscribe", "unsubscribe"),
    ("tools/call", "bridge"), ("prompts/get", "bridge"), ("resources/read", "bridge"),
    ("tools/list", "forward"), ("completion/complete", "forward"), ("resources/templates/list", "forward"),
    ("tasks/get", "not_found"), ("tasks/list", "not_found"), ("server/discover", "not_found"), ("nope", "not_found"),
])
def test_request_routes(method, route) -> None:
    assert local.route_request(method) == route


@pytest.mark.parametrize("method,route", [
    ("notifications/initialized", "initialized"), ("notifications/cancelled", "cancelled"),
    ("notifications/roots/list_changed", "roots_changed"), ("notifications/progress", "ignore"),
])
def test_notification_routes(method, route) -> None:
    assert local.route_notification(method) == route


@pytest.mark.parametrize("params,ok", [({"level": "debug"}, True), ({"level": "loud"}, False), ({}, False)])
def test_set_level(params, ok) -> None:
    assert (local.set_level(params) == params.get("level")) == ok


@pytest.mark.parametrize("method,version,params,code", [
    ("tools/call", "2025-11-25", {"name": "x"}, None),
    ("tools/call", "2025-11-25", {"name": 3}, -32602),
    ("tools/call", "2025-03-26", {"name": "x", "arguments": {}}, None),
    ("resources/read", "2025-06-18", {}, -32602),
])
def test_check_request_validates_a_view_per_negotiated_revision(method, version, params, code) -> None:
    problem = local.check_request(method, version, params)
    assert (problem.code if problem else None) == code


def test_a_listen_refusal_is_the_upstream_error_translated() -> None:
    from adapters.subscriptions import listen_refusal
    refused = {"jsonrpc": "2.0", "id": "l1", "error": {"code": -32602, "message": "unknown resource"}}
    assert listen_refusal(refused, "l1").code == -32602
    assert listen_refusal({**refused, "id": None}, "l1").message == "unknown resource"  # rejected before the id
    assert listen_refusal(refused, "l2") is None  # someone else's
    assert listen_refusal({"jsonrpc": "2.0", "id": "l1", "result": {"resultType": "complete"}}, "l1") is None
    assert listen_refusal({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged"}, "l1") is None
    fault = {"jsonrpc": "2.0", "id": "l1", "error": {"code": -32020, "message": "bad header"}}
    assert listen_refusal(fault, "l1").code == -32603  # the gateway's own fault, not the client's (§4.2)


def test_the_uris_an_acknowledgement_leaves_out() -> None:
    from adapters.subscriptions import unhonoured, unhonoured_error

    def ack(notifications):
        return {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                "params": {"notifications": notifications}}
    wanted = {"toolsListChanged": True, "resourceSubscriptions": ["a", "b"]}
    assert unhonoured(ack(wanted), wanted) == []
    assert unhonoured(ack({"resourceSubscriptions": ["b"]}), wanted) == ["a"]  # a left-out family does not count
    assert unhonoured(ack({"toolsListChanged": True}), wanted) == ["a", "b"]
    assert unhonoured({"method": "notifications/subscriptions/acknowledged"}, wanted) == ["a", "b"]
    assert unhonoured(ack({}), {"toolsListChanged": True}) == []
    assert unhonoured_error(["a"]).code == -32602


def test_only_transport_failures_of_an_acknowledged_listen_are_retried() -> None:
    from adapters.errors import ErrorValue, UpstreamFault, upstream_failure
    from adapters.subscriptions import worth_retrying
    for kind in (UpstreamFault.STREAM_BROKEN, UpstreamFault.TIMEOUT, UpstreamFault.UNREACHABLE, UpstreamFault.BUSY,
                 UpstreamFault.HTTP_5XX):
        assert worth_retrying(upstream_failure(kind, "x"))
    # the upstream answered, and would again
    for kind in (UpstreamFault.HTTP_STATUS, UpstreamFault.NON_JSON, UpstreamFault.INVALID_RESPONSE):
        assert not worth_retrying(upstream_failure(kind, "x"))
    assert not worth_retrying(ErrorValue(-32602, "unknown resource"))  # a JSON-RPC refusal
    assert not worth_retrying(ErrorValue(-32602, "odd", {"upstream": "not a kind"}))


def test_a_filter_without_uris_keeps_the_rest() -> None:
    from adapters.subscriptions import without_uris
    wanted = {"toolsListChanged": True, "resourceSubscriptions": ["file:///a", "file:///b"]}
    assert without_uris(wanted, ["file:///b"]) == {"toolsListChanged": True, "resourceSubscriptions": ["file:///a"]}
    assert without_uris(wanted, ["file:///a", "file:///b"]) == {"toolsListChanged": True}
    assert wanted["resourceSubscriptions"] == ["file:///a", "file:///b"]  # not changed in place


def test_the_gateways_own_warning_goes_only_to_sessions_whose_level_admits_it() -> None:
    from adapters.subscriptions import gateway_warning
    for level in (None, "error", "critical", "bogus"):
        assert gateway_warning(level, "t", {}) is None
    for level in ("debug", "info", "notice", "warning"):
        note = gateway_warning(level, "stopped", {"unhonouredUris": ["file:///b"]})
        assert note["method"] == "notifications/message" and note["params"]["level"] == "warning"
        assert note["params"]["data"] == {"message": "stopped", "unhonouredUris": ["file:///b"]}
        schema.check("2025-11-25", note)


def test_the_decoder_splits_lines_across_any_chunking() -> None:
    raw = b"event: message\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n: comment\n\ndata:x\n\ndata: \xc3\xa9\n\n"
    for size in (1, 2, 3, 7, len(raw)):
        decoder = SseDecoder()
        out = [d for start in range(0, len(raw), size) for d in decoder.feed(raw[start:start + size])]
        assert out == ['{"a":\n1}', "x", "é"]


class _CountingChunk(bytes):
    """A chunk that counts the bytes searched for line ends in it (the decoder's work)."""

    searched = 0

    def find(self, sub, start=0, *rest):  # type: ignore[override]
        found = bytes.find(self, sub, start, *rest)
        _CountingChunk.searched += (found if found >= 0 else len(self)) - start + 1
        return found


def test_one_large_event_costs_linear_work() -> None:
    """A 20 MB event fed in 64 KiB chunks: every byte is searched about once (the old decoder searched its whole
    buffer again on each chunk: about 160 times as many bytes here, and quadratic in the event's size)."""
    event = b"data: " + b"x" * (20 << 20) + b"\n\n"
    decoder, out = SseDecoder(), []
    _CountingChunk.searched = 0
    for start in range(0, len(event), 65536):
        out += decoder.feed(_CountingChunk(event[start:start + 65536]))
    assert len(out) == 1 and len(out[0]) == 20 << 20
    # Line ends are looked for in each new chunk itself, never in a buffer of everything still pending.
    assert len(event) <= _CountingChunk.searched <= 2 * len(event)


def test_an_event_over_the_bound_raises_and_a_long_stream_does_not() -> None:
    from adapters.sse import EventTooLarge

    decoder = SseDecoder(max_event_bytes=1000)
    for _ in range(100):  # 100 events of 500 bytes: 50 kB in all, fine
        assert decoder.feed(b"data: " + b"y" * 492 + b"\n\n") == ["y" * 492]
    with pytest.raises(EventTooLarge, match="1000"):  # one line in parts, never ended
        for _ in range(20):
            decoder.feed(b"data: " + b"z" * 100)
    decoder = SseDecoder(max_event_bytes=1000)
    with pytest.raises(EventTooLarge):  # many short lines of one event
        decoder.feed(b"data: abc\n" * 200)


@pytest.mark.parametrize("params", [None, {}, {"requestId": [1]}, {"requestId": {"a": 1}}, {"requestId": None},
                                    {"requestId": True}, {"requestId": 1.0}, "x"])
def test_a_cancel_naming_no_valid_request_id_asks_for_nothing(params) -> None:
    assert local.cancel_request(params) is None  # 2025-11-25 §Cancellation: invalid ones SHOULD be ignored


def test_a_cancel_keeps_a_text_reason_and_drops_any_other() -> None:
    assert local.cancel_request({"requestId": "r", "reason": "user"}) == local.CancelRequest("r", "user")
    assert local.cancel_request({"requestId": 3, "reason": ["x"]}) == local.CancelRequest(3, None)
