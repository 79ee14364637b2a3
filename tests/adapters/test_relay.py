"""The relay's pure parts: ownership keys, relayed messages, the routing decision."""

from __future__ import annotations

from adapters import relay as R


def test_keys_tell_ids_apart() -> None:
    assert R.answer_key("gab12") == "oa:gab12" and R.answer_key(7) is None  # the gateway only mints strings
    assert R.request_key("s", 1) != R.request_key("s", "1") and R.request_key("s", 1) != R.request_key("t", 1)
    assert R.relay_channel("p:", "abc") == "p:relay:abc" and R.broadcast_channel("p:").startswith("p:relay")


def test_relayed_messages_round_trip_and_foreign_ones_are_refused() -> None:
    answer = R.Relayed(R.RelayKind.ANSWER, "s1", {"jsonrpc": "2.0", "id": "g1", "result": {}})
    assert R.Relayed.decode(answer.encode()) == answer
    end = R.Relayed(R.RelayKind.END, "s1")
    assert R.Relayed.decode(end.encode()) == end
    for bad in (b"not json", b"[]", b'{"k": "other", "s": "s1", "m": {}}', b'{"k": "answer", "s": 1, "m": {}}',
                b'{"k": "answer", "s": "s1", "m": null}', b'{"s": "s1"}', b"[" * 300 + b"]" * 300):
        assert R.Relayed.decode(bad) is None


def test_route() -> None:
    assert R.route(None, "me") == R.Drop(R.DropReason.NO_OWNER)
    assert R.route("me", "me") == R.Drop(R.DropReason.OWNED_HERE)
    assert R.route("other", "me") == R.RelayTo("other")


def test_an_answer_or_cancel_that_asks_to_be_acknowledged_round_trips_and_names_its_ack() -> None:
    answer = R.Relayed(R.RelayKind.ANSWER, "s1", {"jsonrpc": "2.0", "id": "g1", "result": {}}, "replica-b", "t1")
    assert R.Relayed.decode(answer.encode()) == answer
    for held in (True, False):
        ack = answer.ack(held)
        assert ack == R.Relayed(R.RelayKind.ACK, "s1", None, "replica-b", "t1", held)
        assert R.Relayed.decode(ack.encode()) == ack
    assert R.Relayed(R.RelayKind.ANSWER, "s1", {"id": "g1"}).ack(True) is None  # it asked for none
    cancel = R.Relayed(R.RelayKind.CANCEL, "s1", {"method": "notifications/cancelled"}, "replica-b", "t2")
    assert cancel.ack(False) == R.Relayed(R.RelayKind.ACK, "s1", None, "replica-b", "t2", False)
    assert R.Relayed(R.RelayKind.END, "s1", None, "replica-b", "t3").ack(True) is None  # an end asks for none
    for bad in (b'{"k": "ack", "s": "s1", "m": null}',  # an ack without its token
                b'{"k": "ack", "s": "s1", "m": {}, "r": "b", "t": "t1", "h": true}',  # an ack carries no message
                b'{"k": "answer", "s": "s1", "m": {}, "r": "b", "t": 5}',
                b'{"k": "answer", "s": "s1", "m": {}, "r": "b"}',
                b'{"k": "ack", "s": "s1", "m": null, "r": "b", "t": "t1", "h": "yes"}'):
        assert R.Relayed.decode(bad) is None


def test_a_reverse_retry_round_trips_and_names_its_reply() -> None:
    retry = R.Relayed(R.RelayKind.RETRY, "", {"upstream": "old", "request": {"id": 1}}, "me", "t1")
    assert R.Relayed.decode(retry.encode()) == retry
    reply = retry.reply({"jsonrpc": "2.0", "id": 1, "result": {}})
    assert reply == R.Relayed(R.RelayKind.REPLY, "", {"jsonrpc": "2.0", "id": 1, "result": {}}, "me", "t1")
    assert R.Relayed.decode(reply.encode()) == reply
    assert R.Relayed(R.RelayKind.RETRY, "", {}).reply({}) is None  # no one to answer
    assert reply.reply({}) is None and not retry.wants_ack  # a reply is not answered; a retry is, not acked
    assert R.Relayed.decode(b'{"k":"retry","s":"","m":{}}') is None  # a retry names its token
