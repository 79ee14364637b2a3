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
