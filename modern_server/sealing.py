"""Integrity-protected ``requestState`` (MRTR, basic/patterns/mrtr §Server-side requirements).

A state is ``<kid>.<payload>.<mac>`` (base64url, no padding), MAC = HMAC-SHA256 over ``<kid>.<payload>`` with
the key named by ``kid``. Sealing uses the active key; opening accepts every configured key, so keys rotate by
adding a new active key and keeping the old one until its states expire. The payload binds the principal, the
method, a digest of the original arguments (or uri/name), the flow's phase, its validated intermediate values,
an expiry and a nonce. Anything wrong (tampered, unknown key, expired, other principal, other method, changed
arguments) is -32602, because to the protocol a bad state is a bad parameter. Clients treat it as opaque; the
core is the only reader.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from modern_server.errors import McpError

_SEP = "."


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def canonical_json(value: Any) -> bytes:
    """One byte form per JSON value, so a digest does not depend on the client's key order."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def digest(value: Any) -> str:
    return _b64(hashlib.sha256(canonical_json(value)).digest())


@dataclass(frozen=True, slots=True)
class Opened:
    """The verified contents of a state: what the flow carried from its previous round."""

    phase: str
    values: Mapping[str, Any]
    nonce: str
    expires: float


class Sealer:
    """Seals and opens states with a key ring ``{kid: secret}``; ``clock`` returns epoch seconds."""

    def __init__(self, keys: Mapping[str, bytes], active: str, ttl_seconds: float,
                 clock: Callable[[], float], nonce: Callable[[], str] = lambda: secrets.token_urlsafe(12)) -> None:
        if active not in keys:
            raise ValueError(f"active key {active!r} is not in the key ring")
        self._keys, self._active, self._ttl = dict(keys), active, ttl_seconds
        self._clock, self._nonce = clock, nonce

    def _mac(self, kid: str, payload: str) -> str:
        return _b64(hmac.new(self._keys[kid], f"{kid}{_SEP}{payload}".encode(), hashlib.sha256).digest())

    def seal(self, *, principal: str, method: str, bound: Any, phase: str,
             values: Mapping[str, Any] | None = None, nonce: str | None = None) -> str:
        body = {"p": principal, "m": method, "d": digest(bound), "ph": phase, "v": dict(values or {}),
                "n": nonce or self._nonce(), "exp": self._clock() + self._ttl}
        payload = _b64(canonical_json(body))
        return _SEP.join((self._active, payload, self._mac(self._active, payload)))

    def open(self, state: Any, *, principal: str, method: str, bound: Any) -> Opened:
        body = self._verified(state)
        if body.get("exp", 0) <= self._clock():
            raise McpError.invalid_params("requestState has expired; start the request again")
        if body.get("p") != principal:
            raise McpError.invalid_params("requestState belongs to another principal")
        if body.get("m") != method:
            raise McpError.invalid_params("requestState was issued for another method")
        if body.get("d") != digest(bound):
            raise McpError.invalid_params("requestState does not match this request's arguments")
        return Opened(body["ph"], body["v"], body["n"], body["exp"])

    def _verified(self, state: Any) -> dict[str, Any]:
        parts = state.split(_SEP) if isinstance(state, str) else []
        if len(parts) != 3 or parts[0] not in self._keys:
            raise McpError.invalid_params("requestState is malformed or sealed with an unknown key")
        kid, payload, mac = parts
        if not hmac.compare_digest(mac, self._mac(kid, payload)):
            raise McpError.invalid_params("requestState failed its integrity check")
        try:
            body = json.loads(_unb64(payload))
        except ValueError:
            raise McpError.invalid_params("requestState payload is unreadable") from None
        if not isinstance(body, dict) or not isinstance(body.get("ph"), str):
            raise McpError.invalid_params("requestState payload is unreadable")
        return body
