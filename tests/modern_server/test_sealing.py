"""requestState sealing, without HTTP: bindings, expiry, tampering and key rotation."""

from __future__ import annotations

import pytest

from modern_server.errors import McpError
from modern_server.sealing import Sealer

NOW = 1_000.0


def sealer(keys=None, active="k1", clock=lambda: NOW):
    return Sealer(keys or {"k1": b"one"}, active, 60, clock=clock, nonce=lambda: "n")


def seal(s, **kw):
    args = dict(principal="alice", method="tools/call", bound={"name": "t", "arguments": {"a": 1}}, phase="p")
    args.update(kw)
    return s.seal(**args)


def test_round_trip_keeps_phase_values_and_nonce():
    s = sealer()
    opened = s.open(seal(s, values={"files": ["a"]}), principal="alice", method="tools/call",
                    bound={"arguments": {"a": 1}, "name": "t"})  # key order does not matter
    assert (opened.phase, opened.values, opened.nonce) == ("p", {"files": ["a"]}, "n")


@pytest.mark.parametrize("change, message", [
    ({"principal": "bob"}, "another principal"),
    ({"method": "prompts/get"}, "another method"),
    ({"bound": {"name": "t", "arguments": {"a": 2}}}, "arguments"),
])
def test_bindings(change, message):
    s = sealer()
    state = seal(s)
    args = dict(principal="alice", method="tools/call", bound={"name": "t", "arguments": {"a": 1}})
    args.update(change)
    with pytest.raises(McpError, match=message) as err:
        s.open(state, **args)
    assert err.value.code == -32602


def test_expiry_one_second_past_the_deadline():
    now = [NOW]
    s = sealer(clock=lambda: now[0])
    state = seal(s)
    now[0] = NOW + 59
    s.open(state, principal="alice", method="tools/call", bound={"name": "t", "arguments": {"a": 1}})
    now[0] = NOW + 61
    with pytest.raises(McpError, match="expired"):
        s.open(state, principal="alice", method="tools/call", bound={"name": "t", "arguments": {"a": 1}})


@pytest.mark.parametrize("mangle", [
    lambda s: s[:-2] + ("AA" if not s.endswith("AA") else "BB"),
    lambda s: s.split(".")[0] + ".e30." + s.split(".")[2],
    lambda s: "zz." + s.split(".", 1)[1],
    lambda s: "not-a-state",
    lambda s: 42,
])
def test_tampering_is_invalid_params(mangle):
    s = sealer()
    with pytest.raises(McpError) as err:
        s.open(mangle(seal(s)), principal="alice", method="tools/call", bound={"name": "t", "arguments": {"a": 1}})
    assert err.value.code == -32602


def test_rotation_opens_old_states_and_seals_with_the_new_key():
    old = sealer({"k1": b"one"}, "k1")
    state = seal(old)
    rotated = sealer({"k2": b"two", "k1": b"one"}, "k2")
    rotated.open(state, principal="alice", method="tools/call", bound={"name": "t", "arguments": {"a": 1}})
    assert seal(rotated).startswith("k2.")
    retired = sealer({"k2": b"two"}, "k2")
    with pytest.raises(McpError):
        retired.open(state, principal="alice", method="tools/call", bound={"name": "t", "arguments": {"a": 1}})
