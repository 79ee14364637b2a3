"""The pure parts of the replica relay (docs/design/replicas.md#replicas-relay-through-the-store): the ownership keys,
what a relayed message is, and where a client's message for an exchange this replica does not hold goes.

Several gateway replicas on one shared store serve the same legacy sessions without sticky routing, but an
exchange (the task running one bridged request) lives in the replica that got the request. The replica that asks
the client records itself as the owner of each id it asks under (:func:`answer_key`) and of the request being
bridged (:func:`request_key`); another replica that gets the client's answer or cancel for it looks the owner up
and passes the message on (:func:`route`). The shell (``gateway.session.relay``) does the I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from adapters.jsonwire import ENCODED_DEPTH, dumps, loads

__all__ = ["Drop", "DropReason", "RelayKind", "RelayTo", "Relayed", "answer_key", "broadcast_channel", "relay_channel",
           "request_key", "route"]



class RelayKind(StrEnum):
    ANSWER = "answer"  # a client's answer to a request the owner's exchange sent it
    CANCEL = "cancel"  # a client's notifications/cancelled for a request the owner is bridging
    END = "end"  # a session ended (DELETE) on some replica: every replica ends its runtime for it
    ACK = "ack"  # the owner's word on a relayed answer or cancel that asked for one: acted on, or not held
    # The reverse bridge (docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge): a 2026
    # client's retry of a call parked on another replica, and that replica's JSON-RPC answer to it, sent back to the
    # replica the client waits on.
    RETRY = "retry"
    REPLY = "reply"


_NO_MESSAGE = (RelayKind.END, RelayKind.ACK)  # the kinds that carry no client message


@dataclass(frozen=True, slots=True)
class Relayed:
    """One message between replicas: its kind, the session, and the client's JSON-RPC message (none for END and
    ACK). An answer or cancel that asks to be acknowledged names the replica to tell (``reply_to``) and a ``token``
    of its own; the ACK carries that token back, and ``held``: whether the owner held the round and acted on it
    (docs/design/replicas.md#replicas-relay-through-the-store)."""

    kind: RelayKind
    session_id: str
    message: Mapping[str, Any] | None = None
    reply_to: str | None = None
    token: str | None = None
    held: bool = False

    def encode(self) -> bytes:
        raw: dict[str, Any] = {"k": self.kind.value, "s": self.session_id, "m": self.message}
        if self.token is not None:
            raw |= {"r": self.reply_to, "t": self.token, "h": self.held}
        return dumps(raw)

    @property
    def wants_ack(self) -> bool:
        """Whether this is an answer or cancel whose sender asked to be told once it is acted on."""
        return self.kind in (RelayKind.ANSWER, RelayKind.CANCEL) and self.reply_to is not None \
            and self.token is not None

    def reply(self, message: Mapping[str, Any]) -> Relayed | None:
        """The answer to this relayed retry, for the replica that sent it (None: it named none)."""
        if self.kind is not RelayKind.RETRY or self.reply_to is None or self.token is None:
            return None
        return Relayed(RelayKind.REPLY, self.session_id, message, self.reply_to, self.token)

    def ack(self, held: bool) -> Relayed | None:
        """The acknowledgement this relayed answer or cancel asked for (None: it asked for none)."""
        if not self.wants_ack:
            return None
        return Relayed(RelayKind.ACK, self.session_id, None, self.reply_to, self.token, held)

    @staticmethod
    def decode(data: bytes | str) -> Relayed | None:
        """The message, or None for anything that is not one (a foreign publisher on the channel)."""
        try:
            raw = loads(data, ENCODED_DEPTH)  # a client message (MAX_DEPTH) in an envelope
            kind = RelayKind(raw["k"])
            session, message = raw.get("s"), raw.get("m")
            reply_to, token, held = raw.get("r"), raw.get("t"), raw.get("h", False)
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        if not isinstance(session, str) or not isinstance(held, bool):
            return None
        if not (isinstance(reply_to, str) and isinstance(token, str)) and (reply_to, token) != (None, None):
            return None
        if not isinstance(message, dict) and not (kind in _NO_MESSAGE and message is None):
            return None
        if kind is RelayKind.ACK and (token is None or message is not None):
            return None
        if kind in (RelayKind.RETRY, RelayKind.REPLY) and token is None:
            return None
        return Relayed(kind, session, message, reply_to, token, held)


def answer_key(gateway_id: Any) -> str | None:
    """The ownership key of a request the gateway sent the client; None for an id the gateway never mints (the
    gateway's ids are strings: ``gateway.session.runtime.random_id``)."""
    return f"oa:{gateway_id}" if isinstance(gateway_id, str) else None


def request_key(session_id: str, downstream_id: str | int) -> str:
    """The ownership key of a client request being bridged; the id as JSON, so ``1`` and ``"1"`` differ."""
    return f"oq:{session_id}:{dumps(downstream_id).decode()}"


def relay_channel(prefix: str, replica: str) -> str:
    return f"{prefix}relay:{replica}"


def broadcast_channel(prefix: str) -> str:
    return f"{prefix}relay-all"  # replica ids are hex, so this never names a replica's channel


class DropReason(StrEnum):
    NO_OWNER = "no_owner"  # never asked, already answered, or its owner's record expired
    OWNED_HERE = "owned_here"  # this replica owns it but no longer holds it: answered or ended meanwhile


@dataclass(frozen=True, slots=True)
class RelayTo:
    owner: str


@dataclass(frozen=True, slots=True)
class Drop:
    reason: DropReason


def route(owner: str | None, me: str) -> RelayTo | Drop:
    """Where a message for an exchange this replica does not hold goes (the caller found it not held here).
    Dropping is what a single gateway does with a late or unknown answer (2025-11-25 basic/utilities
    §Cancellation: a late answer or cancel is a race the receiver ignores)."""
    if owner is None:
        return Drop(DropReason.NO_OWNER)
    if owner == me:
        return Drop(DropReason.OWNED_HERE)
    return RelayTo(owner)
