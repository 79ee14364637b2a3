"""The reverse bridge's requestState sealer: a token is accepted only as it was minted, byte for byte."""

from __future__ import annotations

import base64

from gateway.http.reverse import Sealer


def test_a_token_is_opened_only_in_its_own_spelling() -> None:
    sealer = Sealer(b"k" * 32)
    token = sealer.seal_bytes(b"claims", b"aad")
    assert sealer.open_bytes(token, b"aad") == b"claims"
    raw = base64.urlsafe_b64decode(token)
    # Same decoded bytes, another spelling: padding dropped or a last character's spare bits set.
    respelled = {token.rstrip("="), *(token[:i] + c + token[i + 1:] for i in (len(token.rstrip("=")) - 1,)
                                      for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")}
    for other in respelled - {token}:
        try:
            same = base64.urlsafe_b64decode(other + "=" * (-len(other) % 4)) == raw
        except ValueError:
            same = False
        if same:
            assert sealer.open_bytes(other, b"aad") is None, other
    assert sealer.open_bytes(token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1], b"aad") is None
