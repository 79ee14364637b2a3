"""The relay's pure parts: ownership keys, relayed messages (one frozen dataclass per kind) and their wire form,
the routing decision."""

from __future__ import annotations

import pytest

from adapters import relay as R
from adapters.jsonwire import loads

ANSWER = {"jsonrpc": "2.0", "id": "g1", "result": {}}
CANCEL = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}
TO = R.ReplyTo("replica-b", "t1")


def test_keys_tell_ids_apart() -> None:
    assert R.answer_key("gab12") == "oa:gab12" and R.answer_key(7) is None  # the gateway only mints strings
    assert R.request_key("s", 1) != R.request_key("s", "1") and R.request_key("s", 1) != R.request_key("t", 1)
    assert R.relay_channel("p:", "abc") == "p:relay:abc" and R.broadcast_channel("p:").startswith("p:relay")


# Every kind, with and without what it may carry, and its wire form as the previous version wrote it (replicas of
# both versions share one bus during an upgrade: docs/design/replicas.md#replicas-relay-through-the-store).
KINDS = [
    (R.Answer("s1", ANSWER), {"k": "answer", "s": "s1", "m": ANSWER}),
    (R.Answer("s1", ANSWER, TO), {"k": "answer", "s": "s1", "m": ANSWER, "r": "replica-b", "t": "t1", "h": False}),
    (R.Cancel("s1", CANCEL), {"k": "cancel", "s": "s1", "m": CANCEL}),
    (R.Cancel("s1", CANCEL, TO), {"k": "cancel", "s": "s1", "m": CANCEL, "r": "replica-b", "t": "t1", "h": False}),
    (R.End("s1"), {"k": "end", "s": "s1", "m": None}),
    (R.Ack("s1", TO, True), {"k": "ack", "s": "s1", "m": None, "r": "replica-b", "t": "t1", "h": True}),
    (R.Ack("s1", TO, False), {"k": "ack", "s": "s1", "m": None, "r": "replica-b", "t": "t1", "h": False}),
    (R.Retry({"upstream": "old", "request": {"id": 1}}, TO),
     {"k": "retry", "s": "", "m": {"upstream": "old", "request": {"id": 1}}, "r": "replica-b", "t": "t1", "h": False}),
    (R.Reply({"jsonrpc": "2.0", "id": 1, "result": {}}, TO),
     {"k": "reply", "s": "", "m": {"jsonrpc": "2.0", "id": 1, "result": {}}, "r": "replica-b", "t": "t1", "h": False}),
]


@pytest.mark.parametrize("relayed,wire", KINDS, ids=[f"{type(k).__name__}-{i}" for i, (k, _) in enumerate(KINDS)])
def test_each_kind_round_trips_in_the_previous_versions_wire_form(relayed, wire) -> None:
    data = R.encode(relayed)
    assert loads(data) == wire and list(loads(data)) == list(wire)  # the same members, in the same order
    assert R.decode(data) == relayed and R.decode(data.decode()) == relayed


def test_what_the_previous_version_accepted_is_still_accepted() -> None:
    # An end that carried a message object, and a retry's session that is not empty: read, the extra ignored.
    assert R.decode(b'{"k": "end", "s": "s1", "m": {"x": 1}}') == R.End("s1")
    assert R.decode(b'{"k": "retry", "s": "x", "m": {}, "r": "b", "t": "t"}') == R.Retry({}, R.ReplyTo("b", "t"))
    assert R.decode(b'{"k": "end", "s": "s1", "m": null, "r": "b", "t": "t3"}') == R.End("s1")  # asks nothing


@pytest.mark.parametrize("bad,reason", [
    (b"not json", R.DropReason.NOT_JSON),
    (b"[" * 300 + b"]" * 300, R.DropReason.NOT_JSON),  # deeper than the gateway writes
    (b"[]", R.DropReason.NOT_AN_ENVELOPE),
    (b'"answer"', R.DropReason.NOT_AN_ENVELOPE),
    (b'{"s": "s1"}', R.DropReason.NOT_AN_ENVELOPE),
    (b'{"k": "other", "s": "s1", "m": {}}', R.DropReason.NOT_AN_ENVELOPE),
    (b'{"k": 5, "s": "s1", "m": {}}', R.DropReason.NOT_AN_ENVELOPE),
    (b'{"k": "answer", "s": 1, "m": {}}', R.DropReason.BAD_FIELDS),
    (b'{"k": "answer", "s": "s1", "m": null}', R.DropReason.BAD_FIELDS),
    (b'{"k": "cancel", "s": "s1", "m": []}', R.DropReason.BAD_FIELDS),
    (b'{"k": "answer", "s": "s1", "m": {}, "r": "b", "t": 5}', R.DropReason.BAD_FIELDS),
    (b'{"k": "answer", "s": "s1", "m": {}, "r": "b"}', R.DropReason.BAD_FIELDS),  # a reply address needs its token
    (b'{"k": "ack", "s": "s1", "m": null}', R.DropReason.BAD_FIELDS),  # an ack without its token
    (b'{"k": "ack", "s": "s1", "m": {}, "r": "b", "t": "t1", "h": true}', R.DropReason.BAD_FIELDS),  # no message
    (b'{"k": "ack", "s": "s1", "m": null, "r": "b", "t": "t1", "h": "yes"}', R.DropReason.BAD_FIELDS),
    (b'{"k": "end", "s": "s1", "m": 3}', R.DropReason.BAD_FIELDS),
    (b'{"k": "retry", "s": "", "m": {}}', R.DropReason.BAD_FIELDS),  # a retry names where its reply goes
    (b'{"k": "reply", "s": "", "m": {}}', R.DropReason.BAD_FIELDS),
    (b'{"k": "reply", "s": "", "m": "x", "r": "b", "t": "t"}', R.DropReason.BAD_FIELDS),
])
def test_what_is_no_relayed_message_is_dropped_with_its_reason(bad, reason) -> None:
    assert R.decode(bad) == R.Drop(reason)


def test_route() -> None:
    assert R.route(None, "me") == R.Drop(R.DropReason.NO_OWNER)
    assert R.route("me", "me") == R.Drop(R.DropReason.OWNED_HERE)
    assert R.route("other", "me") == R.RelayTo("other")


def test_an_answer_or_cancel_names_its_ack_only_when_it_asked_for_one() -> None:
    for asked in (R.Answer("s1", ANSWER, TO), R.Cancel("s1", CANCEL, TO)):
        assert asked.acked(True) == R.Ack("s1", TO, True) and asked.acked(False) == R.Ack("s1", TO, False)
    assert R.Answer("s1", ANSWER).acked(True) is None and R.Cancel("s1", CANCEL).acked(False) is None


def test_a_retry_names_its_reply() -> None:
    retry = R.Retry({"upstream": "old", "request": {"id": 1}}, TO)
    assert retry.reply({"jsonrpc": "2.0", "id": 1, "result": {}}) == R.Reply({"jsonrpc": "2.0", "id": 1, "result": {}},
                                                                             TO)
